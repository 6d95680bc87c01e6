"""One writer per run directory: a second run, resume or probe is refused at once, naming the writer.

Black-box where it can be: real ``sealbench`` processes racing on one run directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import make_contract, needs_bwrap
from sealbench import events
from sealbench.errors import HarnessError, RunRefusal, ScoreRefusal
from sealbench.journal import Journal, read_chain
from sealbench.lock import hold_reader, hold_writer
from sealbench.runner import RunOptions, execute

IDS = ("t_03_rename_helper", "t_11_fix_off_by_one")
SLOW_AGENT = "sh -c 'sleep 2'"


def sealbench_exe() -> str:
    exe = Path(sys.executable).parent / "sealbench"
    return str(exe) if exe.exists() else ""


needs_exe = pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")


def start(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sealbench_exe(), *argv, "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_event(journal: Path, kind: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if journal.exists() and f'"kind":"{kind}"'.encode() in journal.read_bytes():
            return
        time.sleep(0.05)
    raise AssertionError(f"no {kind} in {journal} after {timeout} s")


def attempts_started(run_dir: Path) -> Counter[tuple[str, int]]:
    events = read_chain(run_dir / "journal.jsonl").events
    return Counter((e["task_id"], e["attempt"]) for e in events if e["kind"] == "attempt_started")


@needs_bwrap
@needs_exe
def test_two_concurrent_resumes_one_is_refused_naming_the_writer(sealed_pack: Path, tmp_path: Path) -> None:
    """Two `run --resume` at once used to both run every task into one journal."""
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=IDS, command=SLOW_AGENT, run_id="two-resumes")
    run_dir = tmp_path / "run"
    first = start("run", str(contract), "--out", str(run_dir), "--jobs", "1")
    wait_for_event(run_dir / "journal.jsonl", "attempt_started")
    first.kill()
    first.communicate()
    a = start("run", str(contract), "--resume", str(run_dir), "--jobs", "2")
    b = start("run", str(contract), "--resume", str(run_dir), "--jobs", "2")
    out = [p.communicate(timeout=120) for p in (a, b)]
    codes = sorted(p.returncode for p in (a, b))
    assert codes == [0, 3], out
    refused = a if a.returncode == 3 else b
    winner = b if refused is a else a
    err = out[0][1] if refused is a else out[1][1]
    assert f"being written by pid {winner.pid}" in err and "--resume" in err, err
    assert all(n == 1 for n in attempts_started(run_dir).values())
    assert read_chain(run_dir / "journal.jsonl").problems == []


@needs_bwrap
@needs_exe
def test_resume_beside_a_live_run_is_refused_at_once(sealed_pack: Path, tmp_path: Path) -> None:
    contract = tmp_path / "c.json"
    # Slower than SLOW_AGENT: the live run must outlast two more commands' starts on a busy machine.
    make_contract(sealed_pack, contract, task_ids=IDS, command="sh -c 'sleep 6'", run_id="beside")
    run_dir = tmp_path / "run"
    live = start("run", str(contract), "--out", str(run_dir), "--jobs", "1")
    try:
        wait_for_event(run_dir / "journal.jsonl", "attempt_started")
        size = (run_dir / "journal.jsonl").stat().st_size
        t0 = time.monotonic()
        second = start("run", str(contract), "--resume", str(run_dir))
        _out, err = second.communicate(timeout=60)
        assert second.returncode == 3, err
        assert time.monotonic() - t0 < 10  # at once, not after the live run
        assert f"pid {live.pid}" in err and "sealbench run" in err, err
        # Nor may a probe or a fresh run write there; the live run's journal was not touched.
        assert (run_dir / "journal.jsonl").stat().st_size >= size
        fresh = start("run", str(contract), "--out", str(run_dir))
        _out, err = fresh.communicate(timeout=60)
        assert fresh.returncode == 3 and f"pid {live.pid}" in err, err
    finally:
        live.communicate(timeout=120)
    assert live.returncode == 0
    assert all(n == 1 for n in attempts_started(run_dir).values())


@needs_bwrap
@needs_exe
def test_score_and_bundle_refuse_a_run_being_written(sealed_pack: Path, tmp_path: Path) -> None:
    """A run directory is read only when no run writes it: never a half-written journal."""
    contract = tmp_path / "c.json"
    # Slower than SLOW_AGENT: the live run must outlast three more commands on a busy machine.
    make_contract(sealed_pack, contract, task_ids=IDS, command="sh -c 'sleep 6'", run_id="busy")
    run_dir = tmp_path / "run"
    live = start("run", str(contract), "--out", str(run_dir), "--jobs", "1")
    try:
        wait_for_event(run_dir / "journal.jsonl", "attempt_started")
        for argv in (("score", str(contract), str(run_dir)), ("bundle", str(run_dir), "--out", str(tmp_path / "b")),
                     ("report", str(run_dir), "--out", str(tmp_path / "r"))):
            proc = subprocess.run([sealbench_exe(), *argv], capture_output=True, text=True, timeout=60)
            assert proc.returncode == 3, proc.stderr
            assert f"being written by pid {live.pid}" in proc.stderr, proc.stderr
        assert not (tmp_path / "b").exists() or list((tmp_path / "b").iterdir()) == []
    finally:
        live.communicate(timeout=120)
    proc = subprocess.run([sealbench_exe(), "score", str(contract), str(run_dir)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_reader_keeps_writers_out_until_it_is_done(tmp_path: Path) -> None:
    with hold_writer(tmp_path, ["sealbench", "run", "c.json"]):
        pass  # a writer once: the lock file exists from now on
    reader = hold_reader(tmp_path, "bundle")
    assert reader is not None
    with reader, pytest.raises(RunRefusal, match="being read by another sealbench command"):
        hold_writer(tmp_path, ["sealbench", "run"])
    with hold_writer(tmp_path, ["sealbench", "run"]), pytest.raises(ScoreRefusal, match=f"pid {os.getpid()}"):
        hold_reader(tmp_path, "score")


def test_lock_is_released_when_its_holder_is_killed(tmp_path: Path) -> None:
    """flock dies with its process: a run killed with SIGKILL leaves no stale lock behind."""
    code = ("import sys, time; from pathlib import Path; from sealbench.lock import hold_writer; "
            "hold_writer(Path(sys.argv[1]), ['holder']); print('held', flush=True); time.sleep(60)")
    with subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            with pytest.raises(RunRefusal, match=f"pid {holder.pid} \\(`holder`"):
                hold_writer(tmp_path, ["second"])
        finally:
            holder.kill()
    with hold_writer(tmp_path, ["second"]) as lock:
        assert json.loads(lock.path.read_text())["command"] == ["second"]


def test_journal_created_by_another_process_first_is_never_overwritten(tmp_path: Path) -> None:
    """O_EXCL: of two runs creating one journal at once, the second is refused, not merged."""
    path = tmp_path / "journal.jsonl"
    first = Journal.create(path)
    first.append(events.RunStarted())
    with pytest.raises(RunRefusal, match="exists; resume it"):
        Journal.create(path)
    first.close()
    assert [e["kind"] for e in read_chain(path).events] == ["run_started"]


@pytest.mark.parametrize("change", ["append", "cut", "replace"])
def test_foreign_write_to_the_journal_stops_its_writer(tmp_path: Path, change: str) -> None:
    """A line that this writer did not write (a second writer) is found before the next append."""
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path, fsync=False)
    journal.append(events.RunStarted())
    journal.append(events.RunResumed())
    if change == "append":
        with path.open("ab") as f:
            f.write(b'{"kind":"forged"}\n')
    elif change == "cut":
        os.truncate(path, path.stat().st_size - 5)
    else:
        path.rename(tmp_path / "old.jsonl")
        path.write_bytes((tmp_path / "old.jsonl").read_bytes())
    with pytest.raises(HarnessError, match="Only one process may write a run"):
        journal.append(events.RunInterrupted())
    with pytest.raises(HarnessError):
        journal.append(events.RunFinished())  # stopped for good
    journal.close()


@needs_bwrap
def test_foreign_append_during_a_run_stops_the_run(sealed_pack: Path, tmp_path: Path) -> None:
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=IDS, command="builtin:reference", run_id="foreign")
    run_dir = tmp_path / "run"

    def forge_a_line(journal: Journal) -> None:
        with journal.path.open("ab") as f:
            f.write(b'{"kind":"task_finished","task_id":"t_03_rename_helper"}\n')

    with pytest.raises(HarnessError, match="another process appended"):
        execute(contract, run_dir, RunOptions(progress=False), on_started=forge_a_line)
    # Nothing was written after the forged line: the chain shows where a second writer began.
    kinds = [e.get("kind") for e in read_chain(run_dir / "journal.jsonl").events]
    assert kinds == ["run_started", "task_finished"]


def test_a_refusal_never_names_a_writer_that_has_ended(tmp_path: Path) -> None:
    # The winner of two resumes takes the lock, then records itself: in between, the loser
    # read the record of the killed run before them and named that dead pid as the writer.
    import fcntl
    import json
    import os
    import threading

    from sealbench.errors import RunRefusal
    from sealbench.lock import LOCK_NAME, hold_writer

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ended = subprocess.Popen(["true"])
    ended.wait()
    lock = run_dir / LOCK_NAME
    lock.write_text(json.dumps({"pid": ended.pid, "command": ["sealbench", "run", "killed"], "since": "then"}))
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the new writer holds the lock, its record not yet written
        with pytest.raises(RunRefusal) as info:
            hold_writer(run_dir, ["sealbench", "run", "second"])
        assert str(ended.pid) not in str(info.value) and "being written by another process" in str(info.value)

        def record_soon() -> None:
            time.sleep(0.2)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": ["sealbench", "run", "winner"],
                                      "since": "now"}).encode().ljust(200), 0)

        writer = threading.Thread(target=record_soon)
        writer.start()
        with pytest.raises(RunRefusal, match=f"being written by pid {os.getpid()} "):
            hold_writer(run_dir, ["sealbench", "run", "third"])
        writer.join()
    finally:
        os.close(fd)
