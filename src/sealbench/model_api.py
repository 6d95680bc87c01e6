"""The three model API styles the gateway and the scripted model speak, as pure functions.

Each style has one path (appended to the endpoint's base URL), one way to carry the key, a
request naming its model in ``model``, and usage reported in its own words. Nothing here does
I/O: the gateway (:mod:`sealbench.gateway`) and the scripted model (:mod:`sealbench.model_stub`)
call these on bytes they hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Final, NamedTuple

from .formats import ApiStyle

PATHS: Final[dict[str, str]] = {
    "openai-chat": "/chat/completions",
    "openai-responses": "/responses",
    "anthropic-messages": "/v1/messages",
}
"""The one API path of each style, relative to the endpoint's base URL."""


class Usage(NamedTuple):
    """Tokens as the upstream reported them; None where it reported nothing."""

    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    cache_write_tokens: int | None = None
    """Anthropic's ``cache_creation_input_tokens`` as a reply carries them (the scripted model
    sends them); :func:`usage_of` counts them in ``input_tokens``."""


NO_USAGE: Final = Usage(None, None, None)


def family(style: ApiStyle | str) -> str:
    """``openai`` or ``anthropic``: whose SDK variables point at an endpoint of this style."""
    return "anthropic" if style.startswith("anthropic") else "openai"


def auth_headers(style: ApiStyle | str, key: str) -> dict[str, str]:
    """The headers that carry ``key`` upstream."""
    if family(style) == "anthropic":
        return {"x-api-key": key}
    return {"Authorization": f"Bearer {key}"}


def presented_token(style: ApiStyle | str, headers: dict[str, str]) -> str | None:
    """The token a client presented (``Authorization: Bearer`` or, for Anthropic, ``x-api-key``).

    ``headers`` has lower-case names.
    """
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    if family(style) == "anthropic":
        return headers.get("x-api-key")
    return None


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def usage_of(style: ApiStyle | str, body: Any) -> Usage:
    """Usage from a non-streamed reply's parsed JSON (or from a stream's final object)."""
    if style == "openai-chat":
        u = _dig(body, "usage")
        return Usage(_int(_dig(u, "prompt_tokens")), _int(_dig(u, "completion_tokens")),
                     _int(_dig(u, "prompt_tokens_details", "cached_tokens")))
    if style == "openai-responses":
        u = _dig(body, "usage")
        return Usage(_int(_dig(u, "input_tokens")), _int(_dig(u, "output_tokens")),
                     _int(_dig(u, "input_tokens_details", "cached_tokens")))
    # Anthropic reports the tokens written to its prompt cache apart from input_tokens, and bills
    # them as input (at a premium): counted as input here, or a cache-marked prompt is unseen by caps.
    u = _dig(body, "usage")
    inp, written = _int(_dig(u, "input_tokens")), _int(_dig(u, "cache_creation_input_tokens"))
    return Usage(inp + (written or 0) if inp is not None else None, _int(_dig(u, "output_tokens")),
                 _int(_dig(u, "cache_read_input_tokens")))


_DONE: Final = object()
"""An OpenAI chat stream's ``data: [DONE]``: its last event."""


def _sse_events(body: bytes) -> Iterator[Any]:
    """The JSON objects of a server-sent event stream's ``data:`` lines, and :data:`_DONE` for
    ``[DONE]`` (unparsable data skipped)."""
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:"))
        if not data:
            continue
        if data.strip() == b"[DONE]":
            yield _DONE
            continue
        try:
            yield json.loads(data)
        except ValueError:
            continue


def sse_data(body: bytes) -> Iterator[Any]:
    """The JSON objects of a server-sent event stream's ``data:`` lines (others skipped)."""
    return (obj for obj in _sse_events(body) if obj is not _DONE)


_RESPONSES_ENDS: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})


def stream_usage(style: ApiStyle | str, body: bytes) -> Usage:
    """Usage of a streamed reply whose last event arrived; :data:`NO_USAGE` for a stream cut
    before it (the counts it carried so far are not the call's).

    OpenAI chat reports usage in a last chunk (with ``stream_options.include_usage``) and ends
    with ``[DONE]``; Responses in its terminal ``response.completed`` (or ``.incomplete``,
    ``.failed``); Anthropic gives input tokens in ``message_start``, the output count in
    ``message_delta`` (``message_start`` says 1), and ends with ``message_stop``.
    """
    found = NO_USAGE
    ended = False
    for obj in _sse_events(body):
        if obj is _DONE:
            ended = ended or style == "openai-chat"
        elif style == "openai-chat":
            if isinstance(_dig(obj, "usage"), dict):
                found = usage_of(style, obj)
        elif style == "openai-responses":
            if _dig(obj, "type") in _RESPONSES_ENDS:
                ended = True
                if isinstance(_dig(obj, "response", "usage"), dict):
                    found = usage_of(style, obj["response"])
        elif _dig(obj, "type") == "message_start":
            start = usage_of(style, _dig(obj, "message"))
            found = Usage(start.input_tokens, start.output_tokens, start.cached_tokens)
        elif _dig(obj, "type") == "message_delta" and isinstance(_dig(obj, "usage"), dict):
            delta = usage_of(style, obj)
            found = Usage(delta.input_tokens if delta.input_tokens is not None else found.input_tokens,
                          delta.output_tokens,
                          delta.cached_tokens if delta.cached_tokens is not None else found.cached_tokens)
        elif _dig(obj, "type") == "message_stop":
            ended = True
    return found if ended else NO_USAGE


