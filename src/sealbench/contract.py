"""Scoring contracts: write one, lock it, and prove it was not edited since.

The pure functions here take values (a contract, a clock reading) and return values; the CLI
reads and writes the files.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from .digest import digest_json
from .errors import ContractError
from .files import describe_validation_error, read_model
from .formats import (
    AccessClass,
    AgentSpec,
    Budget,
    Controls,
    ModelEndpoint,
    PackRef,
    ScoringContract,
    TaskRecord,
    check_id,
)
from .pack import Pack
from .pytest_oracle import runs_pytest_unguarded

# A second line of defence: sealbench-pytest oracles already ignore every one of these (see
# sealbench.pytest_oracle); oracles that run pytest themselves, or a script, may not. A name
# matches in any directory, a pattern with "/" the whole path: the pytest/, _pytest/ and
# pluggy/ shadows are forbidden at the root only, where the working directory would import
# them, so that a repository's own src/_pytest/ can still be fixed. pyproject.toml is not
# here: legitimate fixes change it (dependencies, tool settings).
DEFAULT_FORBIDDEN = (
    "conftest.py",
    "sitecustomize.py",
    "usercustomize.py",
    "*.pth",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pytest.py",
    "pytest/*",
    "_pytest/*",
    "pluggy/*",
    "*.dist-info/*",
)
# Also forbidden when a task's oracle_cmd runs pytest itself (the form before
# sealbench-pytest): pytest reads [tool.pytest.ini_options] and the working directory's entry
# points there. An editable install in the workspace writes *.egg-info/, so such a contract
# fails an agent that makes one.
UNGUARDED_PYTEST_FORBIDDEN = ("pyproject.toml", "*.egg-info/*")
UNSPECIFIED = (None, "", "unspecified")
MODEL_CAPS = ("max_model_calls", "max_model_tokens", "max_model_cost")
"""The budget's caps on a task's model use, which the gateway enforces."""
SANDBOX_CAPS = ("workspace_bytes", "tmp_bytes")
"""The budget's sizes of a task's sandbox (its workspace quota, its /tmp and /dev/shm)."""


def _refuse_workspaces_over(pack: Pack, ids: Sequence[str], cap: int) -> None:
    """Refuse a workspace size that a task's own workspace does not fit in: every attempt of it
    would be a harness error.

    Raises:
        ContractError: naming the first such task, its size and the size asked for.
    """
    from .agentfs import on_tmpfs

    for t in ids:
        size = 0
        for dirpath, _dirs, files in os.walk(pack.tasks[t].pack_workspace):
            for name in files:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(dirpath, name))
                    size += on_tmpfs(st.st_size) if stat.S_ISREG(st.st_mode) else st.st_size
        if size > cap:
            raise ContractError(f"task {t}'s workspace holds {size / 2**20:.1f} MiB, more than the workspace size "
                                f"of {cap / 2**20:.1f} MiB (--workspace-mib); give it room for the agent's work too")


def contract_digest(contract: ScoringContract) -> str:
    """Digest of every field but ``contract_sha256`` itself.

    ``flagged_pass`` is left out while it is null, so contracts locked before the field
    existed keep their digest.
    """
    exclude = {"contract_sha256"} | ({"flagged_pass"} if contract.flagged_pass is None else set())
    body = contract.model_dump(mode="json", exclude=exclude)
    return digest_json(body)


def flagged_pass_counts(contract: ScoringContract) -> bool:
    """Whether a pass whose test process raised a forging flag counts (default: it does not)."""
    return contract.flagged_pass == "counted"


def load_contract(path: Path) -> ScoringContract:
    """Read a contract file.

    Raises:
        ContractError: unreadable, invalid JSON, unknown or mistyped keys.
    """
    return read_model(path, ScoringContract, ContractError)


def pack_path(contract: ScoringContract, contract_file: Path) -> Path:
    """The pack directory a contract names, resolved against the contract file's folder.

    Raises:
        ContractError: the contract names no pack.
    """
    if contract.pack is None:
        raise ContractError("contract names no pack")
    p = Path(contract.pack.path)
    return p if p.is_absolute() else (contract_file.parent / p)


def choose_tasks(in_pack: Sequence[str], invalid: Mapping[str, str], requested: Sequence[str], *,
                 where: str) -> tuple[list[str], dict[str, str]]:
    """The denominator and the tasks left out of it, with why: the ``requested`` ids, each
    in the pack, once, and valid; else every valid task of the pack, the ``invalid`` ones (task
    id -> the reason its oracle failed validation) left out. Reads nothing: a pure decision.

    Raises:
        ContractError: a requested id twice, not in the pack or invalid; no valid task at all.
    """
    if requested:
        ids = list(requested)
        dup = sorted({t for t in ids if ids.count(t) > 1})
        if dup:
            raise ContractError(f"duplicate task_ids: {dup}")
        unknown = [t for t in ids if t not in in_pack]
        if unknown:
            raise ContractError(f"task ids not in the pack: {unknown}")
        bad = {t: invalid[t] for t in ids if t in invalid}
        if bad:
            raise ContractError(f"tasks whose oracle failed validation: {bad}")
        return ids, {}
    ids = [t for t in in_pack if t not in invalid]
    left_out = {t: invalid[t] for t in in_pack if t in invalid}
    if not ids:
        shown = "; ".join(f"{t}: {why}" for t, why in list(left_out.items())[:5])
        raise ContractError(f"no task of {where} is valid, so there is no denominator to measure "
                            f"({len(left_out)} failed `pack validate`: {shown}{'; ...' if len(left_out) > 5 else ''}); "
                            f"fix the tasks' oracles, seal and validate again")
    return ids, left_out


def budget_caps(records: Sequence[TaskRecord], max_attempts: int | None,
                wall_clock_s: float | None) -> tuple[int, float]:
    """The attempts and wall-clock caps: the ones given, else the one value every task agrees on.

    Raises:
        ContractError: a cap not given on which the tasks disagree.
    """
    def uniform(field: str) -> float | None:
        values = {getattr(r, field) for r in records}
        return values.pop() if len(values) == 1 else None

    attempts = max_attempts if max_attempts is not None else uniform("max_attempts")
    wall = wall_clock_s if wall_clock_s is not None else uniform("wall_clock_s")
    if attempts is None or wall is None:
        raise ContractError(
            "tasks disagree on max_attempts or wall_clock_s; pass --max-attempts and --wall-clock-s"
        )
    return int(attempts), float(wall)


def _forbidden_paths(pack: Pack, ids: Sequence[str]) -> list[str]:
    """What an agent may not touch: the defaults, pytest's start-up files when an oracle runs
    pytest unguarded, and each task's hidden files and the files its oracle command names."""
    forbidden = list(DEFAULT_FORBIDDEN)
    if any(runs_pytest_unguarded(pack.tasks[t].record.oracle_cmd) for t in ids):
        forbidden.extend(UNGUARDED_PYTEST_FORBIDDEN)
    for t in ids:
        task = pack.tasks[t]
        if task.record.test_files == "reset":
            continue  # its hidden files replace the workspace's at grading: a change to them is discarded
        forbidden.extend(p for p in task.hidden_paths() if p not in forbidden)
        for arg in task.record.oracle_cmd[1:]:
            if (task.hidden / arg).is_file() and arg not in forbidden:
                forbidden.append(arg)
    return forbidden


