"""Attempts on a Ray cluster, behind the same :class:`~sealbench.executors.Executor` interface
as the local pool: the coordinator, in the ``sealbench run`` process, still alone journals.

Each node of the cluster runs one :class:`NodeRunner` actor, placed on it by node affinity.
The actor receives the pack's files through Ray's object store once, unpacks them in its own
scratch folder and checks them against the locked digest before anything else; it opens the
sandbox the run names on its node, checks the built environments, the agent's command and
the sealbench version there, and refuses (the run refuses, before any journal line) when any
of these differs. It then runs attempts with a :class:`~sealbench.executors.LocalExecutor` of
its own: the attempt, its cap, its process-group kill and its cleanup are exactly the local
ones. What the coordinator needs back (the attempt's facts and the blobs they name) travels
back through the object store and is stored in the run's folder before it is journaled.

What Ray would otherwise do on its own is pinned off: actors are never restarted
(``max_restarts=0``), their calls never retried (``max_task_retries=0``), and an actor's
death is reported as the loss of every attempt it held (:attr:`Delivery.lost`), which the
coordinator journals as interrupted and charges; nothing is run again. A later actor on the
same node starts the task's next attempt in a workspace made anew, as a resume would.

The order of the calls to an actor is the order they were made: each carries a sequence
number, and the actor applies them in that order (Ray orders the calls of a threaded actor
only as far as it schedules them).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import os
import shutil
import tarfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from . import events as ev
from .agentfs import TreeCaps
from .attempt import AttemptFacts, AttemptSpec
from .blobs import store_bytes
from .errors import HarnessError, RunRefusal, SealbenchError
from .executors import Delivery, Handle, LocalExecutor
from .sandbox import Limits
from .settings import Settings
from .vocabulary import vocabulary_of

DEFAULT_ADDRESS: Final = "auto"
LOCAL_ADDRESS: Final = "local"
"""``--address local``: a private Ray instance started for this command and stopped with it."""
SCHEDULE_TIMEOUT_S: Final = 60.0
"""How long a node's runner may wait to be scheduled before the run refuses (or, later, the
node is given up): Ray leaves an actor it cannot place pending for ever."""
COLLECT_POLL_S: Final = 0.5
"""How long one collection call waits on a node for a result before it returns empty."""
COLLECT_SLICE_S: Final = 0.05
"""How often a waiting collection looks for model calls to ship (each is journaled within
about this long of its end)."""
ANNOUNCE_TIMEOUT_S: Final = 60.0
"""How long a node's gateway waits for the coordinator to journal a call as started; without
that line by then the call is refused, never forwarded."""
_CONTROL_GROUP: Final = "control"
_COLLECT_GROUP: Final = "collect"


@dataclass(frozen=True)
class RayOptions:
    """Where and how the attempts run on Ray (``run --executor ray``)."""

    address: str = DEFAULT_ADDRESS
    """``auto`` (the cluster this machine is part of, or ``RAY_ADDRESS``), ``ray://HOST:PORT``
    (Ray Client), a GCS ``HOST:PORT``, or ``local`` (a private instance on this machine)."""
    resources: Mapping[str, float] = field(default_factory=lambda: {"CPU": 1.0})
    """What each node's runner reserves; only nodes that offer all of it run attempts."""
    schedule_timeout_s: float = SCHEDULE_TIMEOUT_S


@dataclass(frozen=True)
class NodeSetup:
    """What a node's runner needs to check and run attempts, as plain values."""

    version: str
    pack_sha256: str
    task_ids: tuple[str, ...]
    sandbox: str
    agent: Any
    """The run's :class:`~sealbench.agents.ResolvedAgent`."""
    agent_mounts: tuple[str, ...]
    contract: Any
    """The run's :class:`~sealbench.contract.ScoringContract`."""
    environment_pins: Mapping[str, str]
    limits: Limits
    tree_caps: TreeCaps
    workspace_quota: bool
    jobs: int


@dataclass(frozen=True)
class RunPart:
    """What of a run's settings is known only once its journal is open."""

    probe: bool
    template_override: str | None
    derivation_version: int
    yield_cpu: bool
    model_calls: Mapping[str, tuple[ev.ModelCall | ev.ModelCallStarted, ...]] = field(default_factory=dict)
    """Each task's ``model_call`` and ``model_call_started`` events journaled before (a resume):
    its caps count them."""


@dataclass(frozen=True)
class Shipped:
    """One delivery from a node: the facts (or why they were lost) and the blobs they name."""

    serial: int
    facts: AttemptFacts | None
    lost: str | None
    blobs: Mapping[str, bytes]


@dataclass(frozen=True)
class Collected:
    """What one collection call brings back from a node, in the order it must be journaled:
    the model calls first (each before its attempt's ``agent_finished``), then the results."""

    calls: tuple[ev.ModelCall | ev.ModelCallStarted, ...]
    call_blobs: Mapping[str, bytes]
    shipped: tuple[Shipped, ...]
    ready: tuple[tuple[str, int], ...]