def reply_usage(style: ApiStyle | str, body: bytes, streamed: bool) -> Usage:
    """Usage of a whole reply body (streamed or not); :data:`NO_USAGE` when it reports none."""
    if streamed:
        return stream_usage(style, body)
    try:
        return usage_of(style, json.loads(body))
    except ValueError:
        return NO_USAGE


# ----------------------------------------------------------------------------- replies (the stub)


class ToolCall(NamedTuple):
    """One tool call a reply makes: the call's id, the tool's name, and its arguments (a JSON object)."""

    id: str
    name: str
    arguments: dict[str, Any]

    def arguments_json(self) -> str:
        """The arguments as the OpenAI styles carry them: a JSON string."""
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


def _chunks(text: str, size: int = 16) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _chat_tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_json()}}


def _function_call_item(call: ToolCall, item_id: str, arguments: str, status: str) -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name, "arguments": arguments,
            "status": status}


def _function_call_id(reply_id: str, n: int) -> str:
    return f"fc_{reply_id}_{n}"


def _tool_use_block(call: ToolCall, whole: bool) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments if whole else {}}


def reply_body(style: ApiStyle | str, model: str, text: str, usage: Usage, reply_id: str,
               tool_calls: Sequence[ToolCall] = ()) -> dict[str, Any]:
    """A whole non-streamed reply carrying ``text`` and then ``tool_calls``, in the style's shape.

    With tool calls, an empty ``text`` is left out (``content: null`` in OpenAI chat; no message
    item or text block in the others) and the reply stops for the tools (``finish_reason:
    "tool_calls"``, ``stop_reason: "tool_use"``). Without, it is a text reply.
    """
    inp, out, cached = (usage.input_tokens or 0), (usage.output_tokens or 0), (usage.cached_tokens or 0)
    if style == "openai-chat":
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool_calls:
            message["content"] = text or None
            message["tool_calls"] = [_chat_tool_call(call) for call in tool_calls]
        return {"id": reply_id, "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if tool_calls else "stop"}],
                "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out,
                          "prompt_tokens_details": {"cached_tokens": cached}}}
    if style == "openai-responses":
        output: list[dict[str, Any]] = []
        if text or not tool_calls:
            output.append({"type": "message", "id": reply_id + "-m", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]})
        output += [_function_call_item(call, _function_call_id(reply_id, n), call.arguments_json(), "completed")
                   for n, call in enumerate(tool_calls)]
        return {"id": reply_id, "object": "response", "created_at": 0, "status": "completed", "model": model,
                "output": output,
                "usage": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                          "input_tokens_details": {"cached_tokens": cached}}}
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text or not tool_calls else []
    content += [_tool_use_block(call, True) for call in tool_calls]
    return {"id": reply_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "tool_use" if tool_calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": inp, "output_tokens": out, "cache_read_input_tokens": cached,
                      **({"cache_creation_input_tokens": usage.cache_write_tokens} if usage.cache_write_tokens else {})}}


