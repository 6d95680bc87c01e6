"""An attempt's model calls as a conversation: what each request added, and what came back.

The gateway stores every request and reply body as a blob (``model_call`` events). This module
reads those bytes, never the network, and returns typed values:

- a request in any of the three API styles (OpenAI chat ``messages``, OpenAI Responses
  ``input``/``instructions``, Anthropic ``system``/``messages``) becomes a list of
  :class:`ChatMessage` (system, user, assistant with its tool calls, tool results); each call
  shows only the messages its request added since the earlier request it continues;
- a reply, streamed (server-sent events: chat completion chunks, Responses events, Anthropic
  message events) or not (one JSON object), becomes a :class:`Reply`: its text, tool calls,
  reasoning, the model's own refusal, why it stopped, or the error it carried.

Bodies are hostile: anything not recognised is described (its size, why, a short preview),
never raised. Text is returned as it was sent; the renderers make it inert.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from . import events as ev
from .model_api import sse_data

PREVIEW_CHARS: Final = 200
"""Characters of a body not recognised shown as its preview."""
HISTORY: Final = 16
"""Earlier requests a request is compared with to find the one it continues: an agent running
sub-agents interleaves a few conversations, each resent whole on every call."""
CHAT: Final = "openai-chat"
RESPONSES: Final = "openai-responses"
MESSAGES: Final = "anthropic-messages"


class Stored(NamedTuple):
    """A body as read from ``blobs/``: its bytes, whether the read stopped short of the blob's
    end, and whether the bytes match their digest (None: not read whole, so not checked)."""

    data: bytes
    cut: bool = False
    matches: bool | None = True


class CallBodies(NamedTuple):
    """One ``model_call`` event and its two bodies (None: named but not found, or not named)."""

    call: ev.ModelCall
    request: Stored | None
    response: Stored | None


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model made: the tool, its arguments as sent (a JSON text), the call's id."""

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True)
class ChatMessage:
    """One message of a request: its role, its text (non-text parts described in brackets), the
    tool calls of an assistant message, the call a tool result answers, reasoning sent back."""

    role: str
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False
    reasoning: str = ""


@dataclass(frozen=True)
class Reply:
    """A reply body read whole or in part: what the model said and did, or the error it carried."""

    format: str
    """``openai-chat``, ``openai-responses`` or ``anthropic-messages``, with `` stream`` when streamed;
    ``error`` for a bare error body."""
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""
    refusal: str | None = None
    """The model's own refusal (OpenAI's ``refusal``), not the gateway's."""
    stop: str | None = None
    """Why the reply ended (``finish_reason``, ``stop_reason``, a Responses status)."""
    error: str | None = None
    """An error the body carried (an error reply or an error event)."""
    model: str | None = None


@dataclass(frozen=True)
class Unread:
    """A body that could not be read as a conversation: why, in words, and a short preview."""

    why: str
    preview: str = ""


@dataclass(frozen=True)
class Exchange:
    """One model call: its journaled facts, what its request added, and its reply."""

    call: ev.ModelCall
    request_format: str | None = None
    added: tuple[ChatMessage, ...] = ()
    repeated: int = 0
    """Items at the start of the request that an earlier call's request held (not repeated)."""
    reply_repeated: bool = False
    """Whether the earlier call's reply follows them, sent back as the assistant's (not repeated)."""
    continues: int | None = None
    """The index of the call whose request (and reply) this one's repeats."""
    tools: tuple[str, ...] = ()
    """Names of the tools the request offered."""
    request_note: Unread | None = None
    reply: Reply | None = None
    reply_note: Unread | None = None
    notes: tuple[str, ...] = ()
    """What the reader should know about the bodies: cut, missing, bytes not matching their digest."""


@dataclass(frozen=True)
class Conversation:
    """An attempt's model calls in order of arrival."""

    exchanges: tuple[Exchange, ...] = field(default_factory=tuple)


# ----------------------------------------------------------------------------- reading JSON


def _json(data: bytes) -> Any:
    """The JSON value of ``data``; None when it is not JSON (deep nesting included)."""
    try:
        return json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dump(value: Any, limit: int = 500) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError, TypeError):
        text = "(not printable)"
    return text if len(text) <= limit else text[:limit] + " ..."


