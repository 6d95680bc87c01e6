"""Issue 12 figure: what each agent preset costs per task, over a bare command agent.

Each run times one task (the sample pack's t_11_fix_off_by_one) fixed by each installed preset
in the real bubblewrap sandbox, through the model gateway, against model-stub with canned
replies in the agent's own edit format; and, right before each preset in the same run, the
floor: a bare command agent (standard-library Python) that makes one model call through the
same gateway and writes the same fix. The figure is the difference of the two `run` times
(contract written and locked before the clock starts; the run's own checks, sandbox, gateway,
grading and journal included in both), median and range over the runs.

Presets not installed are skipped, saying so: install them with `make agents`
(into .cache/agents) or `sealbench agents install NAME`.
Not part of `make bench` (the presets' installs are not): `make bench-presets` runs it.
Run: SEALBENCH_AGENTS_DIR=.cache/agents .venv/bin/python benchmarks/preset_overhead.py [--runs R] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import SAMPLE, figure, private_runs_index, runs_argument, seconds

from sealbench.contract import lock_contract, new_contract
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec, ApiStyle, ModelEndpoint
from sealbench.model_stub import StubReply, StubToolCall, start
from sealbench.pack import load_pack, seal_pack
from sealbench.presets import ENDPOINT_NAMES, agent_for, install_root, load_preset, read_installed
from sealbench.runner import RunOptions, execute

TASK = "t_11_fix_off_by_one"
OLD = "    return items[len(items) - n + 1 :] if n <= len(items) else items[1:]"
NEW = "    return items[-n:]"
KEY_ENV = "SEALBENCH_BENCH_MODEL_KEY"
LOCKED_AT = datetime(2026, 12, 1, tzinfo=UTC)

BARE = r"""
import http.client, json, os, urllib.parse
base = urllib.parse.urlsplit(os.environ["OPENAI_BASE_URL"])
conn = http.client.HTTPConnection(base.hostname, base.port, timeout=30)
body = {"model": os.environ["BENCH_MODEL"], "messages": [{"role": "user", "content": "fix it"}]}
conn.request("POST", base.path + "/chat/completions", body=json.dumps(body),
             headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
assert conn.getresponse().status == 200
text = open("window.py").read()
open("window.py", "w").write(text.replace(OLD, NEW))
"""


def replies(name: str, workspace: Path) -> list[StubReply]:
    """Canned replies that make ``name`` fix the task through its own edit mechanism."""
    if name == "mini-swe-agent":
        fix = ("Fixing.\n\n```mswea_bash_command\ncat > window.py <<'PY'\n"
               "def last_n(items, n):\n    return items[-n:] if n > 0 else []\nPY\n```\n")
        return [StubReply(text=fix),
                StubReply(text="Done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```\n")]
    if name == "aider":
        return [StubReply(text=f"window.py\n```python\n<<<<<<< SEARCH\n{OLD}\n=======\n{NEW}\n>>>>>>> REPLACE\n```\n",
                          repeat=True)]
    if name == "codex":
        patch = f"apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: window.py\n@@\n-{OLD}\n+{NEW}\n*** End Patch\nEOF\n"
        return [StubReply(tool_calls=[StubToolCall(name="exec_command", arguments={"cmd": patch})]),
                StubReply(text="Fixed.")]
    if name == "claude-code":
        path = str(workspace / "window.py")
        return [StubReply(tool_calls=[StubToolCall(name="Read", arguments={"file_path": path})]),
                StubReply(tool_calls=[StubToolCall(name="Edit", arguments={
                    "file_path": path, "old_string": OLD, "new_string": NEW})]),
                StubReply(text="Fixed.")]
    raise SystemExit(f"no canned replies for preset {name}")


def one_run(pack: Path, root: Path, label: str, agent: AgentSpec, style: ApiStyle, base_suffix: str,
            script: list[StubReply], key: str) -> float:
    """Seconds `run` takes for the task, the contract already locked."""
    model = "bench-model"
    stub = start(script, key=key)
    try:
        loaded = load_pack(pack)
        contract_file = root / f"{label}.contract.json"
        contract, _ = new_contract(loaded, contract_file, [TASK], host="benchmark machine", max_attempts=1,
                                   agent=agent, oracle_validity="unavailable", narration_probe=False)
        endpoint = ModelEndpoint(name=ENDPOINT_NAMES[style], style=style, base_url=stub.url + base_suffix,
                                 models=[model], key_env=KEY_ENV)
        contract = contract.model_copy(update={"model_endpoints": [endpoint]})
        write_atomic(contract_file, model_json(lock_contract(contract, label, LOCKED_AT, loaded)))
        started = time.monotonic()
        execute(contract_file, root / label, RunOptions(progress=False))
        took = time.monotonic() - started
        card = (root / label / "scorecards.jsonl").read_text()
        if '"outcome":"pass"' not in card:
            raise SystemExit(f"{label}: the task did not pass: {card}")
        return took
    finally:
        stub.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=runs_argument, default=3, help="runs per figure (default: 3)")
    parser.add_argument("--only", action="append", help="only this preset (repeatable; default: every installed)")
    args = parser.parse_args()
    names = args.only or ["mini-swe-agent", "aider", "codex", "claude-code"]
    installed = [n for n in names if read_installed(install_root(n, load_preset(n).install.version)) is not None]
    for name in sorted(set(names) - set(installed)):
        print(f"  {name}: not installed, skipped (sealbench agents install {name})")
    key = "sk-bench-" + secrets.token_hex(16)
    os.environ[KEY_ENV] = key
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-presets-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        pack = root / "pack"
        shutil.copytree(SAMPLE, pack)
        seal_pack(pack)
        bare_script = root / "bare.py"
        bare_script.write_text(f"OLD = {OLD!r}\nNEW = {NEW!r}\n" + BARE)
        print(f"agent presets, one task fixed through the gateway against model-stub; {args.runs} runs")
        for name in installed:
            preset = load_preset(name)
            style = preset.api_style
            suffix = "" if style == "anthropic-messages" else "/v1"
            over: list[float] = []
            took: list[float] = []
            for run in range(args.runs):
                bare = AgentSpec(label="bare command agent", command=f"env BENCH_MODEL=bench-model python3 {bare_script}",
                                 mounts=[str(bare_script)])
                floor = one_run(pack, root, f"bare-{name}-{run}", bare, "openai-chat", "/v1",
                                [StubReply(text="ok", repeat=True)], key)
                agent, _ = agent_for(name, "bench-model")
                ws = root / f"{name}-{run}" / "work" / TASK / "ws"
                seconds_taken = one_run(pack, root, f"{name}-{run}", agent, style, suffix, replies(name, ws), key)
                took.append(seconds_taken)
                over.append(seconds_taken - floor)
            figure(f"{name} {preset.install.version}: one task", took, seconds)
            figure(f"{name}: over a bare command agent", over, lambda v: f"{v:+.2f} s")


if __name__ == "__main__":
    main()