def _event(data: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return (head + "data: " + json.dumps(data, separators=(",", ":")) + "\n\n").encode()


def reply_stream(style: ApiStyle | str, model: str, pieces: list[str], usage: Usage,
                 reply_id: str, tool_calls: Sequence[ToolCall] = ()) -> Iterator[bytes]:
    """The server-sent events of a streamed reply: one event per piece of text, usage last. A
    Responses stream carries every item's lifecycle, from ``response.created`` to
    ``response.completed``, as the OpenAI SDKs and Codex CLI expect.

    With ``tool_calls``, each call follows the text (an empty text is left out), its arguments
    streamed in pieces as the style does: ``delta.tool_calls`` chunks (OpenAI chat), a
    ``function_call`` output item with ``response.function_call_arguments.delta`` events
    (Responses), a ``tool_use`` block with ``input_json_delta`` pieces (Anthropic).
    """
    text = "".join(pieces)
    if style not in ("openai-chat", "openai-responses"):
        yield from _messages_stream(model, pieces, usage, reply_id, tool_calls)
        return
    if style == "openai-responses":
        yield from _responses_stream(model, pieces, usage, reply_id, tool_calls)
        return
    if tool_calls:
        yield from _chat_tool_stream(model, pieces, usage, reply_id, tool_calls)
        return
    base = {"id": reply_id, "object": "chat.completion.chunk", "created": 0, "model": model}
    for piece in pieces:
        yield _event({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    yield _event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    yield _event({**base, "choices": [], "usage": reply_body(style, model, text, usage, reply_id)["usage"]})
    yield b"data: [DONE]\n\n"


def _chat_tool_stream(model: str, pieces: list[str], usage: Usage, reply_id: str,
                      tool_calls: Sequence[ToolCall]) -> Iterator[bytes]:
    text = "".join(pieces)
    base = {"id": reply_id, "object": "chat.completion.chunk", "created": 0, "model": model}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return _event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})

    for piece in pieces if text else []:
        yield chunk({"content": piece})
    for n, call in enumerate(tool_calls):
        yield chunk({"tool_calls": [{"index": n, "id": call.id, "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}]})
        for piece in _chunks(call.arguments_json()):
            yield chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls")
    yield _event({**base, "choices": [], "usage": reply_body("openai-chat", model, text, usage, reply_id)["usage"]})
    yield b"data: [DONE]\n\n"


def _responses_stream(model: str, pieces: list[str], usage: Usage, reply_id: str,
                           tool_calls: Sequence[ToolCall]) -> Iterator[bytes]:
    text = "".join(pieces)
    whole = reply_body("openai-responses", model, text, usage, reply_id, tool_calls)
    seq = 0

    def event(name: str, **fields: Any) -> bytes:
        nonlocal seq
        seq += 1
        return _event({"type": name, "sequence_number": seq - 1, **fields}, name)

    yield event("response.created", response={**whole, "status": "in_progress", "output": [], "usage": None})
    yield event("response.in_progress", response={**whole, "status": "in_progress", "output": [], "usage": None})
    for index, item in enumerate(whole["output"]):
        at: dict[str, Any] = {"output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield event("response.output_item.added", **at, item={**item, "status": "in_progress", "content": []})
            yield event("response.content_part.added", **where, part={**part, "text": ""})
            for piece in pieces:
                yield event("response.output_text.delta", **where, delta=piece)
            yield event("response.output_text.done", **where, text=text)
            yield event("response.content_part.done", **where, part=part)
        else:
            where = {"item_id": item["id"], "output_index": index}
            yield event("response.output_item.added", **at, item={**item, "arguments": "", "status": "in_progress"})
            for piece in _chunks(item["arguments"]):
                yield event("response.function_call_arguments.delta", **where, delta=piece)
            yield event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        yield event("response.output_item.done", **at, item=item)
    yield event("response.completed", response=whole)


def _messages_stream(model: str, pieces: list[str], usage: Usage, reply_id: str,
                     tool_calls: Sequence[ToolCall]) -> Iterator[bytes]:
    """Anthropic's stream: the text block (left out when empty and there are tool calls), then
    one ``tool_use`` block per call."""
    inp, out, cached = (usage.input_tokens or 0), (usage.output_tokens or 0), (usage.cached_tokens or 0)
    yield _event({"type": "message_start", "message": {
        "id": reply_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "usage": {"input_tokens": inp, "output_tokens": 1, "cache_read_input_tokens": cached,
                  **({"cache_creation_input_tokens": usage.cache_write_tokens} if usage.cache_write_tokens else {})}}},
        "message_start")
    index = 0
    if "".join(pieces) or not tool_calls:
        yield _event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                     "content_block_start")
        for piece in pieces:
            yield _event({"type": "content_block_delta", "index": 0,
                          "delta": {"type": "text_delta", "text": piece}}, "content_block_delta")
        yield _event({"type": "content_block_stop", "index": 0}, "content_block_stop")
        index = 1
    for call in tool_calls:
        yield _event({"type": "content_block_start", "index": index, "content_block": _tool_use_block(call, False)},
                     "content_block_start")
        for piece in _chunks(call.arguments_json()):
            yield _event({"type": "content_block_delta", "index": index,
                          "delta": {"type": "input_json_delta", "partial_json": piece}}, "content_block_delta")
        yield _event({"type": "content_block_stop", "index": index}, "content_block_stop")
        index += 1
    yield _event({"type": "message_delta", "delta": {"stop_reason": "tool_use" if tool_calls else "end_turn"},
                  "usage": {"output_tokens": out}}, "message_delta")
    yield _event({"type": "message_stop"}, "message_stop")


def error_body(style: ApiStyle | str, message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """An error reply in the style's shape (what SDKs show their users)."""
    if family(style) == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
