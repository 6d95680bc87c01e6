"""One run per run_id on this machine: the local runs index.

A locked contract run again into a new directory would let the better of two runs be
published; `run` refuses it, naming the first run's directory, while `--resume` continues the
first. The index survives two runs starting at once, a corrupt index file and a read-only
data directory, and is rebuilt from the run directories and bundles, which stay the truth.
Each test has its own index (conftest sets SEALBENCH_DATA_DIR).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import make_contract, needs_bwrap
from sealbench.bundle import make_bundle, verify_bundle
from sealbench.journal import event_hash, read_chain
from sealbench.runner import RunOptions, execute
from sealbench.runs_index import INDEX, LOG

TASK = "t_11_fix_off_by_one"
Cli = Any

pytestmark = needs_bwrap


def sealbench_exe() -> str:
    exe = Path(sys.executable).parent / "sealbench"
    return str(exe) if exe.exists() else ""


def contract(pack: Path, tmp_path: Path, run_id: str, command: str = "true", **kw: Any) -> Path:
    path = tmp_path / f"{run_id}.contract.json"
    make_contract(pack, path, task_ids=(TASK,), command=command, run_id=run_id, narration_probe=False, **kw)
    return path


def stopped_run(contract_file: Path, run_dir: Path) -> None:
    """A run stopped dead once its first attempt has started (as by kill -9)."""

    class Stop(BaseException):
        pass

    def stop_after_first_attempt_starts(journal: Any) -> None:
        original = journal.append

        def append(event: Any, **kw: Any) -> dict[str, Any]:
            line = original(event, **kw)
            if event.kind == "attempt_started":
                raise Stop
            return line

        journal.append = append

    with pytest.raises(Stop):
        execute(contract_file, run_dir, RunOptions(progress=False), on_started=stop_after_first_attempt_starts)


def test_second_run_of_a_run_id_is_refused_naming_the_first_directory(
        cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    c = contract(sealed_pack, tmp_path, "once")
    first, second = tmp_path / "first", tmp_path / "second"
    code, _out, err = cli("run", c, "--out", first, "--no-progress")
    assert code == 0, err
    code, _out, err = cli("run", c, "--out", second, "--no-progress")
    assert code == 3, err
    assert f"run_id once was already run on this machine, in {first.resolve()}" in err
    assert f"--resume {first.resolve()}` continues that run" in err and "lock a new contract" in err
    assert not second.exists(), "refused before anything was written"


def test_resume_continues_the_same_run_and_keeps_its_nonce(cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    c = contract(sealed_pack, tmp_path, "resumed")
    run_dir = (tmp_path / "run").resolve()
    stopped_run(c, run_dir)
    code, _out, err = cli("run", c, "--resume", run_dir, "--no-progress")
    assert code == 0, err
    events = read_chain(run_dir / "journal.jsonl").events
    started = events[0]["payload"]["run_nonce"]
    assert isinstance(started, str) and len(started) == 32
    assert [e["payload"]["run_nonce"] for e in events if e["kind"] == "run_resumed"] == [started]
    code, out, _ = cli("runs", "show", "resumed")
    assert code == 0 and f"run directory: {run_dir}" in out and "state: finished" in out and started in out
    code, _out, err = cli("run", c, "--out", tmp_path / "again", "--no-progress")
    assert code == 3 and "already run on this machine" in err


@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_two_runs_starting_at_once_one_run_id_one_run(sealed_pack: Path, tmp_path: Path) -> None:
    same = contract(sealed_pack, tmp_path, "raced")
    other = contract(sealed_pack, tmp_path, "other")
    procs = [subprocess.Popen([sealbench_exe(), "run", str(c), "--out", str(tmp_path / name), "--no-progress"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c, name in ((same, "a"), (same, "b"), (other, "c"))]
    results = [(p.wait(timeout=120), p.communicate()[1]) for p in procs]
    (code_a, err_a), (code_b, err_b), (code_c, err_c) = results
    assert sorted([code_a, code_b]) == [0, 3], results
    loser = "b" if code_b == 3 else "a"
    assert "already run on this machine" in (err_b if loser == "b" else err_a)
    assert not (tmp_path / loser).exists()
    assert code_c == 0, err_c


CLAIMER = """
import sys, time
from pathlib import Path
from sealbench.contract import load_contract
from sealbench.errors import RunRefusal
from sealbench.events import RunStarted
from sealbench.runs_index import claim_run
contract, run_dir, go = load_contract(Path(sys.argv[1])), Path(sys.argv[2]), Path(sys.argv[3])
Path(sys.argv[4]).touch()
while not go.exists():
    time.sleep(0.001)
