"""Paired comparisons: discordant counts, the exact McNemar test, Holm, and an honest tie.

Real bundles (reference, noop and a shell agent over the five sample tasks) show that five
tasks cannot separate even a perfect agent from one that does nothing; pure tests cover the
math and every refusal of an unpaired design.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from chromium import CHROMIUM, load_page
from conftest import SAMPLE, make_contract, needs_bwrap
from sealbench.bundle import make_bundle, verify_bundle
from sealbench.compare import (
    TIE,
    Side,
    check_comparable,
    compare,
    compare_sides,
    decide,
    discordant_needed,
    incomparable,
    judge,
    paired_results,
)
from sealbench.errors import ScoreRefusal, UsageError
from sealbench.formats import Metrics, ScoringContract, TieRule
from sealbench.pack import seal_pack
from sealbench.runner import RunOptions, execute
from sealbench.signing import keygen
from sealbench.stats import mcnemar_exact

needs_runs = needs_bwrap
REPO = Path(__file__).resolve().parents[1]
ALL = ("csv-split-001", "t_03_rename_helper", "t_11_fix_off_by_one", "t_18_add_missing_test",
       "t_22_reject_network_call")


class Bundles:
    """Bundles of real runs over the sample pack, each made the first time a test asks for it
    (a test that needs two does not wait for five)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.pack = work / "pack"
        shutil.copytree(SAMPLE, self.pack)
        seal_pack(self.pack)

    def _bundle(self, run_id: str, command: str, task_ids: tuple[str, ...] = ALL, sandbox: str = "auto",
                **kw: Any) -> Path:
        contract = self.work / f"{run_id}.contract.json"
        make_contract(self.pack, contract, task_ids=task_ids, command=command, run_id=run_id,
                      narration_probe=False, **kw)
        execute(contract, self.work / "runs" / run_id, RunOptions(progress=False, sandbox=sandbox))
        return make_bundle(self.work / "runs" / run_id, self.work / "bundles")

    @functools.cached_property
    def reference(self) -> Path:
        return self._bundle("cmp-reference", "builtin:reference")

    @functools.cached_property
    def noop(self) -> Path:
        return self._bundle("cmp-noop", "builtin:noop")

    @functools.cached_property
    def shell(self) -> Path:
        return self._bundle("cmp-shell", "sh -c 'echo I read the task and changed nothing'")

    @functools.cached_property
    def noop_four(self) -> Path:
        return self._bundle("cmp-noop-four", "builtin:noop", ALL[:4])

    @functools.cached_property
    def noop_three_attempts(self) -> Path:
        return self._bundle("cmp-noop-3", "builtin:noop", max_attempts=3)

    @functools.cached_property
    def noop_small_tmp(self) -> Path:
        return self._bundle("cmp-noop-tmp", "builtin:noop", sandbox_caps={"tmp_bytes": 32 << 20})

    @functools.cached_property
    def noop_default_tmp(self) -> Path:
        return self._bundle("cmp-noop-tmp-default", "builtin:noop", sandbox_caps={"tmp_bytes": 512 << 20})

    @functools.cached_property
    def shell_unsandboxed(self) -> Path:
        return self._bundle("cmp-shell-none", "sh -c 'echo I read the task and changed nothing'", sandbox="none")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    return Bundles(tmp_path_factory.mktemp("compare"))


def run_dir_of(bundle: Path) -> Path:
    return bundle.parent.parent / "runs" / bundle.name


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
    # The built-ins ran in-process and the shell agent in bubblewrap: compared only when allowed.
    report = compare([bundles.reference, bundles.noop, bundles.shell], allow_mixed_isolation=True)
    got = [(p.name_a, p.name_b, p.b, p.c, p.p_value, p.p_adjusted, p.verdict) for p in report.pairs]
    assert got == [
        ("cmp-reference", "cmp-noop", 5, 0, 0.0625, 0.1875, TIE),
        ("cmp-reference", "cmp-shell", 5, 0, 0.0625, 0.1875, TIE),
        ("cmp-noop", "cmp-shell", 0, 0, 1.0, 1.0, TIE),
    ]
    assert "Holm-adjusted across the pairs" in report.lines()[0]


