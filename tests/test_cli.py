"""The command line: exit codes mean outcomes, refusals are one line, schemas print."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import SEED_IDS, needs_bwrap, write_json

Cli = Callable[..., tuple[int, str, str]]


def documented_exit_codes() -> list[int]:
    """The codes of the exit-code table (docs/reference/exit-codes.md)."""
    page = Path(__file__).resolve().parents[1] / "docs" / "reference" / "exit-codes.md"
    return [int(m) for m in re.findall(r"^\| (\d+) \|", page.read_text(encoding="utf-8"), re.MULTILINE)]


def test_help_lists_exit_codes(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli("--help")
    assert info.value.code == 0
    listed = re.findall(r"^  (\d+)\s+\S", capsys.readouterr().out.split("exit codes:", 1)[1], re.MULTILINE)
    documented = documented_exit_codes()
    assert len(documented) >= 6
    assert [c for c in documented if str(c) not in listed] == [], "exit codes the docs list but --help omits"


def test_usage_error_exits_2(cli: Cli) -> None:
    with pytest.raises(SystemExit) as info:
        cli("contract", "lock")
    assert info.value.code == 2


@pytest.mark.parametrize("name", ["task", "pack", "contract", "journal-event", "scorecard", "rate", "events"])
def test_schema_prints_json_schema(cli: Cli, name: str) -> None:
    code, out, _ = cli("schema", name)
    schema = json.loads(out)
    assert code == 0 and schema["type"] == "object"
    assert schema.get("additionalProperties") is False


def test_seed_004_flow_through_the_cli(cli: Cli, raw_pack: Path, tmp_path: Path) -> None:
    contract = tmp_path / "scoring_contract.json"
    assert cli("pack", "seal", raw_pack)[0] == 0
    assert cli("pack", "check", raw_pack)[0] == 0
    args = ["contract", "new", raw_pack, "-o", contract, "--agent-label", "ref", "--agent", "builtin:reference",
            "--oracle-validity-unavailable"]
    for tid in SEED_IDS:
        args += ["--task", tid]
    assert cli(*args)[0] == 0
    events = write_json(tmp_path / "events.json", [
        {"task_id": "t_03_rename_helper", "task_pass": True, "abstain": False, "wall_seconds": 40},
        {"task_id": "t_11_fix_off_by_one", "task_pass": False, "abstain": False, "wall_seconds": 55},
        {"task_id": "t_18_add_missing_test", "task_pass": False, "abstain": False, "wall_seconds": 200},
        {"task_id": "t_22_reject_network_call", "task_pass": True, "abstain": False, "wall_seconds": 30},
    ])
    code, _, err = cli("score", contract, events)
    assert (code, err.strip()) == (3, "sealbench: refused: unlocked contract; no rate emitted: lock it before the run "
                                      "with `sealbench contract lock CONTRACT --run-id NAME`")
    code, _, err = cli("contract", "lock", contract, "--run-id", "run_2026_10_12_a")
    assert code == 3 and "set access_class.host before lock" in err
    raw = json.loads(contract.read_text())
    raw["access_class"]["host"] = "operator-supplied free server option"
    write_json(contract, raw)
    assert cli("contract", "lock", contract, "--run-id", "run_2026_10_12_a")[0] == 0
    code, out, _ = cli("score", contract, events)
    assert code == 0 and out.startswith("2 of 4 task_pass"), out
    code, out, _ = cli("score", contract, events, "--json")
    rate = json.loads(out)
    assert code == 0 and (rate["n"], rate["task_pass_count"]) == (4, 2)
    code, _, err = cli("contract", "lock", contract, "--run-id", "again")
    assert code == 3 and "already locked" in err
    raw = json.loads(contract.read_text())
    raw["task_ids"] = raw["task_ids"][:3]
    write_json(contract, raw)
    code, _, err = cli("score", contract, events)
    assert code == 3 and "contract edited after lock" in err


def test_tampered_pack_exits_4(cli: Cli, sealed_pack: Path) -> None:
    (sealed_pack / "tasks" / SEED_IDS[0] / "prompt.md").write_text("changed")
    code, _, err = cli("pack", "check", sealed_pack)
    assert code == 4 and "prompt differs from the seal" in err


def test_bad_input_is_a_refusal_not_a_crash(cli: Cli, tmp_path: Path) -> None:
    code, _, err = cli("pack", "check", tmp_path / "nowhere")
    assert code == 3 and err.startswith("sealbench: refused:") and "Traceback" not in err


def test_console_script_runs_as_a_real_process(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "sealbench"
    if not exe.exists():
        pytest.skip("console script not installed (run through make test)")
    proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0 and proc.stdout.startswith("sealbench ")
    # The exit code and every line printed survive the frozen garbage collection at exit.
    proc = subprocess.run([str(exe), "schema", "scorecard"], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0 and json.loads(proc.stdout)["title"] == "Scorecard"
    proc = subprocess.run([str(exe), "pack", "check", str(tmp_path / "nowhere")], capture_output=True, text=True,
                          env=dict(os.environ))
    assert proc.returncode == 3 and proc.stderr.startswith("sealbench: refused:")


def test_cli_import_is_lazy() -> None:
    code = "import sys, sealbench.cli; print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'rich'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_reader_that_leaves_early_gets_exit_141_and_no_traceback(tmp_path: Path) -> None:
    # `sealbench verify BUNDLE | head -1` printed "unexpected error (BrokenPipeError)".
    exe = shutil.which("sealbench", path=str(Path(sys.executable).parent))
    assert exe is not None
    bundle = sorted((Path(__file__).resolve().parent / "fixtures" / "bundles").glob("made-by-*"))[0] / "demo-reference"
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        done = subprocess.run([exe, "verify", str(bundle)], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=60, check=False)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr and "Exception" not in done.stderr


def _actions(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("sealbench",)) -> Iterator[
        tuple[tuple[str, ...], argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_and_argument_of_every_command_has_help_and_shows_its_default() -> None:
    from sealbench.cli import build_parser

    missing, no_default = [], []
    for path, action in _actions(build_parser()):
        name = " ".join([*path, *(action.option_strings[-1:] or [action.dest])])
        if not action.help:
            missing.append(name)
        elif action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in action.help:
            no_default.append(f"{name} (default {action.default!r})")
    assert missing == [], "options and arguments without help text"
    assert no_default == [], "options whose help does not show their default"


def test_help_lists_every_exit_code() -> None:
    from sealbench.cli import build_parser

    out = build_parser().format_help()
    for exit_code in ("0", "1", "2", "3", "4", "130", "141", "143"):
        assert re.search(rf"^  {exit_code} +\S", out, re.M), exit_code


def test_a_typo_in_a_pack_or_bundle_path_names_the_nearest_folders(sealed_pack: Path, tmp_path: Path,
                                                                      cli: Cli) -> None:
    # The refusal names the way out: the folder that was meant, or what is there.
    typo = sealed_pack.parent / (sealed_pack.name + "s")
    code, _, err = cli("pack", "check", typo)
    assert code == 3 and "it does not exist; did you mean" in err and str(sealed_pack) in err
    bundles = tmp_path / "bundles"
    for name in ("run-a", "run-b"):
        (bundles / name).mkdir(parents=True)
        (bundles / name / "SHA256SUMS").write_text("")
    code, _, err = cli("verify", bundles / "run-c")
    assert code == 2 and "did you mean" in err and str(bundles / "run-a") in err
    code, _, err = cli("verify", bundles / "zzz")
    assert code == 2 and "beside it: run-a, run-b" in err


def _commands(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the tree by its full name ("" the top, "contract new", ...), aliases once."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield from _commands(action.choices[choice.dest], f"{path} {choice.dest}".strip())


def _runs_something(parser: argparse.ArgumentParser) -> bool:
    return not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)


def test_help_groups_every_command_by_workflow_from_one_table() -> None:
    from sealbench.cli import COMMAND_GROUPS, build_parser

    parser = build_parser()
    commands = {path for path, sub in _commands(parser) if path and _runs_something(sub)}
    table = [name for _, names in COMMAND_GROUPS for name in names]
    assert sorted(commands - set(table)) == [], "commands missing from COMMAND_GROUPS"
    assert sorted(set(table) - commands) == [], "COMMAND_GROUPS names commands the parser does not define"
    assert len(table) == len(set(table)), "a command in two groups"
    listing = parser.format_help().split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    assert [line.strip(" :") for line in listing.splitlines() if not line.startswith("    ")] == [
        "set up", "run", "inspect", "publish", "admin"]
    listed = [line.split()[0] if line.split()[0] not in ("pack", "contract", "agents", "runs", "env")
              else " ".join(line.split()[:2]) for line in listing.splitlines() if re.match(r"    \S", line)]
    assert listed == table, "the help lists the commands in the table's order, each once"


def test_every_command_help_ends_with_examples_that_parse() -> None:
    import shlex

    from sealbench.cli import EXAMPLES, build_parser

    parser = build_parser()
    paths = {path for path, _ in _commands(parser)}
    assert sorted(set(EXAMPLES) - paths) == [], "examples of commands that do not exist"
    for path, sub in _commands(parser):
        text = sub.format_help()
        assert "\nexamples:\n" in text, f"sealbench {path} --help has no examples"
        lines = text.split("\nexamples:\n", 1)[1].replace(" \\\n", " ").splitlines()
        assert lines, path
        for line in lines:
            argv = shlex.split(line)
            assert argv[0] == "sealbench", line
            command = " ".join(argv[1:]).replace("agent check", "agents check")
            assert command.startswith(path), f"an example of `sealbench {path}` runs another command: {line}"
            try:
                parser.parse_args(argv[1:])
            except SystemExit as e:  # pragma: no cover - the message says which
                raise AssertionError(f"example does not parse: {line}") from e


def test_contract_new_options_come_in_groups() -> None:
    from sealbench.cli import build_parser

    new = dict(_commands(build_parser()))["contract new"]
    groups = {g.title: [(a.option_strings or [a.dest])[-1] for a in g._group_actions] for g in new._action_groups}
    assert groups.pop("options") == ["--help"], "an option of contract new outside its groups"
    assert groups.pop("positional arguments") == ["pack"]
    assert set(groups) >= {"the agent", "the model endpoint (with --agent preset:NAME)",
                           "the budget and caps (per task)", "the access class", "controls and the tie rule",
                           "output"}
    assert all(groups.values()), groups


def _command_groups() -> list[str]:
    from sealbench.cli import build_parser

    return [path for path, sub in _commands(build_parser()) if path and not _runs_something(sub)]


@pytest.mark.parametrize("group", _command_groups())
def test_a_command_group_without_its_command_names_the_choices(cli: Cli, group: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from sealbench.cli import build_parser

    names = [p.split()[-1] for p, _ in _commands(build_parser()) if p.startswith(f"{group} ")]
    for argv, said in ((group.split(), f"`sealbench {group}` needs a command"),
                       ([*group.split(), "nope"], "unknown command 'nope'")):
        with pytest.raises(SystemExit) as info:
            cli(*argv)
        err = capsys.readouterr().err
        assert info.value.code == 2
        assert f"sealbench: error: {said}: choose one of: {', '.join(names)} " in err, err
        assert "_command" not in err


def test_an_unknown_command_names_the_commands(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli("nope")
    err = capsys.readouterr().err
    assert "unknown command 'nope': choose one of: schema, pack," in err and "argument" not in err


def _next_command(out: str) -> list[str]:
    import shlex

    found = re.findall(r"^next: `(sealbench [^`]*)`", out, re.MULTILINE)
    assert len(found) == 1, out
    return shlex.split(found[0])[1:]


@needs_bwrap
def test_each_step_of_the_flow_names_the_next_and_the_named_command_works(
        cli: Cli, raw_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two tasks keep it short; the commands are run as printed, placeholders filled in.
    for task in (raw_pack / "tasks").iterdir():
        if task.name not in SEED_IDS[:2]:
            shutil.rmtree(task)
    monkeypatch.chdir(tmp_path)
    filled = {"CMD": "builtin:reference", "LABEL": "reference", "HOST": "this machine", "RUN_ID": "flow-1"}
    code, out, err = cli("pack", "seal", raw_pack)
    named = []
    while True:
        assert code == 0, out + err
        if "next: " not in out:
            break
        argv = [filled.get(word, word) for word in _next_command(out)]
        named.append(" ".join(argv[:2]) if argv[0] in ("pack", "contract") else argv[0])
        if argv[:2] == ["pack", "validate"]:
            argv += ["--repeat", "1", "--no-progress"]
        if argv[0] == "run":
            argv.append("--no-progress")
        code, out, err = cli(*argv)
    assert named == ["pack validate", "contract new", "contract lock", "run", "probe", "bundle", "verify", "report"]
    assert out.startswith("wrote ") and "report.html" in out

    # A run where tasks did not pass names show first.
    contract = tmp_path / "noop.contract.json"
    assert cli("contract", "new", raw_pack, "-o", contract, "--agent", "builtin:noop", "--agent-label", "noop",
               "--host", "this machine")[0] == 0
    assert cli("contract", "lock", contract, "--run-id", "flow-noop")[0] == 0
    code, out, err = cli("run", contract, "--out", tmp_path / "noop-run", "--no-progress")
    assert code == 0, out + err
    assert _next_command(out) == ["show", str(tmp_path / "noop-run")]
    assert f"then `sealbench probe {contract} --out {tmp_path / 'noop-run'}`" in out



def test_a_contract_without_a_host_names_the_command_that_adds_it(cli: Cli, sealed_pack: Path,
                                                                    tmp_path: Path) -> None:
    # `contract lock` refuses a contract without a host: the next step is to give one, not the lock.
    contract = tmp_path / "c.json"
    code, out, err = cli("contract", "new", sealed_pack, "-o", contract, "--agent", "builtin:reference",
                         "--agent-label", "ref", "--oracle-validity-unavailable")
    assert code == 0, err
    argv = [{"HOST": "this machine"}.get(w, w) for w in _next_command(out)]
    assert argv[:2] == ["contract", "new"] and "--force" in argv
    assert cli(*argv)[0] == 0
    assert _next_command(cli(*argv)[1])[:3] == ["contract", "lock", str(contract)]


def test_the_examples_that_need_no_sandbox_run_as_written(cli: Cli, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The rest of the flow's examples are the commands of the chain above.
    import shlex

    from sealbench.cli import EXAMPLES

    monkeypatch.chdir(tmp_path)
    for path in ("init", "pack check", "schema", "runs list", "agents list"):
        if path == "pack check":
            assert cli("pack", "seal", "mypack")[0] == 0  # what `init`'s pack needs first
        for line in EXAMPLES[path]:
            code, _, err = cli(*shlex.split(line)[1:])
            assert code == 0, f"{line}: {err}"
