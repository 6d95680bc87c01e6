"""Grading rules the runner enforces, each proven by a hostile agent through the real runner.

Every test here is named in ``tests/defences.toml`` beside the smallest edit of the source that
removes the defence it proves, and fails under that edit (``make test-defences`` checks it).
Each agent would pass its task if the defence were gone: the cheat is real, only the defence
stops it.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from conftest import LOCK_TIME, make_contract, needs_bwrap
from sealbench.contract import lock_contract, new_contract
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec
from sealbench.importers import import_pack
from sealbench.importers.oracle import JUNIT_FILE
from sealbench.journal import read_chain
from sealbench.pack import load_pack
from sealbench.runner import RunOptions, execute

TASK = "t_11_fix_off_by_one"
HIDDEN = "test_oracle_window.py"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"

pytestmark = needs_bwrap


def run_contract(contract_file: Path, run_dir: Path, sandbox: str = "auto") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run a locked contract; (journal events, the single task's scorecard)."""
    execute(contract_file, run_dir, RunOptions(progress=False, sandbox=sandbox))
    events = read_chain(run_dir / "journal.jsonl").events
    cards = [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]
    assert len(cards) == 1
    return events, cards[0]


def graded(events: list[dict[str, Any]]) -> dict[str, Any]:
    found = [e["payload"] for e in events if e["kind"] == "graded"]
    assert len(found) == 1, [e["kind"] for e in events]
    return found[0]


def sh(script: str) -> str:
    return "sh -c " + shlex.quote(script)


def write_two_fer_track(root: Path) -> Path:
    """A one-exercise Exercism-style Python track, graded by pytest with a JUnit report."""
    exercise = root / "track" / "exercises" / "practice" / "two-fer"
    files = {
        ".docs/instructions.md": "# Two-fer\n\nReturn `One for X, one for me.`; X defaults to `you`.\n",
        ".meta/config.json": json.dumps({"files": {"solution": ["two_fer.py"], "test": ["two_fer_test.py"],
                                                   "example": [".meta/example.py"]}}),
        ".meta/example.py": "def two_fer(name='you'):\n    return f'One for {name}, one for me.'\n",
        "two_fer.py": "def two_fer(name):\n    pass\n",
        "two_fer_test.py": (
            "import unittest\n\nfrom two_fer import two_fer\n\n\n"
            "class TwoFerTest(unittest.TestCase):\n"
            "    def test_no_name_given(self):\n        self.assertEqual(two_fer(), 'One for you, one for me.')\n\n"
            "    def test_a_name_given(self):\n        self.assertEqual(two_fer('Alice'), 'One for Alice, one for me.')\n"
        ),
    }
    for rel, text in files.items():
        (exercise / rel).parent.mkdir(parents=True, exist_ok=True)
        (exercise / rel).write_text(text)
    return root / "track"


def test_exploit_planted_junit_report_with_early_exit_is_not_a_pass(tmp_path: Path) -> None:
    """The candidate ends pytest with exit 0 before it reports, and a report with every required
    test passing waits in the workspace, at the path the oracle writes to."""
    pack = import_pack("exercism", write_two_fer_track(tmp_path), tmp_path / "pack")
    required = pack.tasks["two-fer"].record.required_tests
    assert required
    cases = "".join(f'<testcase classname="{r.split("::")[0]}" name="{r.split("::")[1]}"/>' for r in required)
    report = f'<testsuite tests="{len(required)}">{cases}</testsuite>'
    agent = sh(f"printf '%s' {shlex.quote(report)} > {JUNIT_FILE}; printf 'import os\\nos._exit(0)\\n' > two_fer.py")
    contract = tmp_path / "contract.json"
    make_contract(pack.root, contract, task_ids=("two-fer",), command=agent, max_attempts=1)
    events, card = run_contract(contract, tmp_path / "run")
    grade = graded(events)
    assert grade["oracle"]["exit_code"] == 0, "the early exit fooled the exit status"
    assert grade["junit"]["why"] == "no JUnit report written"
    assert grade["patch_applies_clean"] and grade["no_forbidden_path"]
    assert card["outcome"] == "fail"


def test_hidden_tests_rewritten_during_the_run_are_never_graded_against(sealed_pack: Path, tmp_path: Path) -> None:
    """An agent run without a sandbox weakens the pack's hidden test, then changes a line: the
    digest checked at grading time refuses to grade against the rewritten test."""
    hidden = sealed_pack / "tasks" / TASK / "hidden" / HIDDEN
    agent = sh(f"printf 'def test_anything():\\n    pass\\n' > {shlex.quote(str(hidden))}; echo '# done' >> window.py")
    contract = tmp_path / "contract.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=agent, max_attempts=1)
    events, card = run_contract(contract, tmp_path / "run", sandbox="none")
    assert "test_anything" in hidden.read_text()  # the cheat did reach the pack
    errors = [e["payload"]["error"] for e in events if e["kind"] == "harness_error"]
    assert errors == [f"HarnessError: {TASK}: hidden tests no longer match hidden_tests_sha256"]
    assert card["outcome"] == "harness_error" and card["passed"] is False


def test_change_to_a_hidden_test_path_fails_even_when_the_contract_lists_no_pattern_for_it(
        sealed_pack: Path, tmp_path: Path) -> None:
    """A contract written without the hidden tests among its forbidden paths: the correct fix
    plus an edit of the hidden test's path still fails, on that path alone."""
    pack = load_pack(sealed_pack)
    contract_file = tmp_path / "contract.json"
    agent = sh(f"printf {shlex.quote(FIX)} > window.py; echo 'def test_ok(): pass' > {HIDDEN}")
    contract, _ = new_contract(pack, contract_file, (TASK,), host="test machine", max_attempts=1,
                               agent=AgentSpec(label="hostile", command=agent), oracle_validity="unavailable")
    contract = contract.model_copy(update={"forbidden_paths": ["conftest.py"]})
    write_atomic(contract_file, model_json(lock_contract(contract, "no-pattern", LOCK_TIME, pack)))
    events, card = run_contract(contract_file, tmp_path / "run")
    grade = graded(events)
    assert grade["forbidden"] == [HIDDEN] and grade["no_forbidden_path"] is False
    assert card["outcome"] == "fail"


def test_exploit_fix_kept_in_a_git_ignored_file_does_not_pass(sealed_pack: Path, tmp_path: Path) -> None:
    """The fix lives in a file the agent's own .gitignore leaves out of its patch: it is in the
    agent's directory but not in the patch, and only the patch is graded, in a pristine copy."""
    agent = sh(f"echo fix_impl.py > .gitignore; printf {shlex.quote(FIX)} > fix_impl.py; "
               "echo 'from fix_impl import last_n' > window.py")
    contract = tmp_path / "contract.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=agent, max_attempts=1)
    events, card = run_contract(contract, tmp_path / "run")
    patch = (tmp_path / "run" / "patches" / f"{TASK}.patch").read_text()
    assert "+from fix_impl import last_n" in patch and "items[-n:]" not in patch
    grade = graded(events)
    assert grade["patch_applies_clean"] and grade["no_forbidden_path"] and grade["tests_green"] is False
    assert card["outcome"] == "fail"
