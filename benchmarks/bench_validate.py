"""Issue 6 target: validating HumanEval at --jobs 2 against a bare loop, timed in the same run.

The bare loop runs, one after another in plain subprocesses, the same programs validation
grades: each task's oracle on its reference solution and on its unchanged workspace. sealbench
runs them with --repeat 1 (one grade of each kind per task) at --jobs 2, each in its own
pristine copy inside the sandbox. Target: under 2x the bare loop.
Run: .venv/bin/python benchmarks/bench_validate.py [--data PATH]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, SEALBENCH, check, measure, row


def bare_loop(pack_dir: Path, scratch: Path) -> float:
    from sealbench.pack import load_pack

    pack = load_pack(pack_dir)
    t0 = time.perf_counter()
    for task in pack.tasks.values():
        for with_solution in (True, False):
            work = scratch / f"{task.task_id}-{with_solution}"
            shutil.copytree(task.workspace, work)
            if with_solution:
                shutil.copytree(task.solution, work, dirs_exist_ok=True)
            shutil.copytree(task.hidden, work, dirs_exist_ok=True)
            argv = [sys.executable if a == "python" else a for a in task.record.oracle_cmd]
            subprocess.run(argv, cwd=work, capture_output=True, timeout=task.record.wall_clock_s)
            shutil.rmtree(work)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT / ".cache" / "data" / "HumanEval.jsonl.gz")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        check(measure([SEALBENCH, "import", "humaneval", str(args.data), "-o", str(root / "he")]), "import")
        print("bench_validate: HumanEval, reference + empty change per task")
        bare = bare_loop(root / "he", root / "bare")
        row("bare loop: 2 x 163 oracle programs, sequential", f"{bare:.1f} s")
        m = check(measure([SEALBENCH, "pack", "validate", str(root / "he"), "--repeat", "1", "--jobs", "2",
                           "--no-progress"]), "validate")
        row("sealbench pack validate --repeat 1 --jobs 2", f"{m.seconds:.1f} s = {m.seconds / bare:.2f}x (target < 2x)")
        m3 = check(measure([SEALBENCH, "pack", "validate", str(root / "he"), "--jobs", "2", "--no-progress"]),
                   "validate")
        row("sealbench pack validate (default --repeat 3) --jobs 2",
            f"{m3.seconds:.1f} s = {m3.seconds / (3 * bare):.2f}x three bare loops")


if __name__ == "__main__":
    main()