def _part(part: Any) -> str:
    """One content part as text: its text, or what kind of part it is in brackets."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return _dump(part)
    kind = _str(part.get("type")) or "part"
    for key in ("text", "input_text", "output_text"):
        if isinstance(part.get(key), str):
            return str(part[key])
    if kind in ("refusal",):
        return f"[refusal] {_str(part.get('refusal')) or ''}"
    if kind in ("thinking", "reasoning_text"):
        return f"[thinking] {_str(part.get('thinking')) or ''}"
    if kind == "redacted_thinking":
        return "[redacted thinking]"
    if kind in ("image_url", "image", "input_image"):
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        source = part.get("source")
        if (isinstance(url, str) and url.startswith("data:")) or isinstance(source, dict):
            return "[image, inline data]"
        return f"[image] {str(url)[:200]}" if url is not None else "[image]"
    return f"[{kind}] " + _dump({k: v for k, v in part.items() if k != "type"})


def _content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "\n".join(_part(p) for p in content)
    return _part(content)


def _arguments(value: Any) -> str:
    """Tool arguments as a JSON text: OpenAI sends one; Anthropic an object, written out here."""
    if isinstance(value, str):
        return value
    return _dump(value, 1 << 30)


def arguments_text(arguments: str) -> str:
    """Tool arguments for a reader: a JSON object as ``key: value`` lines (a string value as it
    is, so code and paths read as code), anything else as sent."""
    value = _json(arguments.encode())
    if not isinstance(value, dict) or not value:
        return arguments
    out = []
    for key, item in value.items():
        if isinstance(item, str) and "\n" in item:
            out.append(f"{key}:")
            out += [f"  {line}" for line in item.rstrip("\n").split("\n")]
        else:
            out.append(f"{key}: {item if isinstance(item, str) else _dump(item, 1 << 30)}")
    return "\n".join(out)


# ----------------------------------------------------------------------------- requests


def _tool_names(tools: Any) -> tuple[str, ...]:
    names = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function")
        name = _str(fn.get("name")) if isinstance(fn, dict) else None
        names.append(name or _str(tool.get("name")) or _str(tool.get("type")) or "?")
    return tuple(names)


def _chat_message(item: Any) -> list[ChatMessage]:
    """One message of a ``messages`` list (OpenAI chat or Anthropic): Anthropic's tool results
    become tool messages of their own, its ``tool_use`` blocks the assistant's tool calls."""
    if not isinstance(item, dict):
        return [ChatMessage("?", _dump(item))]
    role = _str(item.get("role")) or "?"
    content = item.get("content")
    calls: list[ToolCall] = []
    out: list[ChatMessage] = []
    texts: list[str] = []
    reasoning: list[str] = []
    for part in content if isinstance(content, list) else [content] if content is not None else []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "tool_use" and isinstance(part, dict):
            calls.append(ToolCall(_str(part.get("name")) or "?", _arguments(part.get("input")), _str(part.get("id"))))
        elif kind == "tool_result" and isinstance(part, dict):
            out.append(ChatMessage("tool", _content(part.get("content")), tool_call_id=_str(part.get("tool_use_id")),
                                   is_error=part.get("is_error") is True))
        elif kind in ("thinking", "redacted_thinking") and isinstance(part, dict):
            reasoning.append(_str(part.get("thinking")) or "[redacted thinking]")
        else:
            texts.append(_part(part))
    for call in _list(item.get("tool_calls")):
        fn = _dict(_dict(call).get("function"))
        calls.append(ToolCall(_str(fn.get("name")) or "?", _arguments(fn.get("arguments", "")),
                              _str(_dict(call).get("id"))))
    for key in ("reasoning_content", "reasoning"):
        if isinstance(item.get(key), str):
            reasoning.append(item[key])
    if isinstance(item.get("refusal"), str):
        texts.append(f"[refusal] {item['refusal']}")
    if texts or calls or reasoning or not out:
        out.append(ChatMessage(role, "\n".join(texts), tuple(calls), _str(item.get("tool_call_id")),
                               reasoning="\n".join(reasoning)))
    return out


