"""The Ray executor on a real local cluster: a head and a second worker node, on loopback only,
started by these tests with Ray's own multi-node test harness (each node its own raylet and
processes). Runs go through the CLI in a child process, as a user runs them, so that a test
can kill the coordinator; the attempts run in bubblewrap on the nodes.

``make test`` runs the equivalence of the two executors and the refusals; the kills of
workers and coordinators carry the ``ray_faults`` marker (``make test-ray``).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import make_contract, needs_bwrap
from sealbench.journal import read_chain
from test_honest_time import stamping_agent

pytestmark = needs_bwrap

TASK = "t_11_fix_off_by_one"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"
TASKS = ("t_03_rename_helper", "t_11_fix_off_by_one", "t_18_add_missing_test", "t_22_reject_network_call")
MIB = 1024 * 1024
LOOPBACK = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""What a process that connects to the test cluster needs: Ray would otherwise rewrite the
loopback address to this machine's outward one, where the cluster does not listen."""


def ray_default_temp() -> Path:
    """Where Ray's test harness writes the cluster's address whatever ``temp_dir`` says (``RAY_TMPDIR``,
    else ``TMPDIR``, else /tmp, then ``ray``): it never creates that folder itself, so on a machine
    where no Ray ran before, starting the cluster failed."""
    return Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp") / "ray"


class LocalCluster:
    """A head node and a worker node on this machine, loopback only."""

    def __init__(self, temp: Path) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        from ray.cluster_utils import Cluster

        common = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 * MIB}
        ray_default_temp().mkdir(exist_ok=True)
        self.cluster = Cluster(initialize_head=True, connect=False,
                               head_node_args={**common, "num_cpus": 2, "include_dashboard": False,
                                               "resources": {"head": 1}, "temp_dir": str(temp)})
        self.worker = self.cluster.add_node(**common, num_cpus=2, resources={"worker": 1})
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address

    def shutdown(self) -> None:
        self.cluster.shutdown()


KEY_ENV = "SEALBENCH_TEST_MODEL_KEY"
KEY = "sk-test-" + secrets.token_hex(20)
"""The model key, in the environment of the cluster's nodes only (as a user exports it where
each node's `ray start` runs), never in the coordinator's."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    # Ray's sockets live in its temp dir, whose path must stay short (a unix socket's limit).
    temp = Path(tempfile.mkdtemp(prefix="sbray-", dir="/tmp"))
    os.environ[KEY_ENV] = KEY
    try:
        c = LocalCluster(temp)
    finally:
        del os.environ[KEY_ENV]
    try:
        yield c
    finally:
        c.shutdown()


def sealbench_argv() -> list[str]:
    exe = Path(sys.executable).parent / "sealbench"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sealbench.cli"]


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sealbench_argv(), *args], capture_output=True, text=True, timeout=timeout)


def events_of(run_dir: Path) -> list[dict[str, Any]]:
    report = read_chain(run_dir / "journal.jsonl")
    assert report.problems == []
    return report.events


def cards_of(run_dir: Path) -> dict[str, dict[str, Any]]:
    lines = (run_dir / "scorecards.jsonl").read_text().splitlines()
    return {c["task_id"]: c for c in map(json.loads, lines)}


def what_counts(card: dict[str, Any]) -> dict[str, Any]:
    """A scorecard's outcome, attempts and digests: what two runs of a deterministic agent share."""
    return {k: v for k, v in card.items() if k in ("task_id", "outcome", "attempts_used", "first_attempt_passed",
                                                  "patch_sha256", "hidden_tests_sha256")}


def deterministic_agent() -> str:
    """Fails the first attempt of every task (no change) and writes the fix of TASK on the second."""
    code = textwrap.dedent(f"""\
        import os
        if os.environ["SEALBENCH_ATTEMPT"] != "1" and os.path.exists("window.py"):
            open("window.py", "w").write({FIX!r})
        open("NOTES.txt", "w").write("attempt " + os.environ["SEALBENCH_ATTEMPT"] + "\\n")
    """)
    return "python -c " + shlex.quote(code)


