"""The journal's vocabulary: one frozen model per event kind, in a union tagged by ``kind``.

Every line of ``journal.jsonl`` is an envelope (``journal_version``, ``seq``, ``time``,
``mono_ms``, ``boot_id``, ``prev``, ``hash``: see :mod:`sealbench.journal`) around one event:
its ``kind``, the ``task_id`` and ``attempt`` it is about, and a ``payload``. The models here
hold the event with its payload's fields flattened onto it, so a reader writes
``ev.outcome``, never ``ev["payload"]["outcome"]``; no other module spells a kind or the
payload key (a test holds the package to it).

Reading refuses a kind this release does not know and a payload key its kind does not have,
naming the journal line (:class:`EventError`): ``verify`` lists it as a problem and a resume
refuses. Every field any release wrote is accepted, and every payload field is optional
(older releases wrote fewer; whether a task's events tell a story the runner could have
written is :mod:`sealbench.consistency`'s to check), so journals written by earlier releases
read as they were written.

Writing: :meth:`Event.payload` is exactly the keys the code set (``exclude_unset``), with the
values it gave, so a line's bytes, and so every hash and derived byte, are what they were
before these models existed. Numbers that may be whole are ``int | float``: a strict float
would turn a ``3`` into ``3.0`` and change the bytes.

Each model names the fields that hold stored blobs (the sha256 of a file in ``blobs/``) by
typing them :data:`Blob`; :func:`blob_fields` yields them, which is what a bundle copies and
checks. Free-form fields (an agent's ``action``) are never blobs, so an agent cannot make a
bundle demand a blob that was never stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, TypeAlias, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

# ----------------------------------------------------------------------------- envelope

KIND: Final = "kind"
TASK_ID: Final = "task_id"
ATTEMPT: Final = "attempt"
PAYLOAD: Final = "payload"
FIELDS_V1: Final = ("journal_version", "seq", "time", KIND, TASK_ID, ATTEMPT, PAYLOAD, "prev", "hash")
"""The fields of a version 1 line (older releases)."""
FIELDS_V2: Final = (*FIELDS_V1, "mono_ms", "boot_id")
"""The fields of a version 2 line: version 1's plus the clocks time is charged from."""
DERIVATION_VERSION: Final = "derivation_version"
_ENVELOPE_EVENT_KEYS = frozenset({KIND, TASK_ID, ATTEMPT})
_NOT_PAYLOAD: set[str] = set(_ENVELOPE_EVENT_KEYS)


class _BlobMarker:
    """Marks a field whose value names a stored blob."""

    def __repr__(self) -> str:
        return "Blob"


BLOB_MARK: Final = _BlobMarker()
Blob = Annotated[str | None, BLOB_MARK]
"""A field naming a stored blob (``sha256:<hex>`` of a file in ``blobs/``), or null."""
Num = int | float
"""A number kept as written: a whole number stays an int (a strict float would rewrite 3 as 3.0)."""


