"""Mistakes caught before the journal exists: an agent whose program or script the sandbox
cannot see is refused by `run` (exit 3) before any line, and its run_id is not spent; `contract
new` warns about the same at once (and refuses a path that exists nowhere). Every run here is real: the CLI, bubblewrap, the sample pack.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import make_contract, needs_bwrap
from sealbench.errors import HarnessError
from sealbench.grading import command_path
from sealbench.preflight import _check_result, _program_problem, problems
from sealbench.sandbox import SandboxResult, open_sandbox

Cli = Callable[..., tuple[int, str, str]]
TASK = "t_11_fix_off_by_one"
AGENT = "import pathlib, sys\npathlib.Path('window.py').write_text('# the agent was here\\n')\n"


def _contract(pack: Path, tmp_path: Path, name: str, command: str, mounts: list[str] | None = None) -> Path:
    contract = tmp_path / f"{name}.json"
    make_contract(pack, contract, task_ids=[TASK], command=command, run_id=f"pre-{name}", mounts=mounts or [],
                  max_attempts=1)
    return contract


def _script(tmp_path: Path) -> Path:
    folder = tmp_path / "agents"
    folder.mkdir()
    script = folder / "agent.py"
    script.write_text(AGENT, encoding="utf-8")
    return script


def _refused_before_any_line(cli: Cli, contract: Path, run_dir: Path) -> str:
    code, out, err = cli("run", contract, "--out", run_dir, "--no-progress")
    assert code == 3, (out, err)
    assert "would not start inside the sandbox" in err and "run_id is not spent" in err
    assert not (run_dir / "journal.jsonl").exists()
    return err


@needs_bwrap
def test_a_program_that_is_on_no_path_is_refused_before_any_journal_line(
        sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    contract = _contract(sealed_pack, tmp_path, "missing", "no-such-agent-program --prompt {prompt_file}")
    err = _refused_before_any_line(cli, contract, tmp_path / "run")
    assert "the agent's program 'no-such-agent-program' is not on the sandbox's PATH" in err
    # The run_id was not spent: the index knows no run of it.
    code, out, _ = cli("runs", "list")
    assert code == 0 and "pre-missing" not in out


@needs_bwrap
def test_a_script_that_is_not_mounted_is_refused_and_the_message_names_agent_mount(
        sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    script = _script(tmp_path)
    contract = _contract(sealed_pack, tmp_path, "unmounted", f"python3 {script}")
    err = _refused_before_any_line(cli, contract, tmp_path / "run")
    assert f"{script}, named in the agent's command, exists on this machine but is not visible" in err
    assert "--agent-mount" in err
    # The same contract with the script mounted starts, and its agent ran.
    mounted = _contract(sealed_pack, tmp_path, "mounted", f"python3 {script}", mounts=[str(script.parent)])
    code, out, err = cli("run", mounted, "--out", tmp_path / "run-mounted", "--no-progress")
    assert code == 0, (out, err)
    assert (tmp_path / "run-mounted" / "journal.jsonl").is_file() and "fail" in out


@needs_bwrap
def test_a_program_given_by_an_absolute_path_that_is_not_mounted_is_refused(
        sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    script = _script(tmp_path)
    script.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    script.chmod(0o755)
    contract = _contract(sealed_pack, tmp_path, "absolute", f"{script} {{workspace}}")
    err = _refused_before_any_line(cli, contract, tmp_path / "run")
    assert f"the agent's program {str(script)!r} is not visible inside the bubblewrap sandbox" in err


@needs_bwrap
def test_a_typo_in_the_scripts_absolute_path_is_refused_before_any_journal_line(
        sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    # A typo'd script path once passed `contract new` and `lock`, then scored 0 of 5 `fail` with
    # exit 0: every attempt's python3 said "can't open file" and the run_id was spent on it.
    script = _script(tmp_path)
    typo = script.parent / "agnet.py"
    contract = _contract(sealed_pack, tmp_path, "typo", f"python3 {typo} {{prompt_file}}",
                         mounts=[str(script.parent)])
    err = _refused_before_any_line(cli, contract, tmp_path / "run")
    assert f"{typo}, named in the agent's command, does not exist on this machine" in err
    assert "a typo?" in err
    code, _, err = cli("contract", "new", sealed_pack, "-o", tmp_path / "c.json", "--agent", f"python3 {typo}",
                         "--agent-label", "mine", "--task", TASK, "--agent-mount", script.parent)
    assert code == 3 and f"{typo} does not exist (the nearest existing path is {script})" in err


@needs_bwrap
def test_contract_new_warns_at_once_about_an_unmounted_script(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    script = _script(tmp_path)
    code, out, err = cli("contract", "new", sealed_pack, "-o", tmp_path / "c.json", "--agent", f"python3 {script}",
                         "--agent-label", "mine", "--task", TASK)
    assert code == 0, err
    assert f"warning: {script}, named in the agent's command" in out and "run will refuse" in out
    code, out, _ = cli("contract", "new", sealed_pack, "-o", tmp_path / "d.json", "--agent", f"python3 {script}",
                       "--agent-label", "mine", "--task", TASK, "--agent-mount", script.parent)
    assert code == 0 and "warning" not in out


@needs_bwrap
@pytest.mark.parametrize("command", [
    "sh -c 'echo hi > /tmp/out'",          # a path the agent writes, absent on the host too
    "./agent-in-the-workspace --go",     # resolved in each task's workspace, at run time
    "{workspace}/run.sh",                # a placeholder, filled per attempt
    "python3 -c 'print(1)' /dev/null",   # a host path the sandbox shows too
    "sh -c 'cat > /tmp/new/out' --log=/dev/shm/log",  # absent, but under a place the agent writes
])
def test_what_the_check_cannot_know_or_finds_visible_is_left_to_the_run(command: str) -> None:
    assert problems(command, [], open_sandbox("bubblewrap"), command_path()) == []


@needs_bwrap
def test_odd_names_are_checked_word_for_word_inside_the_sandbox(tmp_path: Path) -> None:
    """Names with spaces, glob characters and a leading dash reach the check as they are (the
    check is a shell: nothing is split or expanded), and only the unmounted ones are named."""
    folder = tmp_path / "odd * [dir]"
    folder.mkdir()
    shown, hidden = folder / "-shown file", tmp_path / "hidden?*.py"
    shown.write_text("x\n")
    hidden.write_text("x\n")
    program = folder / "run agent"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    box = open_sandbox("bubblewrap")
    command = f"'{program}' '{shown}' '{hidden}'"
    found = problems(command, [str(folder)], box, command_path())
    assert [p.what for p in found] == [f"{hidden}, named in the agent's command, exists on this machine but is not "
                                       "visible inside the bubblewrap sandbox"]
    program.chmod(0o644)  # visible, but not a program
    found = problems(command, [str(folder)], box, command_path())
    assert [p.what for p in found][:1] == [f"the agent's program {str(program)!r} is not executable"]
    assert len(found) == 2


# --- pure: what the check printed, and why a program was not found ----------------------------

def result(stdout: bytes, exit_code: int = 0) -> SandboxResult:
    return SandboxResult(exit_code=exit_code, timed_out=False, elapsed_s=0.1, stdout_bytes=len(stdout),
                         stderr_bytes=4, stdout_truncated=False, stderr_truncated=False, signal=None,
                         stdout=stdout, stderr=b"boom")


@pytest.mark.parametrize(("stdout", "exit_code", "read"), [
    (b"1\n", 0, (True, [])),
    (b"0 2\n", 0, (False, ["/b"])),
    (b"1 1 2\n", 0, (True, ["/a", "/b"])),
    (b"1\n", 2, None),
    (b"yes\n", 0, None),
    (b"", 0, None),
    (b"1 9\n", 0, None),
])
def test_the_check_s_output_is_read_or_refused_as_the_harness_s_failure(
        stdout: bytes, exit_code: int, read: tuple[bool, list[str]] | None) -> None:
    if read is None:
        with pytest.raises(HarnessError, match=r"could not check the agent's command inside the none sandbox .*: boom"):
            _check_result(result(stdout, exit_code), ["/a", "/b"], "none")
    else:
        assert _check_result(result(stdout, exit_code), ["/a", "/b"], "none") == read


def test_a_program_not_found_inside_is_explained_by_what_this_machine_has(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x")
    runnable = tmp_path / "runnable"
    runnable.write_text("#!/bin/sh\n")
    runnable.chmod(0o755)
    said = {name: _program_problem(program, "bubblewrap", "/usr/bin").what for name, program in [
        ("not executable", str(plain)), ("elsewhere", str(runnable)), ("nowhere", str(tmp_path / "gone")),
        ("not on PATH", "no-such-agent-program-anywhere")]}
    assert said == {
        "not executable": f"the agent's program {str(plain)!r} is not executable",
        "elsewhere": f"the agent's program {str(runnable)!r} is not visible inside the bubblewrap sandbox "
                     f"(on this machine it is {runnable})",
        "nowhere": f"the agent's program {str(tmp_path / 'gone')!r} does not exist, inside the sandbox or on this "
                   "machine",
        "not on PATH": "the agent's program 'no-such-agent-program-anywhere' is not on the sandbox's PATH "
                       "(/usr/bin) nor on this machine's",
    }
