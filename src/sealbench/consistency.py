"""What a journal's events mean: each task's story must be one the runner could have written.

A hash chain shows that nobody edited a journal after it was written, unless the editor
recomputed every hash, which anyone can do. Without a signature a bundle therefore proves
internal consistency only, and this module makes that consistency mean something: per task,
the events come in the order the runner writes them, and the task's outcome,
attempts_used, first_attempt_passed and final patch are what its own attempts say. Whoever
rewrites one task's outcome must then also rewrite the attempt that decided it, that
attempt's grading and the oracle's exit: invent a whole story. Only a signature over the
bundle, or a rerun, rules that out.

The runner writes, for each task (``coordinator.Coordinator``)::

    task_started
      attempt_started 1
        [submitted 1]         handed to an executor (derivation version 2 on)
        agent_finished 1, patch_captured 1, [graded 1], attempt_finished 1
        (after a crash: attempt_interrupted 1, written when the run resumes)
      [feedback 1]            attempt 1 failed and another attempt is allowed
      attempt_started 2 ...   never more than max_attempts
    [harness_error]           the harness failed; the task ends at once
    task_finished             nothing of the task comes after it

and an attempt's result follows from its facts: a timed-out agent is a timeout; a workspace
the capture refused (``patch_captured`` names why) is a fail, never graded, in the narration
probe too; exit 0 with an empty patch is an abstain and is never graded; otherwise the
grading decides (pass only when the hidden tests went green, their JUnit report too where
there is one, on a patch that applied clean and touched no forbidden path, and, when the
test process was flagged, only if the contract counts such a pass; green is exit 0, or exit 1
with a report that is ok with failed tests in it, a task whose required tests alone decide).
The task's outcome is its last attempt's result; a failed last attempt ends the task as a fail
once every attempt is used, and as a timeout when the time ran out first. An interrupted last
attempt (a crash, a stop, a full disk, a lost node) ends it as ``infra_error`` from derivation
version 5 on, and as a fail or a timeout, as the time it was charged decides, before it.

An event that is not one of the runner's (an unknown kind or field, a wrong type) is named
as such (:mod:`sealbench.events`); any other event names an attempt only once it started.

:func:`journal_contradictions` is pure (events in, sentences out) and never raises on
hostile input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import events
from .formats import ScoringContract
from .outcomes import AttemptResult, Outcome
from .vocabulary import vocabulary_of

_ATTEMPT_STEPS = (events.AGENT_FINISHED, events.PATCH_CAPTURED, events.GRADED, events.ATTEMPT_FINISHED)
# The step each step needs before it; attempt_finished may follow patch_captured directly.
_NEEDS = {events.PATCH_CAPTURED: events.AGENT_FINISHED, events.GRADED: events.PATCH_CAPTURED, events.ATTEMPT_FINISHED: events.PATCH_CAPTURED}
_RESULTS = frozenset({AttemptResult.PASS, AttemptResult.FAIL, AttemptResult.TIMEOUT, AttemptResult.ABSTAIN})
_PROBE_RESULTS = frozenset({AttemptResult.PROBE_PASS, AttemptResult.PROBE_FAIL, AttemptResult.TIMEOUT})
_OUTCOMES = frozenset(o.value for o in Outcome)
_MISSING: Any = object()
_E = TypeVar("_E", events.PatchCaptured, events.AgentFinished)
# How far past the task's wall-clock cap an agent that did not time out may have run in a true
# journal: the kill comes within a second of the deadline, and a loaded machine writes late.
# Generous, so that no honest run is ever called edited; a gross rewrite is still named.
_TIME_SLACK_S = 60.0


@dataclass
class _Attempt:
    number: int
    started: events.Line
    steps: dict[str, events.Line] = field(default_factory=dict)
    closed: events.Line | None = None
    """The attempt_finished or attempt_interrupted event that ended it."""
    feedback: events.Line | None = None

    @property
    def result(self) -> str | None:
        if self.closed is None or not isinstance(self.closed.event, events.AttemptFinished):
            return None
        return self.closed.event.result


@dataclass
class _Task:
    started: events.Line | None = None
    attempts: dict[int, _Attempt] = field(default_factory=dict)
    order: list[_Attempt] = field(default_factory=list)
    harness_error: events.Line | None = None
    finished: events.Line | None = None
    last_patch: events.Line | None = None
    """The task's last patch_captured event."""