def _responses_item(item: Any, out: list[ChatMessage]) -> None:
    """One item of a Responses ``input`` added to ``out``: a function call joins the assistant
    message before it (as the reply that made it held both)."""
    if not isinstance(item, dict):
        out.append(ChatMessage("?", _dump(item)))
        return
    kind = _str(item.get("type")) or ("message" if "role" in item else "?")
    if kind == "message":
        out.append(ChatMessage(_str(item.get("role")) or "?", _content(item.get("content"))))
    elif kind in ("function_call", "custom_tool_call"):
        args = item.get("arguments", item.get("input", ""))
        call = ToolCall(_str(item.get("name")) or "?", _arguments(args), _str(item.get("call_id")))
        if out and out[-1].role == "assistant":
            last = out.pop()
            out.append(ChatMessage("assistant", last.text, (*last.tool_calls, call), reasoning=last.reasoning))
        else:
            out.append(ChatMessage("assistant", "", (call,)))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        out.append(ChatMessage("tool", output if isinstance(output, str) else _content(output),
                               tool_call_id=_str(item.get("call_id"))))
    elif kind == "reasoning":
        summary = item.get("summary")
        text = "\n".join(_part(p) for p in summary) if isinstance(summary, list) else ""
        out.append(ChatMessage("assistant", "", reasoning=text or "[reasoning, not readable]"))
    else:
        out.append(ChatMessage("item", f"[{kind}] " + _dump({k: v for k, v in item.items() if k != "type"})))


def _merge_reasoning(messages: list[ChatMessage]) -> list[ChatMessage]:
    """A reasoning item followed by the assistant's message: one message, as the reply was."""
    out: list[ChatMessage] = []
    for m in messages:
        prev = out[-1] if out else None
        if (prev is not None and prev.role == "assistant" and m.role == "assistant" and not prev.text
                and not prev.tool_calls and prev.reasoning and not m.reasoning):
            out[-1] = ChatMessage("assistant", m.text, m.tool_calls, reasoning=prev.reasoning)
        else:
            out.append(m)
    return out


class Request(NamedTuple):
    """A request body as sent: its format, its items (a system prompt or instructions first, as a
    message of their own), the tools it offers, and the stored response it continues (Responses'
    ``previous_response_id``: the earlier messages are then the provider's, not in the body)."""

    format: str
    items: list[Any]
    tools: tuple[str, ...]
    previous: str | None = None


def request_items(data: bytes) -> Request | None:
    """A request body read as a :class:`Request`; None when it is in no known format. Items are
    compared as parsed JSON, so a request is matched with the one it repeats before any of its
    messages is read."""
    body = _json(data)
    if not isinstance(body, dict):
        return None
    tools = _tool_names(body.get("tools"))
    if isinstance(body.get("messages"), list):
        fmt = MESSAGES if "system" in body or _has_blocks(body["messages"]) else CHAT
        system = [{"role": "system", "content": body["system"]}] if body.get("system") else []
        return Request(fmt, _unmarked(system + body["messages"]), tools)
    if "input" in body and isinstance(body["input"], str | list):
        items: list[Any] = []
        if isinstance(body.get("instructions"), str):
            items.append({"type": "message", "role": "system", "content": body["instructions"]})
        if isinstance(body["input"], str):
            items.append({"type": "message", "role": "user", "content": body["input"]})
        else:
            items += body["input"]
        return Request(RESPONSES, items, tools, _str(body.get("previous_response_id")))
    return None


def _unmarked(items: list[Any]) -> list[Any]:
    """``items`` without Anthropic's ``cache_control`` marks: an agent moves them to its newest
    messages on every call, and a moved mark is no change of what was said."""
    for item in items:
        if isinstance(item, dict):
            item.pop("cache_control", None)
            for part in _list(item.get("content")):
                if isinstance(part, dict):
                    part.pop("cache_control", None)
                    for inner in _list(part.get("content")):
                        if isinstance(inner, dict):
                            inner.pop("cache_control", None)
    return items


def messages_of(fmt: str, items: Iterable[Any]) -> list[ChatMessage]:
    """The messages of a request's items (see :func:`request_items`)."""
    messages: list[ChatMessage] = []
    for item in items:
        if fmt == RESPONSES:
            _responses_item(item, messages)
        else:
            messages += _chat_message(item)
    return _merge_reasoning(messages) if fmt == RESPONSES else messages


