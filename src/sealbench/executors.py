"""Where attempts run: a small interface, and the local thread pool that implements it.

The run's coordinator (:mod:`sealbench.coordinator`) hands each attempt to an
:class:`Executor` as an :class:`~sealbench.attempt.AttemptSpec` and gets its
:class:`~sealbench.attempt.AttemptFacts` back; it alone journals. An executor never retries
an attempt (there is no retry argument anywhere): an attempt whose worker died is reported
lost (:attr:`Delivery.lost`), and the coordinator charges it as an interrupted attempt. The
cap, the process-group kill and the cleanup live inside the attempt itself, so an executor
only has to run it, report it, and reach it to cancel it.

How an executor may fail, and what the coordinator does about it:

* a result that never comes: the attempt is declared lost once it is overdue (its budget and
  a grace past it), journaled as interrupted and charged; a result after that is journaled
  as a duplicate and never counted;
* a result delivered twice: the first is counted, the second journaled as a duplicate;
* a result after a cancel the coordinator stopped waiting for: a duplicate.

``tests/test_executors.py`` holds a fake executor that does each of these.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import queue
import threading
from collections.abc import Collection
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from typing import Final, Protocol

from .agentfs import remove_tree
from .attempt import AttemptFacts, AttemptSpec, Setup, run_attempt, set_up
from .cancellation import Cancellation
from .sandbox import YIELD_ABOVE_JOBS, Prepared
from .settings import Settings
from .workspace import TaskWorkspace


@dataclass(frozen=True)
class Handle:
    """One submitted attempt, as its executor knows it."""

    task_id: str
    attempt: int
    serial: int


@dataclass(frozen=True)
class Delivery:
    """What an executor reports about a submitted attempt: its facts, or that it was lost."""

    handle: Handle
    facts: AttemptFacts | None
    lost: str | None = None
    """Why the executor lost the attempt (its worker died); ``facts`` is None then."""


class Executor(Protocol):
    """Runs attempts; never retries one."""

    def warm(self, spec: AttemptSpec) -> None:
        """A hint: ``spec`` will be submitted soon; what costs its agent nothing (the
        workspace, the prompt, a sandbox held before exec) may be set up now. May be ignored."""

    def ready(self, spec: AttemptSpec) -> bool:
        """Whether submitting ``spec`` now starts its agent without waiting for its set-up."""

    def node_of(self, spec: AttemptSpec) -> str | None:
        """The machine the attempt will run on, when the executor spans several (journaled in
        its ``submitted`` line before :meth:`submit`); None for this machine."""

    def submit(self, spec: AttemptSpec) -> Handle:
        """Start the attempt; its result comes through :meth:`wait`."""

    def wait(self, timeout_s: float) -> list[Delivery]:
        """The deliveries since the last call; waits up to ``timeout_s`` for one (returns
        early, possibly with none, when a warmed set-up that :meth:`ready` found not ready
        becomes ready)."""

    def cancel(self, handle: Handle, reason: str) -> None:
        """Stop the attempt now (its sandboxed commands are killed); its result still comes."""

    def wind_down(self) -> None:
        """The run is stopping: attempts under way end without waiting out an attempt gap,
        and set-ups not yet submitted are dropped."""

    def release(self, task_id: str) -> None:
        """The task is over: free what is held for it (its workspace, set-ups)."""

    def close(self) -> None:
        """Wait for the attempts under way, free everything held. Idempotent."""

    @property
    def busy(self) -> bool:
        """Whether an attempt is still under way."""


WORKER_NICENESS: Final = 5
"""How much lower the scheduling priority of the executor's worker threads is than that of the
runner's own threads (the coordinator, the journal's heartbeat and watchdog, the gateway's
loop), above --jobs :data:`sealbench.sandbox.YIELD_ABOVE_JOBS`. Hundreds of attempts setting
up at once contend for the CPU and the interpreter; the heartbeat must still write a line
within its lease (at --jobs 256 on two cores, without this, the watchdog ended runs for a
silence of 2 to 3 s). The sandboxes run lower still (:data:`sealbench.sandbox.COMMAND_NICENESS`)."""


AHEAD_BEYOND_JOBS: Final = 1
"""How many tasks more than ``--jobs`` the coordinator has set up ahead of their turn. With
exactly ``--jobs`` (200 tasks whose agent is ``true``, ``--jobs 1``, on a tmpfs), the next task
was not set up yet when its turn came after 58 of 199 tasks, and waited 8 ms (median) for it: a
sixth of the run. One more set up ahead took 7% off the run's time, and 2% off that of graded
tasks; a second one more changed nothing."""


def _yield_to_the_runner() -> None:
    """Lower the calling worker thread's priority (Linux: nice is per thread; raising one's own
    needs no privilege)."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(),
                       min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + WORKER_NICENESS))


