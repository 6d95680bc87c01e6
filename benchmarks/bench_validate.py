"""Issue 6 target: validating HumanEval at --jobs 2 against a bare loop, timed in the same run.

The bare loop runs, one after another in plain subprocesses, the same programs validation
grades: each task's oracle on its reference solution, on its unchanged workspace, and on
each trivial solution (sealbench.trivial: the stub returning None, its first argument, a
constant of the type the reference returned). sealbench runs them with --repeat 1 (one grade
of each kind per task) at --jobs 2, each in its own pristine copy inside the sandbox.
Target: under 2x the bare loop.
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


def bare_loop(pack_dir: Path, scratch: Path) -> tuple[float, float, int]:
    """Seconds for the reference and empty-change programs, for the trivial ones, and the count."""
    from sealbench.function_oracle import is_oracle_cmd, parse_summary
    from sealbench.pack import load_pack
    from sealbench.trivial import trivial_candidates

    pack = load_pack(pack_dir)
    programs = 0
    both = trivial_s = 0.0
    for task in pack.tasks.values():
        argv = [sys.executable if a == "python" else a for a in task.record.oracle_cmd]

        def grade(files: dict[str, str] | None, with_solution: bool, task=task, argv=argv) -> bytes:
            work = scratch / task.task_id
            shutil.copytree(task.workspace, work)
            if with_solution:
                shutil.copytree(task.solution, work, dirs_exist_ok=True)
            for rel, text in (files or {}).items():
                (work / rel).write_text(text)
            shutil.copytree(task.hidden, work, dirs_exist_ok=True)
            out = subprocess.run(argv, cwd=work, capture_output=True, timeout=task.record.wall_clock_s).stdout
            shutil.rmtree(work)
            return out

        t0 = time.perf_counter()
        summary = parse_summary(grade(None, True)) or {}
        grade(None, False)
        t1 = time.perf_counter()
        texts = {p.relative_to(task.solution).as_posix(): (task.workspace / p.relative_to(task.solution)).read_text()
                 for p in task.solution.rglob("*.py") if (task.workspace / p.relative_to(task.solution)).is_file()}
        trivial = trivial_candidates(texts, function_level=is_oracle_cmd(task.record.oracle_cmd),
                                     returned=summary.get("returned", {}))
        for cand in trivial:
            grade(cand.files, False)
        both += t1 - t0
        trivial_s += time.perf_counter() - t1
        programs += 2 + len(trivial)
    return both, trivial_s, programs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT / ".cache" / "data" / "HumanEval.jsonl.gz")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        check(measure([SEALBENCH, "import", "humaneval", str(args.data), "-o", str(root / "he")]), "import")
        print("bench_validate: HumanEval, reference, empty change and trivial solutions per task")
        (root / "bare").mkdir()
        both, trivial, programs = bare_loop(root / "he", root / "bare")
        bare = both + trivial
        row(f"bare loop: {programs} oracle programs (reference, empty change, trivial), sequential",
            f"{bare:.1f} s ({trivial:.1f} s of it trivial solutions)")
        m = check(measure([SEALBENCH, "pack", "validate", str(root / "he"), "--repeat", "1", "--jobs", "2",
                           "--no-progress"]), "validate")
        row("sealbench pack validate --repeat 1 --jobs 2", f"{m.seconds:.1f} s = {m.seconds / bare:.2f}x (target < 2x)")
        m3 = check(measure([SEALBENCH, "pack", "validate", str(root / "he"), "--jobs", "2", "--no-progress"]),
                   "validate")
        row("sealbench pack validate (default --repeat 3) --jobs 2",
            f"{m3.seconds:.1f} s = {m3.seconds / (3 * both + trivial):.2f}x a bare loop doing the same "
            "(reference and empty change 3 times, trivial solutions once)")


if __name__ == "__main__":
    main()
