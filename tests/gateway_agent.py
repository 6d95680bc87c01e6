"""A model-backed agent for the gateway's tests: runs inside the sandbox, standard library only.

It reads ``plan.json`` beside itself (a list of steps per attempt number), does each step and
writes what happened to ``agent_log.json`` in its workspace (so the patch carries it).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent


def _conn(base: str, timeout: float | None = 20) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)
    return conn, parts.path


def request(method: str, base: str, path: str, body: Any, headers: dict[str, str],
            raw: bool = False, timeout: float | None = 20) -> tuple[int | None, bytes]:
    conn, prefix = _conn(base, timeout)
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
    try:
        conn.request(method, path if raw else prefix + path, body=data,
                     headers={"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException) as e:  # a reply cut short is an IncompleteRead
        return None, f"{type(e).__name__}: {e}".encode()
    finally:
        conn.close()


def wire(base: str, path: str, body: bytes, headers: dict[str, str], deltas: int | None = None,
         reset: bool = False) -> bytes:
    """Every byte the gateway sends back for one request, as it came on the socket; with ``deltas``,
    only until that many stream deltas came, then the connection is closed (reset with ``reset``)."""
    parts = urlsplit(base)
    sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=20)
    head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "gateway", "Content-Type": "application/json",
                                                  "Content-Length": str(len(body)), "Connection": "close",
                                                  **headers}.items())
    sock.sendall(f"POST {parts.path}{path} HTTP/1.1\r\n{head}\r\n".encode() + body)
    got = b""
    try:
        while deltas is None or got.count(b"delta") < deltas:
            data = sock.recv(65536)
            if not data:
                break
            got += data
    except OSError:
        pass
    if reset:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    return got


def _call_of(s: dict[str, Any], do: str) -> tuple[str, str, str, dict[str, Any], dict[str, str]]:
    """The style, base URL, path, body and headers of a model call step."""
    env = os.environ
    style = "anthropic" if do == "anthropic" or s.get("style") == "anthropic" else "openai"
    token = env.get("ANTHROPIC_API_KEY" if style == "anthropic" else "OPENAI_API_KEY", "")
    if s.get("token") == "saved":
        token = Path("token.txt").read_text().strip()
    base = env.get("ANTHROPIC_BASE_URL" if style == "anthropic" else "OPENAI_BASE_URL", "")
    path = ("/v1/messages" if style == "anthropic" else "/chat/completions") + s.get("query", "")
    headers = {"x-api-key": token, "anthropic-version": "2023-06-01"} if style == "anthropic" \
        else {"Authorization": f"Bearer {token}"}
    body: dict[str, Any] = {"model": s["model"], "messages": [{"role": "user", "content": s.get("content", "fix it")}],
                            "max_tokens": 100}
    if s.get("stream"):
        body["stream"] = True
        if style == "openai":
            body["stream_options"] = {"include_usage": True}
    return style, base, path, body, headers


def text_of(style: str, body: bytes, streamed: bool) -> str:
    if not streamed:
        data = json.loads(body)
        if style == "anthropic":
            return "".join(part.get("text", "") for part in data["content"])
        return str(data["choices"][0]["message"]["content"])
    out = []
    for line in body.decode().splitlines():
        if not line.startswith("data:") or line.strip() == "data: [DONE]":
            continue
        event = json.loads(line[5:])
        if style == "anthropic":
            if event.get("type") == "content_block_delta":
                out.append(event["delta"]["text"])
        else:
            for choice in event.get("choices", []):
                out.append(choice.get("delta", {}).get("content") or "")
    return "".join(out)


def _events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.decode().splitlines()
            if line.startswith("data:") and line.strip() != "data: [DONE]"]


def _reply(style: str, body: bytes, streamed: bool) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    """The reply's text and tool calls ``(id, name, arguments)``, in each style's shape."""
    text, calls = "", {}
    if not streamed:
        data = json.loads(body)
        if style == "chat":
            message = data["choices"][0]["message"]
            calls = {n: [c["id"], c["function"]["name"], c["function"]["arguments"]]
                     for n, c in enumerate(message.get("tool_calls") or [])}
            text = message.get("content") or ""
        elif style == "responses":
            for item in data["output"]:
                if item["type"] == "message":
                    text += "".join(part.get("text", "") for part in item["content"])
                elif item["type"] == "function_call":
                    calls[len(calls)] = [item["call_id"], item["name"], item["arguments"]]
        else:
            for part in data["content"]:
                if part["type"] == "text":
                    text += part["text"]
                elif part["type"] == "tool_use":
                    calls[len(calls)] = [part["id"], part["name"], json.dumps(part["input"])]
    elif style == "chat":
        for event in _events(body):
            for choice in event.get("choices", []):
                delta = choice.get("delta", {})
                text += delta.get("content") or ""
                for tc in delta.get("tool_calls") or []:
                    call = calls.setdefault(tc["index"], [None, None, ""])
                    call[0] = tc.get("id") or call[0]
                    call[1] = tc.get("function", {}).get("name") or call[1]
                    call[2] += tc.get("function", {}).get("arguments") or ""
    else:
        for event in _events(body):
            if event.get("type") == "content_block_start" and event["content_block"]["type"] == "tool_use":
                calls[event["index"]] = [event["content_block"]["id"], event["content_block"]["name"], ""]
            elif event.get("type") == "content_block_delta":
                delta = event["delta"]
                if delta["type"] == "text_delta":
                    text += delta["text"]
                else:
                    calls[event["index"]][2] += delta["partial_json"]
    return text, [(i, n, json.loads(a or "{}")) for i, n, a in calls.values()]


def _run_tool(name: str, args: dict[str, Any]) -> str:
    if name == "write_file":
        Path(args["path"]).write_text(args["content"])
        return f"wrote {len(args['content'])} characters to {args['path']}"
    if name == "read_file":
        return Path(args["path"]).read_text()
    return f"no tool named {name}"


def converse(s: dict[str, Any], log: dict[str, Any]) -> None:
    """A tool-using conversation: ask, run the tools each reply calls, send back their results,
    until a reply calls none (or ``turns`` replies)."""
    env = os.environ
    style = s["style"]
    anthropic = style == "anthropic"
    token = env["SEALBENCH_MODEL_TOKEN"]
    base = json.loads(env["SEALBENCH_MODEL_ENDPOINTS"])[s["endpoint"]]["url"]
    path = {"chat": "/chat/completions", "responses": "/responses", "anthropic": "/v1/messages"}[style]
    headers = {"x-api-key": token, "anthropic-version": "2023-06-01"} if anthropic \
        else {"Authorization": f"Bearer {token}"}
    tools = [{"name": "write_file", "description": "Write a file.", "parameters": {"type": "object"}},
             {"name": "read_file", "description": "Read a file.", "parameters": {"type": "object"}}]
    history: list[dict[str, Any]] = [{"role": "user", "content": s["content"]}]
    if style == "chat":
        history.insert(0, {"role": "system", "content": s["system"]})
    statuses = []
    for _ in range(s.get("turns", 4)):
        body: dict[str, Any] = {"model": s["model"], "stream": bool(s.get("stream"))}
        if style == "chat":
            body.update(messages=history, tools=[{"type": "function", "function": t} for t in tools])
        elif style == "responses":
            body.update(instructions=s["system"], input=history, tools=[{"type": "function", **t} for t in tools])
        else:
            body.update(system=s["system"], messages=history, max_tokens=1000,
                        tools=[{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                               for t in tools])
        status, reply = request("POST", base, path, body, headers)
        statuses.append(status)
        if status != 200:
            break
        text, calls = _reply(style, reply, bool(s.get("stream")))
        if style == "chat":
            history.append({"role": "assistant", "content": text or None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls]
                or None})
            history += [{"role": "tool", "tool_call_id": i, "content": _run_tool(n, a)} for i, n, a in calls]
        elif style == "responses":
            if text:
                history.append({"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                                                     "text": text}]})
            for i, n, a in calls:
                history.append({"type": "function_call", "call_id": i, "name": n, "arguments": json.dumps(a)})
                history.append({"type": "function_call_output", "call_id": i, "output": _run_tool(n, a)})
        else:
            history.append({"role": "assistant", "content": ([{"type": "text", "text": text}] if text else []) + [
                {"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]})
            if calls:
                history.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": i, "content": _run_tool(n, a)} for i, n, a in calls]})
        if not calls:
            break
    log["steps"].append({"do": "converse", "style": style, "statuses": statuses})


def step(s: dict[str, Any], log: dict[str, Any]) -> None:
    env = os.environ
    do = s["do"]
    if do == "converse":
        converse(s, log)
    elif do in ("chat", "anthropic"):
        style, base, path, body, headers = _call_of(s, do)
        # "timeout": null waits as the SDKs do, for as long as the reply takes.
        status, reply = request("POST", base, path, body, headers, timeout=s.get("timeout", 20))
        entry: dict[str, Any] = {"do": do, "status": status}
        if status == 200 and s.get("write"):
            Path(s["write"]).write_text(text_of(style, reply, bool(s.get("stream"))))
        elif status != 200:
            entry["reply"] = reply.decode(errors="replace")[:500]
        log["steps"].append(entry)
    elif do == "raw":
        token = env.get("OPENAI_API_KEY", "")
        sent = s["body_text"].encode() if "body_text" in s else s.get("body", {"model": "stub-model"})
        status, reply = request(s.get("method", "POST"), env["OPENAI_BASE_URL"], s["path"], sent,
                                {"Authorization": f"Bearer {token}"}, raw=True)
        entry = {"do": do, "path": s["path"], "status": status}
        if status != 200:
            entry["reply"] = reply.decode(errors="replace")[:500]
        log["steps"].append(entry)
    elif do == "wire":
        # The reply as it came on the socket, saved whole; or cut after a few stream deltas.
        _, base, path, body, headers = _call_of(s, do)
        got = wire(base, path, json.dumps(body).encode(), headers, s.get("deltas"), bool(s.get("reset")))
        if s.get("save"):
            Path(s["save"]).write_bytes(got)
        log["steps"].append({"do": do, "bytes": len(got), "status": got[9:12].decode(errors="replace")})
    elif do == "sleep":
        time.sleep(s["seconds"])
    elif do == "big_body":
        token = env.get("OPENAI_API_KEY", "")
        model = s.get("model", "stub-model").encode()
        for _ in range(s.get("times", 1)):
            filler = b'{"model": "' + model + b'", "pad": "' + b"x" * s["bytes"] + b'"}'
            status, _ = request("POST", env["OPENAI_BASE_URL"], "/chat/completions", filler,
                                {"Authorization": f"Bearer {token}"})
            log["steps"].append({"do": do, "status": status})
    elif do == "flood":
        held, closed = [], 0
        for _ in range(s["connections"]):
            sock = socket.create_connection(("127.0.0.1", 7700), timeout=5)
            held.append(sock)
        import select

        open_ = list(held)
        deadline = time.monotonic() + 5
        while open_ and closed < s["expect_closed"] and time.monotonic() < deadline:
            readable, _, _ = select.select(open_, [], [], 0.1)
            for sock in readable:
                open_.remove(sock)
                try:
                    closed += sock.recv(1) == b""
                except OSError:
                    closed += 1
        for sock in held:
            sock.close()
        time.sleep(0.5)  # the gateway counts a connection until the relay has passed its close on
        log["steps"].append({"do": do, "closed": closed})
    elif do == "pipeline":
        # Requests with a wrong token, pipelined on a few connections as fast as the gateway
        # reads them, for a while; each connection's replies read by a thread of its own.
        import threading

        one = (b"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
               b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        replies = [0]
        lock = threading.Lock()

        def read(sock: socket.socket) -> None:
            while True:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                with lock:
                    replies[0] += data.count(b"HTTP/1.1 ")

        socks = [socket.create_connection(("127.0.0.1", 7700), timeout=5) for _ in range(s["connections"])]
        readers = [threading.Thread(target=read, args=(sock,), daemon=True) for sock in socks]
        for t in readers:
            t.start()
        sent = 0
        t0 = time.monotonic()
        end = t0 + s["seconds"]
        while time.monotonic() < end:
            for sock in socks:
                try:
                    sock.sendall(one * 50)
                    sent += 50
                except OSError:
                    pass
        for sock in socks:
            sock.close()
        log["steps"].append({"do": do, "sent": sent, "replies": replies[0],
                             "seconds": round(time.monotonic() - t0, 3)})
    elif do == "abandon":
        # Requests with the right token whose body never comes whole: each connection is closed
        # halfway through its body, one after another, for a while.
        token = env.get("OPENAI_API_KEY", "")
        head = (f"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode()
        sent = 0
        end = time.monotonic() + s["seconds"]
        while time.monotonic() < end:
            sock = socket.create_connection(("127.0.0.1", 7700), timeout=5)
            sock.sendall(head + b'{"model": "stub-model", "messages": [')
            time.sleep(0.01)  # the gateway reads the head and starts on the body
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            sent += 1
        log["steps"].append({"do": do, "sent": sent})
    elif do == "save_token":
        Path("token.txt").write_text(env.get("OPENAI_API_KEY", "") + "\n")
    elif do == "connect":
        family = socket.AF_INET6 if ":" in s["host"] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(3)
        try:
            sock.connect((s["host"], s["port"]))
            result = "connected"
        except OSError as e:
            result = f"refused: {type(e).__name__}: {e}"
        finally:
            sock.close()
        log["steps"].append({"do": do, "host": s["host"], "result": result})
    elif do == "abstract":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect("\0" + s["name"])
            result = "connected"
        except OSError as e:
            result = f"refused: {type(e).__name__}: {e}"
        finally:
            sock.close()
        log["steps"].append({"do": do, "result": result})
    elif do == "dns":
        t0 = time.monotonic()
        try:
            socket.getaddrinfo(s["name"], 443)
            result = "resolved"
        except OSError as e:
            result = f"failed: {e}"
        resolv = Path("/etc/resolv.conf")
        log["steps"].append({"do": do, "result": result, "seconds": round(time.monotonic() - t0, 3),
                             "resolv_conf": resolv.read_text() if resolv.is_file() else None})
    elif do == "dump_env":
        log["env"] = dict(env)


def main() -> int:
    plan = json.loads((HERE / "plan.json").read_text())
    attempt = os.environ.get("SEALBENCH_ATTEMPT", "1")
    log: dict[str, Any] = {"attempt": attempt, "steps": []}
    for s in plan.get(attempt, []):
        step(s, log)
    Path(f"agent_log_{attempt}.json").write_text(json.dumps(log, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
