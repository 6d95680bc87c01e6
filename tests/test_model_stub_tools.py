"""The scripted model's tool-call replies, in each API style, streamed and not, over real HTTP.

Each test starts ``model-stub`` in this process (:func:`sealbench.model_stub.start`) and reads
its replies with ``http.client`` the way the official SDKs assemble them: whole bodies as
parsed JSON, streams by accumulating their events (chat ``delta.tool_calls`` by ``index``,
Responses items by ``output_index``, Anthropic blocks by ``index``).
"""

from __future__ import annotations

import hashlib
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from sealbench import model_api
from sealbench.errors import UsageError
from sealbench.model_stub import StubReply, StubServer, StubToolCall, StubUsage, load_script, start

STYLES = {"openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses",
          "anthropic-messages": "/v1/messages"}
USAGE = StubUsage(input_tokens=11, output_tokens=5, cached_tokens=3)
# Long enough that the arguments' JSON is streamed in several pieces, and not only ASCII.
PATCH = "def add(a, b):\n    return a + b  # naïve, but \"right\"\n" * 3
WRITE = StubToolCall(name="write_file", arguments={"path": "src/add.py", "content": PATCH}, id="call_write")
RUN = StubToolCall(name="run", arguments={"argv": ["pytest", "-q"], "timeout": 30, "env": None, "check": True})


class Parsed(NamedTuple):
    """What a client makes of a reply."""

    text: str
    calls: list[tuple[str, str, Any]]   # (id, name, arguments as a parsed object)
    stop: str | None                    # finish_reason / stop_reason / the response status
    usage: model_api.Usage


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[StubServer] = []

    def run(replies: list[StubReply]) -> StubServer:
        servers.append(start(replies))
        return servers[-1]

    yield run
    for server in servers:
        server.close()


def post(server: StubServer, style: str, streamed: bool, model: str = "stub-model") -> bytes:
    body: dict[str, Any] = {"model": model, "stream": streamed}
    if style == "openai-chat":
        body |= {"messages": [{"role": "user", "content": "fix it"}], "stream_options": {"include_usage": True}}
    elif style == "openai-responses":
        body |= {"input": "fix it"}
    else:
        body |= {"max_tokens": 100, "messages": [{"role": "user", "content": "fix it"}]}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", STYLES[style], body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status == 200, data
        want = "text/event-stream" if streamed else "application/json"
        assert (resp.getheader("Content-Type") or "").startswith(want)
        return data
    finally:
        conn.close()


def events(data: bytes) -> list[tuple[str | None, Any]]:
    """(event name, data object) of each server-sent event."""
    out: list[tuple[str | None, Any]] = []
    for block in data.decode().split("\n\n"):
        if not block:
            continue
        name = None
        lines = []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            else:
                assert line.startswith("data: "), line
                lines.append(line[6:])
        payload = "\n".join(lines)
        out.append((name, None if payload == "[DONE]" else json.loads(payload)))
    return out


def parse(style: str, data: bytes, streamed: bool) -> Parsed:
    usage = model_api.reply_usage(style, data, streamed)
    if not streamed:
        body = json.loads(data)
        if style == "openai-chat":
            message = body["choices"][0]["message"]
            assert message["role"] == "assistant"
            calls = []
            for call in message.get("tool_calls", []):
                assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
                calls.append((call["id"], call["function"]["name"], json.loads(call["function"]["arguments"])))
            return Parsed(message["content"] or "", calls, body["choices"][0]["finish_reason"], usage)
        if style == "openai-responses":
            return Parsed(*_responses_output(body), body["status"], usage)
        text = "".join(block["text"] for block in body["content"] if block["type"] == "text")
        calls = [(b["id"], b["name"], b["input"]) for b in body["content"] if b["type"] == "tool_use"]
        assert all(b["type"] in ("text", "tool_use") for b in body["content"])
        return Parsed(text, calls, body["stop_reason"], usage)
    if style == "openai-chat":
        return _chat_stream(data, usage)
    if style == "openai-responses":
        return _responses_stream(data, usage)
    return _messages_stream(data, usage)


