"""``sealbench model-stub``: a scripted model server on loopback, for tests and dry runs.

It answers the three API styles (:mod:`sealbench.model_api`) on their usual paths
(``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``; the OpenAI ones also without
``/v1``), streamed (``"stream": true``) or not, with usage fields, from a script: a list of
replies used in order, each optionally for one model only. It never reaches a real model and
costs nothing; point a contract's endpoint ``base_url`` at it (``http://127.0.0.1:PORT/v1``
for the OpenAI styles, ``http://127.0.0.1:PORT`` for Anthropic's).

Script (JSON: a list of replies; TOML: ``[[reply]]`` tables)::

    [{"text": "def add(a, b):\\n    return a + b\\n",
      "model": "stub-model",                       # optional: only for requests of this model
      "usage": {"input_tokens": 12, "output_tokens": 7, "cached_tokens": 0,    # optional
                "cache_write_tokens": 0},          # Anthropic's cache_creation_input_tokens
      "status": 200,                               # optional: another status sends an error reply
      "repeat": false},                            # optional: true never uses the reply up
     {"text": "Fixing it.",                        # optional with tool calls
      "tool_calls": [{"name": "write_file",        # optional: the tools the reply calls, in order
                      "arguments": {"path": "add.py", "content": "..."},   # a JSON object
                      "id": "call_fix"}]}]         # optional: call_<N>_<n> (toolu_<N>_<n> for Anthropic)

or in TOML the second one as::

    [[reply]]
    text = "Fixing it."
    [[reply.tool_calls]]
    name = "write_file"
    arguments = { path = "add.py", content = "..." }

A request takes the first reply not yet used whose ``model`` is absent or its own; with none
left it gets a 503 error reply saying so. A reply with tool calls is rendered as each style's
API makes them (OpenAI chat ``message.tool_calls`` with ``finish_reason: "tool_calls"``,
Responses ``function_call`` output items, Anthropic ``tool_use`` content blocks with
``stop_reason: "tool_use"``), streamed or not; the agent's next request (carrying the tool
results) simply takes the next reply. A call without an ``id`` gets ``call_<N>_<n>``
(``toolu_<N>_<n>`` in Anthropic's style): ``N`` the reply's number among those served (as in
its ``stub-N`` id), ``n`` the call's place in the reply from 0; the same requests in the same
order get the same ids, and a ``repeat`` reply's calls get new ones each time.

A reply may also play a faulty or hostile upstream, to test what relays it: ``pause_ms``
before each streamed delta but the first (a stream an agent can cut midway), ``hang`` (``"reply"``: accept the
request and never answer; ``"stream"``: send a streamed reply's first piece, then nothing),
``disconnect`` (close the connection without a byte of reply, as an upstream closing an idle
keep-alive connection just as a request arrives), and ``reflect`` (the reply's text is the
request's headers, the credential also in ``x-request-id``, each write of the reply split in the
middle of the credential so that it crosses two chunks), ``compress`` (gzip, whatever the
request accepts).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError, field_validator

from . import model_api
from .errors import UsageError

if TYPE_CHECKING:
    from aiohttp import web

_ROUTES: dict[str, str] = {
    "/v1/chat/completions": "openai-chat",
    "/chat/completions": "openai-chat",
    "/v1/responses": "openai-responses",
    "/responses": "openai-responses",
    "/v1/messages": "anthropic-messages",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class StubUsage(_Strict):
    """Usage the reply reports."""

    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    cached_tokens: int = Field(0, ge=0)
    cache_write_tokens: int = Field(0, ge=0)
    """Tokens written to the prompt cache (Anthropic's ``cache_creation_input_tokens``; other styles leave them out)."""


class StubToolCall(_Strict):
    """One tool call a scripted reply makes."""

    name: str = Field(min_length=1, description="The tool's name.")
    arguments: dict[str, JsonValue] = Field(description="The tool's arguments: a JSON object.")
    id: str | None = Field(None, min_length=1, description="The call's id; null: call_<N>_<n> (toolu_<N>_<n> "
                           "for Anthropic), N the reply's number among those served, n the call's place from 0.")

    @field_validator("arguments")
    @classmethod
    def _finite(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        try:
            json.dumps(value, allow_nan=False)
        except ValueError:
            raise ValueError("the arguments hold a number JSON cannot carry (nan or inf)") from None
        return value


class StubReply(_Strict):
    """One scripted reply."""

    text: str = Field("", description="The assistant's text.")
    tool_calls: list[StubToolCall] = Field(
        default_factory=list, description="Tool calls the reply makes after its text, each {name, arguments: a "
        "JSON object, id: optional}; empty: a text-only reply. With calls, an empty text is left out.")
    model: str | None = Field(None, description="Only for requests naming this model; null: any.")
    when: str | None = Field(None, description="Only for requests whose body holds this text (as sent, JSON-"
                             "escaped), such as a line of one task's prompt; null: any.")
    usage: StubUsage = Field(default_factory=StubUsage, description="Usage the reply reports.")
    status: int = Field(200, ge=200, le=599, description="HTTP status; not 200 sends an error reply.")
    repeat: bool = Field(False, description="True: the reply is never used up.")
    pause_ms: int = Field(0, ge=0, description="Milliseconds before each delta of a streamed reply but the first "
                          "(the events before the first go out at once, each its own write).")
    hang: Literal["reply", "stream"] | None = Field(
        None, description="reply: never answer; stream: send a streamed reply's first piece, then nothing; "
        "null: answer.")
    disconnect: bool = Field(False, description="True: close the connection without a byte of reply.")
    reflect: bool = Field(False, description="True: the text is the request's headers, the credential also in "
                          "x-request-id, and each write is split in the middle of the credential.")
    compress: bool = Field(False, description="True: the reply is gzip-compressed, whatever the request accepts.")


class _TomlScript(_Strict):
    reply: list[StubReply] = Field(min_length=1)


def load_script(path: Path) -> list[StubReply]:
    """The replies of a script file (``.toml``: ``[[reply]]`` tables; anything else: a JSON list).

    Raises:
        UsageError: the file cannot be read or is not a script, naming it.
    """
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read the model script {path}: {e.strerror or e}") from None
    try:
        if path.suffix == ".toml":
            return _TomlScript.model_validate(tomllib.loads(raw.decode())).reply
        replies = TypeAdapter(list[StubReply]).validate_python(json.loads(raw))
    except (ValueError, ValidationError) as e:
        raise UsageError(f"{path} is not a model script (a JSON list of replies, or TOML [[reply]] tables): "
                         f"{e}") from None
    if not replies:
        raise UsageError(f"{path} has no reply")
    return replies


@dataclass
class Script:
    """The replies, and which are used up (one lock: requests come on one event loop)."""

    replies: list[StubReply]
    used: set[int] = field(default_factory=set)
    served: int = 0
    received: int = 0
    """Requests that reached the server, whatever became of them: what an upstream would bill."""

    def take(self, model: str, body: bytes = b"") -> StubReply | None:
        for i, reply in enumerate(self.replies):
            if i in self.used or (reply.model is not None and reply.model != model):
                continue
            if reply.when is not None and reply.when.encode() not in body:
                continue
            if not reply.repeat:
                self.used.add(i)
            self.served += 1
            return reply
        return None


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _tool_calls(style: str, reply: StubReply, served: int) -> list[model_api.ToolCall]:
    """The reply's tool calls, each with its id (the scripted one, else ``call_<served>_<n>``)."""
    prefix = "toolu_" if model_api.family(style) == "anthropic" else "call_"
    return [model_api.ToolCall(call.id or f"{prefix}{served}_{n}", call.name, dict(call.arguments))
            for n, call in enumerate(reply.tool_calls)]


async def _answer(request: web.BaseRequest, script: Script, latency_s: float, key: str | None,
                  stop: asyncio.Event) -> web.StreamResponse:
    from aiohttp import web

    script.received += 1
    style = _ROUTES.get(request.path)
    if style is None or request.method != "POST":
        return web.json_response({"error": {"message": f"no such route: {request.method} {request.path}"}},
                                 status=404)
    headers = {k.lower(): v for k, v in request.headers.items()}
    credential = model_api.presented_token(style, headers)
    if key is not None and credential != key:
        return web.json_response(model_api.error_body(style, "invalid api key", "authentication_error"),
                                 status=401)
    raw = await request.read()
    try:
        body = json.loads(raw)
    except ValueError:
        return web.json_response(model_api.error_body(style, "the body is not JSON"), status=400)
    model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(model, str):
        return web.json_response(model_api.error_body(style, "the body names no model"), status=400)
    if latency_s > 0:
        await asyncio.sleep(latency_s)
    reply = script.take(model, raw)
    if reply is None:
        return web.json_response(model_api.error_body(style, f"the script has no reply left for model {model}",
                                                      "overloaded_error"), status=503)
    if reply.disconnect and request.transport is not None:
        request.transport.close()  # aiohttp's own write of the response then finds it closed
        return web.Response()
    if reply.hang == "reply":
        await stop.wait()
    if reply.status != 200:
        return web.json_response(model_api.error_body(style, reply.text or f"scripted status {reply.status}",
                                                      "api_error"), status=reply.status)
    return await _reply(request, _Rendered.of(request, style, model, reply, script.served, credential),
                        body.get("stream") is True, stop)


@dataclass(frozen=True)
class _Rendered:
    """What a scripted reply says, in the request's API style."""

    style: str
    model: str
    reply: StubReply
    text: str
    usage: model_api.Usage
    reply_id: str
    calls: list[model_api.ToolCall]
    secret: bytes
    """Written in two writes a moment apart (a reflected credential), else empty."""
    headers: dict[str, str]

    @classmethod
    def of(cls, request: web.BaseRequest, style: str, model: str, reply: StubReply, served: int,
           credential: str | None) -> _Rendered:
        usage = model_api.Usage(reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cached_tokens,
                                reply.usage.cache_write_tokens)
        if not reply.reflect:
            return cls(style, model, reply, reply.text, usage, f"stub-{served}", _tool_calls(style, reply, served),
                       b"", {})
        text = "".join(f"{name}: {value}\n" for name, value in request.headers.items())
        return cls(style, model, reply, text, usage, f"stub-{served}", _tool_calls(style, reply, served),
                   (credential or "").encode(), {"x-request-id": credential or ""})

    def body(self) -> dict[str, Any]:
        return model_api.reply_body(self.style, self.model, self.text, self.usage, self.reply_id, self.calls)


async def _reply(request: web.BaseRequest, r: _Rendered, stream: bool, stop: asyncio.Event) -> web.StreamResponse:
    from aiohttp import web

    if stream:
        return await _stream(request, r, stop)
    if not r.reply.reflect:
        answer = web.json_response(r.body())
        if r.reply.compress:
            answer.enable_compression(web.ContentCoding.gzip)
        return answer
    whole = json.dumps(r.body()).encode()
    resp = web.StreamResponse(headers={"Content-Type": "application/json", **r.headers})
    if r.reply.compress:
        resp.enable_compression(web.ContentCoding.gzip)
    else:
        resp.content_length = len(whole)
    await resp.prepare(request)
    await _write_split(resp, whole, r.secret)
    await resp.write_eof()
    return resp


async def _stream(request: web.BaseRequest, r: _Rendered, stop: asyncio.Event) -> web.StreamResponse:
    from aiohttp import web

    reply = r.reply
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **r.headers})
    if reply.compress:
        resp.enable_compression(web.ContentCoding.gzip)
    await resp.prepare(request)
    pieces = [r.text] if reply.reflect else _pieces(r.text)
    try:
        started = False
        for chunk in model_api.reply_stream(r.style, r.model, pieces, r.usage, r.reply_id, r.calls):
            if started and reply.pause_ms and b"delta" in chunk:
                await asyncio.sleep(reply.pause_ms / 1000)
            started = started or b"delta" in chunk
            await _write_split(resp, chunk, r.secret)
            if reply.hang == "stream" and b"delta" in chunk:
                await stop.wait()
        await resp.write_eof()
    except ConnectionError:  # the client went away mid-stream: what clients do
        pass
    return resp