@needs_runs
def test_html_page_shows_the_verdicts_the_disagreements_and_links_each_run_s_task_page(
        bundles: Bundles, tmp_path: Path, cli: Any) -> None:
    out = tmp_path / "cmp"
    code, text, _ = cli("compare", bundles.reference, bundles.noop, "--html", out)
    assert code == 0 and f"wrote {out / 'compare.html'}" in text
    page = (out / "compare.html").read_text(encoding="utf-8")
    assert "<strong>tie: no detectable difference on this slice</strong>" in page
    assert "no difference in pass rates this slice could detect with 80% power at alpha 0.05" in page
    assert "Tasks where the runs disagree (5)" in page and page.count('<tr class="discordant">') == 10
    assert "default-src 'none'" in page and "<script" not in page
    sent = tmp_path / "sent"
    shutil.copytree(out, sent)  # the folder works on its own
    hrefs = re.findall(r'href="([^"]+)"', page)
    assert len(hrefs) == 2 * 2 * len(ALL)  # both tables, both runs
    for href in hrefs:
        assert not re.match(r"^(?:[a-z]+:|/)", href) and (sent / href).is_file(), href
        task_page = (sent / href).read_text(encoding="utf-8")
        assert 'href="../../../compare.html"' in task_page
    noop_page = (sent / "runs" / "cmp-noop" / "tasks" / f"{ALL[0]}.html").read_text(encoding="utf-8")
    assert "abstain" in noop_page


@needs_runs
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (`make setup` installs it)")
def test_html_page_highlights_the_discordant_tasks_in_headless_chromium(
        bundles: Bundles, tmp_path: Path, cli: Any) -> None:
    out = tmp_path / "cmp"
    assert cli("compare", bundles.reference, bundles.noop, "--html", out)[0] == 0
    sent = tmp_path / "sent"
    shutil.copytree(out, sent)
    page = load_page(sent / "compare.html", tmp_path / "chromium", actions=(
        "Array.from(document.querySelectorAll('tr.discordant td:first-child'))"
        ".map(td => getComputedStyle(td).backgroundColor)",))
    assert page.errors == [] and page.warnings == [], page.stderr[-2000:]
    assert [u for u in page.requests if not u.startswith(("file:", "data:"))] == []
    (colours,) = page.results
    assert len(colours) == 10 and all(c not in ("rgba(0, 0, 0, 0)", "transparent") for c in colours), colours
    assert "tie: no detectable difference on this slice" in page.text
    if os.environ.get("SEALBENCH_UPDATE_SCREENSHOT") == "1":
        (REPO / "docs").mkdir(exist_ok=True)
        (REPO / "docs" / "compare-page.png").write_bytes(page.screenshot)


def test_a_tie_says_how_many_discordant_tasks_would_separate_the_runs() -> None:
    assert discordant_needed(5, 0, 0.05) == (6, 0)
    assert discordant_needed(7, 1, 0.05) == (8, 1)
    assert discordant_needed(4, 4, 0.05) is None
    assert discordant_needed(51, 49, 0.05, limit=1000) is None
    hi, lo = discordant_needed(3, 1, 0.05) or (0, 0)
    assert mcnemar_exact(hi, lo) <= 0.05 and abs(hi / (hi + lo) - 0.75) < 0.05
    assert judge(5, 0, 0.05).missing() == (
        "a split like 5 to 0 is declared a difference from about 6 discordant tasks (6 to 0); this slice has 5")
    assert "evenly" in (judge(2, 2, 0.05).missing() or "")
    assert judge(20, 2, 0.05).missing() is None  # not a tie
    assert judge(20, 2, 0.05).to_json()["discordant_needed"] is None


