"""One attempt: what it does (:func:`run_attempt`) and what its facts mean (:func:`classify`).

:func:`run_attempt` takes a plain description of one attempt (:class:`AttemptSpec`: the task,
the attempt's number, the time that remains, the feedback to show) and returns its facts
(:class:`AttemptFacts`: the events to journal, its result, the patch's stored blob, why it was
stopped or failed). It writes no journal, starts no thread of its own but the one that holds
an in-process agent, and shares nothing with other attempts but the executor's
:class:`~sealbench.cancellation.Cancellation`: the run's coordinator (:mod:`sealbench.coordinator`)
journals the facts, and an executor (:mod:`sealbench.executors`) decides where it runs.

The classification is pure: the facts of how the agent ended, what capturing its patch found
and what grading said go through :func:`must_grade` (whether the hidden tests run at all),
then :func:`classify` for the attempt's result. Neither touches a file, a process or the
journal, so every rule has a row in ``tests/test_attempt.py``.

An attempt's result is an :class:`~sealbench.outcomes.AttemptResult`: an outcome's word, or ``probe_pass`` /
``probe_fail`` in the narration probe. A harness failure is never an attempt's result: it is
recorded for the task (``harness_error``) and decides nothing about the agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from . import events as ev
from .agentfs import TraceCaps, TreeRejected, read_trace, trace_digest
from .agents import render_argv
from .blobs import store_bytes
from .cancellation import Cancellation, Stopped
from .digest import sha256_bytes
from .errors import describe_storage_failure, storage_failure
from .files import write_atomic
from .grading import (
    GradeContext,
    GradeJob,
    HeldOracle,
    feedback,
    grade,
    process_facts,
    sandbox_spec,
    task_env,
)
from .outcomes import AttemptResult, Outcome
from .pack import Task
from .sandbox import Prepared
from .settings import Settings
from .usage import ENDPOINT_FAILED, NEVER_STARTED
from .workspace import META_DIR, TaskWorkspace

if TYPE_CHECKING:
    from .gateway import AttemptAccess

@dataclass(frozen=True)
class AgentEnd:
    """How the agent's attempt ended and what capturing its workspace found."""

    exit_code: int | None
    timed_out: bool
    patch_empty: bool
    capture_timed_out: bool = False
    rejected: str | None = None
    """Why the workspace could not be captured (its own doing: odd files, over a cap)."""


@dataclass(frozen=True)
class Grading:
    """What running the hidden tests said; None stands for grading that never finished
    (no time left before it, or its own deadline)."""

    task_pass: bool
    oracle_timed_out: bool = False


def must_grade(end: AgentEnd, *, probe: bool = False) -> bool:
    """Whether the hidden tests run for this attempt."""
    return classify(end, None, probe=probe, graded=False) is None


def classify(end: AgentEnd, grading: Grading | None, *, probe: bool = False, graded: bool = True) -> AttemptResult | None:
    """The attempt's result.

    ``graded`` says whether grading was attempted (``grading`` None then means it ran out of
    time); with ``graded=False`` the result is None exactly when grading must decide.
    """
    if end.timed_out or end.capture_timed_out:
        return AttemptResult.TIMEOUT
    if end.rejected is not None:
        # What the workspace holds is the agent's doing: its failure, never a harness error.
        return AttemptResult.FAIL
    if probe:
        return AttemptResult.PROBE_PASS if end.patch_empty else AttemptResult.PROBE_FAIL
    if end.exit_code == 0 and end.patch_empty:
        return AttemptResult.ABSTAIN
    if not graded:
        return None
    if grading is None:
        return AttemptResult.TIMEOUT
    if grading.task_pass:
        return AttemptResult.PASS
    if grading.oracle_timed_out:
        return AttemptResult.TIMEOUT
    return AttemptResult.FAIL


EXEC_FAILED: Final = frozenset({126, 127})
"""The exit codes of a command the shell could not execute (not executable, not found)."""
_EXEC_SAID: Final = 1024


