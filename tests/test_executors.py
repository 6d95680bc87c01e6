"""The coordinator against executors that go wrong: results delivered twice, late (after a
cancel), or never (a lost worker). Each is journaled, no attempt is counted twice, none goes
over the cap, and the run ends with the outcomes the existing rules give.

The attempts are real (the built-in agents, graded by the sample pack's hidden tests); the
executor is the local pool behind a fake that tampers with what it delivers; the sandbox is
the test-only ``fake`` backend, so these run where bubblewrap cannot.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import make_contract, rewrite_journal, task_ids
from sealbench import coordinator
from sealbench.attempt import AttemptSpec
from sealbench.bundle import make_bundle, verify_bundle
from sealbench.compare import compare
from sealbench.consistency import journal_contradictions
from sealbench.contract import load_contract
from sealbench.executors import Delivery, Handle, LocalExecutor
from sealbench.journal import read_chain
from sealbench.runner import RunOptions, execute
from sealbench.settings import Settings

TASK = "t_11_fix_off_by_one"
OTHER = "t_03_rename_helper"


class FakeExecutor:
    """The local pool, with its deliveries tampered with per (task, attempt):

    ``twice``: delivered twice; ``lost``: reported lost (its worker died); ``late``: held until
    the coordinator cancels the attempt, then delivered.
    """

    def __init__(self, settings: Settings, jobs: int, faults: dict[tuple[str, int], str]) -> None:
        self.inner = LocalExecutor(settings, jobs)
        self.faults = faults
        self.held: dict[Handle, Delivery] = {}
        self.released: list[Delivery] = []
        self.cancelled: set[Handle] = set()
        self.submitted: Counter[tuple[str, int]] = Counter()

    def warm(self, spec: AttemptSpec) -> None:
        self.inner.warm(spec)

    def ready(self, spec: AttemptSpec) -> bool:
        return self.inner.ready(spec)

    def node_of(self, spec: AttemptSpec) -> str | None:
        return None

    def submit(self, spec: AttemptSpec) -> Handle:
        self.submitted[spec.key] += 1
        return self.inner.submit(spec)

    def wait(self, timeout_s: float) -> list[Delivery]:
        out, self.released = self.released, []
        for d in self.inner.wait(0 if out else timeout_s):
            fault = self.faults.get((d.handle.task_id, d.handle.attempt))
            if fault == "twice":
                out += [d, d]
            elif fault == "lost":
                out.append(Delivery(d.handle, None, lost="the worker died"))
            elif fault == "late" and d.handle not in self.cancelled:
                self.held[d.handle] = d
            else:
                out.append(d)
        return out

    def cancel(self, handle: Handle, reason: str) -> None:
        self.cancelled.add(handle)
        self.inner.cancel(handle, reason)
        if handle in self.held:
            self.released.append(self.held.pop(handle))

    def wind_down(self) -> None:
        self.inner.wind_down()

    def release(self, task_id: str) -> None:
        self.inner.release(task_id)

    def close(self) -> None:
        self.inner.close()

    @property
    def busy(self) -> bool:
        return self.inner.busy


def run_with(sealed_pack: Path, tmp_path: Path, faults: dict[tuple[str, int], str], *, command: str,
             task_ids: tuple[str, ...] = (TASK,), python_agent: Any = None,
             **contract: Any) -> tuple[Path, list[dict[str, Any]], FakeExecutor]:
    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=task_ids, command=command, run_id="fake-executor",
                  narration_probe=False, **contract)
    made: list[FakeExecutor] = []

    def executor(settings: Settings, jobs: int) -> FakeExecutor:
        made.append(FakeExecutor(settings, jobs, faults))
        return made[0]

    run_dir = tmp_path / "run"
    execute(contract_file, run_dir, RunOptions(progress=False, sandbox="fake", jobs=2, executor=executor),
            python_agent=python_agent)
    report = read_chain(run_dir / "journal.jsonl")
    assert report.problems == []
    events = report.events
    # The story of every task is one the runner could have written, duplicates and all.
    assert journal_contradictions(events, load_contract(run_dir / "scoring_contract.json")) == []
    # No attempt counted twice: one end per attempt, and each attempt started once.
    ends = Counter((e["task_id"], e["attempt"]) for e in events
                   if e["kind"] in ("attempt_finished", "attempt_interrupted"))
    assert all(n == 1 for n in ends.values()), ends
    started = Counter((e["task_id"], e["attempt"]) for e in events if e["kind"] == "attempt_started")
    assert all(n == 1 for n in started.values()), started
    # Journaled "submitted" right after its attempt_started, before the executor had it.
    for i, e in enumerate(events):
        if e["kind"] == "attempt_started":
            assert (events[i + 1]["kind"], events[i + 1]["attempt"]) == ("submitted", e["attempt"])
    assert sum(made[0].submitted.values()) == sum(1 for e in events if e["kind"] == "submitted")
    return run_dir, events, made[0]


def cards_of(run_dir: Path) -> dict[str, dict[str, Any]]:
    import json

    return {c["task_id"]: c for c in map(json.loads, (run_dir / "scorecards.jsonl").read_text().splitlines())}


def duplicates(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["payload"] for e in events if e["kind"] == "duplicate_result"]


def test_a_result_delivered_twice_is_journaled_as_a_duplicate_and_counted_once(sealed_pack: Path,
                                                                             tmp_path: Path) -> None:
    run_dir, events, _ = run_with(sealed_pack, tmp_path, {(TASK, 1): "twice", (OTHER, 1): "twice"},
                                  command="builtin:reference", task_ids=(TASK, OTHER))
    cards = cards_of(run_dir)
    assert {t: (c["outcome"], c["attempts_used"]) for t, c in cards.items()} == {TASK: ("pass", 1), OTHER: ("pass", 1)}
    assert sorted((d["of_task"], d["of_attempt"], d["result"]) for d in duplicates(events)) == [
        (OTHER, 1, "pass"), (TASK, 1, "pass")]
    verify_bundle(make_bundle(run_dir, tmp_path / "bundles"))


def fails_then_fixes(record: dict[str, Any], ws: Path, attempt: int) -> str:
    """Attempt 1 writes a wrong fix, attempt 2 the right one."""
    right = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"
    (ws / "window.py").write_text(right if attempt > 1 else "def last_n(items, n):\n    return []\n")
    return f"attempt {attempt}"


def test_a_second_result_for_a_failed_attempt_is_never_counted_while_the_next_one_runs(
        sealed_pack: Path, tmp_path: Path) -> None:
    # Counted, the second "fail" of attempt 1 would end the task (or start a third attempt)
    # while attempt 2, which passes, is still under way.
    run_dir, events, fake = run_with(sealed_pack, tmp_path, {(TASK, 1): "twice"}, command="builtin:reference",
                                     python_agent=fails_then_fixes, max_attempts=2)
    card = cards_of(run_dir)[TASK]
    assert (card["outcome"], card["attempts_used"], card["first_attempt_passed"]) == ("pass", 2, False)
    assert [(d["of_attempt"], d["result"]) for d in duplicates(events)] == [(1, "fail")]
    assert fake.submitted == Counter({(TASK, 1): 1, (TASK, 2): 1})


def test_a_lost_worker_is_charged_as_interrupted_and_never_a_free_retry(
        sealed_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator, "LOST_GRACE_S", 0.5)  # nothing here may wait on it
    # Attempt 1 lost: it stays used and charged; the task goes on with attempt 2, as a resume would.
    run_dir, events, _ = run_with(sealed_pack, tmp_path, {(TASK, 1): "lost"}, command="builtin:reference",
                                  max_attempts=2, wall_clock_s=10.0)
    (lost,) = [e for e in events if e["kind"] == "attempt_interrupted"]
    assert lost["attempt"] == 1 and "lost" in lost["payload"]["reason"] and lost["payload"]["charged_s"] > 0
    card = cards_of(run_dir)[TASK]
    assert (card["outcome"], card["attempts_used"], card["first_attempt_passed"]) == ("pass", 2, False)


def test_a_lost_worker_on_the_last_attempt_ends_the_task_as_an_infrastructure_error(
        sealed_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The reference passes, but its worker died: it was the agent's fail, and the rate printed.
    monkeypatch.setattr(coordinator, "LOST_GRACE_S", 0.5)  # nothing here may wait on it
    run_dir, events, fake = run_with(sealed_pack, tmp_path, {(TASK, 1): "lost"}, command="builtin:reference",
                                     max_attempts=1, wall_clock_s=10.0)
    card = cards_of(run_dir)[TASK]
    assert (card["outcome"], card["attempts_used"], card["scorecard_complete"]) == ("infra_error", 1, False)
    (ended,) = [e for e in events if e["kind"] == "task_finished"]
    assert "attempt 1 was interrupted (the executor lost the attempt (the worker died))" in ended["payload"]["error"]
    assert fake.submitted == Counter({(TASK, 1): 1})
    assert not [e for e in events if e["kind"] == "attempt_started" and e["attempt"] == 2]


def test_a_result_that_never_comes_is_lost_and_its_late_delivery_is_never_counted(
        sealed_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The executor holds the reference's pass until the coordinator gives up on it and cancels:
    # the attempt is lost (interrupted, charged), and the pass that comes after is a duplicate.
    monkeypatch.setattr(coordinator, "LOST_GRACE_S", 0.2)
    run_dir, events, fake = run_with(sealed_pack, tmp_path, {(TASK, 1): "late"}, command="builtin:reference",
                                     max_attempts=1, wall_clock_s=2.0)
    assert fake.cancelled and not fake.held
    card = cards_of(run_dir)[TASK]
    assert (card["outcome"], card["attempts_used"], card["passed"]) == ("infra_error", 1, False)
    (late,) = duplicates(events)
    assert (late["of_task"], late["of_attempt"], late["result"]) == (TASK, 1, "pass")
    (interrupted,) = [e for e in events if e["kind"] == "attempt_interrupted"]
    assert interrupted["payload"]["charged_s"] >= 2.0


def test_runs_bundles_and_compare_work_on_the_fake_sandbox(sealed_pack: Path, tmp_path: Path) -> None:
    bundles = []
    for name, command in (("ref", "builtin:reference"), ("noop", "builtin:noop")):
        contract_file = tmp_path / f"{name}.json"
        make_contract(sealed_pack, contract_file, task_ids=(TASK, OTHER), command=command, run_id=f"fake-{name}",
                      narration_probe=False)
        result = execute(contract_file, tmp_path / name, RunOptions(progress=False, sandbox="fake"))
        assert result.complete and result.isolation == "in-process"
        bundles.append(make_bundle(tmp_path / name, tmp_path / "bundles"))
    (pair,) = compare(bundles).pairs
    assert (pair.b, pair.c, pair.n) == (2, 0, 2)


def test_a_run_stopped_after_submitted_resumes_with_that_attempt_used(sealed_pack: Path, tmp_path: Path) -> None:
    """The runner dies once the attempt is submitted: resume charges it and goes on at attempt 2."""
    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=(TASK,), command="builtin:reference", run_id="cut",
                  narration_probe=False, max_attempts=2)
    run_dir = tmp_path / "run"

    class Stop(BaseException):  # not an Exception: the harness must not record it as its own failure
        pass

    def stop_once_submitted(journal: Any) -> None:
        original = journal.append

        def append(event: Any, **kw: Any) -> dict[str, Any]:
            line = original(event, **kw)
            if event.kind == "submitted":
                raise Stop
            return line

        journal.append = append

    with pytest.raises(Stop):
        execute(contract_file, run_dir, RunOptions(progress=False, sandbox="fake"), on_started=stop_once_submitted)
    execute(contract_file, run_dir, RunOptions(progress=False, sandbox="fake", resume=True))
    events = read_chain(run_dir / "journal.jsonl").events
    assert journal_contradictions(events, load_contract(run_dir / "scoring_contract.json")) == []
    kinds = [(e["kind"], e["attempt"]) for e in events if e["task_id"] == TASK]
    assert kinds.index(("submitted", 1)) < kinds.index(("attempt_interrupted", 1)) < kinds.index(("attempt_started", 2))
    card = cards_of(run_dir)[TASK]
    assert (card["outcome"], card["attempts_used"], card["first_attempt_passed"]) == ("pass", 2, False)


def test_a_version_1_run_resumed_by_this_release_gets_no_line_its_release_cannot_read(
        sealed_pack: Path, tmp_path: Path) -> None:
    """A run started under derivation version 1 is continued in its own vocabulary: no
    ``submitted`` line, so the release that started it still reads and verifies it whole."""
    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=(TASK, OTHER), command="builtin:reference", run_id="v1",
                  narration_probe=False)
    run_dir = tmp_path / "run"

    class Stop(BaseException):
        pass

    def stop_at_the_first_task(journal: Any) -> None:
        original = journal.append

        def append(event: Any, **kw: Any) -> dict[str, Any]:
            if event.kind == "task_started":
                raise Stop
            return original(event, **kw)

        journal.append = append

    with pytest.raises(Stop):
        execute(contract_file, run_dir, RunOptions(progress=False, sandbox="fake"), on_started=stop_at_the_first_task)
    journal = run_dir / "journal.jsonl"
    events = read_chain(journal).events
    events[0]["payload"]["derivation_version"] = 1
    rewrite_journal(journal, events)
    execute(contract_file, run_dir, RunOptions(progress=False, sandbox="fake", resume=True))
    events = read_chain(journal).events
    assert [e["payload"].get("derivation_version") for e in events if e["kind"] in ("run_started", "run_resumed")] \
        == [1, 1]
    assert not [e for e in events if e["kind"] in ("submitted", "duplicate_result")]
    assert {c["outcome"] for c in cards_of(run_dir).values()} == {"pass"}
    verify_bundle(make_bundle(run_dir, tmp_path / "bundles"))


def test_attempts_of_a_run_of_many_agents_run_on_threads_below_the_runner_s_priority(sealed_pack: Path, tmp_path: Path) -> None:
    # The journal's heartbeat and watchdog (threads of the runner itself) must win the CPU over
    # hundreds of attempts setting up at once; a built-in agent runs on the attempt's thread.
    import os
    import threading

    from sealbench.agents import _BUILTINS, register_builtin
    from sealbench.executors import WORKER_NICENESS
    from sealbench.sandbox import YIELD_ABOVE_JOBS

    def probe(task: Any, workspace: Path, attempt: int) -> dict[str, Any]:
        return {"nice": os.getpriority(os.PRIO_PROCESS, threading.get_native_id())}

    register_builtin("nice-probe", probe)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        for jobs, nice in ((YIELD_ABOVE_JOBS + 1, min(19, base + WORKER_NICENESS)), (YIELD_ABOVE_JOBS, base)):
            make_contract(sealed_pack, tmp_path / f"c{jobs}.json", task_ids=["t_11_fix_off_by_one"],
                          command="builtin:nice-probe", run_id=f"nice-probe-{jobs}", narration_probe=False,
                          sandbox_caps={"workspace_bytes": 4 << 20, "tmp_bytes": 2 << 20})
            execute(tmp_path / f"c{jobs}.json", tmp_path / f"run{jobs}", RunOptions(progress=False, jobs=jobs))
            finished = [e for e in read_chain(tmp_path / f"run{jobs}" / "journal.jsonl").events
                        if e["kind"] == "agent_finished"]
            assert finished[0]["payload"]["action"] == {"nice": nice}, jobs
    finally:
        _BUILTINS.pop("nice-probe", None)


def test_the_first_line_is_the_run_s_start_however_long_the_executor_took_to_set_up(
        sealed_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's begin (here a slow executor) can outlast the heartbeat's interval; the
    heartbeat, once started, writes at once, and it must never be the journal's first line
    (bundle and resume read a journal only from its run_started)."""
    import time

    from sealbench.clock import HEARTBEAT_MS, Heartbeat

    started = Heartbeat.start

    def start_and_dawdle(self: Heartbeat) -> Heartbeat:
        out = started(self)
        time.sleep(0.3)  # what a loaded machine does to the thread that started it
        return out

    monkeypatch.setattr(Heartbeat, "start", start_and_dawdle)
    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=(TASK,), command="builtin:reference", run_id="slow-start",
                  narration_probe=False)

    def slow_executor(settings: Settings, jobs: int) -> FakeExecutor:
        time.sleep(HEARTBEAT_MS / 1000 + 0.2)
        return FakeExecutor(settings, jobs, {})

    run_dir = tmp_path / "run"
    execute(contract_file, run_dir, RunOptions(progress=False, sandbox="fake", executor=slow_executor))
    events = read_chain(run_dir / "journal.jsonl").events
    assert events[0]["kind"] == "run_started"
    make_bundle(run_dir, tmp_path / "bundles")


