"""What the harness's own pytest costs per grade, against the unguarded form, in the same run.

One sample task (t_11_fix_off_by_one, three hidden tests, the reference solution) graded in
bubblewrap with its oracle in both forms, interleaved: `python -m pytest -q -p
no:cacheprovider test_oracle_window.py` (the form sealbench generated before, unguarded) and
`sealbench-pytest -q test_oracle_window.py` (python -P -s pytest_guard.py: audit hook,
snapshot, conftest filter, end checks, record, report outside the grading copy, and the
runner reading both back). A third form, the unguarded one with plugin autoload off, separates what the guard costs
from what autoload costs (it imports every installed pytest plugin). Prints the median wall
milliseconds per grade (setup and read-back included) and the oracle's median CPU
milliseconds measured inside the sandbox, which a loaded machine inflates far less.
Run: .venv/bin/python benchmarks/bench_pytest_guard.py [--rounds N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import SAMPLE

from sealbench import pytest_oracle
from sealbench.sandbox import SandboxSpec, open_sandbox

TASK = SAMPLE / "tasks" / "t_11_fix_off_by_one"
OLD = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_oracle_window.py"]
NEW = ["sealbench-pytest", "-q", "test_oracle_window.py"]
ENV = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": "/tmp/home", "LANG": "C.UTF-8",
       "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


def grading_copy(root: Path) -> Path:
    grade = root / "grade"
    shutil.copytree(TASK / "workspace", grade)
    shutil.copytree(TASK / "solution", grade, dirs_exist_ok=True)
    shutil.copytree(TASK / "hidden", grade, dirs_exist_ok=True)
    return grade


# The oracle's own CPU time, measured inside the sandbox (its processes are not reaped by
# this one, so their time never reaches RUSAGE_CHILDREN here): a small parent runs it.
CPU_WRAPPER = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
               "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
               "sys.stderr.write(f'\\nCPU {u.ru_utime + u.ru_stime}\\n'); sys.exit(rc)")


def cpu_of(stderr: bytes | None) -> float:
    line = (stderr or b"").decode(errors="replace").rstrip().rsplit("\n", 1)[-1]
    return float(line.split()[1]) if line.startswith("CPU ") else float("nan")


def grade_once(root: Path, guarded: bool, autoload: bool = True) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the sandboxed processes) of one grade."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    t0 = time.perf_counter()
    grade = grading_copy(root)
    box = open_sandbox("bubblewrap")
    if guarded:
        oracle = pytest_oracle.prepare(root / "private", NEW, ["test_oracle_window.py"])
        spec = SandboxSpec(argv=("python", "-c", CPU_WRAPPER, *oracle.argv), workdir=grade,
                           env={**ENV, **oracle.env}, timeout_s=60,
                           stdout_path=None, stderr_path=None, readonly_paths=oracle.readonly,
                           writable_paths=oracle.writable)
        res = box.run(spec)
        verdict = pytest_oracle.read_verdict(oracle, [], res.exit_code)
        ok = res.exit_code == 0 and verdict.junit["ok"] and not verdict.flags
    else:
        env = ENV if autoload else {**ENV, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        res = box.run(SandboxSpec(argv=("python", "-c", CPU_WRAPPER, *OLD), workdir=grade, env=env, timeout_s=60,
                                  stdout_path=None, stderr_path=None))
        ok = res.exit_code == 0
    seconds, cpu = time.perf_counter() - t0, cpu_of(res.stderr)
    if not ok:
        raise SystemExit(f"the reference did not pass ({'guarded' if guarded else 'unguarded'}): {res}")
    return seconds, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    open_sandbox("bubblewrap")
    old: list[tuple[float, float]] = []
    bare: list[tuple[float, float]] = []
    new: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-guard-") as tmp:
        grade_once(Path(tmp) / "warm", False)
        grade_once(Path(tmp) / "warm", True)
        for i in range(args.rounds):
            # Interleaved, so that a slower moment of a shared machine hits all three.
            old.append(grade_once(Path(tmp) / f"old-{i}", False))
            bare.append(grade_once(Path(tmp) / f"bare-{i}", False, autoload=False))
            new.append(grade_once(Path(tmp) / f"new-{i}", True))
    print(f"rounds: {args.rounds}, one grade of t_11_fix_off_by_one (3 tests) in bubblewrap, "
          f"{len(list(Path(sys.prefix).glob('lib/python*/site-packages/*.dist-info')))} distributions installed")

    def median(values: list[tuple[float, float]], i: int) -> float:
        return statistics.median(v[i] for v in values)

    def line(label: str, values: list[tuple[float, float]]) -> None:
        walls = [v[0] for v in values]
        print(f"{label:<40}: wall median {median(values, 0) * 1000:5.0f} ms (min {min(walls) * 1000:.0f}, "
              f"max {max(walls) * 1000:.0f}); CPU median {median(values, 1) * 1000:4.0f} ms")

    line("python -m pytest (unguarded, as before)", old)
    line("python -m pytest, plugin autoload off", bare)
    line("sealbench-pytest (guarded)", new)
    for i, what in ((1, "CPU"), (0, "wall")):
        mb, mn, mo = median(bare, i), median(new, i), median(old, i)
        print(f"{what}: the guard's own cost (guarded - autoload off) {(mn - mb) * 1000:+.0f} ms per grade "
              f"({mn / mb:.2f}x); guarded - unguarded {(mn - mo) * 1000:+.0f} ms")


if __name__ == "__main__":
    main()