def node_setup(contract: Any, pack: Any, sandbox: Any, agent: Any, environments: Mapping[str, Any],
               limits: Limits, tree_caps: TreeCaps, *, workspace_quota: bool, jobs: int) -> NodeSetup:
    """What every node checks and runs by, from the coordinator's own checked values."""
    from . import __version__
    from .environments import pins

    assert contract.agent is not None
    return NodeSetup(version=__version__, pack_sha256=pack.sealed_digest, task_ids=tuple(contract.task_ids),
                     sandbox=sandbox.kind, agent=agent,
                     agent_mounts=tuple(contract.agent.mounts), contract=contract,
                     environment_pins=pins(environments), limits=limits, tree_caps=tree_caps,
                     workspace_quota=workspace_quota, jobs=max(1, jobs))


def pack_archive(root: Path) -> bytes:
    """The pack's files as an uncompressed tar (links kept as links, never followed)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(str(root), arcname="pack", recursive=True)
    return buf.getvalue()


def _blobs_of(events: Sequence[ev.Event]) -> list[str]:
    return [value for event in events for _name, value in ev.blob_fields(event)]


def _read_blobs(blobs_dir: Path, digests: Sequence[str]) -> dict[str, bytes]:
    return {d: (blobs_dir / d.removeprefix("sha256:")).read_bytes() for d in digests}


def _receive(scratch: Path, archive: bytes, version: str, pack_sha256: str, task_ids: Sequence[str] | None,
             environment_pins: Mapping[str, str]) -> tuple[Any, dict[str, Any]]:
    """The pack as it reached this node, checked against its seal and the coordinator's digest,
    and its environments as built here, checked against the coordinator's.

    Raises:
        RunRefusal: another sealbench version here, another pack, or other environments.
        PackError, VerificationFailed: the files that arrived do not match their seal.
    """
    from . import __version__
    from .environments import pins, require
    from .pack import check_pack

    if __version__ != version:
        raise RunRefusal(f"sealbench {__version__} is installed here, and the coordinator runs {version}; "
                         f"install the same version on every node")
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        tar.extractall(scratch, filter="data")
    pack = check_pack(scratch / "pack", task_ids)
    if pack.sealed_digest != pack_sha256:
        raise RunRefusal(f"the pack that reached this node has digest {pack.sealed_digest}, not {pack_sha256}")
    environments = require(pack, task_ids)
    if pins(environments) != dict(environment_pins):
        raise RunRefusal("the tasks' environments built on this node differ from the coordinator's "
                         "(build them from the same pack: `sealbench env build PACK`)")
    return pack, environments


def _open_same_sandbox(kind: str) -> Any:
    from .sandbox import open_sandbox

    sandbox = open_sandbox(kind)
    if sandbox.kind != kind:
        raise RunRefusal(f"the sandbox here is {sandbox.kind}, the coordinator's {kind}")
    return sandbox


class NodeRunner:
    """The attempts of one run on one node (a Ray actor: see :func:`connect`)."""

    def __init__(self, setup: NodeSetup, archive: bytes) -> None:
        self.setup = setup
        self.node = _node_name()
        self.refusal: str | None = None
        self._lock = threading.Lock()
        self._next = 0
        self._pending: dict[int, tuple[tuple[str, tuple[Any, ...]], ...]] = {}
        self._executor: LocalExecutor | None = None
        self._handles: dict[int, Handle] = {}
        self._by_local: dict[Handle, int] = {}
        self._warmed: dict[tuple[str, int], AttemptSpec] = {}
        self._calls: list[ev.ModelCall | ev.ModelCallStarted] = []
        self._called = threading.Event()
        self._journaled: dict[tuple[str | None, int | None, int | None], tuple[threading.Event, list[str]]] = {}
        """The calls announced and not yet journaled by the coordinator: set (with why it could
        not, if so) by the ``journaled`` op."""
        self._keys: dict[str, str] = {}
        self._gateway: Any = None
        from .scratch import temp_dir

        self.scratch = temp_dir("ray-node")
        try:
            self._check(archive)
        except (SealbenchError, OSError) as e:
            self.refusal = str(e)

    def _check(self, archive: bytes) -> None:
        s = self.setup
        self.pack, self.environments = _receive(self.scratch, archive, s.version, s.pack_sha256, s.task_ids,
                                                s.environment_pins)
        if s.sandbox == "bubblewrap":  # the node's memory holds its sandboxes' tmpfs quotas
            from .sizing import check_memory

            check_memory(s.jobs, s.limits, s.tree_caps, quota=s.workspace_quota)
        self.sandbox = _open_same_sandbox(s.sandbox)
        if s.agent.kind == "command":
            from .grading import command_path
            from .preflight import refuse_unless_starts

            refuse_unless_starts(s.agent.command, s.agent_mounts, self.sandbox, command_path())
        if s.contract.agent.preset is not None:
            from .presets import check_installed

            check_installed(s.contract)
        if s.contract.model_endpoints and s.agent.kind == "command":
            from .gateway import read_keys

            # This node's own: its gateway forwards the calls of the attempts that run here.
            self._keys = read_keys(s.contract, self.sandbox.kind)

    def ready(self) -> tuple[str, str | None]:
        """``(node, refusal)``: a refusal means nothing will run here."""
        return self.node, self.refusal

    def begin(self, part: RunPart) -> None:
        if self.refusal is not None:
            raise RunRefusal(self.refusal)
        s = self.setup
        run_dir = self.scratch / "run"
        (run_dir / "blobs").mkdir(parents=True, exist_ok=True)
        if s.contract.model_endpoints and s.agent.kind == "command":
            from .gateway import Gateway, ledger_of

            endpoints = s.contract.model_endpoints
            self._gateway = Gateway(endpoints, self._keys, self._record,
                                    lambda data: store_bytes(run_dir, data, durable=False),
                                    budget=s.contract.budget,
                                    used={tid: ledger_of(list(calls), endpoints)
                                          for tid, calls in part.model_calls.items()},
                                    derivation_version=part.derivation_version).start()
        settings = Settings(contract=s.contract, budget=s.contract.budget, pack_root=self.pack.root, run_dir=run_dir,
                            sandbox=self.sandbox, agent=s.agent, limits=s.limits, tree_caps=s.tree_caps,
                            workspace_quota=s.workspace_quota, probe=part.probe,
                            template_override=part.template_override, derivation_version=part.derivation_version,
                            environments=self.environments, yield_cpu=part.yield_cpu, gateway=self._gateway,
                            durable_blobs=False)
        self._executor = LocalExecutor(settings, s.jobs)

    def _record(self, event: ev.Event) -> None:
        """The node's gateway journals here: kept until the next collection ships it. A call
        about to be forwarded waits until the coordinator has journaled it durably.

        Raises:
            HarnessError: the coordinator did not journal the started call (it is not forwarded).
        """
        assert isinstance(event, ev.ModelCall | ev.ModelCallStarted)
        key = (event.task_id, event.attempt, event.index)
        done: tuple[threading.Event, list[str]] = (threading.Event(), [])
        with self._lock:
            if isinstance(event, ev.ModelCallStarted):
                self._journaled[key] = done
            self._calls.append(event)
        self._called.set()
        if isinstance(event, ev.ModelCallStarted):
            journaled = done[0].wait(ANNOUNCE_TIMEOUT_S)
            with self._lock:
                self._journaled.pop(key, None)
            if not journaled or done[1]:
                raise HarnessError(done[1][0] if done[1] else f"the coordinator did not journal the call within "
                                                                f"{ANNOUNCE_TIMEOUT_S:g} s")

    # ------------------------------------------------------------------------------ control

    def control(self, seq: int, ops: tuple[tuple[str, tuple[Any, ...]], ...]) -> None:
        """Apply the calls in the order they were made, whatever order their batches arrive in
        (``seq`` numbers the batches; a batch holds the calls of one turn of the coordinator)."""
        with self._lock:
            self._pending[seq] = ops
            while self._next in self._pending:
                batch = self._pending.pop(self._next)
                self._next += 1
                for name, call in batch:
                    self._apply(name, call)

    def _apply(self, op: str, args: tuple[Any, ...]) -> None:
        ex = self._executor
        assert ex is not None
        if op == "warm":
            spec = self._local(args[0])
            self._warmed[spec.key] = spec
            ex.warm(spec)
            # Asked at once, so that the set-up's end wakes the collection waiting (the local
            # pool wakes its waiter only for a set-up it was asked about).
            ex.ready(spec)
        elif op == "submit":
            serial, spec = args
            handle = ex.submit(self._local(spec))
            self._handles[serial] = handle
            self._by_local[handle] = serial
        elif op == "cancel":
            serial, reason = args
            running = self._handles.get(serial)
            if running is not None:
                ex.cancel(running, reason)
        elif op == "wind_down":
            ex.wind_down()
        elif op == "journaled":
            keys, failed = args
            for key in keys:
                waiting = self._journaled.get(tuple(key))
                if waiting is not None:
                    if failed:
                        waiting[1].append(failed)
                    waiting[0].set()
        elif op == "ledger":
            task_id, calls = args
            if self._gateway is not None:
                from .gateway import ledger_of

                self._gateway.seed(task_id, ledger_of(list(calls), self.setup.contract.model_endpoints))
        elif op == "release":
            for key in [k for k in self._warmed if k[0] == args[0]]:
                del self._warmed[key]
            ex.release(args[0])

    def _local(self, spec: AttemptSpec) -> AttemptSpec:
        """The spec with this node's copy of its task and a workspace in this node's scratch."""
        task = self.pack.tasks[spec.task.task_id]
        return replace(spec, task=task, task_dir=self.scratch / "run" / "work" / spec.task_dir.name)

    def collect(self, timeout_s: float, seq: int | None = None,
                ops: tuple[tuple[str, tuple[Any, ...]], ...] = ()) -> Collected:
        """The model calls and results since the last call, and the set-ups now ready; waits up
        to ``timeout_s`` for any of them (a model call ends the wait within a slice). Results
        leave at once, even while this node's set-ups ahead are under way: the coordinator may
        have a set-up ready on another node to start in their place."""
        if seq is not None:
            self.control(seq, ops)  # a batch of calls that rode on this one (see RayExecutor.wait)
        ex = self._executor
        if ex is None:
            time.sleep(timeout_s)
            return Collected((), {}, (), ())
        end = time.monotonic() + timeout_s
        deliveries: list[Delivery] = []
        while True:
            deliveries += ex.wait(min(COLLECT_SLICE_S, max(0.0, end - time.monotonic())))
            with self._lock:
                ready = tuple(k for k, spec in self._warmed.items() if ex.ready(spec))
            if deliveries or ready or self._called.is_set() or time.monotonic() >= end:
                break
        blobs_dir = ex.settings.run_dir / "blobs"
        out: list[Shipped] = []
        for d in deliveries:
            with self._lock:
                serial = self._by_local.pop(d.handle, None)
                if serial is not None:
                    self._handles.pop(serial, None)
            if serial is None:
                continue
            try:
                blobs = _read_blobs(blobs_dir, _blobs_of(d.facts.events())) if d.facts is not None else {}
            except OSError as e:
                out.append(Shipped(serial, None, f"the node could not read back what the attempt stored: {e}", {}))
                continue
            out.append(Shipped(serial, d.facts, d.lost, blobs))
        with self._lock:
            # After the results: every call of a delivered attempt was recorded before it ended.
            calls, self._calls = tuple(self._calls), []
            self._called.clear()
            for key in ready:
                del self._warmed[key]
        call_blobs = _read_blobs(blobs_dir, _blobs_of(calls))
        return Collected(calls, call_blobs, tuple(out), ready)

    def close(self) -> None:
        """Wait for the attempts under way, then remove this node's scratch."""
        if self._executor is not None:
            self._executor.close()
        if self._gateway is not None:
            self._gateway.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _ray() -> Any:
    """The ``ray`` module, untyped (it is an optional extra, imported only when asked for).

    Raises:
        RunRefusal: Ray is not installed.
    """
    import importlib

    try:
        return importlib.import_module("ray")
    except ImportError:
        raise RunRefusal("--executor ray needs Ray: pip install 'sealbench[ray]'") from None