def never_started(exit_code: int | None, stdout: bytes, stderr: bytes, *, changed: bool, called: bool) -> str | None:
    """Why the agent never started on this attempt, or None when it did.

    The command exited 126 or 127 (the exec failed: a typo'd script path, a missing
    interpreter), printed nothing but the short complaint of whatever could not execute it,
    changed nothing in its workspace and reached no model. That is a setup mistake, never a
    measured attempt. An agent that printed, changed a file or called a model did start, whatever
    its exit code: that is its own failure.
    """
    if exit_code not in EXEC_FAILED or stdout.strip() or changed or called:
        return None
    said = stderr.decode("utf-8", "replace").strip()
    if len(stderr) > _EXEC_SAID or len(said.splitlines()) > 2:
        return None
    last = said.splitlines()[-1][:300] if said else "nothing on stderr"
    return (f"{NEVER_STARTED}: its command exited {exit_code} ({last}) before doing anything (no output, no "
            "change in its workspace, no model call); check the paths in the contract's agent command and write "
            "a new contract under a new run_id")


def _never_started(ready: Ready | None, cap: Capture, exit_code: int | None) -> str | None:
    """:func:`never_started` for the attempt's command agent, once its workspace was captured."""
    if ready is not None and ready.output is not None and not cap.changed and not cap.rejected:
        # A command that could not be executed is a setup mistake, not a measured attempt.
        return never_started(exit_code, *ready.output, changed=bool(cap.patch),
                             called=ready.access is not None and ready.access.called())
    return None


def _endpoint_failed(ready: Ready | None, attempt: int, result: str) -> str | None:
    """The harness error of an attempt that did not pass while its model endpoint was failing."""
    upstream = ready.access.endpoint_failure() if ready is not None and ready.access is not None else None
    if upstream is not None and result not in (AttemptResult.PASS, AttemptResult.PROBE_PASS):
        # The attempt ended while the declared model endpoint was failing: what the agent
        # could not do without its model is the infrastructure's failure, never the agent's.
        return (f"{ENDPOINT_FAILED} while attempt {attempt} ran ({upstream}); the attempt "
                f"ended {result}, which is not counted as the agent's")
    return None


def final_outcome(result: str) -> Outcome:
    """The task's outcome once an attempt's result ends it."""
    if result == AttemptResult.PROBE_PASS:
        return Outcome.PASS
    if result == AttemptResult.PROBE_FAIL:
        return Outcome.FAIL
    return Outcome(result)


# ----------------------------------------------------------------------------- running one attempt

_LOW_SPACE = 1 << 20


@dataclass(frozen=True)
class AttemptSpec:
    """One attempt, described by plain values (what an executor needs to run it anywhere)."""

    task: Task
    attempt: int
    budget_s: float
    """Seconds that remain for the task when the attempt starts (its deadline, counted from then)."""
    task_dir: Path
    """The task's folder: the agent's workspace, the host-private folder, its grading copies."""
    fresh: bool
    """Materialise the workspace anew first (the task's first attempt in this process, or one
    after an attempt whose end is unknown)."""
    feedback: str = ""
    """What the previous attempt's feedback says (the prompt's ``{feedback}``)."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.task.task_id, self.attempt)


@dataclass(frozen=True)
class AttemptFacts:
    """What one attempt did, as the events to journal and the values the coordinator decides on.

    Exactly one of three endings: ``result`` (the attempt finished), ``stopped`` (it was
    stopped: nothing about it is decided, it stays used), ``error`` (the harness failed).
    """

    task_id: str
    attempt: int
    agent: ev.AgentFinished | None = None
    capture: ev.PatchCaptured | None = None
    grading: ev.Graded | None = None
    finished: ev.AttemptFinished | None = None
    feedback_event: ev.Feedback | None = None
    feedback: str = ""
    """What the next attempt's prompt shows (after a failed attempt that is not the last)."""
    stopped: str | None = None
    storage_failure: str | None = None
    """Why the run's own storage failed, when that stopped the attempt (the run stops now)."""
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def result(self) -> str | None:
        return self.finished.result if self.finished is not None else None

    def events(self) -> list[ev.Event]:
        """The attempt's events, in the order the journal holds them."""
        done = [self.agent, self.capture, self.grading, self.finished, self.feedback_event]
        return [e for e in done if e is not None]


