"""Issue 2 targets: a 10,000-task pack and events file; pack check, contract lock, score, --help.

Targets on a 2-core machine: score < 1 s, pack check < 15 s, each < 300 MB peak memory,
`sealbench --help` < 0.3 s. The floor measured in the same run is `python -c pass`.
Run: .venv/bin/python benchmarks/bench_core.py [--tasks N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import SEALBENCH, check, floor_seconds, measure, row, write_pack


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        print(f"bench_core: {args.tasks} tasks")
        floor = floor_seconds()
        row("floor: python -c pass (best of 5)", f"{floor * 1000:.0f} ms")
        helps = [check(measure([SEALBENCH, "--help"]), "--help") for _ in range(5)]
        best = min(h.seconds for h in helps)
        row("sealbench --help (best of 5)", f"{best * 1000:.0f} ms = {best / floor:.1f}x floor (target < 300 ms)")
        pack = write_pack(root / "pack", args.tasks, oracle=["python", "check_value.py"])
        m = check(measure([SEALBENCH, "pack", "seal", str(pack)]), "pack seal")
        row("pack seal", f"{m.seconds:.2f} s, peak {m.peak_mb:.0f} MB")
        m = check(measure([SEALBENCH, "pack", "check", str(pack)]), "pack check")
        row("pack check", f"{m.seconds:.2f} s, peak {m.peak_mb:.0f} MB (target < 15 s, < 300 MB)")
        contract = root / "contract.json"
        check(measure([SEALBENCH, "contract", "new", str(pack), "-o", str(contract), "--host", "benchmark",
                       "--agent-label", "b", "--agent", "true", "--oracle-validity-unavailable"]), "new")
        m = check(measure([SEALBENCH, "contract", "lock", str(contract), "--run-id", "bench"]), "lock")
        row("contract lock (includes pack check)", f"{m.seconds:.2f} s, peak {m.peak_mb:.0f} MB")
        events = [{"task_id": f"task-{i:05d}", "task_pass": i % 3 == 0, "abstain": False, "wall_seconds": 1.0}
                  for i in range(args.tasks)]
        (root / "events.json").write_text(json.dumps(events))
        m = check(measure([SEALBENCH, "score", str(contract), str(root / "events.json")]), "score")
        rate = json.loads(m.stdout)
        row("score", f"{m.seconds:.2f} s, peak {m.peak_mb:.0f} MB (target < 1 s, < 300 MB); "
            f"{rate['task_pass_count']} of {rate['n']}")


if __name__ == "__main__":
    main()