class Model(BaseModel):
    """Base of every event and nested payload part: unknown keys and loose types are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


class ProcessFacts(Model):
    """What one sandboxed command did: its exit, its time and its output, stored as blobs."""

    exit_code: int | None = Field(None, description="Exit status; null when killed or timed out.")
    signal: int | None = Field(None, description="The signal that ended it, if any.")
    timed_out: bool | None = Field(None, description="True when its deadline killed it.")
    elapsed_ms: int | None = Field(None, description="Its wall time.")
    stdout: Blob = Field(None, description="Blob of its standard output (capped).")
    stderr: Blob = Field(None, description="Blob of its standard error (capped).")
    stdout_bytes: int | None = Field(None, description="Bytes it wrote to stdout, beyond the cap included.")
    stderr_bytes: int | None = Field(None, description="Bytes it wrote to stderr, beyond the cap included.")
    stdout_truncated: bool | None = Field(None, description="True when stdout passed the cap.")
    stderr_truncated: bool | None = Field(None, description="True when stderr passed the cap.")
    workdir_rejected: str | None = Field(None, description="Why its working directory (under a disk quota) was "
                                         "not copied back whole: the command's doing.")


class Event(Model):
    """One journal event: its kind, the task and attempt it is about, and its payload fields."""

    kind: str
    task_id: str | None = Field(None, description="The task, for task events.")
    attempt: int | None = Field(None, description="The attempt, for attempt events.")

    def payload(self) -> dict[str, Any]:
        """The payload as journaled: exactly the fields set, with their values."""
        return self.model_dump(exclude_unset=True, exclude=_NOT_PAYLOAD)


# ----------------------------------------------------------------------------- kinds

RUN_STARTED: Final = "run_started"
RUN_RESUMED: Final = "run_resumed"
RUN_INTERRUPTED: Final = "run_interrupted"
RUN_FINISHED: Final = "run_finished"
JOURNAL_REPAIRED: Final = "journal_repaired"
HEARTBEAT: Final = "heartbeat"
TASK_STARTED: Final = "task_started"
ATTEMPT_STARTED: Final = "attempt_started"
AGENT_FINISHED: Final = "agent_finished"
PATCH_CAPTURED: Final = "patch_captured"
GRADED: Final = "graded"
FEEDBACK: Final = "feedback"
ATTEMPT_FINISHED: Final = "attempt_finished"
ATTEMPT_INTERRUPTED: Final = "attempt_interrupted"
TIME_CHARGED: Final = "time_charged"
HARNESS_ERROR: Final = "harness_error"
TASK_FINISHED: Final = "task_finished"
MODEL_CALL: Final = "model_call"
MODEL_CALL_STARTED: Final = "model_call_started"
SUBMITTED: Final = "submitted"
DUPLICATE_RESULT: Final = "duplicate_result"


class RunHeader(Event):
    """What a runner process records when it starts or resumes a run."""

    contract_sha256: str | None = Field(None, description="The locked contract's digest.")
    pack_sha256: str | None = Field(None, description="The sealed pack's digest.")
    argv: Any = Field(None, description="The command line that started the process; null for a library call.")
    provenance: dict[str, Any] | None = Field(None, description="The pack's provenance.")
    run_id: str | None = Field(None, description="The contract's run_id.")
    task_ids_count: int | None = Field(None, description="Size of the denominator.")
    probe: bool | None = Field(None, description="True in the narration probe's journal.")
    heartbeat_ms: int | None = Field(None, description="Most ms between two lines while the run is live.")
    lease_ms: int | None = Field(None, description="The runner ends itself after this many silent ms.")
    run_nonce: str | None = Field(None, description="Random id of the run, the same in every resume.")
    derivation_version: int | None = Field(None, description="Rules the run's derived files follow (absent: 1).")
    sealbench_version: str | None = Field(None, description="The release that wrote the line.")
    python: str | None = Field(None, description="The Python version.")
    platform: str | None = Field(None, description="The operating system.")
    sandbox: dict[str, Any] | None = Field(None, description="How commands were isolated (kind, tool, limits).")
    agent: dict[str, Any] | None = Field(None, description="The agent under test (kind, label, command).")
    workspace_quota: bool | None = Field(None, description="False when the run opted out of the workspaces' disk "
                                         "quota (run --no-workspace-quota); absent otherwise.")
    pack_path: str | None = Field(None, description="The pack's directory when `run --pack` located a pack that "
                                  "moved from the contract's pack.path (derivation version 3 on); absent otherwise.")
    replay_of: dict[str, Any] | None = Field(None, description="The run this one replays (`run --replay`: its "
                                             "run_id and run_nonce); absent in a measured run.")
    environments: dict[str, str] | None = Field(
        None, description="The built environments the tasks run in: each spec's digest to the tree digest of its "
        "build (a resume refuses one that differs); absent when no task names one.")
    continuation: str | None = Field(
        None, description="Random id of this start or resume of the run, given to it by the runs index before the "
        "line is written: a copy of the run directory whose last one is not the index's is left behind and never "
        "resumed; absent in journals from before it.")
    moved_from: str | None = Field(None, description="The run directory the run continued in before this resume "
                                   "(`sealbench runs move`, or a renamed directory); absent when it stayed.")

    def derivation(self) -> int:
        """The derivation version: 1 when absent (journals from before it was recorded), -1
        when it is null (no version this release derives)."""
        if DERIVATION_VERSION not in self.model_fields_set:
            return 1
        return self.derivation_version if self.derivation_version is not None else -1


class RunStarted(RunHeader):
    """The first line of every journal."""

    kind: Literal["run_started"] = RUN_STARTED


class RunResumed(RunHeader):
    """A process continues the run (same contract, pack, agent and nonce)."""

    kind: Literal["run_resumed"] = RUN_RESUMED


class RunInterrupted(Event):
    """A signal or a storage failure stopped the run."""

    kind: Literal["run_interrupted"] = RUN_INTERRUPTED
    reason: str | None = Field(None, description="What stopped it.")
    pending: int | None = Field(None, description="Tasks not yet finished.")


class RunFinished(Event):
    """Every task of the denominator finished."""

    kind: Literal["run_finished"] = RUN_FINISHED
    outcomes: dict[str, int] | None = Field(None, description="Count of each outcome in this process.")


class JournalRepaired(Event):
    """A resume moved a torn last line aside."""

    kind: Literal["journal_repaired"] = JOURNAL_REPAIRED
    torn_bytes: int | None = Field(None, description="Length of the torn line.")
    torn_sha256: str | None = Field(None, description="Its digest.")
    moved_to: str | None = Field(None, description="The file beside the journal that holds it.")


class Heartbeat(Event):
    """The run is alive (written, not fsynced: see the module sealbench.clock)."""

    kind: Literal["heartbeat"] = HEARTBEAT


class TaskStarted(Event):
    """A task of the denominator begins, with its caps."""

    kind: Literal["task_started"] = TASK_STARTED
    max_attempts: int | None = Field(None, description="The retry cap.")
    wall_clock_s: Num | None = Field(None, description="The wall-clock cap.")
    prompt_template_id: str | None = Field(None, description="The frozen template used.")
    hidden_tests_sha256: str | None = Field(None, description="Digest of the hidden tests.")
    oracle_cmd: list[str] | None = Field(None, description="The oracle's argv as run.")
    oracle_guard: str | None = Field(None, description="'none' for a pytest oracle run as sealed, unguarded.")
    committed_at: str | None = Field(None, description="The task's commit date from its record's provenance, "
                                     "when the contract claims fresh tasks (`--fresh-after`); absent otherwise.")


class AttemptStarted(Event):
    """An attempt is used from this line on."""

    kind: Literal["attempt_started"] = ATTEMPT_STARTED
    budget_s: Num | None = Field(None, description="Seconds that remained for the task.")


class Submitted(Event):
    """The coordinator handed the attempt to an executor (after its attempt_started line)."""

    kind: Literal["submitted"] = SUBMITTED
    node: str | None = Field(None, description="The cluster node the attempt was handed to (run --executor ray); "
                             "absent for the local pool.")


class TraceFile(Model):
    """One entry of the agent's trace folder (``SEALBENCH_TRACE_DIR``), as the harness read it
    without following a link; a regular file within the caps is kept as a blob."""

    path: str | None = Field(None, description="Its path inside the trace folder ('/'-separated).")
    type: str | None = Field(None, description="f (file), x (executable file), l (symlink, never followed) "
                             "or s (anything else), as in the tree digest.")
    sha256: str | None = Field(None, description="Its entry digest in the tree digest: the file's bytes, or the "
                               "link's target text; null for s.")
    bytes: int | None = Field(None, description="Its size in bytes (a file's).")
    blob: Blob = Field(None, description="Blob of the file's bytes; null when not kept.")
    not_kept: str | None = Field(None, description="Why its bytes were not kept (a cap, a link, a special file).")


class AgentEnding(Model):
    """How the agent itself says it ended, as a preset's launcher recorded it in the trace
    folder (``sealbench-ending.json``): the agent's word, never the verdict."""

    exit_code: int | None = Field(None, description="The agent's own exit code.")
    ending: str | None = Field(None, description="The ending its transcript states (mini-swe-agent's exit status, "
                               "Codex CLI's last event, Claude Code's result subtype); null when it states none.")
    said: list[str] = Field(default_factory=list, description="What its output said of its ending, by the preset's "
                            "labels ('edit did not apply').")