def test_one_task_more_than_jobs_is_set_up_ahead_while_the_first_tasks_run(sealed_pack: Path, tmp_path: Path) -> None:
    """At --jobs 2 the coordinator starts two tasks and asks for the next three to be set up before
    it first waits: with only --jobs set up ahead, a task whose set-up ran long stalled the run."""
    ids = task_ids(sealed_pack)
    assert len(ids) == 5
    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=ids, command="builtin:reference", run_id="ahead",
                  narration_probe=False)
    log: list[tuple[str, str]] = []

    class Recording(FakeExecutor):
        def warm(self, spec: AttemptSpec) -> None:
            log.append(("warm", spec.task.task_id))
            super().warm(spec)

        def submit(self, spec: AttemptSpec) -> Handle:
            log.append(("submit", spec.task.task_id))
            return super().submit(spec)

        def wait(self, timeout_s: float) -> list[Delivery]:
            log.append(("wait", ""))
            return super().wait(timeout_s)

    result = execute(contract_file, tmp_path / "run", RunOptions(progress=False, sandbox="fake", jobs=2,
                                                                 executor=lambda s, j: Recording(s, j, {})))
    assert result.complete
    first = log[:log.index(("wait", ""))]
    started = [tid for kind, tid in first if kind == "submit"]
    warmed = [tid for kind, tid in first if kind == "warm"]
    assert started == list(ids[:2])
    assert warmed == list(ids[2:5])
    # Every task was set up ahead once at most (a second attempt is not set up ahead), and each ran.
    assert Counter(tid for kind, tid in log if kind == "warm") == Counter(ids[2:])
    assert {tid for kind, tid in log if kind == "submit"} == set(ids)