def read_request(data: bytes) -> tuple[str, list[ChatMessage], tuple[str, ...]] | None:
    """A request body's format, messages (a system prompt first) and offered tools; None when
    it is in no known format."""
    parsed = request_items(data)
    if parsed is None:
        return None
    return parsed.format, messages_of(parsed.format, parsed.items), parsed.tools


def _has_blocks(messages: list[Any]) -> bool:
    return any(isinstance(m, dict) and isinstance(m.get("content"), list)
               and any(isinstance(p, dict) and p.get("type") in ("tool_use", "tool_result") for p in m["content"])
               for m in messages)


# ----------------------------------------------------------------------------- replies


def _error_words(error: Any) -> str:
    if isinstance(error, dict):
        message = _str(error.get("message"))
        kind = _str(error.get("type")) or _str(error.get("code"))
        if message is not None:
            return f"{kind}: {message}" if kind else message
    return _str(error) or _dump(error)


@dataclass
class _Stream:
    """A streamed reply put back together, event by event."""

    format: str | None = None
    text: dict[Any, list[str]] = field(default_factory=dict)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[Any, list[Any]] = field(default_factory=dict)  # key: [id, name, argument pieces, final]
    stop: str | None = None
    error: str | None = None
    model: str | None = None

    def call(self, key: Any) -> list[Any]:
        return self.calls.setdefault(key, [None, None, [], None])

    def reply(self) -> Reply:
        calls = tuple(ToolCall(name or "?", final if final is not None else "".join(pieces), id_)
                      for id_, name, pieces, final in self.calls.values())
        return Reply(f"{self.format or '?'} stream", "\n\n".join("".join(p) for p in self.text.values()), calls,
                     "".join(self.reasoning), "".join(self.refusal) or None, self.stop, self.error, self.model)


def _chat_chunk(s: _Stream, obj: dict[str, Any]) -> None:
    s.format = CHAT
    s.model = _str(obj.get("model")) or s.model
    if "error" in obj:
        s.error = _error_words(obj["error"])
    for choice in _list(obj.get("choices")):
        if not isinstance(choice, dict):
            continue
        n = choice.get("index", 0)
        delta = _dict(choice.get("delta"))
        if isinstance(delta.get("content"), str):
            s.text.setdefault(("c", n), []).append(delta["content"])
        if isinstance(delta.get("refusal"), str):
            s.refusal.append(delta["refusal"])
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                s.reasoning.append(delta[key])
        for i, tc in enumerate(_list(delta.get("tool_calls"))):
            if not isinstance(tc, dict):
                continue
            call = s.call(("c", n, tc.get("index", i) if isinstance(tc.get("index", i), int) else i))
            fn = _dict(tc.get("function"))
            call[0] = _str(tc.get("id")) or call[0]
            call[1] = _str(fn.get("name")) or call[1]
            if isinstance(fn.get("arguments"), str):
                call[2].append(fn["arguments"])
        if isinstance(choice.get("finish_reason"), str):
            s.stop = choice["finish_reason"]


def _responses_event(s: _Stream, kind: str, obj: dict[str, Any]) -> None:
    s.format = RESPONSES
    at = obj.get("output_index")
    delta = obj.get("delta")
    if kind == "response.output_text.delta" and isinstance(delta, str):
        s.text.setdefault(("r", at, obj.get("content_index")), []).append(delta)
    elif kind == "response.refusal.delta" and isinstance(delta, str):
        s.refusal.append(delta)
    elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta") and isinstance(delta, str):
        s.reasoning.append(delta)
    elif kind in ("response.output_item.added", "response.output_item.done"):
        _responses_output_item(s, kind, at, obj.get("item"))
    elif kind == "response.function_call_arguments.delta" and isinstance(delta, str):
        s.call(("r", at))[2].append(delta)
    elif kind == "response.function_call_arguments.done" and isinstance(obj.get("arguments"), str):
        s.call(("r", at))[3] = obj["arguments"]
    response = obj.get("response")
    if isinstance(response, dict):
        _responses_end(s, kind, response)


