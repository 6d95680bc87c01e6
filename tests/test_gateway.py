"""The model gateway in the real sandbox: a model-backed agent reaches the declared endpoint and
nothing else, never sees the key, and every call is on the record.

Each test runs ``gateway_agent.py`` (a small urllib/http.client agent) in the bubblewrap sandbox
through the real runner, against ``model-stub`` started on loopback by the test; the stub
answers only requests that carry the real key, so a reply proves the gateway swapped it in.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import LOCK_TIME, needs_bwrap
from sealbench.bundle import make_bundle, sums_bytes, verify_bundle
from sealbench.contract import lock_contract, new_contract
from sealbench.errors import RunRefusal, VerificationFailed
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec, ModelEndpoint, ModelPrice
from sealbench.journal import read_chain
from sealbench.model_stub import StubReply, StubServer, StubUsage, start
from sealbench.pack import load_pack
from sealbench.report import write_report
from sealbench.runner import RunOptions, execute

TASK = "t_11_fix_off_by_one"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"
AGENT = Path(__file__).resolve().parent / "gateway_agent.py"
KEY_ENV = "SEALBENCH_TEST_MODEL_KEY"

pytestmark = needs_bwrap


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A random key in the host environment, as a user would export it."""
    value = "sk-test-" + secrets.token_hex(20)
    monkeypatch.setenv(KEY_ENV, value)
    return value


@pytest.fixture
def stub(key: str) -> Iterator[StubServer]:
    server = start([StubReply(text=FIX, model="stub-model", repeat=True,
                              usage=StubUsage(input_tokens=120, output_tokens=30, cached_tokens=100)),
                    StubReply(text=FIX, model="claude-stub", repeat=True,
                              usage=StubUsage(input_tokens=50, output_tokens=20, cached_tokens=0))], key=key)
    yield server
    server.close()


def endpoints(stub: StubServer) -> list[ModelEndpoint]:
    return [
        ModelEndpoint(name="openai", style="openai-chat", base_url=stub.url + "/v1", models=["stub-model"],
                      key_env=KEY_ENV, prices={"stub-model": ModelPrice(input=1.0, output=2.0, cached_input=0.5,
                                                                        read_on="2026-11-30")}),
        ModelEndpoint(name="anthropic", style="anthropic-messages", base_url=stub.url, models=["claude-stub"],
                      key_env=KEY_ENV),
    ]


def unit_gateway(stub: StubServer, key: str, limits: Any = None) -> tuple[Any, list[Any]]:
    """A started gateway to ``stub`` outside any run, and the events it records (blobs not stored)."""
    from sealbench.gateway import Gateway

    recorded: list[Any] = []
    gateway = Gateway(endpoints(stub), {"openai": key, "anthropic": key}, recorded.append,
                      lambda data: "sha256:" + "0" * 64, limits).start()
    return gateway, recorded


def gateway_run(sealed_pack: Path, tmp_path: Path, stub: StubServer, plan: dict[str, list[dict[str, Any]]], *,
                max_attempts: int = 1, name: str = "gw", probe: bool = False, caps: dict[str, Any] | None = None,
                endpoint_update: dict[str, Any] | None = None,
                ) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]:
    agent_dir = tmp_path / f"{name}-agent"
    agent_dir.mkdir()
    shutil.copy(AGENT, agent_dir / "agent.py")
    (agent_dir / "plan.json").write_text(json.dumps(plan))
    contract_file = tmp_path / f"{name}.contract.json"
    pack = load_pack(sealed_pack)
    contract, _ = new_contract(pack, contract_file, [TASK], host="test machine", max_attempts=max_attempts,
                               agent=AgentSpec(label="gateway test agent", command=f"python {agent_dir}/agent.py",
                                               mounts=[str(agent_dir)]),
                               oracle_validity="unavailable")
    declared = [e.model_copy(update=endpoint_update or {}) for e in endpoints(stub)]
    contract = contract.model_copy(update={"model_endpoints": declared})
    if caps:
        assert contract.budget is not None
        contract = contract.model_copy(update={"budget": contract.budget.model_copy(update=caps)})
    write_atomic(contract_file, model_json(lock_contract(contract, name, LOCK_TIME, pack)))
    run_dir = tmp_path / name
    execute(contract_file, run_dir, RunOptions(progress=False, keep_work=True))
    if probe:
        execute(contract_file, run_dir, RunOptions(progress=False, keep_work=True), probe=True)
    events = read_chain(run_dir / "journal.jsonl").events
    cards = [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]
    return run_dir, events, cards


def calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "model_call"]


def agent_log(run_dir: Path, attempt: int = 1) -> dict[str, Any]:
    log: dict[str, Any] = json.loads((run_dir / "work" / TASK / "ws" / f"agent_log_{attempt}.json").read_text())
    return log


def blob(run_dir: Path, digest: str) -> bytes:
    return (run_dir / "blobs" / digest.removeprefix("sha256:")).read_bytes()


# --- the way through --------------------------------------------------------------------


