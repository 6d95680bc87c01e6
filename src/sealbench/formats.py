"""Every on-disk format of sealbench, as versioned pydantic models.

Files and JSON enter through these models (``extra="forbid"``, strict types: a boolean is not
an integer, a string is not a number). Each model carries its format version. ``sealbench
schema NAME`` prints the JSON Schema of each one; docs/reference/formats.md documents every field.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from .outcomes import Outcome

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

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


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
    repository: str | None = Field(
        None, exclude_if=lambda v: v is None,
        description="A mined task's repository (its name, or the clone it was read from).")
    commit: str | None = Field(
        None, pattern=r"^[0-9a-f]{40,64}$", exclude_if=lambda v: v is None,
        description="A mined task's commit: the fix and the tests it adds or changes (full hex id).")
    author_date: str | None = Field(
        None, exclude_if=lambda v: v is None,
        description="The commit's author date, ISO 8601 with its UTC offset (as git prints %aI).")
    committer_date: str | None = Field(
        None, exclude_if=lambda v: v is None,
        description="The commit's committer date, ISO 8601 with its UTC offset (as git prints %cI).")

    @field_validator("author_date", "committer_date")
    @classmethod
    def _aware_date(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                when = datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(f"{value!r} is not an ISO 8601 date and time") from None
            if when.tzinfo is None:
                raise ValueError(f"{value!r} has no UTC offset")
        return value

    def committed_at(self) -> datetime | None:
        """The earlier of the commit's two dates (a task is only as fresh as the first time its
        change existed), or None when the record carries neither."""
        dates = [datetime.fromisoformat(d) for d in (self.author_date, self.committer_date) if d is not None]
        return min(dates) if dates else None


class EnvironmentSpec(Model):
    """The Python environment a repository task's commands run in (see :mod:`sealbench.environments`)."""

    name: NonEmptyStr = Field(description="A name for people: the repository and what the environment is pinned to.")
    python: NonEmptyStr = Field(description="The Python version asked for, as uv reads it (e.g. 3.11); never "
                                "downloaded: an interpreter of this machine must satisfy it.")
    requirements: list[NonEmptyStr] = Field(
        description="Requirement lines, one per package, as pip reads them (with --hash options when the "
        "source pinned hashes: then every line must carry them).")
    source: NonEmptyStr = Field(description="Where the requirements come from, e.g. the repository's uv.lock at "
                                "a commit and the dependency group read.")
    import_roots: list[NonEmptyStr] = Field(
        description="Directories of the repository, relative to its root, put on sys.path (e.g. src).")
    install: Literal["none", "editable"] = Field(
        "none", exclude_if=lambda v: v == "none",
        description="'editable': each grading copy is installed into the environment as `pip install -e` does, by "
        "the repository's own build backend (pinned among the requirements), in the sandbox before the oracle: "
        "importlib.metadata knows it, its code is imported from the grading copy. 'none' (absent): the "
        "repository is only put on sys.path.")


class TaskRecord(Model):
    """``tasks/<task_id>/task.json``: the task record the scorecard rules require, plus what a runner needs."""

    schema_version: Literal[1] = Field(1, description="Format version of this record.")
    task_id: Id = Field(description="Unique id; must equal the task's folder name.")
    prompt_template_id: Id = Field(description="Frozen template in prompts/<id>.txt.")
    oracle_cmd: list[NonEmptyStr] = Field(
        min_length=1,
        description="argv run in the grading copy; exit 0 means tests green. [\"sealbench-pytest\", ARG...] "
        "runs the harness's own pytest on the pack's ARGs (test paths, -o/-k/-m options).",
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
        description="Test names (JUnit classname::name or name) that must all pass; needs junit_xml "
        "or a sealbench-pytest oracle.",
    )
    decided_by: Literal["all", "required"] = Field(
        "all", exclude_if=lambda v: v == "all",
        description="Which tests decide a pass. 'all' (absent): every test in the JUnit report passes, the "
        "required tests among them, and the oracle exits 0. 'required': only required_tests decide (each "
        "must pass; others may fail, as SWE-bench's FAIL_TO_PASS and PASS_TO_PASS), and the oracle may "
        "exit 1, pytest's code for some tests failed.",
    )
    junit_xml: str | None = Field(
        None, description="Relative path of the JUnit XML report the oracle writes; null for sealbench-pytest, "
        "whose report the harness writes outside the workspace."
    )
    visible_test_cmd: list[NonEmptyStr] | None = Field(
        None, description="argv of a test command that is part of the workspace (feedback=visible_tests)."
    )
    provenance: Provenance | None = Field(None, description="Where the task comes from.")
    environment: EnvironmentSpec | None = Field(
        None, exclude_if=lambda v: v is None,
        description="The environment the agent, the oracle and the visible tests run in, built by `sealbench env "
        "build`; absent: the harness's own interpreter.")
    test_files: Literal["forbidden", "reset"] = Field(
        "forbidden", exclude_if=lambda v: v == "forbidden",
        description="'forbidden' (absent): the hidden files are not in the workspace, and an attempt that changes "
        "one of their paths fails. 'reset': the workspace holds the pre-patch versions of the files the hidden "
        "tests change (a repository's own tests), an attempt may edit them, and grading puts the hidden versions "
        "in their place, as SWE-bench resets the test patch's files before applying it.")
    deleted_test_files: list[NonEmptyStr] = Field(
        default_factory=list, exclude_if=lambda v: not v,
        description="Paths, relative to the workspace, of the files the test patch deletes (with test_files "
        "'reset'): grading removes them from the grading copy, whatever the attempt left there, as applying "
        "the test patch does. Absent: none.")