def new_contract(
    pack: Pack,
    contract_file: Path,
    task_ids: Sequence[str] = (),
    *,
    host: str | None = None,
    model_access: str | None = None,
    terms_read_on: str | None = None,
    agent: AgentSpec | None = None,
    max_attempts: int | None = None,
    wall_clock_s: float | None = None,
    feedback: str = "none",
    attempt_gap_s: float | None = None,
    model_caps: Mapping[str, float | int] | None = None,
    sandbox_caps: Mapping[str, int] | None = None,
    narration_probe: bool = True,
    oracle_validity: str = "required",
    seed: int = 0,
    flagged_pass: str = "not_counted",
    fresh_after: str | None = None,
) -> tuple[ScoringContract, dict[str, str]]:
    """Build an unlocked contract over an explicit denominator from a sealed pack.

    Returns the contract and the tasks left out before the lock, with the reason (tasks whose
    oracle failed validation). Explicitly requested invalid tasks are refused.

    ``fresh_after``: a date every task must be committed after (:mod:`sealbench.freshness`),
    locked with each task's date.

    Raises:
        ContractError: unsealed pack, unknown or duplicate task ids, non-uniform budgets
            without an explicit cap, explicitly requested invalid tasks, a task not committed
            after ``fresh_after`` (naming it).
        UsageError: ``fresh_after`` is not a date.
    """
    seal = pack.manifest.seal
    if seal is None:
        raise ContractError(f"{pack.root}: the pack is not sealed (run `sealbench pack seal`)")
    validity = pack.manifest.validity
    invalid = {t: v.reason or "invalid" for t, v in validity.tasks.items() if not v.valid} if validity else {}
    ids, left_out = choose_tasks(list(pack.tasks), invalid, task_ids, where=str(pack.root))
    fresh = None
    if fresh_after is not None:
        from .freshness import fresh_after as claim

        fresh = claim({t: pack.tasks[t].record for t in ids}, fresh_after)
    attempts, wall = budget_caps([pack.tasks[t].record for t in ids], max_attempts, wall_clock_s)
    forbidden = _forbidden_paths(pack, ids)
    rel = os.path.relpath(pack.root, contract_file.resolve().parent)
    try:
        budget = Budget.model_validate({"max_attempts": attempts, "wall_clock_s": wall,
                                        "feedback": feedback, "attempt_gap_s": attempt_gap_s,
                                        **dict(model_caps or {}), **dict(sandbox_caps or {})})
    except ValidationError as e:
        raise ContractError(f"budget: {describe_validation_error(e)}") from None
    if budget.workspace_bytes is not None:
        _refuse_workspaces_over(pack, ids, budget.workspace_bytes)
    contract = ScoringContract(
        task_ids=ids,
        controls=Controls(
            narration_probe=Controls().narration_probe if narration_probe else None,
            oracle_validity=oracle_validity,  # type: ignore[arg-type]
        ),
        access_class=AccessClass(
            host=host or "unspecified",
            model_access=model_access or "unspecified",
            terms_read_on=terms_read_on,
        ),
        agent=agent,
        budget=budget,
        forbidden_paths=forbidden,
        pack=PackRef(path=rel, sha256=seal.pack_sha256),
        seed=seed,
        flagged_pass=flagged_pass,  # type: ignore[arg-type]
    )
    if fresh is not None:
        # Set only when claimed: a contract without the claim keeps the bytes it always had.
        contract = contract.model_copy(update={"fresh_after": fresh})
    return contract, left_out