@dataclass
class Ready:
    """One attempt's prompt written and, for a command agent, its sandbox set up and waiting."""

    attempt: int
    prompt: str
    prompt_file: Path
    prepared: Prepared | None
    access: AttemptAccess | None = None
    """The attempt's way to the model gateway (a model-backed command agent), closed with ``prepared``."""
    output: tuple[bytes, bytes] | None = None
    """What the command agent printed (stdout, stderr, as kept), once it has run."""


def render_prompt(template: str, task: Task, attempt: int, max_attempts: int, feedback: str) -> str:
    """Fill a frozen template in one pass: {task_prompt} {task_id} {attempt} {max_attempts} {feedback}."""
    values = {
        "task_prompt": task.prompt.rstrip("\n"),
        "task_id": task.task_id,
        "attempt": str(attempt),
        "max_attempts": str(max_attempts),
        "feedback": feedback,
    }
    return re.sub(r"\{(" + "|".join(values) + r")\}", lambda m: values[m.group(1)], template)


def ready_attempt(settings: Settings, task: Task, task_ws: TaskWorkspace, attempt: int, feedback: str,
                  cpu: AbstractContextManager[Any] | None = None) -> Ready:
    """Write the attempt's prompt and, for a command agent, set its sandbox up (held before exec;
    ``cpu`` held while it is spawned, see :func:`set_up`)."""
    max_attempts = settings.max_attempts
    template = settings.template_override or task.template
    prompt = render_prompt(template, task, attempt, max_attempts, feedback)
    # Host-private and bound read-only: never a path inside the workspace, where a link the
    # previous attempt planted would turn this write into a write anywhere on the host.
    prompt_file = task_ws.private / "prompt.md"
    if attempt > 1:
        task_ws.reset_private()
    write_atomic(prompt_file, prompt, durable=False)
    if attempt > 1:
        task_ws.reset_meta()
    prepared = None
    access = None
    agent = settings.agent
    if agent.kind == "command":
        values = {"prompt_file": str(prompt_file), "workspace": str(task_ws.agent_dir), "attempt": str(attempt),
                  "max_attempts": str(max_attempts), "task_id": task.task_id}
        mounts = [Path(m) for m in (settings.contract.agent.mounts if settings.contract.agent else [])]
        env = task_env(settings, task, task_ws.agent_dir, attempt, prompt_file)
        # A model-backed agent: a token, the gateway's URLs and a relay into this sandbox alone,
        # closed (its calls journaled) when the prepared sandbox is closed, before agent_finished.
        gateway = settings.gateway
        access = gateway.open_attempt(task.task_id, attempt) if gateway is not None else None
        try:
            # The deadline is set when the attempt starts, from the time that remains then.
            spec = sandbox_spec(settings, render_argv(agent.command, values), task_ws.agent_dir,
                                {**env, **(access.env if access else {})}, settings.budget.wall_clock_s,
                                [*mounts, task_ws.private], task=task)
            with cpu or contextlib.nullcontext():
                prepared = settings.sandbox.prepare(dataclasses.replace(spec, relay=access.relay) if access else spec)
        except BaseException:
            if access is not None:
                access.close()
            raise
        if access is not None:
            prepared = access.guard(prepared)
    return Ready(attempt, prompt, prompt_file, prepared, access)


