"""Oracle validity: the reference must pass, the empty change must fail, every time."""

from __future__ import annotations

import gzip
import json
import math
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import needs_bwrap
from sealbench.contract import GRADING_HEADROOM, headroom_warnings, lock_contract, new_contract
from sealbench.errors import ContractError
from sealbench.files import model_json
from sealbench.formats import AgentSpec, ValidityEvidence
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
    # The sample pack's caps (the tour's and the demo's) leave room for grading on a busy machine.
    times = {t: ev.reference_grading_s for t, ev in validity.tasks.items()}
    assert all(s is not None and s > 0 for s in times.values()), times
    short = {t: (pack.tasks[t].record.wall_clock_s, s) for t, s in times.items()
             if s is not None and pack.tasks[t].record.wall_clock_s < GRADING_HEADROOM * s}
    assert short == {}
    assert headroom_warnings(contract, pack) == []


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
    # The evidence says why the reference failed: the tests pytest named, from the first failing grade.
    why = validity.tasks[TASK].why or ""
    assert why.startswith("JUnit: ") and "failed: test_oracle_window.py::" in why, why
    assert validity.tasks["csv-split-001"].why == "JUnit: 1 failed; failed: test_oracle_csv.py::test_split"
    assert validity.tasks["t_03_rename_helper"].why is None  # the reference passed: nothing to explain
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


def weak_humaneval_source(path: Path) -> Path:
    """HumanEval-format records: three tests that check (almost) nothing, and a sound one."""

    def record(n: int, signature: str, body: str, test: str, entry: str) -> dict[str, str]:
        return {"task_id": f"Weak/{n}", "prompt": f'{signature}\n    """Task {n}: see the name."""\n',
                "entry_point": entry, "canonical_solution": body, "test": test}

    records = [
        record(0, "def total(xs):", "    return sum(xs)\n", "def check(candidate):\n    candidate([1, 2])\n", "total"),
        record(1, "def copy_of(xs):", "    return list(xs)\n",
               "def check(candidate):\n    assert candidate([1, 2]) == [1, 2]\n", "copy_of"),
        record(2, "def is_big(x: int) -> bool:", "    return x > 100\n",
               "def check(candidate):\n    assert candidate(1) == False\n    assert candidate(7) is False\n", "is_big"),
        record(3, "def add(a, b):", "    return a + b\n",
               "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 4) == 4\n", "add"),
    ]
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    return path


@needs_bwrap
def test_function_oracles_that_a_trivial_solution_passes_are_invalid(tmp_path: Path) -> None:
    from sealbench.importers import import_pack

    pack = import_pack("humaneval", weak_humaneval_source(tmp_path / "weak.jsonl.gz"), tmp_path / "weak")
    validity = validate_pack(pack.root, repeat=1, progress=False)
    reasons = {tid: ev.reason for tid, ev in validity.tasks.items()}
    assert reasons == {
        "Weak_0": "passes a trivial solution (returns None; returns its first argument; returns 0)",
        "Weak_1": "passes a trivial solution (returns its first argument)",
        "Weak_2": "passes a trivial solution (returns False)",
        "Weak_3": None,
    }
    # Every candidate was graded; the reference passed and the unchanged stub failed throughout.
    assert validity.tasks["Weak_2"].trivial_passes == {"returns None": False, "returns its first argument": False,
                                                       "returns False": True, "returns True": False}
    assert validity.tasks["Weak_3"].trivial_passes == dict.fromkeys(
        ["returns None", "returns its first argument", "returns 0"], False)
    assert all(ev.reference_passes == [True] and ev.empty_change_passes == [False] for ev in validity.tasks.values())
    contract, left_out = new_contract(load_pack(pack.root), tmp_path / "c.json", host="h",
                                      agent=AgentSpec(label="a", command="builtin:noop"))
    assert contract.task_ids == ["Weak_3"] and set(left_out) == {"Weak_0", "Weak_1", "Weak_2"}


