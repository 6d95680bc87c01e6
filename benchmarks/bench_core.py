"""Issue 2 targets: a 10,000-task pack and events file; pack check, contract lock, score, --help.

Targets on a 2-core machine: score < 1 s, pack check < 15 s, each < 300 MB peak memory,
`sealbench --help` < 0.3 s. The floor, timed in every run, is `python -c pass` (the best of 5
right before each measurement). Each run writes a fresh pack, so `pack seal` always has the
same work to do.
Run: .venv/bin/python benchmarks/bench_core.py [--tasks N] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import (
    SEALBENCH,
    Target,
    check,
    figure,
    floor_seconds,
    measure,
    megabytes,
    millis,
    runs_argument,
    seconds,
    times,
    write_pack,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--runs", type=runs_argument, default=3)
    args = ap.parse_args()
    print(f"bench_core: {args.tasks} tasks, {args.runs} runs of everything")
    floors, helps = [], []
    for _ in range(max(5, args.runs)):
        floors.append(floor_seconds())
        helps.append(min(check(measure([SEALBENCH, "--help"]), "--help").seconds for _ in range(5)))
    figure("floor: python -c pass (best of 5)", floors, millis)
    figure("sealbench --help (best of 5)", helps, millis, Target(0.3, "< 300 ms"))
    figure("  --help against the floor of the same run", [h / f for h, f in zip(helps, floors, strict=True)], times)
    got: dict[str, list[float]] = {}
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
            root = Path(tmp)
            pack = write_pack(root / "pack", args.tasks, oracle=["python", "check_value.py"])
            got.setdefault("floor", []).append(floor_seconds())
            for name, argv in [("seal", [SEALBENCH, "pack", "seal", str(pack)]),
                               ("check", [SEALBENCH, "pack", "check", str(pack)])]:
                m = check(measure(argv), f"pack {name}")
                got.setdefault(name, []).append(m.seconds)
                got.setdefault(f"{name} MB", []).append(m.peak_mb)
            contract = root / "contract.json"
            check(measure([SEALBENCH, "contract", "new", str(pack), "-o", str(contract), "--host", "benchmark",
                           "--agent-label", "b", "--agent", "true", "--oracle-validity-unavailable"]), "new")
            m = check(measure([SEALBENCH, "contract", "lock", str(contract), "--run-id", f"bench-{run}"]), "lock")
            got.setdefault("lock", []).append(m.seconds)
            got.setdefault("lock MB", []).append(m.peak_mb)
            events = [{"task_id": f"task-{i:05d}", "task_pass": i % 3 == 0, "abstain": False, "wall_seconds": 1.0}
                      for i in range(args.tasks)]
            (root / "events.json").write_text(json.dumps(events))
            m = check(measure([SEALBENCH, "score", str(contract), str(root / "events.json"), "--json"]), "score")
            rate = json.loads(m.stdout)
            assert (rate["task_pass_count"], rate["n"]) == ((args.tasks + 2) // 3, args.tasks)
            got.setdefault("score", []).append(m.seconds)
            got.setdefault("score MB", []).append(m.peak_mb)
    figure("floor: python -c pass (best of 5), in each run", got["floor"], millis)
    figure("pack seal", got["seal"], seconds)
    figure("  peak memory", got["seal MB"], megabytes)
    figure("pack check", got["check"], seconds, Target(15, "< 15 s"))
    figure("  peak memory", got["check MB"], megabytes, Target(300, "< 300 MB"))
    figure("contract lock (includes a pack check)", got["lock"], seconds)
    figure("  peak memory", got["lock MB"], megabytes, Target(300, "< 300 MB"))
    figure("score", got["score"], seconds, Target(1, "< 1 s"))
    figure("  peak memory", got["score MB"], megabytes, Target(300, "< 300 MB"))
    figure("  score against the floor of the same run", [s / f for s, f in zip(got["score"], got["floor"], strict=True)],
           times)


if __name__ == "__main__":
    main()