class AgentFinished(ProcessFacts, Event):
    """The agent's attempt ended (its process facts, or a Python agent's)."""

    kind: Literal["agent_finished"] = AGENT_FINISHED
    prompt_sha256: str | None = Field(None, description="Digest of the prompt the agent was given.")
    transcript: str | None = Field(None, description="Tree digest of the agent's trace folder.")
    transcript_rejected: str | None = Field(None, description="Why the trace folder was not read.")
    transcript_files: list[TraceFile] | None = Field(None, description="The trace folder's entries in path order "
                                                     "(derivation version 3 on; absent when it is empty).")
    transcript_files_omitted: int | None = Field(None, description="Entries of the trace folder past the "
                                                 "listing's cap, not listed.")
    agent_ending: AgentEnding | None = Field(None, description="How the agent says it ended, read from its trace "
                                             "folder (derivation version 4 on; absent when it says nothing).")
    action: Any = Field(None, description="What a built-in or Python agent returned (free-form; never a blob).")
    error: str | None = Field(None, description="Why the agent failed without an exit code.")


class PatchCaptured(Event):
    """What the attempt changed."""

    kind: Literal["patch_captured"] = PATCH_CAPTURED
    patch_sha256: Blob = Field(None, description="Blob of the patch; null when empty.")
    empty: bool | None = Field(None, description="True when nothing changed.")
    changed: list[str] | None = Field(None, description="Changed paths (the first 200).")
    changed_count: int | None = Field(None, description="How many paths changed.")
    rejected: str | None = Field(None, description="Why the tree was refused (over a cap, a special file).")
    capture_timed_out: bool | None = Field(None, description="True when capturing ran out of time.")


