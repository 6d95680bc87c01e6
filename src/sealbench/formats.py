"""Every on-disk format of sealbench, as versioned pydantic models.

Files and JSON enter through these models (``extra="forbid"``, strict types: a boolean is not
an integer, a string is not a number). Each model carries its format version. ``sealbench
schema NAME`` prints the JSON Schema of each one; the README documents every field.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"
_ID_RE = re.compile(ID_PATTERN)


def check_id(value: str) -> str:
    """Refuse ids that are empty, too long, outside ``[A-Za-z0-9._-]`` or path-like."""
    if not _ID_RE.match(value):
        raise ValueError(
            f"id {value!r} must be 1-128 characters of letters, digits, '.', '_' or '-'"
        )
    if value in (".", "..") or ".." in value:
        raise ValueError(f"id {value!r} must not contain '..'")
    return value


Id = Annotated[str, AfterValidator(check_id), Field(json_schema_extra={"pattern": ID_PATTERN})]
NonEmptyStr = Annotated[str, Field(min_length=1)]
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]


class Model(BaseModel):
    """Base of every format: unknown keys and loose types are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Provenance(Model):
    """Where a task (or pack) comes from, so readers can judge contamination."""

    source: NonEmptyStr = Field(description="Name of the public or private task set.")
    source_sha256: str | None = Field(None, description="Digest of the source file imported.")
    license: str | None = Field(None, description="License of the source material.")
    record_id: str | None = Field(None, description="Id of the record in the source.")
    contamination: NonEmptyStr = Field(
        "unknown",
        description="What is known about overlap with model training data; "
        "'unknown' makes every report print 'contamination unknown'.",
    )


class TaskRecord(Model):
    """``tasks/<task_id>/task.json``: seed 000's task record plus what a runner needs."""

    schema_version: Literal[1] = Field(1, description="Format version of this record.")
    task_id: Id = Field(description="Unique id; must equal the task's folder name.")
    prompt_template_id: Id = Field(description="Frozen template in prompts/<id>.txt.")
    oracle_cmd: list[NonEmptyStr] = Field(
        min_length=1, description="argv run in the grading copy; exit 0 means tests green."
    )
    hidden_tests_sha256: NonEmptyStr = Field(
        description="Digest of tasks/<id>/hidden/; a placeholder is filled by `pack seal`."
    )
    max_attempts: int = Field(ge=1, description="The pack's retry ceiling for this task.")
    wall_clock_s: float = Field(gt=0, description="The pack's wall-clock ceiling in seconds.")
    language: NonEmptyStr = Field(description="Language of the task, e.g. python.")
    seed: int | None = Field(None, description="Seed pinned for the task (PYTHONHASHSEED, SEALBENCH_SEED).")
    required_tests: list[NonEmptyStr] = Field(
        default_factory=list,
        description="Test names (JUnit classname::name or name) that must all pass; needs junit_xml.",
    )
    junit_xml: str | None = Field(
        None, description="Relative path of the JUnit XML report the oracle writes."
    )
    visible_test_cmd: list[NonEmptyStr] | None = Field(
        None, description="argv of a test command that is part of the workspace (feedback=visible_tests)."
    )
    provenance: Provenance | None = Field(None, description="Where the task comes from.")


class TaskDigests(Model):
    """Digests of one task's sealed parts."""

    record: Digest
    prompt: Digest
    template: Digest
    workspace: Digest
    hidden_tests: Digest
    solution: Digest | None


class Seal(Model):
    """The seal written by ``pack seal``."""

    pack_sha256: Digest = Field(description="Digest over the pack name and every task's digests.")
    tasks: dict[str, TaskDigests]


class ValidityEvidence(Model):
    """Oracle-validity evidence for one task (``pack validate``)."""

    valid: bool
    reason: str | None = Field(None, description="reference fails, empty change passes, flaky")
    reference_passes: list[bool]
    empty_change_passes: list[bool]


class Validity(Model):
    """Oracle-validity evidence for a sealed pack, bound to its digest."""

    pack_sha256: Digest
    repeat: int = Field(ge=1)
    sandbox: str
    tasks: dict[str, ValidityEvidence]


class PackManifest(Model):
    """``pack.json``: the pack's name and, once sealed, its seal and validity evidence."""

    pack_version: Literal[1] = Field(1, description="Format version of pack.json.")
    name: Id = Field(description="Name of the pack.")
    description: str = Field("", description="What the pack is for.")
    provenance: Provenance | None = Field(None, description="Where the pack's tasks come from.")
    seal: Seal | None = Field(None, description="Written by `pack seal`; null before.")
    validity: Validity | None = Field(None, description="Written by `pack validate`.")


class Metrics(Model):
    """Seed 004's metric definitions, fixed before the run."""

    primary: Literal["task_pass"] = "task_pass"
    task_pass: str = "tests_green AND patch_applies_clean AND no_forbidden_path"
    abstain: str = "exit_code_0 AND patch_empty"
    timeout: str = "wall_seconds > wall_clock_s"
    post_lock_exclusion: Literal["forbidden"] = "forbidden"


class Controls(Model):
    """Control conditions: reported beside the rate, never in its numerator."""

    narration_probe: str | None = Field(
        "summary only; a non-empty patch fails the probe",
        description="null when the contract declares no narration probe.",
    )
    oracle_validity: Literal["required", "unavailable"] = Field(
        "required",
        description="'required': every task needs validity evidence at lock; "
        "'unavailable' is printed by every report.",
    )