async def _write_split(resp: web.StreamResponse, data: bytes, secret: bytes) -> None:
    """Write ``data``; one holding ``secret`` in two writes a moment apart, cut in its middle."""
    at = data.find(secret) if secret else -1
    if at < 0:
        await resp.write(data)
        return
    cut = at + len(secret) // 2
    await resp.write(data[:cut])
    await asyncio.sleep(0.05)
    await resp.write(data[cut:])


@dataclass
class StubServer:
    """A running scripted model (see :func:`start`)."""

    port: int
    script: Script
    _loop: asyncio.AbstractEventLoop
    _thread: threading.Thread
    _stop: asyncio.Event

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop serving (idempotent: a test may stop the upstream before its fixture does)."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


async def _serve(script: Script, port: int, latency_s: float, key: str | None,
                 ready: asyncio.Future[int] | None, stop: asyncio.Event) -> None:
    from aiohttp import web

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        return await _answer(request, script, latency_s, key, stop)

    server = web.Server(handle)
    runner = web.ServerRunner(server, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[attr-defined]
    bound = sockets[0].getsockname()[1] if sockets else port
    if ready is not None:
        ready.set_result(bound)
    else:
        print(f"model-stub listening on http://127.0.0.1:{bound} ({len(script.replies)} replies)", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def start(replies: Sequence[StubReply], *, port: int = 0, latency_ms: int = 0, key: str | None = None) -> StubServer:
    """Serve ``replies`` on 127.0.0.1 from a thread of this process (for tests and benchmarks)."""
    script = Script(list(replies))
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    got = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        stop = asyncio.Event()
        ready: asyncio.Future[int] = loop.create_future()
        started["stop"] = stop

        def on_ready(fut: asyncio.Future[int]) -> None:
            started["port"] = fut.result()
            got.set()

        ready.add_done_callback(on_ready)
        try:
            loop.run_until_complete(_serve(script, port, latency_ms / 1000, key, ready, stop))
        except BaseException as e:
            started["error"] = e
            got.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="model-stub", daemon=True)
    thread.start()
    got.wait(30)
    if "port" not in started:
        raise OSError(f"the model stub did not start: {started.get('error')}")
    return StubServer(started["port"], script, loop, thread, started["stop"])


def serve_forever(script_path: Path, port: int, latency_ms: int, key_env: str | None) -> Literal[0]:
    """The ``model-stub`` command: serve until interrupted.

    Raises:
        UsageError: a bad script, a bad port or latency, an unset key variable.
    """
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a port (0 picks a free one)")
    if latency_ms < 0:
        raise UsageError("--latency-ms must be 0 or more")
    key = None
    if key_env is not None:
        key = os.environ.get(key_env)
        if not key:
            raise UsageError(f"--require-key-env {key_env}: the variable is not set")
    script = Script(load_script(script_path))
    try:
        asyncio.run(_serve(script, port, latency_ms / 1000, key, None, asyncio.Event()))
    except OSError as e:
        print(f"error: model-stub cannot listen on 127.0.0.1:{port}: {e.strerror or e}", file=sys.stderr)
        raise SystemExit(2) from None
    return 0