class Graded(Event):
    """The hidden tests' verdict on the attempt's patch, in a pristine copy."""

    kind: Literal["graded"] = GRADED
    patch_applies_clean: bool | None = Field(None, description="The patch applied without conflict.")
    forbidden: list[str] | None = Field(None, description="Forbidden paths the patch touched.")
    no_forbidden_path: bool | None = Field(None, description="True when it touched none.")
    tests_green: bool | None = Field(None, description="The oracle passed.")
    apply_message: str | None = Field(None, description="What applying the patch said (capped).")
    oracle: ProcessFacts | None = Field(None, description="The oracle's process facts.")
    oracle_guard: str | None = Field(None, description="The guard the harness's pytest ran under.")
    repo_install: ProcessFacts | None = Field(None, description="The sandboxed install of the grading copy "
                                              "before the oracle (an environment with install 'editable').")
    oracle_timed_out: bool | None = Field(None, description="The oracle ran out of time.")
    junit: dict[str, Any] | None = Field(None, description="The JUnit verdict (ok, ran, failed, missing_required, why).")
    oracle_ignored: list[str] | None = Field(None, description="Files the guarded oracle ignored.")
    forging_flags: list[str] | None = Field(None, description="Forging means the test process was seen using.")
    forging_detail: list[str] | None = Field(None, description="Where each flag was raised.")
    flagged_pass: str | None = Field(None, description="'counted' or 'not_counted' for a flagged green run.")
    task_pass: bool | None = Field(None, description="tests_green AND patch_applies_clean AND no_forbidden_path.")


class Feedback(Event):
    """What the agent is shown before its next attempt."""

    kind: Literal["feedback"] = FEEDBACK
    policy: str | None = Field(None, description="The budget's feedback policy.")
    visible_tests: ProcessFacts | None = Field(None, description="The visible tests' process facts.")


