"""Issue 3 target: harness overhead per attempt, against bare subprocesses timed in the same run.

200 one-attempt tasks, agent `true`, oracle `python -c pass`; the floor is 200 bare
`python -c pass` subprocesses run one after another. Targets: at most 1.5x the floor and at
most 15 ms of harness time per attempt. Because `true` changes nothing, sealbench records an
abstain and never runs the oracle; a second run uses an agent that edits a file so every
attempt is graded too (agent and oracle both in the sandbox), against a floor of two bare
subprocesses per task. Every configuration runs --runs times, each time right after its own
floor, under a contract locked for that run.
Run: .venv/bin/python benchmarks/bench_harness.py [--tasks N] [--jobs J] [--runs R]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _common import (
    SEALBENCH,
    Target,
    bare_loop,
    check,
    figure,
    lock_contract,
    measure,
    private_runs_index,
    runs_argument,
    seconds,
    signed_ms,
    times,
    write_pack,
)

AGENTS = {
    "true": ("agent `true` (abstain, no oracle)", "true", 1),
    "edit": ("agent edits a file, graded by the oracle", "sh -c 'echo \"VALUE = 0\" >> mod.py'", 2),
}


def run(contract: Path, out: Path, jobs: int) -> float:
    m = check(measure([SEALBENCH, "run", str(contract), "--out", str(out), "--no-progress", "--jobs", str(jobs)]),
              "run")
    return m.seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=None, help="also measure at this --jobs (default: the CLI default)")
    ap.add_argument("--runs", type=runs_argument, default=3)
    args = ap.parse_args()
    n = args.tasks
    from sealbench.runner import default_jobs

    jobs_default = args.jobs or default_jobs()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        pack = write_pack(root / "pack", n, oracle=["python", "-c", "pass"])
        check(measure([SEALBENCH, "pack", "seal", str(pack)]), "seal")
        print(f"bench_harness: {n} one-attempt tasks, oracle python -c pass, {args.runs} runs of each line")
        for key, (label, agent, per_task) in AGENTS.items():
            floors: list[float] = []
            walls: dict[int, list[float]] = {}
            for r in range(args.runs):
                floors.append(bare_loop(n * per_task, [sys.executable, "-c", "pass"]))
                for jobs in sorted({1, jobs_default}):
                    contract = root / f"{key}-j{jobs}-{r}.json"
                    lock_contract(pack, contract, f"bench-{key}-j{jobs}-{r}", agent)
                    walls.setdefault(jobs, []).append(run(contract, root / f"{key}-j{jobs}-{r}", jobs))
            figure(f"floor: {n * per_task} x bare `python -c pass`", floors, seconds)
            for jobs, values in walls.items():
                ratios = [w / f for w, f in zip(values, floors, strict=True)]
                per_attempt = [(w - f) / n for w, f in zip(values, floors, strict=True)]
                print(f"  {label}, --jobs {jobs}")
                figure("    wall time", values, seconds)
                figure("    against the floor of the same run", ratios, times,
                       Target(1.5, "<= 1.5x", strict=False) if key == "true" else None)
                figure("    harness time per attempt", [p * 1000 for p in per_attempt],
                       signed_ms, Target(15, "<= 15 ms", strict=False) if key == "true" else None)


if __name__ == "__main__":
    main()