@needs_runs
def test_mismatched_task_ids_are_refused(bundles: Bundles) -> None:
    with pytest.raises(ScoreRefusal, match=r"^no comparison: task_ids differ .* only in cmp-reference \['t_22"):
        compare([bundles.reference, bundles.noop_four])


@needs_runs
def test_mismatched_budget_is_refused(bundles: Bundles) -> None:
    with pytest.raises(ScoreRefusal, match=r"budget policy differs .* max_attempts 2, wall_clock_s 180 and max_attempts 3"):
        compare([bundles.reference, bundles.noop_three_attempts])


@needs_runs
def test_a_budget_differing_beyond_attempts_and_time_is_refused_naming_what_differs(bundles: Bundles) -> None:
    with pytest.raises(ScoreRefusal, match=r"budget policy differs between cmp-noop and cmp-noop-tmp: "
                                           r"tmp_bytes 536870912 and 33554432 \(None: not set\)"):
        compare([bundles.noop, bundles.noop_small_tmp])
    # A size given as the default it stands for pairs with none given at all.
    assert compare([bundles.noop, bundles.noop_default_tmp]).pairs


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


@needs_runs
def test_runs_isolated_differently_are_refused_unless_allowed_and_then_carry_the_caveat(
        bundles: Bundles, cli: Any) -> None:
    with pytest.raises(ScoreRefusal, match=r"isolation differs between cmp-shell and cmp-shell-none: cmp-shell ran "
                                           r"in bubblewrap, cmp-shell-none with no sandbox"):
        compare([bundles.shell, bundles.shell_unsandboxed])
    with pytest.raises(ScoreRefusal, match=r"cmp-noop ran in-process \(the agent inside sealbench's own process"):
        compare([bundles.noop, bundles.shell])
    code, _out, err = cli("compare", bundles.shell, bundles.shell_unsandboxed)
    assert code == 3 and "--allow-mixed-isolation" in err
    code, out, err = cli("compare", bundles.shell, bundles.shell_unsandboxed, "--allow-mixed-isolation")
    assert code == 0, err
    assert ("caveat: the runs were isolated differently (cmp-shell ran in bubblewrap; cmp-shell-none ran with no "
            "sandbox)") in out
    code, out, _ = cli("compare", bundles.shell, bundles.shell_unsandboxed, "--allow-mixed-isolation", "--json")
    assert code == 0 and "isolated differently" in json.loads(out)["caveats"][0]
    assert compare([bundles.reference, bundles.noop]).caveats == (), "the same isolation needs no caveat"


@needs_runs
def test_verify_says_no_sandbox_when_there_was_none(bundles: Bundles, cli: Any) -> None:
    code, out, _ = cli("verify", bundles.shell_unsandboxed)
    assert code == 0 and "isolation: no sandbox (--sandbox none): the agent and the oracles ran unisolated" in out
    code, out, _ = cli("verify", bundles.shell)
    assert code == 0 and "isolation: bubblewrap" in out and "no sandbox" not in out


@needs_runs
def test_require_signed_refuses_unsigned_bundles_and_signatures_by_other_keys(
        bundles: Bundles, cli: Any, tmp_path: Path) -> None:
    key, pub = keygen(tmp_path / "signer")
    _, other = keygen(tmp_path / "other")
    code, _out, err = cli("compare", bundles.reference, bundles.noop, "--require-signed", "--pubkey", pub)
    assert code == 3 and f"{bundles.reference} is not signed (no SHA256SUMS.sig)" in err
    assert "internal consistency only" in err
    signed = [make_bundle(run_dir_of(b), tmp_path / "signed", sign_key=key) for b in (bundles.reference, bundles.noop)]
    code, out, err = cli("compare", *signed, "--require-signed", "--pubkey", other, "--pubkey", pub)
    assert code == 0 and "cmp-reference vs cmp-noop" in out, err
    code, _out, err = cli("compare", *signed, "--require-signed", "--pubkey", other)
    assert code == 3 and "is not a signature by any key given with --pubkey" in err
    code, _out, err = cli("compare", *signed, "--require-signed")
    assert code == 2 and "--require-signed needs the keys" in err


