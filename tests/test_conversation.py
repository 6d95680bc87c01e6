"""The model conversation read from stored bodies: every API style, streamed or not, and
bodies that are cut, missing or in no known format.

Replies are the scripted model server's own bytes (``model_api.reply_body`` and
``reply_stream`` are what it sends; one test fetches them from a running stub); requests are
shaped as the OpenAI and Anthropic SDKs send them.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest

from sealbench import conversation as cv
from sealbench import events as ev
from sealbench import model_api
from sealbench.model_stub import StubReply, StubToolCall, StubUsage, start

USAGE = model_api.Usage(120, 30, 100)
WRITE = model_api.ToolCall("call_7", "write_file", {"path": "window.py", "content": "def f():\n    return 1\n"})
WRITE_ARGS = '{"path":"window.py","content":"def f():\\n    return 1\\n"}'


def _json_reply(style: str, text: str, calls: tuple[model_api.ToolCall, ...] = ()) -> bytes:
    return json.dumps(model_api.reply_body(style, "m-1", text, USAGE, "stub-1", calls)).encode()


def _stream(style: str, pieces: list[str], calls: tuple[model_api.ToolCall, ...] = ()) -> bytes:
    return b"".join(model_api.reply_stream(style, "m-1", pieces, USAGE, "stub-1", calls))


def _args(reply: cv.Reply) -> list[tuple[str, Any, str | None]]:
    return [(c.name, json.loads(c.arguments), c.id) for c in reply.tool_calls]


REPLIES = [
    # (what, body, format, text, tool calls as (name, arguments, id), stop)
    ("chat, JSON, text", _json_reply("openai-chat", "It is fixed."), "openai-chat", "It is fixed.", [], "stop"),
    ("chat, JSON, a tool call", _json_reply("openai-chat", "", (WRITE,)), "openai-chat", "",
     [("write_file", WRITE.arguments, "call_7")], "tool_calls"),
    ("chat, streamed, text", _stream("openai-chat", ["It is ", "fixed."]), "openai-chat stream", "It is fixed.", [],
     "stop"),
    ("chat, streamed, text then a tool call", _stream("openai-chat", ["Writing."], (WRITE,)), "openai-chat stream",
     "Writing.", [("write_file", WRITE.arguments, "call_7")], "tool_calls"),
    ("responses, JSON, text", _json_reply("openai-responses", "It is fixed."), "openai-responses", "It is fixed.", [],
     "completed"),
    ("responses, JSON, a tool call", _json_reply("openai-responses", "", (WRITE,)), "openai-responses", "",
     [("write_file", WRITE.arguments, "call_7")], "completed"),
    ("responses, streamed, text", _stream("openai-responses", ["It is ", "fixed."]), "openai-responses stream",
     "It is fixed.", [], "completed"),
    ("responses, streamed, text then a tool call", _stream("openai-responses", ["Writing."], (WRITE,)),
     "openai-responses stream", "Writing.", [("write_file", WRITE.arguments, "call_7")], "completed"),
    ("anthropic, JSON, text", _json_reply("anthropic-messages", "It is fixed."), "anthropic-messages", "It is fixed.",
     [], "end_turn"),
    ("anthropic, JSON, a tool call", _json_reply("anthropic-messages", "Writing.", (WRITE,)), "anthropic-messages",
     "Writing.", [("write_file", WRITE.arguments, "call_7")], "tool_use"),
    ("anthropic, streamed, text", _stream("anthropic-messages", ["It is ", "fixed."]), "anthropic-messages stream",
     "It is fixed.", [], "end_turn"),
    ("anthropic, streamed, a tool call", _stream("anthropic-messages", [""], (WRITE,)), "anthropic-messages stream", "",
     [("write_file", WRITE.arguments, "call_7")], "tool_use"),
]


@pytest.mark.parametrize(("what", "body", "fmt", "text", "calls", "stop"), REPLIES, ids=[r[0] for r in REPLIES])
def test_each_style_s_reply_reads_as_its_text_tool_calls_and_stop(
        what: str, body: bytes, fmt: str, text: str, calls: list[tuple[str, Any, str]], stop: str) -> None:
    reply = cv.read_reply(body)
    assert reply is not None, what
    assert (reply.format, reply.text, _args(reply), reply.stop, reply.model) == (fmt, text, calls, stop, "m-1")
    assert reply.error is None and reply.refusal is None


ODD_REPLIES = [
    ("an OpenAI error body", json.dumps(model_api.error_body("openai-chat", "rate limited", "rate_limit_error")).encode(),
     {"format": "error", "error": "rate_limit_error: rate limited"}),
    ("an Anthropic error body", json.dumps(model_api.error_body("anthropic-messages", "Overloaded",
                                                                "overloaded_error")).encode(),
     {"format": "error", "error": "overloaded_error: Overloaded"}),
    ("an Anthropic stream that ends in an error event",
     _stream("anthropic-messages", ["Half a"])[:-60].rsplit(b"event: message_delta", 1)[0]
     + b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n',
     {"format": "anthropic-messages stream", "text": "Half a", "error": "overloaded_error: Overloaded"}),
    ("a chat reply the model refused", json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": None, "refusal": "I can't help with that."}}]}).encode(),
     {"refusal": "I can't help with that.", "text": "", "stop": "stop"}),
    ("a streamed chat refusal", b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":'
     b'{"refusal":"I can\'t"}}]}\n\ndata: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":'
     b'{"refusal":" help."},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n', {"refusal": "I can't help."}),
    ("a Responses reply with reasoning and a refusal", json.dumps({"object": "response", "status": "completed",
     "output": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "Thinking it over."}]},
                {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}]}).encode(),
     {"reasoning": "Thinking it over.", "refusal": "No.", "stop": "completed"}),
    ("an incomplete Responses reply", json.dumps({"object": "response", "status": "incomplete",
     "incomplete_details": {"reason": "max_output_tokens"}, "output": []}).encode(),
     {"stop": "incomplete: max_output_tokens"}),
    ("a failed Responses stream", b'event: response.failed\ndata: {"type":"response.failed","response":{"status":'
     b'"failed","error":{"code":"server_error","message":"The model failed."}}}\n\n',
     {"stop": "failed", "error": "server_error: The model failed."}),
    ("Anthropic thinking, streamed", b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
     b'"content_block":{"type":"thinking","thinking":""}}\n\nevent: content_block_delta\ndata: {"type":'
     b'"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me see."}}\n\n',
     {"reasoning": "Let me see.", "text": ""}),
    ("a stream cut mid-event keeps what came whole", (_three := _stream("openai-chat", ["one ", "two ", "three"]))[
        :_three.index(b'"three"') + 3],
     {"format": "openai-chat stream", "text": "one two "}),
]


@pytest.mark.parametrize(("what", "body", "expected"), ODD_REPLIES, ids=[r[0] for r in ODD_REPLIES])
def test_errors_refusals_reasoning_and_cut_streams_are_read(what: str, body: bytes, expected: dict[str, Any]) -> None:
    reply = cv.read_reply(body)
    assert reply is not None, what
    assert {k: getattr(reply, k) for k in expected} == expected


UNKNOWN = [
    ("an HTML error page", b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
    ("empty", b""),
    ("binary", bytes(range(256))),
    ("JSON of another shape", b'{"completion": "hello"}'),
    ("JSON nested past the parser's depth", b"[" * 200_000),
    ("a JSON list", b"[1, 2, 3]"),
    ("server-sent events of no known style", b"data: {\"hello\": 1}\n\ndata: nonsense\n\n"),
    ("a cut JSON body", _json_reply("openai-chat", "x" * 100)[:50]),
]


@pytest.mark.parametrize(("what", "body"), UNKNOWN, ids=[r[0] for r in UNKNOWN])
def test_a_body_in_no_known_format_is_none_never_a_crash(what: str, body: bytes) -> None:
    assert cv.read_reply(body) is None
    assert cv.read_request(body) is None


CHAT_REQUEST = {
    "model": "m-1", "stream": True, "tools": [{"type": "function", "function": {"name": "write_file"}}],
    "messages": [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": [{"type": "text", "text": "Fix window.py"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_7", "type": "function", "function": {"name": "write_file", "arguments": WRITE_ARGS}}]},
        {"role": "tool", "tool_call_id": "call_7", "content": "written"},
    ],
}
RESPONSES_REQUEST = {
    "model": "m-1", "instructions": "You fix bugs.", "tools": [{"type": "function", "name": "shell"}],
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix window.py"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Look first."}]},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"cmd":["ls"]}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "window.py"},
        {"role": "user", "content": "go on"},
    ],
}
ANTHROPIC_REQUEST = {
    "model": "m-1", "max_tokens": 100, "system": [{"type": "text", "text": "You fix bugs."}],
    "tools": [{"name": "str_replace_editor", "input_schema": {}}],
    "messages": [
        {"role": "user", "content": "Fix window.py"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Edit it."}, {"type": "text", "text": "On it."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "str_replace_editor",
                                           "input": {"path": "window.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                      "content": [{"type": "text", "text": "no such file"}]},
                                     {"type": "text", "text": "try again"}]},
    ],
}


def _summary(messages: list[cv.ChatMessage]) -> list[tuple[Any, ...]]:
    return [(m.role, m.text, [(c.name, c.id) for c in m.tool_calls], m.tool_call_id, m.is_error, m.reasoning)
            for m in messages]


def test_each_style_s_request_reads_as_its_messages_and_tools() -> None:
    chat = cv.read_request(json.dumps(CHAT_REQUEST).encode())
    assert chat is not None and chat[0] == "openai-chat" and chat[2] == ("write_file",)
    assert _summary(chat[1]) == [
        ("system", "You fix bugs.", [], None, False, ""),
        ("user", "Fix window.py\n[image, inline data]", [], None, False, ""),
        ("assistant", "", [("write_file", "call_7")], None, False, ""),
        ("tool", "written", [], "call_7", False, "")]
    assert chat[1][2].tool_calls[0].arguments == WRITE_ARGS
    responses = cv.read_request(json.dumps(RESPONSES_REQUEST).encode())
    assert responses is not None and responses[0] == "openai-responses" and responses[2] == ("shell",)
    assert _summary(responses[1]) == [
        ("system", "You fix bugs.", [], None, False, ""),
        ("user", "Fix window.py", [], None, False, ""),
        ("assistant", "", [("shell", "call_1")], None, False, "Look first."),
        ("tool", "window.py", [], "call_1", False, ""),
        ("user", "go on", [], None, False, "")]
    anthropic = cv.read_request(json.dumps(ANTHROPIC_REQUEST).encode())
    assert anthropic is not None and anthropic[0] == "anthropic-messages"
    assert anthropic[2] == ("str_replace_editor",)
    assert _summary(anthropic[1]) == [
        ("system", "You fix bugs.", [], None, False, ""),
        ("user", "Fix window.py", [], None, False, ""),
        ("assistant", "On it.", [("str_replace_editor", "toolu_1")], None, False, "Edit it."),
        ("tool", "no such file", [], "toolu_1", True, ""),
        ("user", "try again", [], None, False, "")]


def test_arguments_read_as_key_value_lines_with_code_as_code() -> None:
    assert cv.arguments_text(WRITE_ARGS) == "path: window.py\ncontent:\n  def f():\n      return 1"
    assert cv.arguments_text('{"n": [1, 2]}') == "n: [1, 2]"
    assert cv.arguments_text('{"cut": "ab') == '{"cut": "ab'  # partial JSON: as sent


# --- the conversation of several calls -----------------------------------------------------------


def _call(index: int, **kw: Any) -> ev.ModelCall:
    base: dict[str, Any] = {"task_id": "t", "attempt": 1, "index": index, "status": 200, "endpoint": "openai",
                            "model": "m-1", "latency_ms": 5, "request": "sha256:" + "1" * 64, "request_bytes": 10,
                            "response": "sha256:" + "2" * 64, "response_bytes": 10}
    return ev.ModelCall(**{**base, **kw})


def _bodies(index: int, request: dict[str, Any] | bytes | None, response: bytes | None, **kw: Any) -> cv.CallBodies:
    raw = json.dumps(request).encode() if isinstance(request, dict) else request
    return cv.CallBodies(_call(index, **kw), None if raw is None else cv.Stored(raw),
                         None if response is None else cv.Stored(response))


def _chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m-1", "messages": list(messages)}


SYSTEM = {"role": "system", "content": "You fix bugs."}
ASK = {"role": "user", "content": "Fix window.py"}
ECHO: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_7", "type": "function", "function": {"name": "write_file", "arguments": '{"path": "window.py"}'}}]}
RESULT = {"role": "tool", "tool_call_id": "call_7", "content": "written"}


def test_each_call_shows_only_what_its_request_added_and_its_reply_once() -> None:
    conversation = cv.build([
        _bodies(0, _chat(SYSTEM, ASK), _stream("openai-chat", [""], (WRITE,))),
        # The reply comes back as the assistant's message (its arguments re-serialised), then the result.
        _bodies(1, _chat(SYSTEM, ASK, ECHO, RESULT),
                _stream("openai-chat", ["Done."])),
    ])
    first, second = conversation.exchanges
    assert [m.role for m in first.added] == ["system", "user"] and first.repeated == 0 and first.continues is None
    assert first.reply is not None and first.reply.tool_calls[0].name == "write_file"
    assert [m.role for m in second.added] == ["tool"] and second.continues == 0
    assert (second.repeated, second.reply_repeated) == (2, True)
    assert second.reply is not None and second.reply.text == "Done." and second.notes == ()


def test_interleaved_conversations_each_continue_their_own() -> None:
    sub = {"role": "system", "content": "You are a sub-agent."}
    conversation = cv.build([
        _bodies(0, _chat(SYSTEM, ASK), _json_reply("openai-chat", "Looking.")),
        _bodies(1, _chat(sub, {"role": "user", "content": "list files"}), _json_reply("openai-chat", "window.py")),
        _bodies(2, _chat(SYSTEM, ASK, {"role": "assistant", "content": "Looking."}, {"role": "user", "content": "go"}),
                _json_reply("openai-chat", "Going.")),
    ])
    third = conversation.exchanges[2]
    assert (third.continues, third.repeated, third.reply_repeated) == (0, 2, True)
    assert [m.text for m in third.added] == ["go"]
    assert conversation.exchanges[1].continues is None and len(conversation.exchanges[1].added) == 2


def test_refused_missing_cut_and_unknown_bodies_say_so() -> None:
    html = b"<html><script>alert(1)</script>" + b"x" * 500 + b"</html>"
    conversation = cv.build([
        # refused on arrival: no body read, no reply stored
        cv.CallBodies(_call(0, request=None, request_bytes=None, response=None, response_bytes=0, status=401,
                            refused="the token is not this attempt's"), None, None),
        # named but missing from blobs/
        cv.CallBodies(_call(1), None, None),
        # a reply cut at the gateway's cap, streamed
        _bodies(2, _chat(ASK), (whole := _stream("openai-chat", ["one ", "two ", "three"]))[:whole.index(b"three")],
                response_truncated=True,
                response_bytes=9999),
        # neither body in a known format
        _bodies(3, b"prompt=hello", html),
        # bytes that do not match their digest, read only in part
        cv.CallBodies(_call(4), cv.Stored(json.dumps(_chat(ASK)).encode(), cut=True, matches=None),
                      cv.Stored(_json_reply("openai-chat", "ok"), matches=False)),
    ])
    refused, missing, cut, unknown, tampered = conversation.exchanges
    assert refused.notes == ("the request's body was not read (refused on arrival)",)
    assert refused.reply is None and refused.added == ()
    assert missing.notes == (f"the request body sha256:{'1' * 64} is missing from blobs/",
                             f"the reply body sha256:{'2' * 64} is missing from blobs/")
    assert cut.reply is not None and cut.reply.text == "one two "
    assert "the reply's stored bytes stop at the gateway's cap (9999 bytes sent to the agent)" in cut.notes
    assert unknown.request_note == cv.Unread("12 bytes, format not recognised", "prompt=hello")
    assert unknown.reply_note is not None and unknown.reply_note.why == f"{len(html)} bytes, format not recognised"
    assert unknown.reply_note.preview.startswith("<html><script>") and len(unknown.reply_note.preview) < 210
    assert "the request body was read only to its first" in tampered.notes[0]
    assert tampered.notes[1] == "WARNING: the reply body's bytes do not match their digest"


def test_a_conversation_is_json_for_scripts() -> None:
    conversation = cv.build([_bodies(0, CHAT_REQUEST, _json_reply("openai-chat", "ok", (WRITE,)))])
    doc = json.loads(json.dumps(cv.to_json(conversation)))
    assert doc[0]["added"][2]["tool_calls"] == [{"name": "write_file", "arguments": WRITE_ARGS, "id": "call_7"}]
    assert doc[0]["reply"]["text"] == "ok" and doc[0]["reply"]["tool_calls"][0]["id"] == "call_7"


def test_the_running_stub_s_bytes_read_as_its_script_says() -> None:
    server = start([StubReply(text="Writing it.", repeat=True, usage=StubUsage(input_tokens=3, output_tokens=4),
                              tool_calls=[StubToolCall(name="write_file", arguments={"path": "a.py"}, id="c1")])])
    try:
        for path, style in (("/v1/chat/completions", "openai-chat"), ("/v1/responses", "openai-responses"),
                            ("/v1/messages", "anthropic-messages")):
            for stream in (False, True):
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
                conn.request("POST", path, json.dumps({"model": "m", "stream": stream, "messages": []}),
                             {"Content-Type": "application/json"})
                body = conn.getresponse().read()
                conn.close()
                reply = cv.read_reply(body)
                assert reply is not None, (style, stream, body[:200])
                assert reply.format == style + (" stream" if stream else "")
                assert (reply.text, _args(reply)) == ("Writing it.", [("write_file", {"path": "a.py"}, "c1")])
    finally:
        server.close()


def test_a_request_sent_again_after_an_error_adds_nothing_and_says_so() -> None:
    from sealbench.show import request_words

    limited = json.dumps(model_api.error_body("openai-chat", "slow down", "rate_limit_error")).encode()
    first, again = cv.build([_bodies(0, _chat(ASK), limited, status=429),
                             _bodies(1, _chat(ASK), _json_reply("openai-chat", "ok"))]).exchanges
    assert first.reply is not None and first.reply.error == "rate_limit_error: slow down"
    assert (again.added, again.repeated, again.reply_repeated, again.continues) == ((), 1, False, 0)
    assert request_words(again) == "request (openai-chat): call #0's 1 message(s) again, nothing added"


def test_a_responses_request_that_continues_a_stored_response_says_so() -> None:
    request = {"model": "m-1", "previous_response_id": "resp_9", "input": [
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"}]}
    (x,) = cv.build([_bodies(0, request, _json_reply("openai-responses", "Done."))]).exchanges
    assert [m.role for m in x.added] == ["tool"]
    assert x.notes == ("the request continues the stored response resp_9: its earlier messages are the provider's, "
                       "not in this request",)


def test_without_full_an_attempt_shows_its_last_calls_and_says_how_many_came_before(tmp_path: Path) -> None:
    from sealbench.blobs import Blobs
    from sealbench.show import CALLS_SHOWN, conversation_lines
    from sealbench.stories import AttemptStory

    story = AttemptStory(1, calls=[_call(n, request=None, request_bytes=None, response=None, response_bytes=0,
                                         status=401, refused="no token") for n in range(CALLS_SHOWN + 5)])
    lines = conversation_lines(story, Blobs(tmp_path), full=False)
    assert lines[1] == "      ... 5 earlier call(s); --full shows all" and lines[2].startswith("      #5 ")
    assert sum(ln.startswith("      #") for ln in lines) == CALLS_SHOWN
    assert sum(ln.startswith("      #") for ln in conversation_lines(story, Blobs(tmp_path), full=True)) == CALLS_SHOWN + 5


def test_anthropic_cache_marks_moved_to_the_newest_message_are_no_change() -> None:
    mark = {"type": "ephemeral"}
    system = [{"type": "text", "text": "You fix bugs.", "cache_control": mark}]
    first = {"model": "m-1", "system": system, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix window.py", "cache_control": mark}]}]}
    reply = _json_reply("anthropic-messages", "On it.", (WRITE,))
    second = {"model": "m-1", "system": system, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix window.py"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "On it."}, {"type": "tool_use", "id": "call_7",
                                                                                "name": "write_file", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_7", "content": [
            {"type": "text", "text": "written", "cache_control": mark}]}]}]}
    _, x = cv.build([_bodies(0, first, reply, endpoint="anthropic"),
                     _bodies(1, second, _json_reply("anthropic-messages", "Done."), endpoint="anthropic")]).exchanges
    assert (x.continues, x.repeated, x.reply_repeated) == (0, 2, True)
    assert [(m.role, m.text, m.tool_call_id) for m in x.added] == [("tool", "written", "call_7")]
