"""The model gateway: the one way out of the sandbox, to the model endpoints the contract declares.

For each attempt of a command agent, :meth:`Gateway.open_attempt` makes a per-attempt token
and a unix socket in a directory of the gateway's own; the sandbox binds that directory alone
(read-only) and runs a relay that listens on ``127.0.0.1:RELAY_PORT`` of its empty network
namespace and forwards bytes to the socket (:mod:`sealbench.relay`). The agent finds the token
in ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` and the gateway's URLs in ``OPENAI_BASE_URL`` /
``ANTHROPIC_BASE_URL``.

The gateway is an aiohttp server on an asyncio loop of its own (one thread of the runner
process) and treats every byte from the socket as hostile. A request is forwarded only when
it is ``POST /<endpoint name><the style's path>`` exactly (no escapes, no other path, and no
query but the Anthropic SDK's ``?beta=true`` on the Messages path, dropped), carries the token of the attempt whose socket it came in on (a finished attempt's
token is refused), has a JSON body under the size cap naming a declared model, and arrives
within the client timeout; the attempt's connections are capped. Forwarded, it goes to the
declared base URL only, with the real key (read from the host variable the contract names)
in place of the token, only a few content headers passed on, no redirect followed. The reply
streams back as it arrives. A request to be forwarded is first journaled durably as a
:class:`~sealbench.events.ModelCallStarted` (its body stored): a call the upstream received
is on the record whatever ends the runner, and a resume counts it against the caps. Every
request, forwarded or refused, becomes one :class:`~sealbench.events.ModelCall` event,
journaled before the attempt's agent_finished (:meth:`AttemptAccess.close` waits for them),
with the bodies as blobs and the usage the upstream reported; a body that cannot be stored is
recorded by digest and size, and the attempt stops on the storage failure.

Nothing of aiohttp is imported until a run declares an endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from . import events as ev
from . import model_api, scratch
from .derive import DERIVATION_VERSION
from .errors import HarnessError, RunRefusal
from .formats import Budget, ModelEndpoint, ScoringContract
from .sandbox import Prepared, Relay, SandboxResult
from .vocabulary import vocabulary_of

if TYPE_CHECKING:
    from aiohttp import ClientSession, web

    from .replay import Record

RELAY_PORT: Final = 7700
"""The loopback port the relay listens on inside every sandbox (its network namespace is its own)."""

_DROPPED_QUERIES: Final = frozenset({("anthropic-messages", "beta=true")})
"""The query strings a declared path may carry (not forwarded): those the agents' SDKs send."""
_PASSED_REQUEST_HEADERS: Final = ("content-type", "accept", "anthropic-version", "anthropic-beta", "openai-beta")
_PASSED_REPLY_HEADERS: Final = ("content-type", "retry-after", "x-request-id", "request-id", "cache-control")
_DECODED: Final = frozenset({"", "identity", "gzip", "deflate", "br", "zstd"})
"""Reply encodings aiohttp decodes: an upstream that compresses despite ``Accept-Encoding:
identity`` reaches the agent decoded, where the key can be looked for; any other is refused."""
_KEY_REMOVED: Final = b"[key removed]"
_AGENT_CLOSED: Final = "the agent closed the connection before the reply ended"
_HEAD_SCAN: Final = 64 * 8192
"""How much of a connection's first bytes is searched for the end of its headers (more than
aiohttp accepts: 64 fields of 8,190 bytes)."""


@dataclass(frozen=True)
class GatewayLimits:
    """What one attempt may ask of the gateway."""

    max_body_bytes: int = 16 * 2**20
    """Largest request body read; a larger one is refused (413) unread."""
    buffered_bytes: int = 64 * 2**20
    """Most request bytes one attempt's requests in flight may hold in the gateway's memory at
    once (its connections times the body cap would be 512 MiB); past it a request is refused (503)."""
    max_field_bytes: int = 8190
    """Longest request line and header field."""
    max_headers: int = 64
    """Most request headers."""
    connections: int = 32
    """Open connections per attempt; more are closed on arrival."""
    client_timeout_s: float = 30.0
    """Longest the agent may take to send a request body."""
    keepalive_s: float = 30.0
    """An idle keep-alive connection is closed after this long."""
    upstream_read_s: float = 300.0
    """Longest the upstream may keep silent, for its reply's first byte or between two chunks, for
    an endpoint that sets no ``read_timeout_s``; never more than a quarter of the task's wall-clock
    cap, so that a hanging upstream ends the call as its own failure well before the attempt ends."""
    stored_reply_bytes: int = 8 * 2**20
    """The most of a reply kept as its blob (the agent gets all of it)."""
    stored_refused_bytes: int = 4096
    """The most of a refused request's body kept as its blob (its size and digest are recorded
    whole): a refusal costs the run directory little, however large the body."""
    stored_attempt_bytes: int = 128 * 2**20
    """Most request bytes one attempt's calls may store; past it a body's blob is a prefix."""
    stored_task_bytes: int = 512 * 2**20
    """Most request bytes one task's calls may store over its attempts (same)."""
    requests_per_s: float = 20.0
    """The pace of an attempt's requests: past it (and its burst) a request waits its turn, and
    one that would wait over ``client_timeout_s`` is refused (429)."""
    request_burst: int = 40
    """Requests an attempt may make at once before its pace applies."""
    journaled_refusals: int = 20
    """Refused requests journaled one by one per attempt; past them refusals are counted, and one
    line at the attempt's end says how many (derivation version 5 on)."""




def read_keys(contract: ScoringContract, sandbox_kind: str, environ: Mapping[str, str] | None = None
              ) -> dict[str, str]:
    """Each declared endpoint's key, read from the host variable the contract names.

    Raises:
        RunRefusal: a key variable unset or empty; two endpoints of one name; a sandbox that
            cannot relay (only bubblewrap gives the agent a network namespace of its own).
    """
    endpoints = contract.model_endpoints or []
    env = os.environ if environ is None else environ
    names = [e.name for e in endpoints]
    if len(names) != len(set(names)):
        raise RunRefusal(f"model_endpoints: two endpoints are named alike ({sorted(names)}); each name must be unique")
    if endpoints and sandbox_kind != "bubblewrap":
        raise RunRefusal(f"the contract declares model endpoints, which only the bubblewrap sandbox can relay "
                         f"(this run's sandbox: {sandbox_kind}); run with --sandbox bubblewrap")
    keys: dict[str, str] = {}
    for endpoint in endpoints:
        key = env.get(endpoint.key_env, "")
        if not key.strip():
            raise RunRefusal(f"model endpoint {endpoint.name!r}: the host variable {endpoint.key_env} that holds "
                             f"its key is not set; export {endpoint.key_env}=<key> in the shell that runs "
                             f"`sealbench run` (the key is read at run time, never written anywhere)")
        keys[endpoint.name] = key
    return keys


