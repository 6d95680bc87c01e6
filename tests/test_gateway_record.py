"""What the model gateway puts on the record, whatever ends the attempt: every call the upstream
received is journaled, no cap is passed across a kill, and a call whose bodies cannot be
stored stops the run instead of vanishing.

The runs go through the real runner and the bubblewrap sandbox, the agent is
``gateway_agent.py``, and the upstream is ``model-stub`` on loopback, which counts every
request it received (what a real endpoint would bill).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import LOCK_TIME, needs_bwrap
from sealbench.contract import lock_contract, new_contract
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec
from sealbench.journal import read_chain
from sealbench.model_stub import StubReply, StubServer, StubUsage, start
from sealbench.pack import load_pack
from test_gateway import AGENT, FIX, KEY_ENV, TASK, endpoints, key  # noqa: F401  (key: a fixture)
from test_storage import Disk, disk  # noqa: F401  (disk: a fixture)

pytestmark = needs_bwrap


def sealbench_argv() -> list[str]:
    exe = Path(sys.executable).parent / "sealbench"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sealbench.cli"]


def locked(sealed_pack: Path, tmp_path: Path, stub: StubServer, plan: dict[str, Any], *, name: str,
           max_attempts: int = 1, caps: dict[str, Any] | None = None, wall_clock_s: float | None = None) -> Path:
    """A locked contract whose agent follows ``plan`` against ``stub``; its file."""
    agent_dir = tmp_path / f"{name}-agent"
    agent_dir.mkdir()
    shutil.copy(AGENT, agent_dir / "agent.py")
    (agent_dir / "plan.json").write_text(json.dumps(plan))
    contract_file = tmp_path / f"{name}.contract.json"
    pack = load_pack(sealed_pack)
    contract, _ = new_contract(pack, contract_file, [TASK], host="test machine", max_attempts=max_attempts,
                               agent=AgentSpec(label="gateway test agent", command=f"python {agent_dir}/agent.py",
                                               mounts=[str(agent_dir)]),
                               oracle_validity="unavailable", model_caps=caps, wall_clock_s=wall_clock_s)
    contract = contract.model_copy(update={"model_endpoints": endpoints(stub)})
    write_atomic(contract_file, model_json(lock_contract(contract, name, LOCK_TIME, pack)))
    return contract_file


def wait_until(what: str, ok: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {what}")
        time.sleep(0.02)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def events_of(run_dir: Path) -> list[dict[str, Any]]:
    report = read_chain(run_dir / "journal.jsonl")
    assert report.problems == []
    return report.events


def on_record(events: list[dict[str, Any]]) -> set[tuple[int, int]]:
    """The calls the journal says were forwarded: started, or ended without a refusal."""
    started = {(e["attempt"], e["payload"]["index"]) for e in events if e["kind"] == "model_call_started"}
    ended = {(e["attempt"], e["payload"]["index"]) for e in events
             if e["kind"] == "model_call" and "refused" not in e["payload"]}
    return started | ended


CHAT = {"do": "chat", "model": "stub-model"}


@pytest.mark.parametrize("stop", ["sigkill-group", "sigterm"])
def test_exploit_agent_calls_while_its_runner_is_killed_and_the_resume_passes_no_cap(
        sealed_pack: Path, tmp_path: Path, key: str, stop: str) -> None:  # noqa: F811
    """--max-attempts 2, --max-model-calls 2: SIGKILL to the runner's process group (or SIGTERM
    to the runner) while the second call of attempt 1 is at the upstream, then ``run --resume``.
    The call in flight was journaled before it left, so the resumed task counts it: attempt 2's
    calls are refused at the cap, and the upstream received no more than the cap, each call on
    the record."""
    stub = start([StubReply(text="x = 1\n", model="stub-model", repeat=True,
                            usage=StubUsage(input_tokens=10, output_tokens=5))], key=key, latency_ms=1500)
    try:
        plan = {"1": [CHAT, CHAT, CHAT], "2": [CHAT, CHAT]}
        contract = locked(sealed_pack, tmp_path, stub, plan, name="kill-mid-call", max_attempts=2,
                          caps={"max_model_calls": 2})
        run_dir = tmp_path / "run"
        proc = subprocess.Popen([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_until("the second call reached the upstream", lambda: stub.script.received >= 2, proc)
            time.sleep(0.2)
        finally:
            if stop == "sigterm":
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        resumed = subprocess.run([*sealbench_argv(), "run", str(contract), "--resume", str(run_dir),
                                  "--no-progress"], capture_output=True, text=True, timeout=240)
        assert resumed.returncode == 0, resumed.stderr
        received = stub.script.received
    finally:
        stub.close()
    events = events_of(run_dir)
    assert received <= 2, f"the upstream received {received} calls under a cap of 2"
    assert len(on_record(events)) == received, "a call the upstream received is in no journal line"
    refused = [e["payload"].get("cap") for e in events if e["kind"] == "model_call" and e["attempt"] == 2]
    assert refused == ["max_model_calls", "max_model_calls"]
    card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
    if stop == "sigkill-group":  # the call cut off by the kill counts, its use unknown
        assert card["model_usage"]["calls"] == 4 and card["model_usage"]["unreported"] == 1
        assert card["model_usage"]["cost"] is None
        shown = subprocess.run([*sealbench_argv(), "show", str(run_dir), TASK], capture_output=True, text=True)
        assert "#1 openai stub-model: sent, and the runner stopped before it ended" in shown.stdout, shown.stdout


def test_a_started_call_without_its_end_counts_as_forwarded_with_unknown_use() -> None:
    from sealbench import events as ev
    from sealbench.formats import Budget, ModelEndpoint, ModelPrice
    from sealbench.gateway import ledger_of

    declared = [ModelEndpoint(name="openai", style="openai-chat", base_url="http://127.0.0.1:9/v1",
                              models=["m"], key_env=KEY_ENV,
                              prices={"m": ModelPrice(input=1.0, output=2.0, read_on="2026-11-30")})]
    made: list[ev.ModelCall | ev.ModelCallStarted] = [
        ev.ModelCallStarted(task_id="t", attempt=1, index=0, endpoint="openai", model="m"),
        ev.ModelCall(task_id="t", attempt=1, index=0, endpoint="openai", model="m", status=200, input_tokens=10,
                     output_tokens=1),
        ev.ModelCallStarted(task_id="t", attempt=1, index=1, endpoint="openai", model="m")]
    ledger = ledger_of(made, declared)
    assert (ledger.calls, ledger.tokens_known, ledger.cost_known) == (2, False, False)
    budget = Budget(max_attempts=2, wall_clock_s=60, max_model_tokens=10**9)
    assert ledger.reached(budget) == "max_model_tokens"
    assert ledger_of(made[:2], declared).reached(budget) is None


def leave_free(mounted: Disk, free: int) -> None:
    """Fill ``mounted`` until ``free`` bytes are left."""
    st = os.statvfs(mounted.path)
    spare = st.f_bfree * st.f_frsize - free
    with mounted.filler.open("wb") as f:
        f.truncate(0)
        chunk = b"\0" * (1 << 20)
        while spare > 0:
            spare -= f.write(chunk[:min(len(chunk), spare)])


def test_exploit_a_reply_too_large_for_the_disk_stops_the_run_and_the_call_stays_on_the_record(
        sealed_pack: Path, tmp_path: Path, key: str, disk: Disk) -> None:  # noqa: F811
    """6 MiB free in the run directory's file system, a 7 MB reply: its blob cannot be stored.
    The call is journaled all the same (its reply's digest and size, the bytes marked missing)
    and the run stops on the storage failure (exit 3), deciding nothing; once the disk has
    room, the resume finishes, and the bundle verifies with the call in it."""
    big = "y" * (7 * 10**6)
    stub = start([StubReply(text=big, model="stub-model", when="SEND-A-LOT", repeat=True),
                  StubReply(text=FIX, model="stub-model", repeat=True,
                            usage=StubUsage(input_tokens=10, output_tokens=5))], key=key)
    try:
        plan = {"1": [{**CHAT, "content": "SEND-A-LOT"}, {**CHAT, "write": "window.py"}],
                "2": [{**CHAT, "write": "window.py"}]}
        contract = locked(sealed_pack, tmp_path, stub, plan, name="full", max_attempts=2)
        run_dir = disk.path / "run"
        leave_free(disk, 6 * 2**20)
        done = subprocess.run([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress"],
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 3, done.stderr
        assert "storage failure" in done.stderr
        events = events_of(run_dir)
        assert not [e for e in events if e["kind"] == "task_finished"]
        # Another task's call made while the big reply's bytes filled the disk may miss its bodies
        # too (the tasks run side by side); each such call is on the record, saying why.
        missing = [e["payload"] for e in events if e["kind"] == "model_call" and "bodies_missing" in e["payload"]]
        assert all(p["bodies_missing"] for p in missing)
        (lost,) = [p for p in missing if (p["response_bytes"] or 0) >= 7 * 10**6]
        assert lost["response"] is None and lost["response_sha256"].startswith("sha256:")
        disk.free()
        resumed = subprocess.run([*sealbench_argv(), "run", str(contract), "--resume", str(run_dir),
                                  "--no-progress"], capture_output=True, text=True, timeout=240)
        assert resumed.returncode == 0, resumed.stderr
        received = stub.script.received
        probed = subprocess.run([*sealbench_argv(), "probe", str(contract), "--out", str(run_dir), "--no-progress"],
                                capture_output=True, text=True, timeout=240)
        assert probed.returncode == 0, probed.stderr
    finally:
        stub.close()
    events = events_of(run_dir)
    assert len(on_record(events)) == received
    bundled = subprocess.run([*sealbench_argv(), "bundle", str(run_dir), "--out", str(tmp_path / "b")],
                             capture_output=True, text=True)
    assert bundled.returncode == 0, bundled.stderr
    verified = subprocess.run([*sealbench_argv(), "verify", str(tmp_path / "b" / "full")], capture_output=True,
                              text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_exploit_agent_sends_large_refused_bodies_and_a_model_named_by_a_lone_surrogate(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:  # noqa: F811
    """Eight refused 4 MiB bodies keep a prefix each in the run directory (their full size and
    digest on the line), not 32 MiB; a body whose model is a lone surrogate, which no journal
    line can carry as such, is journaled with the name escaped, never dropped."""
    import hashlib

    stub = start([StubReply(text=FIX, model="stub-model", repeat=True)], key=key)
    try:
        size = 4 * 2**20
        plan = {"1": [{"do": "big_body", "model": "not-declared", "bytes": size, "times": 8},
                      {"do": "raw", "path": "/openai/chat/completions", "body": {"model": "\ud800"}},
                      {**CHAT, "write": "window.py"}]}
        contract = locked(sealed_pack, tmp_path, stub, plan, name="refused-bodies")
        run_dir = tmp_path / "run"
        done = subprocess.run([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress"],
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr
    finally:
        stub.close()
    events = events_of(run_dir)
    made = [e["payload"] for e in events if e["kind"] == "model_call"]
    assert len(made) == 10
    body = b'{"model": "not-declared", "pad": "' + b"x" * size + b'"}'
    for call in made[:8]:
        assert call["request_bytes"] == len(body) and call["request_truncated"] is True
        assert call["request_sha256"] == "sha256:" + hashlib.sha256(body).hexdigest()
        assert (run_dir / "blobs" / call["request"].removeprefix("sha256:")).stat().st_size <= 4096
    assert made[8]["model"] == "\\ud800" and "is not declared" in made[8]["refused"]
    stored = sum(p.stat().st_size for p in (run_dir / "blobs").iterdir())
    assert stored < 4 * 2**20, f"{stored} bytes of blobs for refused bodies"


def _post(sock_path: str, token: str, body: bytes) -> bytes:
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sock_path)
    sock.settimeout(10)
    sock.sendall(b"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer "
                 + token.encode() + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    sock.close()
    return reply


def test_exploit_agent_sends_more_request_bytes_than_an_attempt_and_a_task_may_store(key: str) -> None:  # noqa: F811
    """Forwarded bodies are stored whole until the attempt's, then the task's, stored-bytes cap;
    past it a body's blob is the prefix that fits, its full size and digest on its line."""
    from sealbench import events as ev
    from sealbench.digest import sha256_bytes
    from sealbench.gateway import Gateway, GatewayLimits

    stub = start([StubReply(text=FIX, model="stub-model", repeat=True)], key=key)
    recorded: list[ev.Event] = []
    sizes: dict[str, int] = {}

    def store(data: bytes) -> str:
        sizes[sha256_bytes(data)] = len(data)
        return sha256_bytes(data)

    gateway = Gateway(endpoints(stub), {"openai": key, "anthropic": key}, recorded.append, store,
                      GatewayLimits(stored_attempt_bytes=1000, stored_task_bytes=1500)).start()
    body = json.dumps({"model": "stub-model", "messages": [{"role": "user", "content": "x" * 560}]}).encode()
    try:
        for attempt, times in ((1, 3), (2, 2)):
            access = gateway.open_attempt(TASK, attempt)
            for _ in range(times):
                assert _post(str(access.relay.socket), access.token, body).startswith(b"HTTP/1.1 200")
            access.close()
    finally:
        gateway.close()
        stub.close()
    made = [e for e in recorded if isinstance(e, ev.ModelCall)]
    kept = [sizes[e.request or ""] if e.request in sizes else None for e in made]
    assert [(e.attempt, k) for e, k in zip(made, kept, strict=True)] == \
        [(1, len(body)), (1, 1000 - len(body)), (1, 0), (2, 500), (2, 0)]
    assert [bool(e.request_truncated) for e in made] == [False, True, True, True, True]
    assert all(e.request_bytes == len(body) for e in made)
    assert all(e.request_sha256 == sha256_bytes(body) for e in made[1:])
    assert sum(1 for e in recorded if isinstance(e, ev.ModelCallStarted)) == 5


def test_exploit_agent_floods_the_gateway_with_pipelined_refused_requests(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:  # noqa: F811
    """Six seconds of pipelined requests on eight connections, each refused: the attempt's
    pace serves a bounded number, the journal holds its first refusals one by one and one line
    that counts the rest, the close is no harness error, and nothing is written after
    run_finished. The agent's own call afterwards still goes through."""
    from sealbench.gateway import GatewayLimits

    limits = GatewayLimits()
    stub = start([StubReply(text=FIX, model="stub-model", repeat=True)], key=key)
    try:
        plan = {"1": [{"do": "pipeline", "connections": 8, "seconds": 6}, {**CHAT, "write": "window.py"}]}
        contract = locked(sealed_pack, tmp_path, stub, plan, name="flood")
        run_dir = tmp_path / "run"
        done = subprocess.run([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress",
                               "--keep-work"], capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr
    finally:
        stub.close()
    events = events_of(run_dir)
    kinds = [e["kind"] for e in events]
    assert "harness_error" not in kinds
    assert kinds.index("run_finished") == len(kinds) - 1, kinds[kinds.index("run_finished"):]
    # The heartbeat was never starved: no silence near the lease, past which the watchdog ends the run.
    header = events[0]["payload"]
    gaps = [b["mono_ms"] - a["mono_ms"] for a, b in itertools.pairwise(events)]
    assert max(gaps) < header["lease_ms"] / 2, (max(gaps), header["heartbeat_ms"], header["lease_ms"])
    made = [e["payload"] for e in events if e["kind"] == "model_call"]
    refused = [c for c in made if "refused" in c]
    assert len(refused) == limits.journaled_refusals + 1, len(refused)
    (counted,) = [c for c in refused if "refused_count" in c]
    log = json.loads((run_dir / "work" / TASK / "ws" / "agent_log_1.json").read_text())
    flood = log["steps"][0]
    total = limits.journaled_refusals + counted["refused_count"]
    assert flood["replies"] <= total <= flood["sent"]
    # The pace: the burst, then the rate while the flood lasted; each connection's request
    # waiting its turn when the agent closed it is counted too.
    assert total <= limits.request_burst + limits.requests_per_s * flood["seconds"] * 1.2 + 8, (total, flood)
    assert log["steps"][1]["status"] == 200
    card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
    assert card["model_usage"]["refused"] == total and card["outcome"] == "pass"


def test_a_run_started_under_an_older_derivation_version_gets_only_its_vocabulary(key: str) -> None:  # noqa: F811
    """Resumed by this release, a run started under version 4 is written in version 4's words:
    no model_call_started line and none of the new model_call fields (its bodies stored whole,
    its refusals journaled one by one), so the release that started it still reads it."""
    from sealbench import events as ev
    from sealbench.digest import sha256_bytes
    from sealbench.gateway import Gateway, GatewayLimits

    stub = start([StubReply(text=FIX, model="stub-model", repeat=True)], key=key)
    recorded: list[ev.Event] = []
    gateway = Gateway(endpoints(stub), {"openai": key, "anthropic": key}, recorded.append, sha256_bytes,
                      GatewayLimits(journaled_refusals=1), derivation_version=4).start()
    refused = json.dumps({"model": "undeclared", "pad": "x" * 10000}).encode()
    body = json.dumps({"model": "stub-model", "messages": []}).encode()
    try:
        access = gateway.open_attempt(TASK, 1)
        for data in (refused, refused, body):
            _post(str(access.relay.socket), access.token, data)
        access.close()
    finally:
        gateway.close()
        stub.close()
    assert [type(e) for e in recorded] == [ev.ModelCall] * 3
    new = {"request_sha256", "request_truncated", "response_sha256", "bodies_missing", "refused_count"}
    assert all(not (set(e.payload()) & new) for e in recorded)
    assert [e.request for e in recorded] == [sha256_bytes(refused), sha256_bytes(refused), sha256_bytes(body)]


def test_a_call_under_way_at_the_wall_clock_is_on_the_record_and_counted(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:  # noqa: F811
    """The wall clock ends the attempt while its call waits on the upstream: the call was
    journaled before it left and ends journaled as cut off, both lines before the attempt's
    agent_finished, and the task's model_usage counts it."""
    # A reply streamed a delta a second, never silent for the read timeout (a quarter of the
    # wall clock, 1.5 s), so the wall clock is what cuts it, not the endpoint's silence.
    stub = start([StubReply(text="x = 1\n" * 60, model="stub-model", repeat=True, pause_ms=1000,
                            usage=StubUsage(input_tokens=10, output_tokens=5))], key=key)
    try:
        contract = locked(sealed_pack, tmp_path, stub, {"1": [{**CHAT, "stream": True}]}, name="wall-clock",
                          wall_clock_s=6)
        run_dir = tmp_path / "run"
        done = subprocess.run([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress"],
                              capture_output=True, text=True, timeout=240)
        received = stub.script.received
    finally:
        stub.close()
    events = events_of(run_dir)
    assert "harness_error" not in [e["kind"] for e in events], done.stderr
    assert received == 1 and len(on_record(events)) == 1
    kinds = [e["kind"] for e in events if e.get("task_id") == TASK]
    assert kinds.index("model_call_started") < kinds.index("model_call") < kinds.index("agent_finished")
    card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
    assert card["outcome"] == "timeout" and card["model_usage"]["calls"] == 1


def test_exploit_agent_floods_the_journal_with_requests_it_abandons_before_they_are_forwarded(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:  # noqa: F811
    """Four seconds of requests with the right token, each connection reset halfway through its
    body: none is forwarded, so each is a refusal, and past the attempt's first refusals they
    are counted in one line, not journaled one by one. The agent's own call afterwards still
    goes through, and the upstream received only that one."""
    from sealbench.gateway import GatewayLimits

    limits = GatewayLimits()
    stub = start([StubReply(text=FIX, model="stub-model", repeat=True)], key=key)
    try:
        plan = {"1": [{"do": "abandon", "seconds": 4}, {**CHAT, "write": "window.py"}]}
        contract = locked(sealed_pack, tmp_path, stub, plan, name="abandon")
        run_dir = tmp_path / "run"
        done = subprocess.run([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress",
                               "--keep-work"], capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr
        received = stub.script.received
    finally:
        stub.close()
    events = events_of(run_dir)
    made = [e["payload"] for e in events if e["kind"] == "model_call"]
    log = json.loads((run_dir / "work" / TASK / "ws" / "agent_log_1.json").read_text())
    sent = log["steps"][0]["sent"]
    assert sent > 2 * limits.journaled_refusals, sent
    assert received == 1 and log["steps"][1]["status"] == 200
    assert len(made) <= limits.journaled_refusals + 2, f"{len(made)} lines for {sent} abandoned requests"
    (counted,) = [c for c in made if "refused_count" in c]
    refused = [c for c in made if "refused" in c]
    total = len(refused) - 1 + counted["refused_count"]
    assert sent - 2 <= total <= sent, (total, sent)
    card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
    assert card["model_usage"]["refused"] == total and card["outcome"] == "pass"


@pytest.mark.parametrize("stream", [False, True])
def test_exploit_agent_marks_its_prompt_for_anthropic_caching_and_passes_the_token_cap(
        sealed_pack: Path, tmp_path: Path, key: str, stream: bool) -> None:  # noqa: F811
    """--max-model-tokens 500, Anthropic's style: the upstream reports the agent's cache-marked
    prompt as 1,000 tokens written to its cache (``cache_creation_input_tokens``, billed as
    input) beside 10 input tokens. They count as input, so the agent's second call is refused at
    the cap and the upstream received one."""
    stub = start([StubReply(text="x = 1\n", model="claude-stub", repeat=True,
                            usage=StubUsage(input_tokens=10, output_tokens=5, cache_write_tokens=1000))], key=key)
    try:
        call = {"do": "anthropic", "model": "claude-stub", "stream": stream}
        contract = locked(sealed_pack, tmp_path, stub, {"1": [call, call]}, name="cache-write",
                          caps={"max_model_tokens": 500})
        run_dir = tmp_path / "run"
        done = subprocess.run([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress"],
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr
        received = stub.script.received
    finally:
        stub.close()
    events = events_of(run_dir)
    made = [e["payload"] for e in events if e["kind"] == "model_call"]
    assert received == 1, f"the upstream received {received} calls past a cap of 500 tokens"
    assert made[0]["input_tokens"] == 1010 and made[1].get("cap") == "max_model_tokens"
    card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
    assert card["model_usage"]["input_tokens"] == 1010


def test_exploit_agent_reads_its_prompt_from_anthropic_s_cache_and_passes_the_token_cap(
        sealed_pack: Path, tmp_path: Path, key: str) -> None:  # noqa: F811
    """--max-model-tokens 500, Anthropic's style, then a resume: each reply reports 10 input
    tokens and 1,000 read from the prompt cache (``cache_read_input_tokens``, which Anthropic
    reports apart from its input tokens, where OpenAI's input counts them). The cap counts them
    as read: the second call is refused, in the attempt and after a resume too."""
    stub = start([StubReply(text="x = 1\n", model="claude-stub", repeat=True,
                            usage=StubUsage(input_tokens=10, output_tokens=5, cached_tokens=1000))], key=key)
    try:
        call = {"do": "anthropic", "model": "claude-stub"}
        contract = locked(sealed_pack, tmp_path, stub, {"1": [call, call], "2": [call]}, name="cache-read",
                          max_attempts=2, caps={"max_model_tokens": 500})
        run_dir = tmp_path / "run"
        done = subprocess.run([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress"],
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr
        received = stub.script.received
    finally:
        stub.close()
    events = events_of(run_dir)
    made = [e["payload"] for e in events if e["kind"] == "model_call"]
    assert received == 1, f"the upstream received {received} calls past a cap of 500 tokens"
    assert [c.get("cap") for c in made] == [None] + ["max_model_tokens"] * (len(made) - 1)
    from sealbench.events import ModelCall
    from sealbench.gateway import ledger_of
    from test_gateway import endpoints as declared

    calls = [ModelCall(**c) for c in made]
    assert ledger_of(calls, declared(stub)).tokens == 1015  # what a resume starts from
