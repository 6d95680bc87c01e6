"""What a journal's events mean: each task's story must be one the runner could have written.

A hash chain shows that nobody edited a journal after it was written, unless the editor
recomputed every hash, which anyone can do. Without a signature a bundle therefore proves
internal consistency only, and this module makes that consistency mean something: per task,
the events come in the order the runner writes them, and the task's outcome,
attempts_used, first_attempt_passed and final patch are what its own attempts say. Whoever
rewrites one task's outcome must then also rewrite the attempt that decided it, that
attempt's grading and the oracle's exit: invent a whole story. Only a signature over the
bundle, or a rerun, rules that out.

The runner writes, for each task (``runner._run_started_task``)::

    task_started
      attempt_started 1
        agent_finished 1, patch_captured 1, [graded 1], attempt_finished 1
        (after a crash: attempt_interrupted 1, written when the run resumes)
      [feedback 1]            attempt 1 failed and another attempt is allowed
      attempt_started 2 ...   never more than max_attempts
    [harness_error]           the harness failed; the task ends at once
    task_finished             nothing of the task comes after it

and an attempt's result follows from its facts: a timed-out agent is a timeout; exit 0
with an empty patch is an abstain and is never graded; otherwise the grading decides (pass
only when the hidden tests went green on a patch that applied clean and touched no
forbidden path). The task's outcome is its last attempt's result; a failed or interrupted
last attempt ends the task as a fail once every attempt is used, and as a timeout when the
time ran out first.

Event kinds this module does not know are allowed between a task's start and its end (a
newer runner may journal more), but never for an attempt that did not start.

:func:`journal_contradictions` is pure (events in, sentences out) and never raises on
hostile input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .formats import Outcome, ScoringContract

_ATTEMPT_STEPS = ("agent_finished", "patch_captured", "graded", "attempt_finished")
# The step each step needs before it; attempt_finished may follow patch_captured directly.
_NEEDS = {"patch_captured": "agent_finished", "graded": "patch_captured", "attempt_finished": "patch_captured"}
_RESULTS = frozenset({"pass", "fail", "timeout", "abstain"})
_PROBE_RESULTS = frozenset({"probe_pass", "probe_fail", "timeout"})
_OUTCOMES = frozenset(o.value for o in Outcome)
_MISSING: Any = object()


@dataclass
class _Attempt:
    number: int
    started: Mapping[str, Any]
    steps: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    closed: Mapping[str, Any] | None = None
    """The attempt_finished or attempt_interrupted event that ended it."""
    feedback: Mapping[str, Any] | None = None

    @property
    def result(self) -> Any:
        if self.closed is None or self.closed.get("kind") != "attempt_finished":
            return None
        return _payload(self.closed).get("result")


@dataclass
class _Task:
    started: Mapping[str, Any] | None = None
    attempts: dict[int, _Attempt] = field(default_factory=dict)
    order: list[_Attempt] = field(default_factory=list)
    harness_error: Mapping[str, Any] | None = None
    finished: Mapping[str, Any] | None = None
    last_patch: Mapping[str, Any] | None = None
    """The task's last patch_captured event."""