def run_agent(settings: Settings, cancel: Cancellation, task: Task, task_ws: TaskWorkspace, ready: Ready,
              deadline: float) -> dict[str, Any]:
    """Run the agent for one attempt until ``deadline``; its facts (``agent_finished`` fields).

    Raises:
        Stopped: cancelled while it ran.
    """
    agent = settings.agent
    attempt = ready.attempt
    remaining = deadline - time.monotonic()  # set-up time, if any, came out of it
    if ready.prepared is not None:
        prepared = ready.prepared
        try:
            res = cancel.start(prepared, max(0.0, remaining))
        finally:
            prepared.close()
        ready.output = (res.stdout or b"", res.stderr or b"")
        return process_facts(settings, res)
    started = time.monotonic()
    if agent.kind == "builtin":
        assert agent.builtin is not None
        action = agent.builtin(task, task_ws.agent_dir, attempt)
        return {"exit_code": 0, "timed_out": False, "elapsed_ms": int((time.monotonic() - started) * 1000),
                "action": action}
    assert agent.callable is not None
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["action"] = agent.callable(task.record.model_dump(mode="json"), task_ws.agent_dir, attempt)  # type: ignore[misc]
        except Exception as e:  # the agent's failure, recorded as its exit
            box["error"] = f"{type(e).__name__}: {e}"

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    # An in-process agent cannot be killed: stopping now abandons it (it dies with the process).
    end = time.monotonic() + max(0.0, remaining)
    while worker.is_alive() and time.monotonic() < end:
        worker.join(min(0.1, max(0.0, end - time.monotonic())))
        if cancel.cancelled:
            raise Stopped
    timed_out = worker.is_alive()
    facts: dict[str, Any] = {"exit_code": None if timed_out else (1 if "error" in box else 0), "timed_out": timed_out,
             "elapsed_ms": int((time.monotonic() - started) * 1000)}
    if "error" in box:
        facts["error"] = box["error"]
    try:
        json.dumps(box.get("action"))
        facts["action"] = box.get("action")
    except (TypeError, ValueError):
        facts["action"] = repr(box.get("action"))
    return facts


def wait_gap(cancel: Cancellation, since: float, gap_s: float, deadline: float) -> None:
    """Wait until a whole multiple of ``gap_s`` has passed since ``since`` (or the deadline), so
    the next attempt cannot time the grading of the previous one (it sees at most how many
    whole gaps it took)."""
    elapsed = time.monotonic() - since
    until = since + max(1, math.ceil(elapsed / gap_s)) * gap_s
    cancel.pause(max(0.0, min(until, deadline) - time.monotonic()))


TRACE_CAPS: Final = TraceCaps()
"""What of an agent's trace folder a run keeps as blobs (see :class:`sealbench.agentfs.TraceCaps`)."""
AGENT_ENDING_FILE: Final = "sealbench-ending.json"
"""What a preset's launcher writes to the trace folder (see :mod:`sealbench.presets.launch`)."""


def transcript(settings: Settings, task_ws: TaskWorkspace) -> dict[str, Any]:
    """The agent's trace folder, read without following it anywhere: its digest and, from
    derivation version 3 on, its files, kept as blobs (``agent_finished`` fields)."""
    below = (META_DIR, "trace")
    try:
        # From the workspace down: .sealbench/ itself may be the agent's link to a host folder.
        if not settings.vocabulary.transcripts:  # only the folder's digest
            return {"transcript": trace_digest(task_ws.agent_dir, settings.tree_caps, below=below)}
        trace = read_trace(task_ws.agent_dir, settings.tree_caps, TRACE_CAPS, below=below)
    except TreeRejected as e:
        return {"transcript": None, "transcript_rejected": e.reason}
    files = [ev.TraceFile(path=t.path, type=t.kind, sha256=t.digest or None,
                          **ev.present(bytes=t.size, not_kept=t.not_kept,
                                       blob=store_bytes(settings.run_dir, t.data, durable=settings.durable_blobs)
                                       if t.data is not None else None))
             for t in trace.entries]
    ending = None
    if settings.vocabulary.agent_ending:
        ending = agent_ending(next((t.data for t in trace.entries if t.path == AGENT_ENDING_FILE), None))
    # Absent when the folder is empty (most agents write nothing there): the line stays short.
    return {"transcript": trace.digest, **ev.present(transcript_files=files or None,
                                                      transcript_files_omitted=trace.omitted or None,
                                                      agent_ending=ending)}