def _responses_output_item(s: _Stream, kind: str, at: Any, item: Any) -> None:
    """An output item added or done: a tool call's id and name, and its whole arguments when done."""
    if isinstance(item, dict) and item.get("type") in ("function_call", "custom_tool_call"):
        call = s.call(("r", at))
        call[0] = _str(item.get("call_id")) or call[0]
        call[1] = _str(item.get("name")) or call[1]
        if kind.endswith(".done"):
            args = item.get("arguments", item.get("input"))
            call[3] = args if isinstance(args, str) else call[3]


def _responses_end(s: _Stream, kind: str, response: dict[str, Any]) -> None:
    """The response object an event carries: its model, and how it ended when it did."""
    s.model = _str(response.get("model")) or s.model
    if kind in ("response.completed", "response.incomplete", "response.failed"):
        s.stop = _str(response.get("status")) or s.stop
        if response.get("error"):
            s.error = _error_words(response["error"])
        details = response.get("incomplete_details")
        if isinstance(details, dict) and isinstance(details.get("reason"), str):
            s.stop = f"{s.stop or 'incomplete'}: {details['reason']}"


_ANTHROPIC_EVENTS: Final = frozenset({"message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop", "ping"})


def _messages_event(s: _Stream, kind: str, obj: dict[str, Any]) -> None:
    s.format = MESSAGES
    index = obj.get("index")
    if kind == "message_start" and isinstance(obj.get("message"), dict):
        s.model = _str(obj["message"].get("model")) or s.model
    elif kind == "content_block_start" and isinstance(obj.get("content_block"), dict):
        block = obj["content_block"]
        if block.get("type") == "tool_use":
            call = s.call(("a", index))
            call[0], call[1] = _str(block.get("id")), _str(block.get("name"))
            if block.get("input"):
                call[2].append(_arguments(block["input"]))
        elif isinstance(block.get("text"), str) and block["text"]:
            s.text.setdefault(("a", index), []).append(block["text"])
    elif kind == "content_block_delta" and isinstance(obj.get("delta"), dict):
        delta = obj["delta"]
        if isinstance(delta.get("text"), str):
            s.text.setdefault(("a", index), []).append(delta["text"])
        elif isinstance(delta.get("partial_json"), str):
            s.call(("a", index))[2].append(delta["partial_json"])
        elif isinstance(delta.get("thinking"), str):
            s.reasoning.append(delta["thinking"])
    elif kind == "message_delta" and isinstance(obj.get("delta"), dict):
        s.stop = _str(obj["delta"].get("stop_reason")) or s.stop


def read_stream(data: bytes) -> Reply | None:
    """A streamed reply put back together; None when no event of a known style is in it."""
    s = _Stream()
    for obj in sse_data(data):
        if not isinstance(obj, dict):
            continue
        kind = _str(obj.get("type"))
        if "choices" in obj or obj.get("object") == "chat.completion.chunk":
            _chat_chunk(s, obj)
        elif kind is not None and kind.startswith("response."):
            _responses_event(s, kind, obj)
        elif kind in _ANTHROPIC_EVENTS:
            _messages_event(s, kind, obj)
        elif kind == "error" or "error" in obj:
            s.error = _error_words(obj.get("error", obj.get("message")))
            s.format = s.format or "error"
    if s.format is None:
        return None
    return s.reply()


def _chat_reply(body: dict[str, Any]) -> Reply:
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[str] = []
    refusal: str | None = None
    stop: str | None = None
    for choice in body["choices"]:
        if not isinstance(choice, dict):
            continue
        m = _dict(choice.get("message"))
        for message in _chat_message({**m, "role": "assistant"}):
            texts.append(message.text)
            calls += message.tool_calls
            reasoning.append(message.reasoning)
        refusal = _str(m.get("refusal")) or refusal
        stop = _str(choice.get("finish_reason")) or stop
    text = "\n\n".join(t for t in texts if t)
    if refusal is not None:
        text = text.replace(f"[refusal] {refusal}", "").strip()
    return Reply(CHAT, text, tuple(calls), "".join(reasoning), refusal, stop, None, _str(body.get("model")))


