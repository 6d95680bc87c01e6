"""The terminal says why: `run` (and `score`, which prints the same summary) names each task that
did not pass with its outcome and cause, in plain words, and names an agent that never worked.

Every run here is real: the sample pack, agents in the bubblewrap sandbox, run through the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import make_contract, needs_bwrap
from sealbench import show
from sealbench.runner import RunOptions, execute

Cli = Callable[..., tuple[int, str, str]]
TASK = "t_11_fix_off_by_one"


def _agent(tmp_path: Path, name: str, source: str) -> tuple[str, list[str]]:
    """A Python agent script, mounted read-only into the sandbox: its command and mounts."""
    script = tmp_path / f"{name}.py"
    script.write_text(source, encoding="utf-8")
    return f"python3 {script}", [str(script)]


def _run(cli: Cli, pack: Path, tmp_path: Path, name: str, command: str, mounts: list[str] | None = None,
         **kw: object) -> tuple[int, str, str, Path]:
    contract = tmp_path / f"{name}.json"
    make_contract(pack, contract, task_ids=kw.pop("task_ids", [TASK]), command=command, run_id=f"why-{name}",
                  mounts=mounts or [], **kw)
    run_dir = tmp_path / name
    code, out, err = cli("run", contract, "--out", run_dir, "--no-progress")
    return code, out, err, run_dir


def _why(out: str, task: str = TASK) -> str:
    """The summary's line for ``task`` (below the "why N task(s) did not pass" line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("why "))
    return next(line for line in lines[start:] if line.strip().startswith(task))