def test_the_same_contract_gives_the_same_scorecards_on_the_local_pool_and_on_the_cluster(
        cluster: LocalCluster, sealed_pack: Path, tmp_path: Path) -> None:
    """Outcomes, attempts and digests agree, task by task; each attempt's submitted line names
    a node of the cluster, and both nodes ran attempts."""
    cards = {}
    for executor in ("local", "ray"):
        contract = tmp_path / f"{executor}.json"
        make_contract(sealed_pack, contract, task_ids=TASKS, command=deterministic_agent(), run_id=f"same-{executor}",
                      max_attempts=2, wall_clock_s=60)
        run_dir = tmp_path / executor
        extra = ["--executor", "ray", "--address", cluster.address] if executor == "ray" else []
        done = run_cli("run", str(contract), "--out", str(run_dir), "--no-progress", "--jobs", "4", *extra)
        assert done.returncode == 0, done.stderr
        cards[executor] = {tid: what_counts(c) for tid, c in cards_of(run_dir).items()}
    assert cards["ray"] == cards["local"]
    assert cards["ray"][TASK]["outcome"] == "pass" and cards["ray"][TASK]["attempts_used"] == 2
    submitted = [e for e in events_of(tmp_path / "ray") if e["kind"] == "submitted"]
    nodes = {e["payload"].get("node") for e in submitted}
    assert len(submitted) == 8 and None not in nodes and len(nodes) == 2, nodes
    assert all("node" not in e["payload"] for e in events_of(tmp_path / "local") if e["kind"] == "submitted")


def test_a_run_and_its_probe_on_the_cluster_bundle_and_verify(cluster: LocalCluster, sealed_pack: Path, tmp_path: Path) -> None:
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), run_id="ray-bundle")
    run_dir = tmp_path / "run"
    done = run_cli("run", str(contract), "--out", str(run_dir), "--no-progress", "--executor", "ray",
                   "--address", cluster.address)
    assert done.returncode == 0, done.stderr
    probed = run_cli("probe", str(contract), "--out", str(run_dir), "--no-progress", "--executor", "ray",
                     "--address", cluster.address)
    assert probed.returncode == 0, probed.stderr
    assert any(e["kind"] == "submitted" and e["payload"].get("node") for e in events_of(run_dir / "probe"))
    assert run_cli("bundle", str(run_dir), "--out", str(tmp_path / "b")).returncode == 0
    verified = run_cli("verify", str(tmp_path / "b" / "ray-bundle"))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_pack_validate_on_the_cluster_records_the_evidence_the_local_pool_records(
        cluster: LocalCluster, sealed_pack: Path, tmp_path: Path) -> None:
    """Each task's validity evidence (valid, reason, every grade) is the same from the nodes."""
    validity = {}
    for executor in ("local", "ray"):
        pack = tmp_path / f"pack-{executor}"
        shutil.copytree(sealed_pack, pack)
        extra = ["--executor", "ray", "--address", cluster.address] if executor == "ray" else []
        done = run_cli("pack", "validate", str(pack), "--repeat", "1", "--no-progress", *extra)
        assert done.returncode == 0, done.stderr
        manifest = json.loads((pack / "pack.json").read_text())
        # The grading time is measured, not decided: it differs from one machine's run to the next.
        validity[executor] = {tid: {k: v for k, v in ev.items() if k not in ("why", "reference_grading_s")}
                              for tid, ev in manifest["validity"]["tasks"].items()}
    assert validity["ray"] == validity["local"]
    assert len(validity["ray"]) >= 4 and any(ev["valid"] for ev in validity["ray"].values())


def test_resources_no_node_offers_are_refused_before_any_line(cluster: LocalCluster, sealed_pack: Path,
                                                               tmp_path: Path) -> None:
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), run_id="ray-unoffered")
    done = run_cli("run", str(contract), "--out", str(tmp_path / "run"), "--no-progress", "--executor", "ray",
                   "--address", cluster.address, "--ray-resources", '{"gpu_box": 1}')
    assert done.returncode == 3, done.stderr
    assert "none of the cluster's 2 nodes offers {'gpu_box': 1.0}" in done.stderr
    assert not (tmp_path / "run" / "journal.jsonl").exists()


