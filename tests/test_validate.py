"""Oracle validity: the reference must pass, the empty change must fail, every time."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sealbench.contract import lock_contract, new_contract
from sealbench.errors import ContractError
from sealbench.formats import AgentSpec
from sealbench.pack import load_pack, seal_pack
from sealbench.validate import validate_pack, verdict

TASK = "t_11_fix_off_by_one"


@pytest.mark.parametrize(
    ("reference", "empty", "expected"),
    [
        ([True, True, True], [False, False, False], (True, None)),
        ([False, False, False], [False, False, False], (False, "reference fails")),
        ([True, True, True], [True, True, True], (False, "empty change passes")),
        ([True, False, True], [False, False, False], (False, "flaky")),
        ([True, True, True], [False, True, False], (False, "flaky")),
    ],
)
def test_verdict(reference: list[bool], empty: list[bool], expected: tuple[bool, str | None]) -> None:
    assert verdict(reference, empty) == expected


def break_pack(pack: Path) -> None:
    """Three broken oracles, one of each kind, in otherwise valid tasks."""
    (pack / "tasks" / "t_03_rename_helper" / "hidden" / "test_oracle_rename.py").write_text(
        "def test_anything_goes():\n    assert True\n")
    (pack / "tasks" / TASK / "solution" / "window.py").write_text("def last_n(items, n):\n    return []\n")
    # Deterministic flakiness: the second grading copy of the reference fails.
    (pack / "tasks" / "csv-split-001" / "hidden" / "test_oracle_csv.py").write_text(
        "import os\nfrom csvsplit import split_line\n\n\ndef test_split():\n"
        "    assert not os.getcwd().endswith('grade-2')\n    assert split_line('a,\"b,c\"') == ['a', 'b,c']\n")


def test_sample_pack_oracles_are_valid_and_evidence_is_recorded(sealed_pack: Path) -> None:
    validity = validate_pack(sealed_pack, repeat=2, progress=False)
    assert {t: ev.reason for t, ev in validity.tasks.items() if not ev.valid} == {}
    manifest = json.loads((sealed_pack / "pack.json").read_text())
    assert manifest["validity"]["pack_sha256"] == manifest["seal"]["pack_sha256"]
    pack = load_pack(sealed_pack)
    contract, left_out = new_contract(pack, sealed_pack.parent / "c.json", host="h",
                                      agent=AgentSpec(label="a", command="builtin:noop"))
    assert left_out == {}
    assert lock_contract(contract, "r", datetime.now(UTC), pack).contract_sha256


def test_broken_oracles_are_caught_before_lock(raw_pack: Path) -> None:
    break_pack(raw_pack)
    seal_pack(raw_pack)
    validity = validate_pack(raw_pack, repeat=3, progress=False)
    reasons = {tid: ev.reason for tid, ev in validity.tasks.items() if not ev.valid}
    assert reasons == {
        "t_03_rename_helper": "empty change passes",
        TASK: "reference fails",
        "csv-split-001": "flaky",
    }
    assert validity.tasks["csv-split-001"].reference_passes == [True, False, True]
    pack = load_pack(raw_pack)
    contract, left_out = new_contract(pack, raw_pack.parent / "c.json", host="h",
                                      agent=AgentSpec(label="a", command="builtin:noop"))
    assert set(left_out) == set(reasons) and set(contract.task_ids).isdisjoint(reasons)
    with pytest.raises(ContractError, match="tasks whose oracle failed validation"):
        new_contract(pack, raw_pack.parent / "c.json", [TASK], host="h")


def test_resealing_drops_stale_evidence(sealed_pack: Path) -> None:
    validate_pack(sealed_pack, repeat=1, progress=False)
    with (sealed_pack / "tasks" / TASK / "prompt.md").open("a") as f:
        f.write("\nMore words.\n")
    seal_pack(sealed_pack)
    assert json.loads((sealed_pack / "pack.json").read_text())["validity"] is None
