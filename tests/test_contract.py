"""Contracts: an explicit denominator, every seed-004 lock rule, and no edit after lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import LOCK_TIME, SEED_IDS, make_contract
from sealbench.contract import (
    budget_caps,
    choose_tasks,
    contract_digest,
    load_contract,
    lock_contract,
    new_contract,
    require_locked,
)
from sealbench.errors import ContractError
from sealbench.formats import AccessClass, AgentSpec, ScoringContract, TaskRecord
from sealbench.pack import load_pack

SEED_004_CONTRACT = {
    "contract_version": 1,
    "run_id": None,
    "locked_at": None,
    "task_ids": SEED_IDS,
    "metrics": {
        "primary": "task_pass",
        "task_pass": "tests_green AND patch_applies_clean AND no_forbidden_path",
        "abstain": "exit_code_0 AND patch_empty",
        "timeout": "wall_seconds > 180",
        "post_lock_exclusion": "forbidden",
    },
    "controls": {"narration_probe": "summary only; a non-empty patch fails the probe"},
    "access_class": {"host": "unspecified", "model_access": "unspecified", "quota_assumed": False,
                     "permanence_assumed": False},
}


def unlocked(sealed_pack: Path, tmp_path: Path, **kw: object) -> ScoringContract:
    return make_contract(sealed_pack, tmp_path / "c.json", task_ids=SEED_IDS, run_id=None, **kw)  # type: ignore[arg-type]


def test_seed_004_contract_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "scoring_contract.json"
    path.write_text(json.dumps(SEED_004_CONTRACT))
    contract = load_contract(path)
    assert contract.task_ids == SEED_IDS and contract.run_id is None


def test_lock_refuses_seed_004_contract_as_incomplete(tmp_path: Path) -> None:
    path = tmp_path / "scoring_contract.json"
    path.write_text(json.dumps(SEED_004_CONTRACT))
    with pytest.raises(ContractError, match=r"refusing to lock incomplete contract: \['agent', 'budget', 'forbidden_paths', 'pack'\]"):
        lock_contract(load_contract(path), "run_2026_10_12_a", LOCK_TIME)


def test_lock_refuses_empty_denominator(sealed_pack: Path, tmp_path: Path) -> None:
    c = unlocked(sealed_pack, tmp_path).model_copy(update={"task_ids": []})
    with pytest.raises(ContractError, match=r"incomplete contract: \['task_ids'\]"):
        lock_contract(c, "r", LOCK_TIME)


def test_lock_refuses_already_locked(seed_contract: tuple[Path, ScoringContract]) -> None:
    with pytest.raises(ContractError, match="already locked; start a new contract file"):
        lock_contract(seed_contract[1], "run-2", LOCK_TIME)


@pytest.mark.parametrize("field", ["quota_assumed", "permanence_assumed"])
def test_lock_refuses_assumed_quota_or_permanence(sealed_pack: Path, tmp_path: Path, field: str) -> None:
    c = unlocked(sealed_pack, tmp_path)
    assert c.access_class is not None
    c = c.model_copy(update={"access_class": c.access_class.model_copy(update={field: True})})
    with pytest.raises(ContractError, match="refusing to lock assumed quota or permanence"):
        lock_contract(c, "r", LOCK_TIME)


@pytest.mark.parametrize("host", [None, "", "unspecified"])
def test_lock_refuses_unspecified_host(sealed_pack: Path, tmp_path: Path, host: str | None) -> None:
    c = unlocked(sealed_pack, tmp_path).model_copy(update={"access_class": AccessClass(host=host)})
    with pytest.raises(ContractError, match=r"set access_class\.host before lock"):
        lock_contract(c, "r", LOCK_TIME)


def test_lock_refuses_duplicate_task_ids(sealed_pack: Path, tmp_path: Path) -> None:
    c = unlocked(sealed_pack, tmp_path)
    c = c.model_copy(update={"task_ids": [*c.task_ids, c.task_ids[0]]})
    with pytest.raises(ContractError, match="duplicate task_ids"):
        lock_contract(c, "r", LOCK_TIME)


def test_lock_refuses_unsafe_run_id(sealed_pack: Path, tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="run_id"):
        lock_contract(unlocked(sealed_pack, tmp_path), "../x", LOCK_TIME)


def test_lock_refuses_missing_validity_evidence_unless_declared_unavailable(sealed_pack: Path, tmp_path: Path) -> None:
    pack = load_pack(sealed_pack)
    c = unlocked(sealed_pack, tmp_path, oracle_validity="required")
    with pytest.raises(ContractError, match="no oracle-validity evidence"):
        lock_contract(c, "r", LOCK_TIME, pack)
    ok = unlocked(sealed_pack, tmp_path, oracle_validity="unavailable")
    assert lock_contract(ok, "r", LOCK_TIME, pack).locked_at == "2026-10-12T09:30:00Z"


def test_lock_refuses_pack_that_changed_since_contract(sealed_pack: Path, tmp_path: Path) -> None:
    c = unlocked(sealed_pack, tmp_path)
    assert c.pack is not None
    c = c.model_copy(update={"pack": c.pack.model_copy(update={"sha256": "sha256:" + "1" * 64})})
    with pytest.raises(ContractError, match="differs from the contract"):
        lock_contract(c, "r", LOCK_TIME, load_pack(sealed_pack))


def test_lock_records_sha256_and_naive_clock_is_refused(sealed_pack: Path, tmp_path: Path) -> None:
    from datetime import datetime

    c = unlocked(sealed_pack, tmp_path)
    with pytest.raises(ContractError, match="UTC"):
        lock_contract(c, "r", datetime(2026, 1, 1))  # noqa: DTZ001
    locked = lock_contract(c, "r", LOCK_TIME)
    assert locked.contract_sha256 == contract_digest(locked)
    require_locked(locked)


def test_require_locked_refuses_unlocked(sealed_pack: Path, tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="unlocked contract; no rate emitted"):
        require_locked(unlocked(sealed_pack, tmp_path))


def test_edit_after_lock_is_detected(seed_contract: tuple[Path, ScoringContract]) -> None:
    path, _ = seed_contract
    raw = json.loads(path.read_text())
    raw["budget"]["max_attempts"] = 5
    path.write_text(json.dumps(raw))
    with pytest.raises(ContractError, match="contract edited after lock"):
        require_locked(load_contract(path))


def test_reformatting_a_locked_contract_is_not_an_edit(seed_contract: tuple[Path, ScoringContract]) -> None:
    path, _ = seed_contract
    path.write_text(json.dumps(json.loads(path.read_text()), indent=None, sort_keys=True))
    require_locked(load_contract(path))


def test_new_contract_denominator_is_explicit_and_forbids_hidden_paths(sealed_pack: Path, tmp_path: Path) -> None:
    c, left_out = new_contract(load_pack(sealed_pack), tmp_path / "c.json")
    assert left_out == {}
    assert c.task_ids == sorted(c.task_ids) and len(c.task_ids) == 5
    assert c.forbidden_paths is not None
    for name in ("conftest.py", "sitecustomize.py", "*.pth", "test_oracle_window.py", "oracle_mutants.py"):
        assert name in c.forbidden_paths
    assert c.run_id is None and c.locked_at is None
    assert c.pack is not None and c.pack.path == "pack"


def test_new_contract_refuses_unknown_and_duplicate_ids(sealed_pack: Path, tmp_path: Path) -> None:
    pack = load_pack(sealed_pack)
    with pytest.raises(ContractError, match="task ids not in the pack"):
        new_contract(pack, tmp_path / "c.json", ["nope"])
    with pytest.raises(ContractError, match="duplicate task_ids"):
        new_contract(pack, tmp_path / "c.json", [SEED_IDS[0], SEED_IDS[0]])


def test_new_contract_on_a_pack_where_every_task_is_invalid_says_so(sealed_pack: Path, tmp_path: Path) -> None:
    from sealbench.files import model_json
    from sealbench.formats import Validity, ValidityEvidence

    pack = load_pack(sealed_pack)
    assert pack.sealed_digest is not None
    bad = ValidityEvidence(valid=False, reason="reference fails", reference_passes=[False], empty_change_passes=[False])
    validity = Validity(pack_sha256=pack.sealed_digest, repeat=1, sandbox="bubblewrap",
                        tasks=dict.fromkeys(pack.tasks, bad))
    (sealed_pack / "pack.json").write_text(model_json(pack.manifest.model_copy(update={"validity": validity})))
    with pytest.raises(ContractError, match=r"no task of .* is valid, so there is no denominator .*reference fails"):
        new_contract(load_pack(sealed_pack), tmp_path / "c.json")


def test_new_contract_refuses_unsealed_pack(raw_pack: Path, tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="not sealed"):
        new_contract(load_pack(raw_pack), tmp_path / "c.json", agent=AgentSpec(label="a", command="true"))


# --- pure: the denominator and the caps, as tables ---------------------------------------------

IN_PACK = ["a", "b", "c"]


@pytest.mark.parametrize(("invalid", "requested", "chosen", "refused"), [
    ({}, [], (["a", "b", "c"], {}), None),
    ({"b": "the reference fails"}, [], (["a", "c"], {"b": "the reference fails"}), None),
    ({}, ["c", "a"], (["c", "a"], {}), None),
    ({"b": "flaky"}, ["a", "c"], (["a", "c"], {}), None),
    ({}, ["a", "a"], None, "duplicate task_ids: ['a']"),
    ({}, ["a", "z"], None, "task ids not in the pack: ['z']"),
    ({"b": "flaky"}, ["a", "b"], None, "tasks whose oracle failed validation: {'b': 'flaky'}"),
    ({"a": "x", "b": "y", "c": "z"}, [], None, "no task of the pack is valid, so there is no denominator to "
     "measure (3 failed `pack validate`: a: x; b: y; c: z); fix the tasks' oracles, seal and validate again"),
])
def test_the_denominator_is_the_requested_tasks_else_every_valid_one(
        invalid: dict[str, str], requested: list[str], chosen: tuple[list[str], dict[str, str]] | None,
        refused: str | None) -> None:
    if refused is None:
        assert choose_tasks(IN_PACK, invalid, requested, where="the pack") == chosen
    else:
        with pytest.raises(ContractError) as e:
            choose_tasks(IN_PACK, invalid, requested, where="the pack")
        assert str(e.value) == refused


def record(attempts: int, wall: float) -> TaskRecord:
    return TaskRecord(task_id="t", prompt_template_id="p", oracle_cmd=["true"], hidden_tests_sha256="sha256:" + "0" * 64,
                      max_attempts=attempts, wall_clock_s=wall, language="python")


@pytest.mark.parametrize(("records", "given", "caps"), [
    ([record(2, 60), record(2, 60)], (None, None), (2, 60.0)),
    ([record(2, 60), record(3, 60)], (4, None), (4, 60.0)),
    ([record(2, 60), record(2, 90)], (None, 30.0), (2, 30.0)),
    ([record(2, 60), record(3, 90)], (1, 10.0), (1, 10.0)),
    ([record(2, 60), record(3, 60)], (None, None), None),
    ([record(2, 60), record(2, 90)], (5, None), None),
])
def test_a_cap_not_given_is_the_one_every_task_agrees_on(
        records: list[TaskRecord], given: tuple[int | None, float | None], caps: tuple[int, float] | None) -> None:
    if caps is None:
        with pytest.raises(ContractError, match="tasks disagree on max_attempts or wall_clock_s"):
            budget_caps(records, *given)
    else:
        assert budget_caps(records, *given) == caps
