"""The time each unfinished task has used, from a journal alone: honest charges across crashes.

A journal is a sequence of *sessions*, one per runner process; each begins with the
``run_started``, ``run_resumed`` or ``journal_repaired`` line that process wrote first. A task
that was running when a session ended is charged, once, for its time in that session; the
resuming process journals each charge as a ``time_charged`` line naming the session, so a
charge is decided once and can be audited. What is charged (version 2 sessions, whose lines
carry ``mono_ms`` and ``boot_id``, :mod:`sealbench.clock`):

* from the task's first line in the session to its last, when the task ran nothing after its
  last line (it had just started, finished an attempt with nothing to run before the next,
  or had its feedback written): the monotonic difference, exact;
* otherwise (an agent, its grading or its visible tests may have been running when the
  session ended), to the session's last line plus the session's heartbeat lease, the bound
  the runner keeps by ending itself when its journal goes silent for longer;
* the whole remaining budget when that bound cannot be known: the machine restarted since
  (another boot id: heartbeats are written, not fsynced, and a restart may lose them), the
  session's clock lines are odd (more than one boot id, a monotonic time going back, one
  missing), or the session did not record its lease.

Every charge is capped by the budget that remained when the session began, so a task's
elapsed time never exceeds its cap through charges, and the runner's deadline on resume
(the cap less every charge) keeps an agent from running longer than the cap across any
number of crashes. Wall-clock times are never used: a clock step charges nothing.

Version 1 sessions (older releases) kept their own rule: each finished attempt's
``elapsed_ms`` and each ``attempt_interrupted`` line's ``charged_s``; an attempt they left
open without such a line is charged the whole remaining budget (they wrote no heartbeat).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from .outcomes import AttemptResult

SESSION_START = ev.SESSION_START
# Lines a resuming process writes about an earlier session: not activity of the task.
BOOKKEEPING = (ev.AttemptInterrupted, ev.TimeCharged)
WHOLE = "whole remaining budget"


@dataclass(frozen=True)
class Charge:
    """One task's time in one ended session, decided on resume and journaled as ``time_charged``."""

    task_id: str
    session_seq: int
    charged_s: float
    basis: str

    def event(self) -> ev.TimeCharged:
        """The ``time_charged`` event that journals this charge."""
        return ev.TimeCharged(task_id=self.task_id, session_seq=self.session_seq, charged_s=self.charged_s,
                              basis=self.basis)


@dataclass(frozen=True)
class TimeUsed:
    """Seconds each unfinished task has used, and the charges still to journal."""

    used_s: dict[str, float]
    new_charges: list[Charge]


@dataclass
class _Session:
    first_seq: int
    events: list[ev.Line] = field(default_factory=list)

    @property
    def legacy(self) -> bool:
        return not any(line.has_clock for line in self.events)

    def lease_ms(self) -> int | None:
        for line in self.events:
            if isinstance(line.event, ev.HEADERS):
                lease = line.event.lease_ms
                return lease if lease is not None and lease > 0 else None
        return None

    def clock_problem(self) -> str | None:
        """Why this session's monotonic times cannot be compared, or None."""
        boots = {line.boot_id for line in self.events}
        if len(boots) != 1:
            return "its lines name more than one boot"
        last = -1
        for line in self.events:
            mono = line.mono_ms
            if mono is None:
                return f"seq {line.seq} has no monotonic time"
            if mono < last:
                return f"its monotonic time goes back at seq {line.seq}"
            last = mono
        return None


def sessions(events: Iterable[Any]) -> list[_Session]:
    """The journal's events (typed lines, or lines as parsed) cut at every line a new runner
    process wrote first.

    Raises:
        EventError: a line whose event this release does not read.
    """
    out: list[_Session] = []
    for line in ev.lines(events):
        if not out or isinstance(line.event, SESSION_START):
            out.append(_Session(line.seq))
        out[-1].events.append(line)
    return out


def _quiet_after(line: ev.Line, max_attempts: int | None, feedback_runs_code: bool) -> bool:
    """True when nothing of the task ran after ``line`` until its next line."""
    event = line.event
    if isinstance(event, (ev.TaskStarted, ev.Feedback, ev.HarnessFailed)):
        return True
    if not isinstance(event, ev.AttemptFinished):
        return False
    if event.result != AttemptResult.FAIL:
        return True  # task_finished comes next
    # After a failed attempt only visible-test feedback runs code (the workspace's own tests).
    return not feedback_runs_code or (max_attempts is not None and (event.attempt or 0) >= max_attempts)


