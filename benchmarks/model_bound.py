"""Issue 11 target: many model-bound agents at once, each waiting on its model.

256 tasks whose agent (standard-library Python in the real bubblewrap sandbox) makes 5 streamed
calls through the model gateway to `sealbench model-stub` (its own process on 127.0.0.1) and
then writes its fix, run at --jobs 256 under a contract whose sandboxes are sized for it
(`contract new --workspace-mib 16 --tmp-mib 16`: 256 default quotas of 2 GiB would not fit in
memory, and run refuses such a --jobs).

The ideal is the same run with a model that answers at once (timed right before, in each run)
plus the 1 s one agent spends waiting on 5 replies of 200 ms: the model's latency fully hidden
by running the agents side by side. The target is within 1.2x of that. Also printed: the same
run at --jobs 16 (the default's cap), the runner's peak memory (the gateway runs inside it; its
share is the difference to the same tasks fixed with no model and no endpoint, so no gateway) and
the peak of every process of the run together (runner, sandboxes, relays, agents), sampled.
Not part of `make bench` (its Figures block is regenerated whole, on one commit).
Run: .venv/bin/python benchmarks/model_bound.py [--runs R] [--tasks N] [--latency-ms MS]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from _common import (
    SEALBENCH,
    Target,
    check,
    figure,
    measure,
    megabytes,
    private_runs_index,
    runs_argument,
    seconds,
    times,
    write_pack,
)

CALLS = 5
KEY_ENV = "SEALBENCH_BENCH_MODEL_KEY"
AGENT = r"""
import http.client, json, os, re, urllib.parse
base = urllib.parse.urlsplit(os.environ["OPENAI_BASE_URL"])
headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
body = json.dumps({"model": "bench-model", "stream": True, "messages": [{"role": "user", "content": "go"}]})
conn = http.client.HTTPConnection(base.hostname, base.port, timeout=60)
for _ in range(CALLS):
    conn.request("POST", base.path + "/chat/completions", body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    assert resp.status == 200 and b"[DONE]" in data, (resp.status, data[:300])
text = open("mod.py").read()
value = int(re.search(r"VALUE = (\d+)", text).group(1))
open("mod.py", "w").write(f"VALUE = {value + 1}\n")
"""


def _tree_rss_mb(root_pid: int) -> float:
    """Resident memory of ``root_pid`` and every descendant, in MB (children from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / 1e6


def timed_run(contract: Path, out: Path, jobs: int) -> tuple[float, float, float]:
    """Seconds, the runner's peak MB, and the peak MB of the run's whole process tree."""
    peak = [0.0]
    started = time.perf_counter()
    proc = subprocess.Popen([SEALBENCH, "run", str(contract), "--out", str(out), "--no-progress",
                             "--jobs", str(jobs)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], _tree_rss_mb(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - started
    done.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status) != 0 or b"task_pass" not in output:
        raise SystemExit(f"run at --jobs {jobs} failed:\n{output.decode(errors='replace')[-3000:]}")
    cards = (out / "scorecards.jsonl").read_text().splitlines()
    passed = sum('"outcome":"pass"' in c for c in cards)
    if passed != len(cards):
        raise SystemExit(f"run at --jobs {jobs}: {passed} of {len(cards)} tasks passed")
    return took, usage.ru_maxrss / 1024, peak[0]


def stub(root: Path, latency_ms: int, key: str) -> tuple[subprocess.Popen[bytes], str]:
    script = root / "script.json"
    script.write_text(json.dumps([{"text": "working on it, " * 8, "repeat": True}]))
    proc = subprocess.Popen([SEALBENCH, "model-stub", "--script", str(script), "--port", "0", "--latency-ms",
                             str(latency_ms), "--require-key-env", KEY_ENV], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, KEY_ENV: key})
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "listening on" not in line:
        raise SystemExit(f"model-stub did not start: {line}")
    return proc, line.split("listening on ", 1)[1].split()[0]


def contract_for(root: Path, pack: Path, name: str, url: str | None, agent: Path) -> Path:
    contract = root / f"{name}.json"
    check(measure([SEALBENCH, "contract", "new", str(pack), "-o", str(contract), "--host", "benchmark machine",
                   "--agent-label", "model-bound", "--agent", f"python3 {agent}", "--agent-mount", str(agent),
                   "--oracle-validity-unavailable", "--no-narration-probe", "--workspace-mib", "16",
                   "--tmp-mib", "16", "--force"]), "contract new")
    if url is not None:
        data = json.loads(contract.read_text())
        data["model_endpoints"] = [{"name": "openai", "style": "openai-chat", "base_url": url + "/v1",
                                    "models": ["bench-model"], "key_env": KEY_ENV}]
        contract.write_text(json.dumps(data, indent=2))
    check(measure([SEALBENCH, "contract", "lock", str(contract), "--run-id", name]), "contract lock")
    return contract


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=runs_argument, default=3, help="runs per figure (default: 3)")
    parser.add_argument("--tasks", type=int, default=256, help="tasks, all at once (default: 256)")
    parser.add_argument("--latency-ms", type=int, default=200, help="the model's latency per call (default: 200)")
    args = parser.parse_args()
    key = "sk-bench-" + secrets.token_hex(16)
    os.environ[KEY_ENV] = key
    wait_s = CALLS * args.latency_ms / 1000
    target = Target(1.2, "<= 1.2x", strict=False)
    ratios, walls, floors, sixteens, runner_mb, tree_mb, gateway_mb = [], [], [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-model-bound-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        pack = write_pack(root / "pack", args.tasks, oracle=["python3", "check_value.py"])
        check(measure([SEALBENCH, "pack", "seal", str(pack)]), "seal")
        agent = root / "agent.py"
        agent.write_text(f"CALLS = {CALLS}\n" + AGENT)
        # The same fix with no model and no endpoint: the runner without a gateway.
        offline = root / "offline.py"
        offline.write_text("CALLS = 0\n" + AGENT.replace('base = urllib.parse.urlsplit(os.environ["OPENAI_BASE_URL"])',
                                                          'base = urllib.parse.urlsplit("http://127.0.0.1:9/")')
                           .replace('os.environ["OPENAI_API_KEY"]', '""'))
        fast, fast_url = stub(root, 0, key)
        slow, slow_url = stub(root, args.latency_ms, key)
        try:
            for run in range(args.runs):
                floor_contract = contract_for(root, pack, f"floor-{run}", fast_url, agent)
                floor, _, _ = timed_run(floor_contract, root / f"floor-{run}", args.tasks)
                contract = contract_for(root, pack, f"slow-{run}", slow_url, agent)
                wall, mb, tree = timed_run(contract, root / f"slow-{run}", args.tasks)
                sixteen_contract = contract_for(root, pack, f"sixteen-{run}", slow_url, agent)
                sixteen, _, _ = timed_run(sixteen_contract, root / f"sixteen-{run}", 16)
                bare_contract = contract_for(root, pack, f"offline-{run}", None, offline)
                _, bare_mb, _ = timed_run(bare_contract, root / f"offline-{run}", args.tasks)
                gateway_mb.append(mb - bare_mb)
                floors.append(floor)
                walls.append(wall)
                sixteens.append(sixteen)
                ratios.append(wall / (floor + wait_s))
                runner_mb.append(mb)
                tree_mb.append(tree)
        finally:
            fast.terminate()
            slow.terminate()
    print(f"{args.tasks} model-bound agents, {CALLS} streamed calls of {args.latency_ms} ms each; "
          f"{args.runs} runs")
    figure(f"--jobs {args.tasks}, a model that answers at once (floor)", floors, seconds)
    figure(f"--jobs {args.tasks}, {args.latency_ms} ms per call", walls, seconds)
    figure(f"--jobs {args.tasks} against floor + {wait_s:g} s (the ideal)", ratios, times, target)
    figure(f"--jobs 16 (the default's cap), {args.latency_ms} ms per call", sixteens, seconds)
    figure(f"runner peak memory at --jobs {args.tasks} (gateway inside)", runner_mb, megabytes)
    figure("  of which the gateway (against the same run, no endpoint)", gateway_mb, megabytes)
    figure(f"every process of the run at --jobs {args.tasks}, peak", tree_mb, megabytes)


if __name__ == "__main__":
    main()