class _Redactor:
    """Removes the keys from a byte stream fed in chunks: a key split over two chunks too.

    Each :meth:`feed` returns what may be relayed so far; the end of a chunk that could begin a
    key is held back until the next chunk (or :meth:`flush`) tells.
    """

    def __init__(self, keys: Sequence[bytes]) -> None:
        self._keys = sorted({k for k in keys if k}, key=len, reverse=True)
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._held + chunk
        for key in self._keys:
            data = data.replace(key, _KEY_REMOVED)
        hold = 0
        last = data[-1:]
        for key in self._keys if last else ():
            # The longest start of a key that ends the data: only where the key holds its last byte.
            i = key.rfind(last, 0, min(len(key) - 1, len(data)))
            while i + 1 > hold:
                if data.endswith(key[:i + 1]):
                    hold = i + 1
                    break
                i = key.rfind(last, 0, i)
        self._held = data[len(data) - hold:] if hold else b""
        return data[:len(data) - hold]

    def flush(self) -> bytes:
        """What is held back, at the end of the stream (no key: it ended before one did)."""
        held, self._held = self._held, b""
        return held


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s object hook refusing a key twice in one object: parsers differ on which
    one wins, so the gateway and the upstream could read two requests in one body."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _folded_twice(body: dict[str, Any]) -> tuple[str, str] | None:
    """Two keys of the request's top level that are one key to a parser matching names without
    case (Go's encoding/json, behind some compatible servers, folds even U+017F to "s", the last
    one winning): the gateway and such an upstream would read two models, or two stream flags."""
    seen: dict[str, str] = {}
    for key in body:
        other = seen.setdefault(key.casefold(), key)
        if other != key:
            return other, key
    return None


@dataclass
class _Call:
    index: int
    started_at: str
    t0: float
    endpoint: str | None = None
    model: str | None = None
    streamed: bool | None = None
    status: int | None = None
    request: bytes | None = None
    reply: bytearray = field(default_factory=bytearray)
    reply_bytes: int = 0
    refused: str | None = None
    error: str | None = None
    upstream_failed: str | None = None
    """Why the model endpoint failed this call (unreachable, 5xx, 429, a reply cut short): the
    infrastructure's failure, never the agent's."""
    cap: str | None = None
    """The budget cap that refused the call."""
    replayed: bool = False
    diverged: str | None = None
    forwarded: bool = False
    """Sent upstream (or answered from a replay's record): it counts against the task's caps."""
    accounted: bool = False
    usage: model_api.Usage | None = None
    latency_ms: int = 0
    count: int | None = None
    """The refused requests this line stands for (the attempt's count of refusals not journaled one by one)."""
    stored_request: _Stored | None = None
    """The request as stored when the call was announced (the model_call names the same)."""
    announcing: asyncio.Future[None] | None = None
    """The writing of its model_call_started line."""


@dataclass(frozen=True)
class _Stored:
    """A body as kept: its blob (None when nothing could be stored), the digest of the whole
    body when the blob is not all of it, and why the bytes are missing when the store failed."""

    blob: str | None
    sha256: str | None = None
    truncated: bool = False
    missing: str | None = None


@dataclass
class _Attempt:
    task_id: str
    attempt: int
    token: str
    socket: Path
    server: asyncio.AbstractServer | None = None
    web_server: Any = None
    calls: int = 0
    refused_connections: int = 0
    open_connections: int = 0
    buffered: int = 0
    pending: set[asyncio.Future[None]] = field(default_factory=set)
    last_write: asyncio.Future[None] | None = None
    closed: bool = False
    upstream_failing: str | None = None
    """Set by the last forwarded call to end: why the model endpoint failed it, or None."""
    stored_bytes: int = 0
    """Request bytes this attempt's calls stored (under GatewayLimits.stored_attempt_bytes)."""
    storage_failure: str | None = None
    """Why a call's bodies or line could not be stored: the harness's failure, never the agent's."""
    next_turn: float = 0.0
    """When, on the loop's clock, the attempt's next request may be served (its pace)."""
    refusals: int = 0
    """Refused requests journaled one by one."""
    refused_more: int = 0
    """Refused requests counted, not journaled one by one (one line at the close says how many)."""
    refused_last: str = ""


@functools.cache
def _handler_class() -> Any:
    """aiohttp's request handler, telling ``on_malformed(status, why)`` of each request its parser
    refused (aiohttp answers those itself, before any handler of ours runs)."""
    from aiohttp.web_protocol import RequestHandler

    class _Handler(RequestHandler):
        __slots__ = ("on_malformed",)
        on_malformed: Callable[[int, object], None]

        def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                         message: str | None = None) -> Any:
            if status < 500:
                self.on_malformed(status, message or exc)
            return super().handle_error(request, status, exc, message)

    return _Handler