def time_used(events: Sequence[Any], *, boot_id: str | None, cap_s: float,
              feedback_runs_code: bool) -> TimeUsed:
    """What each unfinished task of a journal has used, and the charges a resume must journal.

    ``events`` are typed lines (or lines as parsed); ``boot_id`` is the resuming process's
    boot; ``cap_s`` the task's wall-clock cap; ``feedback_runs_code`` whether the budget's
    feedback runs visible tests between attempts.

    Raises:
        EventError: a line whose event this release does not read.
    """
    lines = list(ev.lines(events))
    # Whole milliseconds throughout, so that charges adding up to the cap never pass it.
    cap = round(cap_s * 1000)
    finished = {line.task_id for line in lines if isinstance(line.event, ev.TaskFinished)}
    journaled: dict[tuple[str | None, int | None], int] = {}
    legacy_closed: set[tuple[str | None, int | None]] = set()
    max_attempts: dict[str | None, int | None] = {}
    for line in lines:
        event, tid = line.event, line.task_id
        if isinstance(event, ev.TimeCharged):
            journaled[(tid, event.session_seq)] = _ms(event.charged_s)
        elif isinstance(event, ev.AttemptInterrupted) and event.charged_s is not None:
            legacy_closed.add((tid, event.attempt))
        elif isinstance(event, ev.TaskStarted):
            max_attempts[tid] = event.max_attempts
    used: dict[str, int] = {}
    new: list[Charge] = []
    for session in sessions(lines):
        by_task: dict[str, list[ev.Line]] = {}
        for line in session.events:
            tid = line.task_id
            if tid is not None and tid not in finished:
                by_task.setdefault(tid, []).append(line)
        for tid, task_events in by_task.items():
            if session.legacy:
                used[tid] = used.get(tid, 0) + _legacy_used_ms(task_events)
                opened = _left_open(task_events)
                if opened is None or (tid, opened) in legacy_closed:
                    continue
            elif all(isinstance(line.event, BOOKKEEPING) for line in task_events):
                continue
            if (tid, session.first_seq) in journaled:
                used[tid] = used.get(tid, 0) + journaled[(tid, session.first_seq)]
                continue
            remaining = max(0, cap - used.get(tid, 0))
            if session.legacy:
                charged, basis = remaining, f"{WHOLE}: an older release wrote this session without heartbeats"
            else:
                activity = [line for line in task_events if not isinstance(line.event, BOOKKEEPING)]
                charged, basis = _charge(session, activity, remaining, boot_id, max_attempts.get(tid),
                                         feedback_runs_code)
            used[tid] = used.get(tid, 0) + charged
            new.append(Charge(tid, session.first_seq, charged / 1000, basis))
    return TimeUsed({tid: ms / 1000 for tid, ms in used.items()}, new)


def _ms(seconds: Any) -> int:
    return round(float(seconds) * 1000)


def _charge(session: _Session, activity: list[ev.Line], remaining: int, boot_id: str | None,
            max_attempts: int | None, feedback_runs_code: bool) -> tuple[int, str]:
    """Milliseconds to charge one task for ``session``, and why."""
    problem = session.clock_problem()
    if problem is not None:
        return remaining, f"{WHOLE}: the session's clock cannot be trusted ({problem})"
    start = activity[0].mono_ms or 0
    last = activity[-1]
    if _quiet_after(last, max_attempts, feedback_runs_code):
        spent = (last.mono_ms or 0) - start
        basis = "the task's first to its last line of the session, monotonic clock (nothing ran after it)"
    else:
        lease = session.lease_ms()
        session_boot = session.events[0].boot_id
        if lease is None:
            return remaining, f"{WHOLE}: the session recorded no heartbeat lease"
        if session_boot is None or boot_id is None:
            return remaining, f"{WHOLE}: the boot could not be identified, so the session's last lines may be lost"
        if session_boot != boot_id:
            return remaining, f"{WHOLE}: the machine restarted since the session (another boot id): its last lines may be lost"
        spent = (session.events[-1].mono_ms or 0) + lease - start
        basis = (f"the task's first line to the session's last line plus its {lease} ms heartbeat lease, "
                 f"monotonic clock (the runner ends itself before an agent can run longer)")
    if spent >= remaining:
        return remaining, f"{WHOLE}: {basis} reaches the cap"
    return max(0, spent), basis


def _legacy_used_ms(task_events: Sequence[ev.Line]) -> int:
    total = 0
    for line in task_events:
        event = line.event
        if isinstance(event, ev.AttemptFinished):
            total += int(event.elapsed_ms or 0)
        elif isinstance(event, ev.AttemptInterrupted):
            total += _ms(event.charged_s or 0.0)
    return total


def _left_open(task_events: Sequence[ev.Line]) -> int | None:
    """The attempt a version 1 session started and never finished, if any."""
    open_attempt: int | None = None
    for line in task_events:
        if isinstance(line.event, ev.AttemptStarted):
            open_attempt = line.attempt
        elif isinstance(line.event, (ev.AttemptFinished, ev.AttemptInterrupted)) and line.attempt == open_attempt:
            open_attempt = None
    return open_attempt
