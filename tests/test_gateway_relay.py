"""The gateway's relay of a call, against hostile agents and faulty upstreams, in the real sandbox.

An agent that cuts or resets its streams, sends a body with a key twice; an upstream that
echoes the request's headers, hangs, or closes a keep-alive connection as a request goes out.
Each runs ``gateway_agent.py`` in the bubblewrap sandbox through the real runner, against
``model-stub`` on loopback playing the upstream (its ``pause_ms``, ``hang``, ``reflect`` and
``disconnect`` replies).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import LOCK_TIME, needs_bwrap
from sealbench import model_api
from sealbench.model_stub import StubReply, StubServer, StubUsage, start
from test_gateway import FIX, KEY_ENV, TASK, agent_log, calls, gateway_run

pytestmark = needs_bwrap

LONG = "".join(f"line {n:05d} of a long reply\n" for n in range(4000))
"""About 100 KB of text: 6,000 stream pieces, still coming when the agent cuts."""


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A random key in the host environment, as a user would export it."""
    value = "sk-test-" + secrets.token_hex(20)
    monkeypatch.setenv(KEY_ENV, value)
    return value


@contextlib.contextmanager
def _stub(key: str, *replies: StubReply) -> Iterator[StubServer]:
    server = start(list(replies), key=key)
    try:
        yield server
    finally:
        server.close()


def _harness_errors(events: list[dict[str, Any]]) -> list[str]:
    return [e["payload"]["error"] for e in events if e["kind"] == "harness_error"]


# --- 1. a stream cut before its last event has no usage -----------------------------------


def test_a_stream_cut_before_its_last_event_has_no_usage_in_every_style() -> None:
    usage = model_api.Usage(50, 40, 0)
    for style in model_api.PATHS:
        events = list(model_api.reply_stream(style, "m", ["a", "b", "c"], usage, "id"))
        assert model_api.stream_usage(style, b"".join(events)) == usage, style
        for n in range(len(events)):  # every cut before the last event
            assert model_api.stream_usage(style, b"".join(events[:n])) == model_api.NO_USAGE, (style, n)


