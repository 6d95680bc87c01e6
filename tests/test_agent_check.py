"""`sealbench agent check CONTRACT [--task ID]`: the agent runs once, in the real sandbox and
through the real gateway, and nothing of it is counted: the contract file is unchanged, no
run_id is spent, no scratch is left behind.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import LOCK_TIME, needs_bwrap
from sealbench import events as ev
from sealbench.agent_check import call_counts
from sealbench.contract import lock_contract, new_contract
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec, ModelEndpoint
from sealbench.pack import load_pack

Cli = Callable[..., tuple[int, str, str]]
TASK = "t_11_fix_off_by_one"
EXAMPLE = Path(__file__).resolve().parents[1] / "src" / "sealbench" / "examples" / "agents" / "two_attempts.py"
GATEWAY_AGENT = Path(__file__).resolve().parent / "gateway_agent.py"
KEY_ENV = "SEALBENCH_TEST_CHECK_KEY"

pytestmark = needs_bwrap


def _contract(pack: Path, tmp_path: Path, command: str, mounts: list[str], lock: bool = False,
              endpoints: list[ModelEndpoint] | None = None) -> Path:
    file = tmp_path / "contract.json"
    loaded = load_pack(pack)
    contract, _ = new_contract(loaded, file, host="my laptop", oracle_validity="unavailable",
                               agent=AgentSpec(label="mine", command=command, mounts=mounts))
    if endpoints:
        contract = contract.model_copy(update={"model_endpoints": endpoints})
    if lock:
        contract = lock_contract(contract, "mine-1", LOCK_TIME, loaded)
    write_atomic(file, model_json(contract))
    return file


def _scratch_left() -> list[str]:
    return sorted(p.name for p in Path(tempfile.gettempdir()).glob("sealbench-agentcheck-*"))


def test_a_working_setup_is_checked_once_and_nothing_is_counted(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    agent = tmp_path / "my_agent.py"
    shutil.copy(EXAMPLE, agent)
    contract = _contract(sealed_pack, tmp_path, f"python3 {agent}", [str(agent)], lock=True)
    before = contract.read_bytes()
    left = _scratch_left()
    code, out, err = cli("agent", "check", contract, "--task", TASK)
    assert code == 0, (out, err)
    assert f"agent check on {TASK} (nothing is recorded or counted):" in out
    assert "started in the sandbox: yes" in out and "exit code:              0" in out
    assert "1 file(s) changed" in out and "the setup works" in out
    assert contract.read_bytes() == before  # the locked contract is untouched ...
    code, listed, _ = cli("runs", "list")
    assert "mine-1" not in listed and "agent-check" not in listed  # ... and its run_id not spent
    code, out, err = cli("run", contract, "--out", tmp_path / "run", "--no-progress")
    assert code == 0, err  # the real run still starts
    assert _scratch_left() == left


def test_an_agent_that_exits_non_zero_is_named_with_its_stderr(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    contract = _contract(sealed_pack, tmp_path, "sh -c 'echo cannot find my config >&2; exit 7'", [])
    code, out, _ = cli("agent", "check", contract)
    assert code == 3
    assert "exit code:              7" in out and "cannot find my config" in out
    assert "exited non-zero" in out


def test_a_program_the_sandbox_cannot_see_is_refused_before_it_runs(sealed_pack: Path, tmp_path: Path,
                                                                    cli: Cli) -> None:
    agent = tmp_path / "my_agent.py"
    shutil.copy(EXAMPLE, agent)
    contract = _contract(sealed_pack, tmp_path, f"python3 {agent}", [])
    code, _, err = cli("agent", "check", contract)
    assert code == 3 and "--agent-mount" in err and str(agent) in err


def test_an_agent_that_cannot_reach_its_model_is_told_so(sealed_pack: Path, tmp_path: Path, cli: Cli,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-check-" + secrets.token_hex(8)
    monkeypatch.setenv(KEY_ENV, key)
    # It accepts each connection and hangs up unanswered: the check starts, and the call fails.
    # (One that accepts no connection at all refuses before the check: see the end.)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"

    def hang_up() -> None:
        while True:
            try:
                server.accept()[0].close()
            except OSError:
                return

    threading.Thread(target=hang_up, daemon=True).start()
    home = tmp_path / "agent"
    home.mkdir()
    shutil.copy(GATEWAY_AGENT, home / "agent.py")
    (home / "plan.json").write_text(json.dumps({"1": [{"do": "chat", "model": "stub-model"}]}))
    endpoint = ModelEndpoint(name="openai", style="openai-chat", base_url=url + "/v1", models=["stub-model"],
                             key_env=KEY_ENV)
    contract = _contract(sealed_pack, tmp_path, f"python {home}/agent.py", [str(home)], endpoints=[endpoint])
    try:
        code, out, _ = cli("agent", "check", contract, "--task", TASK)
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept, which then ends
        server.close()
    assert code == 3
    assert "model calls:            1 forwarded or refused; 0 answered, 0 refused by the gateway, 1 failed upstream" \
        in out
    assert "did not reach its model" in out and "the declared model endpoint failed" in out
    code, _, err = cli("agent", "check", contract, "--task", TASK)  # now nobody listens there
    assert code == 3 and "the model endpoint does not accept connections" in err


@pytest.mark.parametrize(("statuses", "counts"), [
    ([], (0, 0, 0)),
    ([200, 201, 302], (3, 0, 0)),
    ([None, 500, 503, 429], (0, 0, 4)),
    ([400, 401, 404], (0, 0, 0)),
    (["refused", 200, 502], (1, 1, 1)),
])
def test_model_calls_are_counted_as_answered_refused_or_failed_upstream(
        statuses: list[int | str | None], counts: tuple[int, int, int]) -> None:
    calls = [ev.ModelCall(refused="max_calls") if s == "refused" else ev.ModelCall(status=s) for s in statuses]
    assert call_counts(calls) == counts
