"""Mining fresh tasks from a git history, and the contract's claim that they are fresh.

A small repository built here has one commit per drop reason and one kept fix; the click
history beside this project (slow) must yield at least three valid tasks.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_matrix
from conftest import SHARED_DATA, make_contract, needs_bwrap
from sealbench import freshness
from sealbench.bundle import make_bundle, verify_bundle
from sealbench.cli import main
from sealbench.errors import ContractError, VerificationFailed
from sealbench.formats import FreshAfter, ScoringContract
from sealbench.mine import (
    FLAKY,
    NO_ENVIRONMENT,
    NO_FAILING_TEST,
    NO_STATEMENT,
    NO_TESTS,
    MineOptions,
    MineReport,
    is_test_path,
    mine,
    split_tests,
    statement,
)
from sealbench.pack import load_pack
from sealbench.runner import RunOptions, execute

SINCE = "2026-07-01"
CLICK_BUNDLE = SHARED_DATA / "repos" / "click.bundle"

BUGGY = "def add(a, b):\n    return a - b\n"
TESTS = "from calc import add\n\n\ndef test_add_zero():\n    assert add(1, 0) == 1\n"


@pytest.fixture(scope="module")
def env_cache() -> Iterator[Path]:
    old = pytest_matrix.use_cache()
    yield pytest_matrix.CACHE
    pytest_matrix.restore(old)


def _commit(repo: Path, message: str, when: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when, "GIT_AUTHOR_NAME": "a",
           "GIT_AUTHOR_EMAIL": "a@example.org", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@example.org"}
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", message], cwd=repo, check=True, env=env)


def build_history(repo: Path) -> None:
    """One commit before the cutoff, then one candidate per reason (in this order)."""
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    _commit(repo, "Start the calculator", "2026-06-01T10:00:00+00:00", {
        "src/calc/__init__.py": BUGGY, "src/calc/_util.py": "UNIT = 1\n", "tests/test_calc.py": TESTS,
        "requirements/tests.txt": "pytest\n",
        "issues/7.md": "Adding two numbers gives their difference: add(2, 3) returns -1.\n"})
    _commit(repo, "Rename the helper constant for clarity", "2026-07-02T10:00:00+00:00",
            {"src/calc/_util.py": "ONE = 1\n"})
    _commit(repo, "wip", "2026-07-03T10:00:00+00:00", {
        "src/calc/_util.py": "ONE = 1\nTWO = 2\n",
        "tests/test_util.py": "from calc._util import TWO\n\n\ndef test_two():\n    assert TWO == 2\n"})
    _commit(repo, "Make add() add its operands (#7)", "2026-07-04T10:00:00+00:00", {
        "src/calc/__init__.py": "def add(a, b):\n    return a + b\n",
        "tests/test_calc.py": TESTS + "\n\ndef test_add_two_numbers():\n    assert add(2, 3) == 5\n"})
    _commit(repo, "Document add() in its docstring and test adding zero to zero", "2026-07-05T10:00:00+00:00", {
        "src/calc/__init__.py": 'def add(a, b):\n    """The sum."""\n    return a + b\n',
        "tests/test_zero.py": "from calc import add\n\n\ndef test_zero_and_zero():\n    assert add(0, 0) == 0\n"})
    # Its test passes or fails by where it runs: the miner runs every repeat in its own copy.
    _commit(repo, "Add double() for doubling a number", "2026-07-06T10:00:00+00:00", {
        "src/calc/double.py": "def double(x):\n    return 2 * x\n",
        "tests/test_double.py": "import os\n\n\ndef test_double():\n    from calc.double import double\n"
                                "    assert double(2) == 4\n    assert not os.getcwd().endswith('-1')\n"})
    _commit(repo, "Lock the project with uv", "2026-07-07T10:00:00+00:00", {
        "pyproject.toml": "[project]\nname = 'calc'\nversion = '0'\n", "uv.lock": "not a lock file\n"})
    _commit(repo, "Make the helper constant three for the triple helper", "2026-07-08T10:00:00+00:00", {
        "src/calc/_util.py": "ONE = 1\nTWO = 2\nTHREE = 3\n",
        "tests/test_util.py": "from calc._util import THREE\n\n\ndef test_three():\n    assert THREE == 3\n"})


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory, env_cache: Path) -> tuple[MineReport, Path]:
    root = tmp_path_factory.mktemp("mine")
    build_history(root / "calc")
    report = mine(root / "calc", root / "pack", MineOptions(since=SINCE, repeat=2, repository="example/calc"))
    return report, root / "pack"


# --- the pure core ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "is_test"), [
    ("tests/test_a.py", True), ("src/pkg/tests/helpers.py", True), ("test_a.py", True), ("pkg/a_test.py", True),
    ("conftest.py", True), ("tests/data/input.txt", True), ("src/pkg/core.py", False), ("src/testing_tools.py", False),
    ("docs/test_plan.md", False),
])
def test_a_path_is_a_test_by_its_directory_or_its_name(path: str, is_test: bool) -> None:
    assert is_test_path(path) is is_test


@pytest.mark.parametrize(("message", "issues", "expected"), [
    ("wip", {}, None),
    ("Fix it\n\nSigned-off-by: a <a@b>", {}, None),
    ("Merge pull request #3 from a/b\n\nMake add() add its operands", {}, "Make add() add its operands\n"),
    ("Fix #7", {"7": "add(2, 3) returns -1 instead of 5"}, "Fix #7\n\nIssue #7:\n\nadd(2, 3) returns -1 instead of 5\n"),
    ("Make add() add its operands\n\nCo-authored-by: b <b@c>\n", {}, "Make add() add its operands\n"),
])
def test_the_statement_is_the_message_and_linked_issues_never_invented(message: str, issues: dict[str, str],
                                                                        expected: str | None) -> None:
    assert statement(message, issues) == expected


def test_a_test_that_flips_between_repeats_is_dropped_and_named() -> None:
    before = [{"t::a": "failed", "t::b": "passed", "t::c": "failed"}, {"t::a": "failed", "t::b": "passed", "t::c": "passed"}]
    after = [{"t::a": "passed", "t::b": "passed", "t::c": "passed"}, {"t::a": "passed", "t::b": "passed", "t::c": "passed"}]
    split = split_tests(before, after)
    assert (split.fail_to_pass, split.pass_to_pass, split.flaky) == (["t::a"], ["t::b"], ["t::c"])
    assert split.flaky_would_decide


def test_a_test_missing_before_the_fix_and_passing_after_fails_to_pass() -> None:
    split = split_tests([{"tests.test_x": "failed"}], [{"tests.test_x::test_y": "passed"}])
    assert split.fail_to_pass == ["tests.test_x::test_y"] and not split.flaky


def _contract(dates: dict[str, str], cutoff: str = SINCE) -> ScoringContract:
    return ScoringContract(task_ids=list(dates), fresh_after=FreshAfter(date=cutoff, tasks=dates))


@pytest.mark.parametrize(("dates", "journaled", "problem"), [
    ({"t1": "2026-07-04T10:00:00+00:00"}, {"t1": "2026-07-04T10:00:00+00:00"}, None),
    ({"t1": "2026-06-30T23:59:59+00:00"}, {"t1": "2026-06-30T23:59:59+00:00"}, "t1: committed 2026-06-30T23:59:59"),
    ({"t1": "2026-07-04T10:00:00+00:00"}, {"t1": "2026-07-05T10:00:00+00:00"}, "t1: its task record said"),
    ({"t1": "2026-07-04T10:00:00+00:00"}, {"t1": None}, "t1: its task record said committed_at None"),
], ids=["fresh", "older-than-the-cutoff", "journal-differs", "journal-undated"])
def test_verify_checks_each_task_date_against_the_cutoff_and_the_journal(dates: dict[str, str],
                                                                          journaled: dict[str, str | None],
                                                                          problem: str | None) -> None:
    found = freshness.problems(_contract(dates), journaled, list(journaled))
    assert (found == []) if problem is None else any(p.startswith(problem) for p in found), found


def test_a_journal_date_under_a_contract_that_claims_nothing_is_a_contradiction() -> None:
    found = freshness.problems(ScoringContract(task_ids=["t1"]), {"t1": "2026-07-04T10:00:00+00:00"}, ["t1"])
    assert found and "claims no fresh tasks" in found[0]


def test_a_contract_without_the_claim_keeps_its_bytes() -> None:
    assert "fresh_after" not in ScoringContract(task_ids=["t1"]).model_dump_json()


# --- the small repository -------------------------------------------------------------------------


@needs_bwrap
def test_every_drop_reason_and_a_kept_task(mined: tuple[MineReport, Path]) -> None:
    report, _ = mined
    told = [(o.subject, "kept" if o.kept else o.reason) for o in report.outcomes]
    assert told == [
        ("Rename the helper constant for clarity", NO_TESTS),
        ("wip", NO_STATEMENT),
        ("Make add() add its operands (#7)", "kept"),
        ("Document add() in its docstring and test adding zero to zero", NO_FAILING_TEST),
        ("Add double() for doubling a number", FLAKY),
        ("Make the helper constant three for the triple helper", NO_ENVIRONMENT),
    ], report.table()
    flaky = next(o for o in report.outcomes if o.reason == FLAKY)
    assert flaky.flaky == ("tests.test_double::test_double",)
    assert report.dropped_by_reason() == {NO_TESTS: 1, NO_ENVIRONMENT: 1, NO_FAILING_TEST: 1, FLAKY: 1,
                                          NO_STATEMENT: 1}
    assert json.loads(json.dumps(report.to_json()))["kept"] == 1
    assert "6 candidates, 1 kept, 5 dropped" in report.table()


@needs_bwrap
def test_the_kept_task_is_validated_and_carries_its_commit(mined: tuple[MineReport, Path]) -> None:
    report, pack_dir = mined
    pack = load_pack(pack_dir)
    (task,) = pack.tasks.values()
    assert pack.manifest.validity is not None and pack.manifest.validity.tasks[task.task_id].valid
    prov = task.record.provenance
    assert prov is not None and prov.repository == "example/calc" and prov.commit == report.kept[0].commit
    assert prov.author_date == prov.committer_date == "2026-07-04T10:00:00+00:00"
    assert task.record.required_tests == ["tests.test_calc::test_add_two_numbers", "tests.test_calc::test_add_zero"]
    prompt = task.prompt
    assert "Make add() add its operands" in prompt and "add(2, 3) returns -1" in prompt
    # The test patch is withheld: the workspace holds the tests as they were before the fix.
    assert "test_add_two_numbers" not in (task.pack_workspace / "tests" / "test_calc.py").read_text()


@needs_bwrap
def test_a_fresh_contract_refuses_an_older_task_by_name(mined: tuple[MineReport, Path], tmp_path: Path) -> None:
    report, pack_dir = mined
    with pytest.raises(ContractError, match=rf"{report.kept[0].task_id} \(2026-07-04"):
        make_contract(pack_dir, tmp_path / "c.json", fresh_after="2026-07-04T12:00:00Z")
    contract = make_contract(pack_dir, tmp_path / "c.json", fresh_after=SINCE, run_id=None)
    assert contract.fresh_after is not None and freshness.statement(contract) == f"all 1 task committed after {SINCE}"


@needs_bwrap
def test_a_fresh_run_states_its_date_and_verify_catches_a_changed_task_date(
        mined: tuple[MineReport, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, pack_dir = mined
    contract = tmp_path / "c.json"
    make_contract(pack_dir, contract, fresh_after=SINCE, run_id="fresh-1", narration_probe=False)
    execute(contract, tmp_path / "run", RunOptions(progress=False))
    bundle = make_bundle(tmp_path / "run", tmp_path / "bundles")
    verify_bundle(bundle)
    assert main(["score", str(contract), str(tmp_path / "run")]) == 0
    assert f"all 1 task committed after {SINCE}" in capsys.readouterr().out
    assert main(["report", str(bundle), "--out", str(tmp_path / "report")]) == 0
    assert f"all 1 task committed after {SINCE}" in (tmp_path / "report" / "report.md").read_text()
    journal = bundle / "journal.jsonl"
    journal.write_text(re.sub(r'"committed_at":"[^"]+"', '"committed_at":"2026-06-01T00:00:00+00:00"',
                              journal.read_text()))
    with pytest.raises(VerificationFailed) as caught:
        verify_bundle(bundle)
    assert any("its task record said committed_at 2026-06-01" in p for p in caught.value.problems)


# --- click: the real history (slow) ----------------------------------------------------------------


def _sh_blocks(doc: Path) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", doc.read_text(), flags=re.S)


@pytest.mark.slow
@needs_bwrap
@pytest.mark.skipif(not CLICK_BUNDLE.is_file(), reason="the click history is not on this machine")
def test_click_history_yields_valid_tasks_the_reference_passes_and_noop_fails(tmp_path: Path,
                                                                                env_cache: Path) -> None:
    """The tutorial's commands, as a user runs them, on the click history."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "tutorials" / "fresh-tasks.md"
    shutil.copy(CLICK_BUNDLE, tmp_path / "click.bundle")
    sealbench = str(Path(sys.executable).parent / "sealbench")
    said = ""
    for block in _sh_blocks(doc):
        script = block.replace("sealbench ", f"{shlex.quote(sealbench)} ")
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 0, f"{block}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        said += proc.stdout
    report = json.loads((tmp_path / "mined.json").read_text())
    assert report["kept"] >= 3, report
    claim = f"all {report['kept']} tasks committed after 2026-07-09"
    # contract new twice, run twice, score, and compare
    assert said.count(claim) >= 6, said[-3000:]
    assert claim in (tmp_path / "click-reference-report" / "report.md").read_text()
    assert all(o["kept"] or o["reason"] for o in report["outcomes"])
    reference = [json.loads(line) for line in (tmp_path / "runs" / "click-reference" / "scorecards.jsonl")
                 .read_text().splitlines()]
    noop = [json.loads(line) for line in (tmp_path / "runs" / "click-noop" / "scorecards.jsonl")
            .read_text().splitlines()]
    assert len(reference) == report["kept"] and all(c["outcome"] == "pass" for c in reference)
    assert len(noop) == report["kept"] and not any(c["outcome"] == "pass" for c in noop)