def _responses_reply(body: dict[str, Any]) -> Reply:
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[str] = []
    refusal: list[str] = []
    for item in body["output"]:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            for part in _list(item.get("content")):
                if isinstance(part, dict) and part.get("type") == "refusal":
                    refusal.append(_str(part.get("refusal")) or "")
                else:
                    texts.append(_part(part))
        elif kind in ("function_call", "custom_tool_call"):
            calls.append(ToolCall(_str(item.get("name")) or "?",
                                  _arguments(item.get("arguments", item.get("input", ""))), _str(item.get("call_id"))))
        elif kind == "reasoning":
            summary = item.get("summary")
            reasoning += [_part(p) for p in summary] if isinstance(summary, list) else []
        else:
            texts.append(_part(item))
    stop = _str(body.get("status"))
    details = body.get("incomplete_details")
    if isinstance(details, dict) and isinstance(details.get("reason"), str):
        stop = f"{stop or 'incomplete'}: {details['reason']}"
    error = _error_words(body["error"]) if body.get("error") else None
    return Reply(RESPONSES, "\n\n".join(texts), tuple(calls), "\n".join(reasoning), "".join(refusal) or None, stop,
                 error, _str(body.get("model")))


def _messages_reply(body: dict[str, Any]) -> Reply:
    message = _chat_message({**body, "role": "assistant"})
    text = "\n\n".join(m.text for m in message if m.text)
    calls = tuple(c for m in message for c in m.tool_calls)
    return Reply(MESSAGES, text, calls, "".join(m.reasoning for m in message), None,
                 _str(body.get("stop_reason")), None, _str(body.get("model")))


def read_reply(data: bytes) -> Reply | None:
    """A reply body (one JSON object, or server-sent events); None when in no known format."""
    head = data.lstrip()[:16]
    if head.startswith((b"data:", b"event:", b"id:", b"retry:", b":")):
        return read_stream(data)
    body = _json(data)
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("choices"), list):
        return _chat_reply(body)
    if isinstance(body.get("output"), list):
        return _responses_reply(body)
    if isinstance(body.get("content"), list) and body.get("type", "message") == "message":
        return _messages_reply(body)
    if "error" in body:
        return Reply("error", error=_error_words(body["error"]))
    return None


# ----------------------------------------------------------------------------- the conversation


def _preview(data: bytes) -> str:
    text = data[: PREVIEW_CHARS * 4].decode("utf-8", "replace")
    return text[:PREVIEW_CHARS] + (" ..." if len(text) > PREVIEW_CHARS or len(data) > PREVIEW_CHARS * 4 else "")


def _unread(data: bytes, what: str) -> Unread:
    return Unread(f"{len(data)} bytes, format not recognised" + (f" ({what})" if what else ""), _preview(data))


def _body_notes(name: str, digest: str | None, size: int | None, stored: Stored | None) -> tuple[list[str], bool]:
    """Words about a body that is not all there, and whether there are bytes to read."""
    if digest is None:
        if size:
            return [f"the {name} body ({size} bytes) was not stored"], False
        return [], False
    if stored is None:
        return [f"the {name} body {digest} is missing from blobs/"], False
    notes = []
    if stored.cut:
        notes.append(f"the {name} body was read only to its first {len(stored.data)} bytes")
    if stored.matches is False:
        notes.append(f"WARNING: the {name} body's bytes do not match their digest")
    return notes, True


def _as_message(reply: Reply) -> ChatMessage:
    return ChatMessage("assistant", reply.text, reply.tool_calls)


def _echoes(sent: ChatMessage, reply: ChatMessage | None) -> bool:
    """Whether ``sent`` is the earlier reply sent back (its text and its calls' names and ids:
    agents re-serialise arguments and drop reasoning, so those are not compared)."""
    if reply is None or sent.role != "assistant":
        return False
    return (sent.text.strip() == reply.text.strip()
            and [(c.name, c.id) for c in sent.tool_calls] == [(c.name, c.id) for c in reply.tool_calls])


_Earlier = tuple[int, tuple[str | None, str], list[Any], ChatMessage | None]
"""An earlier request: its call's index, its endpoint and format, its items, its reply."""