try:
    claim_run(contract, run_dir, RunStarted(run_nonce=run_dir.name))
    print("claimed")
except RunRefusal:
    print("refused")
"""


def test_sixteen_processes_claiming_at_once_leave_one_run_per_run_id(
        cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    contracts = [contract(sealed_pack, tmp_path, f"busy-{i}") for i in range(4)]
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(contracts[i % 4]), str(tmp_path / f"dir-{i}"),
                               str(go), str(tmp_path / f"ready-{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(16)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < 16 and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # every process is loaded and waiting: the claims race
    outcomes = [(p.communicate(timeout=120), p.returncode) for p in procs]
    assert all(code == 0 and not err for (_out, err), code in outcomes), outcomes
    claimed = [i for i, ((out, _), _code) in enumerate(outcomes) if out.strip() == "claimed"]
    assert sorted(i % 4 for i in claimed) == [0, 1, 2, 3], outcomes
    code, out, _ = cli("runs", "list")
    assert code == 0 and all(f"busy-{i}" in out for i in range(4))


@pytest.mark.parametrize("damage", ["not-a-database", "damaged-pages"])
def test_corrupt_index_is_moved_aside_and_rebuilt_not_a_crash(
        cli: Cli, sealed_pack: Path, tmp_path: Path, runs_index_dir: Path, damage: str) -> None:
    c = contract(sealed_pack, tmp_path, "before")
    assert cli("run", c, "--out", tmp_path / "first", "--no-progress")[0] == 0
    db = runs_index_dir / INDEX
    data = db.read_bytes()
    db.write_bytes(b"this is not an index\n" * 500 if damage == "not-a-database"
                   else data[:100] + b"\xff" * (len(data) - 100))
    code, _out, err = cli("run", c, "--out", tmp_path / "second", "--no-progress")
    assert code == 3, err
    assert "was corrupt" in err and "rebuilt it" in err, "the user is told"
    assert "already run on this machine" in err, "the rebuilt index still knows the first run"
    assert any(p.name.startswith(f"{INDEX}.corrupt-") for p in runs_index_dir.iterdir())
    code, out, err = cli("runs", "list")
    assert code == 0 and "before" in out, err


def test_an_index_that_lost_its_database_still_refuses_from_its_log(
        cli: Cli, sealed_pack: Path, tmp_path: Path, runs_index_dir: Path) -> None:
    # The database is not fsynced; its log is. A machine crash may lose the one, not the other.
    c = contract(sealed_pack, tmp_path, "logged")
    assert cli("run", c, "--out", tmp_path / "first", "--no-progress")[0] == 0
    (runs_index_dir / INDEX).unlink()
    code, _out, err = cli("run", c, "--out", tmp_path / "second", "--no-progress")
    assert code == 3 and f"in {(tmp_path / 'first').resolve()}" in err, err


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bwrap makes the data directory read-only")
def test_read_only_data_dir_refuses_a_run_with_a_clear_message_and_still_lists(
        cli: Cli, sealed_pack: Path, tmp_path: Path, runs_index_dir: Path) -> None:
    assert cli("run", contract(sealed_pack, tmp_path, "earlier"), "--out", tmp_path / "earlier",
               "--no-progress")[0] == 0
    c = contract(sealed_pack, tmp_path, "later")
    # A read-only mount, which even root cannot write (permission bits would not stop root).
    ro = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(runs_index_dir), str(runs_index_dir), "--"]
    exe = [sys.executable, "-m", "sealbench.cli"]
    proc = subprocess.run([*ro, *exe, "run", str(c), "--out", str(tmp_path / "later"), "--no-progress",
                           "--sandbox", "none"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert f"cannot write the runs index in {runs_index_dir} (Read-only file system)" in proc.stderr
    assert "set SEALBENCH_DATA_DIR to a writable directory" in proc.stderr
    assert not (tmp_path / "later").exists()
    listed = subprocess.run([*ro, *exe, "runs", "list"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "earlier" in listed.stdout, listed.stderr


def test_index_is_rebuilt_from_run_directories_and_bundles(
        cli: Cli, sealed_pack: Path, tmp_path: Path, runs_index_dir: Path) -> None:
    runs = tmp_path / "work" / "runs"
    a, b = contract(sealed_pack, tmp_path, "rebuilt-a"), contract(sealed_pack, tmp_path, "rebuilt-b")
    assert cli("run", a, "--out", runs / "a", "--no-progress")[0] == 0
    assert cli("run", b, "--out", runs / "b", "--no-progress")[0] == 0
    assert cli("bundle", runs / "a", "--out", tmp_path / "work" / "bundles")[0] == 0
    shutil.rmtree(runs_index_dir)
    code, out, err = cli("runs", "rebuild", tmp_path / "work")
    assert code == 0, err
    assert "2 run(s), 1 bundle(s)" in out
    code, out, _ = cli("runs", "list")
    assert out.index("rebuilt-a") < out.index("rebuilt-b")
    code, out, _ = cli("runs", "show", "rebuilt-a")
    assert f"{tmp_path / 'work' / 'bundles' / 'rebuilt-a'}: verifies; not signed: internal consistency only" in out
    code, _out, err = cli("run", a, "--out", runs / "a-again", "--no-progress")
    assert code == 3 and f"in {runs / 'a'}" in err


def test_a_deleted_run_directory_keeps_its_run_id_used(cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    c = contract(sealed_pack, tmp_path, "deleted")
    assert cli("run", c, "--out", tmp_path / "first", "--no-progress")[0] == 0
    shutil.rmtree(tmp_path / "first")
    code, out, _ = cli("runs", "rebuild")
    assert code == 0 and "stay recorded (their run_ids stay used): deleted" in out
    code, out, _ = cli("runs", "show", "deleted")
    assert "state: missing" in out
    code, _out, err = cli("run", c, "--out", tmp_path / "second", "--no-progress")
    assert code == 3 and "its journal is no longer there" in err


def test_a_run_deleted_and_run_again_in_the_same_directory_is_refused(
        cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    c = contract(sealed_pack, tmp_path, "in-place")
    assert cli("run", c, "--out", tmp_path / "run", "--no-progress")[0] == 0
    shutil.rmtree(tmp_path / "run")
    code, _out, err = cli("run", c, "--out", tmp_path / "run", "--no-progress")
    assert code == 3 and "its journal is no longer there" in err
    assert not (tmp_path / "run").exists()


def test_a_start_stopped_before_its_journal_existed_may_start_again_in_place(
        cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    from sealbench.contract import load_contract
    from sealbench.events import RunStarted
    from sealbench.runs_index import claim_run

    c = contract(sealed_pack, tmp_path, "never-started")
    # What a run killed between recording itself and creating its journal leaves behind.
    claim_run(load_contract(c), (tmp_path / "run").resolve(), RunStarted(run_nonce="lost"))
    code, _out, err = cli("run", c, "--out", tmp_path / "run", "--no-progress")
    assert code == 0, err
    code, _out, err = cli("run", c, "--out", tmp_path / "elsewhere", "--no-progress")
    assert code == 3, err


def test_runs_list_is_by_start_time_and_show_has_caps_access_rate_and_verify_status(
        cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    failing = contract(sealed_pack, tmp_path, "zz-started-first", command="builtin:noop", max_attempts=2,
                       terms_read_on="2026-10-01")
    passing = contract(sealed_pack, tmp_path, "aa-started-second", command="builtin:reference")
    assert cli("run", failing, "--out", tmp_path / "first", "--no-progress")[0] == 0
    assert cli("run", passing, "--out", tmp_path / "second", "--no-progress")[0] == 0
    code, out, _ = cli("runs", "list")
    assert code == 0 and "oldest first (by start time; not a ranking)" in out
    assert out.index("zz-started-first") < out.index("aa-started-second"), "never by name nor by rate"
    code, out, _ = cli("runs", "show", "zz-started-first")
    for fact in ("caps: max_attempts 2, wall_clock_s 180, feedback none",
                 "access class: host operator-supplied free server option; model access",
                 "terms read on 2026-10-01",
                 "rate: 0 of 1 task_pass on this locked run_id; Wilson 95% [0.000, 0.793]",
                 "isolation: in-process", "verify: not bundled"):
        assert fact in out, (fact, out)
    assert cli("bundle", tmp_path / "first", "--out", tmp_path / "bundles")[0] == 0
    assert cli("verify", tmp_path / "bundles" / "zz-started-first")[0] == 0
    code, out, _ = cli("runs", "show", "zz-started-first")
    assert "verifies; not signed: internal consistency only" in out
    flip = tmp_path / "bundles" / "zz-started-first" / "rate.json"
    flip.write_text(flip.read_text().replace('"task_pass_count": 0', '"task_pass_count": 1'))
    assert cli("verify", tmp_path / "bundles" / "zz-started-first")[0] == 4
    code, out, _ = cli("runs", "show", "zz-started-first")
    assert "does not verify: " in out


def test_rebuild_finds_a_second_run_of_one_run_id_made_with_another_index(
        cli: Cli, sealed_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = contract(sealed_pack, tmp_path, "twice")
    assert cli("run", c, "--out", tmp_path / "first", "--no-progress")[0] == 0
    with monkeypatch.context() as m:
        m.setenv("SEALBENCH_DATA_DIR", str(tmp_path / "another-index"))
        assert cli("run", c, "--out", tmp_path / "second", "--no-progress")[0] == 0
    code, out, _ = cli("runs", "rebuild", tmp_path / "second")
    assert code == 0 and "run_id twice was run more than once on this machine" in out
    code, out, _ = cli("runs", "show", "twice")
    assert f"run directory: {tmp_path / 'first'}" in out
    assert f"also in {tmp_path / 'second'}: ANOTHER RUN of this run_id" in out
    first = read_chain(tmp_path / "first" / "journal.jsonl").events[0]["payload"]["run_nonce"]
    second = read_chain(tmp_path / "second" / "journal.jsonl").events[0]["payload"]["run_nonce"]
    assert first != second and verify_bundle(make_bundle(tmp_path / "second", tmp_path / "b")).run_nonce == second


def test_a_journal_from_before_run_nonces_still_resumes_and_verifies(
        sealed_pack: Path, tmp_path: Path, runs_index_dir: Path) -> None:
    c = contract(sealed_pack, tmp_path, "old-journal")
    run_dir = (tmp_path / "run").resolve()
    stopped_run(c, run_dir)
    journal = run_dir / "journal.jsonl"
    events = read_chain(journal).events
    del events[0]["payload"]["run_nonce"]
    prev = None
    for ev in events:
        ev["prev"] = prev
        ev["hash"] = event_hash(ev)
        prev = ev["hash"]
    journal.write_bytes(b"".join(json.dumps(e, sort_keys=True, separators=(",", ":")).encode() + b"\n"
                                 for e in events))
    shutil.rmtree(runs_index_dir)  # as if it was started by a release without the index
    result = execute(c, run_dir, RunOptions(progress=False, resume=True))
    assert result.complete
    resumed = [e for e in read_chain(journal).events if e["kind"] == "run_resumed"]
    assert [e["payload"]["run_nonce"] for e in resumed] == [None]
    assert verify_bundle(make_bundle(run_dir, tmp_path / "out")).run_nonce is None
    assert (runs_index_dir / INDEX).is_file() and (runs_index_dir / LOG).is_file()


def test_importing_the_cli_and_the_runner_does_not_import_sqlite3() -> None:
    code = ("import sys, sealbench.cli, sealbench.runner, sealbench.bundle; "
            "print('sqlite3' in sys.modules, '_sqlite3' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == ["False", "False"]


def test_exploit_copied_run_directory_resumed_twice(cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    """A stopped run copied, then both copies resumed, would run its unfinished tasks twice and
    leave two verifying bundles of one run: the run continues in one directory only."""
    c = contract(sealed_pack, tmp_path, "copied")
    run_dir, copy, other = (tmp_path / "run").resolve(), (tmp_path / "copy").resolve(), (tmp_path / "other").resolve()
    stopped_run(c, run_dir)
    shutil.copytree(run_dir, copy)
    shutil.copytree(run_dir, other)
    # The copy first, while the run's own directory still holds it: refused, naming the way out.
    before = (copy / "journal.jsonl").read_bytes()
    code, _out, err = cli("run", c, "--resume", copy, "--no-progress")
    assert code == 3, err
    assert f"holds a copy of run copied, whose directory is {run_dir}" in err
    assert f"`sealbench runs move {run_dir} {copy}`" in err
    assert (copy / "journal.jsonl").read_bytes() == before, "refused before any line"
    code, _out, err = cli("run", c, "--resume", run_dir, "--no-progress")
    assert code == 0, err
    # Once the run went on, a copy left behind is refused wherever it is, even renamed to the run's place.
    for left in (copy, other):
        code, _out, err = cli("run", c, "--resume", left, "--no-progress")
        assert code == 3 and f"{left} holds a copy of run copied left behind: the run went on in {run_dir}" in err
        assert (left / "journal.jsonl").read_bytes() == before
    shutil.move(run_dir, tmp_path / "aside")
    shutil.move(other, run_dir)
    code, _out, err = cli("run", c, "--resume", run_dir, "--no-progress")
    assert code == 3 and "left behind" in err


def test_runs_move_continues_the_run_in_a_copy_and_retires_the_original(
        cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    c = contract(sealed_pack, tmp_path, "moved")
    old, new = (tmp_path / "old").resolve(), (tmp_path / "new").resolve()
    stopped_run(c, old)
    shutil.copytree(old, new)
    code, out, err = cli("runs", "move", old, new)
    assert code == 0 and f"it continues in {new}" in out, err
    code, out, _ = cli("runs", "show", "moved")
    assert f"run directory: {new} (moved from {old}; its next resume journals it)" in out
    assert "moved to" in (old / "MOVED.txt").read_text()
    code, _out, err = cli("run", c, "--resume", old, "--no-progress")
    assert code == 3 and f"whose directory is {new}" in err
    code, _out, err = cli("run", c, "--resume", new, "--no-progress")
    assert code == 0, err
    resumed = [e["payload"] for e in read_chain(new / "journal.jsonl").events if e["kind"] == "run_resumed"]
    assert [p.get("moved_from") for p in resumed] == [str(old)]
    code, _out, err = cli("run", c, "--resume", old, "--no-progress")
    assert code == 3 and "left behind" in err
    code, out, _ = cli("runs", "show", "moved")
    assert f"run directory: {new}" in out and "state: finished" in out
    assert verify_bundle(make_bundle(new, tmp_path / "b")).run_nonce


def test_a_renamed_run_directory_resumes_and_journals_where_it_was(cli: Cli, sealed_pack: Path, tmp_path: Path) -> None:
    c = contract(sealed_pack, tmp_path, "renamed")
    old, new = (tmp_path / "old").resolve(), (tmp_path / "new").resolve()
    stopped_run(c, old)
    old.rename(new)
    code, _out, err = cli("run", c, "--resume", new, "--no-progress")
    assert code == 0, err
    resumed = [e["payload"] for e in read_chain(new / "journal.jsonl").events if e["kind"] == "run_resumed"]
    assert [p.get("moved_from") for p in resumed] == [str(old)]


def test_exploit_a_fork_continued_under_another_index_is_marked(
        cli: Cli, sealed_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = contract(sealed_pack, tmp_path, "forked")
    run_dir, copy = (tmp_path / "run").resolve(), (tmp_path / "copy").resolve()
    stopped_run(c, run_dir)
    shutil.copytree(run_dir, copy)
    assert cli("run", c, "--resume", run_dir, "--no-progress")[0] == 0
    with monkeypatch.context() as m:
        m.setenv("SEALBENCH_DATA_DIR", str(tmp_path / "another-index"))
        assert cli("run", c, "--resume", copy, "--no-progress")[0] == 0
    bundle = make_bundle(copy, tmp_path / "b")
    code, out, _ = cli("verify", bundle)
    assert code == 0 and f"runs index on this machine: ANOTHER RUN of this run_id: a fork of the run in {run_dir}" in out
    code, out, _ = cli("runs", "rebuild", copy)
    assert code == 0 and "run_id forked was run more than once on this machine" in out
    code, out, _ = cli("runs", "show", "forked")
    assert f"run directory: {run_dir}" in out and f"also in {copy}: ANOTHER RUN of this run_id: a fork" in out


def test_a_resume_killed_before_its_first_line_resumes_again_in_place(
        sealed_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = contract(sealed_pack, tmp_path, "claimed-resume")
    run_dir, copy = (tmp_path / "run").resolve(), (tmp_path / "copy").resolve()
    stopped_run(c, run_dir)
    shutil.copytree(run_dir, copy)

    class Stop(BaseException):
        pass

    from sealbench.journal import Journal

    original = Journal.append

    def append(self: Journal, event: Any, **kw: Any) -> dict[str, Any]:
        if event.kind == "run_resumed":
            raise Stop
        return original(self, event, **kw)

    with monkeypatch.context() as m:
        m.setattr(Journal, "append", append)
        with pytest.raises(Stop):
            execute(c, run_dir, RunOptions(progress=False, resume=True))
    with pytest.raises(Exception, match="holds a copy of run claimed-resume"):
        execute(c, copy, RunOptions(progress=False, resume=True))
    assert execute(c, run_dir, RunOptions(progress=False, resume=True)).complete


def test_an_index_of_version_1_is_upgraded_and_its_runs_resume(
        sealed_pack: Path, tmp_path: Path, runs_index_dir: Path) -> None:
    import sqlite3

    c = contract(sealed_pack, tmp_path, "old-index")
    run_dir = (tmp_path / "run").resolve()
    stopped_run(c, run_dir)
    con = sqlite3.connect(runs_index_dir / INDEX)
    for column in ("continuation", "prior_continuation", "moved_from"):
        con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()
    assert execute(c, run_dir, RunOptions(progress=False, resume=True)).complete
    con = sqlite3.connect(runs_index_dir / INDEX)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 2
    assert con.execute("SELECT continuation FROM runs").fetchone()[0]
    con.close()


HOLD_LOCK = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)  # as `sealbench runs rebuild` stopped with Ctrl-Z
"""

