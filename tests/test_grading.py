"""Grading rules the runner enforces, each proven by a hostile agent through the real runner.

Every test here is named in ``tests/defences.toml`` beside the smallest edit of the source that
removes the defence it proves, and fails under that edit (``make test-defences`` checks it).
Each agent would pass its task if the defence were gone: the cheat is real, only the defence
stops it.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import LOCK_TIME, make_contract, needs_bwrap, publishes
from sealbench.contract import lock_contract, new_contract
from sealbench.errors import HarnessError
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec
from sealbench.importers import import_pack
from sealbench.importers.oracle import JUNIT_FILE
from sealbench.journal import read_chain
from sealbench.pack import load_pack, seal_pack
from sealbench.runner import RunOptions, execute
from sealbench.workspace import overlay

TASK = "t_11_fix_off_by_one"
HIDDEN = "test_oracle_window.py"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"

def run_contract(contract_file: Path, run_dir: Path, sandbox: str = "auto") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run a locked contract; (journal events, the single task's scorecard)."""
    options = RunOptions(progress=False, sandbox=sandbox)
    execute(contract_file, run_dir, options)
    events = read_chain(run_dir / "journal.jsonl").events
    cards = [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]
    assert len(cards) == 1
    if not any(e["kind"] == "harness_error" for e in events):
        publishes(contract_file, run_dir, run_dir.parent / f"{run_dir.name}-bundles", options)
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


@needs_bwrap
def test_exploit_planted_junit_report_with_early_exit_is_not_a_pass(tmp_path: Path) -> None:
    """The candidate ends pytest with exit 0 before it reports, and a report with every required
    test passing waits in the workspace, at the path the oracle writes to."""
    pack = import_pack("exercism", write_two_fer_track(tmp_path), tmp_path / "pack")
    required = pack.tasks["two-fer"].record.required_tests
    assert required
    # The defence is for packs sealed with a plain pytest oracle that writes its report in the
    # grading copy (the harness's own pytest writes it outside): reseal the task in that form.
    task_file = pack.root / "tasks" / "two-fer" / "task.json"
    record = json.loads(task_file.read_text())
    record["oracle_cmd"] = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", ".", f"--junitxml={JUNIT_FILE}",
                            *record["oracle_cmd"][1:]]
    record["junit_xml"] = JUNIT_FILE
    task_file.write_text(json.dumps(record))
    seal_pack(pack.root)
    pack = load_pack(pack.root)
    cases = "".join(f'<testcase classname="{r.split("::")[0]}" name="{r.split("::")[1]}"/>' for r in required)
    report = f'<testsuite tests="{len(required)}">{cases}</testsuite>'
    agent = sh(f"printf '%s' {shlex.quote(report)} > {JUNIT_FILE}; printf 'import os\\nos._exit(0)\\n' > two_fer.py")
    contract = tmp_path / "contract.json"
    make_contract(pack.root, contract, task_ids=("two-fer",), command=agent, max_attempts=1)
    events, card = run_contract(contract, tmp_path / "run")
    grade = graded(events)
    assert grade["oracle"]["exit_code"] == 0, "the early exit fooled the exit status"
    assert grade["junit"]["why"].startswith("no JUnit report written")
    assert grade["patch_applies_clean"] and grade["no_forbidden_path"]
    assert card["outcome"] == "fail"


@needs_bwrap
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


@needs_bwrap
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


@needs_bwrap
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


def write_slow_oracle_pack(root: Path, *, oracle_sleep_s: float, wall_clock_s: float) -> Path:
    """A one-task pack whose oracle takes ``oracle_sleep_s`` before it checks the answer."""
    task = root / "tasks" / "slow"
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "t.txt").write_text("{task_prompt}\n")
    (root / "pack.json").write_text(json.dumps({"pack_version": 1, "name": "slow"}))
    (task / "workspace").mkdir(parents=True)
    (task / "hidden").mkdir()
    (task / "workspace" / "mod.py").write_text("VALUE = 0\n")
    (task / "hidden" / "check_slowly.py").write_text(
        f"import time\n\nimport mod\n\ntime.sleep({oracle_sleep_s})\nassert mod.VALUE == 1\n")
    (task / "prompt.md").write_text("Make VALUE in mod.py equal to 1.\n")
    (task / "task.json").write_text(json.dumps({
        "task_id": "slow", "prompt_template_id": "t", "oracle_cmd": ["python", "check_slowly.py"],
        "hidden_tests_sha256": "pending-local-hash", "max_attempts": 1, "wall_clock_s": wall_clock_s,
        "language": "python"}))
    seal_pack(root)
    return root


@needs_bwrap
def test_slow_oracle_is_stopped_at_the_task_cap_not_given_a_cap_of_its_own(tmp_path: Path) -> None:
    """The agent answers right after 1.5 s of a 4 s cap; the oracle needs 3 s: the task times
    out at its cap, where an oracle given a full cap of its own would have passed it."""
    pack = write_slow_oracle_pack(tmp_path / "pack", oracle_sleep_s=3.0, wall_clock_s=4.0)
    contract = tmp_path / "contract.json"
    make_contract(pack, contract, task_ids=("slow",), command=sh("sleep 1.5; echo 'VALUE = 1' > mod.py"))
    events, card = run_contract(contract, tmp_path / "run")
    grade = graded(events)
    assert grade["oracle_timed_out"] is True and grade["tests_green"] is False
    assert card["outcome"] == "timeout"
    assert card["elapsed_ms"] < 4000 + 1000


# --- the overlay of the hidden tests, behind the forbidden-path check -----------------------
# A change at a hidden test's path is forbidden, so a graded copy never holds one; the overlay
# still never writes through a link, in case a path slips past that first check.


