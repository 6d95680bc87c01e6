"""Real agents end to end (``make test-agents``, marker ``agents``): each preset installed at its
pinned version (cached between runs in ``$SEALBENCH_AGENTS_DIR``, else ``.cache/agents``), run
in the real bubblewrap sandbox through the gateway against ``model-stub`` with canned replies in
the agent's own edit format: one task fixed, one not. Checked: pass and fail as the oracle says
(not as the agent's exit code says), the agent's own word on how it ended, its transcript in the
trace folder, a bundle that verifies, nothing of the agent's configuration or history in the
patch, every model call to the declared endpoint.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import LOCK_TIME, needs_bwrap
from sealbench.bundle import make_bundle, verify_bundle
from sealbench.contract import lock_contract, new_contract
from sealbench.files import model_json, write_atomic
from sealbench.journal import read_chain
from sealbench.model_stub import StubReply, StubServer, StubToolCall, start
from sealbench.pack import load_pack
from sealbench.presets import agent_for, endpoint_for, install
from sealbench.runner import RunOptions, execute

pytestmark = [needs_bwrap]

FIXED, UNFIXED = "t_11_fix_off_by_one", "t_03_rename_helper"
KEY_ENV = "SEALBENCH_TEST_MODEL_KEY"
MODEL = "stub-model"
CACHE = Path(__file__).resolve().parents[1] / ".cache" / "agents"

# Canned replies, in each agent's own edit format. The fixed task's prompt names window.py, the
# other's billing.py: the stub has no way to tell them apart, so the replies differ by model.
MINI_FIX = ("I will fix the slice.\n\n```mswea_bash_command\ncat > window.py <<'PY'\n"
            "def last_n(items, n):\n    return items[-n:] if n > 0 else []\nPY\n```\n")
MINI_SUBMIT = "Done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```\n"
MINI_DAWDLE = "Let me look around.\n\n```mswea_bash_command\nls\n```\n"
AIDER_FIX = ("window.py\n```python\n<<<<<<< SEARCH\n    return items[len(items) - n + 1 :] if n <= len(items) "
             "else items[1:]\n=======\n    return items[-n:]\n>>>>>>> REPLACE\n```\n")
CODEX_PATCH = ("apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: window.py\n@@\n"
               "-    return items[len(items) - n + 1 :] if n <= len(items) else items[1:]\n"
               "+    return items[-n:]\n*** End Patch\nEOF\n")
CODEX_MISS = ("apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: billing.py\n@@\n"
              "-def calc_that_is_not_there():\n+def compute_total():\n*** End Patch\nEOF\n")
OLD_LINE = "    return items[len(items) - n + 1 :] if n <= len(items) else items[1:]"
AIDER_MISS = ("billing.py\n```python\n<<<<<<< SEARCH\ndef calc_that_is_not_there():\n=======\n"
              "def compute_total():\n>>>>>>> REPLACE\n```\n")


@pytest.fixture
def agents_cache(monkeypatch: pytest.MonkeyPatch) -> Path:
    where = Path(os.environ.get("SEALBENCH_AGENTS_DIR") or CACHE)
    monkeypatch.setenv("SEALBENCH_AGENTS_DIR", str(where))
    return where


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "sk-test-" + secrets.token_hex(20)
    monkeypatch.setenv(KEY_ENV, value)
    return value


def workspace(tmp_path: Path, task: str) -> Path:
    """Where ``task``'s workspace is in the sandbox (its host path: the sandbox binds it there)."""
    return tmp_path / f"run-{task}" / "work" / task / "ws"


def run_preset(name: str, replies: dict[str, list[StubReply]], sealed_pack: Path, tmp_path: Path,
               key: str) -> tuple[Path, list[dict[str, Any]], dict[str, dict[str, Any]], float]:
    """Install (cached), write and lock a contract per task (each its own model name, so each
    task gets its own replies), run it; returns the last run's directory, its events, every
    task's scorecard and the seconds the runs took."""
    install(name)
    pack = load_pack(sealed_pack)
    cards: dict[str, dict[str, Any]] = {}
    events: list[dict[str, Any]] = []
    seconds = 0.0
    run_dir = tmp_path
    for task, task_replies in replies.items():
        model = f"{MODEL}-{task}"
        stub: StubServer = start([r.model_copy(update={"model": model}) for r in task_replies], key=key)
        try:
            agent, preset = agent_for(name, model)
            contract_file = tmp_path / f"{task}.contract.json"
            contract, _ = new_contract(pack, contract_file, [task], host="test machine", max_attempts=1,
                                       agent=agent, oracle_validity="unavailable", narration_probe=False)
            base_url = stub.url + ("" if preset.api_style == "anthropic-messages" else "/v1")
            endpoint = endpoint_for(preset, model, base_url=base_url, key_env=KEY_ENV)
            contract = contract.model_copy(update={"model_endpoints": [endpoint]})
            write_atomic(contract_file, model_json(lock_contract(contract, f"{name}-{task}", LOCK_TIME, pack)))
            run_dir = workspace(tmp_path, task).parents[2]
            started = time.monotonic()
            execute(contract_file, run_dir, RunOptions(progress=False, keep_work=True))
            took = time.monotonic() - started
            seconds += took
            print(f"{name} {task}: {took:.2f} s")
        finally:
            stub.close()
        events = read_chain(run_dir / "journal.jsonl").events
        card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
        card["events"] = events
        card["run_dir"] = run_dir
        cards[task] = card
    return run_dir, events, cards, seconds