class AttemptFinished(Event):
    """The attempt's result."""

    kind: Literal["attempt_finished"] = ATTEMPT_FINISHED
    result: str | None = Field(None, description="pass, fail, abstain, timeout, probe_pass or probe_fail.")
    elapsed_ms: int | None = Field(None, description="The attempt's wall time.")


class AttemptInterrupted(Event):
    """An attempt a stop or a crash ended; it stays used."""

    kind: Literal["attempt_interrupted"] = ATTEMPT_INTERRUPTED
    reason: str | None = Field(None, description="What stopped it.")
    charged_s: Num | None = Field(None, description="Seconds charged, when the runner measured them.")
    charged_basis: str | None = Field(None, description="How they were measured.")


class TimeCharged(Event):
    """A resume's charge for a task's time in an ended session."""

    kind: Literal["time_charged"] = TIME_CHARGED
    session_seq: int | None = Field(None, description="The seq of the session's first line.")
    charged_s: Num | None = Field(None, description="Seconds charged.")
    basis: str | None = Field(None, description="Why that much.")


class HarnessFailed(Event):
    """The harness failed the task (never the agent's failure)."""

    kind: Literal["harness_error"] = HARNESS_ERROR
    error: str | None = Field(None, description="What failed.")


class TaskFinished(Event):
    """The task's outcome; nothing of the task follows."""

    kind: Literal["task_finished"] = TASK_FINISHED
    outcome: str | None = Field(None, description="pass, fail, abstain, timeout, harness_error or infra_error.")
    attempts_used: int | None = Field(None, description="Attempts started.")
    elapsed_ms: int | None = Field(None, description="The task's wall time, charges included.")
    first_attempt_passed: bool | None = Field(None, description="Attempt 1 passed.")
    patch_sha256: Blob = Field(None, description="Blob of the final patch; null when empty.")
    probe_passed: bool | None = Field(None, description="Narration probe: the patch was empty.")
    error: str | None = Field(None, description="The harness error, for outcome harness_error; what ended the "
                              "last attempt, for outcome infra_error.")


class ModelCall(Event):
    """One request an attempt's agent made to the model gateway, forwarded or refused; journaled
    before the attempt's agent_finished, bodies as blobs without headers (a key echoed is removed)."""

    kind: Literal["model_call"] = MODEL_CALL
    index: int | None = Field(None, description="The attempt's calls numbered 0, 1, ... in order of arrival.")
    started_at: str | None = Field(None, description="UTC time the request arrived (for people).")
    latency_ms: int | None = Field(None, description="From the request's arrival to the reply's last byte.")
    status: int | None = Field(None, description="The HTTP status the agent got; null when none was sent.")
    endpoint: str | None = Field(None, description="The contract's endpoint name; null when the path named none.")
    model: str | None = Field(None, description="The model the request named.")
    streamed: bool | None = Field(None, description="True when the request asked for server-sent events.")
    request: Blob = Field(None, description="Blob of the request body (null when it was not read).")
    request_bytes: int | None = Field(None, description="Bytes of the request body read.")
    response: Blob = Field(None, description="Blob of the reply body as the agent got it (capped).")
    response_bytes: int | None = Field(None, description="Bytes of the reply body, beyond the cap included.")
    response_truncated: bool | None = Field(None, description="True when the stored reply stops at the cap.")
    input_tokens: int | None = Field(None, description="Input tokens as the upstream reported them; null when "
                                     "it reported none.")
    output_tokens: int | None = Field(None, description="Output tokens as reported; null when absent.")
    cached_tokens: int | None = Field(None, description="Cached input tokens as reported; null when absent.")
    refused: str | None = Field(None, description="Why the gateway refused the request (never sent upstream).")
    error: str | None = Field(None, description="What failed on the way: the upstream, or the agent went away.")
    cap: Literal["max_model_calls", "max_model_tokens", "max_model_cost"] | None = Field(
        None, description="The budget cap that refused the request (with refused; derivation version 3 on).")
    replayed: bool | None = Field(None, description="True when a replay answered it from the replayed bundle's "
                                  "record instead of forwarding it (run --replay).")
    diverged: str | None = Field(None, description="In a replay: why the request could not be answered from the "
                                 "record (the first field that differs from the recorded request, ...).")
    request_sha256: str | None = Field(None, description="Digest of the whole request body, when its blob is not "
                                       "it (cut to a prefix, or not stored); derivation version 5 on.")
    request_truncated: bool | None = Field(None, description="True when the request's blob holds only a prefix "
                                           "of the body (a refused body, or past the stored-bytes cap).")
    response_sha256: str | None = Field(None, description="Digest of the stored part of the reply when its blob "
                                        "could not be stored; derivation version 5 on.")
    bodies_missing: str | None = Field(None, description="Why the call's bodies could not be stored (the storage "
                                       "failed): their digests and sizes are recorded, their bytes are not.")
    refused_count: int | None = Field(None, description="The refused requests this line stands for: past an "
                                      "attempt's first refusals, they are counted and journaled as one line at its "
                                      "end (derivation version 5 on).")