def _node_name() -> str:
    ray = _ray()

    ctx = ray.get_runtime_context()
    node_id = str(ctx.get_node_id())
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return f"{node.get('NodeManagerAddress', '?')}:{node.get('NodeManagerPort', '?')}"
    return node_id[:12]


@dataclass
class _Node:
    name: str
    node_id: str
    actor: Any
    collecting: Any = None
    """The collection call under way (an ObjectRef)."""
    seq: itertools.count[int] = field(default_factory=itertools.count)
    dead: str | None = None
    running: set[int] = field(default_factory=set)
    outbox: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    """Calls not sent yet (:meth:`RayExecutor._flush` sends them as one batch)."""


class Cluster:
    """A connection to a Ray cluster and a checked runner on each of its usable nodes."""

    def __init__(self, options: RayOptions, nodes: list[_Node], factory: Any,
                 setup: NodeSetup, archive_ref: Any) -> None:
        self.options = options
        self.nodes = nodes
        self._factory = factory
        self._setup = setup
        self._archive_ref = archive_ref

    def executor(self, settings: Settings, jobs: int, part: RunPart,
                 record: Callable[[ev.Event], object] | None = None) -> RayExecutor:
        """The executor of one run on these nodes (each node's runner begins the run).

        ``record`` journals the nodes' ``model_call`` lines (the run's journal append)."""
        ray = _ray()

        try:
            ray.get([n.actor.begin.remote(part) for n in self.nodes], timeout=self._timeout())
        except Exception as e:
            raise HarnessError(f"the Ray nodes could not begin the run: {e}") from e
        return RayExecutor(self, settings, jobs, part, record)

    def _timeout(self) -> float:
        return self.options.schedule_timeout_s

    def replace(self, node: _Node, part: RunPart) -> _Node | None:
        """A new runner on a node whose runner died, when the node is still there and the
        runner is scheduled in time; else None (the node is given up)."""
        ray = _ray()

        try:
            fresh = _place(self._factory, node.node_id, self._setup, self._archive_ref)
            name, refusal = ray.get(fresh.ready.remote(), timeout=self._timeout())
            if refusal is not None:
                ray.kill(fresh, no_restart=True)
                return None
            ray.get(fresh.begin.remote(part), timeout=self._timeout())
        except Exception:
            return None
        return _Node(name=name, node_id=node.node_id, actor=fresh)

    def close(self) -> None:
        ray = _ray()

        for node in self.nodes:
            with contextlib.suppress(Exception):
                ray.kill(node.actor, no_restart=True)
        with contextlib.suppress(Exception):
            ray.shutdown()
        import tempfile

        from .scratch import TEMP_DIR_SCRATCH, sweep

        # Runners killed on this machine (replaced, or at the end) left their folders: those gone are swept.
        sweep(Path(tempfile.gettempdir()), TEMP_DIR_SCRATCH)