def check_run(card: dict[str, Any], transcript: str, key: str, tmp_path: Path,
              endpoint: str = "openai") -> tuple[str, dict[str, Any]]:
    """What every preset's run must show; returns the agent's stderr and its ending record."""
    run_dir: Path = card["run_dir"]
    task = card["task_id"]
    events = card["events"]
    finished = next(e for e in events if e["kind"] == "agent_finished")
    assert finished["payload"]["transcript"], "the trace folder was not digested"
    trace = run_dir / "work" / task / "ws" / ".sealbench" / "trace"
    assert (trace / transcript).is_file(), sorted(p.name for p in trace.iterdir())
    ending = json.loads((trace / "sealbench-ending.json").read_text())
    stderr = (run_dir / "blobs" / finished["payload"]["stderr"].removeprefix("sha256:")).read_bytes().decode()
    calls = [e["payload"] for e in events if e["kind"] == "model_call"]
    assert calls and all(c["endpoint"] == endpoint and "refused" not in c for c in calls), calls
    patch = next((e for e in events if e["kind"] == "patch_captured"), None)
    assert patch is not None
    if card["patch_sha256"]:
        text = (run_dir / "patches" / f"{task}.patch").read_text() if (run_dir / "patches" / f"{task}.patch").exists() \
            else ""
        for trace_of_config in (".aider", "mini-swe-agent", ".config", ".cache", "history", ".gitignore", ".codex",
                                ".claude", "sessions"):
            assert trace_of_config not in text, (trace_of_config, text)
    bundle = make_bundle(run_dir, tmp_path / "bundles" / task)
    assert verify_bundle(bundle).lines()
    for path in bundle.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    return stderr, ending


@pytest.mark.agents
def test_mini_swe_agent_fixes_one_task_and_ends_at_its_step_limit_on_the_other(
        agents_cache: Path, sealed_pack: Path, tmp_path: Path, key: str) -> None:
    replies = {FIXED: [StubReply(text=MINI_FIX), StubReply(text=MINI_SUBMIT)],
               UNFIXED: [StubReply(text=MINI_DAWDLE, repeat=True)]}
    _, _, cards, seconds = run_preset("mini-swe-agent", replies, sealed_pack, tmp_path, key)
    print(f"mini-swe-agent: two tasks in {seconds:.1f} s")
    assert cards[FIXED]["outcome"] == "pass"
    stderr, ending = check_run(cards[FIXED], "mini.traj.json", key, tmp_path)
    assert ending["ending"] == "Submitted" and "status Submitted" in stderr
    # Exit 0 at the step limit: the agent's word is kept, the oracle's verdict is a failure.
    assert cards[UNFIXED]["outcome"] in ("fail", "abstain")
    stderr, ending = check_run(cards[UNFIXED], "mini.traj.json", key, tmp_path)
    assert (ending["exit_code"], ending["ending"]) == (0, "LimitsExceeded"), stderr[-2000:]


@pytest.mark.agents
def test_aider_applies_one_edit_and_reports_the_edit_that_did_not_apply(
        agents_cache: Path, sealed_pack: Path, tmp_path: Path, key: str) -> None:
    replies = {FIXED: [StubReply(text=AIDER_FIX, repeat=True)],
               UNFIXED: [StubReply(text=AIDER_MISS, repeat=True)]}
    _, _, cards, seconds = run_preset("aider", replies, sealed_pack, tmp_path, key)
    print(f"aider: two tasks in {seconds:.1f} s")
    assert cards[FIXED]["outcome"] == "pass"
    stderr, ending = check_run(cards[FIXED], "aider.chat.history.md", key, tmp_path)
    assert ending["said"] == [], stderr[-2000:]
    # Exit 0 with the edit refused by aider itself: an abstain or a failure, never a pass.
    assert cards[UNFIXED]["outcome"] in ("fail", "abstain")
    stderr, ending = check_run(cards[UNFIXED], "aider.chat.history.md", key, tmp_path)
    assert ending["exit_code"] == 0 and "edit did not apply" in ending["said"], stderr[-2000:]


