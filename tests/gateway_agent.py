"""A model-backed agent for the gateway's tests: runs inside the sandbox, standard library only.

It reads ``plan.json`` beside itself (a list of steps per attempt number), does each step and
writes what happened to ``agent_log.json`` in its workspace (so the patch carries it).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent


def _conn(base: str) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=20)
    return conn, parts.path


def request(method: str, base: str, path: str, body: Any, headers: dict[str, str],
            raw: bool = False) -> tuple[int | None, bytes]:
    conn, prefix = _conn(base)
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
    try:
        conn.request(method, path if raw else prefix + path, body=data,
                     headers={"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError as e:
        return None, f"{type(e).__name__}: {e}".encode()
    finally:
        conn.close()


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


def step(s: dict[str, Any], log: dict[str, Any]) -> None:
    env = os.environ
    do = s["do"]
    if do in ("chat", "anthropic"):
        style = "anthropic" if do == "anthropic" else "openai"
        token = env.get("ANTHROPIC_API_KEY" if style == "anthropic" else "OPENAI_API_KEY", "")
        if s.get("token") == "saved":
            token = Path("token.txt").read_text().strip()
        base = env.get("ANTHROPIC_BASE_URL" if style == "anthropic" else "OPENAI_BASE_URL", "")
        path = ("/v1/messages" if style == "anthropic" else "/chat/completions") + s.get("query", "")
        headers = {"x-api-key": token, "anthropic-version": "2023-06-01"} if style == "anthropic" \
            else {"Authorization": f"Bearer {token}"}
        prompt = s.get("content", "fix it")
        body: dict[str, Any] = {"model": s["model"], "messages": [{"role": "user", "content": prompt}],
                                "max_tokens": 100}
        if s.get("stream"):
            body["stream"] = True
            if style == "openai":
                body["stream_options"] = {"include_usage": True}
        status, reply = request("POST", base, path, body, headers)
        entry: dict[str, Any] = {"do": do, "status": status}
        if status == 200 and s.get("write"):
            Path(s["write"]).write_text(text_of(style, reply, bool(s.get("stream"))))
        elif status != 200:
            entry["reply"] = reply.decode(errors="replace")[:500]
        log["steps"].append(entry)
    elif do == "raw":
        token = env.get("OPENAI_API_KEY", "")
        status, reply = request(s.get("method", "POST"), env["OPENAI_BASE_URL"], s["path"],
                                s.get("body", {"model": "stub-model"}), {"Authorization": f"Bearer {token}"},
                                raw=True)
        log["steps"].append({"do": do, "path": s["path"], "status": status})
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
        import time

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
        import time

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
        import time

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
