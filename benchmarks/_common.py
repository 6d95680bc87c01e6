"""Shared helpers for the benchmark scripts: timing real processes and their peak memory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "sealbench" / "examples" / "sample_pack"
SEALBENCH = str(Path(sys.executable).parent / "sealbench")


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
    """The floor every figure is compared with: the best of a few bare `python -c pass`."""
    return min(measure([sys.executable, "-c", "pass"]).seconds for _ in range(tries))


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