def _responses_output(body: dict[str, Any]) -> tuple[str, list[tuple[str, str, Any]]]:
    text, calls, seen_call = "", [], False
    for item in body["output"]:
        if item["type"] == "message":
            assert not seen_call, "the message item comes before the function calls"
            text += "".join(part["text"] for part in item["content"] if part["type"] == "output_text")
        else:
            assert item["type"] == "function_call" and item["status"] == "completed"
            assert item["id"].startswith("fc_") and isinstance(item["arguments"], str)
            seen_call = True
            calls.append((item["call_id"], item["name"], json.loads(item["arguments"])))
    return text, calls


def _chat_stream(data: bytes, usage: model_api.Usage) -> Parsed:
    evs = events(data)
    assert evs[-1] == (None, None), "the stream ends with data: [DONE]"
    text, finish, calls = "", None, {}
    for _, chunk in evs[:-1]:
        assert chunk["object"] == "chat.completion.chunk"
        for choice in chunk["choices"]:
            delta = choice["delta"]
            text += delta.get("content") or ""
            for tc in delta.get("tool_calls", []):
                if tc["index"] not in calls:   # the first chunk of a call names it
                    assert tc["type"] == "function" and tc["id"] and tc["function"]["name"]
                    calls[tc["index"]] = {"id": tc["id"], "name": tc["function"]["name"], "arguments": ""}
                else:
                    assert "id" not in tc and "name" not in tc["function"]
                calls[tc["index"]]["arguments"] += tc["function"].get("arguments", "")
            if choice["finish_reason"] is not None:
                finish = choice["finish_reason"]
    assert evs[-2][1]["choices"] == [] and "usage" in evs[-2][1], "usage comes in its own last chunk"
    return Parsed(text, [(c["id"], c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())],
                  finish, usage)


