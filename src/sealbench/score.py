"""Scoring: a rate for a locked contract, or a refusal. Pure functions.

Every check runs over events in task-id order so the verdict never depends on the order of
events.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from pydantic import ValidationError

from .contract import require_locked
from .errors import ScoreRefusal
from .files import describe_validation_error
from .formats import Interval95, Rate, ScoringContract, SeedEvent
from .outcomes import Outcome
from .stats import wilson_interval

NOTE = "valid only for this slice, metric, and access class"


def parse_events(raw: Any, source: str = "events.json") -> list[SeedEvent]:
    """Validate raw events.json content (a list of objects) into events.

    Raises:
        ScoreRefusal: not a list, an entry without task_id or task_pass, unknown keys, bad types.
    """
    if not isinstance(raw, list):
        raise ScoreRefusal(f"{source}: expected a JSON list of events")
    events: list[SeedEvent] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ScoreRefusal(f"{source}: event {i}: expected an object")
        tid = item.get("task_id")
        if not isinstance(tid, str):
            raise ScoreRefusal(f"{source}: event {i}: missing task_id")
        if "task_pass" not in item:
            raise ScoreRefusal(f"missing task_pass: {tid}")
        try:
            events.append(SeedEvent.model_validate(item))
        except ValidationError as e:
            raise ScoreRefusal(f"{source}: event {i} ({tid}): {describe_validation_error(e)}") from None
    return events


def parse_events_json(text: str, source: str = "events.json") -> list[SeedEvent]:
    """Parse events.json text.

    Raises:
        ScoreRefusal: invalid JSON or any refusal of :func:`parse_events`.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScoreRefusal(f"{source}: invalid JSON ({e.msg} at line {e.lineno})") from None
    return parse_events(raw, source)


def evidence_sentence(passed: int, n: int) -> str:
    """The scoring contract's voice: a count on a locked run, never a bare percentage."""
    return f"{passed} of {n} task_pass on this locked run_id"


def _denominator(contract: ScoringContract) -> list[str]:
    """The locked task_ids, refused when empty or when one is listed twice."""
    allowed = list(contract.task_ids)
    if not allowed:
        raise ScoreRefusal("empty denominator: the contract locks no task_ids; no rate emitted")
    if len(allowed) != len(set(allowed)):
        raise ScoreRefusal("duplicate task_ids")
    return allowed


class _Entry(NamedTuple):
    """What scoring keeps of one seed event: its fields as a tuple (a run of 100,000 tasks held
    as models would cost ten times the memory). The fields are :class:`SeedEvent`'s, in order."""

    task_id: str
    task_pass: bool
    abstain: bool
    wall_seconds: float | None
    excluded_after_lock: bool
    outcome: Outcome | None
    attempts_used: int | None

    @classmethod
    def of(cls, ev: SeedEvent) -> _Entry:
        return cls(ev.task_id, ev.task_pass, ev.abstain, ev.wall_seconds, ev.excluded_after_lock, ev.outcome,
                   ev.attempts_used)

    def dumped(self) -> str:
        """The event's JSON, as :meth:`SeedEvent.model_dump_json` writes it."""
        return SeedEvent.model_construct(**self._asdict()).model_dump_json()


class Tally:
    """Seed events as scoring keeps them, added one at a time (see :func:`score`)."""

    def __init__(self, events: Iterable[SeedEvent] = ()) -> None:
        self.entries = [_Entry.of(ev) for ev in events]

    def add(self, ev: SeedEvent) -> None:
        self.entries.append(_Entry.of(ev))


def _in_order(entries: list[_Entry]) -> list[_Entry]:
    """The entries sorted by task_id, and the entries of one task by their JSON: the order
    every check reads them in, whatever the order of events.json."""
    ordered = sorted(entries, key=lambda e: e.task_id)
    i = 0
    while i < len(ordered):
        j = i + 1
        while j < len(ordered) and ordered[j].task_id == ordered[i].task_id:
            j += 1
        if j - i > 1:
            ordered[i:j] = sorted(ordered[i:j], key=_Entry.dumped)
        i = j
    return ordered


def _one_event_per_task(allowed: Sequence[str], events: list[_Entry]) -> dict[str, _Entry]:
    """Each task's one event: none outside the slice, none excluded after the lock, no task
    twice (a silent rerun) and none missing (denominator drift)."""
    allowed_set = set(allowed)
    by_id: dict[str, _Entry] = {}
    for ev in _in_order(events):
        tid = ev.task_id
        if tid not in allowed_set:
            raise ScoreRefusal(f"event outside locked slice: {tid}")
        if ev.excluded_after_lock:
            raise ScoreRefusal(f"post-lock exclusion starts a new study: {tid}")
        if tid in by_id:
            raise ScoreRefusal(f"two events for task {tid}: a silent rerun; no rate emitted")
        by_id[tid] = ev
    missing = [tid for tid in allowed if tid not in by_id]
    if missing:
        raise ScoreRefusal(f"denominator drift, missing {missing}")
    return by_id