def test_a_runner_that_cannot_be_scheduled_is_refused_after_the_timeout_not_left_pending(
        cluster: LocalCluster, sealed_pack: Path, tmp_path: Path) -> None:
    """The worker node's one ``worker`` resource is held by another job: the run refuses once
    the scheduling timeout passes, with nothing journaled and no runner left pending."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import time, ray
        ray.init(address={cluster.address!r}, log_to_driver=False)
        @ray.remote(resources={{"worker": 1}}, num_cpus=0)
        class Holder:
            def ping(self):
                return 1
        h = Holder.remote()
        ray.get(h.ping.remote())
        print("held", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, env={**os.environ, **LOOPBACK})
    try:
        assert holder.stdout is not None
        assert select.select([holder.stdout], [], [], 60)[0], "the holder never held the resource"
        assert holder.stdout.readline().strip() == "held"
        contract = tmp_path / "c.json"
        make_contract(sealed_pack, contract, task_ids=(TASK,), run_id="ray-pending")
        t0 = time.monotonic()
        done = run_cli("run", str(contract), "--out", str(tmp_path / "run"), "--no-progress", "--executor", "ray",
                       "--address", cluster.address, "--ray-resources", '{"worker": 1, "CPU": 0}',
                       "--ray-schedule-timeout", "3")
        took = time.monotonic() - t0
    finally:
        holder.kill()
        holder.communicate()
    assert done.returncode == 3, done.stderr
    assert "was not scheduled within 3 s" in done.stderr
    assert took < 60
    assert not (tmp_path / "run" / "journal.jsonl").exists()


def test_a_model_backed_agent_on_the_cluster_calls_through_its_node_s_gateway(
        cluster: LocalCluster, sealed_pack: Path, tmp_path: Path) -> None:
    """The node's own gateway forwards the agent's call with the node's own key (the
    coordinator has none); the call is journaled, its bodies stored, before the attempt's
    agent_finished; the bundle verifies and re-derives the call's tokens."""
    from conftest import LOCK_TIME
    from sealbench.contract import lock_contract, new_contract
    from sealbench.files import model_json, write_atomic
    from sealbench.formats import AgentSpec, ModelEndpoint
    from sealbench.model_stub import StubReply, StubUsage, start
    from sealbench.pack import load_pack

    stub = start([StubReply(text=FIX, model="stub-model", repeat=True,
                            usage=StubUsage(input_tokens=120, output_tokens=30, cached_tokens=0))], key=KEY)
    try:
        agent_dir = tmp_path / "agent"
        agent_dir.mkdir()
        shutil.copy(Path(__file__).parent / "gateway_agent.py", agent_dir / "agent.py")
        (agent_dir / "plan.json").write_text(json.dumps({"1": [{"do": "chat", "model": "stub-model",
                                                                "write": "window.py"}]}))
        pack = load_pack(sealed_pack)
        contract_file = tmp_path / "gw.json"
        contract, _ = new_contract(pack, contract_file, [TASK], host="test cluster",
                                   agent=AgentSpec(label="gateway agent", command=f"python {agent_dir}/agent.py",
                                                   mounts=[str(agent_dir)]),
                                   oracle_validity="unavailable")
        endpoint = ModelEndpoint(name="openai", style="openai-chat", base_url=stub.url + "/v1",
                                 models=["stub-model"], key_env=KEY_ENV)
        contract = contract.model_copy(update={"model_endpoints": [endpoint]})
        write_atomic(contract_file, model_json(lock_contract(contract, "ray-gateway", LOCK_TIME, pack)))
        run_dir = tmp_path / "run"
        assert KEY_ENV not in os.environ
        done = run_cli("run", str(contract_file), "--out", str(run_dir), "--no-progress", "--executor", "ray",
                       "--address", cluster.address)
        assert done.returncode == 0, done.stderr
        # The probe while the endpoint is still up: one down refuses a run (the probe's too).
        probed = run_cli("probe", str(contract_file), "--out", str(run_dir), "--no-progress", "--executor", "ray",
                         "--address", cluster.address)
    finally:
        stub.close()
    events = events_of(run_dir)
    kinds = [e["kind"] for e in events if e.get("task_id") == TASK]
    assert kinds.index("model_call") < kinds.index("agent_finished")
    (call,) = [e for e in events if e["kind"] == "model_call"]
    assert call["payload"]["status"] == 200 and call["payload"]["input_tokens"] == 120
    for field in ("request", "response"):
        assert (run_dir / "blobs" / call["payload"][field].removeprefix("sha256:")).is_file()
    assert cards_of(run_dir)[TASK]["outcome"] == "pass"
    assert probed.returncode == 0, probed.stderr
    assert run_cli("bundle", str(run_dir), "--out", str(tmp_path / "b")).returncode == 0
    verified = run_cli("verify", str(tmp_path / "b" / "ray-gateway"))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_exploit_agent_on_a_node_dials_the_cluster_and_reads_the_runner_s_environment(
        cluster: LocalCluster, sealed_pack: Path, tmp_path: Path) -> None:
    """A hostile agent on a node tries the cluster's own services on loopback (the GCS, where
    it could submit work of its own or kill the runner) and looks for Ray's variables and the
    nodes' model key in its environment: every connection is refused (the sandbox has a
    network of its own), and its environment holds none of them."""
    port = int(cluster.address.rsplit(":", 1)[1])
    code = textwrap.dedent(f"""\
        import os, socket
        out = []
        for port in ({port}, 6379, 10001, 8265):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                out.append(f"connected {{port}}")
            except OSError as e:
                out.append(f"refused {{port}}: {{type(e).__name__}}")
        leaked = sorted(k for k in os.environ if k.startswith("RAY") or k == {KEY_ENV!r})
        out.append("env " + ",".join(leaked))
        out.append("key " + str({KEY!r} in repr(dict(os.environ))))
        open("NOTES.txt", "w").write("\\n".join(out) + "\\n")
    """)
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command="python -c " + shlex.quote(code),
                  run_id="ray-exploit")
    run_dir = tmp_path / "run"
    done = run_cli("run", str(contract), "--out", str(run_dir), "--no-progress", "--executor", "ray",
                   "--address", cluster.address)
    assert done.returncode == 0, done.stderr
    notes = [line[1:] for line in (run_dir / "patches" / f"{TASK}.patch").read_text().splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    assert len(notes) == 6, notes
    assert all(line.startswith("refused ") for line in notes[:4]), notes
    assert notes[4:] == ["env ", "key False"], notes
    assert cards_of(run_dir)[TASK]["outcome"] == "fail"


# --- faults: kills of a node's runner and of the coordinator (make test-ray) -----------------


def node_stamps(before: set[Path]) -> Path | None:
    """The stamps file of TASK in a node runner's scratch made since ``before``."""
    found = set(Path(tempfile.gettempdir()).glob(f"sealbench-ray-node-*/run/work/{TASK}/ws/.sealbench/trace/stamps"))
    new = sorted(found - before)
    return new[0] if new else None


def existing_stamps() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob(f"sealbench-ray-node-*/run/work/{TASK}/ws/.sealbench/trace/stamps"))