class AccessClass(Model):
    """Where the run happened: a condition, not a trophy."""

    host: str | None = "unspecified"
    model_access: str | None = "unspecified"
    quota_assumed: bool = False
    permanence_assumed: bool = False
    terms_read_on: str | None = Field(
        None, description="ISO date the host's terms were read, if any."
    )


class AgentSpec(Model):
    """The agent under test."""

    label: NonEmptyStr = Field(description="Human name of the agent and version.")
    command: NonEmptyStr = Field(
        description="Command template ({prompt_file} {workspace} {attempt} {max_attempts} "
        "{task_id}) or builtin:reference / builtin:noop."
    )
    mounts: list[NonEmptyStr] = Field(
        default_factory=list,
        description="Host paths the agent needs (its own install), exposed read-only in the sandbox.",
    )


class Budget(Model):
    """The budget policy every task in the run gets."""

    max_attempts: int = Field(ge=1, description="Hard retry cap per task.")
    wall_clock_s: float = Field(gt=0, description="Hard wall-clock cap per task, oracle included.")
    feedback: Literal["none", "pass_fail", "visible_tests"] = Field(
        "none", description="What the agent sees between attempts; never hidden-test output."
    )


class PackRef(Model):
    """The sealed pack a contract measures."""

    path: NonEmptyStr = Field(description="Pack directory, relative to the contract file.")
    sha256: Digest = Field(description="The pack digest from its seal.")


class TieRule(Model):
    """How a paired comparison decides, fixed before the runs."""

    test: Literal["mcnemar_exact"] = "mcnemar_exact"
    alpha: float = Field(0.05, gt=0, lt=1)
    correction: Literal["holm"] = "holm"


class ScoringContract(Model):
    """The scoring contract (seed 004), locked before the run and immutable after."""

    contract_version: Literal[1] = 1
    run_id: str | None = None
    locked_at: str | None = None
    task_ids: list[str] = Field(default_factory=list, description="The denominator, in order.")
    metrics: Metrics | None = Field(default_factory=Metrics)
    controls: Controls | None = Field(default_factory=Controls)
    access_class: AccessClass | None = Field(default_factory=AccessClass)
    agent: AgentSpec | None = None
    budget: Budget | None = None
    forbidden_paths: list[NonEmptyStr] | None = None
    pack: PackRef | None = None
    seed: int = Field(0, description="Seed for tasks that do not pin their own.")
    tie_rule: TieRule = Field(default_factory=TieRule)
    contract_sha256: str | None = Field(
        None, description="Digest of every other field, recorded at lock."
    )


class Outcome(StrEnum):
    """How a task ended. harness_error is the harness's failure, not the agent's."""

    PASS = "pass"
    FAIL = "fail"
    ABSTAIN = "abstain"
    TIMEOUT = "timeout"
    HARNESS_ERROR = "harness_error"


# Outcomes arrive as strings from JSON and from Python dicts alike.
LooseOutcome = Annotated[Outcome, Field(strict=False)]


class SeedEvent(Model):
    """One entry of ``events.json`` in seed 004's shape (one per task in the denominator)."""

    task_id: str
    task_pass: bool
    abstain: bool = False
    wall_seconds: float | None = None
    excluded_after_lock: bool = False
    outcome: LooseOutcome | None = None
    attempts_used: int | None = None


class Scorecard(Model):
    """One task's scorecard: seed 000's ten fields plus outcome, first attempt and patch."""

    task_id: str
    passed: bool
    attempts_used: int = Field(ge=0)
    max_attempts: int = Field(ge=1)
    elapsed_ms: int = Field(ge=0)
    wall_clock_s: float
    prompt_template_id: str
    hidden_tests_sha256: str
    tool_trace_sha256: str
    scorecard_complete: bool
    outcome: LooseOutcome
    first_attempt_passed: bool
    patch_sha256: str | None
    schema_version: Literal[1] = 1


class Interval95(Model):
    """A 95% interval."""

    low: float
    high: float


class Rate(Model):
    """``rate.json``: a rate that carries every knob that produced it."""

    rate_version: Literal[1] = 1
    run_id: str
    locked_at: str
    contract_sha256: str
    pack_sha256: str | None
    n: int
    task_pass_count: int
    task_pass_rate: float
    wilson_95: Interval95
    sentence: str = Field(description="The evidence sentence, e.g. '2 of 4 task_pass on this locked run_id'.")
    outcomes: dict[str, int]
    budget: Budget | None
    access_class: AccessClass
    controls: Controls | None
    note: str = "valid only for this slice, metric, and access class"


class JournalEvent(Model):
    """One line of ``journal.jsonl``: hash-chained, append-only."""

    journal_version: Literal[1] = 1
    seq: int = Field(ge=0)
    time: str = Field(description="UTC, ISO 8601 with Z.")
    kind: str
    task_id: str | None = None
    attempt: int | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    prev: str | None = Field(description="Hash of the previous event; null for the first.")
    hash: str = Field(description="sha256 over the canonical bytes of every other field.")


SCHEMAS: dict[str, type[Model]] = {
    "task": TaskRecord,
    "pack": PackManifest,
    "contract": ScoringContract,
    "journal-event": JournalEvent,
    "scorecard": Scorecard,
    "rate": Rate,
    "events": SeedEvent,
}
