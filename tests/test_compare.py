"""Paired comparisons: discordant counts, the exact McNemar test, Holm, and an honest tie.

Real bundles (reference, noop and a shell agent over the five sample tasks) show that five
tasks cannot separate even a perfect agent from one that does nothing; pure tests cover the
math and every refusal of an unpaired design.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLE, bwrap_available, make_contract, needs_bwrap
from sealbench.bundle import make_bundle, verify_bundle
from sealbench.compare import (
    TIE,
    Side,
    check_comparable,
    compare,
    compare_sides,
    decide,
    judge,
    paired_results,
)
from sealbench.errors import ScoreRefusal, UsageError
from sealbench.formats import Metrics, TieRule
from sealbench.pack import seal_pack
from sealbench.runner import RunOptions, execute

needs_runs = needs_bwrap
ALL = ("csv-split-001", "t_03_rename_helper", "t_11_fix_off_by_one", "t_18_add_missing_test",
       "t_22_reject_network_call")


@dataclass(frozen=True)
class Bundles:
    reference: Path
    noop: Path
    shell: Path
    noop_four: Path
    noop_three_attempts: Path


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    if not bwrap_available():
        pytest.skip("bubblewrap cannot start here (make setup installs it)")
    work = tmp_path_factory.mktemp("compare")
    pack = work / "pack"
    shutil.copytree(SAMPLE, pack)
    seal_pack(pack)

    def bundle(run_id: str, command: str, task_ids: tuple[str, ...] = ALL, **kw: Any) -> Path:
        contract = work / f"{run_id}.contract.json"
        make_contract(pack, contract, task_ids=task_ids, command=command, run_id=run_id, narration_probe=False, **kw)
        execute(contract, work / "runs" / run_id, RunOptions(progress=False))
        return make_bundle(work / "runs" / run_id, work / "bundles")

    return Bundles(
        reference=bundle("cmp-reference", "builtin:reference"),
        noop=bundle("cmp-noop", "builtin:noop"),
        shell=bundle("cmp-shell", "sh -c 'echo I read the task and changed nothing'"),
        noop_four=bundle("cmp-noop-four", "builtin:noop", ALL[:4]),
        noop_three_attempts=bundle("cmp-noop-3", "builtin:noop", max_attempts=3),
    )


# --- real bundles ------------------------------------------------------------------------


@needs_runs
def test_five_tasks_cannot_separate_reference_from_noop(bundles: Bundles) -> None:
    report = compare([bundles.reference, bundles.noop])
    (pair,) = report.pairs
    assert (pair.name_a, pair.name_b) == ("cmp-reference", "cmp-noop")
    assert (pair.b, pair.c, pair.both_pass, pair.both_fail, pair.n) == (5, 0, 0, 0, 5)
    assert pair.p_value == 0.0625 and pair.p_adjusted is None
    assert pair.verdict == TIE == "tie: no detectable difference on this slice"
    assert "cmp-reference passed 5 that cmp-noop failed" in pair.sentence()
    assert report.lines()[-1].strip() == "not a vendor ranking."


@needs_runs
def test_holm_adjusts_every_pair_of_three_bundles(bundles: Bundles) -> None:
    report = compare([bundles.reference, bundles.noop, bundles.shell])
    got = [(p.name_a, p.name_b, p.b, p.c, p.p_value, p.p_adjusted, p.verdict) for p in report.pairs]
    assert got == [
        ("cmp-reference", "cmp-noop", 5, 0, 0.0625, 0.1875, TIE),
        ("cmp-reference", "cmp-shell", 5, 0, 0.0625, 0.1875, TIE),
        ("cmp-noop", "cmp-shell", 0, 0, 1.0, 1.0, TIE),
    ]
    assert "Holm-adjusted across the pairs" in report.lines()[0]


@needs_runs
def test_mismatched_task_ids_are_refused(bundles: Bundles) -> None:
    with pytest.raises(ScoreRefusal, match=r"^no comparison: task_ids differ .* only in cmp-reference \['t_22"):
        compare([bundles.reference, bundles.noop_four])


@needs_runs
def test_mismatched_budget_is_refused(bundles: Bundles) -> None:
    with pytest.raises(ScoreRefusal, match=r"budget policy differs .* max_attempts 2, wall_clock_s 60 and max_attempts 3"):
        compare([bundles.reference, bundles.noop_three_attempts])


@needs_runs
def test_unverifiable_bundle_is_refused(bundles: Bundles, tmp_path: Path) -> None:
    tampered = Path(shutil.copytree(bundles.noop, tmp_path / "cmp-noop"))
    (tampered / "rate.json").write_text((tampered / "rate.json").read_text().replace('"n": 5', '"n": 4'))
    with pytest.raises(ScoreRefusal, match=r"does not verify \(\d+ problem\(s\); first: rate.json") as info:
        compare([bundles.reference, tampered])
    assert "\n" not in str(info.value)


@needs_runs
def test_a_run_cannot_be_paired_with_itself(bundles: Bundles) -> None:
    with pytest.raises(ScoreRefusal, match="given twice"):
        compare([bundles.reference, bundles.reference])


def test_fewer_than_two_bundles_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        compare([tmp_path])


# --- pure: the math --------------------------------------------------------------------------


def test_seven_to_one_is_a_tie_at_five_percent() -> None:
    pair = judge(7, 1, 0.05)
    assert Fraction(pair.p_value) == Fraction(9, 128)
    assert pair.verdict == TIE


def test_twenty_to_two_is_a_better() -> None:
    assert judge(20, 2, 0.05).verdict == "A better"
    assert judge(2, 20, 0.05).verdict == "B better"
    assert judge(20, 2, 0.05, names=("run-x", "run-y")).verdict == "run-x better"


def test_equal_discordance_is_always_a_tie() -> None:
    assert decide(3, 3, 0.0, 0.05) == TIE


def test_holm_can_still_find_a_difference_among_three_runs() -> None:
    tasks = [f"t{i}" for i in range(40)]
    strong = dict.fromkeys(tasks, True)
    weak = {t: i < 2 for i, t in enumerate(tasks)}
    also_weak = {t: i < 3 for i, t in enumerate(tasks)}
    pairs = paired_results(["strong", "weak", "also-weak"], [strong, weak, also_weak], tasks, TieRule())
    assert [p.verdict for p in pairs] == ["strong better", "strong better", TIE]
    assert all(p.p_adjusted is not None and p.p_adjusted >= p.p_value for p in pairs)
    assert pairs[2].p_adjusted == 1.0


# --- pure: what is not a paired design --------------------------------------------------------


@pytest.fixture
def sides(bundles: Bundles) -> tuple[Side, Side]:
    return Side.of(verify_bundle(bundles.reference)), Side.of(verify_bundle(bundles.noop))


def with_contract(side: Side, **update: Any) -> Side:
    return replace(side, contract=side.contract.model_copy(update=update))


@needs_runs
@pytest.mark.parametrize(("change", "refusal"), [
    (lambda s: with_contract(s, tie_rule=TieRule(alpha=0.01)), "tie rules differ"),
    (lambda s: with_contract(s, metrics=Metrics(timeout="wall_seconds > 10")), "metrics differ"),
    (lambda s: with_contract(s, forbidden_paths=["conftest.py"]), "forbidden paths differ"),
    (lambda s: with_contract(s, flagged_pass="counted"), "flagged-pass policies differ"),
    (lambda s: with_contract(s, budget=s.contract.budget.model_copy(update={"feedback": "pass_fail"})),
     "feedback policy differs"),
    (lambda s: with_contract(s, pack=s.contract.pack.model_copy(update={"sha256": "sha256:" + "0" * 64})),
     "pack digests differ"),
    (lambda s: replace(s, hidden_tests={**s.hidden_tests, "t_03_rename_helper": "sha256:" + "1" * 64}),
     r"hidden-test digests differ .* \['t_03_rename_helper'\]"),
    (lambda s: replace(s, started_at="2026-10-12T09:29:59.999Z"), "was locked at 2026-10-12T09:30:00Z, after its run"),
])
def test_an_unpaired_design_is_refused(sides: tuple[Side, Side], change: Any, refusal: str) -> None:
    a, b = sides
    compare_sides([a, b])
    with pytest.raises(ScoreRefusal, match=refusal):
        check_comparable([a, change(b)])