def _place(factory: Any, node_id: str, *args: Any) -> Any:
    """A new actor of ``factory`` on the node ``node_id`` and nowhere else."""
    import importlib

    strategies = importlib.import_module("ray.util.scheduling_strategies")
    return factory.options(
        scheduling_strategy=strategies.NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    ).remote(*args)


def _actor_class(ray: Any, cls: type, options: RayOptions, **more: Any) -> Any:
    """``cls`` as a Ray actor that reserves ``options.resources``; never restarted, its calls never retried."""
    return ray.remote(max_restarts=0, max_task_retries=0,
                      resources={k: v for k, v in options.resources.items() if k not in ("CPU", "GPU")},
                      num_cpus=options.resources.get("CPU", 0.0), num_gpus=options.resources.get("GPU", 0.0),
                      **more)(cls)


def _place_all(ray: Any, options: RayOptions, place: Callable[[str], Any], what: str) -> list[_Node]:
    """One actor on each node that offers the resources, each ready and without a refusal.

    Raises:
        RunRefusal: no node offers the resources, one actor is not scheduled in time, could not
            start, or refused (every node's reason named); no actor is left behind then.
    """
    alive = [n for n in ray.nodes() if n.get("Alive")]
    usable = [n for n in alive if _offers(n, options.resources)]
    if not usable:
        raise RunRefusal(f"none of the cluster's {len(alive)} nodes offers {dict(options.resources)} "
                         f"(--ray-resources); nothing would ever be scheduled")
    actors = [(n["NodeID"], place(n["NodeID"])) for n in usable]
    nodes: list[_Node] = []
    refusals: list[str] = []
    for node_id, actor in actors:
        try:
            name, refusal = ray.get(actor.ready.remote(), timeout=options.schedule_timeout_s)
        except ray.exceptions.GetTimeoutError:
            refusals.append(f"node {node_id[:12]}: its runner was not scheduled within "
                            f"{options.schedule_timeout_s:g} s (its resources {dict(options.resources)} "
                            f"are taken or gone)")
            ray.kill(actor, no_restart=True)
            continue
        except ray.exceptions.RayError as e:
            refusals.append(f"node {node_id[:12]}: its runner could not start: {e}")
            continue
        if refusal is not None:
            refusals.append(f"node {name}: {refusal}")
            ray.kill(actor, no_restart=True)
            continue
        nodes.append(_Node(name=name, node_id=node_id, actor=actor))
    if refusals:
        for n in nodes:
            ray.kill(n.actor, no_restart=True)
        raise RunRefusal(f"the Ray cluster cannot {what}:\n  " + "\n  ".join(refusals))
    return nodes


