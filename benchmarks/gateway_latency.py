"""Issue 11 target: the latency the model gateway adds to each request of a sandboxed agent.

A client in the real bubblewrap sandbox makes 200 requests to `sealbench model-stub` (its own
process on 127.0.0.1, no latency), the same way twice in each run: directly (the sandbox
sharing the host's network, the floor) and through the gateway (the sandbox's own empty
network namespace, the relay, the unix socket, the gateway, the stub). Each way is timed with
keep-alive (one connection) and with a new connection per request; the figure is the median
per request, and the target is the difference under 2 ms at the median. Time to the first
streamed byte is timed the same way.
Not part of `make bench` yet (its Figures block is regenerated whole, on one commit).
Run: .venv/bin/python benchmarks/gateway_latency.py [--runs R] [--requests N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import SEALBENCH, Target, figure, runs_argument

from sealbench.events import Event
from sealbench.formats import ModelEndpoint
from sealbench.gateway import Gateway, GatewayLimits
from sealbench.sandbox import SandboxSpec, open_sandbox

# Runs inside the sandbox: N requests each way, prints the median seconds of each.
CLIENT = r"""
import http.client, json, statistics, sys, time
host, port, prefix, token, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
body = json.dumps({"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
stream = json.dumps({"model": "bench-model", "stream": True, "messages": []}).encode()
headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
def one(conn, data):
    t0 = time.perf_counter()
    conn.request("POST", prefix + "/chat/completions", body=data, headers=headers)
    resp = conn.getresponse()
    first = resp.read(1)
    t1 = time.perf_counter()
    rest = resp.read()
    assert resp.status == 200, (resp.status, first + rest)
    return time.perf_counter() - t0, t1 - t0
out = {}
conn = http.client.HTTPConnection(host, port, timeout=30)
one(conn, body)
out["keepalive"] = statistics.median(one(conn, body)[0] for _ in range(n))
out["first_streamed_byte"] = statistics.median(one(conn, stream)[1] for _ in range(n))
conn.close()
fresh = []
for _ in range(n):
    c = http.client.HTTPConnection(host, port, timeout=30)
    fresh.append(one(c, body)[0])
    c.close()
out["new_connection"] = statistics.median(fresh)
print(json.dumps(out))
"""


def millis(v: float) -> str:
    return f"{v * 1000:.2f} ms"


def start_stub(root: Path) -> tuple[subprocess.Popen[str], int]:
    script = root / "script.json"
    script.write_text(json.dumps([{"text": "a reply of a few words, streamed in pieces", "repeat": True,
                                   "usage": {"input_tokens": 10, "output_tokens": 8}}]))
    proc = subprocess.Popen([SEALBENCH, "model-stub", "--script", str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.split("127.0.0.1:")[1].split()[0])


def in_sandbox(root: Path, args: list[str], **spec: Any) -> dict[str, float]:
    sandbox = open_sandbox("bubblewrap")
    res = sandbox.run(SandboxSpec(argv=(sys.executable, "-c", CLIENT, *args), workdir=root / "ws",
                                  env={"PATH": "/usr/bin:/bin"}, timeout_s=300, stdout_path=None, stderr_path=None,
                                  **spec))
    if res.exit_code != 0 or res.stdout is None:
        raise SystemExit(f"the client failed: {res.stderr!r}")
    values: dict[str, float] = json.loads(res.stdout)
    return values


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=runs_argument, default=3)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sealbench-bench-gateway-"))
    (root / "ws").mkdir()
    stub, port = start_stub(root)
    recorded: list[Event] = []
    endpoint = ModelEndpoint(name="bench", style="openai-chat", base_url=f"http://127.0.0.1:{port}/v1",
                             models=["bench-model"], key_env="BENCH_KEY")
    # Unpaced: the attempt's pace (20 requests a second) would be all this measured.
    gateway = Gateway([endpoint], {"bench": "bench-key"}, recorded.append, lambda data: "sha256:" + "0" * 64,
                      GatewayLimits(requests_per_s=1e9, request_burst=10**9)).start()
    rows: dict[str, list[float]] = {}
    try:
        for _ in range(args.runs):
            direct = in_sandbox(root, ["127.0.0.1", str(port), "/v1", "bench-key", str(args.requests)], network=True)
            access = gateway.open_attempt("bench", 1)
            try:
                through = in_sandbox(root, ["127.0.0.1", "7700", "/bench", access.token, str(args.requests)],
                                     relay=access.relay)
            finally:
                access.close()
            for key in direct:
                rows.setdefault(f"direct {key}", []).append(direct[key])
                rows.setdefault(f"gateway {key}", []).append(through[key])
                rows.setdefault(f"added {key}", []).append(through[key] - direct[key])
    finally:
        gateway.close()
        stub.terminate()
        stub.wait(10)
    print(f"  {args.requests} requests to model-stub from the sandbox, direct and through the gateway "
          f"(median per request)")
    for key in ("keepalive", "new_connection", "first_streamed_byte"):
        figure(f"    {key.replace('_', ' ')}: direct (floor)", rows[f"direct {key}"], millis)
        figure(f"    {key.replace('_', ' ')}: through the gateway", rows[f"gateway {key}"], millis)
        target = Target(0.002, "< 2 ms") if key != "first_streamed_byte" else None
        figure(f"    {key.replace('_', ' ')}: added by the gateway", rows[f"added {key}"], millis, target)
    calls = sum(1 for e in recorded if e.kind == "model_call")
    print(f"    calls journaled: {calls} (every request through the gateway)")


if __name__ == "__main__":
    main()