class TaskDigests(Model):
    """Digests of one task's sealed parts."""

    record: Digest = Field(description="Digest of task.json's canonical JSON.")
    prompt: Digest = Field(description="Digest of prompt.md.")
    template: Digest = Field(description="Digest of the frozen prompt template.")
    workspace: Digest = Field(description="Tree digest of workspace/.")
    hidden_tests: Digest = Field(description="Tree digest of hidden/ (equals hidden_tests_sha256).")
    solution: Digest | None = Field(description="Tree digest of solution/, null without one.")


class Seal(Model):
    """The seal written by ``pack seal``."""

    pack_sha256: Digest = Field(description="Digest over the pack name and every task's digests.")
    tasks: dict[str, TaskDigests] = Field(description="Each task's digests, by task id.")


class ValidityEvidence(Model):
    """Oracle-validity evidence for one task (``pack validate``)."""

    valid: bool = Field(description="True when the reference always passed, the empty change always failed "
                        "and no trivial solution passed.")
    reason: str | None = Field(None, description="reference fails, empty change passes, flaky, "
                               "passes a trivial solution (naming which)")
    reference_passes: list[bool] = Field(description="Each grade of the reference solution.")
    empty_change_passes: list[bool] = Field(description="Each grade of the unchanged workspace.")
    trivial_passes: dict[str, bool] = Field(
        default_factory=dict,
        description="Each trivial solution graded once (what it returns -> passed); empty when the task has "
        "no stub or was already invalid.",
    )
    why: str | None = Field(
        None, exclude_if=lambda v: v is None,
        description="Why the reference failed, from its first failing grade: the tests that failed or the "
        "JUnit report's verdict, or the oracle's last line of output; absent otherwise.",
    )
    reference_grading_s: float | None = Field(
        None, ge=0, exclude_if=lambda v: v is None,
        description="The slowest grade of the reference solution, in seconds: applying its patch and running the "
        "oracle, the time a run's grading takes from wall_clock_s; absent when not measured.",
    )


class Validity(Model):
    """Oracle-validity evidence for a sealed pack, bound to its digest."""

    pack_sha256: Digest = Field(description="The sealed pack this evidence is for.")
    repeat: int = Field(ge=1, description="Grades of each kind per task.")
    sandbox: str = Field(description="Sandbox the oracles ran in.")
    tasks: dict[str, ValidityEvidence] = Field(description="Evidence by task id.")


class PackManifest(Model):
    """``pack.json``: the pack's name and, once sealed, its seal and validity evidence."""

    pack_version: Literal[1] = Field(1, description="Format version of pack.json.")
    name: Id = Field(description="Name of the pack.")
    description: str = Field("", description="What the pack is for.")
    provenance: Provenance | None = Field(None, description="Where the pack's tasks come from.")
    seal: Seal | None = Field(None, description="Written by `pack seal`; null before.")
    validity: Validity | None = Field(None, description="Written by `pack validate`.")


