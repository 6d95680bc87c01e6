"""The defence-mutation suite itself: its list fits the source, the docs list every entry,
and the runner fails, naming the entry, when a removal goes unnoticed or the list has rotted."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from defences import LIST, PAGE, ROOT, check_edits, load, splice_table

RUNNER = ROOT / "tests" / "defences.py"


def run_list(tmp_path: Path, entries: str) -> subprocess.CompletedProcess[str]:
    listing = tmp_path / "defences.toml"
    listing.write_text(textwrap.dedent(entries))
    return subprocess.run([sys.executable, str(RUNNER), "--list", str(listing), "--jobs", "2"],
                          capture_output=True, text=True, timeout=300, check=False)


def test_every_entry_fits_the_source() -> None:
    defences = load(LIST)
    assert len(defences) >= 60
    assert [p for d in defences for p in check_edits(d, ROOT)] == []


def test_the_docs_list_every_defence_and_its_tests() -> None:
    page = (ROOT / PAGE).read_text(encoding="utf-8")
    assert splice_table(page, load(LIST)) == page, f"{PAGE}'s defences table is stale: run `make docs`"


def test_an_uncovered_entry_fails_the_suite_naming_it(tmp_path: Path) -> None:
    """Three entries: one whose removal its test notices, one no test notices (a comment is
    edited), one whose edit leaves code that does not compile (an error, never a catch)."""
    proc = run_list(tmp_path, '''
        [[defence]]
        id = "score-refuses-harness-errors"
        claim = "A rate with harness errors in it is refused."
        where = "score"
        tests = ["tests/test_score.py::test_refusal[a harness error]"]
        [[defence.edit]]
        file = "src/sealbench/score.py"
        old = """
            if harness:
                raise ScoreRefusal("""
        new = """
            if False:
                raise ScoreRefusal("""

        [[defence]]
        id = "deliberately-uncovered"
        claim = "Nothing: a comment is edited."
        where = "a test of the suite"
        tests = ["tests/test_score.py::test_events_json_must_be_a_list"]
        [[defence.edit]]
        file = "src/sealbench/score.py"
        old = "Every check runs over events in task-id order"
        new = "Every check runs over events in any order"

        [[defence]]
        id = "breaks-the-source"
        claim = "Nothing: the edit is a syntax error."
        where = "a test of the suite"
        tests = ["tests/test_score.py::test_events_json_must_be_a_list"]
        [[defence.edit]]
        file = "src/sealbench/score.py"
        old = "    if harness:"
        new = "    if harness"
    ''')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "caught     score-refuses-harness-errors" in out
    assert "NOT CAUGHT deliberately-uncovered" in out
    assert "ERROR      breaks-the-source" in out and "does not compile" in out
    assert "defences: 1 of 3 removals caught" in out
    assert "defences: NOT CAUGHT: deliberately-uncovered (Nothing: a comment is edited.)" in out


def test_an_edit_whose_old_text_is_gone_fails_the_suite_naming_it(tmp_path: Path) -> None:
    proc = run_list(tmp_path, '''
        [[defence]]
        id = "rotted-entry"
        claim = "A defence whose code was refactored away from under its entry."
        where = "a test of the suite"
        tests = ["tests/test_score.py::test_no_such_test"]
        [[defence.edit]]
        file = "src/sealbench/score.py"
        old = "if the_old_name_of_the_check:"
        new = "if False:"
    ''')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "rotted-entry: old text not found in src/sealbench/score.py" in out
    assert "rotted-entry: test tests/test_score.py::test_no_such_test does not exist" in out
