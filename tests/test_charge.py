"""Charges from a journal alone: never below what the journal proves ran, never past the cap,
never from the wall clock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sealbench.charge import sessions, time_used

BOOT = "11111111-1111-4111-8111-111111111111"
OTHER = "22222222-2222-4222-8222-222222222222"
CAP = 60.0


class Log:
    """A journal's events as the runner writes them, with the clocks set by hand."""

    def __init__(self, *, version: int = 2, boot: str | None = BOOT) -> None:
        self.events: list[dict[str, Any]] = []
        self.version = version
        self.boot = boot
        self.mono = 1_000_000

    def add(self, kind: str, task_id: str | None = None, attempt: int | None = None, *, at_ms: int = 0,
            **payload: Any) -> Log:
        self.mono += at_ms
        ev: dict[str, Any] = {"journal_version": self.version, "seq": len(self.events), "kind": kind,
                              "time": "2026-12-01T00:00:00.000Z", "task_id": task_id, "attempt": attempt,
                              "payload": payload, "prev": None, "hash": ""}
        if self.version == 2:
            ev["mono_ms"] = self.mono
            ev["boot_id"] = self.boot
        self.events.append(ev)
        return self

    def start(self, kind: str = "run_started", *, at_ms: int = 0) -> Log:
        return self.add(kind, at_ms=at_ms, **({"lease_ms": 2000} if self.version == 2 else {}))


def used(log: Log, *, boot: str | None = BOOT, feedback_runs_code: bool = False) -> tuple[float, list[Any]]:
    out = time_used(log.events, boot_id=boot, cap_s=CAP, feedback_runs_code=feedback_runs_code)
    return out.used_s.get("t", 0.0), out.new_charges


def open_attempt(log: Log) -> Log:
    """A task 3 s into its first attempt, then 1.5 s of other lines before the runner dies."""
    log.start().add("task_started", "t", max_attempts=2, wall_clock_s=CAP)
    log.add("attempt_started", "t", 1, at_ms=10, budget_s=CAP)
    return log.add("heartbeat", at_ms=3000).add("heartbeat", at_ms=1500)


def test_an_open_attempt_is_charged_to_the_sessions_last_line_plus_the_lease() -> None:
    seconds, (charge,) = used(open_attempt(Log()))
    assert seconds == charge.charged_s == (10 + 3000 + 1500 + 2000) / 1000
    assert charge.session_seq == 0 and "lease" in charge.basis


def test_a_task_at_rest_is_charged_exactly_its_first_to_last_line() -> None:
    log = Log().start().add("task_started", "t", max_attempts=2, wall_clock_s=CAP)
    log.add("attempt_started", "t", 1, at_ms=5).add("attempt_finished", "t", 1, at_ms=4000, result="fail",
                                                      elapsed_ms=4000)
    log.add("heartbeat", at_ms=9000)  # the task rested (Ctrl-C, or waiting for its slot) until the end
    seconds, (charge,) = used(log)
    assert seconds == 4.005 and "nothing ran after it" in charge.basis


def test_visible_test_feedback_after_a_failed_attempt_is_not_rest() -> None:
    log = Log().start().add("task_started", "t", max_attempts=2, wall_clock_s=CAP)
    log.add("attempt_started", "t", 1).add("attempt_finished", "t", 1, at_ms=1000, result="fail", elapsed_ms=1000)
    log.add("heartbeat", at_ms=3000)
    seconds, _ = used(log, feedback_runs_code=True)
    assert seconds == (1000 + 3000 + 2000) / 1000


def test_another_boot_charges_the_whole_remaining_budget() -> None:
    seconds, (charge,) = used(open_attempt(Log()), boot=OTHER)
    assert seconds == CAP and "another boot id" in charge.basis


def test_an_unknown_boot_charges_the_whole_remaining_budget() -> None:
    assert used(open_attempt(Log(boot=None)), boot=None)[0] == CAP
    assert used(open_attempt(Log()), boot=None)[0] == CAP


def test_a_monotonic_time_going_back_charges_the_whole_remaining_budget() -> None:
    log = open_attempt(Log())
    log.events[-1]["mono_ms"] -= 10_000
    seconds, (charge,) = used(log)
    assert seconds == CAP and "goes back" in charge.basis


def test_two_boots_in_one_session_charge_the_whole_remaining_budget() -> None:
    log = open_attempt(Log())
    log.events[-1]["boot_id"] = OTHER
    assert used(log)[0] == CAP


def test_a_session_without_a_lease_charges_the_whole_remaining_budget() -> None:
    log = open_attempt(Log())
    del log.events[0]["payload"]["lease_ms"]
    assert used(log)[0] == CAP


def test_the_wall_clock_is_never_read() -> None:
    log = open_attempt(Log())
    expected = used(log)[0]
    for i, ev in enumerate(log.events):
        ev["time"] = f"20{30 + i}-01-01T00:00:00.000Z"  # a step of years between lines
    assert used(log)[0] == expected


def test_charges_stop_at_the_cap_across_any_number_of_sessions() -> None:
    log = Log().start().add("task_started", "t", max_attempts=99, wall_clock_s=CAP)
    for attempt in range(1, 30):
        log.add("attempt_started", "t", attempt, at_ms=1).add("heartbeat", at_ms=4000)
        log.start("run_resumed", at_ms=100).add("attempt_interrupted", "t", attempt)
    seconds, charges = used(log)
    assert seconds == CAP
    assert sum(round(c.charged_s * 1000) for c in charges) == CAP * 1000
    assert all(c.charged_s >= 0 for c in charges)