class Metrics(Model):
    """The contract's metric definitions, fixed before the run."""

    primary: Literal["task_pass"] = Field("task_pass", description="The metric in the numerator.")
    task_pass: str = Field("tests_green AND patch_applies_clean AND no_forbidden_path",
                           description="A conjunction: any false clause fails the task.")
    abstain: str = Field("exit_code_0 AND patch_empty", description="Stays in n; can never pass.")
    timeout: str = Field("wall_seconds > wall_clock_s", description="Stays in n as a failure.")
    post_lock_exclusion: Literal["forbidden"] = Field(
        "forbidden", description="A task dropped after lock starts a new study (new run_id).")


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

    host: str | None = Field("unspecified", description="Where the run happened; must be set before lock.")
    model_access: str | None = Field("unspecified", description="How the model was reached.")
    quota_assumed: bool = Field(False, description="True refuses lock and score.")
    permanence_assumed: bool = Field(False, description="True refuses lock and score.")
    terms_read_on: str | None = Field(
        None, description="ISO date the host's terms were read, if any."
    )


class AgentPreset(Model):
    """The agent preset a command was written from, locked with its exact version (run refuses another)."""

    name: Id = Field(description="The preset's name (sealbench agents list).")
    registry: Literal["pypi", "npm"] = Field(description="Where the agent was installed from.")
    package: NonEmptyStr = Field(description="The package installed (PyPI or npm name).")
    version: NonEmptyStr = Field(description="The exact version installed and locked.")


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
    # Left out of the file (and so of the contract's digest) when unset: contracts locked before
    # the field existed keep their digest.
    preset: AgentPreset | None = Field(
        None, exclude_if=lambda v: v is None,
        description="The preset and exact version the agent was installed as; absent for a command "
        "written by hand. The installed tree is the first of mounts.",
    )


class Budget(Model):
    """The budget policy every task in the run gets."""

    max_attempts: int = Field(ge=1, description="Hard retry cap per task.")
    wall_clock_s: float = Field(gt=0, description="Hard wall-clock cap per task, oracle included.")
    feedback: Literal["none", "pass_fail", "visible_tests"] = Field(
        "none", description="What the agent sees between attempts; never hidden-test output."
    )
    # Left out of the file (and so of the contract's digest) when unset: contracts locked before
    # the field existed keep their digest.
    attempt_gap_s: float | None = Field(
        None, gt=0, exclude_if=lambda v: v is None,
        description="If set, the next attempt starts only when a whole multiple of this many seconds "
        "has passed since the previous attempt's agent stopped, so how long grading took does not "
        "reach the next attempt. The wait counts against wall_clock_s.",
    )
    max_model_calls: int | None = Field(
        None, ge=1, exclude_if=lambda v: v is None,
        description="If set, each task's agent may have at most this many model calls forwarded, over all its "
        "attempts; the gateway refuses the next ones (HTTP 429) and journals each.",
    )
    max_model_tokens: int | None = Field(
        None, ge=1, exclude_if=lambda v: v is None,
        description="If set, once a task's forwarded calls have used this many tokens (input plus output, as "
        "the upstream reports them), the gateway refuses its next calls. A call in flight may take the task "
        "past it; a reply without usage makes the use unknown, and the cap is then taken as reached.",
    )
    workspace_bytes: int | None = Field(
        None, ge=1 << 20, exclude_if=lambda v: v is None,
        description="If set, the disk quota of each task's workspace and grading copy in bytes (the sandbox's "
        "size-capped tmpfs), in place of 1 GiB; at least 1 MiB. An agent that writes past it sees its "
        "writes fail. The harness's own folder in grading (test reports) gets the smaller of this and 64 MiB.",
    )
    tmp_bytes: int | None = Field(
        None, ge=1 << 20, exclude_if=lambda v: v is None,
        description="If set, the size in bytes of each sandbox's /tmp and /dev/shm (and a HOME outside the "
        "workspace), in place of 512 MiB each; at least 1 MiB. With workspace_bytes, what lets many "
        "model-bound agents run at once: run --jobs is refused where their quotas would not fit in memory.",
    )
    max_model_cost: float | None = Field(
        None, gt=0, exclude_if=lambda v: v is None,
        description="If set, once a task's forwarded calls have cost this much by the locked prices, the gateway "
        "refuses its next calls (a call in flight may take the task past it; an unknown cost counts as "
        "reached). Needs a price for every model the endpoints allow.",
    )


class PackRef(Model):
    """The sealed pack a contract measures."""

    path: NonEmptyStr = Field(description="Pack directory, relative to the contract file.")
    sha256: Digest = Field(description="The pack digest from its seal.")