def contradiction(ev: SeedEvent | _Entry) -> str | None:
    """How an event contradicts itself (an abstain that passes, an outcome its flags deny), or None."""
    if ev.abstain and ev.task_pass:
        return f"abstain cannot pass: {ev.task_id}"
    if ev.outcome is Outcome.ABSTAIN and not ev.abstain:
        return f"outcome abstain without abstain flag: {ev.task_id}"
    if ev.outcome is not None and ev.task_pass != (ev.outcome is Outcome.PASS):
        return f"task_pass {ev.task_pass} contradicts outcome {ev.outcome}: {ev.task_id}"
    return None


def _refuse_unrated(by_id: Mapping[str, _Entry]) -> None:
    """Refuse tasks the agent did not decide: harness errors, infrastructure errors."""
    harness = sorted(t for t, ev in by_id.items() if ev.outcome is Outcome.HARNESS_ERROR)
    if harness:
        raise ScoreRefusal(
            f"harness errors in {len(harness)} task(s) {harness[:5]}: "
            "rerun under a new run_id; no rate emitted"
        )
    infra = sorted(t for t, ev in by_id.items() if ev.outcome is Outcome.INFRA_ERROR)
    if infra:
        # The last attempt's end was not the agent's (a crash, a stop, a full disk, a lost node),
        # and the attempt stays used: the task has no result to count either way.
        raise ScoreRefusal(
            f"infrastructure errors in {len(infra)} task(s) {infra[:5]}: their last attempt was ended by "
            "something other than the agent (a crash, a stop, a full disk, a lost node); rerun under a new "
            "run_id; no rate emitted"
        )


def counted_as(ev: SeedEvent | _Entry) -> Outcome:
    """The outcome an event is counted under: its own, else what its flags say (an event of a
    release before outcomes were recorded)."""
    if ev.outcome is not None:
        return ev.outcome
    if ev.abstain:
        return Outcome.ABSTAIN
    return Outcome.PASS if ev.task_pass else Outcome.FAIL


def score(contract: ScoringContract, events: Iterable[SeedEvent] | Tally) -> Rate:
    """Score events under a locked contract, or refuse.

    ``events`` are read once; a :class:`Tally` holds them as scoring keeps them (a compact
    record each), so a caller that makes them one at a time need not hold them as models.

    Raises:
        ContractError: unlocked or edited contract.
        ScoreRefusal: assumed quota or permanence, duplicate task_ids, an event outside the
            slice, a post-lock exclusion, a silent rerun, denominator drift, an abstain that
            passes, harness errors, infrastructure errors.
    """
    require_locked(contract)
    access = contract.access_class
    if access is None or access.quota_assumed or access.permanence_assumed:
        raise ScoreRefusal("assumed quota or permanence; no rate emitted")
    allowed = _denominator(contract)
    by_id = _one_event_per_task(allowed, (events if isinstance(events, Tally) else Tally(events)).entries)
    for tid in sorted(allowed):
        why = contradiction(by_id[tid])
        if why is not None:
            raise ScoreRefusal(why)
    _refuse_unrated(by_id)
    n = len(allowed)
    passed = sum(1 for ev in by_id.values() if ev.task_pass)
    # infra_error never reaches a rate, and rate.json keeps the keys it always had.
    outcomes = {o.value: 0 for o in Outcome if o is not Outcome.INFRA_ERROR}
    for ev in by_id.values():
        outcomes[counted_as(ev).value] += 1
    lo, hi = wilson_interval(passed, n)
    assert contract.run_id is not None and contract.locked_at is not None
    assert contract.contract_sha256 is not None
    return Rate(
        run_id=contract.run_id,
        locked_at=contract.locked_at,
        contract_sha256=contract.contract_sha256,
        pack_sha256=contract.pack.sha256 if contract.pack else None,
        n=n,
        task_pass_count=passed,
        task_pass_rate=passed / n,
        wilson_95=Interval95(low=lo, high=hi),
        sentence=evidence_sentence(passed, n),
        outcomes=outcomes,
        budget=contract.budget,
        access_class=access,
        controls=contract.controls,
        note=NOTE,
    )