def test_exploit_agent_cuts_its_anthropic_streams_to_hide_their_output_tokens_from_the_cap(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    # message_start says output_tokens 1; the real 40 come in message_delta, at the end.
    slow = StubReply(text=LONG[:2000], model="claude-stub", repeat=True, pause_ms=20,
                     usage=StubUsage(input_tokens=50, output_tokens=40))
    with _stub(key, slow) as server:
        cut = {"do": "wire", "style": "anthropic", "model": "claude-stub", "stream": True, "deltas": 3}
        plan = {"1": [cut] * 5}
        _, events, cards = gateway_run(sealed_pack, tmp_path, server, plan, name="cut",
                                       caps={"max_model_tokens": 300})
    made = [c["payload"] for c in calls(events)]
    assert [c["status"] for c in made] == [200, 429, 429, 429, 429]
    # Cut before message_stop: what the call used is unknown (not 51), and the cap is taken as reached.
    assert made[0]["input_tokens"] is None and made[0]["output_tokens"] is None
    assert made[0]["error"] == "the agent closed the connection before the reply ended"
    assert all(c["cap"] == "max_model_tokens" and "use unknown" in c["refused"] for c in made[1:])
    assert cards[0]["model_usage"]["unreported"] == 1 and cards[0]["model_usage"]["cap_reached"] == "max_model_tokens"
    assert not _harness_errors(events)


# --- 2. the agent's own reset is not the endpoint failing ---------------------------------


def test_exploit_agent_resets_its_streams_and_the_endpoint_is_not_blamed_for_it(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    fast = StubReply(text=LONG * 4, model="stub-model", repeat=True, usage=StubUsage(input_tokens=10, output_tokens=10))
    with _stub(key, fast) as server:
        reset = {"do": "wire", "model": "stub-model", "stream": True, "deltas": 3, "reset": True}
        closed = {"do": "wire", "model": "stub-model", "stream": True, "deltas": 3}
        plan = {"1": [reset, closed, reset, closed, reset, closed, reset]}
        _, events, cards = gateway_run(sealed_pack, tmp_path, server, plan, name="reset")
    made = [c["payload"] for c in calls(events)]
    assert len(made) == 7 and all(c["status"] == 200 for c in made)
    assert {c["error"] for c in made} == {"the agent closed the connection before the reply ended"}
    # The upstream was healthy throughout: the attempt (it wrote no fix) is the agent's fail.
    assert not _harness_errors(events)
    assert cards[0]["outcome"] == "fail" and cards[0]["model_usage"]["failed"] == 0


# --- 3. the key never reaches the agent, whatever the upstream echoes ------------------------


def test_redaction_finds_a_key_split_anywhere_across_chunks() -> None:
    from sealbench.gateway import _Redactor

    keys = [b"sk-test-0123456789abcdef", b"sk-other-key"]
    text = b"x-api-key: sk-test-0123456789abcdef; again sk-test-0123456789abcdefsk-other-key, sk-test-01 end s"
    whole = text.replace(keys[0], b"[key removed]").replace(keys[1], b"[key removed]")
    for cut in range(len(text) + 1):
        for cut2 in range(cut, len(text) + 1, 7):
            r = _Redactor(keys)
            out = r.feed(text[:cut]) + r.feed(text[cut:cut2]) + r.feed(text[cut2:]) + r.flush()
            assert out == whole, (cut, cut2)
    r = _Redactor(keys)
    assert b"".join(r.feed(text[i:i + 1]) for i in range(len(text))) + r.flush() == whole


def test_exploit_upstream_reflects_the_request_headers_and_the_agent_never_sees_the_key(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    # The upstream echoes the request's headers in its reply headers and body, each write cut
    # in the middle of the key (two chunks at the gateway).
    echo = StubReply(repeat=True, reflect=True)
    with _stub(key, echo) as server:
        plan = {"1": [{"do": "wire", "model": "stub-model", "save": "chat.txt"},
                      {"do": "wire", "model": "stub-model", "stream": True, "save": "chat-stream.txt"},
                      {"do": "wire", "style": "anthropic", "model": "claude-stub", "save": "messages.txt"},
                      {"do": "wire", "style": "anthropic", "model": "claude-stub", "stream": True,
                       "save": "messages-stream.txt"}]}
        run_dir, events, _ = gateway_run(sealed_pack, tmp_path, server, plan, name="reflect")
    assert [c["payload"]["status"] for c in calls(events)] == [200] * 4
    ws = run_dir / "work" / TASK / "ws"
    for name in ("chat.txt", "chat-stream.txt", "messages.txt", "messages-stream.txt"):
        seen = (ws / name).read_bytes()
        assert b"HTTP/1.1 200" in seen, name
        assert key.encode() not in seen, name  # not in a header, not in the body
        head, _, body = seen.partition(b"\r\n\r\n")
        assert b"[key removed]" in head.lower().split(b"x-request-id:")[1].split(b"\r\n")[0], name
        assert b"[key removed]" in body, name


def _as_the_agent_reads(raw: bytes) -> tuple[bytes, bytes]:
    """A saved reply's head, and its body as an HTTP client reads it: de-chunked, decompressed."""
    head, _, body = raw.partition(b"\r\n\r\n")
    fields = head.lower()
    if b"transfer-encoding: chunked" in fields:
        out, rest = b"", body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        body = out
    if b"content-encoding: gzip" in fields:
        body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
    return head, body


def test_exploit_upstream_echoes_the_key_compressed_though_asked_for_identity(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    # Byte-matching cannot find the key in gzip; the gateway decodes what aiohttp can and
    # refuses any other encoding.
    echo = StubReply(repeat=True, reflect=True, compress=True)
    with _stub(key, echo) as server:
        plan = {"1": [{"do": "wire", "model": "stub-model", "save": "chat.txt"},
                      {"do": "wire", "model": "stub-model", "stream": True, "save": "chat-stream.txt"}]}
        run_dir, events, _ = gateway_run(sealed_pack, tmp_path, server, plan, name="gzip")
    assert [c["payload"]["status"] for c in calls(events)] == [200, 200]
    ws = run_dir / "work" / TASK / "ws"
    for name in ("chat.txt", "chat-stream.txt"):
        head, body = _as_the_agent_reads((ws / name).read_bytes())
        assert key.encode() not in body and b"[key removed]" in body, name
        assert b"content-encoding" not in head.lower(), name  # decoded for the agent


# --- 4. a hanging upstream is the endpoint's failure, never the agent's timeout ---------------


@pytest.mark.parametrize("hang", ["reply", "stream"])
def test_exploit_upstream_hangs_and_the_attempt_is_the_endpoint_s_failure_not_the_agent_s_timeout(
        sealed_pack: Path, tmp_path: Path, key: str, hang: str) -> None:
    silent = StubReply(text=LONG[:200], repeat=True, hang=hang)
    with _stub(key, silent) as server:
        # The agent waits as the SDKs do (no timeout of its own), then keeps on waiting.
        plan = {"1": [{"do": "chat", "model": "stub-model", "stream": hang == "stream", "timeout": None},
                      {"do": "sleep", "seconds": 60}]}
        _, events, cards = gateway_run(sealed_pack, tmp_path, server, plan, name=f"hang-{hang}",
                                       caps={"wall_clock_s": 8}, endpoint_update={"read_timeout_s": 1.5})
    made = [c["payload"] for c in calls(events)]
    assert len(made) == 1 and 1400 <= made[0]["latency_ms"] < 5000
    if hang == "reply":
        assert made[0]["status"] == 504 and made[0]["error"] == "the model endpoint failed: no reply within 1.5 s"
    else:
        assert made[0]["status"] == 200
        assert made[0]["error"] == "the model endpoint failed mid-reply: silent for 1.5 s"
    agent = next(e for e in events if e["kind"] == "agent_finished")["payload"]
    assert agent["timed_out"]  # the agent ran out its time, but not by its own doing:
    assert cards[0]["outcome"] == "harness_error"
    assert any("the model endpoint failed while attempt 1 ran" in e for e in _harness_errors(events))


def test_the_read_timeout_is_the_endpoint_s_or_a_default_under_the_wall_clock(
        sealed_pack: Path, tmp_path: Path) -> None:
    from sealbench.contract import lock_contract, new_contract
    from sealbench.errors import ContractError
    from sealbench.formats import AgentSpec, Budget, ModelEndpoint
    from sealbench.gateway import Gateway
    from sealbench.pack import load_pack

    endpoint = ModelEndpoint(name="o", style="openai-chat", base_url="http://127.0.0.1:9/v1", models=["m"],
                             key_env=KEY_ENV)

    def read_s(wall: float, own: float | None = None) -> float:
        gateway = Gateway([endpoint], {}, print, str, budget=Budget(max_attempts=1, wall_clock_s=wall))
        return gateway.read_timeout_s(endpoint.model_copy(update={"read_timeout_s": own}))

    assert (read_s(3600), read_s(600), read_s(60), read_s(60, 50)) == (300, 150, 15, 50)
    pack = load_pack(sealed_pack)
    draft, _ = new_contract(pack, tmp_path / "c.json", [TASK], host="test machine", wall_clock_s=60,
                            agent=AgentSpec(label="a", command="true"), oracle_validity="unavailable")
    slow = endpoint.model_copy(update={"read_timeout_s": 60})
    with pytest.raises(ContractError, match="read_timeout_s 60 is not under the wall-clock cap of 60 s"):
        lock_contract(draft.model_copy(update={"model_endpoints": [slow]}), "rt", LOCK_TIME, pack)
    assert "read_timeout_s" not in json.dumps(endpoint.model_dump(mode="json"))  # absent: digests as before


# --- 5. a key twice in one object is refused ------------------------------------------------


def test_exploit_agent_names_the_model_twice_so_gateway_and_upstream_read_two_models(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    answer = StubReply(text=FIX, repeat=True)
    bodies = ['{"model": "gpt-undeclared", "model": "stub-model", "messages": []}',
              '{"model": "stub-model", "messages": [], "model": "gpt-undeclared"}',
              '{"model": "stub-model", "messages": [{"role": "user", "content": "a", "content": "b"}]}',
              '{"model": "stub-model", "mod\\u0065l": "gpt-undeclared", "messages": []}']
    with _stub(key, answer) as server:
        plan = {"1": [{"do": "raw", "path": "/openai/chat/completions", "body_text": b} for b in bodies]}
        run_dir, events, _ = gateway_run(sealed_pack, tmp_path, server, plan, name="dup")
        served = server.script.served
    assert [s["status"] for s in agent_log(run_dir)["steps"]] == [400] * 4
    made = [c["payload"] for c in calls(events)]
    assert [c["status"] for c in made] == [400] * 4 and all("twice in one object" in c["refused"] for c in made)
    assert served == 0


def test_exploit_agent_names_the_model_again_in_another_case_for_an_upstream_that_ignores_case(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    # An upstream decoding with Go's encoding/json matches "MODEL", "Model" and "\u017ftream"
    # to its model and stream fields, the last one winning: refused before anything is sent.
    answer = StubReply(text=FIX, repeat=True)
    bodies = ['{"model": "stub-model", "MODEL": "gpt-undeclared", "messages": []}',
              '{"Model": "gpt-undeclared", "model": "stub-model", "messages": []}',
              '{"model": "stub-model", "stream": false, "\u017ftream": true, "messages": []}']
    with _stub(key, answer) as server:
        plan = {"1": [{"do": "raw", "path": "/openai/chat/completions", "body_text": b} for b in bodies]
                + [{"do": "chat", "model": "stub-model", "write": "window.py"}]}
        run_dir, events, _ = gateway_run(sealed_pack, tmp_path, server, plan, name="case")
        served = server.script.served
    assert [s["status"] for s in agent_log(run_dir)["steps"]] == [400] * 3 + [200]
    made = [c["payload"] for c in calls(events)]
    assert [c["status"] for c in made] == [400] * 3 + [200]
    assert all("differ only by case" in c["refused"] for c in made[:3])
    assert served == 1


# --- 6. a keep-alive connection closed as the request goes out is tried again, once ----------


def test_a_pooled_connection_the_upstream_closes_as_a_request_goes_out_is_retried_once(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:
    # The stub closes a connection without a byte of reply where told: on the first request (a
    # new connection: not retried, the endpoint failed) and on the third (a pooled one: retried).
    replies = [StubReply(disconnect=True), StubReply(text="thinking"), StubReply(disconnect=True),
               StubReply(text=FIX, repeat=True)]
    with _stub(key, *replies) as server:
        plan = {"1": [{"do": "chat", "model": "stub-model"}, {"do": "chat", "model": "stub-model"},
                      {"do": "chat", "model": "stub-model", "write": "window.py"}]}
        run_dir, events, cards = gateway_run(sealed_pack, tmp_path, server, plan, name="keepalive")
        served = server.script.served
    assert [s["status"] for s in agent_log(run_dir)["steps"]] == [502, 200, 200]
    made = [c["payload"] for c in calls(events)]
    assert [c["status"] for c in made] == [502, 200, 200]
    assert made[0]["error"].startswith("the model endpoint failed: ServerDisconnectedError")
    assert served == 4  # the third call reached the stub twice
    assert cards[0]["outcome"] == "pass"



def test_exploit_agent_stops_reading_and_the_gateway_s_write_error_is_the_agent_s(key: str) -> None:
    # Host side of the socket, where the agent's end can be shut for reading alone: the reply's
    # first events come at once, and the gateway's second write finds the connection closing.
    from sealbench import events as ev
    from test_gateway import unit_gateway

    slow = StubReply(text=LONG[:400], model="claude-stub", repeat=True, pause_ms=50)
    with _stub(key, slow) as server:
        gateway, recorded = unit_gateway(server, key)
        try:
            access = gateway.open_attempt(TASK, 1)
            body = json.dumps({"model": "claude-stub", "stream": True, "max_tokens": 9, "messages": []}).encode()
            for _ in range(3):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(str(access.relay.socket))
                sock.sendall(b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + access.token.encode()
                             + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                sock.shutdown(socket.SHUT_RD)
                time.sleep(0.5)
                sock.close()
            access.close()
            failure = access.endpoint_failure()
        finally:
            gateway.close()
    made = [e for e in recorded if isinstance(e, ev.ModelCall)]
    assert len(made) == 3 and {m.error for m in made} == {"the agent closed the connection before the reply ended"}
    assert failure is None
