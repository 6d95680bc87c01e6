"""The coordinator: the one place that journals a run's tasks and decides what happens next.

It runs in the caller's thread. For each task of the denominator, at most ``jobs`` at a time,
it journals ``task_started``; for each attempt, ``attempt_started`` (the attempt is used from
that line on) and ``submitted``, then hands an :class:`~sealbench.attempt.AttemptSpec` to an
:class:`~sealbench.executors.Executor`. The attempt comes back as facts, which the coordinator
journals (``agent_finished``, ``patch_captured``, ``graded``, ``attempt_finished``,
``feedback``) before it decides: the next attempt, or ``task_finished``. It is the only place
a new attempt is created, and it never creates one the cap does not allow.

Every attempt has one result, the first the executor delivers; a later one (a second
delivery, or one for an attempt already journaled as interrupted) is journaled as
``duplicate_result`` and never counted. An attempt whose result does not come (a lost worker,
or no answer within a grace after its budget or after a cancel) is journaled as
``attempt_interrupted``, charged the time measured until then, and stays used: the task goes
on with its next attempt, as a resume would, never with a free retry; with no attempt or time
left it ends as ``infra_error`` (derivation version 5 on), since its agent did not end it.

Who writes the journal: this thread; the run's heartbeat thread
(:class:`sealbench.clock.Heartbeat`); and, when the contract declares model endpoints, the
model gateway's recorder (:class:`sealbench.gateway.Gateway`), a durable ``model_call_started``
line before a call is forwarded and one durable ``model_call`` line per request, each before
its attempt's ``agent_finished`` (the attempt closes its gateway access, which waits for those
lines, before it returns). On a Ray cluster the gateways run on the nodes, and
:class:`sealbench.ray_executor.RayExecutor` journals their lines, in this thread, before it
hands on the results that came with them (a node forwards a call once told it is journaled).
:class:`sealbench.journal.Journal` serialises the appends under its lock. Workers never write it.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import events as ev
from . import pytest_oracle
from .attempt import AttemptFacts, AttemptSpec, final_outcome, storage_failed
from .derive import DERIVATION_VERSION
from .errors import HarnessError, StorageError, Terminated
from .executors import AHEAD_BEYOND_JOBS, Delivery, Executor, Handle
from .files import write_atomic
from .journal import Journal
from .outcomes import AttemptResult, Outcome, TaskState
from .pack import Task
from .progress import Progress
from .settings import Settings
from .vocabulary import vocabulary_of

if TYPE_CHECKING:
    from .charge import Charge

LOST_GRACE_S = 120.0
"""How long past its budget an attempt's result may take before the attempt is declared lost."""
CANCEL_GRACE_S = 30.0
"""How long after a cancel the result of a cancelled attempt is waited for."""
STOPPED_MID_ATTEMPT = "the runner stopped mid-attempt"
"""Why a resume journals an attempt the previous process left open (killed, crashed, its machine down)."""


class JournalStopped(Exception):
    """Internal: the journal could not be written; the run must stop at once."""

    def __init__(self, error: HarnessError | StorageError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class Prior:
    """What a resumed task had already used."""

    attempts_started: int = 0
    consumed_s: float = 0.0
    first_attempt_passed: bool | None = None
    finished: bool = False
    started: bool = False
    last_patch: str | None = None
    last_result: str | None = None
    open_attempt: int | None = None
    harness_error: str | None = None
    interrupted: str | None = None
    """Why the task's last attempt was interrupted, when it was (it then has no result)."""

    def runs_attempts(self, max_attempts: int) -> bool:
        """Whether the task may run an attempt at all (what is set up ahead for it)."""
        return (self.last_result in (None, AttemptResult.FAIL) and self.attempts_started < max_attempts
                and self.harness_error is None)


@dataclass
class _Open:
    """An attempt handed to the executor whose result is not decided yet."""

    handle: Handle
    started: float
    budget_s: float
    cancelled_at: float | None = None


@dataclass
class _TaskRun:
    task: Task
    prior: Prior
    t0: float
    deadline: float
    first: bool | None
    attempts_used: int
    patch_digest: str | None
    probe_passed: bool | None = None
    feedback: str = ""
    fresh: bool = True
    open: _Open | None = None
    handles: list[Handle] = field(default_factory=list)
    interrupted: str | None = None
    """Why the last attempt was interrupted, when it was: its end was not the agent's."""


@dataclass
class Requests:
    """Stop requests from signals (SIGINT, SIGTERM), recorded by their handlers and acted on by
    the coordinator: a handler never raises into the middle of a journal append."""

    signals: list[int] = field(default_factory=list)
    _previous: dict[int, Any] = field(default_factory=dict)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)

    def __enter__(self) -> Requests:
        import threading

        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous = signal.getsignal(signum)
                if previous is signal.SIG_IGN:
                    continue  # ignored by whoever started us (a background job): leave it so
                self._previous[signum] = previous
                signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


