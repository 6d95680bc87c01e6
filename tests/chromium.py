"""Headless Chromium over the DevTools protocol on a pipe, with the standard library only.

``--remote-debugging-pipe`` makes Chromium read protocol messages on fd 3 and write them on
fd 4, each a JSON text ended by a NUL byte: no port, no websocket, nothing another process
could connect to. The page is loaded with the network shut (a dead proxy and a resolver that
finds nothing), and every request, console message, uncaught exception and error log entry
(failed loads, Content-Security-Policy violations) is recorded.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--enable-logging=stderr",
    "--v=0",
    "--remote-debugging-pipe",
)


@dataclass
class PageLoad:
    """What loading one page did."""

    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    screenshot: bytes = b""
    stderr: str = ""
    results: list[Any] = field(default_factory=list)
    """The value of each ``actions`` expression, in order (evaluated after the screenshot)."""


class _Pipe:
    def __init__(self, write_fd: int, read_fd: int, deadline: float) -> None:
        self.write_fd, self.read_fd, self.deadline = write_fd, read_fd, deadline
        self.buf = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _receive(self) -> dict[str, Any]:
        while b"\0" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self.read_fd], [], [], left)
            if ready:
                chunk = os.read(self.read_fd, 1 << 20)
                if not chunk:
                    raise EOFError("chromium closed the protocol pipe")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result
            self.events.append(reply)

    def wait_event(self, method: str) -> None:
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._receive())


def _evaluate(pipe: _Pipe, session: str, expression: str) -> Any:
    result = pipe.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
    return result["result"].get("value")


def load_page(path: Path, work_dir: Path, width: int = 1100, timeout_s: float = 30.0,
              actions: tuple[str, ...] = ()) -> PageLoad:
    """Open ``path`` in headless Chromium with the network shut; record what it did. Each of
    ``actions``, a JavaScript expression, is evaluated in the page after its screenshot.

    Raises:
        RuntimeError: no chromium on PATH, or a protocol error.
        TimeoutError: Chromium did not finish within ``timeout_s``.
    """
    if CHROMIUM is None:
        raise RuntimeError("chromium is not installed")
    work_dir.mkdir(parents=True, exist_ok=True)
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    # Park the child's ends above 9 so that moving them onto fds 3 and 4 cannot clobber one another.
    high_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
    high_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)

    def onto_3_and_4() -> None:
        os.dup2(high_r, 3)
        os.dup2(high_w, 4)

    stderr_path = work_dir / "chromium.stderr"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={work_dir / 'profile'}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            pass_fds=(3, 4), preexec_fn=onto_3_and_4,
        )
    for fd in (to_child_r, from_child_w, high_r, high_w):
        os.close(fd)
    pipe = _Pipe(to_child_w, from_child_r, time.monotonic() + timeout_s)
    out = PageLoad()
    try:
        target = next(t for t in pipe.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        session = pipe.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            pipe.call(f"{domain}.enable", session=session)
        metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}
        pipe.call("Emulation.setDeviceMetricsOverride", metrics, session)
        pipe.call("Page.navigate", {"url": path.resolve().as_uri()}, session)
        pipe.wait_event("Page.loadEventFired")
        out.images = _evaluate(pipe, session, "Array.from(document.images).map(i => ({figure: i.dataset.figure, "
                                              "complete: i.complete, width: i.naturalWidth, height: i.naturalHeight}))")
        out.text = _evaluate(pipe, session, "document.body.innerText")
        height = _evaluate(pipe, session, "document.documentElement.scrollHeight")
        pipe.call("Emulation.setDeviceMetricsOverride", {**metrics, "height": int(height)}, session)
        shot = pipe.call("Page.captureScreenshot", {"format": "png"}, session)
        out.screenshot = base64.b64decode(shot["data"])
        out.results = [_evaluate(pipe, session, action) for action in actions]
        # The browser may close the pipe before it answers.
        with contextlib.suppress(EOFError, RuntimeError):
            pipe.call("Browser.close")
    finally:
        os.close(to_child_w)
        os.close(from_child_r)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    levels = {"error": out.errors, "assert": out.errors, "warning": out.warnings}
    for event in pipe.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            out.requests.append(params["request"]["url"])
        elif method == "Runtime.exceptionThrown":
            out.errors.append(json.dumps(params["exceptionDetails"])[:500])
        elif method == "Runtime.consoleAPICalled" and params["type"] in levels:
            levels[params["type"]].append(" ".join(str(a.get("value", a.get("description", "")))
                                                   for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"]["level"] in levels:
            entry = params["entry"]
            levels[entry["level"]].append(f"{entry['source']}: {entry['text']}")
    out.stderr = stderr_path.read_text(encoding="utf-8", errors="replace")
    return out