@needs_bwrap
def test_a_repository_test_that_asserts_nothing_is_caught_by_removing_the_stub_s_raise(raw_pack: Path) -> None:
    for other in (raw_pack / "tasks").iterdir():
        if other.name != TASK:
            shutil.rmtree(other)
    task = raw_pack / "tasks" / TASK
    (task / "workspace" / "window.py").write_text(
        '"""Sliding windows over lists."""\n\n\ndef last_n(items: list[int], n: int) -> list[int]:\n'
        "    raise NotImplementedError\n")
    (task / "hidden" / "test_oracle_window.py").write_text(
        "from window import last_n\n\n\ndef test_runs():\n    last_n([1, 2, 3], 2)\n")
    seal_pack(raw_pack)
    ev = validate_pack(raw_pack, repeat=1, progress=False).tasks[TASK]
    assert (ev.valid, ev.reason) == (False, "passes a trivial solution (the stub's raise removed (returns None))")
    assert ev.reference_passes == [True] and ev.empty_change_passes == [False]


def test_a_reference_the_guard_flags_is_invalid_and_the_reason_names_the_flag(raw_pack: Path) -> None:
    """The reference's tests pass, but the guard saw its code reach what decides the verdict:
    the reason says which flag, not only that the oracle exited 0."""
    import _pytest.terminal

    solution = raw_pack / "tasks" / TASK / "solution" / "window.py"
    solution.write_text(solution.read_text() + "\nimport types\ndef _gen():\n    yield 1\n"
                        f"_gen.__code__ = _gen.__code__.replace(co_filename={_pytest.terminal.__file__!r})\n")
    seal_pack(raw_pack)
    ev = validate_pack(raw_pack, repeat=1, progress=False).tasks[TASK]
    assert (ev.valid, ev.reason) == (False, "reference fails")
    assert ev.why is not None and ev.why.startswith("the tests passed, but the guard flagged disguised_code: "), ev.why