def wait_for(path_of: Any, proc: subprocess.Popen[str], timeout: float = 60) -> Path:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = path_of()
        if found is not None and found.exists() and found.read_text().strip():
            return Path(found)
        assert proc.poll() is None, "the run ended before its agent stamped"
        time.sleep(0.02)
    raise AssertionError("the agent never stamped")


def stamps_settle(path: Path, since: float) -> float:
    """Once the file stops growing (or is gone with its runner's scratch): the last stamp
    after ``since`` (0.0 when none)."""
    def read() -> list[float]:
        try:
            return [float(x) for x in path.read_text().split()]
        except OSError:
            return []

    before = read()
    while True:
        time.sleep(0.5)
        after = read()
        if after == before:
            return max([s for s in after if s > since], default=0.0)
        before = after


def agent_processes(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def ray_run_argv(contract: Path, run_dir: Path, cluster: LocalCluster, *more: str) -> list[str]:
    return [*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress",
            "--no-workspace-quota", "--executor", "ray", "--address", cluster.address, *more]


@pytest.mark.ray_faults
def test_a_node_runner_killed_mid_attempt_is_journaled_lost_and_never_run_again(
        cluster: LocalCluster, sealed_pack: Path, tmp_path: Path) -> None:
    """SIGKILL of the runner process holding an attempt: its agent dies with it, the attempt is
    journaled interrupted (charged, used), and the task goes on with its next attempt in a
    workspace made anew; no attempt number starts twice."""
    contract = tmp_path / "c.json"
    marker = f"agent-{uuid.uuid4().hex}"
    make_contract(sealed_pack, contract, task_ids=(TASK,),
                  command=stamping_agent(20.0, first_attempt_only=True, marker=marker), run_id="ray-kill-node",
                  max_attempts=2, wall_clock_s=60)
    run_dir = tmp_path / "run"
    before = existing_stamps()
    proc = subprocess.Popen(ray_run_argv(contract, run_dir, cluster), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stamps = wait_for(lambda: node_stamps(before), proc)
    pid = int(stamps.parents[6].name.split("-")[3])  # sealbench-ray-node-<pid>-<random>
    time.sleep(1.0)
    assert agent_processes(marker) != []
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    last = stamps_settle(stamps, killed_at)
    assert agent_processes(marker) == []
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert last == 0.0 or last < killed_at + 0.5, "the agent stamped after its runner was killed"
    events = events_of(run_dir)
    started = [e["attempt"] for e in events if e["kind"] == "attempt_started"]
    assert started == [1, 2]
    (lost,) = [e for e in events if e["kind"] == "attempt_interrupted"]
    assert lost["attempt"] == 1 and "died" in lost["payload"]["reason"]
    assert lost["payload"]["charged_s"] >= 1.0
    assert cards_of(run_dir)[TASK]["outcome"] == "pass"
    assert cards_of(run_dir)[TASK]["attempts_used"] == 2
    assert not stamps.parents[6].exists(), "the killed runner's folder (its pack and workspaces) is swept"


@pytest.mark.ray_faults
@pytest.mark.parametrize("restart", [False, True], ids=["cluster-still-up", "cluster-restarted"])
def test_a_coordinator_killed_mid_attempt_resumes_to_the_scorecards_of_an_uninterrupted_run(
        sealed_pack: Path, tmp_path: Path, restart: bool) -> None:
    """SIGKILL of the coordinator: its runners and their agents die with it (no stamp after
    the kill); the resume, on the same cluster or on one started anew, ends with the
    scorecards of a run never interrupted, and the killed attempt stays used."""
    temp = Path(tempfile.mkdtemp(prefix="sbray-", dir="/tmp"))
    c = LocalCluster(temp)
    try:
        marker = f"agent-{uuid.uuid4().hex}"
        agent = stamping_agent(20.0, first_attempt_only=True, marker=marker)
        contract = tmp_path / "c.json"
        make_contract(sealed_pack, contract, task_ids=(TASK,), command=agent, run_id="ray-kill-coordinator",
                      max_attempts=3, wall_clock_s=60)
        run_dir = tmp_path / "run"
        before = existing_stamps()
        proc = subprocess.Popen(ray_run_argv(contract, run_dir, c), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        stamps = wait_for(lambda: node_stamps(before), proc)
        time.sleep(1.0)
        assert agent_processes(marker) != []
        killed_at = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        last = stamps_settle(stamps, killed_at)
        assert agent_processes(marker) == []
        assert last == 0.0 or last < killed_at + 0.5, "an agent ran on after its coordinator died"
        if restart:
            c.shutdown()
            c = LocalCluster(Path(tempfile.mkdtemp(prefix="sbray-", dir="/tmp")))
        resumed = subprocess.run([*ray_run_argv(contract, run_dir, c), "--resume", str(run_dir)],
                                 capture_output=True, text=True, timeout=180)
        assert resumed.returncode == 0, resumed.stderr
    finally:
        c.shutdown()
    events = events_of(run_dir)
    assert [e["attempt"] for e in events if e["kind"] == "attempt_started"] == [1, 2]
    assert [e["attempt"] for e in events if e["kind"] == "attempt_interrupted"] == [1]
    # The same contract, never interrupted, on the local pool: the second attempt passes there too.
    reference = tmp_path / "ref.json"
    make_contract(sealed_pack, reference, task_ids=(TASK,), command=agent.replace("20.0", "0.0"),
                  run_id="ray-reference", max_attempts=3, wall_clock_s=60)
    done = run_cli("run", str(reference), "--out", str(tmp_path / "ref"), "--no-progress")
    assert done.returncode == 0, done.stderr
    got, want = what_counts(cards_of(run_dir)[TASK]), what_counts(cards_of(tmp_path / "ref")[TASK])
    assert got.pop("attempts_used") == 2 and want.pop("attempts_used") == 1
    got.pop("first_attempt_passed"), want.pop("first_attempt_passed")
    assert got == want


@pytest.mark.ray_faults
def test_exploit_agent_calls_while_its_node_runner_is_killed_and_no_node_passes_the_cap(
        cluster: LocalCluster, sealed_pack: Path, tmp_path: Path) -> None:
    """--max-attempts 2, --max-model-calls 2: SIGKILL of the node runner while the second call
    of attempt 1 is at the upstream. Each call was journaled by the coordinator before the node
    forwarded it, and the runner that takes the task over is told them: attempt 2's calls are
    refused at the cap, the upstream received no more than the cap, each call on the record."""
    from conftest import LOCK_TIME
    from sealbench.contract import lock_contract, new_contract
    from sealbench.files import model_json, write_atomic
    from sealbench.formats import AgentSpec, ModelEndpoint
    from sealbench.model_stub import StubReply, StubUsage, start
    from sealbench.pack import load_pack

    chat = {"do": "chat", "model": "stub-model"}
    stub = start([StubReply(text="x = 1\n", model="stub-model", repeat=True,
                            usage=StubUsage(input_tokens=10, output_tokens=5))], key=KEY, latency_ms=2000)
    try:
        agent_dir = tmp_path / "agent"
        agent_dir.mkdir()
        shutil.copy(Path(__file__).parent / "gateway_agent.py", agent_dir / "agent.py")
        (agent_dir / "plan.json").write_text(json.dumps({"1": [chat, chat, chat], "2": [chat, chat]}))
        pack = load_pack(sealed_pack)
        contract_file = tmp_path / "cap.json"
        contract, _ = new_contract(pack, contract_file, [TASK], host="test cluster", max_attempts=2,
                                   agent=AgentSpec(label="gateway agent", command=f"python {agent_dir}/agent.py",
                                                   mounts=[str(agent_dir)]),
                                   oracle_validity="unavailable", model_caps={"max_model_calls": 2})
        endpoint = ModelEndpoint(name="openai", style="openai-chat", base_url=stub.url + "/v1",
                                 models=["stub-model"], key_env=KEY_ENV)
        contract = contract.model_copy(update={"model_endpoints": [endpoint]})
        write_atomic(contract_file, model_json(lock_contract(contract, "ray-cap-kill", LOCK_TIME, pack)))
        run_dir = tmp_path / "run"
        before = set(Path(tempfile.gettempdir()).glob(f"sealbench-ray-node-*/run/work/{TASK}"))
        proc = subprocess.Popen(ray_run_argv(contract_file, run_dir, cluster), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        end = time.monotonic() + 120
        while stub.script.received < 2:
            assert proc.poll() is None and time.monotonic() < end, "the second call never reached the upstream"
            time.sleep(0.02)
        (work,) = set(Path(tempfile.gettempdir()).glob(f"sealbench-ray-node-*/run/work/{TASK}")) - before
        os.kill(int(work.parents[2].name.split("-")[3]), signal.SIGKILL)  # sealbench-ray-node-<pid>-<random>
        _out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        received = stub.script.received
    finally:
        stub.close()
    events = events_of(run_dir)
    assert received <= 2, f"the upstream received {received} calls under a cap of 2"
    started = {(e["attempt"], e["payload"]["index"]) for e in events if e["kind"] == "model_call_started"}
    ended = {(e["attempt"], e["payload"]["index"]) for e in events
             if e["kind"] == "model_call" and "refused" not in e["payload"]}
    assert len(started | ended) == received, "a call the upstream received is in no journal line"
    assert [e["payload"].get("cap") for e in events if e["kind"] == "model_call" and e["attempt"] == 2] == \
        ["max_model_calls", "max_model_calls"]


@pytest.mark.ray_faults
def test_exploit_a_reply_too_large_for_the_coordinator_s_disk_stops_the_run_and_the_call_stays_on_the_record(
        cluster: LocalCluster, sealed_pack: Path, tmp_path: Path) -> None:
    """A 7 MB reply on a node, 6 MiB free where the coordinator keeps the run: the call is
    journaled without its reply's bytes (its digest and size kept, bodies_missing) and the run
    stops on the storage failure (exit 3), never a pass with the call missing."""
    from conftest import LOCK_TIME
    from sealbench.contract import lock_contract, new_contract
    from sealbench.files import model_json, write_atomic
    from sealbench.formats import AgentSpec, ModelEndpoint
    from sealbench.model_stub import StubReply, start
    from sealbench.pack import load_pack
    from test_gateway_record import leave_free
    from test_storage import Disk

    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    stub = start([StubReply(text="y" * (7 * 10**6), model="stub-model", when="SEND-A-LOT", repeat=True),
                  StubReply(text=FIX, model="stub-model", repeat=True)], key=KEY)
    try:
        agent_dir = tmp_path / "agent"
        agent_dir.mkdir()
        shutil.copy(Path(__file__).parent / "gateway_agent.py", agent_dir / "agent.py")
        (agent_dir / "plan.json").write_text(json.dumps({"1": [
            {"do": "chat", "model": "stub-model", "content": "SEND-A-LOT"},
            {"do": "chat", "model": "stub-model", "write": "window.py"}]}))
        pack = load_pack(sealed_pack)
        contract_file = tmp_path / "full.json"
        contract, _ = new_contract(pack, contract_file, [TASK], host="test cluster",
                                   agent=AgentSpec(label="gateway agent", command=f"python {agent_dir}/agent.py",
                                                   mounts=[str(agent_dir)]),
                                   oracle_validity="unavailable")
        endpoint = ModelEndpoint(name="openai", style="openai-chat", base_url=stub.url + "/v1",
                                 models=["stub-model"], key_env=KEY_ENV)
        contract = contract.model_copy(update={"model_endpoints": [endpoint]})
        write_atomic(contract_file, model_json(lock_contract(contract, "ray-full", LOCK_TIME, pack)))
        run_dir = mount / "run"
        leave_free(Disk(mount), 6 * 2**20)
        done = subprocess.run(ray_run_argv(contract_file, run_dir, cluster), capture_output=True, text=True,
                              timeout=240)
        events = events_of(run_dir) if (run_dir / "journal.jsonl").exists() else []
    finally:
        stub.close()
        subprocess.run(["umount", "-l", str(mount)], check=False)
    assert done.returncode == 3, done.stderr
    assert "storage failure" in done.stderr
    assert not [e for e in events if e["kind"] == "task_finished"]
    (lost,) = [e["payload"] for e in events if e["kind"] == "model_call" and "bodies_missing" in e["payload"]]
    assert lost["response"] is None and lost["response_sha256"].startswith("sha256:")
    assert lost["response_bytes"] > 7 * 10**6