class TieRule(Model):
    """How a paired comparison decides, fixed before the runs."""

    test: Literal["mcnemar_exact"] = Field("mcnemar_exact", description="Exact two-sided McNemar on discordant pairs.")
    alpha: float = Field(0.05, gt=0, lt=1, description="Below it, a difference is declared; otherwise a tie.")
    correction: Literal["holm"] = Field("holm", description="Multiple-comparison correction for 3+ runs.")
    min_power: float | None = Field(
        None, gt=0, lt=1, exclude_if=lambda v: v is None,
        description="When set: compare calls a pair `underpowered`, whatever the test says, when the slice's power "
                    "to find a difference of the observed size (at alpha, divided by the number of pairs) is below it.")


API_STYLES = ("openai-chat", "openai-responses", "anthropic-messages")
ApiStyle = Literal["openai-chat", "openai-responses", "anthropic-messages"]
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


def check_base_url(value: str) -> str:
    """Refuse a base URL the gateway could be talked out of: only ``http(s)://host[:port][/path]``,
    no credentials, query, fragment, dot segments, empty segments or escapes."""
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url {value!r} must be http:// or https:// with a host")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError(f"base_url {value!r} must not carry credentials (name the key's variable in key_env)")
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise ValueError(f"base_url {value!r} must have no query or fragment")
    path = parts.path.rstrip("/")
    segments = path.split("/")[1:] if path else []
    if any(seg in ("", ".", "..") for seg in segments) or "%" in path or "\\" in path:
        raise ValueError(f"base_url {value!r} must have a plain path (no '..', '//', '%' or backslash)")
    try:
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as e:
        raise ValueError(f"base_url {value!r}: {e}") from None
    return value


class ModelPrice(Model):
    """What one model's tokens cost, as read from the provider's price page on ``read_on``."""

    input: float = Field(ge=0, description="Price of one million input tokens.")
    output: float = Field(ge=0, description="Price of one million output tokens.")
    cached_input: float | None = Field(None, ge=0, description="Price of one million cached input tokens; "
                                       "null when the provider has no such price.")
    currency: NonEmptyStr = Field("USD", description="Currency of the prices.")
    read_on: NonEmptyStr = Field(description="ISO date the prices were read.")


class ModelEndpoint(Model):
    """One model endpoint the agent may reach through the gateway (and nothing else)."""

    name: Id = Field(description="Name of the endpoint: the first path segment of its gateway URL.")
    style: ApiStyle = Field(description="API style: openai-chat (POST /chat/completions), openai-responses "
                            "(POST /responses) or anthropic-messages (POST /v1/messages).")
    base_url: Annotated[str, AfterValidator(check_base_url)] = Field(
        description="Upstream base URL the style's path is appended to, as the provider's SDK spells it "
        "(https://api.openai.com/v1, https://api.anthropic.com).")
    models: list[NonEmptyStr] = Field(min_length=1, description="Model names the agent may ask for; any other "
                                      "is refused.")
    key_env: Annotated[str, Field(pattern=ENV_NAME_PATTERN)] = Field(
        description="NAME of the host environment variable that holds the key (never the key); read at run.")
    prices: dict[str, ModelPrice] | None = Field(
        None, exclude_if=lambda v: v is None,
        description="Price per model name; without it cost is unknown, never zero.")
    read_timeout_s: float | None = Field(
        None, gt=0, exclude_if=lambda v: v is None,
        description="Longest the endpoint may keep silent (for a reply's first byte, or between two chunks) before "
        "the gateway ends the call as the endpoint's failure; null: 300 s, or a quarter of the wall-clock cap "
        "when that is less. Must be under the wall-clock cap.")


class FreshAfter(Model):
    """A contract's claim that every task of its denominator was committed after a date."""

    date: NonEmptyStr = Field(description="The cutoff, as given to `contract new --fresh-after` (YYYY-MM-DD is "
                              "midnight UTC).")
    tasks: dict[str, str] = Field(description="Each task's commit date from its record's provenance (the earlier "
                                  "of its author and committer dates, ISO 8601), by task id.")