def test_validate_exits_non_zero_when_no_task_is_valid_and_says_why(
        raw_pack: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    for tdir in (raw_pack / "tasks").iterdir():  # every reference changes nothing: every oracle fails it
        shutil.rmtree(tdir / "solution")
        shutil.copytree(tdir / "workspace", tdir / "solution")
    seal_pack(raw_pack)
    code, out, err = cli("pack", "validate", raw_pack, "--repeat", "1", "--no-progress")
    assert code == 3 and "0 of 5 task oracles valid" in out
    assert "invalid: t_11_fix_off_by_one: reference fails (JUnit: " in out
    assert "no task of" in err and "has a valid oracle" in err


def slow_reference_pack(raw_pack: Path, seconds: float) -> Path:
    """The sample pack cut to one task whose hidden tests take ``seconds`` to run, sealed."""
    for tdir in (raw_pack / "tasks").iterdir():
        if tdir.name != TASK:
            shutil.rmtree(tdir)
    hidden = raw_pack / "tasks" / TASK / "hidden" / "test_oracle_window.py"
    hidden.write_text(f"import time\n\ntime.sleep({seconds})\n" + hidden.read_text())
    seal_pack(raw_pack)
    return raw_pack


def test_validate_records_the_slowest_grading_of_the_reference(raw_pack: Path) -> None:
    pack_dir = slow_reference_pack(raw_pack, 1.5)
    validity = validate_pack(pack_dir, repeat=2, progress=False)
    ev = validity.tasks[TASK]
    assert ev.valid and ev.reference_grading_s is not None and ev.reference_grading_s >= 1.5, ev
    manifest = json.loads((pack_dir / "pack.json").read_text())
    assert manifest["validity"]["tasks"][TASK]["reference_grading_s"] == ev.reference_grading_s
    # Evidence from before the measurement keeps its bytes: the field is absent, not null.
    old = ValidityEvidence(valid=True, reference_passes=[True], empty_change_passes=[False])
    assert "reference_grading_s" not in model_json(old)


def test_contract_new_and_lock_warn_when_the_cap_leaves_little_room_for_grading(
        raw_pack: Path, tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    pack_dir = slow_reference_pack(raw_pack, 1.0)
    assert cli("pack", "validate", pack_dir, "--repeat", "1", "--no-progress")[0] == 0
    measured = load_pack(pack_dir).manifest.validity.tasks[TASK].reference_grading_s  # type: ignore[union-attr]
    assert measured is not None and measured >= 1.0
    tight = str(round(measured * 2, 1))
    new = ["contract", "new", pack_dir, "--host", "h", "--agent-label", "a", "--agent", "builtin:noop"]
    code, out, err = cli(*new, "-o", tmp_path / "tight.json", "--wall-clock-s", tight)
    warning = f"warning: {TASK}: the wall-clock cap {float(tight):g} s leaves less than 3x the reference's grading"
    assert code == 0 and warning in out and f"({measured:g} s)" in out, out + err
    assert f"a cap of {math.ceil(round(measured * 3, 6))} s would leave 3x" in out
    code, out, err = cli("contract", "lock", tmp_path / "tight.json", "--run-id", "tight")
    assert code == 0 and warning in out and "locked tight" in out, out + err
    # A cap with room: no warning from either.
    code, out, err = cli(*new, "-o", tmp_path / "roomy.json", "--wall-clock-s", str(math.ceil(measured * 3) + 1))
    assert code == 0 and "warning" not in out + err, out + err
    code, out, err = cli("contract", "lock", tmp_path / "roomy.json", "--run-id", "roomy")
    assert code == 0 and "warning" not in out + err, out + err


@pytest.mark.parametrize(("graded", "why"), [
    ({}, None),
    ({"forbidden": ["a", "b", "c", "d", "e", "f"], "patch_applies_clean": False},
     "the reference touches forbidden paths: a, b, c, d, e"),
    ({"patch_applies_clean": False, "oracle_timed_out": True}, "the reference's patch does not apply to a pristine copy"),
    ({"oracle_timed_out": True}, "the oracle ran out of time"),
    ({"oracle": {"timed_out": True}}, "the oracle ran out of time"),
    ({"patch_applies_clean": True, "oracle": {"timed_out": False}}, None),
], ids=["ran", "forbidden-first", "patch-before-clock", "grade-timed-out", "oracle-timed-out", "ran-clean"])
def test_a_reference_grade_that_never_ran_its_tests_says_why(graded: dict[str, Any], why: str | None) -> None:
    from sealbench.validate import _why_not_run

    assert _why_not_run(graded) == why


@pytest.mark.parametrize(("graded", "names", "parts"), [
    ({}, [], []),
    ({"junit": {"ok": False, "why": "no report"}}, [], ["JUnit: no report"]),
    ({"junit": {"ok": True}}, ["t::a"], ["failed: t::a"]),
    ({}, [f"t::{i}" for i in range(6)], ["failed: t::0, t::1, t::2, t::3, t::4, ..."]),
    ({"forging_flags": ["exit_hook"], "tests_green": False}, [], []),
    ({"forging_flags": ["exit_hook"], "tests_green": True}, [], ["the tests passed, but the guard flagged exit_hook"]),
    ({"forging_flags": ["a"], "forging_detail": ["1", "2", "3", "4"], "tests_green": True}, [],
     ["the tests passed, but the guard flagged 1; 2; 3"]),
], ids=["nothing", "junit-not-ok", "failed-tests", "failed-tests-cut", "flagged-red", "flagged-green",
        "flag-details"])
def test_a_failing_reference_grade_is_told_by_its_report_tests_and_flags(graded: dict[str, Any], names: list[str],
                                                                          parts: list[str]) -> None:
    from sealbench.validate import _verdicts

    assert _verdicts(graded, names) == parts
