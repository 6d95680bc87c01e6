"""Shared helpers for the benchmark scripts: timing real processes and their peak memory, and
printing each figure as the median and range of several runs beside its floor.

Every figure is measured ``--runs`` times (at least 3); each run measures its floor too, right
before the figure itself, so a ratio compares the two under the same load. A target is "met"
when the median meets it, "MISSED" otherwise, with how many single runs met it.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "sealbench" / "examples" / "sample_pack"
SEALBENCH = str(Path(sys.executable).parent / "sealbench")

# Every benchmark's runs go to an index of its own, removed at exit: a benchmark never records
# runs in the user's index, and a run_id a benchmark locked before never refuses it again.
_INDEX = tempfile.mkdtemp(prefix="sealbench-bench-index-")
os.environ["SEALBENCH_DATA_DIR"] = _INDEX
atexit.register(shutil.rmtree, _INDEX, ignore_errors=True)


@dataclass
class Measured:
    seconds: float
    peak_mb: float
    returncode: int
    stdout: bytes


def measure(argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> Measured:
    """Run a command to completion; wall time and the child's peak resident memory (ru_maxrss)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t0
    return Measured(seconds, usage.ru_maxrss / 1024, proc.returncode, out)


def floor_seconds(tries: int = 5) -> float:
    """A bare ``python -c pass``: the best of a few, so one slow start does not count."""
    return min(measure([sys.executable, "-c", "pass"]).seconds for _ in range(tries))


def bare_loop(n: int, argv: Sequence[str], jobs: int = 1) -> float:
    """Seconds to run ``argv`` ``n`` times as plain subprocesses, ``jobs`` at a time."""
    t0 = time.perf_counter()
    if jobs == 1:
        for _ in range(n):
            subprocess.run(list(argv), check=True)
    else:
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(lambda _: subprocess.run(list(argv), check=True), range(n)))
    return time.perf_counter() - t0


MIN_RUNS = 3


def runs_argument(value: str) -> int:
    """``--runs``: at least three, or no median and range worth printing."""
    runs = int(value)
    if runs < MIN_RUNS:
        raise ValueError(f"--runs must be at least {MIN_RUNS}")
    return runs


@dataclass(frozen=True)
class Target:
    """A published target: ``bound`` in the unit of the values, ``text`` as the README states it."""

    bound: float
    text: str
    strict: bool = True

    def met(self, value: float) -> bool:
        return value < self.bound if self.strict else value <= self.bound


def seconds(v: float) -> str:
    return f"{v:.2f} s"


def millis(v: float) -> str:
    return f"{v * 1000:.0f} ms"


def megabytes(v: float) -> str:
    return f"{v:.0f} MB"


def times(v: float) -> str:
    return f"{v:.2f}x"


def signed_ms(v: float) -> str:
    return f"{v:+.1f} ms"


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """"<median> (runs <lo> to <hi>, n=<n>)"."""
    return f"{fmt(statistics.median(values))} (runs {fmt(min(values))} to {fmt(max(values))}, n={len(values)})"


def verdict(values: Sequence[float], target: Target) -> str:
    within = sum(target.met(v) for v in values)
    status = "met" if target.met(statistics.median(values)) else "MISSED"
    return f"target {target.text}: {status} ({within} of {len(values)} runs within)"


def figure(label: str, values: Sequence[float], fmt: Callable[[float], str], target: Target | None = None) -> None:
    """One line: the median and range of ``values``, and the target's verdict when there is one."""
    row(label, spread(values, fmt) + (f"; {verdict(values, target)}" if target else ""))


def check(m: Measured, what: str) -> Measured:
    if m.returncode != 0:
        sys.stderr.write(m.stdout.decode(errors="replace")[-3000:])
        raise SystemExit(f"{what} failed with exit {m.returncode}")
    return m


def write_pack(root: Path, n: int, *, oracle: list[str], wall_clock_s: float = 60, name: str = "bench") -> Path:
    """An n-task pack whose tasks are tiny and alike (one workspace file, one hidden file)."""
    if root.exists():
        shutil.rmtree(root)
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "t.txt").write_text("{task_prompt}\n{feedback}\n")
    (root / "pack.json").write_text(json.dumps({"pack_version": 1, "name": name}))
    for i in range(n):
        d = root / "tasks" / f"task-{i:05d}"
        (d / "workspace").mkdir(parents=True)
        (d / "hidden").mkdir()
        (d / "workspace" / "mod.py").write_text(f"VALUE = {i}\n")
        (d / "hidden" / "check_value.py").write_text(f"import mod\nassert mod.VALUE == {i + 1}, 'value is wrong'\n")
        (d / "prompt.md").write_text(f"Make VALUE in mod.py equal to {i + 1}.\n")
        (d / "task.json").write_text(json.dumps({
            "task_id": f"task-{i:05d}", "prompt_template_id": "t", "oracle_cmd": oracle,
            "hidden_tests_sha256": "pending-local-hash", "max_attempts": 1, "wall_clock_s": wall_clock_s,
            "language": "python"}))
    return root


def lock_contract(pack: Path, contract: Path, run_id: str, agent: str, jobs_note: str = "") -> None:
    check(measure([SEALBENCH, "contract", "new", str(pack), "-o", str(contract), "--host", "benchmark machine",
                   "--agent-label", "bench", "--agent", agent, "--oracle-validity-unavailable",
                   "--no-narration-probe", "--force"]), "contract new")
    check(measure([SEALBENCH, "contract", "lock", str(contract), "--run-id", run_id]), "contract lock")


def private_runs_index(root: Path) -> None:
    """Record the benchmark's runs in an index under ``root``, never in the user's data directory."""
    os.environ["SEALBENCH_DATA_DIR"] = str(root / "runs-index")


def row(label: str, value: str) -> None:
    print(f"  {label:<58} {value}", flush=True)