def hidden_tree(tmp_path: Path) -> Path:
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "test_a.py").write_text("REAL A\n")
    (hidden / "tests" / "test_b.py").write_text("REAL B\n")
    return hidden


def test_overlay_replaces_a_link_at_a_hidden_test_path_and_never_writes_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    grade = tmp_path / "grade"
    grade.mkdir()
    (grade / "test_a.py").symlink_to(victim)
    overlay(hidden_tree(tmp_path), grade)
    assert victim.read_text() == "original"
    assert not (grade / "test_a.py").is_symlink() and (grade / "test_a.py").read_text() == "REAL A\n"


def test_overlay_refuses_a_linked_directory_on_the_way_to_a_hidden_test(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    grade = tmp_path / "grade"
    grade.mkdir()
    (grade / "tests").symlink_to(outside)
    with pytest.raises(HarnessError, match="refusing to overlay hidden tests through"):
        overlay(hidden_tree(tmp_path), grade)
    assert list(outside.iterdir()) == []


# --- the oracle set up ahead, while the patch is captured --------------------------------------


def write_marking_oracle_pack(root: Path) -> Path:
    """A one-task pack whose oracle leaves ``oracle_ran`` in its grading copy before it checks."""
    pack = write_slow_oracle_pack(root, oracle_sleep_s=0, wall_clock_s=20)
    task = json.loads((pack / "tasks" / "slow" / "task.json").read_text())
    task["oracle_cmd"] = ["sh", "-c", "touch oracle_ran && python check_slowly.py"]
    (pack / "tasks" / "slow" / "task.json").write_text(json.dumps(task))
    seal_pack(pack)
    return pack


@needs_bwrap
def test_exploit_an_oracle_set_up_ahead_never_runs_for_a_forbidden_change(tmp_path: Path) -> None:
    """The agent fixes the task and rewrites the hidden test's path too. The oracle was set up,
    held at its gate, as soon as the attempt had changed something; the forbidden change fails
    the attempt, and the held oracle is killed without ever running: the grading copy (kept
    with keep_work) holds no mark of it."""
    pack = write_marking_oracle_pack(tmp_path / "pack")
    contract = tmp_path / "contract.json"
    make_contract(pack, contract, task_ids=("slow",),
                  command=sh("echo 'VALUE = 1' > mod.py; echo 'pass' > check_slowly.py"))
    run_dir = tmp_path / "run"
    execute(contract, run_dir, RunOptions(progress=False, keep_work=True))
    grade = graded(read_chain(run_dir / "journal.jsonl").events)
    assert grade["forbidden"] == ["check_slowly.py"] and "oracle" not in grade
    grade_dir = run_dir / "work" / "slow" / "grade-1"
    assert (grade_dir / "mod.py").read_text() == "VALUE = 1\n"  # the grading copy, patched
    assert not (grade_dir / "oracle_ran").exists()


@needs_bwrap
def test_an_oracle_set_up_ahead_outlives_the_thread_that_asked_for_it(tmp_path: Path) -> None:
    """bubblewrap dies with the thread that spawned it (a parent-death signal, sent when that
    thread ends, a race with its own set-up): an oracle set up ahead is spawned by a thread
    that is still alive when it runs, whichever thread asked for it, and its result is its own."""
    from sealbench.grading import OracleAhead
    from sealbench.sandbox import Limits, SandboxSpec, open_sandbox

    real = open_sandbox("bubblewrap")
    spawners: list[threading.Thread] = []

    class Recording:
        """The real sandbox, noting which thread spawns each command."""

        kind = real.kind

        def prepare(self, spec: SandboxSpec) -> Any:
            spawners.append(threading.current_thread())
            return real.prepare(spec)

    work = tmp_path / "grade"
    work.mkdir()
    spec = SandboxSpec(argv=("sh", "-c", "exit 7"), workdir=work, env={"PATH": "/usr/bin:/bin"}, timeout_s=10,
                       stdout_path=None, stderr_path=None, limits=Limits(processes=16))
    box: dict[str, OracleAhead] = {}
    asker = threading.Thread(target=lambda: box.update(ahead=OracleAhead(Recording(), spec)))  # type: ignore[arg-type]
    asker.start()
    asker.join()
    time.sleep(0.1)
    prepared = box["ahead"].take()
    assert prepared is not None and len(spawners) == 1
    try:
        assert spawners[0] is not asker and spawners[0].is_alive()
        assert prepared.start(10).exit_code == 7
        assert spawners[0].is_alive()
    finally:
        prepared.close()
        box["ahead"].close()


@needs_bwrap
def test_an_oracle_not_set_up_ahead_in_time_is_set_up_by_grading_itself(sealed_pack: Path, tmp_path: Path) -> None:
    """Every thread that sets oracles up ahead is busy: the attempt's grading does not wait for
    one, it sets its oracle up itself, and the correct fix passes."""
    from sealbench import grading

    release = threading.Event()
    blockers = [grading._ahead().submit(release.wait, 30) for _ in range(grading._AHEAD_WORKERS)]
    try:
        contract = tmp_path / "contract.json"
        make_contract(sealed_pack, contract, task_ids=(TASK,), command=sh(f"printf {shlex.quote(FIX)} > window.py"),
                      max_attempts=1)
        events, card = run_contract(contract, tmp_path / "run")
        assert not any(b.done() for b in blockers)  # the run graded while they were all busy
    finally:
        release.set()
    grade = graded(events)
    assert grade["tests_green"] is True and grade["oracle"]["exit_code"] == 0
    assert card["outcome"] == "pass"