HOLD_TRANSACTION = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("held", ["lock", "transaction"])
def test_a_held_runs_index_refuses_run_and_list_in_bounded_time_naming_the_holder(
        cli: Cli, sealed_pack: Path, tmp_path: Path, runs_index_dir: Path, monkeypatch: pytest.MonkeyPatch,
        held: str) -> None:
    """`run` and `runs list` waited forever, silent, on a stopped holder of runs.lock; on a
    transaction held on the database they refused after 31 s saying to make a folder writable."""
    import sealbench.runs_index as runs_index

    monkeypatch.setattr(runs_index, "WAIT_S", 1.5)
    assert cli("runs", "rebuild")[0] == 0  # the index exists
    target = runs_index_dir / ("runs.lock" if held == "lock" else INDEX)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK if held == "lock" else HOLD_TRANSACTION, str(target)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        c = contract(sealed_pack, tmp_path, "waits")
        for argv in (("run", c, "--out", tmp_path / "run", "--no-progress"), ("runs", "list")):
            started = time.monotonic()
            code, _out, err = cli(*argv)
            took = time.monotonic() - started
            assert code == 3, err
            assert took < 10, took
            assert "waiting up to 1.5 s for the runs index" in err and f"held by pid {holder.pid} (`" in err
            assert f"stayed held for 1.5 s by pid {holder.pid}" in err and "nothing was written" in err
            assert ("stopped (Ctrl-Z or SIGSTOP)" in err) == (held == "lock")
            assert "writable" not in err
        assert not (tmp_path / "run").exists()
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()


def test_a_journal_killed_before_its_first_line_resumes_in_place(sealed_pack: Path, tmp_path: Path) -> None:
    c = contract(sealed_pack, tmp_path, "empty-journal")
    run_dir = (tmp_path / "run").resolve()
    stopped_run(c, run_dir)
    (run_dir / "journal.jsonl").write_bytes(b"")  # as if killed between its creation and its first line
    assert execute(c, run_dir, RunOptions(progress=False, resume=True)).complete