class LocalExecutor:
    """Attempts on a pool of threads in this process (the work is waiting on sandboxes, not computing).

    ``jobs`` attempts run at once, at most; as many set-ups again and :data:`AHEAD_BEYOND_JOBS`
    more run ahead of their turn (:meth:`warm`), a few at a time, so that the first tasks are
    ready first. A storage failure reported by one attempt cancels every other at once.
    """

    def __init__(self, settings: Settings, jobs: int) -> None:
        self.settings = settings
        self.jobs = max(1, jobs)
        yielding = _yield_to_the_runner if self.jobs > YIELD_ABOVE_JOBS else None
        # Apart, so that neither an attempt nor a set-up waits behind a workspace's removal: the
        # coordinator runs at most ``jobs`` at once (more only while a lost one still runs). A
        # removal waits instead for the set-ups under way when it was asked for (:meth:`release`).
        self._pool = ThreadPoolExecutor(max_workers=2 * self.jobs, thread_name_prefix="sealbench-attempt",
                                        initializer=yielding)
        self._setups_ahead = ThreadPoolExecutor(max_workers=self.jobs + AHEAD_BEYOND_JOBS,
                                                thread_name_prefix="sealbench-setup", initializer=yielding)
        self._cleanup = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="sealbench-cleanup",
                                        initializer=yielding)
        # A set-up is ready once its sandbox is spawned; copying the workspace into the
        # sandbox's quota'd tmpfs follows here, so a short task never waits for it and a long
        # one's agent starts without it (the agent's start waits for a copy under way).
        self._fills = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="sealbench-fill",
                                        initializer=yielding)
        # A set-up's copy of the workspace and its sandbox's spawn are CPU work: a few at a time,
        # so that the first tasks are ready first (its wait on the gateway is not held to it).
        self._setups = threading.Semaphore(os.cpu_count() or 1)
        self._lock = threading.Lock()
        self._workspaces: dict[str, TaskWorkspace] = {}
        self._warmed: dict[tuple[str, int], Future[Setup]] = {}
        self._setting_up: set[Future[Setup]] = set()
        """Set-ups made ahead (:meth:`warm`) that have not ended yet."""
        self._awaited: set[tuple[str, int]] = set()
        """Set-ups :meth:`ready` found under way: the end of one of these, and of no other,
        wakes :meth:`wait`."""
        self._running: dict[Handle, Cancellation] = {}
        self._results: queue.SimpleQueue[Delivery | None] = queue.SimpleQueue()
        self._serial = itertools.count(1)
        self._wound_down = False
        self._aborted: str | None = None
        self._closed = False

    # -------------------------------------------------------------------------------- workspace

    def _workspace(self, task_id: str, spec: AttemptSpec) -> TaskWorkspace:
        with self._lock:
            task_ws = self._workspaces.get(task_id)
            if task_ws is None:
                task_ws = self._workspaces[task_id] = TaskWorkspace(spec.task_dir, spec.task.pack_workspace,
                                                               self.settings.tree_caps)
            return task_ws

    def warm(self, spec: AttemptSpec) -> None:
        with self._lock:
            if self._wound_down or spec.key in self._warmed:
                return
        task_ws = self._workspace(spec.task.task_id, spec)
        fut = self._setups_ahead.submit(self._set_up, spec, task_ws)
        with self._lock:
            self._warmed[spec.key] = fut
            self._setting_up.add(fut)
        fut.add_done_callback(functools.partial(self._set_up_ended, spec.key))
        fut.add_done_callback(self._fill_ahead)

    def _set_up_ended(self, key: tuple[str, int], fut: Future[Setup]) -> None:
        # The coordinator is woken only when it is waiting for this set-up: a set-up that ends
        # before its turn comes (most of them, on short tasks) would only cost it a turn of its
        # loop, and the interpreter lock meanwhile, for nothing.
        with self._lock:
            self._setting_up.discard(fut)
            wake = key in self._awaited
            self._awaited.discard(key)
        if wake:
            self._results.put(None)

    def _fill_ahead(self, fut: Future[Setup]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        ready = fut.result().ready
        if ready is None or ready.prepared is None:
            return
        prepared = ready.prepared
        if not prepared.fills_ahead():  # nothing to copy (no quota): no thread to wake for it
            return
        with contextlib.suppress(RuntimeError):  # the executor is closing: the start copies it
            self._fills.submit(self._fill, prepared)

    @staticmethod
    def _fill(prepared: Prepared) -> None:
        # A failure here is the start's to report: it copies again, and says why it could not.
        with contextlib.suppress(Exception):
            prepared.fill_ahead()

    def _set_up(self, spec: AttemptSpec, task_ws: TaskWorkspace) -> Setup:
        return set_up(self.settings, spec, task_ws, cpu=self._setups)

    def ready(self, spec: AttemptSpec) -> bool:
        with self._lock:
            fut = self._warmed.get(spec.key)
            if fut is None or fut.done():
                return True
            # Under the lock that its end takes (:meth:`_set_up_ended`, called once the future
            # is done): a set-up that ends after this check still wakes the coordinator.
            self._awaited.add(spec.key)
            return False

    # -------------------------------------------------------------------------------- attempts

    def node_of(self, spec: AttemptSpec) -> str | None:
        return None

    def submit(self, spec: AttemptSpec) -> Handle:
        handle = Handle(spec.task.task_id, spec.attempt, next(self._serial))
        cancel = Cancellation()
        with self._lock:
            warmed = self._warmed.pop(spec.key, None)
            self._awaited.discard(spec.key)
            self._running[handle] = cancel
            if self._wound_down:
                cancel.wind_down()
            if self._aborted is not None:
                cancel.cancel(self._aborted)
        task_ws = self._workspace(spec.task.task_id, spec)
        self._pool.submit(self._run, handle, spec, cancel, task_ws, warmed)
        return handle

    def _run(self, handle: Handle, spec: AttemptSpec, cancel: Cancellation, task_ws: TaskWorkspace,
             warmed: Future[Setup] | None) -> None:
        delivery: Delivery
        try:
            setup = warmed.result() if warmed is not None else None
            facts = run_attempt(spec, self.settings, cancel, task_ws, setup)
            if facts.storage_failure is not None:
                # The run's own storage failed: every attempt stops now, not once the coordinator hears of it.
                self._abort(facts.storage_failure)
            delivery = Delivery(handle, facts)
        except BaseException as e:  # a bug of the harness: the attempt is lost, never retried
            delivery = Delivery(handle, None, lost=f"{type(e).__name__}: {e}")
        finally:
            with self._lock:
                self._running.pop(handle, None)
        self._results.put(delivery)

    def _abort(self, reason: str) -> None:
        with self._lock:
            if self._aborted is None:
                self._aborted = reason
            running = list(self._running.values())
        for cancel in running:
            cancel.cancel(reason)

    def wait(self, timeout_s: float) -> list[Delivery]:
        out: list[Delivery] = []
        try:
            item = self._results.get(timeout=max(0.0, timeout_s)) if timeout_s > 0 else self._results.get_nowait()
        except queue.Empty:
            return out
        while True:
            if item is not None:
                out.append(item)
            try:
                item = self._results.get_nowait()
            except queue.Empty:
                return out

    def cancel(self, handle: Handle, reason: str) -> None:
        with self._lock:
            cancel = self._running.get(handle)
        if cancel is not None:
            cancel.cancel(reason)

    def wind_down(self) -> None:
        with self._lock:
            self._wound_down = True
            warmed = list(self._warmed.values())
            self._warmed.clear()
            running = list(self._running.values())
        for cancel in running:
            cancel.wind_down()
        for fut in warmed:
            _drop(fut)

    def release(self, task_id: str) -> None:
        with self._lock:
            keys = [k for k in self._warmed if k[0] == task_id]
            dropped = [self._warmed.pop(k) for k in keys]
            task_ws = self._workspaces.pop(task_id, None)
            ahead = list(self._setting_up)
        for fut in dropped:
            _drop(fut)
        if task_ws is not None and not self.settings.keep_work:
            try:
                # On a worker: the code under test wrote in it, and its removal may take a while.
                self._cleanup.submit(_remove, task_ws, ahead)
            except RuntimeError:  # the pool is shut down, and so are the set-ups
                _remove(task_ws)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wound_down = True
            warmed = list(self._warmed.values())
            self._warmed.clear()
        self._fills.shutdown(wait=True, cancel_futures=True)
        for fut in warmed:
            _drop(fut)
        self._setups_ahead.shutdown(wait=True, cancel_futures=True)
        self._cleanup.shutdown(wait=True)
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            left = list(self._workspaces.values())
            self._workspaces.clear()
        if not self.settings.keep_work:
            for task_ws in left:
                _remove(task_ws)

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._running)


def _remove(task_ws: TaskWorkspace, after: Collection[Future[Setup]] = ()) -> None:
    """Remove a task's folder once the set-ups ``after`` have ended (they go first).

    A removal and a set-up are both a long run of short system calls, each of which lets go of
    the interpreter lock: side by side on two threads they hand the lock to each other at every
    call (a futex wake and a wait each time), slowing the set-up and the attempts under way with
    them. One after the other, as a single thread would do them, they do not. Only the set-ups
    already asked for are waited for, so a removal is never put off for long, and a set-up asked
    for later never waits for it; one not begun when the executor closes is cancelled.
    """
    if after:
        wait_for(after)
    with contextlib.suppress(OSError):
        remove_tree(task_ws.root)


def _drop(fut: Future[Setup]) -> None:
    """Close a set-up made ahead and never used (its held sandbox never starts)."""
    if fut.cancel():
        return
    fut.add_done_callback(lambda f: f.result().close() if not f.cancelled() else None)