def _at(line: events.Line) -> str:
    """``kind N (seq S)`` for attempt events, ``kind (seq S)`` otherwise."""
    attempt = line.attempt
    number = f" {attempt}" if attempt is not None and line.task_id is not None else ""
    seq = line.raw.get("seq")
    return f"{line.kind}{number} (seq {seq})"


def _event_of(line: events.Line | None, kind: type[_E]) -> _E:
    """The event of ``line`` when it is a ``kind``; else an empty one (every field absent)."""
    return line.event if line is not None and isinstance(line.event, kind) else kind()


def _allowed_results(probe: bool, refused: bool) -> frozenset[str]:
    """The results the runner may write for an attempt: a refused workspace is a fail, in the probe too."""
    if not probe:
        return _RESULTS
    return _PROBE_RESULTS | {AttemptResult.FAIL} if refused else _PROBE_RESULTS


def _graded_result(task_pass: bool, oracle_timed_out: bool) -> tuple[str, str]:
    """The result the runner writes for a graded attempt, and why."""
    if task_pass:
        return AttemptResult.PASS.value, "task_pass"
    if oracle_timed_out:
        return AttemptResult.TIMEOUT.value, "the oracle timed out"
    return AttemptResult.FAIL.value, "task_pass is false"


@dataclass
class _Reader:
    """One pass over a journal, collecting every contradiction as a sentence."""

    source: str
    denominator: frozenset[str]
    cap: int | None
    wall_clock_s: float | None
    probe: bool
    flagged_counts: bool = False
    problems: list[str] = field(default_factory=list)
    tasks: dict[str, _Task] = field(default_factory=dict)
    """The tasks still running."""
    done: dict[str, Any] = field(default_factory=dict)
    """The seq of each finished task's task_finished: all that is kept of a finished task, so a
    journal read as a stream is never held."""
    strangers: set[str] = field(default_factory=set)
    resumed: bool = False
    nonce: Any = _MISSING
    version: int = 1
    """The derivation version of the run_started event (1 when absent)."""

    def say(self, tid: str | None, text: str) -> None:
        self.problems.append(f"{self.source} task {tid}: {text}" if tid is not None else f"{self.source}: {text}")

    # ----------------------------------------------------------------------- run events

    def run_event(self, index: int, line: events.Line) -> None:
        event = line.event
        if isinstance(event, events.RunStarted):
            if index != 0:
                self.say(None, f"{_at(line)}: a second run_started; a journal holds one run, started by its "
                               f"first event (a resume journals run_resumed)")
            elif self.nonce is _MISSING:
                self.nonce = event.run_nonce
                self.version = event.derivation()
        elif isinstance(event, events.RunResumed):
            self.resumed = True
            # Journals written before run nonces existed carry none in either event.
            if self.nonce is not _MISSING and event.run_nonce != self.nonce:
                self.say(None, f"{_at(line)}: run_nonce {event.run_nonce!r} differs from the run_started "
                               f"event's {self.nonce!r}: a resume continues the same run")

    # ---------------------------------------------------------------------- task events

    def task_event(self, line: events.Line) -> None:
        tid = line.task_id
        if tid is None:
            return
        if tid not in self.denominator:
            if tid not in self.strangers:
                self.strangers.add(tid)
                self.say(tid, f"{_at(line)}: this task is not in the contract's denominator; the runner "
                              f"runs only the locked task_ids")
            return
        if tid in self.done:
            self.say(tid, f"{_at(line)} comes after the task's task_finished (seq {self.done[tid]}); "
                          f"nothing of a task is journaled after it ends")
            return
        task = self.tasks.get(tid)
        if task is None:
            task = self.tasks[tid] = _Task()
        kind = line.kind
        event = line.event
        if isinstance(event, events.TaskStarted):
            self.task_started(tid, task, line, event)
            return
        if task.started is None:
            self.say(tid, f"{_at(line)} comes before the task's task_started")
        if isinstance(event, events.AttemptStarted):
            self.attempt_started(tid, task, line)
        elif kind in _ATTEMPT_STEPS:
            self.attempt_step(tid, task, line)
        elif isinstance(event, events.AttemptInterrupted):
            self.attempt_interrupted(tid, task, line)
        elif isinstance(event, events.Feedback):
            self.feedback(tid, task, line)
        elif isinstance(event, events.HarnessFailed):
            if task.harness_error is None:
                task.harness_error = line
        elif isinstance(event, events.TaskFinished):
            task.finished = line
            self.task_finished(tid, task, line, event)
            del self.tasks[tid]
            self.done[tid] = line.raw.get("seq")
        else:
            attempt = line.attempt
            if attempt is not None and attempt not in task.attempts:
                self.say(tid, f"{_at(line)} names attempt {attempt}, which never started")

    def task_started(self, tid: str, task: _Task, line: events.Line, p: events.TaskStarted) -> None:
        if task.started is not None:
            self.say(tid, f"{_at(line)}: a second task_started (the first is seq {task.started.raw.get('seq')})")
            return
        task.started = line
        if self.cap is not None and p.max_attempts != self.cap:
            self.say(tid, f"{_at(line)} says max_attempts {p.max_attempts!r}, where the contract's budget "
                          f"allows {self.cap}")
        if self.wall_clock_s is not None and p.wall_clock_s != self.wall_clock_s:
            self.say(tid, f"{_at(line)} says wall_clock_s {p.wall_clock_s!r}, where the contract's budget "
                          f"says {self.wall_clock_s:g}")

    def attempt_started(self, tid: str, task: _Task, line: events.Line) -> None:
        n = line.attempt
        if n is None:
            self.say(tid, f"{_at(line)} has no attempt number")
            return
        if n in task.attempts:
            self.say(tid, f"{_at(line)}: attempt {n} started twice (first at seq {task.attempts[n].started.raw.get('seq')})")
            return
        expected = len(task.order) + 1
        if n != expected:
            self.say(tid, f"{_at(line)} where attempt {expected} was next: attempts are numbered 1, 2, ... in order")
        if self.cap is not None and n > self.cap:
            self.say(tid, f"{_at(line)}: attempt {n} exceeds max_attempts {self.cap}")
        if task.order and task.order[-1].closed is None:
            self.say(tid, f"{_at(line)} while attempt {task.order[-1].number} was still open")
        if task.harness_error is not None:
            self.say(tid, f"{_at(line)} after the task's harness_error (seq {task.harness_error.raw.get('seq')}); "
                          f"a harness error ends its task")
        attempt = _Attempt(n, line)
        task.attempts[n] = attempt
        task.order.append(attempt)

    def _attempt_of(self, tid: str, task: _Task, line: events.Line) -> _Attempt | None:
        n = line.attempt
        attempt = task.attempts.get(n) if n is not None else None
        if attempt is None:
            self.say(tid, f"{_at(line)} for an attempt that never started")
        return attempt

    def attempt_step(self, tid: str, task: _Task, line: events.Line) -> None:
        attempt = self._attempt_of(tid, task, line)
        if attempt is None:
            return
        kind = line.kind
        if attempt.closed is not None:
            self.say(tid, f"{_at(line)} after the attempt ended ({_at(attempt.closed)})")
            return
        if kind in attempt.steps:
            self.say(tid, f"{_at(line)}: a second {kind} for the attempt (the first is seq "
                          f"{attempt.steps[kind].raw.get('seq')})")
            return
        need = _NEEDS.get(kind)
        if need is not None and need not in attempt.steps:
            self.say(tid, f"{_at(line)} before the attempt's {need}")
        attempt.steps[kind] = line
        event = line.event
        if isinstance(event, events.PatchCaptured):
            task.last_patch = line
        elif isinstance(event, events.Graded) and self.probe:
            self.say(tid, f"{_at(line)}: the narration probe never grades")
        elif isinstance(event, events.AttemptFinished):
            attempt.closed = line
            self.attempt_result(tid, attempt, line, event)

    def attempt_interrupted(self, tid: str, task: _Task, line: events.Line) -> None:
        attempt = self._attempt_of(tid, task, line)
        if attempt is None:
            return
        if attempt.closed is not None:
            self.say(tid, f"{_at(line)} for an attempt that had ended ({_at(attempt.closed)})")
            return
        # Recorded on resume for an attempt the crash left open, or by the run itself when it
        # stops attempts under way (a second interrupt, a storage failure): open either way.
        attempt.closed = line

    def feedback(self, tid: str, task: _Task, line: events.Line) -> None:
        attempt = self._attempt_of(tid, task, line)
        if attempt is None:
            return
        if attempt.result != AttemptResult.FAIL:
            self.say(tid, f"{_at(line)}: feedback follows a failed attempt, and attempt {attempt.number} "
                          f"{'ended ' + repr(attempt.result) if attempt.result is not None else 'had not failed'}")
        elif attempt is not task.order[-1]:
            self.say(tid, f"{_at(line)} after attempt {task.order[-1].number} had started")
        elif attempt.feedback is not None:
            self.say(tid, f"{_at(line)}: a second feedback for the attempt (the first is seq "
                          f"{attempt.feedback.raw.get('seq')})")
        elif self.cap is not None and attempt.number >= self.cap:
            self.say(tid, f"{_at(line)}: feedback after the last allowed attempt")
        attempt.feedback = line

    # ------------------------------------------------------------------------- meaning

    def attempt_result(self, tid: str, attempt: _Attempt, line: events.Line, event: events.AttemptFinished) -> None:
        """Whether an attempt's result is what its agent, patch and grading say."""
        result = event.result
        patch_ev = attempt.steps.get(events.PATCH_CAPTURED)
        patch = _event_of(patch_ev, events.PatchCaptured)
        # A workspace the capture refused (too deep, a special file, over a cap) is the agent's
        # failure, decided before any grading, in the narration probe too.
        refused = isinstance(patch.rejected, str) and bool(patch.rejected) and patch.capture_timed_out is not True
        allowed = _allowed_results(self.probe, refused)
        if not isinstance(result, str) or result not in allowed:
            self.say(tid, f"{_at(line)} has result {result!r}, which the runner never writes here "
                          f"(one of {', '.join(sorted(allowed))})")
            return
        agent_ev = attempt.steps.get(events.AGENT_FINISHED)
        graded_ev = attempt.steps.get(events.GRADED)
        agent = _event_of(agent_ev, events.AgentFinished)
        self.agent_time(tid, line, agent_ev, agent)
        if agent.timed_out is True:
            self.timed_out_result(tid, line, result, agent_ev, graded_ev)
        elif refused:
            self.refused_result(tid, line, result, patch_ev, graded_ev)
        elif graded_ev is not None:
            self.graded(tid, graded_ev, result, agent.exit_code == 0 and patch.empty is True)
        else:
            self.ungraded_result(tid, line, result, agent, patch)

    def agent_time(self, tid: str, line: events.Line, agent_ev: events.Line | None,
                   agent: events.AgentFinished) -> None:
        """An agent that did not time out ran no longer than the cap (and the slack) allows."""
        if (agent.timed_out is not True and not self.probe and self.wall_clock_s is not None
                and isinstance(agent.elapsed_ms, int) and agent.elapsed_ms > (self.wall_clock_s + _TIME_SLACK_S) * 1000):
            self.say(tid, f"{_at(agent_ev or line)} says the agent ran {agent.elapsed_ms} ms and did not time out, "
                          f"but the task's wall-clock cap is {self.wall_clock_s:g} s: the runner kills it at the cap")

    def timed_out_result(self, tid: str, line: events.Line, result: str, agent_ev: events.Line | None,
                         graded_ev: events.Line | None) -> None:
        if result != AttemptResult.TIMEOUT:
            self.say(tid, f"{_at(line)} says {result!r}, but the agent timed out ({_at(agent_ev or line)}): "
                          f"the result of a timed-out attempt is timeout")
        if graded_ev is not None:
            self.say(tid, f"{_at(graded_ev)}: a timed-out attempt is never graded")

    def refused_result(self, tid: str, line: events.Line, result: str, patch_ev: events.Line | None,
                       graded_ev: events.Line | None) -> None:
        if result != AttemptResult.FAIL:
            self.say(tid, f"{_at(line)} says {result!r}, but the capture refused the workspace "
                          f"({_at(patch_ev or line)}): the result of a refused workspace is fail")
        if graded_ev is not None:
            self.say(tid, f"{_at(graded_ev)}: a refused workspace is never graded")

    def ungraded_result(self, tid: str, line: events.Line, result: str, agent: events.AgentFinished,
                        patch: events.PatchCaptured) -> None:
        """An attempt neither timed out, refused nor graded: its result follows from its exit and patch."""
        if result == AttemptResult.PASS:
            self.say(tid, f"{_at(line)} says pass, but the attempt was never graded: only the hidden tests "
                          f"decide a pass")
        elif result == AttemptResult.FAIL:
            self.say(tid, f"{_at(line)} says fail, but the attempt was never graded and its workspace was "
                          f"not refused")
        elif result == AttemptResult.ABSTAIN and not (agent.exit_code == 0 and patch.empty is True):
            self.say(tid, f"{_at(line)} says abstain, but the agent exited {agent.exit_code!r} with "
                          f"{'an empty' if patch.empty is True else 'a non-empty'} patch "
                          f"(abstain is exit 0 with an empty patch)")
        elif result in (AttemptResult.PROBE_PASS, AttemptResult.PROBE_FAIL) and (patch.empty is True) != (
                result == AttemptResult.PROBE_PASS):
            self.say(tid, f"{_at(line)} says {result}, but the patch captured was "
                          f"{'empty' if patch.empty is True else 'not empty'}")

    def graded(self, tid: str, graded_ev: events.Line, result: Any, abstained: bool) -> None:
        g = graded_ev.event if isinstance(graded_ev.event, events.Graded) else events.Graded()
        if abstained:
            self.say(tid, f"{_at(graded_ev)}: the agent exited 0 with an empty patch, an abstain, which is "
                          f"never graded")
        task_pass = g.task_pass is True
        if task_pass:
            self.task_pass(tid, graded_ev, g)
        self.tests_green(tid, graded_ev, g)
        expected, why = _graded_result(task_pass, g.oracle_timed_out is True)
        if result != expected:
            self.say(tid, f"attempt_finished {graded_ev.attempt} says {result!r}, but its "
                          f"grading ({_at(graded_ev)}) says {why}: the runner writes {expected!r}")

    def task_pass(self, tid: str, graded_ev: events.Line, g: events.Graded) -> None:
        """A grading that says task_pass says what a pass is made of."""
        # task_pass = tests_green AND patch_applies_clean AND no_forbidden_path (DESIGN, metrics).
        for key, value in (("tests_green", g.tests_green), ("patch_applies_clean", g.patch_applies_clean),
                           ("no_forbidden_path", g.no_forbidden_path)):
            if value is not True:
                self.say(tid, f"{_at(graded_ev)} says task_pass, but {key} is {value!r}")
        if g.forbidden:
            self.say(tid, f"{_at(graded_ev)} says task_pass, but the patch touched forbidden paths "
                          f"{g.forbidden!r}")
        if g.flagged_pass == "not_counted":
            self.say(tid, f"{_at(graded_ev)} says task_pass, but flagged_pass is 'not_counted': the "
                          f"contract does not count a pass whose test process was flagged")

    def tests_green(self, tid: str, graded_ev: events.Line, g: events.Graded) -> None:
        """A grading that says tests_green agrees with its flags, its JUnit verdict and the oracle's exit."""
        if g.tests_green is True and g.forging_flags:
            # The runner writes flagged_pass for every flagged green run, as the contract rules.
            expected_flag = "counted" if self.flagged_counts else "not_counted"
            if g.flagged_pass != expected_flag:
                self.say(tid, f"{_at(graded_ev)} is flagged {g.forging_flags!r} and green, but says flagged_pass "
                              f"{g.flagged_pass!r}; under this contract the runner writes {expected_flag!r}")
        if g.tests_green is True and g.junit is not None and g.junit.get("ok") is not True:
            self.say(tid, f"{_at(graded_ev)} says tests_green, but its JUnit verdict is not ok "
                          f"({g.junit.get('why')!r}): the report decides too")
        if g.tests_green is True:
            oracle = g.oracle or events.ProcessFacts()
            # Under a task's "required" rule pytest exits 1 for a test that may fail, and the report
            # decides: the only way a report with failed tests is ok.
            decided_by_report = (oracle.exit_code == 1 and g.junit is not None and g.junit.get("ok") is True
                                 and isinstance(g.junit.get("failed"), int) and g.junit.get("failed", 0) > 0)
            if (oracle.exit_code != 0 and not decided_by_report) or oracle.timed_out is not False:
                self.say(tid, f"{_at(graded_ev)} says tests_green, but the oracle exited "
                              f"{oracle.exit_code!r} (timed out: {oracle.timed_out!r})")

    def task_finished(self, tid: str, task: _Task, line: events.Line, p: events.TaskFinished) -> None:
        """Whether the task's outcome, attempts_used, first attempt and patch are its attempts'."""
        where = _at(line)
        outcome = p.outcome
        if not isinstance(outcome, str) or outcome not in _OUTCOMES:
            self.say(tid, f"{where} has outcome {outcome!r}, which is not an outcome")
            return
        self.task_time(tid, where, task, p)
        self.task_counts(tid, where, task, p)
        if task.harness_error is not None:
            if outcome != Outcome.HARNESS_ERROR.value:
                self.say(tid, f"{where} says outcome {outcome!r}, but a harness_error was journaled "
                              f"({_at(task.harness_error)}): a harness error stays a harness error")
            return
        if outcome == Outcome.HARNESS_ERROR.value:
            self.say(tid, f"{where} says outcome 'harness_error', but no harness_error was journaled")
            return
        last_attempt = task.order[-1] if task.order else None
        if last_attempt is not None and last_attempt.closed is None:
            self.say(tid, f"{where} while attempt {last_attempt.number} was still open (only a harness error "
                          f"ends a task mid-attempt)")
            return
        expected = self.expected_outcomes(last_attempt, len(task.order))
        if outcome not in expected:
            story = (f"its last attempt ({last_attempt.number}) {_story(last_attempt)}" if last_attempt is not None
                     else "no attempt started")
            self.say(tid, f"{where} says outcome {outcome!r}, but {story}: the runner writes "
                          f"{' or '.join(repr(o) for o in sorted(expected))}")

    def task_time(self, tid: str, where: str, task: _Task, p: events.TaskFinished) -> None:
        longest = max(((a.number, a.closed.event.elapsed_ms) for a in task.order if a.closed is not None
                       and isinstance(a.closed.event, events.AttemptFinished)
                       and isinstance(a.closed.event.elapsed_ms, int)), key=lambda na: na[1], default=None)
        # A task's time holds its attempts' (in one session: a resumed task's counts what it was
        # charged before, which is capped).
        if not self.resumed and longest is not None and isinstance(p.elapsed_ms, int) and p.elapsed_ms + 1 < longest[1]:
            self.say(tid, f"{where} says elapsed_ms {p.elapsed_ms}, but attempt {longest[0]} alone took "
                          f"{longest[1]} ms")

    def task_counts(self, tid: str, where: str, task: _Task, p: events.TaskFinished) -> None:
        """attempts_used, first_attempt_passed and the patch are the task's attempts'."""
        used = len(task.order)
        if p.attempts_used != used:
            self.say(tid, f"{where} says attempts_used {p.attempts_used!r}, but {used} attempt(s) started")
        first = task.attempts.get(1)
        first_passed = first is not None and first.result == AttemptResult.PASS
        if p.first_attempt_passed != first_passed:
            self.say(tid, f"{where} says first_attempt_passed {p.first_attempt_passed!r}, but attempt 1 "
                          f"{_story(first)}")
        last = task.last_patch.event if task.last_patch is not None else None
        patch = last.patch_sha256 if isinstance(last, events.PatchCaptured) else None
        if p.patch_sha256 != patch:
            said = f"the last patch captured ({_at(task.last_patch)}) is {patch!r}" if task.last_patch is not None \
                else "no patch was captured"
            self.say(tid, f"{where} names patch {p.patch_sha256!r}, but {said}")

    def expected_outcomes(self, last: _Attempt | None, used: int) -> set[str]:
        result = last.result if last is not None else None
        if result == AttemptResult.PROBE_PASS:
            return {Outcome.PASS.value}
        if result == AttemptResult.PROBE_FAIL:
            return {Outcome.FAIL.value}
        if result is not None and result != AttemptResult.FAIL:
            return {str(result)}
        # After a failed attempt the next one starts while attempts and time remain: a task
        # ends as a fail when every attempt is used, as a timeout when the time ran out first.
        exhausted = self.cap is not None and used >= self.cap
        if result == AttemptResult.FAIL:
            return {Outcome.FAIL.value if exhausted else Outcome.TIMEOUT.value}
        if last is not None and vocabulary_of(self.version).infra_error:
            # Its last attempt was interrupted: not the agent's end, so not the agent's outcome.
            return {Outcome.INFRA_ERROR.value}
        # The last attempt was interrupted by a crash (or none started): how its time is
        # charged on resume decides between the two once the attempts are used up.
        return {Outcome.FAIL.value, Outcome.TIMEOUT.value} if exhausted and used else {Outcome.TIMEOUT.value}