def _request(c: ev.ModelCall, body: Stored, history: deque[_Earlier], notes: list[str]) -> dict[str, Any]:
    """A request's fields of its :class:`Exchange`; it joins ``history`` when it was read."""
    parsed = request_items(body.data)
    if parsed is None:
        return {"request_note": _unread(body.data, "cut short" if body.cut else "")}
    fmt, items, tools, previous = parsed
    if previous is not None:
        notes.append(f"the request continues the stored response {previous[:200]}: its earlier messages "
                     "are the provider's, not in this request")
    best, base, echo = 0, None, None
    # It continues the longest earlier request of its endpoint and format that it holds whole.
    for index, thread, earlier, reply in reversed(history):
        if thread == (c.endpoint, fmt) and best < len(earlier) <= len(items) and items[:len(earlier)] == earlier:
            best, base, echo = len(earlier), index, reply
    added = messages_of(fmt, items[best:])
    echoed = bool(added) and _echoes(added[0], echo)
    return {"request_format": fmt, "added": tuple(added[1:] if echoed else added), "repeated": best,
            "reply_repeated": echoed, "continues": base if best else None, "tools": tools, "items": items}


def _exchange(item: CallBodies, history: deque[_Earlier]) -> Exchange:
    c = item.call
    notes: list[str] = []
    fields: dict[str, Any] = {}
    if c.request is None and not c.request_bytes:
        notes.append("the request's body was not read" + (" (refused on arrival)" if c.refused else ""))
    req_notes, readable = _body_notes("request", c.request, c.request_bytes, item.request)
    notes += req_notes
    if readable and item.request is not None:
        fields = _request(c, item.request, history, notes)
    items = fields.pop("items", None)
    rsp_notes, readable = _body_notes("reply", c.response, c.response_bytes, item.response)
    notes += rsp_notes
    if c.response_truncated:
        notes.append(f"the reply's stored bytes stop at the gateway's cap ({c.response_bytes} bytes sent to the agent)")
    answer: Reply | None = None
    if readable and item.response is not None:
        answer = read_reply(item.response.data)
        if answer is None:
            cut = item.response.cut or bool(c.response_truncated)
            fields["reply_note"] = _unread(item.response.data, "cut short" if cut else "")
        fields["reply"] = answer
    elif c.response is None and not c.refused and c.status is not None and not c.error:
        notes.append("no reply body")
    if items is not None:
        history.append((c.index if c.index is not None else -1, (c.endpoint, fields["request_format"]), items,
                        _as_message(answer) if answer else None))
    return Exchange(call=c, notes=tuple(notes), **fields)


def build(calls: Iterable[CallBodies]) -> Conversation:
    """The conversation of an attempt's model calls, given in order (see the module docstring).

    Each call's bodies are read once and let go: only what each call added is kept, and the
    messages of the last :data:`HISTORY` requests to compare the next one with.
    """
    history: deque[_Earlier] = deque(maxlen=HISTORY)
    out = []
    for item in calls:
        try:
            out.append(_exchange(item, history))
        except Exception as e:  # a body no rule above foresaw: described, never the reader's crash
            out.append(Exchange(call=item.call, notes=(f"the bodies could not be read: {type(e).__name__}",)))
    return Conversation(tuple(out))


def messages_json(messages: Iterable[ChatMessage]) -> Iterator[dict[str, Any]]:
    for m in messages:
        doc: dict[str, Any] = {"role": m.role, "text": m.text}
        if m.tool_calls:
            doc["tool_calls"] = [{"name": t.name, "arguments": t.arguments, "id": t.id} for t in m.tool_calls]
        if m.tool_call_id is not None:
            doc["tool_call_id"] = m.tool_call_id
        if m.is_error:
            doc["is_error"] = True
        if m.reasoning:
            doc["reasoning"] = m.reasoning
        yield doc


def to_json(conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation for scripts (texts as sent, not made inert)."""
    out = []
    for x in conversation.exchanges:
        r = x.reply
        out.append({
            "index": x.call.index, "request_format": x.request_format, "added": list(messages_json(x.added)),
            "repeated": x.repeated, "reply_repeated": x.reply_repeated, "continues": x.continues, "tools": list(x.tools),
            "request_unread": None if x.request_note is None else vars(x.request_note),
            "reply": None if r is None else {
                "format": r.format, "text": r.text, "reasoning": r.reasoning, "refusal": r.refusal, "stop": r.stop,
                "error": r.error, "model": r.model,
                "tool_calls": [{"name": t.name, "arguments": t.arguments, "id": t.id} for t in r.tool_calls]},
            "reply_unread": None if x.reply_note is None else vars(x.reply_note), "notes": list(x.notes)})
    return out