class Coordinator:
    """Drives the tasks of one run (or resume) to their ends through an executor."""

    def __init__(self, *, journal: Journal, executor: Executor, settings: Settings, jobs: int,
                 requests: Requests | None = None, lost_grace_s: float | None = None,
                 cancel_grace_s: float | None = None, derivation_version: int = DERIVATION_VERSION,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.journal = journal
        self.executor = executor
        self.settings = settings
        self.jobs = max(1, jobs)
        self.todo: list[Task] = []
        self.prior: dict[str, Prior] = {}
        self.progress: Progress | None = None
        self.requests = requests or Requests()
        self.lost_grace_s = LOST_GRACE_S if lost_grace_s is None else lost_grace_s
        self.cancel_grace_s = CANCEL_GRACE_S if cancel_grace_s is None else cancel_grace_s
        self.now = clock
        # A run started under version 1 (resumed by this release) gets no line its release cannot read.
        self.vocabulary = vocabulary_of(derivation_version)
        self.outcomes: dict[str, str] = {}
        self.storage_failed: list[str] = []
        """What failed, when the run's own storage did (first failure first)."""
        self.abort_reasons: list[str] = []
        self._queue: deque[Task] = deque()
        self._warmed: set[str] = set()
        self._first_specs: dict[str, AttemptSpec] = {}
        """The first attempt of each task of the window, as warmed (dropped when the task starts)."""
        self._running: dict[str, _TaskRun] = {}
        self._opened: dict[Handle, _Open] = {}
        """Every attempt handed to the executor, by its handle."""
        self._decided: set[tuple[str, int]] = set()
        self._stopping = False
        self._stopped_by: str | None = None
        self._handled = 0
        self._failure: JournalStopped | None = None
        self._dirty = False
        """Lines were written that no fsync covers yet."""
        self._to_submit: list[tuple[_TaskRun, AttemptSpec, float]] = []
        self._to_release: list[str] = []

    # ------------------------------------------------------------------------------ journal

    def append(self, event: ev.Event, *, durable: bool = True) -> None:
        """Append ``event``, durably unless ``durable=False``.

        Raises:
            JournalStopped: the journal could not be written.
        """
        try:
            self.journal.append(event, durable=durable)
        except StorageError as e:
            self._storage_failure(f"storage failure: {e}")
            raise JournalStopped(e) from None
        except HarnessError as e:
            raise JournalStopped(e) from None
        self._dirty = not durable  # a durable line's fsync covers every line before it

    def begin(self, header: ev.RunStarted, *, resumed: bool) -> None:
        """Journal the session's first line: the run's start, or its resume (``header`` then
        carries the run's own nonce).

        Raises:
            JournalStopped: the journal could not be written.
        """
        self.append(ev.RunResumed(**header.payload()) if resumed else header)

    def settle(self, prior: Mapping[str, Prior], charges: Sequence[Charge]) -> None:
        """Journal what a resume decides before any task runs: each attempt the stopped process
        left open is interrupted (it is used; none is given back), and the time charges (decided
        once, here: later resumes read the charge, never redo it).

        Raises:
            JournalStopped: the journal could not be written.
        """
        for tid, p in prior.items():
            if p.open_attempt is not None and not p.finished:
                self.append(ev.AttemptInterrupted(task_id=tid, attempt=p.open_attempt, reason=STOPPED_MID_ATTEMPT))
        for charge in charges:
            self.append(charge.event())

    def complete(self, stopped_by: str | None) -> bool:
        """Whether the run ended complete once :meth:`drive` returned ``stopped_by``: nothing
        stopped it, and every task has its outcome."""
        return (stopped_by is None and not self.storage_failed
                and all(v != TaskState.INTERRUPTED for v in self.outcomes.values()))

    def finish_run(self) -> None:
        """Journal run_finished, with how many tasks ended with each outcome: the run's last line.

        Raises:
            JournalStopped: the journal could not be written.
        """
        ended = list(self.outcomes.values())
        self.append(ev.RunFinished(outcomes={o: ended.count(o) for o in set(ended)}))

    def _write(self, event: ev.Event) -> None:
        """Append a line that :meth:`_commit` makes durable before anything acts on it."""
        self.append(event, durable=False)

    def _commit(self) -> None:
        """Make this turn's lines durable with one fsync, then act on them: hand the attempts
        they started to the executor, free what the tasks they finished held.

        Raises:
            JournalStopped: the journal could not be made durable (nothing is acted on).
        """
        if self._dirty:
            try:
                self.journal.sync()
            except StorageError as e:
                self._storage_failure(f"storage failure: {e}")
                raise JournalStopped(e) from None
            except HarnessError as e:
                raise JournalStopped(e) from None
            self._dirty = False
        submissions, self._to_submit = self._to_submit, []
        for run, spec, started in submissions:
            handle = self.executor.submit(spec)
            run.open = self._opened[handle] = _Open(handle=handle, started=started, budget_s=spec.budget_s)
            run.handles.append(handle)
            if self.aborted:  # stopped now while its line was written: used, and stopped at once
                run.open.cancelled_at = self.now()
                self.executor.cancel(handle, self.abort_reasons[0])
        self._release()

    def _release(self) -> None:
        released, self._to_release = self._to_release, []
        for tid in released:
            self.executor.release(tid)

    def _storage_failure(self, why: str) -> None:
        """The run's own storage failed: stop everything now; nothing more is decided."""
        self.storage_failed.append(why)
        self.stop_now(why)

    @property
    def aborted(self) -> bool:
        return bool(self.abort_reasons)

    def stop_now(self, reason: str) -> None:
        """Stop every task, and cancel the attempts under way (they are used)."""
        self._stopping = True
        self.abort_reasons.append(reason)
        self.executor.wind_down()
        at = self.now()
        for run in self._running.values():
            if run.open is not None:
                if run.open.cancelled_at is None:
                    run.open.cancelled_at = at
                self.executor.cancel(run.open.handle, reason)

    # ------------------------------------------------------------------------------ the loop

    def drive(self, todo: Sequence[Task], prior: dict[str, Prior], progress: Progress | None = None) -> str | None:
        """Run the tasks to their ends (``prior``: what a resumed task had used), or until a
        stop; returns the signal that stopped them, if any.

        A first SIGINT or SIGTERM stops new attempts and lets those under way finish and be graded;
        a second stops them now (they are used, as a crash would use them). A storage failure
        stops everything now.

        Raises:
            JournalStopped: the journal could not be written.
        """
        self.todo, self.prior, self.progress = list(todo), prior, progress
        self._queue = deque(self.todo)
        try:
            self._guarded(self._poll)
            self._guarded(self._refill)
            self._guarded(self._commit)
            while self._running or (self._queue and not self._stopping and self._failure is None):
                try:
                    deliveries = self.executor.wait(0.5)
                except KeyboardInterrupt as e:  # a raising handler installed by a library caller meanwhile
                    self.requests.signals.append(signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
                    deliveries = []
                for delivery in deliveries:
                    if self._failure is None:
                        self._guarded(lambda d=delivery: self._deliver(d))  # type: ignore[misc]
                    else:
                        self._drain(delivery)
                if self._failure is None:
                    self._guarded(self._overdue)
                    self._guarded(self._poll)
                    self._guarded(self._refill)
                    self._guarded(self._commit)
                else:
                    self._overdue()
                    self._release()
        finally:
            self.executor.close()
        # What came after the last task ended: recorded, never counted.
        for delivery in self.executor.wait(0):
            self._guarded(lambda d=delivery: self._deliver(d))  # type: ignore[misc]
        self._guarded(self._commit)
        if self._failure is not None:
            raise self._failure
        return None if self._stopped_by == "storage" else self._stopped_by

    def _guarded(self, step: Callable[[], None]) -> None:
        """Run one step that journals; once the journal fails, nothing more is journaled and the
        tasks end as their attempts come back."""
        if self._failure is not None:
            return
        try:
            step()
        except JournalStopped as e:
            self._failure = e
            self._to_submit.clear()
            if not self.aborted:
                self.stop_now("the journal could not be written")
            for run in list(self._running.values()):
                if run.open is None:
                    self._end_interrupted(run)

    def _drain(self, delivery: Delivery) -> None:
        run = self._running.get(delivery.handle.task_id)
        if run is not None and run.open is not None and run.open.handle == delivery.handle:
            self._end_interrupted(run)

    def _poll(self) -> None:
        if self.storage_failed and self._stopped_by is None:
            self._stopped_by = "storage"
            with contextlib.suppress(JournalStopped):  # the disk may be full for this line too
                self._stop(self.storage_failed[0])
        while self._handled < len(self.requests.signals):
            name = signal.Signals(self.requests.signals[self._handled]).name
            self._handled += 1
            if self._stopped_by is None:
                self._stopped_by = name
                self._stop("keyboard interrupt" if name == "SIGINT" else name)
                print(f"sealbench: {name}: stopping after the attempts under way (send {name} again to stop "
                      f"them now: they are then used, as a crash would use them)", file=sys.stderr, flush=True)
            elif not self.aborted:
                self.stop_now(f"stopped by a second {name}")

    def _stop(self, reason: str) -> None:
        self._stopping = True
        self.executor.wind_down()
        for tid in self._warmed:
            self.executor.release(tid)
        self._warmed.clear()
        self._queue.clear()
        self._write(ev.RunInterrupted(reason=reason, pending=len(self.todo) - len(self.outcomes)))

    # ------------------------------------------------------------------------------ tasks

    def _first_spec(self, task: Task) -> AttemptSpec:
        spec = self._first_specs.get(task.task_id)
        if spec is None:
            p = self.prior.get(task.task_id, Prior())
            spec = self._spec(task, p.attempts_started + 1, self.settings.budget.wall_clock_s, fresh=True,
                              feedback="")
            self._first_specs[task.task_id] = spec
        return spec

    def _spec(self, task: Task, attempt: int, budget_s: float, *, fresh: bool, feedback: str) -> AttemptSpec:
        name = ("probe-" + task.task_id) if self.settings.probe else task.task_id
        return AttemptSpec(task=task, attempt=attempt, budget_s=budget_s,
                           task_dir=self.settings.run_dir / "work" / name, fresh=fresh, feedback=feedback)

    def _needs_attempt(self, task: Task) -> bool:
        return self.prior.get(task.task_id, Prior()).runs_attempts(self.settings.max_attempts)

    def _refill(self) -> None:
        """Start tasks while fewer than ``jobs`` run; as many again and
        :data:`~sealbench.executors.AHEAD_BEYOND_JOBS` more are set up ahead meanwhile (the
        workspace, the first prompt, the first attempt's sandbox held before exec: what costs the
        agent nothing), so memory stays flat however long the denominator is."""
        if self._stopping:
            return
        while len(self._running) < self.jobs and self._queue and not self._stopping:
            ready = next((t for t in itertools.islice(self._queue, self.jobs)
                          if not self._needs_attempt(t) or self.executor.ready(self._first_spec(t))), None)
            if ready is None:
                break
            self._queue.remove(ready)
            self._warmed.discard(ready.task_id)
            self._first_specs.pop(ready.task_id, None)
            self._start(ready)
        if self._stopping:
            return
        for task in list(itertools.islice(self._queue, self.jobs + AHEAD_BEYOND_JOBS)):
            if task.task_id not in self._warmed and self._needs_attempt(task):
                self.executor.warm(self._first_spec(task))
                self._warmed.add(task.task_id)

    def _committed_at(self, task: Task) -> str | None:
        """The task record's commit date, journaled only under a contract that claims fresh tasks."""
        if self.settings.contract.fresh_after is None:
            return None
        from .freshness import task_date

        when = task_date(task.record)
        return when.isoformat() if when is not None else None

    def _start(self, task: Task) -> None:
        tid = task.task_id
        prior = self.prior.get(tid, Prior())
        settings = self.settings
        if not prior.started:
            # A pytest oracle_cmd of the form before sealbench-pytest runs as sealed; say so.
            unguarded = "none" if pytest_oracle.runs_pytest_unguarded(task.record.oracle_cmd) else None
            self._write(ev.TaskStarted(task_id=tid, max_attempts=settings.max_attempts,
                                  wall_clock_s=settings.budget.wall_clock_s,
                                  prompt_template_id="narration-probe" if settings.probe
                                  else task.record.prompt_template_id,
                                  hidden_tests_sha256=task.record.hidden_tests_sha256,
                                  oracle_cmd=list(task.record.oracle_cmd),
                                  **ev.present(oracle_guard=unguarded, committed_at=self._committed_at(task))))
        t0 = self.now()
        run = _TaskRun(task=task, prior=prior, t0=t0, deadline=t0 + settings.budget.wall_clock_s - prior.consumed_s,
                       first=prior.first_attempt_passed, attempts_used=prior.attempts_started,
                       patch_digest=prior.last_patch, interrupted=prior.interrupted)
        self._running[tid] = run
        if prior.harness_error is not None:
            # A harness error journaled before the run stopped stands: it is the harness's
            # failure, never turned into the agent's by running the task on.
            self._finish(run, Outcome.HARNESS_ERROR, error=prior.harness_error)
        elif prior.last_result not in (None, AttemptResult.FAIL):
            # The run stopped between an attempt's end and the task's: its result stands.
            assert prior.last_result is not None
            if settings.probe:
                run.probe_passed = prior.last_result == AttemptResult.PROBE_PASS
            self._finish(run, final_outcome(prior.last_result))
        else:
            self._next_attempt(run)

    def _next_attempt(self, run: _TaskRun) -> None:
        tid = run.task.task_id
        attempt = run.attempts_used + 1
        if attempt > self.settings.max_attempts:
            self._used_up(run, Outcome.FAIL)
            return
        if self._stopping:
            self._end_interrupted(run)
            return
        remaining = run.deadline - self.now()
        if remaining <= 0:
            self._used_up(run, Outcome.TIMEOUT)
            return
        # Durable (this turn's commit) before the executor has the attempt: it is used from here on.
        self._write(ev.AttemptStarted(task_id=tid, attempt=attempt, budget_s=round(remaining, 3)))
        run.attempts_used = attempt
        run.interrupted = None
        started = self.now()
        spec = self._spec(run.task, attempt, remaining, fresh=run.fresh, feedback=run.feedback)
        if self.vocabulary.submitted:
            self._write(ev.Submitted(task_id=tid, attempt=attempt, **ev.present(node=self.executor.node_of(spec))))
        run.fresh = False
        self._to_submit.append((run, spec, started))

    def _used_up(self, run: _TaskRun, outcome: Outcome) -> None:
        """End a task whose attempts or time are used up: ``outcome``, unless its last attempt
        was interrupted. The agent did not end that one, so nothing it did decided the task:
        an infrastructure outcome, which refuses the rate (the attempt stays used)."""
        if run.interrupted is None or not self.vocabulary.infra_error:
            self._finish(run, outcome)
            return
        why = "no attempt" if outcome is Outcome.FAIL else "no time"
        self._finish(run, Outcome.INFRA_ERROR,
                     error=f"attempt {run.attempts_used} was interrupted ({run.interrupted}), not ended by the "
                           f"agent, and {why} remained")

    def _end_interrupted(self, run: _TaskRun) -> None:
        tid = run.task.task_id
        self._forget(run)
        self.outcomes[tid] = TaskState.INTERRUPTED.value
        self._to_release.append(tid)

    def _forget(self, run: _TaskRun) -> None:
        """The task has ended: a result for any of its attempts is a duplicate from now on."""
        del self._running[run.task.task_id]
        for handle in run.handles:
            self._opened.pop(handle, None)
            self._decided.discard((handle.task_id, handle.attempt))

    def _finish(self, run: _TaskRun, outcome: Outcome, error: str | None = None) -> None:
        tid = run.task.task_id
        elapsed_ms = int((self.now() - run.t0 + run.prior.consumed_s) * 1000)
        self._write(ev.TaskFinished(task_id=tid, outcome=outcome.value, attempts_used=run.attempts_used,
                               elapsed_ms=elapsed_ms, first_attempt_passed=bool(run.first),
                               patch_sha256=run.patch_digest,
                               **ev.present(probe_passed=run.probe_passed, error=error)))
        self._forget(run)
        self._to_release.append(tid)
        if run.patch_digest and not self.settings.probe:
            self._write_patch(tid, run.patch_digest)
        self.outcomes[tid] = outcome.value
        if self.progress is not None:
            # The probe asks for a summary only: its tasks leave the workspace unchanged or change
            # it; neither is a pass or a fail of anything.
            shown = outcome.value
            if self.settings.probe and outcome is not Outcome.HARNESS_ERROR and run.probe_passed is not None:
                shown = "left it unchanged" if run.probe_passed else "changed the workspace"
            self.progress.update(tid, shown)

    def _write_patch(self, tid: str, patch_digest: str) -> None:
        """patches/<task>.patch, a copy of its blob (restored on resume if a failure lost it)."""
        run_dir = self.settings.run_dir
        blob = run_dir / "blobs" / patch_digest.removeprefix("sha256:")
        try:
            write_atomic(run_dir / "patches" / f"{tid}.patch", blob.read_bytes(), durable=False)
        except OSError as e:
            if self.aborted:
                return
            why = storage_failed(run_dir, e)
            if why is None:
                raise
            self._storage_failure(why)

    # ------------------------------------------------------------------------------ results

    def _deliver(self, delivery: Delivery) -> None:
        handle = delivery.handle
        key = (handle.task_id, handle.attempt)
        opened = self._opened.get(handle)
        run = self._running.get(handle.task_id)
        # The first result of an attempt is its result; whatever comes later is never counted.
        if key in self._decided or opened is None or run is None:
            facts = delivery.facts
            if not self.vocabulary.submitted:
                print(f"sealbench: a second result for {handle.task_id} attempt {handle.attempt} was not counted "
                      f"(this run's journal has no line for it)", file=sys.stderr, flush=True)
                return
            self._write(ev.DuplicateResult(of_task=handle.task_id, of_attempt=handle.attempt,
                                      result=facts.result if facts is not None else None,
                                      reason="a result for an attempt already decided; not counted"))
            return
        self._decided.add(key)
        if run.open is opened:
            run.open = None
        if delivery.facts is None:
            self._interrupted(run, opened, f"the executor lost the attempt ({delivery.lost})", lost=True)
            return
        self._facts(run, opened, delivery.facts)

    def _interrupted(self, run: _TaskRun, opened: _Open, reason: str, *, lost: bool) -> None:
        """Journal the attempt as interrupted, charged what was measured; it stays used."""
        tid = run.task.task_id
        run.interrupted = self.abort_reasons[0] if self.abort_reasons and not lost else reason
        try:
            self._write(ev.AttemptInterrupted(task_id=tid, attempt=opened.handle.attempt, reason=run.interrupted,
                                         charged_s=round(self.now() - opened.started, 3),
                                         charged_basis="measured by the runner until it stopped the attempt"))
        except JournalStopped:
            if not self.storage_failed:
                raise
            # A full disk may refuse this line too: resume then charges the open attempt.
        if opened.handle.attempt == 1:
            run.first = False
        if lost and not self._stopping:
            # As a resume would: the next attempt, in a workspace made anew; never a free retry.
            run.fresh = True
            run.feedback = ""
            self._next_attempt(run)
        else:
            self._end_interrupted(run)

    def _facts(self, run: _TaskRun, opened: _Open, facts: AttemptFacts) -> None:
        tid = run.task.task_id
        attempt = opened.handle.attempt
        for event in facts.events():
            self._write(event)
        if facts.capture is not None:
            run.patch_digest = facts.capture.patch_sha256
        if facts.storage_failure is not None and facts.storage_failure not in self.storage_failed:
            self._storage_failure(facts.storage_failure)
        if facts.error is not None:
            # The harness failed, not the agent: recorded, and the task stays in the denominator.
            self._write(ev.HarnessFailed(task_id=tid, attempt=attempt, error=facts.error))
            self._finish(run, Outcome.HARNESS_ERROR, error=facts.error)
            return
        if facts.stopped is not None:
            # The operator or the infrastructure stopped the attempt: nothing about the task is
            # decided. The attempt is used, as one a crash stopped (it is never given back).
            if facts.finished is None:
                self._interrupted(run, opened, facts.stopped, lost=False)
            else:
                self._end_interrupted(run)
            return
        result = facts.result
        assert result is not None
        if attempt == 1:
            run.first = result == AttemptResult.PASS
        if self.settings.probe:
            run.probe_passed = result == AttemptResult.PROBE_PASS
        if self.settings.probe or result != AttemptResult.FAIL:
            self._finish(run, final_outcome(result))
            return
        run.feedback = facts.feedback
        self._next_attempt(run)

    def _overdue(self) -> None:
        """Attempts whose result has not come in time: lost, or cancelled without an answer."""
        now = self.now()
        for run in list(self._running.values()):
            opened = run.open
            if opened is None:
                continue
            if opened.cancelled_at is not None:
                late = now > opened.cancelled_at + self.cancel_grace_s
                why = "no result came after the attempt was cancelled"
            else:
                late = now > opened.started + opened.budget_s + self.lost_grace_s
                why = "no result came within its budget and a grace"
            if not late:
                continue
            self._decided.add((opened.handle.task_id, opened.handle.attempt))
            run.open = None
            self.executor.cancel(opened.handle, why)
            if self._failure is not None:
                self._end_interrupted(run)
                continue
            self._interrupted(run, opened, f"the executor lost the attempt: {why}",
                              lost=opened.cancelled_at is None)

