"""No agent outlives its runner: SIGKILL, SIGTERM, whole-group kills, with sandboxes held ahead.

Black-box: each agent appends a timestamp to a file in its workspace every few milliseconds
(``--keep-work`` keeps the workspaces), the runner is stopped, and no file may grow once the
runner is gone. Sandboxes set up ahead of their turn (``--jobs`` N runs N agents and holds N
+ 1 more) must never start at all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import make_contract, needs_bwrap, task_ids
from sealbench.journal import read_chain
from sealbench.runner import RunOptions, execute
from test_resume import check_run

TICKER = "sh -c 'while :; do date +%s%N >> ticks; sleep 0.02; done'"
# A child of the agent ticks too: it must die with the agent's runner like the agent itself.
TICKER_WITH_CHILD = ("sh -c '(while :; do date +%s%N >> child-ticks; sleep 0.02; done) & "
                     "while :; do date +%s%N >> ticks; sleep 0.02; done'")


def sealbench_exe() -> str:
    exe = Path(sys.executable).parent / "sealbench"
    return str(exe) if exe.exists() else ""


needs_exe = pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")


def start_run(contract: Path, run_dir: Path, *extra: str, resume: bool = False) -> subprocess.Popen[str]:
    where = ["--resume", str(run_dir)] if resume else ["--out", str(run_dir)]
    return subprocess.Popen([sealbench_exe(), "run", str(contract), *where, "--no-progress", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def tick_files(run_dir: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in sorted((run_dir / "work").glob("*/ws/*ticks"))}


def held_sandboxes(run_dir: Path) -> int:
    """bwrap monitors whose workdir is in this run: running and held ahead alike."""
    needle = str(run_dir / "work").encode()
    count = 0
    with os.scandir("/proc") as listing:
        for entry in listing:
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    argv = Path("/proc", entry.name, "cmdline").read_bytes().split(b"\0")
                    if argv[0].endswith(b"bwrap") and any(needle in a for a in argv):
                        count += 1
    return count


def processes_of(run_dir: Path) -> list[int]:
    """Live processes whose command line or environment names this run directory."""
    needle = str(run_dir).encode()
    found = []
    with os.scandir("/proc") as listing:
        for entry in listing:
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                with contextlib.suppress(OSError):
                    status = Path("/proc", entry.name, "stat").read_text().rsplit(")", 1)[1].split()
                    if status[0] == "Z":
                        continue
                    blob = Path("/proc", entry.name, "cmdline").read_bytes() + Path("/proc", entry.name, "environ").read_bytes()
                    if needle in blob:
                        found.append(int(entry.name))
    return found


def wait_until(what: str, ok: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def assert_nothing_written_after_the_runner_died(run_dir: Path) -> dict[Path, int]:
    """Once the runner is gone (and the kernel and the reaper have had a moment to kill what
    it ran), no agent writes again and no process of the run is left."""
    time.sleep(0.2)
    sizes = tick_files(run_dir)
    time.sleep(1.0)  # fifty ticks' worth: a survivor would have written by now
    after = tick_files(run_dir)
    assert after == sizes, {str(p): (sizes.get(p), n) for p, n in after.items() if sizes.get(p) != n}
    assert processes_of(run_dir) == []
    return sizes


def ticking_run(sealed_pack: Path, tmp_path: Path, name: str, command: str = TICKER,
                *extra: str) -> tuple[Path, Path, subprocess.Popen[str]]:
    """A run of every sample task at --jobs 2: two agents ticking, and sandboxes held ahead.

    The ticks are watched in the host's workspaces while the agents run: with the disk quota
    they would be written into each sandbox's own tmpfs and reach the host only after the
    attempt, so these runs bind the workspaces (--no-workspace-quota)."""
    contract = tmp_path / f"{name}.json"
    make_contract(sealed_pack, contract, task_ids=task_ids(sealed_pack), command=command, run_id=name,
                  wall_clock_s=6.0, max_attempts=1)
    run_dir = tmp_path / name
    proc = start_run(contract, run_dir, "--jobs", "2", "--keep-work", "--no-workspace-quota", *extra)
    return contract, run_dir, proc


@needs_bwrap
@needs_exe
def test_sigkill_of_the_runner_starts_no_held_sandbox_and_kills_running_agents(sealed_pack: Path,
                                                                               tmp_path: Path) -> None:
    contract, run_dir, proc = ticking_run(sealed_pack, tmp_path, "sigkill")
    wait_until("two agents ticking and more sandboxes held ahead",
               lambda: len(tick_files(run_dir)) == 2 and held_sandboxes(run_dir) >= 3)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    sizes = assert_nothing_written_after_the_runner_died(run_dir)
    assert len(sizes) == 2, sizes  # the held sandboxes never ran their agents
    # The killed run resumes: the two interrupted attempts are used, never given back.
    execute(contract, run_dir, RunOptions(progress=False, resume=True, jobs=4, workspace_quota=False))
    events = check_run(run_dir, max_attempts=1, ids=task_ids(sealed_pack))
    assert sum(e["kind"] == "attempt_interrupted" for e in events) == 2


@needs_bwrap
@needs_exe
def test_sigterm_is_recorded_exit_143_and_resumable_and_no_agent_outlives_it(sealed_pack: Path,
                                                                            tmp_path: Path) -> None:
    contract, run_dir, proc = ticking_run(sealed_pack, tmp_path, "sigterm")
    wait_until("two agents ticking and more sandboxes held ahead",
               lambda: len(tick_files(run_dir)) == 2 and held_sandboxes(run_dir) >= 3)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert f"--resume {run_dir}" in err and "SIGTERM" in err
    sizes = assert_nothing_written_after_the_runner_died(run_dir)
    assert len(sizes) == 2, sizes  # the attempts under way finished (at their cap); none held ran
    events = read_chain(run_dir / "journal.jsonl").events
    stops = [e for e in events if e["kind"] == "run_interrupted"]
    assert [e["payload"]["reason"] for e in stops] == ["SIGTERM"]
    finished = [e["task_id"] for e in events if e["kind"] == "task_finished"]
    assert len(finished) == 2  # the two under way were let finish; the held ones never started
    assert all(e["payload"]["outcome"] == "timeout" for e in events if e["kind"] == "task_finished")
    execute(contract, run_dir, RunOptions(progress=False, resume=True, jobs=4, workspace_quota=False))
    events = check_run(run_dir, max_attempts=1, ids=task_ids(sealed_pack))
    assert events[-1]["kind"] == "run_finished"


@needs_bwrap
@needs_exe
def test_second_sigterm_stops_the_attempts_under_way_now(sealed_pack: Path, tmp_path: Path) -> None:
    _contract, run_dir, proc = ticking_run(sealed_pack, tmp_path, "twice")
    wait_until("two agents ticking", lambda: len(tick_files(run_dir)) == 2)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert time.monotonic() - t0 < 4.0  # not after the 6 s cap
    assert_nothing_written_after_the_runner_died(run_dir)
    events = read_chain(run_dir / "journal.jsonl").events
    stopped = [e for e in events if e["kind"] == "attempt_interrupted"]
    assert len(stopped) == 2 and all(e["payload"]["reason"] == "stopped by a second SIGTERM" for e in stopped)
    assert all(0 < e["payload"]["charged_s"] < 6.0 for e in stopped)
    assert not [e for e in events if e["kind"] == "task_finished"]


@needs_exe
def test_unsandboxed_agent_and_its_children_die_with_their_runner(sealed_pack: Path, tmp_path: Path) -> None:
    _contract, run_dir, proc = ticking_run(sealed_pack, tmp_path, "nosandbox", TICKER_WITH_CHILD,
                                           "--sandbox", "none")
    wait_until("two agents and their children ticking", lambda: len(tick_files(run_dir)) == 4)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert_nothing_written_after_the_runner_died(run_dir)
