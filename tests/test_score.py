"""Scoring: seed 004's fixture scores 2 of 4, and every refusal is triggered and named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealbench.errors import ContractError, ScoreRefusal
from sealbench.formats import Outcome, ScoringContract, SeedEvent
from sealbench.score import contradiction, counted_as, parse_events, parse_events_json, score

SEED_EVENTS: list[dict[str, Any]] = [
    {"task_id": "t_03_rename_helper", "task_pass": True, "abstain": False, "wall_seconds": 40},
    {"task_id": "t_11_fix_off_by_one", "task_pass": False, "abstain": False, "wall_seconds": 55},
    {"task_id": "t_18_add_missing_test", "task_pass": False, "abstain": False, "wall_seconds": 200},
    {"task_id": "t_22_reject_network_call", "task_pass": True, "abstain": False, "wall_seconds": 30},
]


def rate_of(contract: ScoringContract, events: list[dict[str, Any]]) -> Any:
    return score(contract, parse_events(events))


def test_seed_004_fixture_scores_two_of_four_with_wilson_interval(
    seed_contract: tuple[Path, ScoringContract],
) -> None:
    rate = rate_of(seed_contract[1], SEED_EVENTS)
    assert (rate.n, rate.task_pass_count) == (4, 2)
    assert rate.sentence == "2 of 4 task_pass on this locked run_id"
    assert rate.wilson_95.low == pytest.approx(0.1500389892, abs=1e-9)
    assert rate.wilson_95.high == pytest.approx(0.8499610108, abs=1e-9)
    assert rate.note == "valid only for this slice, metric, and access class"
    assert rate.contract_sha256 == seed_contract[1].contract_sha256
    assert rate.budget is not None and rate.budget.max_attempts == 2


def test_timeouts_and_abstains_stay_in_n(seed_contract: tuple[Path, ScoringContract]) -> None:
    events = [dict(e) for e in SEED_EVENTS]
    events[1].update(outcome="timeout")
    events[2].update(abstain=True, outcome="abstain")
    rate = rate_of(seed_contract[1], events)
    assert rate.n == 4 and rate.outcomes["timeout"] == 1 and rate.outcomes["abstain"] == 1


REFUSALS = [
    ("an event outside the locked slice", lambda ev: [*ev, {"task_id": "t_99", "task_pass": True}],
     "event outside locked slice: t_99"),
    ("a post-lock exclusion", lambda ev: [{**ev[0], "excluded_after_lock": True}, *ev[1:]],
     "post-lock exclusion starts a new study: t_03_rename_helper"),
    ("a missing task_pass", lambda ev: [{k: v for k, v in ev[0].items() if k != "task_pass"}, *ev[1:]],
     "missing task_pass: t_03_rename_helper"),
    ("denominator drift", lambda ev: ev[:2], "denominator drift, missing ['t_18_add_missing_test', 't_22_reject_network_call']"),
    ("an abstain that passes", lambda ev: [{**ev[0], "abstain": True}, *ev[1:]], "abstain cannot pass: t_03_rename_helper"),
    ("a silent rerun", lambda ev: [*ev, {**ev[1], "task_pass": True}], "two events for task t_11_fix_off_by_one"),
    ("a harness error", lambda ev: [{**ev[1], "outcome": "harness_error"}, ev[0], *ev[2:]],
     "harness errors in 1 task(s) ['t_11_fix_off_by_one']: rerun under a new run_id"),
    ("an unknown key", lambda ev: [{**ev[0], "vibes": 10}, *ev[1:]], "vibes: unknown key"),
    ("a string boolean", lambda ev: [{**ev[0], "task_pass": "true"}, *ev[1:]], "task_pass: Input should be a valid boolean"),
]


@pytest.mark.parametrize(("what", "mutate", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusal(seed_contract: tuple[Path, ScoringContract], what: str, mutate: Any, message: str) -> None:
    with pytest.raises(ScoreRefusal) as info:
        rate_of(seed_contract[1], mutate([dict(e) for e in SEED_EVENTS]))
    assert message in str(info.value)


def test_refuses_unlocked_contract(seed_contract: tuple[Path, ScoringContract]) -> None:
    c = seed_contract[1].model_copy(update={"locked_at": None})
    with pytest.raises(ContractError, match="unlocked contract; no rate emitted"):
        rate_of(c, SEED_EVENTS)


@pytest.mark.parametrize("field", ["quota_assumed", "permanence_assumed"])
def test_refuses_assumed_quota_or_permanence_even_if_rehashed(
    seed_contract: tuple[Path, ScoringContract], field: str
) -> None:
    from sealbench.contract import contract_digest

    c = seed_contract[1]
    assert c.access_class is not None
    c = c.model_copy(update={"access_class": c.access_class.model_copy(update={field: True})})
    c = c.model_copy(update={"contract_sha256": contract_digest(c)})
    with pytest.raises(ScoreRefusal, match="assumed quota or permanence; no rate emitted"):
        rate_of(c, SEED_EVENTS)


def test_refuses_duplicate_task_ids_even_if_rehashed(seed_contract: tuple[Path, ScoringContract]) -> None:
    from sealbench.contract import contract_digest

    c = seed_contract[1]
    c = c.model_copy(update={"task_ids": [*c.task_ids, c.task_ids[0]]})
    c = c.model_copy(update={"contract_sha256": contract_digest(c)})
    with pytest.raises(ScoreRefusal, match="duplicate task_ids"):
        rate_of(c, SEED_EVENTS)


def test_refuses_edited_contract(seed_contract: tuple[Path, ScoringContract]) -> None:
    c = seed_contract[1].model_copy(update={"task_ids": seed_contract[1].task_ids[:3]})
    with pytest.raises(ContractError, match="contract edited after lock"):
        rate_of(c, SEED_EVENTS[:3])


def test_events_json_must_be_a_list() -> None:
    with pytest.raises(ScoreRefusal, match="expected a JSON list"):
        parse_events_json('{"task_id": "x"}')
    with pytest.raises(ScoreRefusal, match="invalid JSON"):
        parse_events_json("[")


# --- properties -------------------------------------------------------------------------

events_strategy = st.lists(st.booleans(), min_size=4, max_size=4).map(
    lambda passes: [{**e, "task_pass": p} for e, p in zip(SEED_EVENTS, passes, strict=True)]
)
_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_settings
@given(events=events_strategy, data=st.data())
def test_event_order_never_changes_the_result(
    seed_contract: tuple[Path, ScoringContract], events: list[dict[str, Any]], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(events))
    assert rate_of(seed_contract[1], events) == rate_of(seed_contract[1], list(shuffled))


@_settings
@given(events=events_strategy, data=st.data())
def test_dropping_duplicating_or_adding_any_event_is_refused(
    seed_contract: tuple[Path, ScoringContract], events: list[dict[str, Any]], data: st.DataObject
) -> None:
    i = data.draw(st.integers(0, len(events) - 1))
    change = data.draw(st.sampled_from(["drop", "duplicate", "add"]))
    if change == "drop":
        mutated = events[:i] + events[i + 1 :]
    elif change == "duplicate":
        mutated = [*events, dict(events[i], task_pass=data.draw(st.booleans()))]
    else:
        new_id = data.draw(st.from_regex(r"[a-z]{1,8}", fullmatch=True))
        mutated = [*events, {"task_id": "x_" + new_id, "task_pass": data.draw(st.booleans())}]
    with pytest.raises(ScoreRefusal):
        rate_of(seed_contract[1], mutated)


@_settings
@given(data=st.data())
def test_any_edit_to_a_locked_contract_is_caught(
    seed_contract: tuple[Path, ScoringContract], data: st.DataObject
) -> None:
    path, _contract = seed_contract
    raw = json.loads(path.read_text())
    edits = {
        "run_id": st.just("other-run"),
        "locked_at": st.just("2027-01-01T00:00:00Z"),
        "seed": st.integers(1, 10**6),
        "task_ids": st.just(raw["task_ids"][:-1]),
        "forbidden_paths": st.just(raw["forbidden_paths"][1:]),
        "budget": st.integers(3, 9).map(lambda n: {**raw["budget"], "max_attempts": n}),
        "access_class": st.text(min_size=1, max_size=10).map(lambda h: {**raw["access_class"], "host": "h" + h}),
        "metrics": st.just({**raw["metrics"], "task_pass": "tests_green"}),
        "controls": st.just({**raw["controls"], "narration_probe": None}),
        "agent": st.just({**raw["agent"], "label": "other agent"}),
        "pack": st.just({**raw["pack"], "path": "elsewhere"}),
    }
    key = data.draw(st.sampled_from(sorted(edits)))
    raw[key] = data.draw(edits[key])
    edited = ScoringContract.model_validate(raw)
    with pytest.raises(ContractError, match="contract edited after lock"):
        rate_of(edited, SEED_EVENTS)


# --- pure: how one event is counted, and when it contradicts itself ---------------------------

@pytest.mark.parametrize(("task_pass", "abstain", "outcome", "counted", "contradicts"), [
    (True, False, None, Outcome.PASS, None),
    (False, False, None, Outcome.FAIL, None),
    (False, True, None, Outcome.ABSTAIN, None),
    (True, True, None, None, "abstain cannot pass: t"),
    (False, False, Outcome.TIMEOUT, Outcome.TIMEOUT, None),
    (False, True, Outcome.ABSTAIN, Outcome.ABSTAIN, None),
    (False, False, Outcome.ABSTAIN, None, "outcome abstain without abstain flag: t"),
    (True, False, Outcome.PASS, Outcome.PASS, None),
    (False, False, Outcome.PASS, None, "task_pass False contradicts outcome pass: t"),
    (True, False, Outcome.FAIL, None, "task_pass True contradicts outcome fail: t"),
    (False, False, Outcome.HARNESS_ERROR, Outcome.HARNESS_ERROR, None),
])
def test_an_event_is_counted_under_its_outcome_else_its_flags_unless_it_contradicts_itself(
        task_pass: bool, abstain: bool, outcome: Outcome | None, counted: Outcome | None,
        contradicts: str | None) -> None:
    ev = SeedEvent(task_id="t", task_pass=task_pass, abstain=abstain, outcome=outcome)
    assert contradiction(ev) == contradicts
    if contradicts is None:
        assert counted_as(ev) is counted