def _responses_stream(data: bytes, usage: model_api.Usage) -> Parsed:
    evs = events(data)
    for name, obj in evs:
        assert name == obj["type"], "each event is named as its type"
    assert [obj["sequence_number"] for _, obj in evs] == list(range(len(evs)))
    assert evs[0][0] == "response.created" and evs[0][1]["response"]["output"] == []
    assert evs[-1][0] == "response.completed"
    items: dict[int, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    for name, obj in evs[1:-1]:
        if name == "response.output_item.added":
            assert obj["item"]["status"] == "in_progress"
            items[obj["output_index"]] = json.loads(json.dumps(obj["item"]))
        elif name == "response.content_part.added":
            items[obj["output_index"]]["content"].append(dict(obj["part"]))
        elif name == "response.output_text.delta":
            items[obj["output_index"]]["content"][obj["content_index"]]["text"] += obj["delta"]
        elif name == "response.function_call_arguments.delta":
            assert obj["item_id"] == items[obj["output_index"]]["id"]
            items[obj["output_index"]]["arguments"] += obj["delta"]
        elif name == "response.function_call_arguments.done":
            assert obj["arguments"] == items[obj["output_index"]]["arguments"]
        elif name == "response.output_item.done":
            done[obj["output_index"]] = obj["item"]
            assert {**items[obj["output_index"]], "status": "completed"} == obj["item"], "deltas add up to the item"
    final = evs[-1][1]["response"]
    assert [done[i] for i in sorted(done)] == final["output"]
    return Parsed(*_responses_output(final), final["status"], usage)


def _messages_stream(data: bytes, usage: model_api.Usage) -> Parsed:
    evs = events(data)
    for name, obj in evs:
        assert name == obj["type"]
    assert evs[0][0] == "message_start" and evs[-1][0] == "message_stop" and evs[-2][0] == "message_delta"
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    open_block = None
    for name, obj in evs[1:-2]:
        if name == "content_block_start":
            assert open_block is None and obj["index"] == len(blocks)
            open_block = obj["index"]
            blocks[open_block] = dict(obj["content_block"])
            if blocks[open_block]["type"] == "tool_use":
                assert blocks[open_block]["input"] == {}
                partial[open_block] = ""
        elif name == "content_block_delta":
            assert obj["index"] == open_block
            if obj["delta"]["type"] == "text_delta":
                blocks[open_block]["text"] += obj["delta"]["text"]
            else:
                assert obj["delta"]["type"] == "input_json_delta"
                partial[open_block] += obj["delta"]["partial_json"]
        else:
            assert name == "content_block_stop" and obj["index"] == open_block
            if open_block in partial:
                blocks[open_block]["input"] = json.loads(partial[open_block])
            open_block = None
    content = [blocks[i] for i in sorted(blocks)]
    text = "".join(b["text"] for b in content if b["type"] == "text")
    calls = [(b["id"], b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
    return Parsed(text, calls, evs[-2][1]["delta"]["stop_reason"], usage)


def default_id(style: str, served: int, n: int) -> str:
    return f"{'toolu_' if style.startswith('anthropic') else 'call_'}{served}_{n}"


TOOL_STOP = {"openai-chat": "tool_calls", "openai-responses": "completed", "anthropic-messages": "tool_use"}
TEXT_STOP = {"openai-chat": "stop", "openai-responses": "completed", "anthropic-messages": "end_turn"}


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("style", list(STYLES))
def test_each_style_carries_the_scripted_tool_calls(serve: Any, style: str, streamed: bool) -> None:
    server = serve([StubReply(text="Writing the fix, then testing it.", tool_calls=[WRITE, RUN], usage=USAGE)])
    got = parse(style, post(server, style, streamed), streamed)
    assert got.text == "Writing the fix, then testing it."
    assert got.calls == [("call_write", "write_file", WRITE.arguments), (default_id(style, 1, 1), "run", RUN.arguments)]
    assert got.stop == TOOL_STOP[style]
    assert got.usage == model_api.Usage(11, 5, 3)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("style", list(STYLES))
def test_a_reply_of_tool_calls_alone_has_no_text(serve: Any, style: str, streamed: bool) -> None:
    server = serve([StubReply(tool_calls=[RUN], usage=USAGE)])
    data = post(server, style, streamed)
    got = parse(style, data, streamed)
    assert (got.text, got.calls, got.stop) == ("", [(default_id(style, 1, 0), "run", RUN.arguments)],
                                               TOOL_STOP[style])
    assert got.usage == model_api.Usage(11, 5, 3)
    if not streamed:
        body = json.loads(data)
        if style == "openai-chat":
            assert body["choices"][0]["message"]["content"] is None
        elif style == "openai-responses":
            assert [item["type"] for item in body["output"]] == ["function_call"]
        else:
            assert [block["type"] for block in body["content"]] == ["tool_use"]
    else:
        for text_mark in (b'"content":"', b"output_text", b'"type":"text"', b"text_delta"):
            assert text_mark not in data


def test_streamed_arguments_come_in_pieces_and_the_first_chunk_names_the_call(serve: Any) -> None:
    server = serve([StubReply(tool_calls=[WRITE], repeat=True)])
    chat = [obj for _, obj in events(post(server, "openai-chat", True))[:-1] if obj["choices"]]
    pieces = [c["choices"][0]["delta"]["tool_calls"][0] for c in chat if c["choices"][0]["delta"]]
    assert pieces[0] == {"index": 0, "id": "call_write", "type": "function",
                         "function": {"name": "write_file", "arguments": ""}}
    assert len(pieces) > 3 and all(set(p) == {"index", "function"} for p in pieces[1:])
    assert chat[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "tool_calls"}

    names = [name for name, _ in events(post(server, "openai-responses", True))]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names.count("response.function_call_arguments.delta") > 3
    assert names[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]

    anthropic = events(post(server, "anthropic-messages", True))
    assert anthropic[1][1]["content_block"] == {"type": "tool_use", "id": "call_write", "name": "write_file",
                                                "input": {}}
    assert sum(1 for name, _ in anthropic if name == "content_block_delta") > 3
    assert anthropic[-2][1] == {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                                "usage": {"output_tokens": 0}}


def test_default_ids_follow_the_replies_served_and_replay_the_same(serve: Any) -> None:
    script = [StubReply(text="look", tool_calls=[RUN, RUN]), StubReply(tool_calls=[RUN], repeat=True)]
    seen = []
    for _ in range(2):
        server = serve(script)
        seen.append([[c[0] for c in parse(style, post(server, style, False), False).calls]
                     for style in ("openai-chat", "openai-responses", "anthropic-messages", "openai-chat")])
    assert seen[0] == seen[1] == [["call_1_0", "call_1_1"], ["call_2_0"], ["toolu_3_0"], ["call_4_0"]]


def test_text_replies_are_as_they_were(serve: Any) -> None:
    # The bytes of text-only replies from before tool calls were added, pinned; all but the
    # streamed Responses reply, which now carries every item's lifecycle (Codex CLI refuses a
    # text delta outside an output item), checked by parse().
    server = serve([StubReply(text="hi", usage=StubUsage(input_tokens=7, output_tokens=3, cached_tokens=1),
                              repeat=True)])
    digest = hashlib.sha256()
    for style in STYLES:
        for streamed in (False, True):
            if (style, streamed) != ("openai-responses", True):
                digest.update(post(server, style, streamed))
    assert digest.hexdigest() == "e84fbb9a435e2886483b2e258e9861c1af1bc0a8ffd6018ce1d3d5f2e7619d9b"
    assert parse("openai-responses", post(server, "openai-responses", True), True) == (
        "hi", [], TEXT_STOP["openai-responses"], model_api.Usage(7, 3, 1))
    for style in STYLES:
        assert parse(style, post(server, style, False), False) == ("hi", [], TEXT_STOP[style],
                                                                   model_api.Usage(7, 3, 1))


def test_a_toml_script_with_tool_calls_loads(tmp_path: Path) -> None:
    script = tmp_path / "script.toml"
    script.write_text('[[reply]]\ntext = "Fixing it."\nmodel = "stub-model"\n'
                      '[[reply.tool_calls]]\nname = "write_file"\nid = "w1"\n'
                      'arguments = { path = "add.py", content = "x = 1\\n", mode = 420, lines = [1, 2.5] }\n'
                      '[[reply.tool_calls]]\nname = "noop"\narguments = {}\n'
                      '[[reply]]\ntext = "done"\n')
    replies = load_script(script)
    assert [r.text for r in replies] == ["Fixing it.", "done"]
    assert replies[0].tool_calls == [
        StubToolCall(name="write_file", id="w1",
                     arguments={"path": "add.py", "content": "x = 1\n", "mode": 420, "lines": [1, 2.5]}),
        StubToolCall(name="noop", arguments={})]
    assert replies[1].tool_calls == []


def test_a_json_script_with_tool_calls_loads(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "run", "arguments": {"argv": ["ls"]}}]}]))
    assert load_script(script) == [StubReply(tool_calls=[StubToolCall(name="run", arguments={"argv": ["ls"]})])]