def _ray_init(address: str) -> None:
    """Connect (or, for ``local``, start a private instance).

    Raises:
        RunRefusal: Ray is not installed, or no cluster answers at ``address``.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # this machine reaches no telemetry endpoint
    host = address.rpartition(":")[0].removeprefix("ray://").strip("[]")
    if host in ("127.0.0.1", "localhost", "::1"):
        # Ray rewrites a loopback address to this machine's outward one, where a cluster started
        # on loopback does not listen; this keeps it (read when Ray is first imported).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray = _ray()
    if address != LOCAL_ADDRESS and not address.startswith("ray://"):
        _refuse_unless_listening(ray, address)
    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR,
                              "include_dashboard": False, "ignore_reinit_error": True}
    try:
        if address == LOCAL_ADDRESS:
            ray.init(**kwargs, num_cpus=os.cpu_count() or 1)
            return
        if address.startswith("ray://"):
            kwargs.pop("include_dashboard")
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise RunRefusal(f"no Ray cluster answered at {address!r}: {e}. Start one (`ray start --head`) or "
                         f"name its address (--address HOST:PORT, ray://HOST:PORT, or local)") from None


CONNECT_TIMEOUT_S: Final = 5.0


def _refuse_unless_listening(ray: Any, address: str) -> None:
    """Refuse at once when nothing listens where the cluster should be: Ray itself would retry
    the connection for minutes.

    Raises:
        RunRefusal: no cluster found for ``auto``, or nothing accepts a connection at its address.
    """
    import socket

    try:
        resolved = ray._private.services.canonicalize_bootstrap_address(address)
    except Exception as e:
        raise RunRefusal(f"no Ray cluster found at {address!r}: {str(e).rstrip('.')}. Start one (`ray start --head`) or name "
                         f"its address (--address HOST:PORT, ray://HOST:PORT, or local)") from None
    if resolved is None:
        raise RunRefusal(f"no Ray cluster is running on this machine (--address {address}); start one "
                         f"(`ray start --head`), name its address, or use --address local")
    host, _, port = str(resolved).rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except (OSError, ValueError) as e:
        raise RunRefusal(f"no Ray cluster answers at {resolved} (--address {address}): {e}") from None


def _offers(node: Mapping[str, Any], wanted: Mapping[str, float]) -> bool:
    have = node.get("Resources") or {}
    return all(float(have.get(k, 0.0)) >= v for k, v in wanted.items())


def connect(options: RayOptions, setup: NodeSetup, pack_root: Path) -> Cluster:
    """Connect to the cluster and start a checked runner on each node that offers the resources.

    Raises:
        RunRefusal: no cluster, no node that offers the resources, a runner not scheduled within
            the timeout, or a node whose pack, environments, sandbox, agent or sealbench
            version differs (each named).
    """
    _ray_init(options.address)
    ray = _ray()

    try:
        factory = _actor_class(ray, NodeRunner, options, concurrency_groups={_CONTROL_GROUP: 1, _COLLECT_GROUP: 1})
        archive_ref = ray.put(pack_archive(pack_root))
        nodes = _place_all(ray, options, lambda node_id: _place(factory, node_id, setup, archive_ref),
                           "run this contract's attempts")
    except BaseException:
        with contextlib.suppress(Exception):
            ray.shutdown()
        raise
    return Cluster(options, nodes, factory, setup, archive_ref)


class RayExecutor:
    """The :class:`~sealbench.executors.Executor` of a run on a :class:`Cluster`."""

    def __init__(self, cluster: Cluster, settings: Settings, jobs: int, part: RunPart | None = None,
                 record: Callable[[ev.Event], object] | None = None) -> None:
        self.cluster = cluster
        self._record = record
        self._model_calls: dict[str, list[ev.ModelCall | ev.ModelCallStarted]] = {
            tid: list(calls) for tid, calls in (part.model_calls if part is not None else {}).items()}
        """Each task's model calls, journaled before and by this run: what a node that takes
        the task over must count against its caps."""
        self.settings = settings
        self.jobs = max(1, jobs)
        self._part = part
        self._lock = threading.Lock()
        self._serial = itertools.count(1)
        self._nodes = list(cluster.nodes)
        self._home: dict[str, _Node] = {}
        """Where each task's workspace is (its next attempts go there while the node lives)."""
        self._open: dict[int, tuple[Handle, _Node]] = {}
        self._warmed: dict[tuple[str, int], _Node] = {}
        self._ready: set[tuple[str, int]] = set()
        self._unstored: dict[tuple[str | None, int | None], str] = {}
        """The attempts a model call of which was journaled without its bodies: stopped on it."""
        self._closed = False

    # ------------------------------------------------------------------------------ placement

    def _alive(self) -> list[_Node]:
        return [n for n in self._nodes if n.dead is None]

    def _choose(self, task_id: str) -> _Node:
        home = self._home.get(task_id)
        if home is not None and home.dead is None:
            return home
        alive = self._alive()
        if not alive:
            raise HarnessError("no node of the Ray cluster is left to run attempts on (every runner died); "
                               "the run stops here and resumes with `sealbench run --resume` once nodes are back")
        homed = {id(n): 0 for n in alive}
        for n in self._home.values():
            if id(n) in homed:
                homed[id(n)] += 1
        node = min(alive, key=lambda n: homed[id(n)])  # the node with the fewest tasks under way
        self._home[task_id] = node
        return node

    def _call(self, node: _Node, op: str, *args: Any, now: bool = False) -> None:
        """Queue a call to ``node``'s runner; ``now`` sends it (and those queued before it) at
        once. The others leave together when the coordinator next waits (:meth:`wait`): one
        round trip per node and turn, not one per call, for what a turn asks (set-ups ahead,
        submissions, releases)."""
        with self._lock:
            node.outbox.append((op, args))
        if now:
            self._flush(node)

    def _take(self, node: _Node) -> tuple[int | None, tuple[tuple[str, tuple[Any, ...]], ...]]:
        """The calls queued for ``node`` as one numbered batch (no number: nothing to send)."""
        with self._lock:
            ops, node.outbox = tuple(node.outbox), []
            return (next(node.seq) if ops and node.dead is None else None), ops

    def _flush(self, node: _Node) -> None:
        seq, ops = self._take(node)
        if seq is not None:
            node.actor.control.options(concurrency_group=_CONTROL_GROUP).remote(seq, ops)

    # ------------------------------------------------------------------------------ Executor

    def node_of(self, spec: AttemptSpec) -> str | None:
        """The node the attempt will run on (journaled in its ``submitted`` line)."""
        with self._lock:
            return self._choose(spec.task.task_id).name

    def warm(self, spec: AttemptSpec) -> None:
        with self._lock:
            if spec.key in self._warmed:
                return
            node = self._choose(spec.task.task_id)
            self._warmed[spec.key] = node
        self._call(node, "warm", spec)

    def ready(self, spec: AttemptSpec) -> bool:
        with self._lock:
            node = self._warmed.get(spec.key)
            return node is None or node.dead is not None or spec.key in self._ready

    def submit(self, spec: AttemptSpec) -> Handle:
        with self._lock:
            home = self._home.get(spec.task.task_id)
            node = self._choose(spec.task.task_id)
            moved = home is not node
            if moved:  # the workspace was on a node whose runner died: made anew
                spec = replace(spec, fresh=True)
            calls = tuple(self._model_calls.get(spec.task.task_id, ()))
            self._warmed.pop(spec.key, None)
            self._ready.discard(spec.key)
            handle = Handle(spec.task.task_id, spec.attempt, next(self._serial))
            self._open[handle.serial] = (handle, node)
            node.running.add(handle.serial)
        if calls:
            # Every submission, not only when the task moved: a set-up ahead has already re-homed
            # a task whose runner died, and the journal, not the node, knows every call made.
            self._call(node, "ledger", spec.task.task_id, calls)
        self._call(node, "submit", handle.serial, spec)
        return handle

    def wait(self, timeout_s: float) -> list[Delivery]:
        ray = _ray()

        out: list[Delivery] = []
        refs: dict[Any, _Node] = {}
        for node in self._alive():
            if node.collecting is None:
                # What this turn asked of the node rides on its next collection: one round trip.
                seq, ops = self._take(node)
                node.collecting = node.actor.collect.options(concurrency_group=_COLLECT_GROUP).remote(
                    COLLECT_POLL_S, seq, ops)
            else:
                self._flush(node)  # what this turn asked, before waiting on what it asked for
            refs[node.collecting] = node
        if not refs:
            time.sleep(max(0.0, min(timeout_s, COLLECT_POLL_S)))
            return out
        done, _ = ray.wait(list(refs), num_returns=1, timeout=max(0.0, timeout_s))
        if done:
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in done:
            node = refs[ref]
            node.collecting = None
            try:
                got: Collected = ray.get(ref)
            except ray.exceptions.RayError as e:
                out.extend(self._node_died(node, e))
                continue
            self._journal_calls(node, got)
            with self._lock:
                self._ready.update(got.ready)
            for item in got.shipped:
                delivery = self._arrived(node, item)
                if delivery is not None:
                    out.append(delivery)
        return out

    def _journal_calls(self, node: _Node, got: Collected) -> None:
        """The nodes' model calls, bodies stored first, each journaled before its attempt's
        results are handed on; the node is told which started calls are on the record (only
        those are forwarded). A failure to write is the journal's: the run stops on it."""
        if not got.calls:
            return
        started: list[tuple[str | None, int | None, int | None]] = []
        failed = ""
        try:
            for event in got.calls:
                call: ev.ModelCall | ev.ModelCallStarted | None = event
                unstored = self._store_call_blobs(event, got.call_blobs)
                if unstored is not None:
                    # A started call whose body cannot be kept is not journaled, and so never sent.
                    failed = failed or f"the coordinator could not store the call's body ({unstored})"
                    call = self._without_bodies(event, unstored) if isinstance(event, ev.ModelCall) else None
                    with self._lock:
                        self._unstored.setdefault((event.task_id, event.attempt), f"storage failure: a model "
                                                  f"call's bodies could not be stored ({unstored})")
                if call is None:
                    continue
                if self._record is not None:
                    self._record(call)
                if isinstance(call, ev.ModelCallStarted):
                    started.append((call.task_id, call.attempt, call.index))
                if call.task_id is not None:
                    self._model_calls.setdefault(call.task_id, []).append(call)
        except Exception as e:  # the coordinator's next line fails the same way, and stops the run
            failed = f"the coordinator could not journal the call: {type(e).__name__}: {str(e)[:300]}"
        announced = [(c.task_id, c.attempt, c.index) for c in got.calls if isinstance(c, ev.ModelCallStarted)]
        refused = [key for key in announced if key not in started]
        if started:
            self._call(node, "journaled", started, "", now=bool(not refused))
        if refused:
            self._call(node, "journaled", refused, failed or "the call was not journaled", now=True)

    def _store_call_blobs(self, call: ev.Event, blobs: Mapping[str, bytes]) -> str | None:
        """Store the blobs ``call`` names; why one could not be, or None."""
        try:
            for _name, digest in ev.blob_fields(call):
                if digest in blobs and store_bytes(self.settings.run_dir, blobs[digest]) != digest:
                    return f"the blob {digest} from the node did not match its digest"
        except OSError as e:
            return f"{type(e).__name__}: {e}"[:300]
        return None

    def _without_bodies(self, call: ev.ModelCall, why: str) -> ev.ModelCall:
        """``call`` with its bodies named by digest only, the bytes marked missing (in a run
        whose vocabulary lacks those fields, its error says so)."""
        if self._part is not None and not vocabulary_of(self._part.derivation_version).announced_calls:
            return call.model_copy(update={"request": None, "response": None,
                                           "error": "; ".join([*([call.error] if call.error else []),
                                                               f"bodies not stored: {why}"])})
        digests = {"request_sha256": call.request_sha256 or call.request, "response_sha256": call.response}
        return call.model_copy(update={"request": None, "response": None, "bodies_missing": why,
                                       **{k: v for k, v in digests.items() if v is not None}})

    def _arrived(self, node: _Node, item: Shipped) -> Delivery | None:
        with self._lock:
            entry = self._open.pop(item.serial, None)
            node.running.discard(item.serial)
        if entry is None:
            return None
        handle: Handle = entry[0]
        facts = item.facts
        with self._lock:
            unstored = self._unstored.pop((handle.task_id, handle.attempt), None)
        if unstored is not None and facts is not None:  # the record lacks a part of one of its calls
            return Delivery(handle, AttemptFacts(task_id=handle.task_id, attempt=handle.attempt, stopped=unstored,
                                                 storage_failure=unstored, elapsed_s=facts.elapsed_s), lost=item.lost)
        if facts is not None:
            try:
                for digest, data in item.blobs.items():
                    if store_bytes(self.settings.run_dir, data) != digest:
                        return Delivery(handle, None, lost=f"a blob from node {node.name} did not match its digest")
            except OSError as e:
                from .attempt import storage_failed

                why = storage_failed(self.settings.run_dir, e) or f"storage failure: {e}"
                facts = AttemptFacts(task_id=handle.task_id, attempt=handle.attempt, stopped=why,
                                     storage_failure=why, elapsed_s=facts.elapsed_s)
        return Delivery(handle, facts, lost=item.lost)

    def _node_died(self, node: _Node, error: BaseException) -> list[Delivery]:
        why = f"the Ray runner on node {node.name} died: {type(error).__name__}"
        with self._lock:
            node.dead = why
            lost = [self._open.pop(s)[0] for s in sorted(node.running) if s in self._open]
            node.running.clear()
            for key in [k for k, n in self._warmed.items() if n is node]:
                self._warmed.pop(key)
        if self._part is not None and not self._closed:
            fresh = self.cluster.replace(node, self._part)
            if fresh is not None:
                with self._lock:
                    self._nodes.append(fresh)
        return [Delivery(h, None, lost=why) for h in lost]

    def cancel(self, handle: Handle, reason: str) -> None:
        with self._lock:
            entry = self._open.get(handle.serial)
        if entry is not None and entry[1].dead is None:
            self._call(entry[1], "cancel", handle.serial, reason, now=True)

    def wind_down(self) -> None:
        for node in self._alive():
            self._call(node, "wind_down", now=True)

    def release(self, task_id: str) -> None:
        with self._lock:
            node = self._home.pop(task_id, None)
            for key in [k for k in self._warmed if k[0] == task_id]:
                self._warmed.pop(key)
        if node is not None and node.dead is None:
            self._call(node, "release", task_id)

    def close(self) -> None:
        ray = _ray()

        with self._lock:
            if self._closed:
                return
            self._closed = True
        for node in self._alive():
            self._flush(node)  # submitted attempts still reach their runner, which waits for them
        closing = [n.actor.close.options(concurrency_group=_CONTROL_GROUP).remote() for n in self._alive()]
        with contextlib.suppress(Exception):
            ray.get(closing, timeout=self.cluster.options.schedule_timeout_s)

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._open)