class ModelCallStarted(Event):
    """A request the gateway is about to forward upstream, journaled durably before it leaves
    (derivation version 5 on): a call started and never ended (the runner died) still counts
    against the task's caps, with its use unknown."""

    kind: Literal["model_call_started"] = MODEL_CALL_STARTED
    index: int | None = Field(None, description="The call's index in its attempt (its model_call has the same).")
    started_at: str | None = Field(None, description="UTC time the request arrived (for people).")
    endpoint: str | None = Field(None, description="The contract's endpoint name.")
    model: str | None = Field(None, description="The model the request named.")
    streamed: bool | None = Field(None, description="True when the request asked for server-sent events.")
    request: Blob = Field(None, description="Blob of the request body as forwarded (a key echoed removed).")
    request_bytes: int | None = Field(None, description="Bytes of the request body.")
    request_sha256: str | None = Field(None, description="Digest of the whole body when its blob holds only a "
                                       "prefix (the stored-bytes cap was reached).")
    request_truncated: bool | None = Field(None, description="True when the blob holds only a prefix of the body.")


class DuplicateResult(Event):
    """A result an executor delivered for an attempt already decided (a second delivery, or one
    after the attempt was journaled as interrupted): recorded, never counted. A run event: its
    task may have finished, and nothing of a task follows its task_finished."""

    kind: Literal["duplicate_result"] = DUPLICATE_RESULT
    of_task: str | None = Field(None, description="The task of the attempt.")
    of_attempt: int | None = Field(None, description="The attempt.")
    result: str | None = Field(None, description="The result it carried (null: none, or a stopped attempt's).")
    reason: str | None = Field(None, description="Why it was not counted.")


AnyEvent: TypeAlias = Annotated[
    Union[RunStarted, RunResumed, RunInterrupted, RunFinished, JournalRepaired, Heartbeat, TaskStarted,  # noqa: UP007
          AttemptStarted, AgentFinished, PatchCaptured, Graded, Feedback, AttemptFinished, AttemptInterrupted,
          TimeCharged, HarnessFailed, TaskFinished, Submitted, DuplicateResult, ModelCall, ModelCallStarted],
    Field(discriminator=KIND),
]
"""Every event kind, told apart by ``kind``."""

EVENT_TYPES: Final[tuple[type[Event], ...]] = (
    RunStarted, RunResumed, RunInterrupted, RunFinished, JournalRepaired, Heartbeat, TaskStarted, AttemptStarted,
    AgentFinished, PatchCaptured, Graded, Feedback, AttemptFinished, AttemptInterrupted, TimeCharged,
    HarnessFailed, TaskFinished, Submitted, DuplicateResult, ModelCall, ModelCallStarted,
)
BY_KIND: Final[Mapping[str, type[Event]]] = {t.model_fields[KIND].default: t for t in EVENT_TYPES}
KINDS: Final = frozenset(BY_KIND)
"""Every kind this release reads and writes."""
SESSION_START: Final = (RunStarted, RunResumed, JournalRepaired)
"""The events a runner process writes first (see :mod:`sealbench.charge`)."""
HEADERS: Final = (RunStarted, RunResumed)
"""The events that carry a run header."""