@pytest.mark.preset_ci
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not on PATH (make test-packages installs it)")
def test_codex_applies_its_patch_to_one_task_and_reports_the_patch_that_did_not_apply(
        agents_cache: Path, sealed_pack: Path, tmp_path: Path, key: str) -> None:
    # The cheapest preset to install (one npm package and its binary, about 7 s): run by make test.
    replies = {FIXED: [StubReply(text="Fixing the slice.", tool_calls=[exec_command(CODEX_PATCH)]),
                       StubReply(text="Fixed the slice.")],
               UNFIXED: [StubReply(tool_calls=[exec_command(CODEX_MISS)]), StubReply(text="It did not apply.")]}
    _, _, cards, seconds = run_preset("codex", replies, sealed_pack, tmp_path, key)
    print(f"codex: two tasks in {seconds:.1f} s")
    assert cards[FIXED]["outcome"] == "pass"
    stderr, ending = check_run(cards[FIXED], "codex.events.jsonl", key, tmp_path)
    assert (ending["exit_code"], ending["ending"]) == (0, "turn.completed"), stderr[-2000:]
    events = (workspace(tmp_path, FIXED) / ".sealbench" / "trace" / "codex.events.jsonl").read_text()
    assert '"type":"file_change"' in events and '"status":"completed"' in events
    # Exit 0 after its own patch tool refused the hunk: never a pass.
    assert cards[UNFIXED]["outcome"] in ("fail", "abstain")
    stderr, ending = check_run(cards[UNFIXED], "codex.events.jsonl", key, tmp_path)
    assert ending["exit_code"] == 0 and "an edit did not apply" in ending["said"], stderr[-2000:]


@pytest.mark.agents
def test_claude_code_edits_one_task_and_ends_at_its_turn_limit_on_the_other(
        agents_cache: Path, sealed_pack: Path, tmp_path: Path, key: str) -> None:
    window = str(workspace(tmp_path, FIXED) / "window.py")
    replies = {FIXED: [StubReply(tool_calls=[StubToolCall(name="Read", arguments={"file_path": window})]),
                       StubReply(text="Fixing the slice.", tool_calls=[StubToolCall(name="Edit", arguments={
                           "file_path": window, "old_string": OLD_LINE, "new_string": "    return items[-n:]"})]),
                       StubReply(text="Fixed the slice.")],
               UNFIXED: [StubReply(text="Looking.", repeat=True, tool_calls=[StubToolCall(
                   name="Bash", arguments={"command": "ls", "description": "list files"})])]}
    _, _, cards, seconds = run_preset("claude-code", replies, sealed_pack, tmp_path, key)
    print(f"claude-code: two tasks in {seconds:.1f} s")
    assert cards[FIXED]["outcome"] == "pass"
    stderr, ending = check_run(cards[FIXED], "claude.stream.jsonl", key, tmp_path, endpoint="anthropic")
    assert (ending["ending"], ending["said"]) == ("success", []), stderr[-2000:]
    # Its turn limit: the agent's own word is kept, the oracle's verdict is a failure.
    assert cards[UNFIXED]["outcome"] in ("fail", "abstain")
    stderr, ending = check_run(cards[UNFIXED], "claude.stream.jsonl", key, tmp_path, endpoint="anthropic")
    assert ending["ending"] == "error_max_turns", stderr[-2000:]


def exec_command(cmd: str) -> StubToolCall:
    return StubToolCall(name="exec_command", arguments={"cmd": cmd})


@pytest.fixture(autouse=True)
def _no_stray_cache(agents_cache: Path) -> Iterator[None]:
    yield
    assert not (Path.cwd() / ".aider.chat.history.md").exists()


def _demo(name: str, tmp_path: Path, cli: Any) -> None:
    code, out, err = cli("demo", "--agent", name, "--dir", str(tmp_path / "demo"))
    assert code == 0, out[-3000:] + err[-3000:]
    assert "1 of 2 task_pass" in out and "verifies" in out and "report:" in out
    cards = {c["task_id"]: c for c in map(json.loads, (tmp_path / "demo" / "runs" / f"demo-{name}" /
                                                        "scorecards.jsonl").read_text().splitlines())}
    assert cards[FIXED]["outcome"] == "pass" and cards[UNFIXED]["outcome"] in ("fail", "abstain")
    # The agent's own word, in the scorecard beside the verdict.
    assert cards[FIXED]["agent_ending"]["exit_code"] == 0
    assert f"{FIXED}: the hidden tests say pass; the agent says" in out


@pytest.mark.preset_ci
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not on PATH (make test-agents installs it)")
def test_demo_with_codex_fixes_one_sample_task_not_the_other_and_verifies(
        agents_cache: Path, tmp_path: Path, cli: Any) -> None:
    _demo("codex", tmp_path, cli)


@pytest.mark.agents
@pytest.mark.parametrize("name", ["mini-swe-agent", "aider", "claude-code"])
def test_demo_with_each_other_preset_fixes_one_sample_task_not_the_other_and_verifies(
        name: str, agents_cache: Path, tmp_path: Path, cli: Any) -> None:
    _demo(name, tmp_path, cli)
