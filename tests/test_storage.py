"""Storage failures pause, never decide: a full disk stops the run before any outcome is written.

The disks are real: a small tmpfs mounted for the test (root only; skipped elsewhere) and
filled with a file while sealbench works on it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLE, make_contract, needs_bwrap
from sealbench.contract import load_contract
from sealbench.errors import ScoreRefusal
from sealbench.journal import read_chain
from sealbench.pack import seal_pack
from sealbench.runner import RunOptions, execute
from sealbench.score import score
from sealbench.scoring_io import events_from
from test_resume import check_run


def sealbench_exe() -> str:
    exe = Path(sys.executable).parent / "sealbench"
    return str(exe) if exe.exists() else ""


class Disk:
    """A tmpfs of ``size`` bytes at ``path``; :meth:`fill` leaves it without a free byte."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> None:
        chunk = b"\0" * (1 << 16)
        with self.filler.open("ab") as f:
            while True:
                try:
                    f.write(chunk)
                    f.flush()
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
        small = chunk[:512]
        with self.filler.open("ab", buffering=0) as f, contextlib.suppress(OSError):
            while f.write(small):
                pass

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield Disk(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def wait_for(what: str, ok: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def finished(journal: Path) -> int:
    return journal.read_bytes().count(b'"kind":"task_finished"') if journal.exists() else 0


IDS = tuple(sorted(p.name for p in (SAMPLE / "tasks").iterdir()))
# Edits a file (so every attempt is graded in a grading copy on the same disk), slowly enough
# for the disk to fill while the run is under way.
EDITOR = "sh -c 'sleep 0.4; echo \"EXTRA = 1\" >> extra_module.py'"


@needs_bwrap
@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_disk_filled_during_a_run_pauses_it_and_resume_reaches_a_rate(sealed_pack: Path, tmp_path: Path,
                                                                       disk: Disk) -> None:
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=IDS, command=EDITOR, run_id="full-disk", max_attempts=2)
    run_dir = disk.path / "run"
    proc = subprocess.Popen([sealbench_exe(), "run", str(contract), "--out", str(run_dir), "--jobs", "1",
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for("a first task finished", lambda: finished(run_dir / "journal.jsonl") >= 1)
    disk.fill()
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "storage failure" in err and ("No space left on device" in err or "no space left" in err), err
    assert f"--resume {run_dir}" in err, err
    events = read_chain(run_dir / "journal.jsonl").events
    # Nothing was decided by the full disk: no harness error, no task finished by it.
    assert not [e for e in events if e["kind"] == "harness_error"]
    assert not [e for e in events if e["kind"] == "task_finished" and e["payload"]["outcome"] == "harness_error"]
    assert finished(run_dir / "journal.jsonl") < len(IDS)
    disk.free()
    resumed = subprocess.run([sealbench_exe(), "run", str(contract), "--resume", str(run_dir), "--jobs", "2",
                              "--no-progress"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    events = check_run(run_dir, max_attempts=2, ids=IDS)
    assert not [e for e in events if e["kind"] == "harness_error"]
    stopped = [e for e in events if e["kind"] == "attempt_interrupted"]
    assert stopped, "the attempt under way when the disk filled is recorded as interrupted (and used)"
    scored = subprocess.run([sealbench_exe(), "score", str(contract), str(run_dir), "--json"],
                            capture_output=True, text=True)
    # A task whose last attempt the full disk stopped has no result of its agent's: an
    # infrastructure error, which refuses the rate; an earlier attempt stopped costs only itself.
    last = {e["task_id"]: e["attempt"] for e in events if e["kind"] == "attempt_started"}
    stopped_last = {e["task_id"] for e in stopped if e["attempt"] == last[e["task_id"]]}
    ends = {e["task_id"]: e["payload"]["outcome"] for e in events if e["kind"] == "task_finished"}
    assert {t for t, outcome in ends.items() if outcome == "infra_error"} == stopped_last, (ends, stopped)
    if stopped_last:
        assert scored.returncode == 3 and "infrastructure errors" in scored.stderr, scored.stderr
    else:
        assert scored.returncode == 0, scored.stderr
        assert json.loads(scored.stdout)["n"] == len(IDS)


@needs_bwrap
def test_harness_error_followed_by_a_kill_stays_a_harness_error(sealed_pack: Path, tmp_path: Path) -> None:
    """It used to be scored after resume as the agent's failure, and a rate printed."""
    task = "t_11_fix_off_by_one"
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(task,), command="builtin:reference", run_id="he-kill",
                  max_attempts=2)
    run_dir = tmp_path / "run"
    hidden = next(p for p in (sealed_pack / "tasks" / task / "hidden").rglob("*") if p.is_file())
    sealed = hidden.read_bytes()

    class Killed(BaseException):  # not an Exception: the runner cannot record it, as with kill -9
        pass

    def break_the_pack_then_die_after_the_harness_error(journal: Any) -> None:
        hidden.write_bytes(sealed + b"\n# changed under the run\n")  # the harness's fault, not the agent's
        original = journal.append

        def append(event: Any, **kw: Any) -> dict[str, Any]:
            line = original(event, **kw)
            if event.kind == "harness_error":
                raise Killed
            return line

        journal.append = append

    with pytest.raises(Killed):
        execute(contract, run_dir, RunOptions(progress=False), on_started=break_the_pack_then_die_after_the_harness_error)
    hidden.write_bytes(sealed)
    execute(contract, run_dir, RunOptions(progress=False, resume=True))
    events = read_chain(run_dir / "journal.jsonl").events
    ends = [e for e in events if e["kind"] == "task_finished"]
    assert [e["payload"]["outcome"] for e in ends] == ["harness_error"]
    assert "hidden tests no longer match" in ends[0]["payload"]["error"]
    assert [e["attempt"] for e in events if e["kind"] == "attempt_started"] == [1]  # not run on
    locked = load_contract(contract)
    with pytest.raises(ScoreRefusal, match="harness"):
        score(locked, events_from(run_dir, locked))  # refused, not a rate with the task as a failure


@needs_bwrap
def test_every_command_refuses_with_exit_3_on_a_full_disk(sealed_pack: Path, tmp_path: Path, disk: Disk,
                                                          cli: Callable[..., tuple[int, str, str]]) -> None:
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=IDS[:2], command="builtin:reference", run_id="finished")
    run_dir = tmp_path / "run"
    execute(contract, run_dir, RunOptions(progress=False))
    # What each command needs on the disk before it fills: an unsealed pack, an unlocked contract.
    unsealed = disk.path / "pack"
    shutil.copytree(SAMPLE, unsealed)
    draft = disk.path / "draft.json"
    make_contract(sealed_pack, draft, task_ids=IDS[:2], run_id=None)
    fresh = tmp_path / "fresh.json"  # one run per run_id: the run on the full disk locks its own
    make_contract(sealed_pack, fresh, task_ids=IDS[:2], command="builtin:reference", run_id="on-a-full-disk")
    one_task = disk.path / "one-task-pack"  # validate writes its evidence into pack.json
    shutil.copytree(sealed_pack, one_task)
    for task in (one_task / "tasks").iterdir():
        if task.name != IDS[0]:
            shutil.rmtree(task)
    seal_pack(one_task)
    disk.fill()
    commands: list[tuple[str, ...]] = [
        ("run", str(fresh), "--out", str(disk.path / "run"), "--no-progress"),
        ("probe", str(contract), "--out", str(disk.path / "run2"), "--no-progress"),
        ("bundle", str(run_dir), "--out", str(disk.path / "bundles")),
        ("report", str(run_dir), "--out", str(disk.path / "report")),
        ("contract", "new", str(sealed_pack), "-o", str(disk.path / "new.json"), "--host", "h"),
        ("contract", "lock", str(draft), "--run-id", "locked-on-a-full-disk"),
        ("pack", "seal", str(unsealed)),
        ("pack", "validate", str(one_task), "--repeat", "1", "--no-progress"),
        ("keygen", str(disk.path / "key")),
    ]
    humaneval = Path(__file__).resolve().parents[1] / ".cache" / "data" / "HumanEval.jsonl.gz"
    if humaneval.is_file():
        commands.append(("import", "humaneval", str(humaneval), "-o", str(disk.path / "he"), "--limit", "2"))
    for argv in commands:
        code, _out, err = cli(*argv)
        assert code == 3, (argv, code, err)
        assert "No space left on device" in err or "no space left" in err, (argv, err)
        assert "unexpected" not in err and "Traceback" not in err, (argv, err)
    # Nothing half-written was left behind on the disk.
    leftovers = [p.name for p in disk.path.rglob(".*") if any(w in p.name for w in (".tmp", ".partial", ".importing"))]
    assert leftovers == []
    seal_pack(sealed_pack)  # the pack outside the disk is untouched


RIGHT_THEN_WAITS = "sh -c 'printf \"def last_n(items, n):\\n    return items[-n:] if n > 0 else []\\n\" > window.py; sleep 3'"


@needs_bwrap
@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_disk_filled_during_the_last_attempt_is_an_infrastructure_error_after_resume(
        sealed_pack: Path, tmp_path: Path, disk: Disk, cli: Callable[..., tuple[int, str, str]]) -> None:
    # The run stopped "no task was decided by it"; after the disk was grown and the run resumed,
    # the task whose agent wrote the right answer was its fail and score printed a rate.
    task = "t_11_fix_off_by_one"
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(task,), command=RIGHT_THEN_WAITS, run_id="full-disk-last",
                  max_attempts=1, wall_clock_s=120)
    run_dir = disk.path / "run"
    proc = subprocess.Popen([sealbench_exe(), "run", str(contract), "--out", str(run_dir), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for("the attempt handed on", lambda: b'"submitted"' in (run_dir / "journal.jsonl").read_bytes()
             if (run_dir / "journal.jsonl").exists() else False)
    disk.fill()
    _out, err = proc.communicate(timeout=120)
    # Stopped by the attempt's storage check (exit 3) or by the heartbeat's failed write (exit 1).
    assert proc.returncode in (1, 3) and ("no task was decided by it" in err or "writable again" in err), err
    disk.free()
    resumed = subprocess.run([sealbench_exe(), "run", str(contract), "--resume", str(run_dir), "--no-progress"],
                             capture_output=True, text=True, timeout=300)
    events = check_run(run_dir, max_attempts=1, ids=(task,))
    assert [e["attempt"] for e in events if e["kind"] == "attempt_started"] == [1]  # used, never given back
    (ended,) = [e["payload"] for e in events if e["kind"] == "task_finished"]
    assert ended["outcome"] == "infra_error", ended
    assert "attempt 1 was interrupted" in ended["error"], ended
    assert resumed.returncode == 3 and "infrastructure errors in 1 task(s)" in resumed.stderr, resumed.stderr
    assert "not decided by the agent: attempt 1 of 1 was interrupted" in resumed.stdout, resumed.stdout
    code, out, err = cli("score", contract, run_dir)
    assert code == 3 and "no rate emitted" in err and "infra_error" in out, (out, err)
