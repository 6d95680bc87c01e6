"""The power `compare` states: the exact McNemar test's power, summed over the binomial number
of discordant tasks, checked against an independent computation with scipy (a test dependency
only) and against the definitions of the detectable difference and the tasks needed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sp  # type: ignore[import-untyped]

from sealbench.compare import TIE, UNDERPOWERED, judge, paired_results
from sealbench.formats import TieRule
from sealbench.stats import mcnemar_power, min_detectable_difference, tasks_needed


def scipy_power(n: int, discordant: float, difference: float, alpha: float) -> float:
    """The same power, computed another way: every discordant count, each critical value from
    scipy's binomial distribution, no term left out."""
    if discordant == 0:
        return 0.0
    pi = (discordant + abs(difference)) / (2 * discordant)
    total = 0.0
    for d in range(n + 1):
        smaller = np.arange((d + 1) // 2)  # the smaller count of a split that is not even
        k = int(np.count_nonzero(2 * sp.binom.cdf(smaller, d, 0.5) <= alpha)) - 1
        if k >= 0:
            total += sp.binom.pmf(d, n, discordant) * (sp.binom.cdf(k, d, pi) + sp.binom.sf(d - k - 1, d, pi))
    return float(total)


# (n tasks, discordant tasks, difference in tasks, alpha): small slices, a typical one, Holm
# levels, discordance near 0 and near 1, and a difference as large as the discordance.
CASES = [
    (10, 4, 2, 0.05), (20, 6, 4, 0.05), (30, 8, 2, 0.05), (30, 12, 12, 0.05), (40, 1, 1, 0.05),
    (50, 20, 6, 0.01), (60, 30, 10, 0.05 / 3), (75, 15, 5, 0.1), (100, 10, 0, 0.05), (120, 60, 20, 0.05),
    (150, 149, 5, 0.05), (200, 40, 12, 0.025), (250, 50, 10, 0.05 / 6),
]


@pytest.mark.parametrize(("n", "disc", "diff", "alpha"), CASES)
def test_power_agrees_with_an_independent_computation(n: int, disc: int, diff: int, alpha: float) -> None:
    ours = mcnemar_power(n, disc / n, diff / n, alpha)
    theirs = scipy_power(n, disc / n, diff / n, alpha)
    assert ours == pytest.approx(theirs, abs=1e-9)


@pytest.mark.parametrize(("n", "disc", "alpha"), [(c[0], c[1], c[3]) for c in CASES if c[0] <= 150])
def test_the_detectable_difference_is_where_the_power_reaches_80_percent(n: int, disc: int, alpha: float) -> None:
    found = min_detectable_difference(n, disc / n, alpha)
    if found is None:
        assert scipy_power(n, 1.0, 1.0, alpha) < 0.8
        return

    def power(delta: float) -> float:
        return scipy_power(n, max(disc / n, delta), delta, alpha)

    assert power(found) >= 0.8 - 1e-9
    assert power(max(0.0, found - 1e-9)) < 0.8 + 1e-9
    if found > 1e-6:
        assert power(found - 1e-6) < 0.8


def test_a_slice_of_five_cannot_detect_anything_at_alpha_005() -> None:
    # Five tasks, all discordant one way: p = 2/32 = 0.0625 > 0.05, so no split ever rejects.
    assert min_detectable_difference(5, 0.4, 0.05) is None
    assert min_detectable_difference(6, 0.4, 0.05) is not None


@pytest.mark.parametrize(("disc", "diff", "alpha"), [(0.3, 0.1, 0.05), (0.2, 0.05, 0.05), (0.5, 0.2, 0.01)])
def test_tasks_needed_is_where_the_power_crosses_80_percent(disc: float, diff: float, alpha: float) -> None:
    n = tasks_needed(disc, diff, alpha)
    assert n is not None
    assert scipy_power(n, disc, diff, alpha) >= 0.8 > scipy_power(n - 1, disc, diff, alpha)
    # Connor's normal approximation lands near the exact answer.
    z = sp.norm.ppf(1 - alpha / 2) * math.sqrt(disc) + sp.norm.ppf(0.8) * math.sqrt(disc - diff ** 2)
    assert abs(n - (z / diff) ** 2) < 0.15 * n


def test_no_difference_needs_no_number_of_tasks_and_a_tiny_one_says_beyond_the_limit() -> None:
    assert tasks_needed(0.3, 0.0, 0.05) is None
    assert tasks_needed(0.5, 0.001, 0.05) is None


def test_a_tie_says_what_the_slice_could_detect_and_what_the_observed_difference_needs() -> None:
    pair = judge(5, 3, 0.05, both_pass=22)
    assert pair.verdict == TIE
    assert ("tie: no detectable difference on this slice (alpha 0.05) - this slice could only detect a difference "
            "of 26 points or more (80% power at alpha 0.05); the observed 6.7 points would need about") in pair.sentence()
    assert pair.power is not None and pair.power.needed is not None and pair.power.needed > 400
    body = pair.to_json()["power"]
    assert body["min_detectable_difference"] == pytest.approx(0.2584, abs=5e-4)
    assert body["tasks_needed"] == pair.power.needed and body["words"] in pair.sentence()


def test_a_difference_found_says_what_the_slice_detects() -> None:
    pair = judge(10, 2, 0.05, both_pass=18)
    assert pair.verdict == "A better"
    assert "this slice detects differences of 32 points or more (80% power at alpha 0.05)" in pair.sentence()


def test_three_runs_state_the_power_at_holms_strictest_level() -> None:
    passes = [{"t1": True, "t2": True, "t3": False, "t4": True},
              {"t1": True, "t2": False, "t3": False, "t4": False},
              {"t1": False, "t2": True, "t3": True, "t4": True}]
    pairs = paired_results(["a", "b", "c"], passes, ["t1", "t2", "t3", "t4"], TieRule())
    assert all(p.power is not None and p.power.level == pytest.approx(0.05 / 3) for p in pairs)
    assert all("alpha 0.0167" in p.sentence() for p in pairs)


def test_a_locked_minimum_power_makes_a_weak_slice_underpowered_whatever_the_test_says() -> None:
    passes = [{f"t{i}": i < 12 for i in range(30)}, {f"t{i}": i < 2 for i in range(30)}]
    ids = [f"t{i}" for i in range(30)]
    (plain,) = paired_results(["a", "b"], passes, ids, TieRule())
    assert plain.verdict == "a better"
    (strict,) = paired_results(["a", "b"], passes, ids, TieRule(min_power=0.99))
    assert strict.verdict == UNDERPOWERED and "below the contract's minimum power of 99%" in strict.sentence()
    (weak,) = paired_results(["a", "b"], [passes[0], passes[0]], ids, TieRule(min_power=0.8))
    assert weak.verdict == UNDERPOWERED  # no difference observed: the slice cannot say "equal"


def test_contract_new_locks_a_minimum_power(sealed_pack: Path, tmp_path: Path, cli: Any) -> None:
    out = tmp_path / "c.json"
    code, _, err = cli("contract", "new", sealed_pack, "-o", out, "--agent", "builtin:noop", "--agent-label", "noop",
                       "--min-power", "0.8")
    assert code == 0, err
    assert json.loads(out.read_text())["tie_rule"]["min_power"] == 0.8
    code, _, err = cli("contract", "new", sealed_pack, "-o", tmp_path / "d.json", "--agent", "builtin:noop",
                       "--agent-label", "noop", "--min-power", "80")
    assert code == 2 and "--min-power must be between 0 and 1" in err
    plain = tmp_path / "e.json"
    assert cli("contract", "new", sealed_pack, "-o", plain, "--agent", "builtin:noop", "--agent-label", "noop")[0] == 0
    assert "min_power" not in plain.read_text()  # older contracts' bytes are unchanged
