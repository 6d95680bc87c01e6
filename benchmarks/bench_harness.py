"""Issue 3 target: harness overhead per attempt, against bare subprocesses timed in the same run.

200 one-attempt tasks, agent `true`, oracle `python -c pass`; the floor is 200 bare
`python -c pass` subprocesses run one after another. Targets: at most 1.5x the floor and at
most 15 ms of harness time per attempt. Because `true` changes nothing, sealbench records an
abstain and never runs the oracle; a second run uses an agent that edits a file so every
attempt is graded too (agent and oracle both in the sandbox), against a floor of two bare
subprocesses per task.
Run: .venv/bin/python benchmarks/bench_harness.py [--tasks N] [--jobs J]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import SEALBENCH, check, lock_contract, measure, private_runs_index, row, write_pack


def floor(n: int, argv: list[str], per_task: int = 1) -> float:
    t0 = time.perf_counter()
    for _ in range(n * per_task):
        subprocess.run(argv, check=True)
    return time.perf_counter() - t0


def run(contract: Path, out: Path, jobs: int) -> float:
    m = check(measure([SEALBENCH, "run", str(contract), "--out", str(out), "--no-progress", "--jobs", str(jobs)]),
              "run")
    return m.seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=None, help="also measure at this --jobs (default: the CLI default)")
    args = ap.parse_args()
    n = args.tasks
    from sealbench.runner import default_jobs

    jobs_default = args.jobs or default_jobs()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        pack = write_pack(root / "pack", n, oracle=["python", "-c", "pass"])
        check(measure([SEALBENCH, "pack", "seal", str(pack)]), "seal")
        print(f"bench_harness: {n} one-attempt tasks, oracle python -c pass")
        bare = floor(n, [sys.executable, "-c", "pass"])
        row(f"floor: {n} x bare `python -c pass`", f"{bare:.2f} s ({bare / n * 1000:.1f} ms each)")
        for jobs in sorted({1, jobs_default}):
            # One run per locked run_id: each measured run has a contract of its own.
            contract = root / f"true-j{jobs}.json"
            lock_contract(pack, contract, f"bench-true-j{jobs}", "true")
            t = run(contract, root / f"true-j{jobs}", jobs)
            per = (t - bare) / n * 1000
            row(f"agent `true` (abstain, no oracle), --jobs {jobs}",
                f"{t:.2f} s = {t / bare:.2f}x floor, harness {per:+.1f} ms/attempt (targets 1.5x, 15 ms)")
        bare2 = floor(n, [sys.executable, "-c", "pass"], per_task=2)
        row(f"floor: {2 * n} x bare `python -c pass` (agent + oracle)", f"{bare2:.2f} s")
        for jobs in sorted({1, jobs_default}):
            contract = root / f"edit-j{jobs}.json"
            lock_contract(pack, contract, f"bench-edit-j{jobs}", "sh -c 'echo \"VALUE = 0\" >> mod.py'")
            t = run(contract, root / f"edit-j{jobs}", jobs)
            per = (t - bare2) / n * 1000
            row(f"agent edits a file, graded by the oracle, --jobs {jobs}",
                f"{t:.2f} s = {t / bare2:.2f}x floor, harness {per:+.1f} ms/attempt")


if __name__ == "__main__":
    main()