def _payload(event: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = event.get("payload")
    # Events are parsed JSON: a mapping is a dict (checked as such, which is fast).
    return payload if isinstance(payload, dict) else {}


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _at(event: Mapping[str, Any]) -> str:
    """``kind N (seq S)`` for attempt events, ``kind (seq S)`` otherwise."""
    attempt = _number(event.get("attempt"))
    number = f" {attempt}" if attempt is not None and event.get("task_id") is not None else ""
    return f"{event.get('kind')}{number} (seq {event.get('seq')})"


@dataclass
class _Reader:
    """One pass over a journal, collecting every contradiction as a sentence."""

    source: str
    denominator: frozenset[str]
    cap: int | None
    wall_clock_s: float | None
    probe: bool
    problems: list[str] = field(default_factory=list)
    tasks: dict[str, _Task] = field(default_factory=dict)
    strangers: set[str] = field(default_factory=set)
    resumed: bool = False
    nonce: Any = _MISSING

    def say(self, tid: str | None, text: str) -> None:
        self.problems.append(f"{self.source} task {tid}: {text}" if tid is not None else f"{self.source}: {text}")

    # ----------------------------------------------------------------------- run events

    def run_event(self, index: int, ev: Mapping[str, Any]) -> None:
        kind = ev.get("kind")
        p = _payload(ev)
        if kind == "run_started":
            if index != 0:
                self.say(None, f"{_at(ev)}: a second run_started; a journal holds one run, started by its "
                               f"first event (a resume journals run_resumed)")
            elif self.nonce is _MISSING:
                self.nonce = p.get("run_nonce")
        elif kind == "run_resumed":
            self.resumed = True
            # Journals written before run nonces existed carry none in either event.
            if self.nonce is not _MISSING and p.get("run_nonce") != self.nonce:
                self.say(None, f"{_at(ev)}: run_nonce {p.get('run_nonce')!r} differs from the run_started "
                               f"event's {self.nonce!r}: a resume continues the same run")

    # ---------------------------------------------------------------------- task events

    def task_event(self, ev: Mapping[str, Any]) -> None:
        tid = ev.get("task_id")
        if not isinstance(tid, str):
            self.say(None, f"{_at(ev)}: task_id {tid!r} is not a task id")
            return
        if tid not in self.denominator:
            if tid not in self.strangers:
                self.strangers.add(tid)
                self.say(tid, f"{_at(ev)}: this task is not in the contract's denominator; the runner "
                              f"runs only the locked task_ids")
            return
        task = self.tasks.get(tid)
        if task is None:
            task = self.tasks[tid] = _Task()
        kind = ev.get("kind")
        if task.finished is not None:
            self.say(tid, f"{_at(ev)} comes after the task's task_finished (seq {task.finished.get('seq')}); "
                          f"nothing of a task is journaled after it ends")
            return
        if kind == "task_started":
            self.task_started(tid, task, ev)
            return
        if task.started is None:
            self.say(tid, f"{_at(ev)} comes before the task's task_started")
        if kind == "attempt_started":
            self.attempt_started(tid, task, ev)
        elif kind in _ATTEMPT_STEPS:
            self.attempt_step(tid, task, ev)
        elif kind == "attempt_interrupted":
            self.attempt_interrupted(tid, task, ev)
        elif kind == "feedback":
            self.feedback(tid, task, ev)
        elif kind == "harness_error":
            if task.harness_error is None:
                task.harness_error = ev
        elif kind == "task_finished":
            task.finished = ev
            self.task_finished(tid, task, ev)
        else:
            attempt = _number(ev.get("attempt"))
            if attempt is not None and attempt not in task.attempts:
                self.say(tid, f"{_at(ev)} names attempt {attempt}, which never started")

    def task_started(self, tid: str, task: _Task, ev: Mapping[str, Any]) -> None:
        if task.started is not None:
            self.say(tid, f"{_at(ev)}: a second task_started (the first is seq {task.started.get('seq')})")
            return
        task.started = ev
        p = _payload(ev)
        if self.cap is not None and p.get("max_attempts") != self.cap:
            self.say(tid, f"{_at(ev)} says max_attempts {p.get('max_attempts')!r}, where the contract's budget "
                          f"allows {self.cap}")
        if self.wall_clock_s is not None and p.get("wall_clock_s") != self.wall_clock_s:
            self.say(tid, f"{_at(ev)} says wall_clock_s {p.get('wall_clock_s')!r}, where the contract's budget "
                          f"says {self.wall_clock_s:g}")

    def attempt_started(self, tid: str, task: _Task, ev: Mapping[str, Any]) -> None:
        n = _number(ev.get("attempt"))
        if n is None:
            self.say(tid, f"{_at(ev)} has no attempt number")
            return
        if n in task.attempts:
            self.say(tid, f"{_at(ev)}: attempt {n} started twice (first at seq {task.attempts[n].started.get('seq')})")
            return
        expected = len(task.order) + 1
        if n != expected:
            self.say(tid, f"{_at(ev)} where attempt {expected} was next: attempts are numbered 1, 2, ... in order")
        if self.cap is not None and n > self.cap:
            self.say(tid, f"{_at(ev)}: attempt {n} exceeds max_attempts {self.cap}")
        if task.order and task.order[-1].closed is None:
            self.say(tid, f"{_at(ev)} while attempt {task.order[-1].number} was still open")
        if task.harness_error is not None:
            self.say(tid, f"{_at(ev)} after the task's harness_error (seq {task.harness_error.get('seq')}); "
                          f"a harness error ends its task")
        attempt = _Attempt(n, ev)
        task.attempts[n] = attempt
        task.order.append(attempt)

    def _attempt_of(self, tid: str, task: _Task, ev: Mapping[str, Any]) -> _Attempt | None:
        n = _number(ev.get("attempt"))
        attempt = task.attempts.get(n) if n is not None else None
        if attempt is None:
            self.say(tid, f"{_at(ev)} for an attempt that never started")
        return attempt

    def attempt_step(self, tid: str, task: _Task, ev: Mapping[str, Any]) -> None:
        attempt = self._attempt_of(tid, task, ev)
        if attempt is None:
            return
        kind = str(ev.get("kind"))
        if attempt.closed is not None:
            self.say(tid, f"{_at(ev)} after the attempt ended ({_at(attempt.closed)})")
            return
        if kind in attempt.steps:
            self.say(tid, f"{_at(ev)}: a second {kind} for the attempt (the first is seq "
                          f"{attempt.steps[kind].get('seq')})")
            return
        need = _NEEDS.get(kind)
        if need is not None and need not in attempt.steps:
            self.say(tid, f"{_at(ev)} before the attempt's {need}")
        attempt.steps[kind] = ev
        if kind == "patch_captured":
            task.last_patch = ev
        elif kind == "graded" and self.probe:
            self.say(tid, f"{_at(ev)}: the narration probe never grades")
        elif kind == "attempt_finished":
            attempt.closed = ev
            self.attempt_result(tid, attempt, ev)

    def attempt_interrupted(self, tid: str, task: _Task, ev: Mapping[str, Any]) -> None:
        attempt = self._attempt_of(tid, task, ev)
        if attempt is None:
            return
        if attempt.closed is not None:
            self.say(tid, f"{_at(ev)} for an attempt that had ended ({_at(attempt.closed)})")
            return
        # Recorded on resume for an attempt the crash left open, or by the run itself when it
        # stops attempts under way (a second interrupt, a storage failure): open either way.
        attempt.closed = ev

    def feedback(self, tid: str, task: _Task, ev: Mapping[str, Any]) -> None:
        attempt = self._attempt_of(tid, task, ev)
        if attempt is None:
            return
        if attempt.result != "fail":
            self.say(tid, f"{_at(ev)}: feedback follows a failed attempt, and attempt {attempt.number} "
                          f"{'ended ' + repr(attempt.result) if attempt.result is not None else 'had not failed'}")
        elif attempt is not task.order[-1]:
            self.say(tid, f"{_at(ev)} after attempt {task.order[-1].number} had started")
        elif attempt.feedback is not None:
            self.say(tid, f"{_at(ev)}: a second feedback for the attempt (the first is seq "
                          f"{attempt.feedback.get('seq')})")
        elif self.cap is not None and attempt.number >= self.cap:
            self.say(tid, f"{_at(ev)}: feedback after the last allowed attempt")
        attempt.feedback = ev

    # ------------------------------------------------------------------------- meaning

    def attempt_result(self, tid: str, attempt: _Attempt, ev: Mapping[str, Any]) -> None:
        """Whether an attempt's result is what its agent, patch and grading say."""
        result = _payload(ev).get("result")
        allowed = _PROBE_RESULTS if self.probe else _RESULTS
        if not isinstance(result, str) or result not in allowed:
            self.say(tid, f"{_at(ev)} has result {result!r}, which the runner never writes here "
                          f"(one of {', '.join(sorted(allowed))})")
            return
        agent_ev = attempt.steps.get("agent_finished")
        patch_ev = attempt.steps.get("patch_captured")
        graded_ev = attempt.steps.get("graded")
        agent = _payload(agent_ev) if agent_ev is not None else {}
        patch = _payload(patch_ev) if patch_ev is not None else {}
        abstained = agent.get("exit_code") == 0 and patch.get("empty") is True
        if agent.get("timed_out") is True:
            if result != "timeout":
                self.say(tid, f"{_at(ev)} says {result!r}, but the agent timed out ({_at(agent_ev or ev)}): "
                              f"the result of a timed-out attempt is timeout")
            if graded_ev is not None:
                self.say(tid, f"{_at(graded_ev)}: a timed-out attempt is never graded")
            return
        if graded_ev is not None:
            self.graded(tid, graded_ev, result, abstained)
            return
        if result == "pass":
            self.say(tid, f"{_at(ev)} says pass, but the attempt was never graded: only the hidden tests "
                          f"decide a pass")
        elif result == "fail":
            self.say(tid, f"{_at(ev)} says fail, but the attempt was never graded")
        elif result == "abstain" and not abstained:
            self.say(tid, f"{_at(ev)} says abstain, but the agent exited {agent.get('exit_code')!r} with "
                          f"{'an empty' if patch.get('empty') is True else 'a non-empty'} patch "
                          f"(abstain is exit 0 with an empty patch)")
        elif result in ("probe_pass", "probe_fail") and (patch.get("empty") is True) != (result == "probe_pass"):
            self.say(tid, f"{_at(ev)} says {result}, but the patch captured was "
                          f"{'empty' if patch.get('empty') is True else 'not empty'}")

    def graded(self, tid: str, graded_ev: Mapping[str, Any], result: Any, abstained: bool) -> None:
        g = _payload(graded_ev)
        if abstained:
            self.say(tid, f"{_at(graded_ev)}: the agent exited 0 with an empty patch, an abstain, which is "
                          f"never graded")
        task_pass = g.get("task_pass") is True
        if task_pass:
            # task_pass = tests_green AND patch_applies_clean AND no_forbidden_path (DESIGN, metrics).
            for key in ("tests_green", "patch_applies_clean", "no_forbidden_path"):
                if g.get(key) is not True:
                    self.say(tid, f"{_at(graded_ev)} says task_pass, but {key} is {g.get(key)!r}")
            if g.get("forbidden"):
                self.say(tid, f"{_at(graded_ev)} says task_pass, but the patch touched forbidden paths "
                              f"{g.get('forbidden')!r}")
        if g.get("tests_green") is True:
            oracle = g.get("oracle")
            oracle = oracle if isinstance(oracle, dict) else {}
            if oracle.get("exit_code") != 0 or oracle.get("timed_out") is not False:
                self.say(tid, f"{_at(graded_ev)} says tests_green, but the oracle exited "
                              f"{oracle.get('exit_code')!r} (timed out: {oracle.get('timed_out')!r})")
        expected = "pass" if task_pass else "timeout" if g.get("oracle_timed_out") is True else "fail"
        if result != expected:
            why = "task_pass" if task_pass else ("the oracle timed out" if expected == "timeout"
                                                 else "task_pass is false")
            self.say(tid, f"attempt_finished {_number(graded_ev.get('attempt'))} says {result!r}, but its "
                          f"grading ({_at(graded_ev)}) says {why}: the runner writes {expected!r}")

    def task_finished(self, tid: str, task: _Task, ev: Mapping[str, Any]) -> None:
        """Whether the task's outcome, attempts_used, first attempt and patch are its attempts'."""
        p = _payload(ev)
        where = _at(ev)
        outcome = p.get("outcome")
        if not isinstance(outcome, str) or outcome not in _OUTCOMES:
            self.say(tid, f"{where} has outcome {outcome!r}, which is not an outcome")
            return
        used = len(task.order)
        if p.get("attempts_used") != used:
            self.say(tid, f"{where} says attempts_used {p.get('attempts_used')!r}, but {used} attempt(s) started")
        first = task.attempts.get(1)
        first_passed = first is not None and first.result == "pass"
        if p.get("first_attempt_passed") != first_passed:
            self.say(tid, f"{where} says first_attempt_passed {p.get('first_attempt_passed')!r}, but attempt 1 "
                          f"{_story(first)}")
        patch = _payload(task.last_patch).get("patch_sha256") if task.last_patch is not None else None
        if p.get("patch_sha256") != patch:
            last = f"the last patch captured ({_at(task.last_patch)}) is {patch!r}" if task.last_patch is not None \
                else "no patch was captured"
            self.say(tid, f"{where} names patch {p.get('patch_sha256')!r}, but {last}")
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
        expected = self.expected_outcomes(last_attempt, used)
        if outcome not in expected:
            story = (f"its last attempt ({last_attempt.number}) {_story(last_attempt)}" if last_attempt is not None
                     else "no attempt started")
            self.say(tid, f"{where} says outcome {outcome!r}, but {story}: the runner writes "
                          f"{' or '.join(repr(o) for o in sorted(expected))}")

    def expected_outcomes(self, last: _Attempt | None, used: int) -> set[str]:
        result = last.result if last is not None else None
        if result == "probe_pass":
            return {Outcome.PASS.value}
        if result == "probe_fail":
            return {Outcome.FAIL.value}
        if result is not None and result != "fail":
            return {str(result)}
        # After a failed attempt the next one starts while attempts and time remain: a task
        # ends as a fail when every attempt is used, as a timeout when the time ran out first.
        exhausted = self.cap is not None and used >= self.cap
        if result == "fail":
            return {Outcome.FAIL.value if exhausted else Outcome.TIMEOUT.value}
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
    if closed.get("kind") == "attempt_interrupted":
        return f"was interrupted ({_at(closed)})"
    return f"ended {attempt.result!r} ({_at(closed)})"


def journal_contradictions(
    events: Sequence[Any], contract: ScoringContract, *, source: str = "journal.jsonl", probe: bool = False
) -> list[str]:
    """Every place where a journal's events contradict each other or the contract, as sentences.

    Each sentence names the journal (``source``), the task and the events involved. An empty
    list means each task's events tell a story the runner could have written; it does not
    mean that the story happened (see the module docstring).
    """
    budget = contract.budget
    cap = 1 if probe else (budget.max_attempts if budget is not None else None)
    reader = _Reader(source=source, denominator=frozenset(contract.task_ids), cap=cap,
                     wall_clock_s=budget.wall_clock_s if budget is not None else None, probe=probe)
    for index, ev in enumerate(events):
        if not isinstance(ev, dict):
            continue  # the chain check reports lines that are not objects
        if ev.get("task_id") is None:
            reader.run_event(index, ev)
        else:
            reader.task_event(ev)
    return reader.problems