class ScoringContract(Model):
    """The scoring contract, locked before the run and immutable after."""

    contract_version: Literal[1] = Field(1, description="Format version of the contract.")
    run_id: Id | None = Field(None, description="Null until lock; a new study needs a new run_id.")
    locked_at: str | None = Field(None, description="UTC time of the lock; null until then.")
    task_ids: list[Id] = Field(default_factory=list, description="The denominator, in order.")
    metrics: Metrics | None = Field(default_factory=Metrics, description="Metric definitions.")
    controls: Controls | None = Field(default_factory=Controls, description="Control conditions.")
    access_class: AccessClass | None = Field(default_factory=AccessClass, description="Where the run happened.")
    agent: AgentSpec | None = Field(None, description="The agent under test; required at lock.")
    budget: Budget | None = Field(None, description="Caps and feedback policy; required at lock.")
    forbidden_paths: list[NonEmptyStr] | None = Field(
        None, description="Patterns a patch may not touch (name anywhere, or path with '/').")
    pack: PackRef | None = Field(None, description="The sealed pack; required at lock.")
    seed: int = Field(0, description="Seed for tasks that do not pin their own.")
    tie_rule: TieRule = Field(default_factory=TieRule, description="How paired comparisons decide; fixed before the runs.")
    flagged_pass: Literal["not_counted", "counted"] | None = Field(
        None,
        description="Whether hidden tests that pass while the test process raised a forging flag "
        "count as a pass; null (contracts before the field) means not_counted.",
    )
    # Left out of the file (and so of the contract's digest) when unset: contracts locked before
    # the field existed keep their digest.
    model_endpoints: list[ModelEndpoint] | None = Field(
        None, exclude_if=lambda v: v is None,
        description="Model endpoints the agent may reach through the gateway (agent phase only); "
        "absent: no network at all.")
    fresh_after: FreshAfter | None = Field(
        None, exclude_if=lambda v: v is None,
        description="Every task committed after this date (`contract new --fresh-after`); absent: no such claim.")
    contract_sha256: str | None = Field(
        None, description="Digest of every other field, recorded at lock."
    )


# Outcomes arrive as strings from JSON and from Python dicts alike.
LooseOutcome = Annotated[Outcome, Field(strict=False)]


class SeedEvent(Model):
    """One seed event: an entry of ``events.json``, the scoring contract's event shape (one per task in the denominator)."""

    task_id: str = Field(description="A task of the locked denominator.")
    task_pass: bool = Field(description="The primary metric for this task.")
    abstain: bool = Field(False, description="Exit 0 with an empty patch; cannot pass.")
    wall_seconds: float | None = Field(None, description="Elapsed wall time of the task.")
    excluded_after_lock: bool = Field(False, description="True is refused: a post-lock exclusion.")
    outcome: LooseOutcome | None = Field(None, description="pass, fail, abstain, timeout, harness_error or infra_error.")
    attempts_used: int | None = Field(None, description="Attempts the task consumed.")


class ForgingFlags(Model):
    """The forging means a task's test process was seen using (pytest oracles, repository tests)."""

    flags: list[str] = Field(description="Each flag raised while grading any attempt, sorted.")
    attempts: list[int] = Field(description="The attempts whose grading raised a flag.")
    passes_not_counted: list[int] = Field(
        description="Attempts whose hidden tests passed but did not count: flagged, and the contract does not count a flagged pass.")
    why: str = Field(description="The same in a sentence.")


class ModelUsage(Model):
    """What a task's model calls used, through the gateway: counts, tokens as the upstream
    reported them, and cost by the contract's locked prices."""

    calls: int = Field(ge=0, description="Requests the agent made, refused ones included.")
    refused: int = Field(ge=0, description="Requests the gateway refused (never sent upstream).")
    failed: int = Field(ge=0, description="Requests the upstream failed (no reply, 5xx, 429): the infrastructure's.")
    unreported: int = Field(ge=0, description="Answered requests whose reply reported no usage (not in the sums).")
    input_tokens: int = Field(ge=0, description="Input tokens, as reported.")
    output_tokens: int = Field(ge=0, description="Output tokens, as reported.")
    cached_tokens: int = Field(ge=0, description="Cached input tokens, as reported.")
    cost: float | None = Field(description="Cost by the locked price table; null when unknown (a model without a "
                               "price, a reply without usage), never zero for that.")
    currency: str | None = Field(description="The prices' currency; null when no price applied.")
    cap_reached: Literal["max_model_calls", "max_model_tokens", "max_model_cost"] | None = Field(
        None, exclude_if=lambda v: v is None,
        description="The budget cap that refused the task's first refused-for-a-cap call; absent when no cap did.")


class AgentEnding(Model):
    """How the agent itself said its last attempt ended, beside the oracle's verdict, which
    alone decides pass or fail."""

    exit_code: int | None = Field(description="The agent's exit code as the harness saw it; null when it was killed.")
    ending: str | None = Field(description="The ending its transcript states; null when it states none.")
    said: list[str] = Field(description="What its output said of its ending, by the preset's labels.")