# ---------------------------------------------------------------------------- pack validate


class NodeValidator:
    """The oracles of one ``pack validate`` on one node (a Ray actor: see :func:`validate_on_ray`)."""

    def __init__(self, version: str, pack_sha256: str, sandbox: str, environment_pins: Mapping[str, str],
                 archive: bytes) -> None:
        from .scratch import temp_dir

        self.node = _node_name()
        self.refusal: str | None = None
        self.scratch = temp_dir("ray-node")
        self.validator: Any = None
        try:
            pack, environments = _receive(self.scratch, archive, version, pack_sha256, None, environment_pins)
            from .validate import Validator

            self.validator = Validator(pack, _open_same_sandbox(sandbox), environments)
        except (SealbenchError, OSError) as e:
            self.refusal = str(e)

    def ready(self) -> tuple[str, str | None]:
        return self.node, self.refusal

    def validate(self, task_id: str, repeat: int) -> Any:
        assert self.validator is not None
        return self.validator.validate(task_id, repeat)

    def stop(self, why: str) -> None:
        if self.validator is not None:
            self.validator.stop(why)

    def close(self) -> None:
        if self.validator is not None:
            self.validator.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def validate_on_ray(options: RayOptions, pack: Any, sandbox: Any, environments: Mapping[str, Any], *, repeat: int,
                    jobs: int, done: Callable[[str, Any], None]) -> None:
    """Grade every task's oracle on the nodes of a Ray cluster, ``jobs`` tasks at once on each;
    ``done(task_id, evidence)`` in this thread as each ends.

    Raises:
        RunRefusal: as :func:`connect` (a node's pack, environments or sandbox differ).
        HarnessError: a node died while validating (nothing is recorded: validate again).
    """
    from . import __version__
    from .environments import pins

    _ray_init(options.address)
    ray = _ray()
    nodes: list[_Node] = []
    try:
        factory = _actor_class(ray, NodeValidator, options, max_concurrency=max(1, jobs) + 1)
        archive_ref = ray.put(pack_archive(pack.root))
        nodes = _place_all(ray, options, lambda node_id: _place(factory, node_id, __version__, pack.sealed_digest,
                                                                  sandbox.kind, pins(environments), archive_ref),
                           "validate this pack's oracles")
        todo = sorted(pack.tasks)
        running: dict[Any, tuple[str, _Node]] = {}
        per_node = max(1, jobs)
        try:
            while todo or running:
                for node in nodes:
                    while todo and sum(1 for _, n in running.values() if n is node) < per_node:
                        tid = todo.pop(0)
                        running[node.actor.validate.remote(tid, repeat)] = (tid, node)
                finished, _ = ray.wait(list(running), num_returns=1, timeout=COLLECT_POLL_S)
                for ref in finished:
                    tid, node = running.pop(ref)
                    try:
                        evidence = ray.get(ref)
                    except ray.exceptions.RayError as e:
                        raise HarnessError(f"node {node.name} failed while validating {tid} ({type(e).__name__}: "
                                           f"{str(e)[:300]}); no evidence was written, validate again") from None
                    done(tid, evidence)
        except BaseException:
            for node in nodes:
                with contextlib.suppress(Exception):
                    node.actor.stop.remote("validation stopped")
            raise
    finally:
        with contextlib.suppress(Exception):
            ray.get([n.actor.close.remote() for n in nodes], timeout=options.schedule_timeout_s)
        for node in nodes:
            with contextlib.suppress(Exception):
                ray.kill(node.actor, no_restart=True)
        with contextlib.suppress(Exception):
            ray.shutdown()
