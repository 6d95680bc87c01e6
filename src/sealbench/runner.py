"""The runner: every task of a locked contract, sandboxed, capped, graded by hidden tests.

For each task of the denominator, until a pass, max_attempts or the wall-clock cap:
materialise the workspace, run one agent attempt in the sandbox with the time that
remains, capture the patch, grade it in a pristine copy (patch applied, forbidden paths
checked, hidden tests verified and overlaid, oracle run in the sandbox), and journal every
step before acting on it. The journal is the only source of truth: scorecards, traces and
events.json are derived from it (:mod:`sealbench.derive`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from xml.parsers import expat

from . import __version__, pytest_oracle, runs_index
from . import events as ev
from . import gateway as model_gateway
from .agentfs import TreeCaps, TreeRejected, read_regular, remove_entry, remove_tree, trace_digest
from .agents import PythonAgent, ResolvedAgent, render_argv, resolve_agent
from .attempt import PROBE_PASS, AgentEnd, Grading, classify, final_outcome, must_grade
from .charge import Charge, time_used
from .clock import HEARTBEAT_MS, LEASE_MS, Clock, Heartbeat
from .contract import flagged_pass_counts, load_contract, pack_path, require_locked
from .derive import DERIVATION_VERSION, derive_iter, isolation_of, probe_bytes, probe_summary
from .digest import same_digest, sha256_bytes, tree_digest
from .errors import (
    HarnessError,
    RunRefusal,
    StorageError,
    Terminated,
    describe_storage_failure,
    storage_failure,
)
from .files import write_atomic
from .formats import Budget, ModelEndpoint, Outcome, Scorecard, ScoringContract
from .function_oracle import is_oracle_cmd
from .journal import Journal, iter_verified, open_for_resume
from .lock import hold_writer
from .pack import Pack, Task, check_pack
from .presets import check_installed
from .sandbox import Limits, Prepared, Sandbox, SandboxResult, SandboxSpec, open_sandbox
from .scratch import sweep_temp_files
from .workspace import META_DIR, TaskWorkspace, apply_patch, copy_tree, forbidden_hits, overlay

JUNIT_REPORT_CAP = 16 * 2**20

JUNIT_MAX_DEPTH = 64

FEEDBACK_CAP = 16 * 1024

PRIVATE_CAPS = TreeCaps(max_entries=1000, max_bytes=4 * JUNIT_REPORT_CAP)
"""Quota and caps of a harness-private folder bound writable into the grading sandbox (the
guarded pytest's report and record): the code under test can write there too."""
_LOW_SPACE = 1 << 20


class JournalStopped(Exception):
    """Internal: the journal could not be written; the run must stop at once."""

    def __init__(self, error: HarnessError | StorageError) -> None:
        super().__init__(str(error))
        self.error = error


class _Stopped(Exception):
    """Internal: the runner stopped the attempt under way (a second interrupt, a storage failure)."""


class _Running:
    """How many tasks are inside their attempt loop, where agents, oracles and visible tests run."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self._count += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._count -= 1

    @property
    def idle(self) -> bool:
        return self._count == 0


def default_jobs() -> int:
    """Agents mostly wait (on a model, on tests): more tasks than cores keeps them busy; but no
    more than the machine's memory can hold at their default quotas (see :func:`memory_per_job`)."""
    by_cores = max(2, min(16, 4 * (os.cpu_count() or 1)))
    total = _memory_total()
    if total is None:
        return by_cores
    return max(1, min(by_cores, int(total * MEMORY_SHARE) // memory_per_job(Limits(), TreeCaps())))


MEMORY_SHARE = 0.75
"""The share of the machine's memory the running tasks' tmpfs mounts may hold at most."""


def memory_per_job(limits: Limits, caps: TreeCaps, *, quota: bool = True) -> int:
    """Bytes of memory one running task's sandbox can hold in tmpfs pages at most: its workspace
    (or grading copy) quota, the harness-private folder of a grading, /tmp and /dev/shm.

    tmpfs pages are memory (swap aside): an agent that fills its quota holds that much until its
    attempt ends; one that writes nothing costs nothing.
    """
    quotas = caps.max_bytes + PRIVATE_CAPS.max_bytes if quota else 0  # none with --no-workspace-quota
    return quotas + 2 * limits.tmp_bytes


def _memory_total() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(jobs: int, limits: Limits, caps: TreeCaps, *, quota: bool = True) -> None:
    """Refuse a ``--jobs`` whose sandboxes could fill more than :data:`MEMORY_SHARE` of the
    machine's memory with their tmpfs quotas: hostile agents that all fill theirs would take
    the host down, not only their own runs.

    Raises:
        RunRefusal: the quotas of ``jobs`` tasks at once do not fit.
    """
    total = _memory_total()
    per_job = memory_per_job(limits, caps, quota=quota)
    if total is None or jobs * per_job <= total * MEMORY_SHARE:
        return
    gib = 2**30
    fits = int(total * MEMORY_SHARE) // per_job
    raise RunRefusal(
        f"--jobs {jobs} lets the running sandboxes hold up to {jobs * per_job / gib:.1f} GiB of memory in their "
        f"size-capped tmpfs mounts (per task: a workspace quota of {caps.max_bytes / gib:.2f} GiB, /tmp and "
        f"/dev/shm of {limits.tmp_bytes / gib:.2f} GiB each, {PRIVATE_CAPS.max_bytes >> 20} MiB of harness files), "
        f"more than {MEMORY_SHARE:.0%} of this machine's {total / gib:.1f} GiB; "
        + (f"use --jobs {fits} or fewer" if fits else "lower the workspace cap (TreeCaps.max_bytes)")
    )


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


@dataclass
class _Ctx:
    contract: ScoringContract
    budget: Budget
    pack: Pack
    run_dir: Path
    journal: Journal
    agent: ResolvedAgent
    sandbox: Sandbox
    options: RunOptions
    stop: threading.Event
    slots: threading.Semaphore
    setups: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(os.cpu_count() or 1))
    probe: bool = False
    template_override: str | None = None
    running: _Running = field(default_factory=_Running)
    abort: threading.Event = field(default_factory=threading.Event)
    """Set once running attempts must stop now (a second interrupt, a storage failure)."""
    live: set[Prepared] = field(default_factory=set)
    live_lock: threading.Lock = field(default_factory=threading.Lock)
    abort_reason: list[str] = field(default_factory=list)
    storage_failed: list[str] = field(default_factory=list)
    """What failed, when the run's own storage did (first failure first)."""
    gateway: model_gateway.Gateway | None = None
    """The model gateway, when the contract declares model endpoints and the agent is a command."""

    def j(self, event: ev.Event) -> None:
        try:
            self.journal.append(event)
        except StorageError as e:
            self.storage_failure(f"storage failure: {e}")
            raise JournalStopped(e) from None
        except HarnessError as e:
            raise JournalStopped(e) from None

    def storage_failure(self, why: str) -> None:
        """The run's own storage failed: stop everything now; nothing more is decided."""
        self.storage_failed.append(why)
        self.stop_now(why)

    def stop_now(self, reason: str) -> None:
        """Stop every task, and kill the sandboxed commands running now (their attempts are used)."""
        self.stop.set()
        with self.live_lock:
            self.abort_reason.append(reason)
            self.abort.set()
            live = list(self.live)
        for prepared in live:
            prepared.kill()

    def start(self, prepared: Prepared, timeout_s: float | None = None) -> SandboxResult:
        """Start a prepared command where :meth:`stop_now` can reach it.

        Raises:
            _Stopped: the run is stopping now (before or while the command ran).
        """
        with self.live_lock:
            if self.abort.is_set():
                raise _Stopped
            self.live.add(prepared)
        try:
            result = prepared.start(timeout_s)
        except HarnessError:
            if self.abort.is_set():
                raise _Stopped from None
            raise
        finally:
            with self.live_lock:
                self.live.discard(prepared)
        if self.abort.is_set():
            raise _Stopped
        return result


def _env(ctx: _Ctx, task: Task, ws: Path, attempt: int, prompt_file: Path | None) -> dict[str, str]:
    seed = task.record.seed if task.record.seed is not None else ctx.contract.seed
    bin_dirs = [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    return {
        "PATH": ":".join(dict.fromkeys(bin_dirs)),
        "HOME": "/tmp/home",
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": str(seed),
        "PYTHONDONTWRITEBYTECODE": "1",
        "SEALBENCH_SEED": str(seed),
        "SEALBENCH_TASK_ID": task.task_id,
        "SEALBENCH_ATTEMPT": str(attempt),
        "SEALBENCH_MAX_ATTEMPTS": str(1 if ctx.probe else ctx.budget.max_attempts),
        "SEALBENCH_WORKSPACE": str(ws),
        "SEALBENCH_PROMPT_FILE": str(prompt_file) if prompt_file is not None else "",
        "SEALBENCH_TRACE_DIR": str(ws / META_DIR / "trace"),
    }


def render_prompt(template: str, task: Task, attempt: int, max_attempts: int, feedback: str) -> str:
    """Fill a frozen template in one pass: {task_prompt} {task_id} {attempt} {max_attempts} {feedback}."""
    values = {
        "task_prompt": task.prompt.rstrip("\n"),
        "task_id": task.task_id,
        "attempt": str(attempt),
        "max_attempts": str(max_attempts),
        "feedback": feedback,
    }
    return re.sub(r"\{(" + "|".join(values) + r")\}", lambda m: values[m.group(1)], template)


def _store_bytes(run_dir: Path, data: bytes) -> str:
    """Keep ``data`` in blobs/ under its digest, durably (before the journal event naming it)."""
    digest = sha256_bytes(data)
    dest = run_dir / "blobs" / digest.removeprefix("sha256:")
    if not dest.exists():
        write_atomic(dest, data)
    return digest


def _spec(ctx: _Ctx, argv: Sequence[str], workdir: Path, env: dict[str, str], timeout: float,
          readonly: Sequence[Path] = (), writable: Sequence[Path] = ()) -> SandboxSpec:
    quota = ctx.options.workspace_quota
    # Output is kept in memory (capped by the limits) and stored once, under its digest. The
    # workdir (workspace or grading copy) gets its disk quota: TreeCaps.max_bytes, whose write
    # past it fails inside the sandbox rather than on the host's disk.
    return SandboxSpec(argv=tuple(argv), workdir=workdir, env=env, timeout_s=max(0.05, timeout),
                       stdout_path=None, stderr_path=None, limits=ctx.options.limits,
                       readonly_paths=tuple(readonly), writable_paths=tuple(writable),
                       workdir_caps=ctx.options.tree_caps if quota else None,
                       writable_caps=PRIVATE_CAPS if quota else None)


def _facts(ctx: _Ctx, res: SandboxResult) -> dict[str, Any]:
    assert res.stdout is not None and res.stderr is not None  # specs from _spec keep output in memory
    rejected = {} if res.workdir_rejected is None else {"workdir_rejected": res.workdir_rejected}
    return {
        **rejected,
        "exit_code": res.exit_code,
        "signal": res.signal,
        "timed_out": res.timed_out,
        "elapsed_ms": int(res.elapsed_s * 1000),
        "stdout": _store_bytes(ctx.run_dir, res.stdout),
        "stderr": _store_bytes(ctx.run_dir, res.stderr),
        "stdout_bytes": res.stdout_bytes,
        "stderr_bytes": res.stderr_bytes,
        "stdout_truncated": res.stdout_truncated,
        "stderr_truncated": res.stderr_truncated,
    }


def _sandboxed(ctx: _Ctx, argv: Sequence[str], workdir: Path, env: dict[str, str],
               timeout: float, readonly: Sequence[Path] = (),
               writable: Sequence[Path] = ()) -> tuple[SandboxResult, dict[str, Any]]:
    prepared = ctx.sandbox.prepare(_spec(ctx, argv, workdir, env, timeout, readonly, writable))
    try:
        res = ctx.start(prepared)
    finally:
        prepared.close()
    return res, _facts(ctx, res)


@dataclass
class _Ready:
    """One attempt's prompt written and, for a command agent, its sandbox set up and waiting."""

    attempt: int
    prompt: str
    prompt_file: Path
    prepared: Prepared | None


def _ready_attempt(ctx: _Ctx, task: Task, tw: TaskWorkspace, attempt: int, max_attempts: int,
                   feedback: str) -> _Ready:
    template = ctx.template_override or task.template
    prompt = render_prompt(template, task, attempt, max_attempts, feedback)
    # Host-private and bound read-only: never a path inside the workspace, where a link the
    # previous attempt planted would turn this write into a write anywhere on the host.
    prompt_file = tw.private / "prompt.md"
    if attempt > 1:
        tw.reset_private()
    write_atomic(prompt_file, prompt, durable=False)
    if attempt > 1:
        tw.reset_meta()
    prepared = None
    agent = ctx.agent
    if agent.kind == "command":
        values = {"prompt_file": str(prompt_file), "workspace": str(tw.ws), "attempt": str(attempt),
                  "max_attempts": str(max_attempts), "task_id": task.task_id}
        mounts = [Path(m) for m in (ctx.contract.agent.mounts if ctx.contract.agent else [])]
        env = _env(ctx, task, tw.ws, attempt, prompt_file)
        # A model-backed agent: a token, the gateway's URLs and a relay into this sandbox alone,
        # closed (its calls journaled) when the prepared sandbox is closed, before agent_finished.
        access = ctx.gateway.open_attempt(task.task_id, attempt) if ctx.gateway is not None else None
        try:
            # The deadline is set when the attempt starts, from the time that remains then.
            spec = _spec(ctx, render_argv(agent.command, values), tw.ws, {**env, **(access.env if access else {})},
                         ctx.budget.wall_clock_s, [*mounts, tw.private])
            prepared = ctx.sandbox.prepare(replace(spec, relay=access.relay) if access else spec)
        except BaseException:
            if access is not None:
                access.close()
            raise
        if access is not None:
            prepared = access.guard(prepared)
    return _Ready(attempt, prompt, prompt_file, prepared)


def _run_agent(ctx: _Ctx, task: Task, tw: TaskWorkspace, ready: _Ready, deadline: float) -> dict[str, Any]:
    agent = ctx.agent
    attempt = ready.attempt
    remaining = deadline - time.monotonic()  # set-up time, if any, came out of it
    if ready.prepared is not None:
        prepared = ready.prepared
        try:
            res = ctx.start(prepared, max(0.0, remaining))
        finally:
            prepared.close()
        return _facts(ctx, res)
    started = time.monotonic()
    if agent.kind == "builtin":
        assert agent.builtin is not None
        action = agent.builtin(task, tw.ws, attempt)
        return {"exit_code": 0, "timed_out": False, "elapsed_ms": int((time.monotonic() - started) * 1000),
                "action": action}
    assert agent.callable is not None
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["action"] = agent.callable(task.record.model_dump(mode="json"), tw.ws, attempt)  # type: ignore[misc]
        except Exception as e:  # the agent's failure, recorded as its exit
            box["error"] = f"{type(e).__name__}: {e}"

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    # An in-process agent cannot be killed: stopping now abandons it (it dies with the process).
    end = time.monotonic() + max(0.0, remaining)
    while worker.is_alive() and time.monotonic() < end:
        worker.join(min(0.1, max(0.0, end - time.monotonic())))
        if ctx.abort.is_set():
            raise _Stopped
    timed_out = worker.is_alive()
    facts: dict[str, Any] = {"exit_code": None if timed_out else (1 if "error" in box else 0), "timed_out": timed_out,
             "elapsed_ms": int((time.monotonic() - started) * 1000)}
    if "error" in box:
        facts["error"] = box["error"]
    try:
        json.dumps(box.get("action"))
        facts["action"] = box.get("action")
    except (TypeError, ValueError):
        facts["action"] = repr(box.get("action"))
    return facts


def _wait_gap(ctx: _Ctx, since: float, gap_s: float, deadline: float) -> None:
    """Wait until a whole multiple of ``gap_s`` has passed since ``since`` (or the deadline), so
    the next attempt cannot time the grading of the previous one (it sees at most how many
    whole gaps it took)."""
    elapsed = time.monotonic() - since
    until = since + max(1, math.ceil(elapsed / gap_s)) * gap_s
    ctx.stop.wait(max(0.0, min(until, deadline) - time.monotonic()))


def _transcript(ctx: _Ctx, tw: TaskWorkspace) -> dict[str, Any]:
    """The digest of the agent's trace folder, read without following it anywhere."""
    try:
        # From the workspace down: .sealbench/ itself may be the agent's link to a host folder.
        return {"transcript": trace_digest(tw.ws, ctx.options.tree_caps, below=(META_DIR, "trace"))}
    except TreeRejected as e:
        return {"transcript": None, "transcript_rejected": e.reason}


@dataclass
class _Capture:
    changed: list[str]
    patch: bytes
    rejected: str | None = None
    timed_out: bool = False


def _capture(tw: TaskWorkspace, deadline: float) -> _Capture:
    """What the attempt changed, and its patch; a tree over the caps is refused, with why."""
    try:
        changed = tw.changes()
        patch = tw.capture_patch(deadline - time.monotonic()) if changed else b""
    except TreeRejected as e:
        return _Capture([], b"", rejected=e.reason)
    except subprocess.TimeoutExpired:
        return _Capture([], b"", timed_out=True)
    return _Capture(changed, patch)


def _junit_verdict(grade_dir: Path, rel: str, required: Sequence[str]) -> dict[str, Any]:
    """Read a JUnit XML report: counts, failures and whether every required test passed.

    The report is in a tree the code under test could write: it is read without following a
    link on any component, only as a regular file, and only up to a size cap.
    """
    data = read_regular(grade_dir, rel, JUNIT_REPORT_CAP)
    if data is None:
        return {"ok": False, "why": "no JUnit report written (or not a regular file within the size cap)"}
    try:
        cases = _junit_cases(data)
    except (expat.ExpatError, ValueError) as e:
        return {"ok": False, "why": f"unreadable JUnit report: {e}"}
    passed: set[str] = set()
    ran = failed = 0
    for case in cases:
        name, cls = case.name, case.cls
        if "skipped" in case.marks:
            continue
        ran += 1
        if "failure" in case.marks or "error" in case.marks:
            failed += 1
            continue
        passed.update({name, f"{cls}::{name}", f"{cls}.{name}"})
    missing = [t for t in required if t not in passed]
    ok = ran > 0 and failed == 0 and not missing
    why = None if ok else ("no test ran" if ran == 0 else f"{failed} failed" if failed else f"not passed: {missing[:5]}")
    return {"ok": ok, "ran": ran, "failed": failed, "missing_required": missing, "why": why}


@dataclass
class _Case:
    name: str
    cls: str
    marks: set[str] = field(default_factory=set)


def _junit_cases(data: bytes) -> list[_Case]:
    """Every ``testcase`` element of a JUnit report (at any depth), with which of ``skipped``,
    ``failure`` and ``error`` it has as direct children.

    Read as a stream, never built as a tree, and refused past :data:`JUNIT_MAX_DEPTH` levels:
    the code under test can write the report, and a tree of millions of nested elements
    within the size cap cost the runner 700 MB.

    Raises:
        expat.ExpatError: the report is not well-formed XML.
        ValueError: it nests deeper than the cap.
    """
    cases: list[_Case] = []
    open_elements: list[_Case | None] = []
    # The namespace separator of ElementTree: a namespaced testcase is not a testcase there either.
    parser = expat.ParserCreate(namespace_separator="}")

    def start(tag: str, attrs: dict[str, str]) -> None:
        if len(open_elements) >= JUNIT_MAX_DEPTH:
            raise ValueError(f"elements nested deeper than {JUNIT_MAX_DEPTH}")
        parent = open_elements[-1] if open_elements else None
        if parent is not None and tag in ("skipped", "failure", "error"):
            parent.marks.add(tag)
        case = _Case(attrs.get("name", ""), attrs.get("classname", "")) if tag == "testcase" else None
        if case is not None:
            cases.append(case)
        open_elements.append(case)

    def end(tag: str) -> None:
        open_elements.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.Parse(data, True)
    return cases


def _remove_planted_report(grade_dir: Path, rel: str) -> None:
    """Only the oracle may write its JUnit report: one the agent's patch left would pass a run
    whose tests never reported (a candidate calling os._exit(0) while pytest imports it).
    Removed without following a link the patch put on the way."""
    remove_entry(grade_dir, rel)


def _grade(ctx: _Ctx, task: Task, tw: TaskWorkspace, attempt: int, patch: bytes, changed: list[str],
           remaining: float) -> dict[str, Any]:
    """Grade one attempt in a new directory; never in the agent's."""
    hidden_paths = task.hidden_paths()
    forbidden = forbidden_hits(changed, ctx.contract.forbidden_paths or [], hidden_paths)
    grade_dir = tw.root / f"grade-{attempt}"
    remove_tree(grade_dir)
    copy_tree(task.workspace, grade_dir)
    applies, apply_msg = apply_patch(grade_dir, patch, timeout_s=remaining)
    result: dict[str, Any] = {"patch_applies_clean": applies, "forbidden": forbidden,
                              "no_forbidden_path": not forbidden, "tests_green": False}
    if apply_msg:
        result["apply_message"] = apply_msg[:2000]
    if applies and not forbidden:
        # The pack could change under a long run: grade only against the sealed tests.
        if not same_digest(task.record.hidden_tests_sha256, tree_digest(task.hidden, ctx.pack.root)):
            raise HarnessError(f"{task.task_id}: hidden tests no longer match hidden_tests_sha256")
        overlay(task.hidden, grade_dir)
        if pytest_oracle.is_guarded(task.record.oracle_cmd):
            green = _grade_guarded(ctx, task, tw, attempt, changed, grade_dir, remaining, result)
        else:
            if task.record.junit_xml:
                _remove_planted_report(grade_dir, task.record.junit_xml)
            env = _env(ctx, task, grade_dir, attempt, None)
            spec = _spec(ctx, task.record.oracle_cmd, grade_dir, env, remaining)
            if is_oracle_cmd(task.record.oracle_cmd):
                # The trusted function-level oracle: its package bound read-only (an editable install
                # lives outside the Python prefix), and run as the sandbox's pid 1, which nothing
                # the candidate starts can signal or rewrite (see sealbench.function_oracle).
                spec = replace(spec, readonly_paths=(Path(__file__).resolve().parent,), as_pid_1=True)
            res = ctx.sandbox.run(spec)
            facts = _facts(ctx, res)
            result["oracle"] = facts
            green = res.exit_code == 0 and not res.timed_out
            if task.record.junit_xml:
                verdict = _junit_verdict(grade_dir, task.record.junit_xml, task.record.required_tests)
                result["junit"] = verdict
                green = green and bool(verdict["ok"])
            result["oracle_timed_out"] = res.timed_out
        result["tests_green"] = green
    # In-process forging cannot be prevented in repository tests, only flagged: the contract
    # decides whether a flagged pass counts (by default it does not).
    flagged = bool(result.get("forging_flags"))
    counted = not flagged or flagged_pass_counts(ctx.contract)
    if flagged and result["tests_green"]:
        result["flagged_pass"] = "counted" if counted else "not_counted"
    result["task_pass"] = bool(result["tests_green"] and applies and not forbidden and counted)
    if not ctx.options.keep_work:
        # The code under test wrote in it: removed without recursion, whatever its depth.
        with contextlib.suppress(OSError):
            remove_tree(grade_dir)
            remove_tree(tw.root / f"oracle-{attempt}")
    return result


def _grade_guarded(ctx: _Ctx, task: Task, tw: TaskWorkspace, attempt: int, changed: list[str], grade_dir: Path,
                   remaining: float, result: dict[str, Any]) -> bool:
    """Run a ``sealbench-pytest`` oracle (see :mod:`sealbench.pytest_oracle`); fills ``result``
    with its facts, JUnit verdict and forging flags, and returns whether the tests are green."""
    private = tw.root / f"oracle-{attempt}"
    remove_tree(private)
    owned = (set(tw.base) - set(changed)) | set(task.hidden_paths())
    try:
        guarded = pytest_oracle.prepare(private, task.record.oracle_cmd, owned)
    except ValueError as e:
        raise HarnessError(f"{task.task_id}: oracle_cmd: {e}") from None
    env = {**_env(ctx, task, grade_dir, attempt, None), **guarded.env}
    res, facts = _sandboxed(ctx, guarded.argv, grade_dir, env, remaining, guarded.readonly, guarded.writable)
    verdict = pytest_oracle.read_verdict(guarded, task.record.required_tests, res.exit_code)
    result["oracle"] = facts
    result["oracle_guard"] = pytest_oracle.GUARD_LABEL
    result["junit"] = verdict.junit
    if verdict.ignored:
        result["oracle_ignored"] = verdict.ignored
    if verdict.flags:
        result["forging_flags"] = verdict.flags
        result["forging_detail"] = verdict.details
    result["oracle_timed_out"] = res.timed_out
    return res.exit_code == 0 and not res.timed_out and bool(verdict.junit["ok"])


def _feedback(ctx: _Ctx, task: Task, tw: TaskWorkspace, attempt: int, remaining: float) -> str:
    policy = ctx.budget.feedback
    if policy == "none":
        return ""
    if policy == "pass_fail":
        return f"Attempt {attempt} did not pass the hidden tests."
    cmd = task.record.visible_test_cmd
    if not cmd:
        return f"Attempt {attempt} did not pass the hidden tests. (This task has no visible tests.)"
    env = _env(ctx, task, tw.ws, attempt, None)
    res, facts = _sandboxed(ctx, cmd, tw.ws, env, min(remaining, 60.0))
    out = (res.stdout or b"")[:FEEDBACK_CAP].decode("utf-8", "replace")
    ctx.j(ev.Feedback(task_id=task.task_id, attempt=attempt, policy=policy, visible_tests=ev.ProcessFacts(**facts)))
    return f"Attempt {attempt} did not pass the hidden tests. Output of the visible tests:\n{out}"


@dataclass
class _Prior:
    """What a resumed task had already used."""

    attempts_started: int = 0
    consumed_s: float = 0.0
    first_attempt_passed: bool | None = None
    finished: bool = False
    started: bool = False
    last_patch: str | None = None
    last_result: str | None = None
    open_attempt: int | None = None
    harness_error: str | None = None


def _prior_state(events: Sequence[ev.Line], budget: Budget,
                 boot_id: str | None) -> tuple[dict[str, _Prior], list[Charge]]:
    """What each task had used when the run stopped, from the journal alone, and the time
    charges the resume must journal (:mod:`sealbench.charge`).

    An attempt that started and never finished is used; its work is discarded, since the
    workspace is materialised afresh on resume. ``boot_id`` is this process's boot.
    """
    out: dict[str, _Prior] = {}
    for line in events:
        event, tid = line.event, line.task_id
        if tid is None:
            continue
        p = out.setdefault(tid, _Prior())
        if isinstance(event, ev.TaskStarted):
            p.started = True
        elif isinstance(event, ev.AttemptStarted):
            p.attempts_started = max(p.attempts_started, event.attempt or 0)
            p.open_attempt = event.attempt
        elif isinstance(event, ev.AttemptFinished):
            p.open_attempt = None
            p.last_result = event.result
            if event.attempt == 1:
                p.first_attempt_passed = event.result == Outcome.PASS.value
        elif isinstance(event, ev.AttemptInterrupted):
            p.open_attempt = None
            p.last_result = None
            if event.attempt == 1:
                p.first_attempt_passed = False
        elif isinstance(event, ev.PatchCaptured):
            p.last_patch = event.patch_sha256
        elif isinstance(event, ev.HarnessErrorEvent):
            p.harness_error = str(event.error)
        elif isinstance(event, ev.TaskFinished):
            p.finished = True
    for p in out.values():
        if p.open_attempt == 1:
            p.first_attempt_passed = False
    used = time_used(events, boot_id=boot_id, cap_s=budget.wall_clock_s,
                     feedback_runs_code=budget.feedback == "visible_tests")
    for tid, seconds in used.used_s.items():
        out[tid].consumed_s = seconds
    return out, used.new_charges


def _take_slot(ctx: _Ctx) -> bool:
    """Wait for one of the --jobs slots; False when the run is stopping."""
    while not ctx.slots.acquire(timeout=0.1):
        if ctx.stop.is_set():
            return False
    if ctx.stop.is_set():
        ctx.slots.release()
        return False
    return True


def _run_task(ctx: _Ctx, task: Task, prior: _Prior) -> str:
    """Run one task to its end; returns its outcome. Journal failures propagate.

    What costs the agent nothing (the workspace, the first prompt, the first attempt's sandbox
    set up and held before exec) is done before the task takes one of the --jobs slots, while
    other tasks' agents run; the slot is given back before the workspace is removed.
    """
    if ctx.stop.is_set():
        return "interrupted"
    max_attempts = 1 if ctx.probe else ctx.budget.max_attempts
    tw = TaskWorkspace(ctx.run_dir / "work" / ("probe-" + task.task_id if ctx.probe else task.task_id),
                       task.workspace, ctx.options.tree_caps)
    ready: _Ready | None = None
    setup_error: Exception | None = None
    slot = False
    try:
        if (prior.last_result in (None, Outcome.FAIL.value) and prior.attempts_started < max_attempts
                and prior.harness_error is None):
            # Set-ups are CPU work: a few at a time, so that the first tasks are ready first.
            with ctx.setups:
                try:
                    tw.materialise()
                    ready = _ready_attempt(ctx, task, tw, prior.attempts_started + 1, max_attempts, "")
                except Exception as e:  # the harness's failure: recorded once the task has started
                    setup_error = e
        slot = _take_slot(ctx)
        if not slot:
            return "interrupted"
        with ctx.running:
            return _run_started_task(ctx, task, prior, tw, max_attempts, ready, setup_error)
    finally:
        if ready is not None and ready.prepared is not None:
            ready.prepared.close()
        if slot:
            ctx.slots.release()
        if not ctx.options.keep_work:
            with contextlib.suppress(OSError):
                remove_tree(tw.root)


def _run_started_task(ctx: _Ctx, task: Task, prior: _Prior, tw: TaskWorkspace, max_attempts: int,
                      ready: _Ready | None, setup_error: Exception | None) -> str:
    tid = task.task_id
    budget = ctx.budget
    if not prior.started:
        # A pytest oracle_cmd of the form before sealbench-pytest runs as sealed; say so.
        unguarded = "none" if pytest_oracle.runs_pytest_unguarded(task.record.oracle_cmd) else None
        ctx.j(ev.TaskStarted(task_id=tid, max_attempts=max_attempts, wall_clock_s=budget.wall_clock_s,
                             prompt_template_id="narration-probe" if ctx.probe else task.record.prompt_template_id,
                             hidden_tests_sha256=task.record.hidden_tests_sha256,
                             oracle_cmd=list(task.record.oracle_cmd), **ev.present(oracle_guard=unguarded)))
    t0 = time.monotonic()
    deadline = t0 + budget.wall_clock_s - prior.consumed_s
    first = prior.first_attempt_passed
    attempts_used = prior.attempts_started
    patch_digest = prior.last_patch
    outcome: Outcome | None = None
    probe_passed: bool | None = None
    error: str | None = None
    open_attempt: tuple[int, float] | None = None
    try:
        if prior.harness_error is not None:
            # A harness error journaled before the run stopped stands: it is the harness's
            # failure, never turned into the agent's by running the task on.
            raise _Recorded(prior.harness_error)
        if setup_error is not None:
            raise setup_error
        if prior.last_result not in (None, Outcome.FAIL.value):
            # The run stopped between an attempt's end and the task's: its result stands.
            outcome = final_outcome(prior.last_result)
            if ctx.probe:
                probe_passed = prior.last_result == PROBE_PASS
        feedback = ""
        gap_from: float | None = None
        for attempt in range(attempts_used + 1, max_attempts + 1):
            if outcome is not None:
                break
            if ctx.stop.is_set():
                return "interrupted"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                outcome = Outcome.TIMEOUT
                break
            ctx.j(ev.AttemptStarted(task_id=tid, attempt=attempt, budget_s=round(remaining, 3)))
            attempts_used = attempt
            a0 = time.monotonic()
            open_attempt = (attempt, a0)
            try:
                if ready is None or ready.attempt != attempt:
                    ready = _ready_attempt(ctx, task, tw, attempt, max_attempts, feedback)
                agent_facts = _run_agent(ctx, task, tw, ready, deadline)
                prompt = ready.prompt
            except TreeRejected as e:
                # Only without a sandbox can an attempt replace its own workspace folder.
                prompt = ""
                agent_facts = {"exit_code": None, "timed_out": False, "elapsed_ms": 0,
                               "error": f"the workspace was replaced: {e.reason}"}
            _check_storage(ctx)  # an agent whose writes failed on a full disk is not judged on them
            gap_from = time.monotonic()
            agent = ev.AgentFinished(task_id=tid, attempt=attempt, prompt_sha256=sha256_bytes(prompt.encode()),
                                     **_transcript(ctx, tw), **agent_facts)
            ctx.j(agent)
            if agent.workdir_rejected:
                # The copy back of the quota'd workspace stopped at a cap: the agent's failure.
                capture = _Capture([], b"", rejected=agent.workdir_rejected)
            else:
                capture = _capture(tw, deadline)
            patch = capture.patch
            patch_digest = _store_bytes(ctx.run_dir, patch) if patch else None
            ctx.j(ev.PatchCaptured(task_id=tid, attempt=attempt, patch_sha256=patch_digest, empty=not patch,
                                   changed=capture.changed[:200], changed_count=len(capture.changed),
                                   **ev.present(rejected=capture.rejected,
                                                capture_timed_out=True if capture.timed_out else None)))
            end = AgentEnd(exit_code=agent.exit_code, timed_out=bool(agent.timed_out), patch_empty=not patch,
                           capture_timed_out=capture.timed_out, rejected=capture.rejected)
            grading: Grading | None = None
            if must_grade(end, probe=ctx.probe):
                remaining = deadline - time.monotonic()
                grade = None
                if remaining > 0:
                    try:
                        grade = _grade(ctx, task, tw, attempt, patch, capture.changed, remaining)
                    except subprocess.TimeoutExpired:
                        grade = None
                if grade is not None:
                    graded = ev.Graded(task_id=tid, attempt=attempt, **grade)
                    ctx.j(graded)
                    grading = Grading(task_pass=bool(graded.task_pass), oracle_timed_out=bool(graded.oracle_timed_out))
            result = classify(end, grading, probe=ctx.probe)
            assert result is not None
            ctx.j(ev.AttemptFinished(task_id=tid, attempt=attempt, result=result,
                                     elapsed_ms=int((time.monotonic() - a0) * 1000)))
            open_attempt = None
            if attempt == 1:
                first = result == Outcome.PASS.value
            if ctx.probe:
                probe_passed = result == PROBE_PASS
            if ctx.probe or result != Outcome.FAIL.value:
                outcome = final_outcome(result)
                break
            if attempt < max_attempts:
                if gap_from is not None and budget.attempt_gap_s is not None:
                    # First of all: the visible tests' run, the prompt file, .sealbench/ and the
                    # sandbox all carry the time they were made, which would tell the next
                    # attempt when this one's grading ended.
                    _wait_gap(ctx, gap_from, budget.attempt_gap_s, deadline)
                feedback = _feedback(ctx, task, tw, attempt, deadline - time.monotonic())
        if outcome is None:
            outcome = Outcome.FAIL
    except JournalStopped:
        raise
    except _Recorded as e:
        outcome = Outcome.HARNESS_ERROR
        error = str(e)
    except Exception as e:
        stopped = _why_stopped(ctx, e)
        if stopped is not None:
            # The operator or the infrastructure stopped the attempt: nothing about the task is
            # decided. The attempt is used, as one a crash stopped (it is never given back).
            if open_attempt is not None:
                try:
                    ctx.j(ev.AttemptInterrupted(task_id=tid, attempt=open_attempt[0], reason=stopped,
                                                charged_s=round(time.monotonic() - open_attempt[1], 3),
                                                charged_basis="measured by the runner until it stopped the attempt"))
                except JournalStopped:
                    if not ctx.storage_failed:
                        raise
                    # A full disk may refuse this line too: resume then charges the open attempt.
            return "interrupted"
        # The harness failed, not the agent: recorded, and the task stays in the denominator.
        outcome = Outcome.HARNESS_ERROR
        error = f"{type(e).__name__}: {e}"
        ctx.j(ev.HarnessErrorEvent(task_id=tid, attempt=attempts_used or None, error=error))
    elapsed_ms = int((time.monotonic() - t0 + prior.consumed_s) * 1000)
    ctx.j(ev.TaskFinished(task_id=tid, outcome=outcome.value, attempts_used=attempts_used, elapsed_ms=elapsed_ms,
                          first_attempt_passed=bool(first), patch_sha256=patch_digest,
                          **ev.present(probe_passed=probe_passed, error=error)))
    if patch_digest and not ctx.probe:
        _write_patch(ctx, tid, patch_digest)
    return outcome.value


class _Recorded(Exception):
    """Internal: a harness error the journal already holds for this task."""


def _write_patch(ctx: _Ctx, tid: str, patch_digest: str) -> None:
    """patches/<task>.patch, a copy of its blob (restored on resume if a failure lost it)."""
    blob = ctx.run_dir / "blobs" / patch_digest.removeprefix("sha256:")
    try:
        write_atomic(ctx.run_dir / "patches" / f"{tid}.patch", blob.read_bytes(), durable=False)
    except OSError as e:
        if _why_stopped(ctx, e) is None:
            raise


def _storage_exhausted(path: Path) -> str | None:
    """Why the storage of ``path`` cannot take writes now (read-only, full), or None.

    Consulted when the harness fails without an OSError saying why (git or another tool
    failing on a full disk): such a failure is the storage's, not a harness error.
    """
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return "read-only file system"
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    if free < _LOW_SPACE or (st.f_files > 0 and st.f_favail == 0):
        return f"no space left on device ({free} bytes, {st.f_favail} inodes free)"
    return None


def _check_storage(ctx: _Ctx) -> None:
    """Stop the run now if its storage is full or read-only: what ran may have failed for that.

    Raises:
        _Stopped: the storage cannot take writes.
    """
    why = _storage_exhausted(ctx.run_dir)
    if why is not None:
        ctx.storage_failure(f"storage failure: {why}")
        raise _Stopped


def _why_stopped(ctx: _Ctx, exc: BaseException) -> str | None:
    """Why a failure inside a task is not the task's to record: the run is stopping now, or its
    own storage failed (which stops the run now). None for a harness error."""
    if isinstance(exc, _Stopped) or ctx.abort.is_set():
        return ctx.abort_reason[0] if ctx.abort_reason else "the run stopped"
    failure = storage_failure(exc)
    why = (f"storage failure: {describe_storage_failure(failure)}" if failure is not None
           else _storage_exhausted(ctx.run_dir))
    if why is None:
        return None
    if failure is None:
        why = f"storage failure: {why} after {type(exc).__name__}: {str(exc)[:300]}"
    ctx.storage_failure(why)
    return ctx.abort_reason[0]


def _header(contract: ScoringContract, pack: Pack, command_line: Sequence[str] | None, probe: bool,
            sandbox: Sandbox, agent: ResolvedAgent, *, workspace_quota: bool = True) -> ev.RunStarted:
    """The run_started event of a new run (a resume journals it as run_resumed, with the run's nonce)."""
    provenance = pack.manifest.provenance
    return ev.RunStarted(
        contract_sha256=contract.contract_sha256, pack_sha256=pack.sealed_digest,
        argv=list(command_line) if command_line is not None else None,
        provenance=provenance.model_dump(mode="json") if provenance else None,
        run_id=contract.run_id, task_ids_count=len(contract.task_ids), probe=probe,
        heartbeat_ms=HEARTBEAT_MS, lease_ms=LEASE_MS, run_nonce=secrets.token_hex(16),
        derivation_version=DERIVATION_VERSION, sealbench_version=__version__,
        python=platform.python_version(), platform=platform.platform(terse=True),
        sandbox=sandbox.describe(), agent=agent.describe(),
        # Absent (as before quotas) when on: only the opt-out is recorded.
        **ev.present(workspace_quota=None if workspace_quota else False))


class _Progress:
    """A rich progress display on a terminal, plain lines otherwise."""

    def __init__(self, total: int, done: int, enabled: bool | None, label: str) -> None:
        self.total, self.done = total, done
        self.counts: dict[str, int] = {}
        self.t0 = time.monotonic()
        self.live = sys.stderr.isatty() if enabled is None else enabled
        self.label = label
        self._bar: Any = None
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), transient=False)
            self._bar.start()
            self._task = self._bar.add_task(label, total=total, completed=done, counts="")

    def update(self, task_id: str, outcome: str) -> None:
        self.done += 1
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        counts = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, counts=counts)
        else:
            print(f"[{self.done}/{self.total}] {task_id}: {outcome} ({time.monotonic() - self.t0:.1f}s)",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def write_derived(run_dir: Path, events: Iterable[ev.Line], task_ids: Sequence[str],
                  endpoints: Sequence[ModelEndpoint] = ()) -> list[Scorecard]:
    """(Re)write scorecards.jsonl, events.json and traces/ from the journal's events, streaming;
    ``endpoints`` (the contract's) price the tasks' model calls.

    Returns the scorecards it wrote.
    """
    cards: list[Scorecard] = []
    for rel, data in derive_iter(events, task_ids, endpoints):
        write_atomic(run_dir / rel, data, durable=False)
        if rel == "scorecards.jsonl":
            cards = [Scorecard.model_validate_json(line) for line in data.splitlines() if line]
    return cards


class _Requests:
    """Stop requests from signals (SIGINT, SIGTERM), recorded by their handlers and acted on by
    the loop that drives the tasks: a handler never raises into the middle of a journal append."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)

    def __enter__(self) -> _Requests:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous = signal.getsignal(signum)
                if previous is signal.SIG_IGN:
                    continue  # ignored by whoever started us (a background job): leave it so
                self._previous[signum] = previous
                signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


def _signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def _drive(ctx: _Ctx, todo: Sequence[Task], prior: dict[str, _Prior], progress: _Progress,
           outcomes: dict[str, str], requests: _Requests) -> str | None:
    """Run the tasks to their ends, or until a stop; returns the signal that stopped them, if any.

    A first SIGINT or SIGTERM stops new attempts and lets those under way finish and be graded;
    a second stops them now (they are used, as a crash would use them). A storage failure
    stops everything now.

    Raises:
        JournalStopped: the journal could not be written.
    """
    jobs = max(1, ctx.options.jobs)
    stopped_by: str | None = None
    handled = 0
    failure: JournalStopped | None = None
    pending: dict[Future[str], str] = {}

    def stop(reason: str) -> None:
        ctx.stop.set()
        for fut in pending:
            fut.cancel()
        ctx.j(ev.RunInterrupted(reason=reason, pending=len(todo) - len(outcomes)))

    def poll() -> None:
        nonlocal stopped_by, handled
        if ctx.storage_failed and stopped_by is None:
            stopped_by = "storage"
            with contextlib.suppress(JournalStopped):  # the disk may be full for this line too
                stop(ctx.storage_failed[0])
        while handled < len(requests.signals):
            name = _signal_name(requests.signals[handled])
            handled += 1
            if stopped_by is None:
                stopped_by = name
                stop("keyboard interrupt" if name == "SIGINT" else name)
                print(f"sealbench: {name}: stopping after the attempts under way (send {name} again to stop "
                      f"them now: they are then used, as a crash would use them)", file=sys.stderr, flush=True)
            elif not ctx.abort.is_set():
                ctx.stop_now(f"stopped by a second {name}")

    # As many tasks again as --jobs set themselves up (workspace, sandbox) while the others run;
    # only a few tasks are queued beyond that, so memory stays flat however long the
    # denominator is.
    with ThreadPoolExecutor(max_workers=2 * jobs) as pool:
        queue = iter(todo)

        def refill() -> None:
            if ctx.stop.is_set():
                return
            for task in queue:
                fut = pool.submit(_run_task, ctx, task, prior.get(task.task_id, _Prior()))
                pending[fut] = task.task_id
                if len(pending) >= 2 * jobs:
                    return

        poll()
        refill()
        while pending:
            try:
                finished, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt as e:  # a raising handler installed by a library caller meanwhile
                requests.signals.append(signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
                finished = set()
            for fut in finished:
                tid = pending.pop(fut)
                if fut.cancelled():
                    continue
                try:
                    outcomes[tid] = fut.result()
                except JournalStopped as e:
                    failure = failure or e
                    if not ctx.abort.is_set():
                        ctx.stop_now("the journal could not be written")
                    continue
                if outcomes[tid] != "interrupted":
                    progress.update(tid, outcomes[tid])
            if failure is None:
                poll()
                refill()
    if failure is not None:
        raise failure
    return None if stopped_by == "storage" else stopped_by


def _open_journal(opts: RunOptions, contract: ScoringContract, run_dir: Path, base: Path, header: ev.RunStarted,
                  contract_bytes: bytes, probe: bool, clock: Clock
                  ) -> tuple[Journal, list[ev.Line], dict[str, _Prior], list[Charge], ev.RunStarted]:
    """The journal to append to (created, or verified and reopened), what the tasks had used,
    the time charges a resume must journal, and the header to journal (a resume's carries the
    run's own nonce)."""
    assert contract.budget is not None
    jpath = base / "journal.jsonl"
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
        if started_under != DERIVATION_VERSION:
            journal.close()
            raise RunRefusal(f"cannot resume: the run was started by a sealbench that derives its results under rules "
                             f"version {started_under!r}, and this one ({__version__}) derives under version "
                             f"{DERIVATION_VERSION}; resume it with the release that started it")
        # The run's own nonce; None in journals made before nonces.
        header = header.model_copy(update=dict(run_nonce=first.run_nonce))
        try:
            if not probe:
                runs_index.continue_run(contract, run_dir, header, data=opts.runs_index)
        except BaseException:
            journal.close()
            raise
        prior, charges = _prior_state(events, contract.budget, clock.boot_id)
        return journal, events, prior, charges, header
    if jpath.exists():
        raise RunRefusal(f"{jpath} exists; resume it with --resume or choose a new --out")
    if not probe:
        write_atomic(base / "scoring_contract.json", contract_bytes)
    return Journal.create(jpath, fsync=opts.fsync, clock=clock), [], {}, [], header


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
    opts = options or RunOptions()
    # The sandbox mounts by absolute path; a relative --out must not reach it as such.
    run_dir = run_dir.resolve()
    contract = load_contract(contract_file)
    require_locked(contract)
    assert contract.budget is not None and contract.agent is not None and contract.pack is not None
    pack = check_pack(pack_path(contract, contract_file), contract.task_ids)
    if pack.sealed_digest != contract.pack.sha256:
        raise RunRefusal(f"the pack's digest {pack.sealed_digest} differs from the contract's {contract.pack.sha256}")
    missing = pytest_oracle.missing_pytest(pack.tasks[t].record.oracle_cmd for t in contract.task_ids)
    if missing is not None:
        raise RunRefusal(missing)
    agent = resolve_agent(contract.agent.label, contract.agent.command, python_agent)
    check_installed(contract)  # a preset's installed version must be the locked one, before any line
    sandbox = open_sandbox(opts.sandbox)
    model_gateway.read_keys(contract, sandbox.kind)  # an unset key variable refuses before anything is written
    if sandbox.kind == "bubblewrap":  # no tmpfs, and no quota, without it
        check_memory(max(1, opts.jobs), opts.limits, opts.tree_caps, quota=opts.workspace_quota)
    base = run_dir / "probe" if probe else run_dir
    header = _header(contract, pack, command_line, probe, sandbox, agent, workspace_quota=opts.workspace_quota)
    if not (opts.resume or probe or (base / "journal.jsonl").exists()):
        # Before anything is written, the directory and its lock included: a second run of this
        # run_id is refused with nothing left behind.
        runs_index.claim_run(contract, run_dir, header, data=opts.runs_index)
    try:
        with hold_writer(base, command_line):
            _sweep_leftovers(run_dir, base, opts.keep_work)
            return _execute_locked(contract_file, contract, pack, agent, sandbox, opts, run_dir, base, header,
                                   probe=probe, on_started=on_started)
    except OSError as e:
        failure = storage_failure(e)
        if failure is None:
            raise
        raise StorageError(f"the run's storage failed: {describe_storage_failure(failure)}") from e


def _execute_locked(contract_file: Path, contract: ScoringContract, pack: Pack, agent: ResolvedAgent,
                    sandbox: Sandbox, opts: RunOptions, run_dir: Path, base: Path, header: ev.RunStarted, *,
                    probe: bool, on_started: Callable[[Journal], None] | None) -> RunResult:
    assert contract.budget is not None
    jpath = base / "journal.jsonl"
    clock = opts.clock or Clock()
    for sub in ("blobs", "patches", "traces"):
        (base / sub).mkdir(exist_ok=True)
    journal, events, prior, charges, header = _open_journal(opts, contract, run_dir, base, header,
                                                            contract_file.read_bytes(), probe, clock)
    template = None
    if probe:
        template = (Path(__file__).parent / "prompts" / "narration_probe.txt").read_text(encoding="utf-8")
    ctx = _Ctx(contract=contract, budget=contract.budget, pack=pack, run_dir=base, journal=journal,
               agent=agent, sandbox=sandbox, options=opts, stop=threading.Event(),
               slots=threading.Semaphore(max(1, opts.jobs)), probe=probe, template_override=template)
    outcomes: dict[str, str] = {}
    stopped_by: str | None = None
    requests = _Requests()
    heartbeat = Heartbeat(journal).start()
    try:
        requests.__enter__()  # from the first journal line on, a signal is a request, never an exception
        if contract.model_endpoints and agent.kind == "command":
            ctx.gateway = model_gateway.Gateway(contract.model_endpoints, model_gateway.read_keys(contract, sandbox.kind),
                                                ctx.j, lambda data: _store_bytes(base, data)).start()
        if opts.resume and events:
            ctx.j(ev.RunResumed(**header.payload()))
            for tid, p in prior.items():
                # Every attempt that had started is used; none is given back.
                if p.open_attempt is not None and not p.finished:
                    ctx.j(ev.AttemptInterrupted(task_id=tid, attempt=p.open_attempt,
                                                reason="the runner stopped mid-attempt"))
            for charge in charges:
                # Decided once, here, and journaled: later resumes read the charge, never redo it.
                ctx.j(charge.event())
            if not probe:
                _restore_patches(base, prior)
        else:
            ctx.j(header)
            if not probe:
                runs_index.journal_started(contract, run_dir, data=opts.runs_index)
        if on_started is not None:
            on_started(journal)
        todo = [pack.tasks[t] for t in contract.task_ids if not prior.get(t, _Prior()).finished]
        progress = _Progress(len(contract.task_ids), len(contract.task_ids) - len(todo), opts.progress,
                             "probe" if probe else str(contract.run_id))
        try:
            stopped_by = _drive(ctx, todo, prior, progress, outcomes, requests)
        finally:
            progress.close()
        complete = (stopped_by is None and not ctx.storage_failed
                    and all(v != "interrupted" for v in outcomes.values()))
        if complete:
            ctx.j(ev.RunFinished(outcomes={o: list(outcomes.values()).count(o) for o in set(outcomes.values())}))
    except JournalStopped as e:
        if ctx.storage_failed and not isinstance(e.error, StorageError):
            raise StorageError(_storage_message(ctx)) from None
        raise e.error from None
    finally:
        requests.__exit__()
        if ctx.running.idle:
            heartbeat.stop()
        # else (an interrupt while agents still ran): the heartbeat stays, finds the journal
        # closed, and its watchdog ends the process within the lease, so none runs unaccounted.
        if ctx.gateway is not None:
            ctx.gateway.close()
        journal.close()
        if not opts.keep_work:
            with contextlib.suppress(OSError):
                remove_tree(base / "work")
    if ctx.storage_failed:
        raise StorageError(_storage_message(ctx))
    cards = None
    if probe:
        write_probe_summary(run_dir, iter_verified(jpath), contract.task_ids)
    else:
        cards = write_derived(base, iter_verified(jpath), contract.task_ids, contract.model_endpoints or ())
    headers = [line.event for line in events if isinstance(line.event, ev.RunHeader)]
    result = RunResult(run_dir=run_dir, outcomes=outcomes, complete=complete, interrupted=stopped_by is not None,
                       interrupted_by=stopped_by, contract_sha256=contract.contract_sha256, scorecards=cards,
                       isolation=isolation_of([*headers, header]))
    if not probe:
        runs_index.record_end(contract, result, data=opts.runs_index)
    return result


def _storage_message(ctx: _Ctx) -> str:
    return (f"the run stopped on a {ctx.storage_failed[0]}; no task was decided by it (the attempts it "
            f"stopped are used, as a crash would use them)")


def _restore_patches(base: Path, prior: dict[str, _Prior]) -> None:
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
