"""Setup mistakes never spend a run_id as a measured 0.

An agent whose command could not be executed (a typo'd script path: exit 127, nothing printed,
nothing changed, no model called) never started: that attempt is not the agent's failure, and
the run emits no rate (exit 3) naming the path and the fix. An agent that did start and then
exited 127 is measured as usual. A model endpoint that accepts no connection refuses the run
before its first journal line. Every run here is real: the CLI, bubblewrap, the sample pack.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import LOCK_TIME, make_contract, needs_bwrap
from sealbench.attempt import never_started
from sealbench.contract import lock_contract, new_contract
from sealbench.errors import RunRefusal
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec, ModelEndpoint
from sealbench.pack import load_pack
from sealbench.preflight import nearest, refuse_unreachable

Cli = Callable[..., tuple[int, str, str]]
TASK = "t_11_fix_off_by_one"
KEY_ENV = "SEALBENCH_TEST_NEVER_STARTED_KEY"
NOT_FOUND = b"bash: /tmp/agnet.sh: No such file or directory\n"


@pytest.mark.parametrize(("exit_code", "stdout", "stderr", "changed", "called", "started"), [
    (127, b"", NOT_FOUND, False, False, False),          # the shell could not find the script
    (126, b"", b"sh: 1: ./agent: Permission denied\n", False, False, False),
    (127, b"", b"", False, False, False),                # nothing said at all
    (127, b"", NOT_FOUND, True, False, True),            # it changed a file: it ran
    (127, b"thinking...\n", NOT_FOUND, False, False, True),  # it printed: it ran
    (127, b"", NOT_FOUND, False, True, True),            # it called its model: it ran
    (127, b"", b"line\n" * 10, False, False, True),      # a long stderr is the agent's own
    (1, b"", NOT_FOUND, False, False, True),             # any other exit is the agent's
    (0, b"", b"", False, False, True),
    (None, b"", b"", False, False, True),
])
def test_only_an_exec_failure_that_did_nothing_is_never_started(
        exit_code: int | None, stdout: bytes, stderr: bytes, changed: bool, called: bool, started: bool) -> None:
    why = never_started(exit_code, stdout, stderr, changed=changed, called=called)
    assert (why is None) is started
    if why is not None:
        assert why.startswith("the agent never started") and "check the paths" in why


def _missing_script() -> str:
    # Under /tmp: a place the agent could write, so no check before the run can call it a typo.
    return f"/tmp/sealbench-no-such-agent-{uuid.uuid4().hex}.sh"


@needs_bwrap
def test_a_typo_d_script_path_is_refused_with_the_path_and_never_scored_as_fail(
        sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    typo = _missing_script()
    contract = tmp_path / "typo.json"
    make_contract(sealed_pack, contract, task_ids=[TASK], command=f"bash {typo} {{prompt_file}}",
                  run_id="never-typo", max_attempts=2)
    run_dir = tmp_path / "run"
    code, out, err = cli("run", contract, "--out", run_dir, "--no-progress")
    assert code == 3, (out, err)
    assert f"no rate emitted: the agent never started: its command exited 127 (bash: {typo}: No such file" in err
    assert "check the paths in the contract's agent command" in err
    cards = [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]
    assert [c["outcome"] for c in cards] == ["harness_error"]
    assert not (run_dir / "rate.json").exists()
    # The summary's first words say the command never started, not that the agent failed.
    why = out.split("why ", 1)[1].splitlines()
    assert "could not start" in why[1] and typo in why[1]
    assert "fail " not in out
    code, out, err = cli("score", contract, run_dir)
    assert code == 3 and "no rate emitted" in err and f"(bash: {typo}: No such file" in err
    code, out, err = cli("bundle", run_dir, "--out", tmp_path / "bundles")
    assert code == 3, (out, err)
    assert f"the agent never started: its command exited 127 (bash: {typo}: No such file" in err


@needs_bwrap
def test_an_agent_that_ran_and_exited_127_is_measured(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    contract = tmp_path / "ran.json"
    make_contract(sealed_pack, contract, task_ids=[TASK], run_id="never-ran", max_attempts=1,
                  command="sh -c 'echo \"# touched\" >> window.py; exit 127'")
    run_dir = tmp_path / "run"
    code, out, err = cli("run", contract, "--out", run_dir, "--no-progress")
    assert code == 0, (out, err)
    cards = [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]
    assert [c["outcome"] for c in cards] == ["fail"]
    assert json.loads((run_dir / "rate.json").read_text())["n"] == 1
    assert "never started" not in out + err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_bwrap
def test_an_endpoint_that_accepts_no_connection_is_refused_before_any_journal_line(
        sealed_pack: Path, tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-never-started")
    port = _closed_port()
    pack = load_pack(sealed_pack)
    contract_file = tmp_path / "down.json"
    contract, _ = new_contract(pack, contract_file, [TASK], host="test machine", max_attempts=1,
                               agent=AgentSpec(label="model agent", command="sh -c 'exit 0'"),
                               oracle_validity="unavailable")
    contract = contract.model_copy(update={"model_endpoints": [ModelEndpoint(
        name="openai", style="openai-chat", base_url=f"http://127.0.0.1:{port}/v1", models=["m"], key_env=KEY_ENV)]})
    write_atomic(contract_file, model_json(lock_contract(contract, "never-down", LOCK_TIME, pack)))
    run_dir = tmp_path / "run"
    code, out, err = cli("run", contract_file, "--out", run_dir, "--no-progress")
    assert code == 3, (out, err)
    assert f"endpoint 'openai' at http://127.0.0.1:{port}/v1: no TCP connection to 127.0.0.1:{port}" in err
    assert "run_id is not spent" in err and "start the endpoint" in err
    assert not (run_dir / "journal.jsonl").exists()
    code, out, _ = cli("runs", "list")
    assert code == 0 and "never-down" not in out


def test_a_listening_endpoint_passes_and_a_replay_is_not_checked() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        up = ModelEndpoint(name="up", style="openai-chat", base_url=f"http://127.0.0.1:{port}/v1", models=["m"],
                           key_env=KEY_ENV)
        refuse_unreachable([up])
    down = up.model_copy(update={"base_url": f"http://127.0.0.1:{_closed_port()}/v1"})
    refuse_unreachable([down], replayed=True)
    with pytest.raises(RunRefusal, match="does not accept connections"):
        refuse_unreachable([up, down])


def test_contract_new_refuses_a_missing_absolute_path_naming_the_nearest(
        sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "agent.py").write_text("print(1)\n", encoding="utf-8")
    typo = folder / "agnet.py"
    code, out, err = cli("contract", "new", sealed_pack, "-o", tmp_path / "c.json", "--agent", f"python3 {typo}",
                         "--agent-label", "mine", "--task", TASK, "--agent-mount", folder)
    assert code == 3, (out, err)
    assert f"{typo} does not exist (the nearest existing path is {folder / 'agent.py'})" in err
    assert "run `sealbench contract new` again" in err
    assert not (tmp_path / "c.json").exists()
    assert nearest(str(tmp_path / "nowhere" / "deeper" / "x.sh")) == str(tmp_path)