def lock_contract(
    contract: ScoringContract, run_id: str, now: datetime, pack: Pack | None = None
) -> ScoringContract:
    """Apply every lock rule of the scoring contract and return the locked contract with its sha256.

    Raises:
        ContractError: already locked; incomplete; quota or permanence assumed; host
            unspecified; a bad run_id; a pack that does not match or lacks validity evidence.
    """
    if contract.locked_at or contract.run_id or contract.contract_sha256:
        raise ContractError("already locked; start a new contract file")
    try:
        check_id(run_id)
    except ValueError as e:
        raise ContractError(f"run_id: {e}") from None
    missing = ["task_ids"] if not contract.task_ids else []
    missing += [
        k
        for k in ("metrics", "controls", "access_class", "agent", "budget", "forbidden_paths", "pack")
        if getattr(contract, k) is None
    ]
    if missing:
        raise ContractError(f"refusing to lock incomplete contract: {missing}")
    access = contract.access_class
    assert access is not None
    if access.quota_assumed or access.permanence_assumed:
        raise ContractError("refusing to lock assumed quota or permanence")
    if access.host in UNSPECIFIED:
        raise ContractError("set access_class.host before lock")
    if len(contract.task_ids) != len(set(contract.task_ids)):
        raise ContractError("duplicate task_ids")
    _check_endpoints(contract)
    if now.tzinfo is None or now.utcoffset() is None or now.utcoffset().total_seconds() != 0:  # type: ignore[union-attr]
        raise ContractError("lock time must be timezone-aware UTC")
    if pack is not None:
        _check_against_pack(contract, pack)
    locked = contract.model_copy(
        update={"run_id": run_id, "locked_at": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
    )
    return locked.model_copy(update={"contract_sha256": contract_digest(locked)})


def _check_endpoints(contract: ScoringContract) -> None:
    """Endpoint names unique; prices only for models the endpoint allows. (Whether each key's
    variable is set is checked by ``run``, where the key is read: a contract is locked once and
    may be run elsewhere.)"""
    endpoints = contract.model_endpoints or []
    names = [e.name for e in endpoints]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ContractError(f"model_endpoints: the name(s) {twice} are used twice; each endpoint needs its own")
    budget = contract.budget
    for endpoint in endpoints:
        stray = sorted(set(endpoint.prices or {}) - set(endpoint.models))
        if stray:
            raise ContractError(f"model endpoint {endpoint.name!r}: prices for {stray}, which are not among its "
                                f"models {endpoint.models}")
        wait = endpoint.read_timeout_s
        if wait is not None and budget is not None and wait >= budget.wall_clock_s:
            raise ContractError(f"model endpoint {endpoint.name!r}: read_timeout_s {wait:g} is not under the "
                                f"wall-clock cap of {budget.wall_clock_s:g} s: an endpoint that hangs would end the "
                                "attempt as the agent's timeout instead of the endpoint's failure")
    if budget is not None:
        _check_model_budget(endpoints, budget)


def _check_model_budget(endpoints: Sequence[ModelEndpoint], budget: Budget) -> None:
    """Caps on model use only with endpoints to bind them; a cost cap only over prices locked for
    every model, in one currency."""
    caps = [c for c in MODEL_CAPS if getattr(budget, c) is not None]
    if caps and not endpoints:
        raise ContractError(f"budget: {', '.join(caps)} needs model_endpoints: a cap on model use binds only "
                            "through the gateway")
    if budget.max_model_cost is not None:
        unpriced = [f"{e.name}/{m}" for e in endpoints for m in e.models if m not in (e.prices or {})]
        if unpriced:
            raise ContractError(f"budget: max_model_cost needs a locked price for every model the endpoints allow; "
                                f"none for {unpriced[:5]}")
        currencies = {p.currency for e in endpoints for p in (e.prices or {}).values()}
        if len(currencies) > 1:
            raise ContractError(f"budget: max_model_cost needs one currency across the prices, not {sorted(currencies)}")


def _check_against_pack(contract: ScoringContract, pack: Pack) -> None:
    assert contract.pack is not None and contract.controls is not None
    if pack.sealed_digest != contract.pack.sha256:
        raise ContractError(
            f"the pack digest {pack.sealed_digest} differs from the contract's {contract.pack.sha256}"
        )
    unknown = [t for t in contract.task_ids if t not in pack.tasks]
    if unknown:
        raise ContractError(f"task ids not in the pack: {unknown}")
    if contract.controls.oracle_validity == "required":
        validity = pack.manifest.validity
        lacking = [
            t for t in contract.task_ids
            if validity is None or validity.pack_sha256 != pack.sealed_digest
            or t not in validity.tasks
        ]
        if lacking:
            raise ContractError(
                f"no oracle-validity evidence for {len(lacking)} task(s) {lacking[:5]}: "
                "run `sealbench pack validate` or declare controls.oracle_validity 'unavailable'"
            )
        invalid = {t: validity.tasks[t].reason for t in contract.task_ids
                   if validity and not validity.tasks[t].valid}
        if invalid:
            raise ContractError(f"tasks whose oracle failed validation: {invalid}")


GRADING_HEADROOM = 3
"""How many times the reference's measured grading time a wall-clock cap should leave: grading
counts against the cap, and a loaded machine grades slower than the one that validated."""
_SHOWN = 10


def headroom_warnings(contract: ScoringContract, pack: Pack) -> list[str]:
    """A warning for each task whose wall-clock cap leaves less than :data:`GRADING_HEADROOM`
    times its reference's grading time as ``pack validate`` measured it (none when unmeasured).
    Only a warning: the cap is the contract's to choose."""
    validity, budget = pack.manifest.validity, contract.budget
    if validity is None or budget is None or validity.pack_sha256 != pack.sealed_digest:
        return []
    cap = budget.wall_clock_s
    tight = {t: s for t in contract.task_ids
             if (ev := validity.tasks.get(t)) is not None and (s := ev.reference_grading_s) is not None
             and cap < GRADING_HEADROOM * s}
    lines = [f"warning: {t}: the wall-clock cap {cap:g} s leaves less than {GRADING_HEADROOM}x the reference's "
             f"grading time measured by `pack validate` ({s:g} s), and grading counts against the cap; "
             f"a cap of {_whole(GRADING_HEADROOM * s)} s would leave {GRADING_HEADROOM}x"
             for t, s in list(tight.items())[:_SHOWN]]
    if len(tight) > _SHOWN:
        lines.append(f"warning: and {len(tight) - _SHOWN} more task(s) like these")
    if len(tight) > 1:
        lines.append(f"warning: a cap of {_whole(GRADING_HEADROOM * max(tight.values()))} s (--wall-clock-s) would "
                     f"leave {GRADING_HEADROOM}x for every task")
    return lines


def _whole(seconds: float) -> int:
    """Seconds rounded up to a whole second, so the cap it names really leaves the headroom."""
    return math.ceil(round(seconds, 6))


def require_locked(contract: ScoringContract) -> None:
    """Refuse an unlocked contract or one edited after lock.

    Raises:
        ContractError: ``unlocked contract`` or ``contract edited after lock``.
    """
    if not contract.locked_at or not contract.run_id:
        raise ContractError("unlocked contract; no rate emitted: lock it before the run with "
                            "`sealbench contract lock CONTRACT --run-id NAME`")
    edited = ("; no rate emitted: put back the file as it was locked, or write a new contract and lock it "
              "under a new run_id")
    if contract.contract_sha256 is None:
        raise ContractError(f"contract edited after lock (its contract_sha256 is gone){edited}")
    if contract_digest(contract) != contract.contract_sha256:
        raise ContractError(f"contract edited after lock (it no longer matches the digest recorded at lock){edited}")