class Scorecard(Model):
    """One task's scorecard: the ten fields the scorecard rules require, plus outcome, first attempt and patch."""

    task_id: str = Field(description="The task.")
    passed: bool = Field(description="Hidden tests green, patch applied clean, no forbidden path.")
    attempts_used: int = Field(ge=0, description="Attempts started, interrupted ones included.")
    max_attempts: int = Field(ge=1, description="The published retry cap.")
    elapsed_ms: int = Field(ge=0, description="Wall time of the task, oracle included.")
    wall_clock_s: float = Field(description="The published wall-clock cap.")
    prompt_template_id: str = Field(description="The frozen template used.")
    hidden_tests_sha256: str = Field(description="Digest of the hidden tests graded against.")
    tool_trace_sha256: str = Field(description="sha256 of traces/<task_id>.json's bytes.")
    scorecard_complete: bool = Field(description="True only when every control is present and within its cap.")
    outcome: LooseOutcome = Field(description="pass, fail, abstain, timeout, harness_error or infra_error.")
    first_attempt_passed: bool = Field(description="First-pass yield, beside the within-cap result.")
    patch_sha256: str | None = Field(description="Digest of the final patch; null when empty.")
    schema_version: Literal[1] = Field(1, description="Format version of the scorecard.")
    forging_flags: ForgingFlags | None = Field(
        None, description="Present only when grading raised a forging flag (absent otherwise, so "
        "scorecards derived before the field keep their bytes).")
    model_usage: ModelUsage | None = Field(
        None, description="Present only when the task's agent called a model through the gateway.")
    agent_ending: AgentEnding | None = Field(
        None, description="How the agent said its last attempt ended (an agent preset's launcher records it); "
        "present only when it said (derivation version 4 on).")

    @model_serializer(mode="wrap")
    def _absent_when_unflagged(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in ("forging_flags", "model_usage", "agent_ending"):
            if data.get(name) is None:
                data.pop(name, None)
        return data


class Interval95(Model):
    """A 95% interval."""

    low: float = Field(description="Lower bound.")
    high: float = Field(description="Upper bound.")


class Rate(Model):
    """``rate.json``: a rate that carries every knob that produced it."""

    rate_version: Literal[1] = Field(1, description="Format version of rate.json.")
    run_id: str = Field(description="The locked run.")
    locked_at: str = Field(description="When the contract was locked.")
    contract_sha256: str = Field(description="The locked contract's digest.")
    pack_sha256: str | None = Field(description="The sealed pack's digest.")
    n: int = Field(description="The denominator: every locked task, timeouts and abstains included.")
    task_pass_count: int = Field(description="The numerator.")
    task_pass_rate: float = Field(description="task_pass_count / n; never printed without the rest.")
    wilson_95: Interval95 = Field(description="Wilson 95% interval of the rate.")
    sentence: str = Field(description="The evidence sentence, e.g. '2 of 4 task_pass on this locked run_id'.")
    outcomes: dict[str, int] = Field(description="Count of each outcome.")
    budget: Budget | None = Field(description="The caps every task had.")
    access_class: AccessClass = Field(description="Where the run happened.")
    controls: Controls | None = Field(description="Controls reported beside the rate.")
    note: str = Field("valid only for this slice, metric, and access class", description="The caveat every rate carries.")


class JournalEvent(Model):
    """One line of ``journal.jsonl``: hash-chained, append-only."""

    journal_version: Literal[1, 2] = Field(2, description="Format version of the line: 2 carries mono_ms and "
                                           "boot_id; 1 (older releases) has neither.")
    seq: int = Field(ge=0, description="0, 1, 2, ... with no gap.")
    time: str = Field(description="UTC wall clock, ISO 8601 with Z: for people; no time is charged from it.")
    mono_ms: int | None = Field(None, description="Version 2: the monotonic clock in ms when the line was written; "
                                "charges are differences of it within one boot.")
    boot_id: str | None = Field(None, description="Version 2: the kernel's boot id (null where unknown); a resume "
                                "on another boot charges a running task its whole remaining budget.")
    kind: str = Field(description="One of the journal event kinds listed below (sealbench.events); a kind this "
                      "release does not know is refused, naming the line.")
    task_id: str | None = Field(None, description="The task, for task events.")
    attempt: int | None = Field(None, description="The attempt, for attempt events.")
    payload: dict[str, Any] = Field(default_factory=dict, description="What happened: the fields of its kind "
                                    "(below); a field its kind does not have is refused, naming the line.")
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
