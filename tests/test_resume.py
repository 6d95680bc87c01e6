"""Crash and resume: kill -9 anywhere loses no event and never grants an attempt back."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import make_contract, rewrite_journal
from sealbench.consistency import journal_contradictions
from sealbench.contract import load_contract
from sealbench.derive import derive
from sealbench.errors import RunRefusal
from sealbench.journal import read_chain
from sealbench.runner import RunOptions, execute

IDS = ("t_03_rename_helper", "t_11_fix_off_by_one")
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"
AGENT = ("sh -c 'sleep 0.15; if [ \"$SEALBENCH_ATTEMPT\" = 1 ]; then echo \"def last_n(i, n): return []\" > window.py; "
         "else printf " + json.dumps(FIX).replace("'", "") + " > window.py; fi'")


def sealbench_exe() -> str:
    exe = Path(sys.executable).parent / "sealbench"
    return str(exe) if exe.exists() else ""


def complete_lines(data: bytes) -> bytes:
    return data[: data.rfind(b"\n") + 1] if b"\n" in data else b""


def check_run(run_dir: Path, max_attempts: int, ids: tuple[str, ...] = IDS) -> list[dict[str, Any]]:
    report = read_chain(run_dir / "journal.jsonl")
    assert report.problems == [] and report.torn_tail == b""
    events = report.events
    started = Counter((e["task_id"], e["attempt"]) for e in events if e["kind"] == "attempt_started")
    assert all(n == 1 for n in started.values()), started
    for tid in ids:
        attempts = [a for (t, a) in started if t == tid]
        assert len(attempts) <= max_attempts and max(attempts, default=0) <= max_attempts
        assert sum(1 for e in events if e["kind"] == "task_finished" and e["task_id"] == tid) == 1
    derived = derive(events, ids)
    for rel, data in derived.files.items():
        assert (run_dir / rel).read_bytes() == data, rel
    # What verify checks of a bundle holds after any kill and resume.
    assert journal_contradictions(events, load_contract(run_dir / "scoring_contract.json")) == []
    return events


@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_kill_9_at_20_random_points_then_resume(sealed_pack: Path, tmp_path: Path) -> None:
    rng = random.Random(20261130)
    interrupted = 0
    for i in range(20):
        # One run per locked run_id: each kill point runs its own contract.
        contract_file = tmp_path / f"c{i}.json"
        make_contract(sealed_pack, contract_file, task_ids=IDS, command=AGENT, run_id=f"kill9-{i}")
        run_dir = tmp_path / f"run{i}"
        proc = subprocess.Popen([sealbench_exe(), "run", str(contract_file), "--out", str(run_dir), "--no-progress",
                                 "--jobs", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.4, 3.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        journal = run_dir / "journal.jsonl"
        before = complete_lines(journal.read_bytes()) if journal.exists() else b""
        if journal.exists():
            execute(contract_file, run_dir, RunOptions(progress=False, resume=True, jobs=2))
        else:
            execute(contract_file, run_dir, RunOptions(progress=False, jobs=2))
        after = journal.read_bytes()
        assert after.startswith(before), f"kill point {i}: events written before the kill were lost"
        events = check_run(run_dir, max_attempts=2)
        if any(e["kind"] == "run_resumed" for e in events):
            interrupted += 1
    assert interrupted >= 10, f"only {interrupted} of 20 kills landed mid-run"


def test_resume_counts_an_open_attempt_as_used(sealed_pack: Path, tmp_path: Path) -> None:
    """A run stopped mid-attempt 1 resumes at attempt 2: the open attempt is not given back."""
    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=IDS[1:], command=AGENT, run_id="open", max_attempts=2)
    run_dir = tmp_path / "run"

    class Stop(BaseException):  # not an Exception: the harness must not record it as its own failure
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
    execute(contract_file, run_dir, RunOptions(progress=False, resume=True))
    events = check_run(run_dir, max_attempts=2, ids=IDS[1:])
    kinds = [(e["kind"], e["attempt"]) for e in events if e["task_id"] == IDS[1]]
    assert ("attempt_interrupted", 1) in kinds
    assert [a for k, a in kinds if k == "attempt_started"] == [1, 2]
    card = json.loads((run_dir / "scorecards.jsonl").read_text())
    assert card["attempts_used"] == 2 and card["first_attempt_passed"] is False


def test_resume_with_a_different_contract_is_refused(sealed_pack: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    make_contract(sealed_pack, a, task_ids=IDS[1:], command="builtin:noop", run_id="a")
    make_contract(sealed_pack, b, task_ids=IDS[1:], command="builtin:noop", run_id="b")
    execute(a, tmp_path / "run", RunOptions(progress=False))
    with pytest.raises(RunRefusal, match="cannot resume: the journal's contract_sha256"):
        execute(b, tmp_path / "run", RunOptions(progress=False, resume=True))


def test_resume_with_a_different_agent_is_refused(sealed_pack: Path, tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    make_contract(sealed_pack, a, task_ids=IDS[1:], command="builtin:noop", run_id="a")
    execute(a, tmp_path / "run", RunOptions(progress=False))
    with pytest.raises(RunRefusal, match="different agent"):
        execute(a, tmp_path / "run", RunOptions(progress=False, resume=True), python_agent=lambda t, w, n: None)


def test_resuming_a_finished_run_changes_nothing_derived(sealed_pack: Path, tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    make_contract(sealed_pack, a, task_ids=IDS, command="builtin:reference", run_id="a")
    execute(a, tmp_path / "run", RunOptions(progress=False))
    before = (tmp_path / "run" / "scorecards.jsonl").read_bytes()
    execute(a, tmp_path / "run", RunOptions(progress=False, resume=True))
    assert (tmp_path / "run" / "scorecards.jsonl").read_bytes() == before


def test_rederiving_from_the_journal_reproduces_files_byte_for_byte(sealed_pack: Path, tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    make_contract(sealed_pack, a, task_ids=IDS, command=AGENT, run_id="a")
    execute(a, tmp_path / "run", RunOptions(progress=False))
    check_run(tmp_path / "run", max_attempts=2)
    traces = sorted(p.name for p in (tmp_path / "run" / "traces").iterdir())
    assert traces == [f"{t}.json" for t in IDS]


@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_ctrl_c_stops_cleanly_records_it_and_resume_continues(sealed_pack: Path, tmp_path: Path) -> None:
    ids = tuple(sorted(p.name for p in (sealed_pack / "tasks").iterdir()))
    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=ids, command="sh -c 'sleep 1'", run_id="ctrlc")
    run_dir = tmp_path / "run"
    # A background job of a non-interactive shell (how CI may start us) inherits SIGINT
    # ignored, and Python then leaves it ignored; a user's Ctrl-C reaches a default handler.
    proc = subprocess.Popen([sealbench_exe(), "run", str(contract_file), "--out", str(run_dir), "--no-progress",
                             "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # Once its first attempt has started (a fixed sleep raced the start on a busy machine).
    journal = run_dir / "journal.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (journal.is_file() and b'"attempt_started"' in journal.read_bytes()):
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert f"--resume {run_dir}" in err
    events = read_chain(run_dir / "journal.jsonl").events
    assert any(e["kind"] == "run_interrupted" for e in events)
    assert not all(any(e["kind"] == "task_finished" and e["task_id"] == t for e in events) for t in ids)
    execute(contract_file, run_dir, RunOptions(progress=False, resume=True))
    events = read_chain(run_dir / "journal.jsonl").events
    finished = [e["task_id"] for e in events if e["kind"] == "task_finished"]
    assert sorted(finished) == sorted(ids)
    assert events[-1]["kind"] == "run_finished"


def test_a_run_records_its_derivation_version_and_resumes_only_under_it(sealed_pack: Path, tmp_path: Path) -> None:
    # A run started by one release and resumed by a release deriving under other rules would
    # hold files derived by two sets of rules; it is refused, naming both versions.
    from sealbench.derive import DERIVATION_VERSION

    a = tmp_path / "a.json"
    make_contract(sealed_pack, a, task_ids=IDS[1:], command="builtin:noop", run_id="a")
    run_dir = tmp_path / "run"
    execute(a, run_dir, RunOptions(progress=False))
    journal = run_dir / "journal.jsonl"
    events = read_chain(journal).events
    assert events[0]["kind"] == "run_started" and events[0]["payload"]["derivation_version"] == DERIVATION_VERSION
    events[0]["payload"]["derivation_version"] = DERIVATION_VERSION + 1
    rewrite_journal(journal, events)
    with pytest.raises(RunRefusal, match=f"rules version {DERIVATION_VERSION + 1}.*derives under version "
                                         f"{DERIVATION_VERSION}"):
        execute(a, run_dir, RunOptions(progress=False, resume=True))


def stop_during_the_last_attempt(contract_file: Path, run_dir: Path, *, settle_s: float = 1.5) -> None:
    """Start ``sealbench run`` and SIGKILL it while its one task's last attempt runs (after the
    agent had ``settle_s`` to write its answer)."""
    proc = subprocess.Popen([sealbench_exe(), "run", str(contract_file), "--out", str(run_dir), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = run_dir / "journal.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (journal.is_file() and b'"submitted"' in journal.read_bytes()):
        time.sleep(0.05)
    time.sleep(settle_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


# Writes the right answer at once, then waits far longer than a test: only a kill ends it.
RIGHT_THEN_WAITS = "sh -c 'printf " + json.dumps(FIX).replace("'", "") + " > window.py; sleep 60'"


@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_kill_9_during_the_last_attempt_is_an_infrastructure_error_after_resume(
        sealed_pack: Path, tmp_path: Path, cli: Any) -> None:
    # The agent had written the right answer when the runner was killed; after resume the task
    # was its fail "(after 1 of 1 attempts)" and score printed a rate. The attempt stays used.
    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=IDS[1:], command=RIGHT_THEN_WAITS, run_id="kill-last",
                  max_attempts=1, wall_clock_s=120)
    run_dir = tmp_path / "run"
    stop_during_the_last_attempt(contract_file, run_dir)
    execute(contract_file, run_dir, RunOptions(progress=False, resume=True))
    events = check_run(run_dir, max_attempts=1, ids=IDS[1:])
    assert [e["attempt"] for e in events if e["kind"] == "attempt_started"] == [1]  # no free retry
    (ended,) = [e["payload"] for e in events if e["kind"] == "task_finished"]
    assert ended["outcome"] == "infra_error" and ended["attempts_used"] == 1
    assert "attempt 1 was interrupted (the runner stopped mid-attempt)" in ended["error"]
    code, out, err = cli("score", contract_file, run_dir)
    assert code == 3 and "infrastructure errors in 1 task(s)" in err and "no rate emitted" in err, (out, err)
    assert "not decided by the agent: attempt 1 of 1 was interrupted (the runner stopped mid-attempt)" in out
    code, out, _ = cli("show", run_dir)
    assert code == 0 and "not decided by the agent" in out, out
    code, out, err = cli("report", run_dir, "--out", tmp_path / "report")
    assert code == 0, err
    assert "not decided by the agent" in (tmp_path / "report" / "report.md").read_text()
    code, _, err = cli("bundle", run_dir, "--out", tmp_path / "bundles")
    assert code == 3 and "infrastructure errors" in err, err


@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_kill_9_during_the_last_attempt_of_a_version_4_run_keeps_that_version_s_fail(
        sealed_pack: Path, tmp_path: Path) -> None:
    # A run started by a release of derivation version 4 and resumed by this one keeps the rules
    # it started under: the task ends as a fail, as it always did, and its bundle verifies.
    from sealbench.bundle import make_bundle, verify_bundle

    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=IDS[1:], command=RIGHT_THEN_WAITS, run_id="kill-last-v4",
                  max_attempts=1, wall_clock_s=120, narration_probe=False)
    run_dir = tmp_path / "run"
    stop_during_the_last_attempt(contract_file, run_dir)
    journal = run_dir / "journal.jsonl"
    events = read_chain(journal).events
    events[0]["payload"]["derivation_version"] = 4
    rewrite_journal(journal, events)
    execute(contract_file, run_dir, RunOptions(progress=False, resume=True))
    check_run(run_dir, max_attempts=1, ids=IDS[1:])
    card = json.loads((run_dir / "scorecards.jsonl").read_text())
    assert (card["outcome"], card["attempts_used"]) == ("fail", 1)
    # Nor does its resume write version 5's words: no continuation in its header.
    resumed = [e["payload"] for e in read_chain(journal).events if e["kind"] == "run_resumed"]
    assert resumed and all("continuation" not in p and "moved_from" not in p for p in resumed)
    report = verify_bundle(make_bundle(run_dir, tmp_path / "bundles"))
    assert (report.rate.n, report.rate.task_pass_count) == (1, 0)