def _story(attempt: _Attempt | None) -> str:
    """How an attempt ended, for messages: ``ended 'fail' (attempt_finished 2 (seq 40))``."""
    if attempt is None:
        return "never started"
    closed = attempt.closed
    if closed is None:
        return "never ended"
    if isinstance(closed.event, events.AttemptInterrupted):
        return f"was interrupted ({_at(closed)})"
    return f"ended {attempt.result!r} ({_at(closed)})"


class Contradictions:
    """:func:`journal_contradictions` one line at a time, for a journal read as a stream."""

    def __init__(self, contract: ScoringContract, *, source: str = "journal.jsonl", probe: bool = False) -> None:
        budget = contract.budget
        cap = 1 if probe else (budget.max_attempts if budget is not None else None)
        self._reader = _Reader(source=source, denominator=frozenset(contract.task_ids), cap=cap,
                               wall_clock_s=budget.wall_clock_s if budget is not None else None, probe=probe,
                               flagged_counts=contract.flagged_pass == "counted")
        self._index = 0

    @property
    def problems(self) -> list[str]:
        """Every contradiction found so far, as sentences."""
        return self._reader.problems

    def feed(self, line: events.Line) -> None:
        """Check one typed line, in journal order."""
        if line.task_id is None:
            self._reader.run_event(self._index, line)
        else:
            self._reader.task_event(line)
        self._index += 1


def journal_contradictions(
    items: Sequence[Any], contract: ScoringContract, *, source: str = "journal.jsonl", probe: bool = False
) -> list[str]:
    """Every place where a journal's events contradict each other or the contract, as sentences.

    ``items`` are typed lines (:class:`events.Line`) or lines as parsed; a parsed line that is
    not an event this release reads is named as such (typed lines were checked when read).
    Each sentence names the journal (``source``), the task and the events involved. An empty
    list means each task's events tell a story the runner could have written; it does not
    mean that the story happened (see the module docstring).
    """
    check = Contradictions(contract, source=source, probe=probe)
    for line in events.lines(items, source, check.problems):
        check.feed(line)
    return check.problems