def agent_ending(data: bytes | None) -> ev.AgentEnding | None:
    """How the agent says it ended: ``sealbench-ending.json`` of its trace folder, as a preset's
    launcher writes it, or None when there is none or it is not that record (the agent can
    write the folder; what it says there is its word and decides nothing)."""
    if data is None or len(data) > 64 << 10:
        return None
    try:
        raw = json.loads(data)
        code, ending, said = raw["exit_code"], raw["ending"], raw["said"]
    except Exception:  # not JSON, not that shape, nested past the recursion limit: not a record
        return None
    if not (code is None or (type(code) is int and -(2**31) <= code < 2**31)) \
            or not (ending is None or _utf8(ending)) or not isinstance(said, list) \
            or not all(_utf8(x) for x in said):
        return None
    return ev.AgentEnding(exit_code=code, ending=ending[:500] if ending else ending,
                          said=[x[:200] for x in said[:20]])


def _utf8(value: object) -> bool:
    """A string the journal can write (JSON lets a lone surrogate through; UTF-8 does not)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass
class Capture:
    changed: list[str]
    patch: bytes
    rejected: str | None = None
    timed_out: bool = False


def capture(task_ws: TaskWorkspace, deadline: float, on_changes: Callable[[], None] | None = None) -> Capture:
    """What the attempt changed, and its patch; a tree over the caps is refused, with why.

    ``on_changes`` is called once the attempt is known to have changed something, before its
    patch is taken (which runs git twice)."""
    try:
        changed = task_ws.changes()
        if changed and on_changes is not None:
            on_changes()
        patch = task_ws.capture_patch(deadline - time.monotonic()) if changed else b""
    except TreeRejected as e:
        return Capture([], b"", rejected=e.reason)
    except subprocess.TimeoutExpired:
        return Capture([], b"", timed_out=True)
    return Capture(changed, patch)


def storage_exhausted(path: Path) -> str | None:
    """Why the storage of ``path`` cannot take writes now (read-only, full), or None.

    Consulted when the harness fails without an OSError saying why (git or another tool
    failing on a full disk): such a failure is the storage's, not a harness error.
    """
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return "read-only file system"
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    if free < _LOW_SPACE or (st.f_files > 0 and st.f_favail == 0):
        return f"no space left on device ({free} bytes, {st.f_favail} inodes free)"
    return None


def storage_failed(run_dir: Path, exc: BaseException | None) -> str | None:
    """Why the run's own storage failed, when ``exc`` (or, with none, the storage's state) says it did."""
    failure = storage_failure(exc) if exc is not None else None
    if failure is not None:
        return f"storage failure: {describe_storage_failure(failure)}"
    why = storage_exhausted(run_dir)
    if why is None:
        return None
    if exc is None:
        return f"storage failure: {why}"
    return f"storage failure: {why} after {type(exc).__name__}: {str(exc)[:300]}"


@dataclass
class Setup:
    """What was set up for an attempt before it started (costing the agent nothing), or why
    setting it up failed (the harness's failure, recorded once the attempt has started)."""

    ready: Ready | None = None
    error: Exception | None = None

    def close(self) -> None:
        if self.ready is not None and self.ready.prepared is not None:
            self.ready.prepared.close()


def set_up(settings: Settings, spec: AttemptSpec, task_ws: TaskWorkspace,
           cpu: AbstractContextManager[Any] | None = None) -> Setup:
    """The workspace materialised (for a fresh spec) and the attempt made ready, ahead of its start.

    ``cpu`` is held while the set-up computes (the copy of the workspace, the sandbox's spawn):
    an executor that sets many up at once lets only a few compute together, so that the first
    are ready first and the runner's own threads (the journal's heartbeat) are not starved,
    while a wait on the gateway's loop overlaps freely.
    """
    try:
        if spec.fresh:
            with cpu or contextlib.nullcontext():
                task_ws.materialise()
        return Setup(ready=ready_attempt(settings, spec.task, task_ws, spec.attempt, spec.feedback, cpu=cpu))
    except Exception as e:  # the harness's failure: recorded once the attempt has started
        return Setup(error=e)


class _Run:
    """One attempt under way: what it is, its deadline, and the events it has so far."""

    def __init__(self, spec: AttemptSpec, settings: Settings, cancel: Cancellation, task_ws: TaskWorkspace) -> None:
        self.spec, self.settings, self.cancel, self.task_ws = spec, settings, cancel, task_ws
        self.started = time.monotonic()
        self.deadline = self.started + spec.budget_s
        self.done: dict[str, Any] = {}

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def facts(self, **more: Any) -> AttemptFacts:
        return AttemptFacts(task_id=self.spec.task.task_id, attempt=self.spec.attempt,
                            elapsed_s=time.monotonic() - self.started, **self.done, **more)


def run_attempt(spec: AttemptSpec, settings: Settings, cancel: Cancellation, task_ws: TaskWorkspace,
                setup: Setup | None = None) -> AttemptFacts:
    """Run one attempt to its end: the agent, the capture of its patch, grading, and (after a
    failure that is not the last attempt) the wait between attempts and the feedback.

    ``task_ws`` is the task's workspace object (it remembers the base the patch is taken against);
    ``setup``, what was set up ahead. Never raises for the attempt's own sake: a stop, a
    storage failure and a harness error are facts too.
    """
    run = _Run(spec, settings, cancel, task_ws)
    try:
        return _attempt(run, setup)
    except Exception as e:
        return run.facts(**failure_facts(e, cancel, settings.run_dir))


def failure_facts(exc: Exception, cancel: Cancellation, run_dir: Path) -> dict[str, str]:
    """How an attempt that raised ``exc`` ended: stopped, stopped by the storage, or a harness error."""
    if isinstance(exc, Stopped) or cancel.cancelled:
        # The operator or the infrastructure stopped the attempt: nothing about it is decided.
        return {"stopped": cancel.reason or "the run stopped"}
    why = storage_failed(run_dir, exc)
    if why is not None:
        return {"stopped": why, "storage_failure": why}
    # The harness failed, not the agent: recorded, and the task stays in the denominator.
    return {"error": f"{type(exc).__name__}: {exc}"}


def _attempt(run: _Run, setup: Setup | None) -> AttemptFacts:
    """:func:`run_attempt`'s steps, in order; what raises is :func:`failure_facts`'s to tell."""
    settings, spec, task_ws = run.settings, run.spec, run.task_ws
    tid, attempt = spec.task.task_id, spec.attempt
    ready, prompt, agent_facts = _run_the_agent(run, setup)
    why = _storage_failure(settings, ready)
    if why is not None:  # an agent whose writes failed on a full disk is not judged on them
        return run.facts(stopped=why, storage_failure=why)
    gap_from = time.monotonic()
    agent = ev.AgentFinished(task_id=tid, attempt=attempt, prompt_sha256=sha256_bytes(prompt.encode()),
                             **transcript(settings, task_ws), **agent_facts)
    run.done["agent"] = agent
    with HeldOracle(settings, spec.task, task_ws, attempt) as held:
        cap = _capture(run, agent, held)
        patch_digest = store_bytes(settings.run_dir, cap.patch, durable=settings.durable_blobs) if cap.patch else None
        run.done["capture"] = ev.PatchCaptured(task_id=tid, attempt=attempt, patch_sha256=patch_digest,
                                               empty=not cap.patch, changed=cap.changed[:200],
                                               changed_count=len(cap.changed),
                                               **ev.present(rejected=cap.rejected,
                                                            capture_timed_out=True if cap.timed_out else None))
        end = AgentEnd(exit_code=agent.exit_code, timed_out=bool(agent.timed_out), patch_empty=not cap.patch,
                       capture_timed_out=cap.timed_out, rejected=cap.rejected)
        never = _never_started(ready, cap, agent.exit_code)
        if never is not None:
            return run.facts(error=never)
        grading = _grade(run, cap, held) if must_grade(end, probe=settings.probe) else None
    result = classify(end, grading, probe=settings.probe)
    assert result is not None
    run.done["finished"] = ev.AttemptFinished(task_id=tid, attempt=attempt, result=result,
                                              elapsed_ms=int((time.monotonic() - run.started) * 1000))
    upstream = _endpoint_failed(ready, attempt, result)
    if upstream is not None:
        return run.facts(error=upstream)
    if settings.probe or result != AttemptResult.FAIL or attempt >= settings.max_attempts:
        return run.facts()
    return _feedback(run, gap_from)


def _run_the_agent(run: _Run, setup: Setup | None) -> tuple[Ready | None, str, dict[str, Any]]:
    """The attempt made ready (unless ``setup`` did) and its agent run: what was ready, the
    prompt and the agent's facts (``agent_finished`` fields)."""
    settings, spec, task_ws = run.settings, run.spec, run.task_ws
    if setup is None:
        setup = set_up(settings, spec, task_ws) if spec.fresh else Setup()
    if setup.error is not None:
        raise setup.error
    ready = setup.ready
    try:
        if ready is None or ready.attempt != spec.attempt:
            ready = ready_attempt(settings, spec.task, task_ws, spec.attempt, spec.feedback)
        return ready, ready.prompt, run_agent(settings, run.cancel, spec.task, task_ws, ready, run.deadline)
    except TreeRejected as e:
        # Only without a sandbox can an attempt replace its own workspace folder.
        return ready, "", {"exit_code": None, "timed_out": False, "elapsed_ms": 0,
                           "error": f"the workspace was replaced: {e.reason}"}


def _storage_failure(settings: Settings, ready: Ready | None) -> str | None:
    """Why the run's storage failed while the agent ran, or None."""
    why = storage_failed(settings.run_dir, None)
    if why is None and ready is not None and ready.access is not None:
        why = ready.access.storage_failure()  # a model call the record lacks a part of
    return why


def _capture(run: _Run, agent: ev.AgentFinished, held: HeldOracle) -> Capture:
    """What the attempt changed, and its patch; the oracle set up ahead meanwhile (``held``)."""
    settings, spec, task_ws = run.settings, run.spec, run.task_ws
    if agent.workdir_rejected:
        # The copy back of the quota'd workspace stopped at a cap: the agent's failure. What
        # it copied so far is cut off at the cap, and an attempt started on it could break
        # the same cap on the way in (250,000 entries, plus the trace folder it rebuilds),
        # a harness error: the next attempt starts from the pack's workspace instead.
        if spec.attempt < settings.max_attempts and not settings.probe:
            task_ws.materialise()
        return Capture([], b"", rejected=agent.workdir_rejected)

    def oracle_ahead() -> None:
        # The patch is not empty (or only in what capture drops): the oracle's sandbox sets
        # itself up while git takes the patch, unless the attempt cannot be graded anyway.
        end = AgentEnd(exit_code=agent.exit_code, timed_out=bool(agent.timed_out), patch_empty=False)
        if must_grade(end, probe=settings.probe):
            held.set_up(run.remaining())

    return capture(task_ws, run.deadline, oracle_ahead)


def _grade(run: _Run, cap: Capture, held: HeldOracle) -> Grading | None:
    """The hidden tests' verdict on the patch (its ``graded`` event kept), or None when no time
    was left for them."""
    remaining = run.remaining()
    if remaining <= 0:
        return None
    job = GradeJob(run.spec.task, run.task_ws, run.spec.attempt, cap.patch, cap.changed, remaining)
    try:
        event = grade(GradeContext(run.settings, run.cancel), job, held)
    except subprocess.TimeoutExpired:
        return None
    run.done["grading"] = event
    return Grading(task_pass=bool(event.task_pass), oracle_timed_out=bool(event.oracle_timed_out))


def _feedback(run: _Run, gap_from: float) -> AttemptFacts:
    """After a failed attempt that is not the last: the wait between attempts, then the feedback."""
    settings, spec = run.settings, run.spec
    gap_s = settings.budget.attempt_gap_s
    if gap_s is not None:
        # First of all: the visible tests' run, the prompt file, .sealbench/ and the
        # sandbox all carry the time they were made, which would tell the next
        # attempt when this one's grading ended.
        wait_gap(run.cancel, gap_from, gap_s, run.deadline)
    text, shown = feedback(GradeContext(settings, run.cancel), spec.task, run.task_ws, spec.attempt, run.remaining())
    run.done["feedback_event"] = shown
    return run.facts(feedback=text)