@needs_runs
def test_exploit_a_signature_linked_from_outside_the_bundle_is_never_read(
        bundles: Bundles, cli: Any, tmp_path: Path) -> None:
    key, pub = keygen(tmp_path / "signer")
    signed = [make_bundle(run_dir_of(b), tmp_path / "signed", sign_key=key) for b in (bundles.reference, bundles.noop)]
    outside = tmp_path / "elsewhere.sig"
    (signed[0] / "SHA256SUMS.sig").rename(outside)  # a true signature, but outside the bundle
    (signed[0] / "SHA256SUMS.sig").symlink_to(outside)
    code, _out, err = cli("compare", *signed, "--require-signed", "--pubkey", pub)
    assert code == 3 and f"{signed[0]} is not signed (no SHA256SUMS.sig)" in err and "a link" in err


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


# --- pure, without runs: one row per thing two runs must share -------------------------------

CONTRACT = ScoringContract.model_validate_json(
    (Path(__file__).parent / "fixtures" / "bundles" / "made-by-9030f5e" / "demo-reference"
     / "scoring_contract.json").read_text(encoding="utf-8"))
A = Side(run_id="a", contract=CONTRACT, passed={}, started_at="2026-12-01T02:03:00Z", isolation="bubblewrap",
         hidden_tests={t: "sha256:" + "2" * 64 for t in CONTRACT.task_ids})


def budget(**update: Any) -> Any:
    assert CONTRACT.budget is not None
    return CONTRACT.budget.model_copy(update=update)


@pytest.mark.parametrize(("b", "refusal"), [
    (replace(A, run_id="b"), None),
    (replace(A, run_id="b", passed={"csv-split-001": True}), None),
    (with_contract(replace(A, run_id="b"), task_ids=CONTRACT.task_ids[1:]),
     "task_ids differ between a and b: only in a ['csv-split-001'], only in b []"),
    (with_contract(replace(A, run_id="b"), pack=None), "pack digests differ between a and b: sha256:"),
    (replace(A, run_id="b", hidden_tests={**A.hidden_tests, "t_03_rename_helper": "sha256:" + "1" * 64}),
     "hidden-test digests differ between a and b for ['t_03_rename_helper']"),
    (with_contract(replace(A, run_id="b"), budget=budget(max_attempts=3)),
     "budget policy differs between a and b: max_attempts 2, wall_clock_s 60 and max_attempts 3, wall_clock_s 60"),
    (with_contract(replace(A, run_id="b"), budget=None), "budget policy differs between a and b: "),
    (with_contract(replace(A, run_id="b"), metrics=Metrics(timeout="wall_seconds > 10")),
     "metrics differ between a and b"),
    (with_contract(replace(A, run_id="b"), budget=budget(feedback="pass_fail")),
     "feedback policy differs between a and b: none and pass_fail"),
    (with_contract(replace(A, run_id="b"), budget=budget(tmp_bytes=1)),
     "budget policy differs between a and b: tmp_bytes 536870912 and 1 (None: not set)"),
    (with_contract(replace(A, run_id="b"), forbidden_paths=None), "forbidden paths differ between a and b"),
    (with_contract(replace(A, run_id="b"), flagged_pass="counted"),
     "flagged-pass policies differ between a and b: a flagged pass is not_counted in one and counted in the other"),
    (with_contract(replace(A, run_id="b"), tie_rule=TieRule(alpha=0.01)), "tie rules differ between a and b: "),
    (replace(A, run_id="b", isolation="none"), "isolation differs between a and b: a ran in bubblewrap, b with "
     "no sandbox"),
])
def test_two_runs_pair_only_when_they_share_the_design(b: Side, refusal: str | None) -> None:
    why = incomparable(A, b)
    assert (why is None) if refusal is None else (why is not None and why.startswith(refusal)), why
    if refusal is not None and refusal.startswith("isolation"):
        assert incomparable(A, b, allow_mixed_isolation=True) is None