_EACH: Final = "[]"
"""Suffix of a path step that is a list: each of its items is followed."""


def _blob_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> tuple[tuple[str, ...], ...]:
    paths: list[tuple[str, ...]] = []
    for name, info in model.model_fields.items():
        if BLOB_MARK in info.metadata:
            paths.append((*prefix, name))
        for arg in getattr(info.annotation, "__args__", ()) or (info.annotation,):
            step = name
            if get_origin(arg) is list:
                arg, step = get_args(arg)[0], name + _EACH
            if isinstance(arg, type) and issubclass(arg, Model) and not issubclass(arg, Event):
                paths += _blob_paths(arg, (*prefix, step))
    return tuple(paths)


BLOB_FIELDS: Final[Mapping[str, tuple[tuple[str, ...], ...]]] = {
    kind: paths for kind, t in BY_KIND.items() if (paths := _blob_paths(t))
}
"""Where each kind names blobs: field paths into the event (``("oracle", "stdout")``)."""


def blob_fields(event: Event) -> Iterator[tuple[str, str]]:
    """``(dotted field name, value)`` of every blob the event names (null fields left out); an
    item of a list is named by its index (``transcript_files.0.blob``)."""
    for path in BLOB_FIELDS.get(event.kind, ()):
        if len(path) == 1:  # the usual shapes, followed without recursion: verify asks of every line
            value = getattr(event, path[0], None)
            if value is not None:
                yield path[0], value
        elif len(path) == 2 and not path[0].endswith(_EACH):
            value = getattr(getattr(event, path[0], None), path[1], None)
            if value is not None:
                yield f"{path[0]}.{path[1]}", value
        else:
            yield from _follow(event, path, ())