@pytest.mark.parametrize(("call", "named"), [
    ('arguments = { a = 1 }', "tool_calls.0.name"),
    ('name = ""\narguments = {}', "tool_calls.0.name"),
    ('name = "run"', "tool_calls.0.arguments"),
    ('name = "run"\narguments = "{\\"a\\": 1}"', "tool_calls.0.arguments"),
    ('name = "run"\narguments = [1, 2]', "tool_calls.0.arguments"),
    ('name = "run"\narguments = { when = 2026-01-02 }', "tool_calls.0.arguments"),
    ('name = "run"\narguments = { x = nan }', "tool_calls.0.arguments"),
    ('name = "run"\narguments = {}\nid = ""', "tool_calls.0.id"),
    ('name = "run"\narguments = {}\ninput = {}', "tool_calls.0.input"),
], ids=["no-name", "empty-name", "no-arguments", "arguments-a-string", "arguments-a-list", "arguments-a-date",
        "arguments-nan", "empty-id", "unknown-key"])
def test_a_bad_tool_call_is_refused_naming_it(tmp_path: Path, call: str, named: str) -> None:
    script = tmp_path / "bad.toml"
    script.write_text(f'[[reply]]\ntext = "x"\n[[reply.tool_calls]]\n{call}\n')
    with pytest.raises(UsageError, match="is not a model script") as refused:
        load_script(script)
    assert named in str(refused.value)


def test_a_bad_tool_call_in_json_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "bad.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "run", "arguments": "{}"}]}]))
    with pytest.raises(UsageError, match=r"tool_calls\.0\.arguments"):
        load_script(script)
    script.write_text(json.dumps([{"tool_calls": {"name": "run", "arguments": {}}}]))
    with pytest.raises(UsageError, match=r"tool_calls"):
        load_script(script)


def test_a_reply_with_when_is_served_only_to_requests_whose_body_holds_its_text(serve: Any) -> None:
    # How `demo --agent` tells two tasks apart: a line of each task's prompt.
    server = serve([StubReply(text="for the other task", when="billing.py", repeat=True),
                    StubReply(text="for this task", when="fix it", repeat=True)])
    for style in STYLES:
        assert parse(style, post(server, style, False), False).text == "for this task"
    body = json.dumps({"model": "stub-model", "messages": [{"role": "user", "content": "nothing known"}]})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 503 and b"no reply left" in resp.read()
    conn.close()