class _Refuse(asyncio.Protocol):
    """A connection over the attempt's cap: closed on arrival."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _Counted(asyncio.Protocol):
    """The attempt's server protocol for one connection, counted while it is open.

    A connection whose first request's headers have not all arrived ``head_timeout_s`` after
    it was accepted is closed (``on_slow`` journals it): a client that trickles its headers
    holds no connection of the attempt's for long.
    """

    def __init__(self, att: _Attempt, inner: asyncio.Protocol, head_timeout_s: float,
                 on_slow: Callable[[], None]) -> None:
        self._att = att
        self._inner = inner
        self._head = bytearray()
        self._head_done = False
        self._timer: asyncio.TimerHandle | None = None
        self._timeout_s = head_timeout_s
        self._on_slow = on_slow
        att.open_connections += 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._timer = asyncio.get_running_loop().call_later(self._timeout_s, self._too_slow)
        self._inner.connection_made(transport)

    def _too_slow(self) -> None:
        if not self._head_done:
            self._on_slow()
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if not self._head_done:
            # Only the first request's header block is looked for; aiohttp parses everything.
            self._head += data[:_HEAD_SCAN]
            if b"\r\n\r\n" in self._head or len(self._head) >= _HEAD_SCAN:
                self._head_done = True
                self._head.clear()
                if self._timer is not None:
                    self._timer.cancel()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._att.open_connections -= 1
        self._inner.connection_lost(exc)


@dataclass
class Ledger:
    """One task's model use so far, over its attempts, as the budget's caps count it."""

    calls: int = 0
    """Calls forwarded (or being forwarded) upstream."""
    tokens: int = 0
    """Input plus output tokens as reported."""
    tokens_known: bool = True
    """False once a forwarded call was answered without usage: the use can no longer be bounded."""
    cost: float = 0.0
    cost_known: bool = True

    def reached(self, budget: Budget | None) -> str | None:
        """The first cap of ``budget`` this use has reached, or None."""
        if budget is None:
            return None
        if budget.max_model_calls is not None and self.calls >= budget.max_model_calls:
            return "max_model_calls"
        if budget.max_model_tokens is not None and (not self.tokens_known or self.tokens >= budget.max_model_tokens):
            return "max_model_tokens"
        if budget.max_model_cost is not None and (not self.cost_known or self.cost >= budget.max_model_cost):
            return "max_model_cost"
        return None


def ledger_of(calls: Sequence[ev.ModelCall | ev.ModelCallStarted], endpoints: Sequence[ModelEndpoint]) -> Ledger:
    """A task's use from its journaled calls (a resumed run's gateway starts from it). A call
    started whose model_call never came was forwarded with its use unknown: counted, and the
    token and cost caps taken as reached."""
    from .usage import call_cost, unfinished

    by_name = {e.name: e for e in endpoints}
    out = Ledger()
    for _lost in unfinished(calls):
        out.calls += 1
        out.tokens_known = out.cost_known = False
    for call in calls:
        if not isinstance(call, ev.ModelCall) or call.refused is not None:
            continue
        endpoint = by_name.get(call.endpoint or "")
        _add(out, call.status, call.input_tokens, call.output_tokens,
             call_cost(call, endpoint.style if endpoint else None,
                       (endpoint.prices or {}).get(call.model or "") if endpoint else None), count=True,
             read_apart=_read_apart(endpoint.style if endpoint else None, call.cached_tokens))
    return out


def _read_apart(style: str | None, cached_tokens: int | None) -> int:
    """The cached tokens a call read that its style reports apart from its input tokens
    (Anthropic's): the token cap counts them as read, as it does the OpenAI styles' (in input)."""
    from .usage import ANTHROPIC_STYLES

    return cached_tokens or 0 if style in ANTHROPIC_STYLES else 0


def _add(ledger: Ledger, status: int | None, input_tokens: int | None, output_tokens: int | None,
         cost: float | None, *, count: bool, read_apart: int = 0) -> None:
    if count:
        ledger.calls += 1
    if input_tokens is None and output_tokens is None:
        if status is None or status < 400:
            # Answered without usage, or sent and then cut off by the agent before any answer
            # (the upstream may bill it all the same): nobody knows for how much.
            ledger.tokens_known = False
    else:
        ledger.tokens += (input_tokens or 0) + (output_tokens or 0) + read_apart
    if cost is None:
        ledger.cost_known = False
    else:
        ledger.cost += cost


_CAP_WORDS: Final = {"max_model_calls": "model calls", "max_model_tokens": "model tokens",
                     "max_model_cost": "model cost"}


class Gateway:
    """One run's gateway (see the module docstring). :meth:`start` before use, :meth:`close` after.

    ``record`` journals an event durably (called from a writer thread of the gateway's);
    ``store`` keeps bytes as a blob and returns its digest. ``derivation_version`` is the run's:
    when its vocabulary has ``announced_calls``, each call is journaled before it is forwarded.
    """

    def __init__(self, endpoints: Sequence[ModelEndpoint], keys: Mapping[str, str],
                 record: Callable[[ev.Event], object], store: Callable[[bytes], str],
                 limits: GatewayLimits | None = None, *, budget: Budget | None = None,
                 used: Mapping[str, Ledger] | None = None, replay: Record | None = None,
                 derivation_version: int = DERIVATION_VERSION) -> None:
        self.endpoints = {e.name: e for e in endpoints}
        self.budget = budget
        self._announce = vocabulary_of(derivation_version).announced_calls
        self._stored_lock = threading.Lock()
        self._stored_task: dict[str, int] = {}
        self.replay = replay
        """In a replay, the record every call is answered from (nothing is forwarded)."""
        # Each task's use over its attempts (seeded from the journal on resume); only the loop
        # thread reads and writes it.
        self._ledgers: dict[str, Ledger] = {tid: dataclasses.replace(led) for tid, led in (used or {}).items()}
        self._cap_locks: dict[str, asyncio.Lock] = {}
        self._keys = dict(keys)
        self._key_bytes = [k.encode() for k in self._keys.values()]
        self._record = record
        self._store = store
        self.limits = limits or GatewayLimits()
        self._tokens: dict[str, _Attempt] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: ClientSession | None = None
        self._writer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gateway-journal")
        self._dir: Path | None = None
        self._sockets = 0

    # ------------------------------------------------------------------ life cycle (runner threads)

    def start(self) -> Gateway:
        """Start the loop thread and the upstream client.

        Raises:
            HarnessError: the gateway could not start.
        """
        self._dir = scratch.temp_dir("gateway")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=_run_loop, args=(loop,), name="model-gateway", daemon=True)
        self._thread.start()
        try:
            self._call(self._start_session())
        except Exception as e:
            self.close()
            raise HarnessError(f"the model gateway could not start: {e}") from e
        return self

    def _call(self, coro: Any, timeout_s: float | None = 60.0) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _start_session(self) -> None:
        import aiohttp

        # TCP_NODELAY is aiohttp's default on its client connections.
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=60, force_close=False)
        # Tells a request (its trace_request_ctx) that it went out on a pooled connection.
        trace = aiohttp.TraceConfig()

        async def reused(_session: Any, context: Any, _params: Any) -> None:
            if isinstance(context.trace_request_ctx, dict):
                context.trace_request_ctx["reused"] = True

        trace.on_connection_reuseconn.append(reused)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True, trace_configs=[trace],
                                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=30,
                                                                            sock_read=self.limits.upstream_read_s))

    def close(self) -> None:
        """Close every attempt still open, the upstream client and the loop; remove the sockets (idempotent)."""
        if self._loop is not None and self._loop.is_running():
            with contextlib.suppress(Exception):
                self._call(self._close_all(), 30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(10)
        self._writer.shutdown(wait=True)
        if self._dir is not None:
            import shutil

            shutil.rmtree(self._dir, ignore_errors=True)

    async def _close_all(self) -> None:
        for att in list(self._tokens.values()):
            await self._close(att)
        if self._session is not None:
            await self._session.close()
        # A closed transport lets go of its socket on a later turn of the loop.
        for _ in range(3):
            await asyncio.sleep(0)

    def seed(self, task_id: str, used: Ledger) -> None:
        """Set what ``task_id`` has used before its next attempt: the calls it made where this
        gateway did not see them (on another node of a cluster, see :mod:`sealbench.ray_executor`)."""
        async def set_it() -> None:
            self._ledgers[task_id] = dataclasses.replace(used)

        self._call(set_it())

    # ------------------------------------------------------------------ attempts

    def open_attempt(self, task_id: str, attempt: int) -> AttemptAccess:
        """A new token and socket for one attempt; close the access when the attempt's agent is gone.

        Raises:
            HarnessError: the socket could not be made.
        """
        try:
            att: _Attempt = self._call(self._open(task_id, attempt))
        except OSError as e:
            raise HarnessError(f"the model gateway could not open a socket for {task_id} attempt {attempt}: {e}") from e
        return AttemptAccess(self, att, self._env(att.token), Relay(RELAY_PORT, att.socket))

    def _env(self, token: str) -> dict[str, str]:
        env: dict[str, str] = {"SEALBENCH_MODEL_TOKEN": token}
        described: dict[str, Any] = {}
        for name, endpoint in self.endpoints.items():
            url = f"http://127.0.0.1:{RELAY_PORT}/{name}"
            described[name] = {"url": url, "style": endpoint.style, "models": list(endpoint.models)}
            upper = model_api.family(endpoint.style).upper()
            if f"{upper}_BASE_URL" not in env:
                env[f"{upper}_BASE_URL"] = url
                env[f"{upper}_API_KEY"] = token
        env["SEALBENCH_MODEL_ENDPOINTS"] = json.dumps(described, sort_keys=True, separators=(",", ":"))
        return env

    async def _open(self, task_id: str, attempt: int) -> _Attempt:
        from aiohttp import web

        assert self._dir is not None
        self._sockets += 1
        folder = self._dir / str(self._sockets)
        folder.mkdir(mode=0o700)
        att = _Attempt(task_id, attempt, "sbx-" + secrets.token_urlsafe(24), folder / "s")
        limits = self.limits

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            return await self._handle(att, request)

        att.web_server = web.Server(handle, handler_cancellation=True, keepalive_timeout=limits.keepalive_s,
                                    max_line_size=limits.max_field_bytes, max_field_size=limits.max_field_bytes,
                                    max_headers=limits.max_headers, access_log=None)

        def factory() -> asyncio.Protocol:
            # Counted here, where a connection is accepted: the loop accepts a burst of them before
            # any is made, so the server's own list would still be empty.
            if att.open_connections >= limits.connections:
                att.refused_connections += 1
                return _Refuse()
            server = att.web_server
            # web.Server's own handler, but one that tells what aiohttp's parser refused (a
            # malformed request line or header, one over the size caps): such a request never
            # reaches _handle, and is journaled here as a refused call.
            inner = _handler_class()(server, loop=asyncio.get_running_loop(), **server._kwargs)
            inner.on_malformed = lambda status, what: self._refused_on_arrival(
                att, status, f"malformed HTTP ({status}): {str(what or 'unparsable request')[:300]}")
            return _Counted(att, inner, limits.client_timeout_s, lambda: self._refused_on_arrival(
                att, None, f"the request's headers did not arrive within {limits.client_timeout_s:g} s; "
                           "the connection was closed"))

        assert self._loop is not None
        att.server = await self._loop.create_unix_server(factory, str(att.socket), backlog=256)
        self._tokens[att.token] = att
        return att

    def _refused_on_arrival(self, att: _Attempt, status: int | None, why: str) -> None:
        """Journal a request refused before it could be read as one (on the loop thread)."""
        if att.closed:
            return
        call = _Call(att.calls, _now(), asyncio.get_running_loop().time())
        att.calls += 1
        call.status = status
        call.refused = why
        self._journal(att, call)

    def _journal(self, att: _Attempt, call: _Call) -> None:
        """Journal a call, or, past the attempt's first refusals, count a refused one: an agent
        that floods the gateway costs the journal a bounded number of lines."""
        if call.refused is not None and self._announce:
            if att.refusals >= self.limits.journaled_refusals:
                att.refused_more += 1
                att.refused_last = call.refused
                return
            att.refusals += 1
        self._write_later(att, call)

    def close_attempt(self, att: _Attempt) -> None:
        if self._loop is None or not self._loop.is_running():
            return
        # No timeout: the attempt's lines are few (refusals are counted past the first), and
        # a close that gave up would leave lines to land after its agent_finished.
        self._call(self._close(att), None)

    async def _close(self, att: _Attempt) -> None:
        if att.closed:
            return
        att.closed = True  # from here on its token is a finished attempt's
        if att.server is not None:
            att.server.close()
        if att.web_server is not None:
            await att.web_server.shutdown(2.0)
        with contextlib.suppress(OSError):
            att.socket.unlink()
        with contextlib.suppress(OSError):
            att.socket.parent.rmdir()
        if att.refused_connections:
            call = _Call(att.calls, _now(), asyncio.get_running_loop().time())
            att.calls += 1
            call.refused = (f"{att.refused_connections} connection(s) over the cap of {self.limits.connections} "
                            f"open at once were closed on arrival")
            self._write_later(att, call)
        if att.refused_more:
            call = _Call(att.calls, _now(), asyncio.get_running_loop().time())
            att.calls += 1
            call.count = att.refused_more
            call.refused = (f"{att.refused_more} more request(s) refused, counted and not journaled one by one "
                            f"(the attempt's first {self.limits.journaled_refusals} refusals are); the last: "
                            f"{att.refused_last[:300]}")
            self._write_later(att, call)
        if att.pending:
            await asyncio.gather(*att.pending, return_exceptions=True)

    # ------------------------------------------------------------------ requests (the loop thread)

    async def _handle(self, att: _Attempt, request: web.BaseRequest) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        call = _Call(att.calls, _now(), loop.time())
        att.calls += 1
        try:
            wait = self._turn(att, loop.time())
            if wait > self.limits.client_timeout_s:
                att.next_turn -= 1 / self.limits.requests_per_s  # its turn is given back
                endpoint, _ = self._route(request.raw_path)
                return self._refuse(call, 429, endpoint.style if endpoint else "openai-chat", f"over the attempt's pace of "
                                    f"{self.limits.requests_per_s:g} requests a second; send fewer")
            if wait > 0:
                try:
                    await asyncio.sleep(wait)
                except asyncio.CancelledError:
                    call.refused = "the agent went away while its request waited for its turn at the attempt's pace"
                    raise
            return await self._serve(att, request, call)
        except asyncio.CancelledError:
            call.error = call.error or _AGENT_CLOSED
            raise
        except (ConnectionError, OSError) as e:
            call.error = call.error or f"the agent's connection failed: {type(e).__name__}"
            raise
        finally:
            if not call.forwarded and call.refused is None and call.error is not None:
                # Gone before it was sent upstream: a refusal like any other, so counted past the
                # attempt's first ones (else abandoned requests would be journaled one by one).
                call.refused = f"the agent went away before its request was forwarded ({call.error})"
            call.latency_ms = int((loop.time() - call.t0) * 1000)
            self._account(att, call)
            self._journal(att, call)

    def _turn(self, att: _Attempt, now: float) -> float:
        """Take the attempt's next turn at its pace; how long until it comes."""
        step = 1 / self.limits.requests_per_s
        att.next_turn = max(att.next_turn, now - self.limits.request_burst * step) + step
        return max(0.0, att.next_turn - now)

    def _account(self, att: _Attempt, call: _Call) -> None:
        """The call's usage, read on the loop thread as it ends, added to its task's ledger
        before the agent's next request can be checked against a cap."""
        from .usage import call_cost

        if not call.forwarded or call.accounted or call.endpoint is None or call.refused is not None:
            return
        call.accounted = True
        endpoint = self.endpoints[call.endpoint]
        usage = model_api.reply_usage(endpoint.style, bytes(call.reply), bool(call.streamed)) if call.reply \
            else model_api.NO_USAGE
        call.usage = usage
        probe = ev.ModelCall(status=call.status, model=call.model, input_tokens=usage.input_tokens,
                             output_tokens=usage.output_tokens, cached_tokens=usage.cached_tokens)
        cost = call_cost(probe, endpoint.style, (endpoint.prices or {}).get(call.model or ""))
        _add(self._ledgers.setdefault(att.task_id, Ledger()), call.status, usage.input_tokens, usage.output_tokens,
             cost, count=False, read_apart=_read_apart(endpoint.style, usage.cached_tokens))

    def _refuse(self, call: _Call, status: int, style: str, why: str) -> web.StreamResponse:
        from aiohttp import web

        call.status = status
        call.refused = why
        kind = "authentication_error" if status == 401 else "invalid_request_error"
        body = model_api.error_body(style, f"sealbench gateway: {why}", kind)
        close = {"Connection": "close"} if status in (408, 413, 503) else None
        return web.json_response(body, status=status, headers=close)

    def _route(self, raw_path: str) -> tuple[ModelEndpoint | None, str]:
        # One query string is allowed, and dropped: the Anthropic SDK marks beta requests with
        # "?beta=true" (the features travel in the anthropic-beta header, which is passed).
        # Upstream gets the declared path alone.
        path, mark, query = raw_path.partition("?")
        for name, endpoint in self.endpoints.items():
            if mark and (endpoint.style, query) not in _DROPPED_QUERIES:
                continue
            if path == f"/{name}{model_api.PATHS[endpoint.style]}":
                return endpoint, ""
        paths = ", ".join(f"POST /{n}{model_api.PATHS[e.style]}" for n, e in self.endpoints.items())
        return None, f"path {raw_path[:200]!r} is not a declared endpoint's API path (declared: {paths})"

    async def _serve(self, att: _Attempt, request: web.BaseRequest, call: _Call) -> web.StreamResponse:
        endpoint, why = self._route(request.raw_path)
        style = endpoint.style if endpoint is not None else "openai-chat"
        headers = {k.lower(): v for k, v in request.headers.items()}
        token = model_api.presented_token(style, headers)
        if token != att.token:
            return self._refuse(call, 401, style, self._token_words(token))
        if endpoint is None:
            return self._refuse(call, 404, style, why)
        call.endpoint = endpoint.name
        if request.method != "POST":
            return self._refuse(call, 405, style, f"method {request.method[:20]} is not allowed (POST only)")
        body = await self._read_body(att, request, call, style)
        if not isinstance(body, bytearray):
            return body
        call.request = bytes(body)
        parsed = self._parse_body(call, style, body)
        if not isinstance(parsed, dict):
            return parsed
        model = parsed.get("model")
        call.model = model if isinstance(model, str) else None
        call.streamed = parsed.get("stream") is True
        if not isinstance(model, str) or model not in endpoint.models:
            return self._refuse(call, 403, style, f"model {str(model)[:200]!r} is not declared for endpoint "
                                                  f"{endpoint.name!r} (declared: {', '.join(endpoint.models)})")
        return await self._send(att, endpoint, headers, call, request)

    def _token_words(self, token: str | None) -> str:
        """Why a token that is not the attempt's is refused."""
        other = self._tokens.get(token) if token is not None else None
        if other is not None and other.closed:
            return f"the token is that of a finished attempt ({other.task_id} attempt {other.attempt}); each attempt " \
                   f"has its own"
        if other is not None:
            return "the token is another attempt's"
        return "no valid token (send the one in OPENAI_API_KEY / ANTHROPIC_API_KEY)"

    async def _read_body(self, att: _Attempt, request: web.BaseRequest, call: _Call,
                         style: str) -> bytearray | web.StreamResponse:
        """The request's body, read within the client timeout and the caps; or the refusal."""
        limit = self.limits.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._refuse(call, 413, style, f"the body of {request.content_length} bytes is over the cap "
                                                  f"of {limit}")
        body = bytearray()
        budget = self.limits.buffered_bytes
        try:
            async with asyncio.timeout(self.limits.client_timeout_s):
                while True:
                    chunk = await request.content.readany()
                    if not chunk:
                        break
                    body += chunk
                    att.buffered += len(chunk)
                    if len(body) > limit:
                        return self._refuse(call, 413, style, f"the body is over the cap of {limit} bytes")
                    if att.buffered > budget:
                        return self._refuse(call, 503, style, f"the attempt's requests in flight hold over {budget} "
                                                              f"bytes; send fewer at once")
        except TimeoutError:
            return self._refuse(call, 408, style, f"the body did not arrive within {self.limits.client_timeout_s:g} s")
        finally:
            att.buffered -= len(body)
        return body

    def _parse_body(self, call: _Call, style: str, body: bytearray) -> dict[str, Any] | web.StreamResponse:
        """The body's JSON object, each key once (in any case); or the refusal."""
        try:
            parsed = json.loads(body, object_pairs_hook=_no_duplicates)
        except _DuplicateKey as e:
            return self._refuse(call, 400, style, f"the body has the key {e.key[:100]!r} twice in one object; "
                                                  "send each key once")
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return self._refuse(call, 400, style, "the body is not a JSON object")
        folded = _folded_twice(parsed)
        if folded is not None:
            return self._refuse(call, 400, style, f"the body's keys {folded[0][:100]!r} and {folded[1][:100]!r} "
                                                  "differ only by case; send each key once")
        return parsed

    async def _send(self, att: _Attempt, endpoint: ModelEndpoint, headers: dict[str, str], call: _Call,
                    request: web.BaseRequest) -> web.StreamResponse:
        """Forward the call (or answer it from the replay) unless a cap of the task's budget is reached."""
        style = endpoint.style
        ledger = self._ledgers.setdefault(att.task_id, Ledger())
        # Under a token or cost cap a task's calls go upstream one at a time, each checked once
        # the one before it is accounted: a cap is then passed by one call's use at most.
        serial = self.budget is not None and (self.budget.max_model_tokens is not None
                                              or self.budget.max_model_cost is not None)
        lock = self._cap_locks.setdefault(att.task_id, asyncio.Lock()) if serial else None
        if lock is not None:
            await lock.acquire()
        try:
            cap = ledger.reached(self.budget)
            if cap is not None:
                call.cap = cap
                return self._refuse(call, 429, style, self._cap_words(cap, ledger))
            ledger.calls += 1  # counted as it leaves: calls in flight count against the cap too
            call.forwarded = True
            if self.replay is not None:
                reply = self._recorded(att, endpoint, call)
            else:
                failed = await self._announced(att, call) if self._announce else None
                if failed is not None:  # never sent: the harness could not put it on the record first
                    ledger.calls -= 1
                    call.forwarded = False
                    return self._refuse(call, 503, style, f"the call could not be journaled before it was "
                                                          f"forwarded ({failed}); it was not sent")
                reply = await self._forward(endpoint, headers, call, request)
            self._account(att, call)
            return reply
        finally:
            if lock is not None:
                lock.release()

    def _recorded(self, att: _Attempt, endpoint: ModelEndpoint, call: _Call) -> web.StreamResponse:
        """A replay's answer: the reply recorded for this attempt's call of this index, once the
        request is the recorded one; otherwise a divergence (409)."""
        from aiohttp import web

        from .replay import DIVERGED, divergence

        assert self.replay is not None and call.request is not None
        rec = self.replay.calls.get((att.task_id, att.attempt, call.index))
        why = divergence(rec, call.index, call.request)
        if why is not None or rec is None:
            call.diverged = why
            return self._refuse(call, DIVERGED, endpoint.style, f"replay: {why}")
        call.replayed = True
        status = rec.status if rec.status is not None else 502
        call.status = status
        if status >= 500 or status == 429:
            call.upstream_failed = f"the model endpoint answered HTTP {status} (as recorded)"
        if rec.response is None:
            call.error = rec.error
            if rec.error and rec.error.startswith("the model endpoint failed"):
                call.upstream_failed = f"{rec.error} (as recorded)"
            body = model_api.error_body(endpoint.style, f"sealbench gateway: {rec.error or 'no reply recorded'}",
                                        "api_error")
            return web.json_response(body, status=status)
        call.reply += rec.response
        call.reply_bytes = len(rec.response)
        kind = "text/event-stream" if rec.streamed else "application/json"
        return web.Response(status=status, body=rec.response, headers={"Content-Type": kind})

    def _cap_words(self, cap: str, ledger: Ledger) -> str:
        budget = self.budget
        assert budget is not None
        limit = getattr(budget, cap)
        used = {"max_model_calls": f"{ledger.calls} forwarded",
                "max_model_tokens": f"{ledger.tokens} used" if ledger.tokens_known else "use unknown (a reply "
                                    "without usage)",
                "max_model_cost": f"{ledger.cost:.6g} spent" if ledger.cost_known else "cost unknown"}[cap]
        return (f"the task's budget cap on {_CAP_WORDS[cap]} ({cap} {limit:g}) is reached ({used}); no more "
                "model calls for this task")

    def read_timeout_s(self, endpoint: ModelEndpoint) -> float:
        """How long ``endpoint`` may keep silent (for its reply's first byte, or between chunks)
        before the gateway ends the call as the endpoint's failure: its ``read_timeout_s``, else
        the limits' default, capped at a quarter of the task's wall-clock cap."""
        if endpoint.read_timeout_s is not None:
            return endpoint.read_timeout_s
        wall = self.budget.wall_clock_s / 4 if self.budget is not None else self.limits.upstream_read_s
        return min(self.limits.upstream_read_s, wall)

    async def _post(self, url: str, data: bytes, headers: dict[str, str], read_s: float) -> Any:
        """The upstream's response to one POST, its headers read. Sent again, once, when a pooled
        connection closed before a byte of response came back: the upstream closed it as idle
        just as the request went out, so it never saw the request (nothing to bill)."""
        import aiohttp

        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=read_s)
        for again in (True, False):
            sent_on: dict[str, bool] = {}
            try:
                return await self._session.post(url, data=data, headers=headers, allow_redirects=False,
                                                timeout=timeout, trace_request_ctx=sent_on)
            except aiohttp.ServerDisconnectedError as e:
                # A partial response (its head parsed) is the message; nothing at all, a string.
                if not (again and sent_on.get("reused") and isinstance(e.message, str)):
                    raise
        raise AssertionError("unreachable")

    async def _forward(self, endpoint: ModelEndpoint, headers: dict[str, str], call: _Call,
                       request: web.BaseRequest) -> web.StreamResponse:
        import aiohttp
        from aiohttp import web

        assert self._session is not None and call.request is not None
        upstream_headers: dict[str, str] = {k: headers[k] for k in _PASSED_REQUEST_HEADERS if k in headers}
        upstream_headers["Accept-Encoding"] = "identity"
        upstream_headers.update(model_api.auth_headers(endpoint.style, self._keys[endpoint.name]))
        url = endpoint.base_url.rstrip("/") + model_api.PATHS[endpoint.style]
        read_s = self.read_timeout_s(endpoint)
        try:
            upstream = await self._post(url, call.request, upstream_headers, read_s)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            silent = isinstance(e, aiohttp.SocketTimeoutError)
            why = f"no reply within {read_s:g} s" if silent else f"{type(e).__name__}: {e}"
            call.error = call.upstream_failed = self._scrub(f"the model endpoint failed: {why}")[:500]
            call.status = 504 if silent else 502
            body = model_api.error_body(endpoint.style, f"sealbench gateway: {call.error}", "api_error")
            return web.json_response(body, status=call.status)
        async with upstream:
            encoding = upstream.headers.get("Content-Encoding", "").lower()
            if encoding not in _DECODED:
                call.status = 502
                call.error = call.upstream_failed = (f"the model endpoint failed: it sent its reply encoded as "
                                                     f"{encoding[:50]!r}, which the gateway cannot read")
                body = model_api.error_body(endpoint.style, f"sealbench gateway: {call.error}", "api_error")
                return web.json_response(body, status=502)
            call.status = upstream.status
            if upstream.status >= 500 or upstream.status == 429:
                # Passed through as it came, never retried here: the agent sees what the model said.
                call.upstream_failed = f"the model endpoint answered HTTP {upstream.status}"
            reply = web.StreamResponse(status=upstream.status, headers={
                k: self._scrub(upstream.headers[k]) for k in _PASSED_REPLY_HEADERS if k in upstream.headers})
            cap = self.limits.stored_reply_bytes
            redactor = _Redactor(self._key_bytes)

            async def relay(data: bytes) -> None:
                call.reply_bytes += len(data)
                if len(call.reply) < cap:
                    call.reply += data[:cap - len(call.reply)]
                await reply.write(data)

            # Read errors are the upstream's; a write error is the agent's own connection, closed
            # or reset (aiohttp raises a ConnectionError for it): never the endpoint's failure.
            try:
                await reply.prepare(request)
                while True:
                    try:
                        chunk = await upstream.content.readany()
                    except (aiohttp.ClientError, TimeoutError) as e:
                        silent = isinstance(e, aiohttp.SocketTimeoutError)
                        why = f"silent for {read_s:g} s" if silent else f"{type(e).__name__}: {e}"
                        call.error = call.upstream_failed = self._scrub(
                            f"the model endpoint failed mid-reply: {why}")[:500]
                        if request.transport is not None:
                            request.transport.close()  # the agent sees its reply cut, as it was
                        return reply
                    if not chunk:
                        break
                    await relay(redactor.feed(chunk))
                await relay(redactor.flush())
                await reply.write_eof()
            except ConnectionError:
                call.error = _AGENT_CLOSED
            return reply

    # ------------------------------------------------------------------ the record

    async def _announced(self, att: _Attempt, call: _Call) -> str | None:
        """Journal the call durably as started, its request stored, before it is forwarded;
        None when done, else why not (the storage or the journal failed: the harness's)."""
        def write() -> None:
            assert call.request is not None
            call.stored_request = stored = self._keep_request(att, call.request, refused=False)
            if stored.missing is not None:
                raise OSError(stored.missing)
            self._record(ev.ModelCallStarted(
                task_id=att.task_id, attempt=att.attempt, index=call.index, started_at=call.started_at,
                endpoint=call.endpoint, model=_clean(call.model), streamed=call.streamed, request=stored.blob,
                request_bytes=len(call.request),
                **ev.present(request_sha256=stored.sha256, request_truncated=True if stored.truncated else None)))

        # Waited for by the attempt's close and by the call's own model_call line, even when the
        # agent went away meanwhile: no line of the attempt lands after its agent_finished.
        fut = call.announcing = asyncio.get_running_loop().run_in_executor(self._writer, write)
        att.pending.add(fut)
        fut.add_done_callback(att.pending.discard)
        try:
            await asyncio.shield(fut)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"[:300]
            att.storage_failure = att.storage_failure or f"storage failure: a model call could not be journaled ({why})"
            return why
        return None

    def _keep_request(self, att: _Attempt, body: bytes, *, refused: bool) -> _Stored:
        """Store a request body (a key echoed removed): a refused one's prefix only, and a
        forwarded one's prefix once the attempt's or the task's stored bytes reach their cap."""
        data = self._redact(body)
        limits = self.limits
        with self._stored_lock:
            room = min(limits.stored_attempt_bytes - att.stored_bytes,
                       limits.stored_task_bytes - self._stored_task.get(att.task_id, 0))
            keep = min(len(data), max(0, room), limits.stored_refused_bytes if refused else len(data))
            if not self._announce:  # an older run's vocabulary cannot mark a prefix: the body whole
                keep = len(data)
            att.stored_bytes += keep
            self._stored_task[att.task_id] = self._stored_task.get(att.task_id, 0) + keep
        return self._keep(data, keep)

    def _keep(self, data: bytes, keep: int) -> _Stored:
        from .digest import sha256_bytes

        whole = None if keep >= len(data) else sha256_bytes(data)
        try:
            return _Stored(self._store(data[:keep]), whole, truncated=whole is not None)
        except Exception as e:  # recorded on the line, and the attempt stops on it: never a silent hole
            return _Stored(None, sha256_bytes(data[:keep]) if whole is None else whole, truncated=whole is not None,
                           missing=f"{type(e).__name__}: {e}"[:300])

    def _write_later(self, att: _Attempt, call: _Call) -> None:
        """Journal the call off the loop, after the attempt's earlier calls (in the order they ended)."""
        loop = asyncio.get_running_loop()
        before = att.last_write

        async def write() -> None:
            for earlier in (before, call.announcing):
                if earlier is not None:
                    with contextlib.suppress(Exception):
                        await earlier
            await loop.run_in_executor(self._writer, self._write, att, call)

        fut: asyncio.Future[None] = asyncio.ensure_future(write())
        att.last_write = fut
        att.pending.add(fut)
        fut.add_done_callback(att.pending.discard)

    def _redact(self, data: bytes) -> bytes:
        for key in self._key_bytes:
            data = data.replace(key, _KEY_REMOVED)
        return data

    def _scrub(self, text: str) -> str:
        """``text`` without the keys (an upstream's header or error message may echo one)."""
        for key in self._keys.values():
            text = text.replace(key, _KEY_REMOVED.decode())
        return text

    def _write(self, att: _Attempt, call: _Call) -> None:
        reply = self._redact(bytes(call.reply))
        forwarded = call.refused is None and call.endpoint is not None and call.status is not None
        if forwarded:
            # In the order the calls ended: the endpoint's state when the attempt ends.
            att.upstream_failing = call.upstream_failed
        request = call.stored_request
        if request is None and call.request is not None:
            request = self._keep_request(att, call.request, refused=call.refused is not None)
        response = self._keep(reply, len(reply)) if reply else None
        missing = [f"{what}: {stored.missing}" for what, stored in (("request", request), ("response", response))
                   if stored is not None and stored.missing is not None]
        if missing:
            att.storage_failure = att.storage_failure or f"storage failure: a model call's bodies could not be " \
                                                         f"stored ({'; '.join(missing)})"
        event = self._model_call(att, call, request, response, missing)
        try:
            self._record(event)
        except Exception as e:  # the journal failed: the run is stopping on it already
            att.storage_failure = att.storage_failure or f"storage failure: a model call could not be journaled " \
                                                         f"({type(e).__name__}: {str(e)[:300]})"

    def _model_call(self, att: _Attempt, call: _Call, request: _Stored | None, response: _Stored | None,
                    missing: list[str]) -> ev.ModelCall:
        """The journal line of an ended call, its bodies stored as ``request`` and ``response``."""
        usage = call.usage or model_api.NO_USAGE
        digests, error = _body_facts(self._announce, request, response, missing, call.error)
        return ev.ModelCall(
            task_id=att.task_id, attempt=att.attempt, index=call.index, started_at=call.started_at,
            latency_ms=call.latency_ms, status=call.status, endpoint=_clean(call.endpoint), model=_clean(call.model),
            streamed=call.streamed,
            request=request.blob if request is not None else None,
            request_bytes=len(call.request) if call.request is not None else None,
            response=response.blob if response is not None else None,
            response_bytes=call.reply_bytes,
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cached_tokens=usage.cached_tokens,
            **ev.present(refused_count=call.count if self._announce else None,
                         response_truncated=True if call.reply_bytes > len(call.reply) else None,
                         refused=_clean(call.refused), error=_clean(error), cap=call.cap,
                         replayed=True if call.replayed else None, diverged=_clean(call.diverged)),
            **digests)


def _body_facts(announce: bool, request: _Stored | None, response: _Stored | None, missing: list[str],
                error: str | None) -> tuple[dict[str, Any], str | None]:
    """What a model_call line says of its stored bodies: their digests (and what is missing)
    where the run's vocabulary announces calls, else nothing; and the call's error."""
    if announce:
        return ev.present(
            request_sha256=request.sha256 if request is not None else None,
            request_truncated=True if request is not None and request.truncated else None,
            response_sha256=response.sha256 if response is not None and response.missing else None,
            bodies_missing="; ".join(missing) or None), error
    # An older run's vocabulary: the blobs are left out, and the error says why.
    if missing:
        error = "; ".join([*([error] if error else []), "bodies not stored: " + "; ".join(missing)])
    return {}, error


class AttemptAccess:
    """One attempt's way to the gateway: the agent's environment additions and the sandbox's relay."""

    def __init__(self, gateway: Gateway, att: _Attempt, env: dict[str, str], relay: Relay) -> None:
        self._gateway = gateway
        self._att = att
        self.env = env
        self.relay = relay
        self._closed = False

    @property
    def token(self) -> str:
        return self._att.token

    def close(self) -> None:
        """Refuse the token from now on and journal every call of the attempt (idempotent)."""
        if not self._closed:
            self._closed = True
            self._gateway.close_attempt(self._att)

    def storage_failure(self) -> str | None:
        """Why a call of the attempt could not be put on the record whole (its line, or its
        bodies' bytes), once closed: the harness's failure, which stops the attempt undecided."""
        return self._att.storage_failure if self._closed else None

    def endpoint_failure(self) -> str | None:
        """Why the model endpoint failed the attempt's last forwarded call, once closed (None
        when that call succeeded or the agent made none): the attempt then ended while the
        infrastructure was failing, which is not the agent's failure."""
        return self._att.upstream_failing if self._closed else None

    def called(self) -> bool:
        """Whether the attempt reached the gateway at all (a call made, refused, or a connection)."""
        att = self._att
        return bool(att.calls or att.refusals or att.refused_more or att.refused_connections)

    def guard(self, prepared: Prepared) -> Prepared:
        """``prepared``, closing this access when it is closed (the sandbox is gone by then)."""
        return _Guarded(prepared, self)


class _Guarded:
    def __init__(self, prepared: Prepared, access: AttemptAccess) -> None:
        self._prepared = prepared
        self._access = access

    def start(self, timeout_s: float | None = None) -> SandboxResult:
        return self._prepared.start(timeout_s)

    def kill(self) -> None:
        self._prepared.kill()

    def fills_ahead(self) -> bool:
        return self._prepared.fills_ahead()

    def fill_ahead(self) -> None:
        self._prepared.fill_ahead()

    def close(self) -> None:
        try:
            self._prepared.close()
        finally:
            self._access.close()


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _clean(text: str | None) -> str | None:
    """``text`` as UTF-8 can carry it: what an agent sent may hold lone surrogates, which no
    journal line can encode (each is written as its escape)."""
    if text is None:
        return None
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
