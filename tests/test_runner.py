"""The runner in the real sandbox: hard caps, hidden tests, and every known exploit.

Each exploit test runs a hostile agent through ``execute`` and checks that the cheat fails
and that the journal recorded what happened.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import make_contract, needs_bwrap, publishes
from sealbench.errors import RunRefusal
from sealbench.journal import read_chain
from sealbench.runner import RunOptions, execute

TASK = "t_11_fix_off_by_one"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"


pytestmark = needs_bwrap


def run(sealed_pack: Path, tmp_path: Path, command: str, *, task_ids: tuple[str, ...] = (TASK,),
        name: str = "run", options: RunOptions | None = None, **kw: Any) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]:
    contract_file = tmp_path / f"{name}.contract.json"
    make_contract(sealed_pack, contract_file, task_ids=task_ids, command=command, run_id=name, **kw)
    run_dir = tmp_path / name
    options = options or RunOptions(progress=False)
    execute(contract_file, run_dir, options)
    events = read_chain(run_dir / "journal.jsonl").events
    cards = [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]
    if not any(e["kind"] == "harness_error" for e in events):
        publishes(contract_file, run_dir, tmp_path / f"{name}-bundles", options)
    return run_dir, events, cards


def kinds(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


def sh(script: str) -> str:
    """A command template running ``script`` with sh; braces for placeholders stay literal."""
    import shlex

    return "sh -c " + shlex.quote(script)


def py(code: str) -> str:
    import shlex

    return "python -c " + shlex.quote(code)


# --- honest agents --------------------------------------------------------------------


def test_reference_agent_passes_every_sample_task(sealed_pack: Path, tmp_path: Path) -> None:
    ids = tuple(sorted(p.name for p in (sealed_pack / "tasks").iterdir()))
    _, events, cards = run(sealed_pack, tmp_path, "builtin:reference", task_ids=ids)
    assert [c["outcome"] for c in cards] == ["pass"] * 5
    assert all(c["attempts_used"] == 1 and c["first_attempt_passed"] and c["scorecard_complete"] for c in cards)
    assert events[0]["kind"] == "run_started" and events[-1]["kind"] == "run_finished"


def test_noop_agent_abstains_and_cannot_pass(sealed_pack: Path, tmp_path: Path) -> None:
    _, _, cards = run(sealed_pack, tmp_path, "builtin:noop")
    assert cards[0]["outcome"] == "abstain" and cards[0]["passed"] is False


def test_exploit_exit_zero_without_changes_is_abstain(sealed_pack: Path, tmp_path: Path) -> None:
    _, events, cards = run(sealed_pack, tmp_path, "true")
    assert cards[0]["outcome"] == "abstain"
    assert kinds(events, "graded") == []


def two_attempt_agent() -> str:
    return sh(
        'if [ "$SEALBENCH_ATTEMPT" = 1 ]; then printf "def last_n(items, n):\\n    return items[1:]\\n" > window.py; '
        f'else printf {json.dumps(FIX)} > window.py; fi'
    )


def test_honest_agent_fixing_on_second_attempt_passes_with_two_attempts(sealed_pack: Path, tmp_path: Path) -> None:
    _, events, cards = run(sealed_pack, tmp_path, two_attempt_agent())
    assert cards[0]["outcome"] == "pass" and cards[0]["attempts_used"] == 2
    assert cards[0]["first_attempt_passed"] is False
    assert [e["payload"]["result"] for e in kinds(events, "attempt_finished")] == ["fail", "pass"]


def test_same_agent_with_max_attempts_1_fails(sealed_pack: Path, tmp_path: Path) -> None:
    _, events, cards = run(sealed_pack, tmp_path, two_attempt_agent(), max_attempts=1)
    assert cards[0]["outcome"] == "fail" and cards[0]["attempts_used"] == 1 and cards[0]["max_attempts"] == 1
    assert len(kinds(events, "attempt_started")) == 1


def test_agent_gets_placeholders_env_and_prompt(sealed_pack: Path, tmp_path: Path) -> None:
    cmd = sh('printf "%s|%s|%s|%s\\n" "{task_id}" "{attempt}" "{max_attempts}" "$SEALBENCH_SEED" > seen.txt; '
             'cp "{prompt_file}" prompt_copy.md; echo transcript > "$SEALBENCH_TRACE_DIR/t.txt"')
    run_dir, events, _ = run(sealed_pack, tmp_path, cmd, max_attempts=1)
    patch = (run_dir / "patches" / f"{TASK}.patch").read_text()
    assert f"+{TASK}|1|1|0" in patch
    assert "attempt 1 of 1" in patch and "It returns one item too few" in patch
    assert "test_oracle_window" not in patch
    assert kinds(events, "agent_finished")[0]["payload"]["transcript"] != kinds(events, "agent_finished")[0]["payload"]["prompt_sha256"]


def test_pass_fail_feedback_reaches_the_agent_and_never_hidden_output(sealed_pack: Path, tmp_path: Path) -> None:
    cmd = sh('cat "{prompt_file}" >> prompts_seen.txt; printf "def last_n(items, n):\\n    return []\\n" > window.py')
    run_dir, _, cards = run(sealed_pack, tmp_path, cmd, feedback="pass_fail")
    patch = (run_dir / "patches" / f"{TASK}.patch").read_text()
    assert "Attempt 1 did not pass the hidden tests." in patch
    assert "test_returns_exactly_n_items" not in patch and "assert" not in patch
    assert cards[0]["outcome"] == "fail" and cards[0]["attempts_used"] == 2


# --- exploits -------------------------------------------------------------------------


def test_exploit_edits_hidden_test_path(sealed_pack: Path, tmp_path: Path) -> None:
    cmd = sh(f'printf {json.dumps(FIX)} > window.py; echo "def test_ok(): pass" > test_oracle_window.py')
    _, events, cards = run(sealed_pack, tmp_path, cmd, max_attempts=1)
    graded = kinds(events, "graded")[0]["payload"]
    assert graded["forbidden"] == ["test_oracle_window.py"] and graded["task_pass"] is False
    assert cards[0]["outcome"] == "fail"


def test_exploit_conftest_skips_everything(sealed_pack: Path, tmp_path: Path) -> None:
    conftest = ("import pytest\\ndef pytest_collection_modifyitems(items):\\n"
                "    for i in items: i.add_marker(pytest.mark.skip)\\n")
    _, events, cards = run(sealed_pack, tmp_path, sh(f'printf "{conftest}" > conftest.py'), max_attempts=1)
    assert kinds(events, "graded")[0]["payload"]["forbidden"] == ["conftest.py"]
    assert cards[0]["outcome"] == "fail"


@pytest.mark.parametrize("path", ["sitecustomize.py", "usercustomize.py", "force.pth", "pkg/sitecustomize.py"])
def test_exploit_sitecustomize_or_pth_forces_exit_zero(sealed_pack: Path, tmp_path: Path, path: str) -> None:
    # The fix comes with the planted file, so that nothing but the forbidden path can fail it.
    body = "import os; os._exit(0)"
    cmd = sh(f'printf {json.dumps(FIX)} > window.py; mkdir -p "$(dirname {path})"; echo "{body}" > {path}')
    _, events, cards = run(sealed_pack, tmp_path, cmd, max_attempts=1)
    graded = kinds(events, "graded")[0]["payload"]
    assert graded["forbidden"] == [path] and graded["no_forbidden_path"] is False
    assert graded["patch_applies_clean"] is True
    assert cards[0]["outcome"] == "fail"


@pytest.mark.parametrize(("plant", "forbidden"), [
    ("printf {body} > pathlib.py", ["pathlib.py"]),
    # A link named pathlib to a package elsewhere in the patch, imported under the link's name.
    ("mkdir -p vendor/p && printf {body} > vendor/p/__init__.py && ln -s vendor/p pathlib", ["pathlib"]),
], ids=["module", "link-to-a-package"])
def test_exploit_module_named_like_the_standard_library_ends_a_script_oracle_with_exit_0(
        sealed_pack: Path, tmp_path: Path, plant: str, forbidden: list[str]) -> None:
    # t_18's oracle is `python oracle_mutants.py`, which imports pathlib; Python puts the
    # script's directory first on sys.path, so a pathlib there would end it with exit 0
    # (and "all mutants caught") while the agent wrote no test at all.
    body = 'import os, sys\nprint("all mutants caught")\nsys.stdout.flush()\nos._exit(0)\n'
    cmd = sh(plant.format(body=json.dumps(body)))
    _, events, cards = run(sealed_pack, tmp_path, cmd, task_ids=("t_18_add_missing_test",), max_attempts=1)
    graded = kinds(events, "graded")[0]["payload"]
    assert graded["forbidden"] == forbidden and graded["no_forbidden_path"] is False
    assert "oracle" not in graded  # never run on a forbidden change
    assert cards[0]["outcome"] == "fail"


MUTATION_FORGERIES = {
    # Passes once, then fails: every later run, mutants included, looked "caught" when the real
    # module always ran first in one sandbox. Keyed on a fixed path, not the temporary folder.
    "state-between-runs": "import os\n\n\ndef test_first_run_only():\n"
                          "    first = not os.path.exists('/tmp/.seen')\n"
                          "    open('/tmp/.seen', 'a').close()\n    assert first\n",
    # Never calls slugify: the mutants were written without the module's docstring.
    "what-the-mutants-lack": "import slug\n\n\ndef test_docstring_only():\n    assert slug.__doc__ == 'URL slugs.'\n",
}


@pytest.mark.parametrize("forgery", sorted(MUTATION_FORGERIES))
def test_exploit_a_test_that_tells_the_mutation_oracle_s_runs_apart_without_slugify(
        sealed_pack: Path, tmp_path: Path, forgery: str) -> None:
    cmd = sh(f"printf {json.dumps(MUTATION_FORGERIES[forgery])} > tests/test_slug.py")
    _, events, cards = run(sealed_pack, tmp_path, cmd, task_ids=("t_18_add_missing_test",), max_attempts=1)
    graded = kinds(events, "graded")[0]["payload"]
    assert graded["patch_applies_clean"] is True and graded["forbidden"] == []
    assert cards[0]["outcome"] == "fail"


def test_exploit_reads_hidden_tests_from_pack_path(sealed_pack: Path, tmp_path: Path) -> None:
    hidden = sealed_pack / "tasks" / TASK / "hidden" / "test_oracle_window.py"
    cmd = sh(f'cat {hidden} > stolen.txt 2>&1; ls {sealed_pack} >> stolen.txt 2>&1; '
             f'cat {tmp_path}/run.contract.json >> stolen.txt 2>&1; true')
    run_dir, _, cards = run(sealed_pack, tmp_path, cmd, max_attempts=1)
    stolen = (run_dir / "patches" / f"{TASK}.patch").read_text()
    assert "No such file or directory" in stolen
    assert "test_returns_exactly_n_items" not in stolen and "forbidden_paths" not in stolen
    assert cards[0]["outcome"] == "fail"


def test_exploit_network_connection_to_loopback(sealed_pack: Path, tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[Any] = []

    def accept() -> None:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and not accepted:
            try:
                accepted.append(server.accept())
            except TimeoutError:
                continue

    t = threading.Thread(target=accept)
    t.start()
    cmd = py(f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    r = 'connected'\n"
             "except OSError as e:\n    r = 'refused: ' + str(e)\nopen('net.txt', 'w').write(r + '\\n')\n")
    run_dir, _, _ = run(sealed_pack, tmp_path, cmd, max_attempts=1)
    t.join()
    server.close()
    assert accepted == []
    patch = (run_dir / "patches" / f"{TASK}.patch").read_text()
    assert "+refused" in patch and "+connected" not in patch


def test_exploit_background_process_edits_workspace_after_attempt(sealed_pack: Path, tmp_path: Path) -> None:
    cmd = sh(f'(sleep 1; printf {json.dumps(FIX)} > window.py; touch late.txt) > /dev/null 2>&1 & exit 0')
    run_dir, _events, cards = run(sealed_pack, tmp_path, cmd, max_attempts=1,
                                 options=RunOptions(progress=False, keep_work=True))
    time.sleep(1.5)
    ws = run_dir / "work" / TASK / "ws"
    assert not (ws / "late.txt").exists()
    assert "items[-n:]" not in (ws / "window.py").read_text()
    assert cards[0]["outcome"] == "abstain"


def test_exploit_floods_stdout(sealed_pack: Path, tmp_path: Path) -> None:
    cmd = py("import sys\nfor _ in range(50): sys.stdout.write('x' * 1_000_000)")
    t0 = time.monotonic()
    _, events, _ = run(sealed_pack, tmp_path, cmd, max_attempts=1)
    facts = kinds(events, "agent_finished")[0]["payload"]
    assert facts["stdout_bytes"] == 50_000_000 and facts["stdout_truncated"] is True
    assert time.monotonic() - t0 < 20


def test_exploit_sleeps_past_cap_is_killed_within_1s(sealed_pack: Path, tmp_path: Path) -> None:
    _, events, cards = run(sealed_pack, tmp_path, sh("trap '' TERM; sleep 30"), wall_clock_s=2.0)
    assert cards[0]["outcome"] == "timeout"
    facts = kinds(events, "agent_finished")[0]["payload"]
    assert facts["timed_out"] is True
    assert facts["elapsed_ms"] < 2000 + 1000
    assert len(kinds(events, "attempt_started")) == 1


def test_exploit_fork_bomb_is_contained(sealed_pack: Path, tmp_path: Path) -> None:
    marker = f"sealbench-bomb-{uuid.uuid4().hex}"
    cmd = f"bash -c 'b() {{ b | b & }}; b' {marker}"
    _, _, cards = run(sealed_pack, tmp_path, cmd, wall_clock_s=3.0, max_attempts=1)
    assert cards[0]["outcome"] in ("timeout", "fail", "abstain")
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == []


def test_exploit_writes_outside_workspace(sealed_pack: Path, tmp_path: Path) -> None:
    target = tmp_path / f"escape-{uuid.uuid4().hex}"
    cmd = sh(f'echo x > {target}; echo x > /tmp/{target.name}; echo x > $HOME/{target.name}; '
             f'echo x > ../{target.name}; true')
    run(sealed_pack, tmp_path, cmd, max_attempts=1)
    assert not target.exists() and not Path("/tmp", target.name).exists()
    assert not list(tmp_path.rglob(target.name))


def test_exploit_prints_fake_passed_lines(sealed_pack: Path, tmp_path: Path) -> None:
    cmd = sh('echo "tests/test_oracle_window.py::test_returns_exactly_n_items PASSED"; '
             'echo "============ 3 passed in 0.01s ============"; echo "# touched" >> window.py')
    _, _, cards = run(sealed_pack, tmp_path, cmd, max_attempts=1)
    assert cards[0]["outcome"] == "fail"


def test_exploit_symlink_on_hidden_test_path_redirects_overlay(sealed_pack: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    # The fix comes with the link, so that nothing but the forbidden path can fail it.
    cmd = sh(f"printf {json.dumps(FIX)} > window.py; ln -s {victim} test_oracle_window.py")
    _, events, cards = run(sealed_pack, tmp_path, cmd, max_attempts=1)
    assert victim.read_text() == "original"
    graded = kinds(events, "graded")[0]["payload"]
    assert graded["forbidden"] == ["test_oracle_window.py"] and graded["no_forbidden_path"] is False
    assert cards[0]["outcome"] == "fail"


def test_exploit_git_config_in_workspace_runs_nothing_on_host(sealed_pack: Path, tmp_path: Path) -> None:
    marker = tmp_path / f"fsmonitor-{uuid.uuid4().hex}"
    cmd = sh(f'git config core.fsmonitor "touch {marker}"; git config core.hooksPath /tmp; '
             f'printf {json.dumps(FIX)} > window.py')
    _, _, cards = run(sealed_pack, tmp_path, cmd, max_attempts=1)
    assert not marker.exists()
    assert cards[0]["outcome"] == "pass"


def test_agent_timeout_counts_oracle_time_against_the_cap(sealed_pack: Path, tmp_path: Path) -> None:
    # The agent alone (1.0 s) and the grading alone (1.2 s, the fix sleeps on import) each
    # fit the 1.8 s cap; only their sum does not, so the timeout proves grading is charged.
    slow_fix = "import time\ntime.sleep(1.2)\n" + FIX
    cmd = sh(f'sleep 1.0; printf {json.dumps(slow_fix)} > window.py')
    _, _events, cards = run(sealed_pack, tmp_path, cmd, wall_clock_s=1.8, max_attempts=1)
    assert cards[0]["outcome"] == "timeout"


def test_unlocked_contract_is_refused(sealed_pack: Path, tmp_path: Path) -> None:
    from sealbench.errors import ContractError

    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=(TASK,), run_id=None)
    with pytest.raises(ContractError, match="unlocked contract"):
        execute(contract_file, tmp_path / "r", RunOptions(progress=False))


def test_existing_journal_is_not_overwritten(sealed_pack: Path, tmp_path: Path) -> None:
    run_dir, _, _ = run(sealed_pack, tmp_path, "builtin:noop")
    with pytest.raises(RunRefusal, match="exists; resume it"):
        execute(tmp_path / "run.contract.json", run_dir, RunOptions(progress=False))


def test_junit_required_tests_must_all_pass(sealed_pack: Path, tmp_path: Path) -> None:
    from sealbench.grading import junit_verdict

    report = tmp_path / "r.xml"
    report.write_text('<testsuite><testcase classname="m" name="a"/><testcase classname="m" name="b">'
                      '<skipped/></testcase></testsuite>')
    assert junit_verdict(tmp_path, "r.xml", ["m::a"])["ok"] is True
    assert junit_verdict(tmp_path, "r.xml", ["m::b"])["ok"] is False
    report.write_text("<testsuite></testsuite>")
    assert junit_verdict(tmp_path, "r.xml", [])["why"] == "no test ran"
    assert junit_verdict(tmp_path, "missing.xml", [])["ok"] is False


def test_python_callable_agent_is_recorded_as_unsandboxed(sealed_pack: Path, tmp_path: Path) -> None:
    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=(TASK,), command="builtin:noop")

    def agent(task: dict[str, Any], workspace: Path, attempt: int) -> dict[str, Any]:
        (workspace / "window.py").write_text(FIX)
        return {"task": task["task_id"], "attempt": attempt}

    execute(contract_file, tmp_path / "r", RunOptions(progress=False), python_agent=agent)
    events = read_chain(tmp_path / "r" / "journal.jsonl").events
    assert events[0]["payload"]["agent"]["kind"] == "python-callable"
    assert events[0]["payload"]["agent"]["sandboxed"] is False
    assert kinds(events, "task_finished")[0]["payload"]["outcome"] == "pass"
    assert os.path.exists(tmp_path / "r" / "scorecards.jsonl")


def test_jobs_caps_agents_running_at_once_while_the_next_tasks_are_set_up(sealed_pack: Path, tmp_path: Path) -> None:
    """Tasks beyond --jobs set their sandboxes up ahead; none of their agents starts early."""
    from datetime import UTC, datetime

    every = tuple(sorted(p.name for p in (sealed_pack / "tasks").iterdir()))
    _run_dir, events, cards = run(sealed_pack, tmp_path, "sleep 0.3", task_ids=every,
                                  options=RunOptions(progress=False, jobs=2))
    assert [c["outcome"] for c in cards] == ["abstain"] * len(every)

    def at(event: dict[str, Any]) -> float:
        return datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()

    edges = sorted([(at(e), 1) for e in kinds(events, "attempt_started")]
                   + [(at(e), -1) for e in kinds(events, "agent_finished")], key=lambda edge: (edge[0], edge[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert peak == 2
    assert all(e["payload"]["elapsed_ms"] >= 300 for e in kinds(events, "agent_finished"))


def test_summary_from_the_run_equals_the_summary_rederived_from_its_journal(
        sealed_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sealbench.errors import VerificationFailed
    from sealbench.render import print_run_summary

    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=(TASK, "t_03_rename_helper"), command="builtin:reference")
    result = execute(contract_file, tmp_path / "run", RunOptions(progress=False))
    assert result.scorecards is not None and len(result.scorecards) == 2
    capsys.readouterr()
    assert print_run_summary(contract_file, tmp_path / "run", result) == 0
    rate_from_run = (tmp_path / "run" / "rate.json").read_bytes()
    from_run = capsys.readouterr().out
    assert print_run_summary(contract_file, tmp_path / "run") == 0
    assert capsys.readouterr().out == from_run and "2 of 2 task_pass" in from_run
    assert (tmp_path / "run" / "rate.json").read_bytes() == rate_from_run

    make_contract(sealed_pack, contract_file, task_ids=(TASK, "t_03_rename_helper"), command="builtin:reference",
                  run_id="another-run")  # the contract file replaced after the run
    with pytest.raises(VerificationFailed, match="changed during the run"):
        print_run_summary(contract_file, tmp_path / "run", result)


def test_long_runs_print_only_the_tasks_that_did_not_pass(sealed_pack: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from sealbench.outcomes import Outcome
    from sealbench.render import TABLE_ROWS, print_scorecards

    contract_file = tmp_path / "c.json"
    make_contract(sealed_pack, contract_file, task_ids=(TASK,), command="builtin:reference")
    result = execute(contract_file, tmp_path / "run", RunOptions(progress=False))
    assert result.scorecards
    card = result.scorecards[0]
    outcomes = [Outcome.PASS] * 30 + [Outcome.FAIL, Outcome.TIMEOUT] * 15
    cards = [card.model_copy(update={"task_id": f"task-{i:03d}", "outcome": o}) for i, o in enumerate(outcomes)]
    capsys.readouterr()
    print_scorecards(cards, "t", tmp_path / "scorecards.jsonl")
    out = capsys.readouterr().out
    assert "task-029" not in out and "task-030" in out and f"task-{30 + TABLE_ROWS - 1:03d}" in out
    assert f"task-{30 + TABLE_ROWS:03d}" not in out
    assert f"60 scorecards in {tmp_path / 'scorecards.jsonl'}; shown: {TABLE_ROWS} of the 30 tasks that did not pass" in out
    print_scorecards(cards[:30], "t")
    assert capsys.readouterr().out == "30 scorecards; every task passed\n"
    print_scorecards(cards[:TABLE_ROWS], "t")
    assert "task-000" in capsys.readouterr().out  # short runs: every row
