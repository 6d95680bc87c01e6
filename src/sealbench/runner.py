"""The runner: every task of a locked contract, sandboxed, capped, graded by hidden tests.

:func:`execute` is the shell of a run: it checks the contract and the pack, claims the run,
opens (or resumes) the journal, and hands the tasks to the coordinator
(:mod:`sealbench.coordinator`), which journals every step before acting on it and runs each
attempt (:mod:`sealbench.attempt`: the agent in the sandbox with the time that remains, the
patch captured, graded in a pristine copy by :mod:`sealbench.grading`) on an executor
(:mod:`sealbench.executors`). The journal is the only source of truth: scorecards, traces and
events.json are derived from it (:mod:`sealbench.derive`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import platform
import secrets
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from . import __version__, preflight, pytest_oracle, runs_index
from . import events as ev
from .agentfs import TreeCaps, remove_tree
from .agents import PythonAgent, ResolvedAgent, resolve_agent
from .attempt import render_prompt
from .blobs import store_bytes
from .charge import Charge, time_used
from .clock import HEARTBEAT_MS, Clock, Heartbeat, lease_for
from .contract import load_contract, pack_path, require_locked
from .coordinator import STOPPED_MID_ATTEMPT, Coordinator, JournalStopped, Prior, Requests
from .derive import DERIVATION_VERSION, RESUMABLE, derive_iter, isolation_of, probe_bytes, probe_summary
from .errors import RunRefusal, StorageError, describe_storage_failure, storage_failure
from .executors import Executor, LocalExecutor
from .files import write_atomic
from .formats import Budget, ModelEndpoint, Scorecard, ScoringContract
from .grading import command_path
from .journal import Journal, iter_verified, open_for_resume
from .lock import hold_writer
from .outcomes import AttemptResult
from .pack import Pack, check_pack
from .progress import Progress
from .sandbox import YIELD_ABOVE_JOBS, Limits, Sandbox, open_sandbox
from .scratch import sweep_temp_files
from .settings import Settings
from .sizing import check_memory, default_jobs, sized
from .stories import StoryBook, TaskStory
from .vocabulary import vocabulary_of

if TYPE_CHECKING:
    from .environments import BuiltEnv
    from .gateway import Gateway
    from .ray_executor import Cluster, RayOptions
    from .replay import Record

__all__ = ["JournalStopped", "Limits", "RunOptions", "RunPlan", "RunResult", "execute", "render_prompt", "write_derived",
           "write_probe_summary"]



@dataclass
class RunOptions:
    """Knobs of one ``sealbench run`` that are not part of the measurement."""

    jobs: int = field(default_factory=default_jobs)
    sandbox: str = "auto"
    resume: bool = False
    progress: bool | None = None
    keep_work: bool = False
    fsync: bool = True
    limits: Limits = field(default_factory=Limits)
    tree_caps: TreeCaps = field(default_factory=TreeCaps)
    workspace_quota: bool = True
    """Each workspace and grading copy a tmpfs of ``tree_caps.max_bytes`` in the sandbox (a disk
    quota); False binds them from the host, where their files can be watched while the agent
    runs, and an agent can fill the disk (the run's journal records it)."""
    clock: Clock | None = None
    """Wall clock and boot id the journal records (None: the system's); see :mod:`sealbench.clock`."""
    runs_index: Path | None = None
    """Data directory of the runs index (None: the user's; see :func:`runs_index.data_dir`)."""
    replay: Path | None = None
    """A bundle of this contract's run to replay (``run --replay``): the gateway answers every
    model call from its record and forwards nothing (see :mod:`sealbench.replay`)."""
    pack: Path | None = None
    """Where the contract's pack is now, when it moved from the contract's ``pack.path``
    (``run --pack``): checked against the locked digest, and recorded in the journal."""
    executor: Callable[[Settings, int], Executor] | None = None
    """Makes the executor the attempts run on, from the run's settings and ``jobs`` (None: the
    local thread pool, :class:`sealbench.executors.LocalExecutor`)."""
    ray: RayOptions | None = None
    """Run the attempts on a Ray cluster (``run --executor ray``; see :mod:`sealbench.ray_executor`)."""


@dataclass
class RunResult:
    """What a finished (or stopped) run left behind."""

    run_dir: Path
    outcomes: dict[str, str]
    complete: bool
    interrupted: bool = False
    interrupted_by: str | None = None
    """``"SIGINT"`` (Ctrl-C) or ``"SIGTERM"`` when a signal stopped the run."""
    contract_sha256: str | None = None
    scorecards: list[Scorecard] | None = None
    """Derived from the journal at the end of the run (not read back from scorecards.jsonl);
    None for the probe."""
    isolation: str | None = None
    """How the agent was isolated, over every start and resume (:func:`derive.isolation_of`)."""
    stories: dict[str, TaskStory] | None = None
    """Each task's story, told from the same verified read of the journal as ``scorecards``;
    None for the probe."""


def _prior_state(events: Sequence[ev.Line], budget: Budget,
                 boot_id: str | None) -> tuple[dict[str, Prior], list[Charge]]:
    """What each task had used when the run stopped, from the journal alone, and the time
    charges the resume must journal (:mod:`sealbench.charge`).

    An attempt that started and never finished is used; its work is discarded, since the
    workspace is materialised afresh on resume. ``boot_id`` is this process's boot.
    """
    out: dict[str, Prior] = {}
    for line in events:
        event, tid = line.event, line.task_id
        if tid is None:
            continue
        p = out.setdefault(tid, Prior())
        if isinstance(event, ev.TaskStarted):
            p.started = True
        elif isinstance(event, ev.AttemptStarted):
            p.attempts_started = max(p.attempts_started, event.attempt or 0)
            p.open_attempt = event.attempt
            p.interrupted = None
        elif isinstance(event, ev.AttemptFinished):
            p.open_attempt = None
            p.last_result = event.result
            if event.attempt == 1:
                p.first_attempt_passed = event.result == AttemptResult.PASS
        elif isinstance(event, ev.AttemptInterrupted):
            p.open_attempt = None
            p.last_result = None
            p.interrupted = event.reason or STOPPED_MID_ATTEMPT
            if event.attempt == 1:
                p.first_attempt_passed = False
        elif isinstance(event, ev.PatchCaptured):
            p.last_patch = event.patch_sha256
        elif isinstance(event, ev.HarnessFailed):
            p.harness_error = str(event.error)
        elif isinstance(event, ev.TaskFinished):
            p.finished = True
    for p in out.values():
        if p.open_attempt == 1:
            p.first_attempt_passed = False
        if p.open_attempt is not None:
            p.interrupted = STOPPED_MID_ATTEMPT  # journaled so by the resume
    used = time_used(events, boot_id=boot_id, cap_s=budget.wall_clock_s,
                     feedback_runs_code=budget.feedback == "visible_tests")
    for tid, seconds in used.used_s.items():
        out[tid].consumed_s = seconds
    return out, used.new_charges


def _header(contract: ScoringContract, pack: Pack, command_line: Sequence[str] | None, probe: bool,
            sandbox: Sandbox, agent: ResolvedAgent, *, jobs: int, workspace_quota: bool = True,
            moved_to: Path | None = None, replay_of: dict[str, Any] | None = None,
            environments: dict[str, str] | None = None) -> ev.RunStarted:
    """The run_started event of a new run (a resume journals it as run_resumed, with the run's nonce)."""
    provenance = pack.manifest.provenance
    return ev.RunStarted(
        contract_sha256=contract.contract_sha256, pack_sha256=pack.sealed_digest,
        argv=list(command_line) if command_line is not None else None,
        provenance=provenance.model_dump(mode="json") if provenance else None,
        run_id=contract.run_id, task_ids_count=len(contract.task_ids), probe=probe,
        heartbeat_ms=HEARTBEAT_MS, lease_ms=lease_for(jobs, many_above=YIELD_ABOVE_JOBS), run_nonce=secrets.token_hex(16),
        derivation_version=DERIVATION_VERSION, sealbench_version=__version__,
        python=platform.python_version(), platform=platform.platform(terse=True),
        sandbox=sandbox.describe(), agent=agent.describe(), continuation=secrets.token_hex(16),
        # Absent (as before quotas) when on: only the opt-out is recorded.
        **ev.present(workspace_quota=None if workspace_quota else False,
                     pack_path=str(moved_to) if moved_to is not None else None, replay_of=replay_of,
                     environments=environments or None))


def _locate_pack(contract: ScoringContract, contract_file: Path, moved_to: Path | None) -> Pack:
    """The contract's pack, at ``pack.path`` or where ``run --pack`` says it moved; its seal
    checked and its digest the locked one (a moved pack is the same pack, never an edit).

    Raises:
        RunRefusal: no pack there (naming the contract's pack.path and --pack), or another digest.
        PackError, VerificationFailed: the pack does not match its own seal.
    """
    assert contract.pack is not None
    where = moved_to.resolve() if moved_to is not None else pack_path(contract, contract_file)
    if not (where / "pack.json").is_file():
        if moved_to is not None:
            raise RunRefusal(f"--pack {moved_to}: no pack there (no pack.json)")
        raise RunRefusal(f"the contract's pack.path {contract.pack.path!r} names no pack ({where} has no pack.json); "
                         "if the pack moved, give its new folder with --pack PATH (its digest must be the locked one)")
    pack = check_pack(where, contract.task_ids)
    if pack.sealed_digest != contract.pack.sha256:
        at = f"the pack at --pack {moved_to}" if moved_to is not None else "the pack's digest"
        raise RunRefusal(f"{at} has digest {pack.sealed_digest}, not the contract's {contract.pack.sha256}"
                         if moved_to is not None else
                         f"{at} {pack.sealed_digest} differs from the contract's {contract.pack.sha256}")
    return pack


def write_derived(run_dir: Path, events: Iterable[ev.Line], task_ids: Sequence[str],
                  endpoints: Sequence[ModelEndpoint] = (), *, book: StoryBook | None = None) -> list[Scorecard]:
    """(Re)write scorecards.jsonl, events.json and traces/ from the journal's events, streaming;
    ``endpoints`` (the contract's) price the tasks' model calls; ``book``, when given, is told
    every event on the way (the run's summary explains its tasks from it).

    Returns the scorecards it wrote.
    """
    if book is not None:
        events = _told(events, book)
    cards: list[Scorecard] = []
    for rel, data in derive_iter(events, task_ids, endpoints):
        write_atomic(run_dir / rel, data, durable=False)
        if rel == "scorecards.jsonl":
            cards = [Scorecard.model_validate_json(line) for line in data.splitlines() if line]
    return cards


def _told(events: Iterable[ev.Line], book: StoryBook) -> Iterator[ev.Line]:
    for line in events:
        book.add(line)
        yield line


@dataclass(frozen=True)
class RunPlan:
    """Everything checked before a run's first journal line (made by :func:`_plan`, which only
    refuses: it writes nothing), and what :func:`_run` runs by."""

    contract_file: Path
    contract: ScoringContract
    budget: Budget
    pack: Pack
    agent: ResolvedAgent
    sandbox: Sandbox
    header: ev.RunStarted
    """The run_started line of a new run (a resume journals it as run_resumed, with the run's own nonce)."""
    replay: Record | None
    environments: Mapping[str, BuiltEnv]
    cluster: Cluster | None
    run_dir: Path
    base: Path
    """Where the journal and its files are: ``run_dir``, or ``run_dir/probe`` for the probe."""
    options: RunOptions
    probe: bool
    limits: Limits
    tree_caps: TreeCaps
    command_line: Sequence[str] | None
    model_keys: Mapping[str, str] | None = field(repr=False)
    """The keys of the model gateway this process runs; None when it runs none (no endpoints, a
    Python agent, or a cluster, whose nodes read their own); empty for a replay, which reads no key."""
    indexed: bool
    """The run is one of its run_id's in the runs index: not the probe, and not a replay (a
    reproduction, never a run of the run_id)."""


class _Session(NamedTuple):
    """The journal this process appends to, what it held when opened, and the header to journal."""

    journal: Journal
    events: list[ev.Line]
    prior: dict[str, Prior]
    charges: list[Charge]
    header: ev.RunStarted

    @property
    def resumed(self) -> bool:
        return bool(self.events)  # a journal killed before its first line is resumed as a fresh start


def _open_journal(plan: RunPlan, clock: Clock) -> _Session:
    """The journal to append to (created, or verified and reopened), what the tasks had used,
    the time charges a resume must journal, and the header to journal (a resume's carries the
    run's own nonce)."""
    opts, contract, header = plan.options, plan.contract, plan.header
    jpath = plan.base / "journal.jsonl"
    if opts.resume:
        journal, events = open_for_resume(jpath, fsync=opts.fsync, clock=clock)
        # A journal killed before its first event is resumed as a fresh start.
        first = events[0].event if events else header
        if not isinstance(first, ev.RunStarted):
            journal.close()
            raise RunRefusal(f"cannot resume: the journal's first event is {first.kind}, not the run's start")
        for what, had, has in (("contract_sha256", first.contract_sha256, header.contract_sha256),
                               ("pack_sha256", first.pack_sha256, header.pack_sha256)):
            if had != has:
                journal.close()
                raise RunRefusal(f"cannot resume: the journal's {what} {had} differs from {has}")
        if first.agent != header.agent:
            journal.close()
            raise RunRefusal("cannot resume with a different agent than the journal's")
        started_under = first.derivation()
        if started_under not in RESUMABLE:
            journal.close()
            raise RunRefusal(f"cannot resume: the run was started by a sealbench that derives its results under rules "
                             f"version {started_under!r}, and this one ({__version__}) derives under version "
                             f"{DERIVATION_VERSION}; resume it with the release that started it")
        if first.replay_of != header.replay_of:
            journal.close()
            raise RunRefusal("cannot resume: " + ("a replay continues only with --replay and the bundle it replays"
                                                  if first.replay_of is not None else
                                                  "a measured run cannot be continued as a replay"))
        if header.pack_path is not None and not vocabulary_of(started_under).moved_pack:
            journal.close()
            raise RunRefusal(f"cannot resume with --pack: the run was started under derivation version "
                             f"{started_under}, whose journal cannot record a moved pack; put the pack back at "
                             f"the contract's pack.path {contract.pack.path if contract.pack else None!r}")
        # The run's own nonce; None in journals made before nonces.
        # A run keeps the vocabulary it started under: before version 5 no header names its
        # continuation or where it moved from (the release that started it reads it whole).
        words = vocabulary_of(started_under).continuations
        header = header.model_copy(update=dict(run_nonce=first.run_nonce, derivation_version=started_under))
        if not words:
            header = type(header)(**{k: v for k, v in header.payload().items() if k not in ("kind", "continuation")})
        try:
            if plan.indexed:
                chain = tuple(line.event.continuation for line in events if isinstance(line.event, ev.RunHeader))
                moved_from = runs_index.continue_run(contract, plan.run_dir, header, chain, data=opts.runs_index)
                if moved_from is not None and words:
                    header = header.model_copy(update=dict(moved_from=moved_from))
        except BaseException:
            journal.close()
            raise
        prior, charges = _prior_state(events, plan.budget, clock.boot_id)
        return _Session(journal, events, prior, charges, header)
    if jpath.exists():
        raise RunRefusal(f"{jpath} exists; resume it with --resume or choose a new --out")
    if not plan.probe:
        write_atomic(plan.base / "scoring_contract.json", plan.contract_file.read_bytes())
    return _Session(Journal.create(jpath, fsync=opts.fsync, clock=clock), [], {}, [], header)


def _sweep_leftovers(run_dir: Path, base: Path, keep_work: bool) -> None:
    """What killed runs left in this run directory: half-written files, and their workspaces."""
    sweep_temp_files(run_dir, base, *(base / sub for sub in ("blobs", "patches", "traces")))
    if not keep_work:
        shutil.rmtree(base / "work", ignore_errors=True)


def execute(
    contract_file: Path,
    run_dir: Path,
    options: RunOptions | None = None,
    *,
    python_agent: PythonAgent | None = None,
    probe: bool = False,
    on_started: Callable[[Journal], None] | None = None,
    command_line: Sequence[str] | None = None,
) -> RunResult:
    """Run (or resume) a locked contract into ``run_dir``; the probe runs into ``run_dir/probe``.

    ``command_line`` is recorded in the journal as the exact command that started the run, and
    in the directory's writer lock, which is held until this returns.

    Raises:
        ContractError: unlocked or edited contract.
        PackError, VerificationFailed: the pack does not match its seal or the contract.
        RunRefusal: no sandbox, a journal that exists (without resume), a resume with a
            different contract, pack or agent; another process writing the directory; a run_id
            this machine already ran elsewhere (see :mod:`.runs_index`).
        RunsIndexError: the runs index cannot be written.
        StorageError: the run directory's storage failed; the run stopped with no task decided
            by the failure (resume once the storage works again).
        HarnessError: the journal could not be written, or changed under the run (every
            earlier event is kept).
    """
    # The sandbox mounts by absolute path; a relative --out must not reach it as such.
    plan = _plan(contract_file, run_dir.resolve(), options or RunOptions(), python_agent=python_agent, probe=probe,
                 command_line=command_line)
    try:
        with _claimed(plan):
            return _run(plan, on_started)
    finally:
        if plan.cluster is not None:
            plan.cluster.close()


def _plan(contract_file: Path, run_dir: Path, opts: RunOptions, *, python_agent: PythonAgent | None, probe: bool,
          command_line: Sequence[str] | None) -> RunPlan:
    """Every check a run passes before its first journal line, in the order it refuses; nothing
    is written (the cluster, when the run is on Ray, is connected last: close it).

    Raises:
        as :func:`execute`, before anything is written.
    """
    contract = load_contract(contract_file)
    require_locked(contract)
    assert contract.budget is not None and contract.agent is not None and contract.pack is not None
    # Opening the sandbox and checking that the agent's command starts in it mostly wait on
    # sandboxed children: they run beside the pack's check, and refuse in the same order.
    with _SandboxCheck(opts.sandbox, contract.agent.label, contract.agent.command, contract.agent.mounts,
                       python_agent) as early:
        pack = _locate_pack(contract, contract_file, opts.pack)
        missing = pytest_oracle.missing_pytest(pack.tasks[t].record.oracle_cmd for t in contract.task_ids)
        if missing is not None:
            raise RunRefusal(missing)
        agent = resolve_agent(contract.agent.label, contract.agent.command, python_agent)
        if contract.agent.preset is not None:
            from .presets import check_installed

            check_installed(contract)  # a preset's installed version must be the locked one, before any line
        record = _replay_record(contract, opts.replay, probe)
        from .environments import pins, require

        # Before any line: a task whose environment is missing or changed could only be a harness error.
        environments = require(pack, contract.task_ids)
        sandbox = early.sandbox()
        if environments and sandbox.kind == "none":
            raise RunRefusal("the tasks' environments link the repository into the sandbox's own root, which the none "
                             "sandbox does not have; run them in bubblewrap (--sandbox bubblewrap)")
        early.refuse_unless_starts()
    keys = None
    if contract.model_endpoints and record is None and opts.ray is None:  # on Ray each node reads its own
        from .gateway import read_keys

        keys = read_keys(contract, sandbox.kind)  # an unset key variable refuses before anything is written
    preflight.refuse_unreachable(contract.model_endpoints, replayed=record is not None)  # before any line
    limits, tree_caps = sized(contract.budget, opts.limits, opts.tree_caps)
    if sandbox.kind == "bubblewrap" and opts.ray is None:  # no tmpfs, and no quota, without it
        check_memory(max(1, opts.jobs), limits, tree_caps, quota=opts.workspace_quota)
    header = _header(contract, pack, command_line, probe, sandbox, agent, jobs=opts.jobs,
                     workspace_quota=opts.workspace_quota,
                     moved_to=pack.root if opts.pack is not None else None,
                     replay_of=record.replay_of() if record is not None else None,
                     environments=pins(environments))
    local_gateway = bool(contract.model_endpoints) and agent.kind == "command" and opts.ray is None
    plan = RunPlan(contract_file=contract_file, contract=contract, budget=contract.budget, pack=pack, agent=agent,
                   sandbox=sandbox, header=header, replay=record, environments=environments, cluster=None,
                   run_dir=run_dir, base=run_dir / "probe" if probe else run_dir, options=opts, probe=probe,
                   limits=limits, tree_caps=tree_caps, command_line=command_line,
                   model_keys=(keys or {}) if local_gateway else None, indexed=not probe and record is None)
    return plan if opts.ray is None else _on_cluster(plan, opts.ray)


def _on_cluster(plan: RunPlan, ray: RayOptions) -> RunPlan:
    """The plan with its cluster connected, before any line: a node that cannot run the attempts
    refuses the run, naming why.

    Raises:
        RunRefusal: a replay (its record answers the calls on this machine only), or as
            :func:`ray_executor.connect`.
    """
    if plan.replay is not None:
        raise RunRefusal("--replay runs on this machine only (the record answers the calls here); "
                         "drop --executor ray")
    from .ray_executor import connect, node_setup

    opts = plan.options
    setup = node_setup(plan.contract, plan.pack, plan.sandbox, plan.agent, plan.environments, plan.limits,
                       plan.tree_caps, workspace_quota=opts.workspace_quota, jobs=opts.jobs)
    return dataclasses.replace(plan, cluster=connect(ray, setup, plan.pack.root))


def _replay_record(contract: ScoringContract, replay: Path | None, probe: bool) -> Record | None:
    """The record of the bundle ``run --replay`` names, whose calls answer the run's (None: no replay).

    Raises:
        RunRefusal: the probe, a contract without model endpoints, or as :func:`replay.load_record`.
    """
    if replay is None:
        return None
    from .replay import load_record

    if probe:
        raise RunRefusal("the narration probe is not replayed; replay the run itself (run --replay)")
    if not contract.model_endpoints:
        raise RunRefusal("--replay: the contract declares no model endpoints, so there is nothing to replay")
    return load_record(replay, contract)


class _SandboxCheck:
    """:func:`open_sandbox` and the agent command's preflight, in a thread of their own (joined
    when the ``with`` block ends)."""

    def __init__(self, requested: str, label: str, command: str, mounts: Sequence[str],
                 python_agent: PythonAgent | None) -> None:
        self._requested, self._label, self._command, self._mounts = requested, label, command, mounts
        self._python_agent = python_agent
        self._sandbox: Sandbox | None = None
        self._open_error: BaseException | None = None
        self._preflight_error: BaseException | None = None
        self._thread = threading.Thread(target=self._check, name="sealbench-sandbox-check", daemon=True)
        self._thread.start()

    def __enter__(self) -> _SandboxCheck:
        return self

    def __exit__(self, *exc: object) -> None:
        self.join()

    def _check(self) -> None:
        try:
            self._sandbox = open_sandbox(self._requested)
        except BaseException as e:  # re-raised in the caller's thread, in the caller's order
            self._open_error = e
            return
        try:
            kind = resolve_agent(self._label, self._command, self._python_agent).kind
        except BaseException:
            return  # the run refuses the agent itself, in its own order
        if kind != "command":
            return
        try:
            # Inside the sandbox's own view, before any line: a program or script it cannot see
            # would make every attempt a harness error and spend the run_id (see preflight).
            preflight.refuse_unless_starts(self._command, self._mounts, self._sandbox, command_path())
        except BaseException as e:
            self._preflight_error = e

    def join(self) -> None:
        self._thread.join()

    def sandbox(self) -> Sandbox:
        """The opened sandbox.

        Raises:
            RunRefusal, UsageError: as :func:`open_sandbox`.
        """
        self.join()
        if self._open_error is not None:
            raise self._open_error
        assert self._sandbox is not None
        return self._sandbox

    def refuse_unless_starts(self) -> None:
        """Raises what :func:`preflight.refuse_unless_starts` raised for a command agent."""
        self.join()
        if self._preflight_error is not None:
            raise self._preflight_error


@contextlib.contextmanager
def _claimed(plan: RunPlan) -> Iterator[None]:
    """The run claimed in the runs index (a new run), its directory's writer lock held, and what
    killed runs left there swept.

    Raises:
        RunRefusal: as :func:`runs_index.claim_run` and :func:`hold_writer`.
        StorageError: the run's storage failed (here or in the ``with`` block).
    """
    opts = plan.options
    if plan.indexed and not (opts.resume or (plan.base / "journal.jsonl").exists()):
        # Before anything is written, the directory and its lock included: a second run of this
        # run_id is refused with nothing left behind.
        runs_index.claim_run(plan.contract, plan.run_dir, plan.header, data=opts.runs_index)
    try:
        with hold_writer(plan.base, plan.command_line):
            _sweep_leftovers(plan.run_dir, plan.base, opts.keep_work)
            yield
    except OSError as e:
        failure = storage_failure(e)
        if failure is None:
            raise
        raise StorageError(f"the run's storage failed: {describe_storage_failure(failure)}") from e


def _run(plan: RunPlan, on_started: Callable[[Journal], None] | None) -> RunResult:
    """Journal the run (or its resume), drive its tasks to their ends through the coordinator,
    and derive its files from the journal."""
    opts = plan.options
    session = _open(plan, opts.clock or Clock())
    gateway = _gateway(plan, session)
    settings = _settings(plan, session.header, gateway)
    executor = _executor(plan, settings, session)
    requests = Requests()
    coordinator = Coordinator(journal=session.journal, executor=executor, settings=settings, jobs=opts.jobs,
                              requests=requests, derivation_version=session.header.derivation())
    stopped_by: str | None = None
    # Started once the session's first line is written: a beat before it would be the journal's
    # first line (the executor's set-up, a cluster's begin, may outlast the beat's interval).
    heartbeat = Heartbeat(session.journal,
                          lease_ms=session.header.lease_ms or lease_for(opts.jobs, many_above=YIELD_ABOVE_JOBS))
    try:
        requests.__enter__()  # from the first journal line on, a signal is a request, never an exception
        if gateway is not None:
            gateway.start()
        _begin(plan, session, coordinator, heartbeat)
        if on_started is not None:
            on_started(session.journal)
        todo = [plan.pack.tasks[t] for t in plan.contract.task_ids if not session.prior.get(t, Prior()).finished]
        n = len(plan.contract.task_ids)
        progress = Progress(n, n - len(todo), opts.progress, "probe" if plan.probe else str(plan.contract.run_id))
        try:
            stopped_by = coordinator.drive(todo, session.prior, progress)
        finally:
            progress.close()
        complete = coordinator.complete(stopped_by)
        if complete and gateway is not None:
            gateway.close()  # its last lines, if any, before the end: nothing is written after run_finished
        if complete:
            coordinator.finish_run()
    except JournalStopped as e:
        if coordinator.storage_failed and not isinstance(e.error, StorageError):
            raise StorageError(_storage_message(coordinator.storage_failed)) from None
        raise e.error from None
    finally:
        requests.__exit__()
        executor.close()
        if not executor.busy:
            heartbeat.stop()
        # else (an interrupt while agents still ran): the heartbeat stays, finds the journal
        # closed, and its watchdog ends the process within the lease, so none runs unaccounted.
        if gateway is not None:
            gateway.close()
        session.journal.close()
        if not opts.keep_work:
            with contextlib.suppress(OSError):
                remove_tree(plan.base / "work")
    if coordinator.storage_failed:
        raise StorageError(_storage_message(coordinator.storage_failed))
    return _result(plan, session, coordinator.outcomes, complete=complete, stopped_by=stopped_by)


def _open(plan: RunPlan, clock: Clock) -> _Session:
    """The run's files' folders made and its journal opened; a resumed run's environments
    checked against the pins it started with.

    Raises:
        RunRefusal: as :func:`_open_journal` and :func:`environments.refuse_unpinned`.
    """
    for sub in ("blobs", "patches", "traces"):
        (plan.base / sub).mkdir(exist_ok=True)
    session = _open_journal(plan, clock)
    if session.events and isinstance(session.events[0].event, ev.RunStarted):
        from .environments import refuse_unpinned

        try:  # the environments this run started with, not merely built ones (checked by execute)
            refuse_unpinned(plan.pack, plan.environments, session.events[0].event.environments or {})
        except BaseException:
            session.journal.close()
            raise
    return session


def _calls_made(events: Iterable[ev.Line]) -> dict[str, list[ev.ModelCall | ev.ModelCallStarted]]:
    """Each task's model calls journaled before this session (a resumed task's caps count them)."""
    made: dict[str, list[ev.ModelCall | ev.ModelCallStarted]] = {}
    for line in events:
        if isinstance(line.event, ev.ModelCall | ev.ModelCallStarted) and line.event.task_id is not None:
            made.setdefault(line.event.task_id, []).append(line.event)
    return made


def _gateway(plan: RunPlan, session: _Session) -> Gateway | None:
    """The model gateway this process runs, if any; it answers from the replayed record when
    the plan has one, and forwards with the plan's keys otherwise.

    Started inside the run's ``try``, closed before the journal: its model_call lines are
    appended (durably, under the journal's lock) from its own writer thread, each before its
    attempt's agent_finished, which the coordinator writes once the attempt returns.
    """
    if plan.model_keys is None:
        return None
    from .gateway import Gateway, ledger_of

    endpoints = plan.contract.model_endpoints or []
    return Gateway(endpoints, plan.model_keys, session.journal.append, lambda data: store_bytes(plan.base, data),
                   budget=plan.budget,
                   used={tid: ledger_of(calls, endpoints) for tid, calls in _calls_made(session.events).items()},
                   replay=plan.replay, derivation_version=session.header.derivation())


def _settings(plan: RunPlan, header: ev.RunStarted, gateway: Gateway | None) -> Settings:
    template = None
    if plan.probe:
        template = (Path(__file__).parent / "prompts" / "narration_probe.txt").read_text(encoding="utf-8")
    opts = plan.options
    return Settings(contract=plan.contract, budget=plan.budget, pack_root=plan.pack.root, run_dir=plan.base,
                    sandbox=plan.sandbox, agent=plan.agent, limits=plan.limits, tree_caps=plan.tree_caps,
                    workspace_quota=opts.workspace_quota, keep_work=opts.keep_work, probe=plan.probe,
                    template_override=template, gateway=gateway, derivation_version=header.derivation(),
                    environments=dict(plan.environments), yield_cpu=opts.jobs > YIELD_ABOVE_JOBS)


def _executor(plan: RunPlan, settings: Settings, session: _Session) -> Executor:
    """The executor the attempts run on: the plan's cluster's, or the options' (by default the
    local thread pool, :class:`sealbench.executors.LocalExecutor`)."""
    if plan.cluster is None:
        return (plan.options.executor or LocalExecutor)(settings, plan.options.jobs)
    from .ray_executor import RunPart

    part = RunPart(probe=plan.probe, template_override=settings.template_override,
                   derivation_version=settings.derivation_version, yield_cpu=settings.yield_cpu,
                   model_calls={tid: tuple(c) for tid, c in _calls_made(session.events).items()})
    return plan.cluster.executor(settings, plan.options.jobs, part, record=session.journal.append)


def _begin(plan: RunPlan, session: _Session, coordinator: Coordinator, heartbeat: Heartbeat) -> None:
    """The session's first lines: the run's start, or its resume and what the resume settles."""
    coordinator.begin(session.header, resumed=session.resumed)
    heartbeat.start()
    if not session.resumed:
        if plan.indexed:
            runs_index.journal_started(plan.contract, plan.run_dir, data=plan.options.runs_index)
        return
    if plan.indexed:
        runs_index.continuation_written(plan.contract, plan.run_dir, session.header, data=plan.options.runs_index)
    coordinator.settle(session.prior, session.charges)
    if not plan.probe:
        _restore_patches(plan.base, session.prior)


def _result(plan: RunPlan, session: _Session, outcomes: dict[str, str], *, complete: bool,
            stopped_by: str | None) -> RunResult:
    """The run's files derived from its verified journal, and what it left behind (recorded in
    the runs index)."""
    jpath = plan.base / "journal.jsonl"
    contract = plan.contract
    cards = book = None
    if plan.probe:
        write_probe_summary(plan.run_dir, iter_verified(jpath), contract.task_ids)
    else:
        book = StoryBook(contract.task_ids)
        cards = write_derived(plan.base, iter_verified(jpath), contract.task_ids, contract.model_endpoints or (),
                              book=book)
    headers = [line.event for line in session.events if isinstance(line.event, ev.RunHeader)]
    result = RunResult(run_dir=plan.run_dir, outcomes=outcomes, complete=complete, interrupted=stopped_by is not None,
                       interrupted_by=stopped_by, contract_sha256=contract.contract_sha256, scorecards=cards,
                       isolation=isolation_of([*headers, session.header]),
                       stories=book.tasks if book is not None else None)
    if plan.indexed:
        runs_index.record_end(contract, result, data=plan.options.runs_index)
    return result


def _storage_message(storage_failed: Sequence[str]) -> str:
    return (f"the run stopped on a {storage_failed[0]}; no task was decided by it (the attempts it "
            f"stopped are used, as a crash would use them)")


def _restore_patches(base: Path, prior: dict[str, Prior]) -> None:
    """patches/ copies a finished task's patch blob; one a storage failure kept from being
    written is written now."""
    for tid, p in prior.items():
        if p.finished and p.last_patch:
            path = base / "patches" / f"{tid}.patch"
            blob = base / "blobs" / p.last_patch.removeprefix("sha256:")
            if not path.exists() and blob.is_file():
                write_atomic(path, blob.read_bytes(), durable=False)


def write_probe_summary(run_dir: Path, events: Iterable[ev.Line], task_ids: Sequence[str]) -> None:
    write_atomic(run_dir / "narration_probe.json", probe_bytes(probe_summary(events, task_ids)), durable=False)