def test_a_journaled_charge_is_read_not_decided_again() -> None:
    log = open_attempt(Log())
    log.start("run_resumed", at_ms=50).add("time_charged", "t", session_seq=0, charged_s=1.25, basis="journaled")
    # The same journal read from another boot: the charge was decided once, on the first resume.
    seconds, charges = used(log, boot=OTHER)
    assert seconds == 1.25 and charges == []


def test_each_session_is_charged_once_and_the_charges_add_up() -> None:
    log = open_attempt(Log())
    log.start("run_resumed", at_ms=50).add("attempt_interrupted", "t", 1)
    log.add("time_charged", "t", session_seq=0, charged_s=6.51, basis="journaled")
    log.add("attempt_started", "t", 2, at_ms=20).add("heartbeat", at_ms=500)
    seconds, (charge,) = used(log)
    assert charge.session_seq == 5 and charge.charged_s == (500 + 2000) / 1000
    assert seconds == 6.51 + charge.charged_s


def test_a_finished_task_is_never_charged() -> None:
    log = open_attempt(Log()).add("task_finished", "t", outcome="timeout")
    assert used(log) == (0.0, [])


def test_an_older_release_open_attempt_is_charged_the_whole_remaining_budget() -> None:
    log = Log(version=1).start().add("task_started", "t", max_attempts=3, wall_clock_s=CAP)
    log.add("attempt_started", "t", 1).add("attempt_finished", "t", 1, result="fail", elapsed_ms=2500)
    log.add("attempt_started", "t", 2)
    seconds, (charge,) = used(log)
    assert seconds == CAP and charge.charged_s == CAP - 2.5 and "older release" in charge.basis


def test_an_older_release_keeps_its_own_charges() -> None:
    log = Log(version=1).start().add("task_started", "t", max_attempts=3, wall_clock_s=CAP)
    log.add("attempt_started", "t", 1)
    log.start("run_resumed").add("attempt_interrupted", "t", 1, reason="stopped", charged_s=1.5)
    log.add("attempt_started", "t", 2).add("attempt_finished", "t", 2, result="fail", elapsed_ms=2000)
    assert used(log) == (3.5, [])


def test_sessions_start_where_a_new_process_wrote_first() -> None:
    log = open_attempt(Log()).add("journal_repaired", torn_bytes=3).start("run_resumed")
    assert [s.first_seq for s in sessions(log.events)] == [0, 5, 6]


# --- properties --------------------------------------------------------------------------

STEPS = st.sampled_from(["attempt", "fail", "pass_later", "heartbeat", "crash"])


def simulate(steps: list[str], gaps: list[int], max_attempts: int) -> Iterator[Log]:
    """A run driven by ``steps``, yielding the journal at every crash (each then resumed)."""
    log = Log().start().add("task_started", "t", max_attempts=max_attempts, wall_clock_s=CAP)
    attempt, running = 0, False
    for step, gap in zip(steps, gaps, strict=False):
        if step == "attempt" and not running and attempt < max_attempts:
            attempt += 1
            running = True
            log.add("attempt_started", "t", attempt, at_ms=gap)
        elif step == "fail" and running:
            running = False
            log.add("attempt_finished", "t", attempt, at_ms=gap, result="fail", elapsed_ms=gap)
        elif step == "heartbeat":
            log.add("heartbeat", at_ms=gap)
        elif step == "crash":
            yield log
            charged = time_used(log.events, boot_id=BOOT, cap_s=CAP, feedback_runs_code=False)
            log.start("run_resumed", at_ms=gap)
            if running:
                log.add("attempt_interrupted", "t", attempt)
                running = False
            for c in charged.new_charges:
                log.add("time_charged", c.task_id, **c.event().payload())
    yield log


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(STEPS, min_size=1, max_size=40), gaps=st.lists(st.integers(0, 9000), min_size=40,
                                                                      max_size=40),
       max_attempts=st.integers(1, 6))
def test_charges_never_fall_below_the_journal_and_never_pass_the_cap(steps: list[str], gaps: list[int],
                                                                     max_attempts: int) -> None:
    for log in simulate(steps, gaps, max_attempts):
        out = time_used(log.events, boot_id=BOOT, cap_s=CAP, feedback_runs_code=False)
        total = out.used_s.get("t", 0.0)
        assert 0.0 <= total <= CAP + 1e-9
        for charge in out.new_charges:
            session = next(s for s in sessions(log.events) if s.first_seq == charge.session_seq)
            mine = [e.raw["mono_ms"] for e in session.events
                    if e.raw["task_id"] == "t" and e.raw["kind"] not in ("time_charged", "attempt_interrupted")]
            remaining = round((CAP - (total - charge.charged_s)) * 1000)
            charged = round(charge.charged_s * 1000)
            assert 0 <= charged <= remaining
            if "nothing ran after it" in charge.basis:
                assert charged == mine[-1] - mine[0]
            else:
                # The task may have run up to the session's last line, and the lease beyond it.
                assert charged == min(session.events[-1].raw["mono_ms"] + 2000 - mine[0], remaining)