def _follow(value: Any, path: tuple[str, ...], names: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    if not path:
        if value is not None:
            yield ".".join(names), value
        return
    step = path[0]
    if step.endswith(_EACH):
        name = step.removesuffix(_EACH)
        for i, item in enumerate(getattr(value, name, None) or ()):
            yield from _follow(item, path[1:], (*names, name, str(i)))
    else:
        yield from _follow(getattr(value, step, None), path[1:], (*names, step))


# ----------------------------------------------------------------------------- reading


class EventError(ValueError):
    """A journal line whose event this release does not read: an unknown kind or field, a
    wrong type. The message names the line."""


def _reason(raw: Mapping[str, Any], error: ValidationError) -> str:
    kind = raw.get(KIND)
    parts = []
    for err in error.errors():
        loc = [str(p) for p in err["loc"]]
        if loc and loc[0] == kind:
            loc = loc[1:]
        name = ".".join(loc) or KIND
        where = name if name in _ENVELOPE_EVENT_KEYS else f"{PAYLOAD} field {name}"
        if err["type"] == "extra_forbidden":
            parts.append(f"{PAYLOAD} field {name!r} is not one a {kind} event has (unknown field)")
        else:
            parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def parse(raw: Mapping[str, Any], where: str) -> Event:
    """The typed event of one parsed journal line (its envelope is the journal's to check).

    Raises:
        EventError: an unknown kind, an unknown payload field, a wrong type; ``where`` names
            the line.
    """
    try:
        return _parse(raw)
    except _Refused as e:
        raise EventError(f"{where}: {e}") from None


class _Refused(Exception):
    """Why a parsed line is not an event (its line is named by the caller)."""


def _parse(raw: Mapping[str, Any]) -> Event:
    kind = raw.get(KIND)
    model = BY_KIND.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise _Refused(f"kind {kind!r} is not an event kind this release knows "
                       f"(an edited journal, or one written by a newer release)")
    payload = raw.get(PAYLOAD)
    if not isinstance(payload, dict):
        raise _Refused(f"the {kind} event's {PAYLOAD} is not a JSON object")
    clash = _ENVELOPE_EVENT_KEYS & payload.keys()
    if clash:
        raise _Refused(f"{PAYLOAD} field {sorted(clash)[0]!r} is not one a {kind} event has (unknown field)")
    try:
        # The model of the kind directly: the same check as the tagged union, at half its cost.
        return model.model_validate({**payload, KIND: kind, TASK_ID: raw.get(TASK_ID), ATTEMPT: raw.get(ATTEMPT)})
    except ValidationError as e:
        raise _Refused(_reason(raw, e)) from None


@dataclass(frozen=True, slots=True)
class Line:
    """One journal line: its envelope, its typed event, and the line as read (``raw``: hashes
    and traces are made of those exact values)."""

    seq: int
    time: str
    mono_ms: int | None
    boot_id: str | None
    event: Event
    raw: Mapping[str, Any]
    canonical: bytes | None = None
    """The line's canonical bytes when its reader kept them (:func:`journal.scan_chain`), else None."""

    @property
    def kind(self) -> str:
        return self.event.kind

    @property
    def task_id(self) -> str | None:
        return self.event.task_id

    @property
    def attempt(self) -> int | None:
        return self.event.attempt

    @property
    def has_clock(self) -> bool:
        """True for version 2 lines, which carry ``mono_ms`` and ``boot_id``."""
        return "mono_ms" in self.raw


def line_of(raw: Mapping[str, Any], where: str | Callable[[], str], canonical: bytes | None = None) -> Line:
    """The typed line of one parsed journal line; ``where`` names it (or makes its name, only
    when needed); ``canonical``, its canonical bytes when the reader has them.

    Raises:
        EventError: see :func:`parse`.
    """
    try:
        event = _parse(raw)
    except _Refused as e:
        raise EventError(f"{where if isinstance(where, str) else where()}: {e}") from None
    seq, mono, boot = raw.get("seq"), raw.get("mono_ms"), raw.get("boot_id")
    return Line(seq=seq if type(seq) is int else -1, time=str(raw.get("time")),
                mono_ms=mono if type(mono) is int else None, boot_id=boot if isinstance(boot, str) else None,
                event=event, raw=raw, canonical=canonical)


def where_in(source: str, raw: Any, index: int) -> str:
    """How messages name a hand-given event: by its seq when it has one."""
    seq = raw.get("seq") if isinstance(raw, dict) else None
    return f"{source} seq {seq}" if type(seq) is int else f"{source} event {index}"


def lines(items: Iterable[Any], source: str = "journal.jsonl", problems: list[str] | None = None) -> Iterator[Line]:
    """Typed lines of events given as :class:`Line` or as parsed JSON objects.

    Items that are not objects are skipped (the chain check reports them). An object that is
    not an event is skipped with its reason added to ``problems`` when a list is given.

    Raises:
        EventError: an object that is not an event, when ``problems`` is None.
    """
    for index, item in enumerate(items):
        if isinstance(item, Line):
            yield item
        elif isinstance(item, dict):
            try:
                yield line_of(item, where_in(source, item, index))
            except EventError as e:
                if problems is None:
                    raise
                problems.append(str(e))


def envelope(version: int, seq: int, time: str, mono_ms: int, boot_id: str | None, event: Event,
             prev: str | None) -> dict[str, Any]:
    """A version 2 line's fields but its hash, for ``event``."""
    return {"journal_version": version, "seq": seq, "time": time, "mono_ms": mono_ms, "boot_id": boot_id,
            KIND: event.kind, TASK_ID: event.task_id, ATTEMPT: event.attempt, PAYLOAD: event.payload(),
            "prev": prev}


def json_schema() -> dict[str, Any]:
    """The JSON Schema of an event (kind, task_id, attempt and the payload's fields)."""
    # Built here, not at import: reading dispatches on the kind (see _parse), and the union's
    # validator costs every process that imports this module a few milliseconds.
    adapter: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)
    return adapter.json_schema()


def present(**values: Any) -> dict[str, Any]:
    """The keyword arguments that are not None: optional payload fields the writer sets only
    when they apply, so a line without them keeps the bytes it always had."""
    return {name: value for name, value in values.items() if value is not None}