@needs_bwrap
def test_summary_names_a_command_that_is_not_found(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    # A program relative to the workspace: the check before the run leaves it to each attempt
    # (tests/test_preflight.py refuses a missing program on PATH before the journal).
    code, out, err, _ = _run(cli, sealed_pack, tmp_path, "not-found", "./no-such-agent-program --go", max_attempts=1)
    assert code == 3 and "harness errors" in err
    row = _why(out)
    assert "harness_error" in row
    assert "the agent's command could not start in the sandbox" in row
    assert "execvp ./no-such-agent-program: No such file or directory" in row
    assert ("the agent's command could not start in the sandbox on any of the 1 attempt(s) of 1 task(s): "
            "bwrap: execvp ./no-such-agent-program: No such file or directory; check the contract's agent command") in out


@needs_bwrap
def test_summary_names_an_agent_that_exits_non_zero_with_an_empty_patch(
        sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    command, mounts = _agent(tmp_path, "gives_up", "import sys\nprint('starting')\n"
                             "sys.stderr.write('warming up\\ncannot reach the model: connection refused\\n')\n"
                             "sys.exit(3)\n")
    code, out, _, _ = _run(cli, sealed_pack, tmp_path, "gives-up", command, mounts)
    assert code == 0 and "0 of 1 task_pass" in out
    row = _why(out)
    assert " fail " in row
    assert "the agent ended with exit code 3; its last output: cannot reach the model: connection refused" in row
    assert "(after 2 of 2 attempts)" in row
    assert ("the agent exited non-zero with an empty patch on every one of its 2 attempt(s) of 1 task(s) "
            "(exit code 3); its stderr ends: cannot reach the model: connection refused") in out


@needs_bwrap
def test_summary_lists_the_failing_hidden_tests_by_name(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    command, mounts = _agent(tmp_path, "wrong_fix", "open('window.py', 'w').write("
                             "'def last_n(items, n):\\n    return items\\n')\n")
    code, out, _, _ = _run(cli, sealed_pack, tmp_path, "wrong-fix", command, mounts, max_attempts=1)
    assert code == 0
    row = _why(out)
    assert "the hidden tests failed: 2 failed" in row
    assert "test_oracle_window.py::test_returns_exactly_n_items" in row
    assert "test_oracle_window.py::test_zero_gives_nothing" in row
    assert "the agent exited non-zero" not in out


@needs_bwrap
def test_summary_says_how_a_crashed_oracle_ended(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    # The candidate's code aborts the test process as it is imported: no test runs, no report.
    command, mounts = _agent(tmp_path, "crasher", "open('window.py', 'w').write("
                             "'import os\\nos.abort()\\n')\n")
    code, out, _, _ = _run(cli, sealed_pack, tmp_path, "crash", command, mounts, max_attempts=1)
    assert code == 0
    row = _why(out)
    assert "the hidden tests failed: no JUnit report written" in row
    assert "the oracle exited with code 134: Fatal Python error: Aborted" in row


@needs_bwrap
def test_summary_names_the_forbidden_path(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    command, mounts = _agent(tmp_path, "shadow", "open('conftest.py', 'w').write('def test_x(): pass\\n')\n"
                             "open('window.py', 'a').write('\\n')\n")
    code, out, _, _ = _run(cli, sealed_pack, tmp_path, "forbidden", command, mounts, max_attempts=1)
    assert code == 0
    assert "the patch touched forbidden paths: conftest.py" in _why(out)


@needs_bwrap
def test_summary_names_the_cap_that_ended_a_task(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    code, out, _, _ = _run(cli, sealed_pack, tmp_path, "too-slow", "sleep 30", max_attempts=1, wall_clock_s=2)
    assert code == 0
    row = _why(out)
    assert " timeout " in row and "the task's wall-clock cap ran out while the agent ran" in row


@needs_bwrap
def test_summary_names_a_harness_failure_before_the_refusal(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    contract = tmp_path / "harness.json"
    make_contract(sealed_pack, contract, task_ids=[TASK], command="sh -c 'echo \"# x\" >> window.py'",
                  run_id="why-harness", max_attempts=1)
    hidden = sealed_pack / "tasks" / TASK / "hidden" / "test_oracle_window.py"

    def change_the_pack(_: object) -> None:
        # The pack changes under the running harness: its own failure, never the agent's.
        hidden.write_text(hidden.read_text() + "\n# edited\n")

    run_dir = tmp_path / "harness"
    execute(contract, run_dir, RunOptions(progress=False), on_started=change_the_pack)
    code, out, err = cli("score", contract, run_dir)
    assert code == 3 and "harness errors" in err and "no rate emitted" in err
    row = _why(out)
    assert "harness_error" in row
    assert "the harness failed, not the agent" in row and "hidden tests no longer match hidden_tests_sha256" in row


@needs_bwrap
def test_summary_prints_agent_stderr_inert(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    command, mounts = _agent(tmp_path, "escapes", "import sys\n"
                             "sys.stderr.write('\\x1b]0;pwned\\x07\\x1b[2J\\x1b[1A\\rall tests passed\\n')\n"
                             "sys.exit(1)\n")
    code, out, _, _ = _run(cli, sealed_pack, tmp_path, "escapes", command, mounts, max_attempts=1)
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "its stderr ends: \\x1b]0;pwned\\x07\\x1b[2J\\x1b[1A\\x0dall tests passed" in out


@needs_bwrap
def test_summary_stays_bounded_and_says_how_to_list_the_rest(
        sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    ids = ["csv-split-001", "t_03_rename_helper", TASK, "t_18_add_missing_test", "t_22_reject_network_call"]
    code, out, _, run_dir = _run(cli, sealed_pack, tmp_path, "many", "sh -c 'exit 2'", task_ids=ids,
                                 max_attempts=1)
    assert code == 0 and "why 5 task(s) did not pass" in out
    lines = show.why_lines(show.read_run(run_dir), limit=2)
    assert lines[0].startswith("why 5 task(s) did not pass")
    assert "on every one of its 5 attempt(s) of 5 task(s) (exit code 2); its stderr is empty" in lines[1]
    assert [ln.split()[0] for ln in lines[2:4]] == ids[:2]
    assert lines[4] == f"  and 3 more (fail 3): sealbench show {run_dir} --outcome fail"
    assert len(lines) == 5


@pytest.mark.parametrize(("error", "detail"), [
    ("HarnessError: the bubblewrap sandbox failed to start 'x': bwrap: execvp x: Permission denied",
     "bwrap: execvp x: Permission denied"),
    ("something else", "something else"),
])
def test_the_sandbox_s_words_are_kept_when_a_command_does_not_start(error: str, detail: str) -> None:
    assert show._start_detail(error) == detail
