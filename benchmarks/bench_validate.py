"""Issue 6 target: validating HumanEval at --jobs 2 against a bare loop, timed in the same run.

The bare loop (the floor) runs, one after another in plain subprocesses, the same programs
validation grades: each task's oracle on its reference solution and on its unchanged
workspace. sealbench runs them with --repeat 1 (one grade of each kind per task) at --jobs 2,
each in its own pristine copy inside the sandbox. Target: under 2x the bare loop. The default
--repeat 3 is timed too, against three bare loops. Each run times its own floor first.
Run: .venv/bin/python benchmarks/bench_validate.py [--data PATH] [--runs R]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, SEALBENCH, Target, check, figure, measure, runs_argument, seconds, times


def bare_loop(pack_dir: Path, scratch: Path) -> float:
    from sealbench.pack import load_pack

    pack = load_pack(pack_dir)
    t0 = time.perf_counter()
    for task in pack.tasks.values():
        for with_solution in (True, False):
            work = scratch / f"{task.task_id}-{with_solution}"
            shutil.copytree(task.pack_workspace, work)
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
    ap.add_argument("--runs", type=runs_argument, default=3)
    args = ap.parse_args()
    floors: list[float] = []
    ones: list[float] = []
    threes: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        check(measure([SEALBENCH, "import", "humaneval", str(args.data), "-o", str(root / "he")]), "import")
        from sealbench.pack import load_pack

        count = len(load_pack(root / "he").tasks)
        print(f"bench_validate: HumanEval ({count} tasks), reference + empty change per task, {args.runs} runs")
        for r in range(args.runs):
            floors.append(bare_loop(root / "he", root / f"bare-{r}"))
            for repeat, into in (("1", ones), ("3", threes)):
                pack = root / f"he-{r}-{repeat}"
                shutil.copytree(root / "he", pack)
                m = check(measure([SEALBENCH, "pack", "validate", str(pack), "--repeat", repeat, "--jobs", "2",
                                   "--no-progress"]), "validate")
                into.append(m.seconds)
    figure(f"floor: bare loop, 2 x {count} oracle programs, sequential", floors, seconds)
    figure("pack validate --repeat 1 --jobs 2", ones, seconds)
    figure("  against the floor of the same run", [o / f for o, f in zip(ones, floors, strict=True)], times,
           Target(2, "< 2x"))
    figure("pack validate (default --repeat 3) --jobs 2", threes, seconds)
    figure("  against three floors of the same run", [t / (3 * f) for t, f in zip(threes, floors, strict=True)], times)


if __name__ == "__main__":
    main()