def test_agent_fixes_a_task_through_the_gateway_and_every_call_carries_its_usage(
        sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    plan = {"1": [{"do": "chat", "model": "stub-model", "stream": True, "write": "window.py"},
                  {"do": "chat", "model": "stub-model"},
                  {"do": "anthropic", "model": "claude-stub", "stream": True},
                  {"do": "anthropic", "model": "claude-stub"}]}
    run_dir, events, cards = gateway_run(sealed_pack, tmp_path, stub, plan)
    assert cards[0]["outcome"] == "pass", agent_log(run_dir)
    assert [s["status"] for s in agent_log(run_dir)["steps"]] == [200, 200, 200, 200]
    made = calls(events)
    assert [c["payload"]["index"] for c in made] == [0, 1, 2, 3]
    usage = [(c["payload"]["endpoint"], c["payload"]["streamed"], c["payload"]["input_tokens"],
              c["payload"]["output_tokens"], c["payload"]["cached_tokens"]) for c in made]
    assert usage == [("openai", True, 120, 30, 100), ("openai", False, 120, 30, 100),
                     ("anthropic", True, 50, 20, 0), ("anthropic", False, 50, 20, 0)]
    for c in made:
        p = c["payload"]
        assert p["status"] == 200 and "refused" not in p and p["latency_ms"] >= 0
        assert json.loads(blob(run_dir, p["request"]))["model"] == p["model"]
        assert FIX.split("\n")[0][:10].encode() in blob(run_dir, p["response"]).replace(b"\\n", b"\n") or p["streamed"]
    # Every call is journaled inside its attempt, before the agent's end.
    kinds = [e["kind"] for e in events]
    assert max(i for i, k in enumerate(kinds) if k == "model_call") < kinds.index("agent_finished")
    # The scorecard sums them; the Anthropic endpoint has no price, so the cost is unknown, not 0.
    assert cards[0]["model_usage"] == {"calls": 4, "refused": 0, "failed": 0, "unreported": 0, "input_tokens": 340,
                                       "output_tokens": 100, "cached_tokens": 200, "cost": None, "currency": "USD"}


def test_cost_is_derived_from_the_locked_prices_and_verify_re_derives_it(
        sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    plan = {"1": [{"do": "chat", "model": "stub-model", "write": "window.py"}, {"do": "chat", "model": "stub-model"}]}
    run_dir, _, cards = gateway_run(sealed_pack, tmp_path, stub, plan, probe=True)
    used = cards[0]["model_usage"]
    # Per call: 20 uncached input at 1.0, 100 cached at 0.5, 30 output at 2.0, per million tokens.
    assert (used["calls"], used["input_tokens"], used["cached_tokens"]) == (2, 240, 200)
    assert used["cost"] == pytest.approx(2 * (20 * 1.0 + 100 * 0.5 + 30 * 2.0) / 1e6) and used["currency"] == "USD"
    bundle = make_bundle(run_dir, tmp_path / "bundles")
    verify_bundle(bundle)
    # A scorecard whose cost was edited (and its sums redone) no longer matches what the journal derives.
    cards_file = bundle / "scorecards.jsonl"
    edited = cards_file.read_text().replace(f'"cost":{used["cost"]}', '"cost":0.0')
    assert edited != cards_file.read_text()
    cards_file.write_text(edited)
    (bundle / "SHA256SUMS").write_bytes(sums_bytes({
        p.relative_to(bundle).as_posix(): p.read_bytes() for p in bundle.rglob("*")
        if p.is_file() and p.name != "SHA256SUMS"}))
    with pytest.raises(VerificationFailed, match=r"scorecards\.jsonl"):
        verify_bundle(bundle)



def test_report_and_show_tell_each_task_s_model_use_and_the_cost_per_pass(
        sealed_pack: Path, tmp_path: Path, stub: StubServer, cli: Any) -> None:
    plan = {"1": [{"do": "chat", "model": "stub-model", "write": "window.py"}]}
    run_dir, _, cards = gateway_run(sealed_pack, tmp_path, stub, plan)
    cost = cards[0]["model_usage"]["cost"]
    md, _ = write_report(run_dir, tmp_path / "report")
    text = md.read_text(encoding="utf-8")
    assert "## Model use" in text and f"{cost:.4f} USD by the contract's locked prices" in text
    assert f"cost per pass | {cost:.4f} USD (1 pass(es))" in text
    assert f"| 1 | 120 / 30 | {cost:.4f} USD |" in text
    code, out, _ = cli("show", run_dir, TASK)
    assert code == 0 and "model calls: 1 (0 refused, 0 failed upstream); tokens 120 in, 30 out, 100 cached" in out
    assert "#0 openai stub-model: 200 in" in out and "120/30/100 tokens" in out


def test_exploit_host_key_is_looked_for_in_the_sandbox_workspace_run_dir_and_bundle(
        sealed_pack: Path, tmp_path: Path, stub: StubServer, key: str) -> None:
    plan = {"1": [{"do": "dump_env"}, {"do": "chat", "model": "stub-model", "write": "window.py"}]}
    run_dir, events, cards = gateway_run(sealed_pack, tmp_path, stub, plan, probe=True)
    assert cards[0]["outcome"] == "pass"
    seen_env = agent_log(run_dir)["env"]
    assert seen_env["OPENAI_API_KEY"].startswith("sbx-") and seen_env["OPENAI_BASE_URL"].startswith("http://127.0.0.1:")
    assert KEY_ENV not in seen_env and key not in json.dumps(seen_env)
    bundle = make_bundle(run_dir, tmp_path / "bundles")
    verify_bundle(bundle)
    needle = key.encode()
    for root in (run_dir, bundle):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert needle not in path.read_bytes(), path
    grep = subprocess.run(["grep", "-rlF", key, str(run_dir), str(bundle)], capture_output=True, text=True)
    assert grep.returncode == 1 and grep.stdout == ""
    assert len(calls(events)) == 1


# --- what stays shut ------------------------------------------------------------------------


class _Listener:
    """A host service the agent must not reach: counts what it accepts."""

    def __init__(self, family: socket.AddressFamily, host: str) -> None:
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((host, 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()
            except (TimeoutError, OSError):
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def test_exploit_agent_dials_other_host_listeners_abstract_socket_and_dns(
        sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    v4 = _Listener(socket.AF_INET, "127.0.0.1")
    try:
        v6: _Listener | None = _Listener(socket.AF_INET6, "::1")
    except OSError:
        v6 = None  # no IPv6 loopback on this host: nothing there to reach
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract_name = f"sealbench-test-{secrets.token_hex(6)}"
    abstract.bind("\0" + abstract_name)
    abstract.listen(1)
    stub_port = int(stub.url.rsplit(":", 1)[1])
    try:
        steps: list[dict[str, Any]] = [
            {"do": "connect", "host": "127.0.0.1", "port": v4.port},
            {"do": "connect", "host": "127.0.0.1", "port": stub_port},
            {"do": "abstract", "name": abstract_name},
            {"do": "dns", "name": "example.com"},
        ]
        if v6 is not None:
            steps.append({"do": "connect", "host": "::1", "port": v6.port})
        steps.append({"do": "chat", "model": "stub-model", "write": "window.py"})
        run_dir, _events, cards = gateway_run(sealed_pack, tmp_path, stub, {"1": steps})
    finally:
        v4.close()
        if v6 is not None:
            v6.close()
        abstract.close()
    log = agent_log(run_dir)["steps"]
    assert all(s["result"].startswith("refused") for s in log if s["do"] in ("connect", "abstract")), log
    dns = next(s for s in log if s["do"] == "dns")
    assert dns["result"].startswith("failed") and dns["seconds"] < 2.0, dns
    # The resolver named is the sandbox's own loopback (or none, whose default is the same).
    assert dns["resolv_conf"] is None or dns["resolv_conf"].split()[:2] == ["nameserver", "127.0.0.1"], dns
    assert v4.accepted == 0 and (v6 is None or v6.accepted == 0)
    assert stub.script.served == 1  # only the model call, through the gateway
    assert log[-1]["status"] == 200 and cards[0]["outcome"] == "pass"


def test_exploit_agent_asks_for_an_undeclared_model(sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    plan = {"1": [{"do": "chat", "model": "gpt-expensive"}, {"do": "anthropic", "model": "stub-model"},
                  {"do": "chat", "model": "stub-model", "write": "window.py"}]}
    run_dir, events, _cards = gateway_run(sealed_pack, tmp_path, stub, plan)
    log = agent_log(run_dir)["steps"]
    assert [s["status"] for s in log] == [403, 403, 200]
    assert "not declared" in log[0]["reply"] and "sealbench gateway" in log[0]["reply"]
    made = calls(events)
    assert [c["payload"]["status"] for c in made] == [403, 403, 200]
    assert "gpt-expensive" in made[0]["payload"]["refused"] and made[0]["payload"]["model"] == "gpt-expensive"
    assert made[0]["payload"]["input_tokens"] is None  # never sent upstream: no usage
    assert stub.script.served == 1


def test_exploit_agent_tries_paths_methods_and_bodies_the_endpoint_does_not_declare(
        sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    raw = ["/openai/../anthropic/v1/messages", "/openai/chat/completions?redirect=http://evil",
           "//evil.example/openai/chat/completions", "/openai/%2e%2e/chat/completions", "/openai/models",
           "/openai/chat/completions/", "/openai/v1/chat/completions"]
    steps: list[dict[str, Any]] = [{"do": "raw", "path": p} for p in raw]
    steps += [{"do": "raw", "path": "/openai/chat/completions", "method": "GET", "body": None},
              {"do": "raw", "path": "/openai/chat/completions", "body": {"messages": []}},
              {"do": "raw", "path": "/openai/chat/completions", "body": ["stub-model"]},
              {"do": "chat", "model": "stub-model", "write": "window.py"}]
    run_dir, events, _cards = gateway_run(sealed_pack, tmp_path, stub, {"1": steps})
    statuses = [s["status"] for s in agent_log(run_dir)["steps"]]
    assert statuses == [404] * len(raw) + [405, 403, 400, 200]
    assert stub.script.served == 1
    assert all(c["payload"].get("refused") for c in calls(events)[:-1])


def test_anthropic_sdk_beta_query_is_served_and_no_other_query_is(
        sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    # Claude Code posts to /v1/messages?beta=true; the query is dropped, not forwarded.
    plan = {"1": [{"do": "anthropic", "model": "claude-stub", "query": "?beta=false"},
                  {"do": "chat", "model": "stub-model", "query": "?beta=true"},
                  {"do": "anthropic", "model": "claude-stub", "query": "?beta=true&x=1"},
                  {"do": "anthropic", "model": "claude-stub", "query": "?beta=true", "write": "window.py"}]}
    run_dir, events, _cards = gateway_run(sealed_pack, tmp_path, stub, plan)
    # An unrouted Anthropic request is read as OpenAI's, whose key header it lacks: 401.
    assert [s["status"] for s in agent_log(run_dir)["steps"]] == [401, 404, 401, 200]
    assert stub.script.served == 1
    made = calls(events)
    assert all(c["payload"]["refused"] for c in made[:3])
    assert made[3]["payload"]["endpoint"] == "anthropic" and "refused" not in made[3]["payload"]


def test_exploit_agent_floods_the_gateway_with_a_huge_body_and_too_many_connections(
        sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    from sealbench.gateway import GatewayLimits

    cap = GatewayLimits().connections
    plan = {"1": [{"do": "big_body", "bytes": GatewayLimits().max_body_bytes + 1},
                  {"do": "flood", "connections": cap + 8, "expect_closed": 8},
                  {"do": "chat", "model": "stub-model", "write": "window.py"}]}
    run_dir, events, cards = gateway_run(sealed_pack, tmp_path, stub, plan)
    log = agent_log(run_dir)["steps"]
    assert log[0]["status"] == 413
    assert log[1]["closed"] >= 8  # the connections over the cap, closed on arrival
    assert log[2]["status"] == 200 and cards[0]["outcome"] == "pass"
    refused = [c["payload"]["refused"] for c in calls(events) if c["payload"].get("refused")]
    assert any("over the cap" in r and "bytes" in r for r in refused)
    assert any(f"over the cap of {cap}" in r and "connection" in r for r in refused)
    assert stub.script.served == 1


def test_exploit_agent_reuses_the_token_of_its_finished_attempt(
        sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    plan = {"1": [{"do": "save_token"}],
            "2": [{"do": "chat", "model": "stub-model", "token": "saved"},
                  {"do": "chat", "model": "stub-model", "write": "window.py"}]}
    run_dir, events, cards = gateway_run(sealed_pack, tmp_path, stub, plan, max_attempts=2)
    assert cards[0]["outcome"] == "pass" and cards[0]["attempts_used"] == 2
    log = agent_log(run_dir, 2)["steps"]
    assert [s["status"] for s in log] == [401, 200]
    assert "finished attempt" in log[0]["reply"]
    refused = calls(events)[0]
    assert refused["attempt"] == 2 and "finished attempt" in refused["payload"]["refused"]
    assert stub.script.served == 1


def test_exploit_code_under_test_dials_the_gateway_port_while_graded(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    # window.py is imported by the hidden tests: if the grading sandbox could reach the relay
    # port, last_n would return the wrong items and the task would fail.
    code = ("import socket\n"
            "try:\n    socket.create_connection(('127.0.0.1', 7700), timeout=2).close()\n    _REACHED = True\n"
            "except OSError:\n    _REACHED = False\n" + FIX.replace("return items", "return [] if _REACHED else items"))
    server = start([StubReply(text=code, repeat=True)], key=key)
    try:
        run_dir, events, cards = gateway_run(sealed_pack, tmp_path, server,
                                             {"1": [{"do": "chat", "model": "stub-model", "write": "window.py"}]})
    finally:
        server.close()
    assert "_REACHED" in (run_dir / "patches" / f"{TASK}.patch").read_text()
    assert cards[0]["outcome"] == "pass"
    kinds = [e["kind"] for e in events]
    assert [k for k in kinds if k == "model_call"] == ["model_call"]
    assert kinds.index("model_call") < kinds.index("agent_finished")


# --- refusals before the run ----------------------------------------------------------------


def test_run_with_an_unset_key_variable_is_refused_naming_the_variable(
        sealed_pack: Path, tmp_path: Path, stub: StubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(RunRefusal, match=f"{KEY_ENV} that holds its key is not set"):
        gateway_run(sealed_pack, tmp_path, stub, {"1": []})
    assert not (tmp_path / "gw" / "journal.jsonl").exists()


def test_contract_without_endpoints_has_no_endpoints_key_and_keeps_its_digest(sealed_pack: Path, tmp_path: Path) -> None:
    pack = load_pack(sealed_pack)
    contract, _ = new_contract(pack, tmp_path / "c.json", [TASK], host="test machine",
                               agent=AgentSpec(label="a", command="true"), oracle_validity="unavailable")
    locked = lock_contract(contract, "r1", LOCK_TIME, pack)
    assert "model_endpoints" not in model_json(locked)
    with_endpoints = lock_contract(contract.model_copy(update={"model_endpoints": [
        ModelEndpoint(name="e", style="openai-chat", base_url="https://api.example.com/v1", models=["m"],
                      key_env="K")]}), "r1", LOCK_TIME, pack)
    assert '"key_env":"K"' in model_json(with_endpoints).replace(" ", "")
    assert with_endpoints.contract_sha256 != locked.contract_sha256


def test_lock_refuses_endpoints_named_alike_or_priced_for_undeclared_models(sealed_pack: Path, tmp_path: Path) -> None:
    from sealbench.errors import ContractError

    pack = load_pack(sealed_pack)
    contract, _ = new_contract(pack, tmp_path / "c.json", [TASK], host="test machine",
                               agent=AgentSpec(label="a", command="true"), oracle_validity="unavailable")
    one = ModelEndpoint(name="e", style="openai-chat", base_url="https://api.example.com/v1", models=["m"],
                        key_env="K")
    with pytest.raises(ContractError, match="used twice"):
        lock_contract(contract.model_copy(update={"model_endpoints": [one, one]}), "r1", LOCK_TIME, pack)
    priced = one.model_copy(update={"prices": {"other": ModelPrice(input=1, output=1, read_on="2026-11-30")}})
    with pytest.raises(ContractError, match="not among its models"):
        lock_contract(contract.model_copy(update={"model_endpoints": [priced]}), "r1", LOCK_TIME, pack)


@pytest.mark.parametrize("url", ["ftp://h/v1", "https://user:pw@h/v1", "https://h/v1?x=1", "https://h/v1#f",
                                 "https://h/a/../v1", "https://h//v1", "https://h/%2e%2e/v1", "https:///v1"])
def test_endpoint_base_url_that_could_mislead_the_gateway_is_refused(url: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ModelEndpoint(name="e", style="openai-chat", base_url=url, models=["m"], key_env="K")


# --- the scripted model on its own ----------------------------------------------------------


def test_model_stub_command_serves_every_style_streamed_and_not(tmp_path: Path) -> None:
    from sealbench import model_api

    script = tmp_path / "script.toml"
    script.write_text('[[reply]]\ntext = "hello from the stub"\nrepeat = true\n'
                      '[reply.usage]\ninput_tokens = 9\noutput_tokens = 4\ncached_tokens = 2\n')
    proc = subprocess.Popen([sys.executable, "-m", "sealbench.cli", "model-stub", "--script", str(script)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("model-stub listening on http://127.0.0.1:"), line
        port = int(line.split(":")[2].split()[0])
        import http.client

        for style, path in (("openai-chat", "/v1/chat/completions"), ("openai-responses", "/v1/responses"),
                            ("anthropic-messages", "/v1/messages")):
            for streamed in (False, True):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("POST", path, body=json.dumps({"model": "any", "stream": streamed}))
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                assert resp.status == 200
                assert model_api.reply_usage(style, body, streamed) == model_api.Usage(9, 4, 2), (style, streamed)
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_model_stub_refuses_a_script_that_is_not_one(tmp_path: Path, cli: Any) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"text": "not a list"}')
    code, _, err = cli("model-stub", "--script", bad)
    assert code != 0 and "is not a model script" in err


def test_usage_is_read_from_the_final_chunk_of_each_style() -> None:
    from sealbench import model_api

    usage = model_api.Usage(7, 3, 1)
    for style in model_api.PATHS:
        stream = b"".join(model_api.reply_stream(style, "m", ["a", "b"], usage, "id"))
        assert model_api.stream_usage(style, stream) == usage, style
        whole = json.dumps(model_api.reply_body(style, "m", "ab", usage, "id")).encode()
        assert model_api.reply_usage(style, whole, False) == usage, style
        assert model_api.reply_usage(style, b"not json", False) == model_api.NO_USAGE
        assert model_api.stream_usage(style, b"data: {}\n\n") == model_api.NO_USAGE


def test_latency_of_the_stub_is_what_it_was_told(key: str) -> None:
    server = start([StubReply(text="x", repeat=True)], latency_ms=200)
    try:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=10)
        t0 = time.monotonic()
        conn.request("POST", "/v1/chat/completions", body=json.dumps({"model": "m"}))
        conn.getresponse().read()
        elapsed = time.monotonic() - t0
        conn.close()
        assert 0.19 <= elapsed < 2.0
    finally:
        server.close()


# --- the gateway on its own (host side of the socket) ------------------------------------


def test_exploit_agent_trickles_its_body_slower_than_the_client_timeout(stub: StubServer, key: str) -> None:
    from sealbench import events as ev
    from sealbench.gateway import GatewayLimits

    gateway, recorded = unit_gateway(stub, key, GatewayLimits(client_timeout_s=0.5))
    try:
        access = gateway.open_attempt(TASK, 1)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(access.relay.socket))
        sock.settimeout(5)
        t0 = time.monotonic()
        sock.sendall(b"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     + access.token.encode() + b"\r\nContent-Length: 100\r\n\r\n{\"model\":")
        reply = sock.recv(200)
        waited = time.monotonic() - t0
        sock.close()
        access.close()
    finally:
        gateway.close()
    assert reply.startswith(b"HTTP/1.1 408") and 0.4 < waited < 3.0, (reply, waited)
    made = [e for e in recorded if isinstance(e, ev.ModelCall)]
    assert len(made) == 1 and made[0].status == 408 and "did not arrive" in (made[0].refused or "")
    assert stub.script.served == 0


def test_exploit_agent_sends_many_large_bodies_at_once_to_fill_the_gateways_memory(stub: StubServer, key: str) -> None:
    from sealbench import events as ev
    from sealbench.gateway import GatewayLimits

    limits = GatewayLimits(max_body_bytes=1 << 20, buffered_bytes=3 << 20, client_timeout_s=1)
    gateway, recorded = unit_gateway(stub, key, limits)
    socks: list[socket.socket] = []
    try:
        access = gateway.open_attempt(TASK, 1)
        head = (b"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + access.token.encode()
                + b"\r\nContent-Length: " + str(1 << 20).encode() + b"\r\n\r\n")
        for _ in range(6):  # each holds most of a body in the gateway, and never sends the rest
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(access.relay.socket))
            sock.settimeout(5)
            sock.sendall(head + b"x" * ((1 << 20) - 10))
            socks.append(sock)
        replies = []
        for sock in socks:
            try:
                replies.append(sock.recv(64))
            except TimeoutError:
                replies.append(b"")
        for sock in socks:
            sock.close()
        access.close()
    finally:
        gateway.close()
    refused = [e for e in recorded if isinstance(e, ev.ModelCall) and e.status == 503]
    assert refused and all("in flight" in (e.refused or "") for e in refused)
    assert sum(r.startswith(b"HTTP/1.1 503") for r in replies) == len(refused) >= 3
    assert all(r.startswith((b"HTTP/1.1 503", b"HTTP/1.1 408")) for r in replies), replies  # none waits forever
    assert stub.script.served == 0


# --- infrastructure is not the agent ------------------------------------------------------


def _stub_of(key: str, replies: list[StubReply]) -> StubServer:
    return start(replies, key=key)


class _Hangup:
    """An endpoint that accepts each connection and closes it unanswered (a crashed upstream
    behind a live load balancer): the run starts, and every call fails."""

    def __init__(self) -> None:
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen()
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept, which then ends
        self._server.close()


def test_exploit_upstream_stopped_is_a_harness_error_that_refuses_the_rate_never_the_agent_s_fail(
        sealed_pack: Path, tmp_path: Path, key: str, cli: Any) -> None:
    # The declared endpoint fails every call of the run (one that accepts no connection at all
    # is refused before the run: tests/test_never_started.py).
    dead = _Hangup()
    plan = {"1": [{"do": "chat", "model": "stub-model", "write": "window.py"}]}
    try:
        run_dir, events, cards = gateway_run(sealed_pack, tmp_path, dead, plan, name="down")
    finally:
        dead.close()
    made = calls(events)
    assert [c["payload"]["status"] for c in made] == [502]
    assert made[0]["payload"]["error"].startswith("the model endpoint failed")
    errors = [e for e in events if e["kind"] == "harness_error"]
    assert len(errors) == 1 and "the model endpoint failed while attempt 1 ran" in errors[0]["payload"]["error"]
    assert cards[0]["outcome"] == "harness_error"
    code, out, err = cli("score", run_dir / "scoring_contract.json", run_dir)
    assert code == 3 and "task_pass" not in out.split("why")[0]
    assert "the model endpoint failed" in out + err and "0 of 1" not in out
    # The summary's first line under "why" says the endpoint failed, never that the agent did.
    why = out.split("did not pass", 1)[1].splitlines()
    assert why[1].strip().startswith("the model endpoint failed while 1 of the 1 attempt(s)"), out
    assert "check the agent" not in out


@pytest.mark.parametrize("status", [429, 503])
def test_an_upstream_error_status_at_the_attempt_s_end_is_passed_through_and_not_the_agent_s(
        sealed_pack: Path, tmp_path: Path, key: str, status: int) -> None:
    server = _stub_of(key, [StubReply(status=status, repeat=True)])
    try:
        plan = {"1": [{"do": "chat", "model": "stub-model", "write": "window.py"}]}
        run_dir, events, cards = gateway_run(sealed_pack, tmp_path, server, plan, name=f"st{status}")
    finally:
        server.close()
    # Passed through as the upstream sent it, once: the gateway never retries on its own.
    assert [s["status"] for s in agent_log(run_dir)["steps"]] == [status]
    assert [c["payload"]["status"] for c in calls(events)] == [status]
    assert cards[0]["outcome"] == "harness_error"
    error = next(e for e in events if e["kind"] == "harness_error")["payload"]["error"]
    assert f"answered HTTP {status}" in error


def test_an_upstream_that_recovered_before_the_end_leaves_the_result_to_the_agent(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    server = _stub_of(key, [StubReply(status=503), StubReply(text="def last_n(items, n):\n    return []\n",
                                                             repeat=True)])
    try:
        plan = {"1": [{"do": "chat", "model": "stub-model"},
                      {"do": "chat", "model": "stub-model", "write": "window.py"}]}
        _, events, cards = gateway_run(sealed_pack, tmp_path, server, plan, name="recovered")
    finally:
        server.close()
    assert [c["payload"]["status"] for c in calls(events)] == [503, 200]
    assert cards[0]["outcome"] == "fail"  # its last call was answered: a wrong fix is the agent's
    assert not [e for e in events if e["kind"] == "harness_error"]


# --- caps on model use beside the retry and wall-clock caps ---------------------------------

THREE_CALLS = {"1": [{"do": "chat", "model": "stub-model"}, {"do": "chat", "model": "stub-model"},
                     {"do": "chat", "model": "stub-model", "write": "window.py"}]}


@pytest.mark.parametrize(("cap", "value"), [("max_model_tokens", 200), ("max_model_calls", 2)])
def test_exploit_agent_keeps_calling_past_a_cap_and_is_refused_with_the_cap_named(
        sealed_pack: Path, tmp_path: Path, stub: StubServer, cap: str, value: int) -> None:
    # Each call uses 120 input and 30 output tokens: after two, 300 tokens and 2 calls are used.
    run_dir, events, cards = gateway_run(sealed_pack, tmp_path, stub, THREE_CALLS, name=cap.replace("_", "-"),
                                         caps={cap: value}, probe=True)
    assert [s["status"] for s in agent_log(run_dir)["steps"]] == [200, 200, 429]
    made = [c["payload"] for c in calls(events)]
    assert [c.get("cap") for c in made] == [None, None, cap]
    assert f"({cap} {value}) is reached" in made[2]["refused"]
    assert "no more model calls" in agent_log(run_dir)["steps"][2]["reply"]
    assert cards[0]["outcome"] == "fail"  # the fix never arrived: its write came with the refused call
    assert cards[0]["model_usage"]["cap_reached"] == cap and cards[0]["model_usage"]["refused"] == 1
    bundle = make_bundle(run_dir, tmp_path / "bundles")
    verify_bundle(bundle)  # raises VerificationFailed when anything does not re-derive


def test_a_cost_cap_binds_across_attempts_by_the_locked_prices(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    server = start([StubReply(text="def last_n(items, n):\n    return []\n", model="stub-model", repeat=True,
                              usage=StubUsage(input_tokens=120, output_tokens=30, cached_tokens=100))], key=key)
    try:
        # 20 uncached x 1.0 + 100 cached x 0.5 + 30 out x 2.0 per million: 130e-6 per call.
        plan = {"1": [{"do": "chat", "model": "stub-model", "write": "window.py"}],
                "2": [{"do": "chat", "model": "stub-model", "write": "window.py"},
                      {"do": "chat", "model": "stub-model", "write": "window.py"}]}
        only_priced = [e for e in endpoints(server) if e.prices]
        _, events, cards = _run_with_endpoints(sealed_pack, tmp_path, server, plan, only_priced,
                                                     max_attempts=2, caps={"max_model_cost": 0.0002})
    finally:
        server.close()
    made = [(c["attempt"], c["payload"]["status"], c["payload"].get("cap")) for c in calls(events)]
    assert made == [(1, 200, None), (2, 200, None), (2, 429, "max_model_cost")]
    assert cards[0]["model_usage"]["cap_reached"] == "max_model_cost"
    assert cards[0]["model_usage"]["cost"] == pytest.approx(260e-6)


def _run_with_endpoints(sealed_pack: Path, tmp_path: Path, server: StubServer, plan: dict[str, Any],
                        declared: list[ModelEndpoint], *, max_attempts: int, caps: dict[str, Any]
                        ) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]:
    agent_dir = tmp_path / "cost-agent"
    agent_dir.mkdir()
    shutil.copy(AGENT, agent_dir / "agent.py")
    (agent_dir / "plan.json").write_text(json.dumps(plan))
    contract_file = tmp_path / "cost.contract.json"
    pack = load_pack(sealed_pack)
    contract, _ = new_contract(pack, contract_file, [TASK], host="test machine", max_attempts=max_attempts,
                               agent=AgentSpec(label="gateway test agent", command=f"python {agent_dir}/agent.py",
                                               mounts=[str(agent_dir)]),
                               oracle_validity="unavailable", model_caps=caps)
    contract = contract.model_copy(update={"model_endpoints": declared})
    write_atomic(contract_file, model_json(lock_contract(contract, "cost", LOCK_TIME, pack)))
    run_dir = tmp_path / "cost"
    execute(contract_file, run_dir, RunOptions(progress=False))
    events = read_chain(run_dir / "journal.jsonl").events
    cards = [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]
    return run_dir, events, cards


def test_caps_are_refused_at_lock_without_endpoints_or_without_a_price_for_every_model(
        sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    from sealbench.errors import ContractError

    pack = load_pack(sealed_pack)
    draft, _ = new_contract(pack, tmp_path / "c.json", [TASK], host="test machine",
                            agent=AgentSpec(label="a", command="true"), oracle_validity="unavailable",
                            model_caps={"max_model_cost": 1.0})
    with pytest.raises(ContractError, match="needs model_endpoints"):
        lock_contract(draft, "caps", LOCK_TIME, pack)
    with pytest.raises(ContractError, match=r"a locked price for every model .*anthropic/claude-stub"):
        lock_contract(draft.model_copy(update={"model_endpoints": endpoints(stub)}), "caps", LOCK_TIME, pack)
    with pytest.raises(ContractError, match=r"budget: .*max_model_calls"):
        new_contract(pack, tmp_path / "c.json", [TASK], host="test machine", agent=AgentSpec(label="a", command="true"),
                     oracle_validity="unavailable", model_caps={"max_model_calls": 0})


def test_a_resumed_task_s_caps_count_the_calls_made_before_the_crash() -> None:
    from sealbench import events as ev
    from sealbench.formats import Budget
    from sealbench.gateway import ledger_of

    declared = [ModelEndpoint(name="openai", style="openai-chat", base_url="http://127.0.0.1:9/v1",
                              models=["m"], key_env=KEY_ENV,
                              prices={"m": ModelPrice(input=1.0, output=2.0, read_on="2026-11-30")})]
    made = [ev.ModelCall(task_id="t", attempt=1, endpoint="openai", model="m", status=200, input_tokens=100,
                         output_tokens=10),
            ev.ModelCall(task_id="t", attempt=1, endpoint="openai", model="m", status=403, refused="undeclared"),
            ev.ModelCall(task_id="t", attempt=2, endpoint="openai", model="m", status=502, error="down")]
    ledger = ledger_of(made, declared)
    assert (ledger.calls, ledger.tokens, ledger.tokens_known) == (2, 110, True)
    assert ledger.cost == pytest.approx(120e-6) and ledger.cost_known
    budget = Budget(max_attempts=2, wall_clock_s=60, max_model_calls=3, max_model_tokens=111)
    assert ledger.reached(budget) is None
    assert ledger.reached(budget.model_copy(update={"max_model_calls": 2})) == "max_model_calls"
    unreported = ledger_of([*made, ev.ModelCall(task_id="t", attempt=2, endpoint="openai", model="m", status=200)],
                           declared)
    # A reply without usage: the use is unknown, and the token cap is taken as reached.
    assert unreported.reached(budget.model_copy(update={"max_model_calls": None})) == "max_model_tokens"


# --- replay: a recorded run re-executed with nothing leaving the machine -------------------


def _recorded_run(sealed_pack: Path, tmp_path: Path, stub: StubServer, plan: dict[str, Any]) -> tuple[Path, Path]:
    """A run through the stub with no narration probe, and its bundle: (contract file, bundle)."""
    agent_dir = tmp_path / "replay-agent"
    agent_dir.mkdir()
    shutil.copy(AGENT, agent_dir / "agent.py")
    (agent_dir / "plan.json").write_text(json.dumps(plan))
    contract_file = tmp_path / "replay.contract.json"
    pack = load_pack(sealed_pack)
    contract, _ = new_contract(pack, contract_file, [TASK], host="test machine", max_attempts=1,
                               agent=AgentSpec(label="gateway test agent", command=f"python {agent_dir}/agent.py",
                                               mounts=[str(agent_dir)]),
                               oracle_validity="unavailable", narration_probe=False)
    contract = contract.model_copy(update={"model_endpoints": endpoints(stub)})
    write_atomic(contract_file, model_json(lock_contract(contract, "recorded", LOCK_TIME, pack)))
    execute(contract_file, tmp_path / "recorded", RunOptions(progress=False))
    return contract_file, make_bundle(tmp_path / "recorded", tmp_path / "bundles")


REPLAYED = {"1": [{"do": "chat", "model": "stub-model", "stream": True, "write": "window.py"},
                  {"do": "anthropic", "model": "claude-stub"},
                  {"do": "chat", "model": "undeclared-model"}]}


def test_a_recorded_run_replays_with_the_upstream_stopped_to_the_same_patches_and_scorecards(
        sealed_pack: Path, tmp_path: Path, stub: StubServer, monkeypatch: pytest.MonkeyPatch, cli: Any) -> None:
    contract_file, bundle = _recorded_run(sealed_pack, tmp_path, stub, REPLAYED)
    stub.close()  # nothing answers upstream now ...
    monkeypatch.delenv(KEY_ENV)  # ... and no key is there to read
    code, out, err = cli("run", contract_file, "--replay", bundle, "--out", tmp_path / "replay", "--no-progress")
    assert code == 0, (out, err)
    assert "a replay of run recorded" in out and "measures nothing" in out  # the summary says so
    replay_dir = tmp_path / "replay"
    events = read_chain(replay_dir / "journal.jsonl").events
    made = [c["payload"] for c in calls(events)]
    assert [(c["status"], c.get("replayed"), c.get("refused") is not None) for c in made] == [
        (200, True, False), (200, True, False), (403, None, True)]  # the gateway's own refusal, decided again
    first = events[0]["payload"]
    assert first["replay_of"]["run_id"] == "recorded" and first["replay_of"]["run_nonce"]
    original = [json.loads(line) for line in (bundle / "scorecards.jsonl").read_text().splitlines()]
    again = [json.loads(line) for line in (replay_dir / "scorecards.jsonl").read_text().splitlines()]
    keep = ("outcome", "passed", "patch_sha256", "attempts_used", "first_attempt_passed", "model_usage")
    assert [{k: c.get(k) for k in keep} for c in again] == [{k: c.get(k) for k in keep} for c in original]
    assert again[0]["outcome"] == "pass"
    # A reproduction is not a run of the run_id: the index does not hold it, and compare refuses it.
    code, listed, _ = cli("runs", "list")
    assert "recorded" in listed and str(replay_dir) not in listed
    replayed_bundle = make_bundle(replay_dir, tmp_path / "replayed-bundles")
    code, _, err = cli("runs", "rebuild", tmp_path)  # rebuilt from the files, it still is none
    assert code == 0, err
    code, listed, _ = cli("runs", "show", "recorded")
    assert str(replay_dir) not in listed and str(replayed_bundle) not in listed
    code, out, _ = cli("verify", replayed_bundle)
    assert code == 0 and "a replay of run recorded" in out
    code, _, err = cli("compare", bundle, replayed_bundle)
    assert code == 3 and "is a replay of run recorded" in err


def test_exploit_an_agent_that_asks_something_else_in_a_replay_diverges_at_that_call(
        sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    contract_file, bundle = _recorded_run(sealed_pack, tmp_path, stub, REPLAYED)
    stub.close()
    # The agent changes its mind about its second request: the replay cannot answer it.
    changed = json.loads(json.dumps(REPLAYED))
    changed["1"][1]["content"] = "fix it differently"
    (tmp_path / "replay-agent" / "plan.json").write_text(json.dumps(changed))
    execute(contract_file, tmp_path / "replay", RunOptions(progress=False, replay=bundle))
    made = [c["payload"] for c in calls(read_chain(tmp_path / "replay" / "journal.jsonl").events)]
    assert [c["status"] for c in made] == [200, 409, 403]
    assert made[1]["diverged"] == "the request differs from the recorded call 1 at messages.0.content"
    assert made[1]["refused"].startswith("replay: the request differs")


def test_replay_refuses_a_bundle_of_another_contract(sealed_pack: Path, tmp_path: Path, stub: StubServer) -> None:
    contract_file, bundle = _recorded_run(sealed_pack, tmp_path, stub, REPLAYED)
    other = tmp_path / "other.contract.json"
    data = json.loads(contract_file.read_text())
    pack = load_pack(sealed_pack)
    draft, _ = new_contract(pack, other, [TASK], host="test machine", max_attempts=2,
                            agent=AgentSpec(label="x", command="true"), oracle_validity="unavailable",
                            narration_probe=False)
    draft = draft.model_copy(update={"model_endpoints": endpoints(stub)})
    write_atomic(other, model_json(lock_contract(draft, "other", LOCK_TIME, pack)))
    assert data["run_id"] == "recorded"
    with pytest.raises(RunRefusal, match="holds another contract"):
        execute(other, tmp_path / "replay", RunOptions(progress=False, replay=bundle))


# --- malformed HTTP and trickled headers: refused, closed and journaled ---------------------


def test_exploit_agent_sends_malformed_http_and_it_is_refused_and_journaled_while_calls_go_on(
        stub: StubServer, key: str) -> None:
    from sealbench import events as ev

    gateway, recorded = unit_gateway(stub, key)
    try:
        access = gateway.open_attempt(TASK, 1)
        replies = []
        for garbage in (b"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
                        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n",
                        b"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(str(access.relay.socket))
                sock.settimeout(5)
                try:
                    sock.sendall(garbage)
                    replies.append(sock.recv(200))
                except ConnectionResetError:  # refused and closed before all of it was read
                    replies.append(b"reset")
        # A well-formed call on the same attempt is answered as ever.
        import http.client

        class _Unix(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(str(access.relay.socket))

        conn = _Unix("x")
        conn.request("POST", "/openai/chat/completions", body=json.dumps({"model": "stub-model", "messages": []}),
                     headers={"Authorization": f"Bearer {access.token}", "Content-Type": "application/json"})
        ok = conn.getresponse().status
        conn.close()
        access.close()
    finally:
        gateway.close()
    assert all(re.match(rb"HTTP/1\.[01] 4\d\d ", r) or r == b"reset" for r in replies), replies
    assert re.match(rb"HTTP/1\.[01] 400 ", replies[0]), replies
    assert ok == 200
    made = [e for e in recorded if isinstance(e, ev.ModelCall)]
    malformed = [m for m in made if (m.refused or "").startswith("malformed HTTP")]
    assert len(malformed) == 3 and all(m.status is not None and 400 <= m.status < 500 for m in malformed)
    assert [m.status for m in made if m.refused is None] == [200]


def test_exploit_agent_trickles_its_headers_and_the_connection_is_closed_and_journaled(
        stub: StubServer, key: str) -> None:
    from sealbench import events as ev
    from sealbench.gateway import GatewayLimits

    gateway, recorded = unit_gateway(stub, key, GatewayLimits(client_timeout_s=0.5))
    try:
        access = gateway.open_attempt(TASK, 1)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(access.relay.socket))
        sock.settimeout(5)
        t0 = time.monotonic()
        sock.sendall(b"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nAuthoriz")  # and never the rest
        closed = sock.recv(200)
        waited = time.monotonic() - t0
        sock.close()
        access.close()
    finally:
        gateway.close()
    assert closed == b"" and 0.4 < waited < 3.0, (closed, waited)
    made = [e for e in recorded if isinstance(e, ev.ModelCall)]
    assert len(made) == 1 and "headers did not arrive within 0.5 s" in (made[0].refused or "")
    assert stub.script.served == 0
