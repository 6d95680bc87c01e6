"""Grading: an attempt's patch judged by the hidden tests in a pristine copy, JUnit reports
read as hostile input, and the feedback shown before the next attempt.

Nothing here writes the journal: :func:`grade` returns the facts of one grading (the payload
of a ``graded`` event) and :func:`feedback` the text and facts of one feedback; the caller
(the run's coordinator, or ``pack validate``) decides what to record. What grading needs of
the run is passed explicitly: the run-wide :class:`Settings` and the :class:`Cancellation`
that stops its sandboxed commands at once.
"""

from __future__ import annotations

import contextlib
import posixpath
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import bytecode, pytest_oracle
from . import events as ev
from .agentfs import TreeCaps, exists_at, read_regular, remove_entry, remove_tree
from .agents import ResolvedAgent
from .contract import flagged_pass_counts
from .derive import DERIVATION_VERSION
from .digest import same_digest, sha256_bytes, tree_digest
from .errors import HarnessError
from .files import write_atomic
from .formats import Budget, ScoringContract
from .function_oracle import is_oracle_cmd
from .pack import Task
from .sandbox import Limits, Prepared, Sandbox, SandboxResult, SandboxSpec
from .sandbox import command_path as sandbox_path
from .vocabulary import Vocabulary, vocabulary_of
from .workspace import (
    META_DIR,
    TaskWorkspace,
    apply_patch,
    copy_tree,
    forbidden_hits,
    module_shadows,
    overlay,
)

if TYPE_CHECKING:
    from .environments import BuiltEnv
    from .gateway import Gateway

JUNIT_REPORT_CAP = 16 * 2**20

FEEDBACK_CAP = 16 * 1024

PRIVATE_CAPS = TreeCaps(max_entries=1000, max_bytes=4 * JUNIT_REPORT_CAP)
"""Quota and caps of a harness-private folder bound writable into the grading sandbox (the
guarded pytest's report and record): the code under test can write there too."""


def private_caps(workspace: TreeCaps) -> TreeCaps:
    """:data:`PRIVATE_CAPS`, its quota no larger than the workspace's: a contract that sizes its
    sandboxes down for many model-bound agents at once sizes this folder with them."""
    return replace(PRIVATE_CAPS, max_bytes=min(PRIVATE_CAPS.max_bytes, workspace.max_bytes))


@dataclass(frozen=True)
class Settings:
    """What every attempt and grading of one run (or validation) shares, fixed before the first."""

    contract: ScoringContract
    budget: Budget
    pack_root: Path
    run_dir: Path
    """Where blobs are stored (``run_dir/blobs``) and the workspaces live (``run_dir/work``)."""
    sandbox: Sandbox
    agent: ResolvedAgent
    limits: Limits = field(default_factory=Limits)
    tree_caps: TreeCaps = field(default_factory=TreeCaps)
    workspace_quota: bool = True
    keep_work: bool = False
    probe: bool = False
    template_override: str | None = None
    """The narration probe's template, used instead of each task's."""
    gateway: Gateway | None = None
    """The run's model gateway, when the contract declares model endpoints and the agent is a command."""
    yield_cpu: bool = False
    """Sandboxed commands run below the runner's priority (a run of many agents at once: see
    :data:`sealbench.sandbox.YIELD_ABOVE_JOBS`)."""
    environments: Mapping[str, BuiltEnv] = field(default_factory=dict)
    """The built environments the tasks name, by spec digest (checked before the run)."""
    durable_blobs: bool = True
    """Blobs are made durable before the line naming them is written; False on a cluster node,
    whose blobs the coordinator stores (durably) before it journals them."""
    derivation_version: int = DERIVATION_VERSION
    """The rules the run is derived by (a resumed run keeps the version it started under): what
    its journal may say (see :data:`sealbench.derive.DERIVATION_VERSION`)."""

    @property
    def vocabulary(self) -> Vocabulary:
        """What the run's journal may say, by :attr:`derivation_version`."""
        return vocabulary_of(self.derivation_version)

    @property
    def max_attempts(self) -> int:
        return 1 if self.probe else self.budget.max_attempts


class Stopped(Exception):
    """The attempt under way was stopped (a second interrupt, a storage failure, a cancel)."""


class Cancellation:
    """Reaches the sandboxed commands of one attempt (or of a whole validation) to kill them at once.

    Whoever owns it (an executor, ``pack validate``) calls :meth:`cancel`; the code it was
    given to runs its commands through :meth:`start` and waits through :meth:`pause`.
    """

    def __init__(self) -> None:
        self._live: set[Prepared] = set()
        self._lock = threading.Lock()
        self._abort = threading.Event()
        self._soon = threading.Event()
        self.reasons: list[str] = []

    @property
    def cancelled(self) -> bool:
        return self._abort.is_set()

    @property
    def reason(self) -> str | None:
        return self.reasons[0] if self.reasons else None

    def cancel(self, reason: str) -> None:
        """Kill the commands running now; none starts after this."""
        self._soon.set()
        with self._lock:
            self.reasons.append(reason)
            self._abort.set()
            live = list(self._live)
        for prepared in live:
            prepared.kill()

    def wind_down(self) -> None:
        """End waits (:meth:`pause`) early; running commands go on."""
        self._soon.set()

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less once winding down or cancelled."""
        self._soon.wait(max(0.0, seconds))

    def start(self, prepared: Prepared, timeout_s: float | None = None) -> SandboxResult:
        """Start a prepared command where :meth:`cancel` can reach it.

        Raises:
            Stopped: cancelled (before or while the command ran).
        """
        with self._lock:
            if self._abort.is_set():
                raise Stopped
            self._live.add(prepared)
        try:
            result = prepared.start(timeout_s)
        except HarnessError:
            if self._abort.is_set():
                raise Stopped from None
            raise
        finally:
            with self._lock:
                self._live.discard(prepared)
        if self._abort.is_set():
            raise Stopped
        return result


def command_path(environment: BuiltEnv | None = None) -> str:
    """``PATH`` inside the sandbox for every command of a task: the task's environment's bin
    when it names one, then :func:`sealbench.sandbox.command_path`'s."""
    return sandbox_path(str(environment.bin) if environment is not None else None)


def environment_of(settings: Settings, task: Task) -> BuiltEnv | None:
    """The built environment ``task`` names, or None when it names none.

    Raises:
        HarnessError: it names one the run did not check (a caller that skipped
            :func:`sealbench.environments.require`).
    """
    spec = task.record.environment
    if spec is None:
        return None
    from .environments import label, spec_digest

    built = settings.environments.get(spec_digest(spec))
    if built is None:
        raise HarnessError(f"{task.task_id}: its environment {label(spec)} was not checked before the run")
    return built


def bytecode_mirror(settings: Settings, task: Task | None) -> bytecode.Mirror:
    """The read-only bytecode mirror every Python command of ``task`` looks in (see
    :mod:`sealbench.bytecode`): the libraries of this interpreter and of the task's environment."""
    environment = environment_of(settings, task) if task is not None else None
    roots = bytecode.interpreter_roots()
    if environment is not None:
        roots += bytecode.environment_roots(environment)
    return bytecode.mirror(roots)


def task_env(settings: Settings, task: Task, ws: Path, attempt: int, prompt_file: Path | None, *,
             oracle: bool = False) -> dict[str, str]:
    """The environment of a sandboxed command of ``task`` (its agent, oracle or visible tests).

    With a task environment, the agent and the visible tests find the repository's import
    roots on ``PYTHONPATH``; the oracle does not (``oracle``): its sealed command adds them
    through pytest once the guard watches, so no code under test runs before that.
    """
    seed = task.record.seed if task.record.seed is not None else settings.contract.seed
    environment = environment_of(settings, task)
    venv: dict[str, str] = {}
    if environment is not None:
        from .environments import REPO_MOUNT

        venv["VIRTUAL_ENV"] = str(environment.root)
        assert task.record.environment is not None
        if not oracle:
            venv["PYTHONPATH"] = ":".join(posixpath.normpath(f"{REPO_MOUNT}/{r}")
                                          for r in task.record.environment.import_roots)
    return {
        **venv,
        "PATH": command_path(environment),
        "HOME": "/tmp/home",
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": str(seed),
        "PYTHONDONTWRITEBYTECODE": "1",
        bytecode.PREFIX_ENV: str(bytecode_mirror(settings, task).prefix),
        "SEALBENCH_SEED": str(seed),
        "SEALBENCH_TASK_ID": task.task_id,
        "SEALBENCH_ATTEMPT": str(attempt),
        "SEALBENCH_MAX_ATTEMPTS": str(settings.max_attempts),
        "SEALBENCH_WORKSPACE": str(ws),
        "SEALBENCH_PROMPT_FILE": str(prompt_file) if prompt_file is not None else "",
        "SEALBENCH_TRACE_DIR": str(ws / META_DIR / "trace"),
    }


def store_bytes(run_dir: Path, data: bytes, *, durable: bool = True) -> str:
    """Keep ``data`` in blobs/ under its digest, durably (before the journal event naming it)
    unless ``durable`` is False (a cluster node's scratch: the coordinator stores it again)."""
    digest = sha256_bytes(data)
    dest = run_dir / "blobs" / digest.removeprefix("sha256:")
    if not dest.exists():
        write_atomic(dest, data, durable=durable)
    return digest


def sandbox_spec(settings: Settings, argv: Sequence[str], workdir: Path, env: dict[str, str], timeout: float,
                 readonly: Sequence[Path] = (), writable: Sequence[Path] = (), *,
                 task: Task | None = None) -> SandboxSpec:
    """The spec of one sandboxed command; with ``task``, its environment's mounts and the link
    from :data:`sealbench.environments.REPO_MOUNT` to ``workdir`` (the code under test)."""
    quota = settings.workspace_quota
    environment = environment_of(settings, task) if task is not None else None
    links: tuple[tuple[str, str], ...] = ()
    if task is not None:
        readonly = [*readonly, *bytecode_mirror(settings, task).mounts]
    if environment is not None:
        from .environments import REPO_MOUNT

        readonly = [*readonly, *environment.readonly()]
        links = ((REPO_MOUNT, str(workdir)),)
    # Output is kept in memory (capped by the limits) and stored once, under its digest. The
    # workdir (workspace or grading copy) gets its disk quota: TreeCaps.max_bytes, whose write
    # past it fails inside the sandbox rather than on the host's disk.
    return SandboxSpec(argv=tuple(argv), workdir=workdir, env=env, timeout_s=max(0.05, timeout),
                       stdout_path=None, stderr_path=None, limits=settings.limits,
                       readonly_paths=tuple(readonly), writable_paths=tuple(writable),
                       workdir_caps=settings.tree_caps if quota else None,
                       writable_caps=private_caps(settings.tree_caps) if quota else None,
                       links=links, yield_cpu=settings.yield_cpu)


def process_facts(settings: Settings, res: SandboxResult) -> dict[str, Any]:
    """A sandboxed command's facts, its output stored as blobs."""
    assert res.stdout is not None and res.stderr is not None  # specs from sandbox_spec keep output in memory
    rejected = {} if res.workdir_rejected is None else {"workdir_rejected": res.workdir_rejected}
    return {
        **rejected,
        "exit_code": res.exit_code,
        "signal": res.signal,
        "timed_out": res.timed_out,
        "elapsed_ms": int(res.elapsed_s * 1000),
        "stdout": store_bytes(settings.run_dir, res.stdout, durable=settings.durable_blobs),
        "stderr": store_bytes(settings.run_dir, res.stderr, durable=settings.durable_blobs),
        "stdout_bytes": res.stdout_bytes,
        "stderr_bytes": res.stderr_bytes,
        "stdout_truncated": res.stdout_truncated,
        "stderr_truncated": res.stderr_truncated,
    }


def sandboxed(settings: Settings, cancel: Cancellation, argv: Sequence[str], workdir: Path, env: dict[str, str],
              timeout: float, readonly: Sequence[Path] = (),
              writable: Sequence[Path] = (), *, task: Task | None = None) -> tuple[SandboxResult, dict[str, Any]]:
    """Run one command in the sandbox where ``cancel`` reaches it; its result and facts.

    Raises:
        Stopped: cancelled.
    """
    prepared = settings.sandbox.prepare(sandbox_spec(settings, argv, workdir, env, timeout, readonly, writable,
                                                     task=task))
    try:
        res = cancel.start(prepared)
    finally:
        prepared.close()
    return res, process_facts(settings, res)


def junit_verdict(grade_dir: Path, rel: str, required: Sequence[str], decided_by: str = "all") -> dict[str, Any]:
    """Read a JUnit XML report: counts, failures and whether the tests that decide passed (see
    :func:`pytest_oracle.verdict` for the two rules).

    The report is in a tree the code under test could write: it is read without following a
    link on any component, only as a regular file, and only up to a size cap.
    """
    data = read_regular(grade_dir, rel, JUNIT_REPORT_CAP)
    if data is None:
        return {"ok": False, "why": "no JUnit report written (or not a regular file within the size cap)"}
    return pytest_oracle.junit_verdict(data, required, decided_by)


def remove_planted_report(grade_dir: Path, rel: str) -> None:
    """Only the oracle may write its JUnit report: one the agent's patch left would pass a run
    whose tests never reported (a candidate calling os._exit(0) while pytest imports it).
    Removed without following a link the patch put on the way."""
    remove_entry(grade_dir, rel)


_AHEAD_WORKERS = 4
_ahead_pool: ThreadPoolExecutor | None = None
_ahead_pool_lock = threading.Lock()


def _ahead() -> ThreadPoolExecutor:
    """The threads that set oracles up ahead. Long-lived on purpose: bubblewrap dies with the
    thread that spawned it (``--die-with-parent`` is a parent-death signal, sent when that
    thread ends), so the spawning thread must outlive every sandbox it spawns."""
    global _ahead_pool
    with _ahead_pool_lock:
        if _ahead_pool is None:
            _ahead_pool = ThreadPoolExecutor(max_workers=_AHEAD_WORKERS, thread_name_prefix="sealbench-oracle-ahead")
        return _ahead_pool


class OracleAhead:
    """An attempt's oracle, being set up in its sandbox on another thread while the attempt's
    patch is still being captured (:func:`prepare_oracle`); :func:`grade` fills its grading
    copy and starts it."""

    def __init__(self, sandbox: Sandbox, spec: SandboxSpec) -> None:
        self.grade_dir = spec.workdir
        # Most of a set-up is waiting for the kernel (the move into the run cgroup, bwrap's
        # namespaces), which overlaps git's two runs.
        self._future: Future[Prepared] = _ahead().submit(sandbox.prepare, spec)
        self._done = False

    def _result(self) -> Prepared | None:
        if self._done or self._future.cancel():
            return None  # not begun yet (every thread busy): grade sets it up itself, now
        try:
            return self._future.result()
        except Exception:  # grade sets it up again, and reports the failure then
            return None

    def take(self) -> Prepared | None:
        """The oracle held at its gate, once its set-up has ended; None if it was not begun or
        failed (the caller then sets it up itself). The caller closes what it takes."""
        prepared = self._result()
        self._done = True
        return prepared

    def close(self) -> None:
        """Kill it if it was never taken and free what it held, once its set-up has ended, so
        that nothing of it outlives the attempt (twice is harmless)."""
        prepared = self._result()
        self._done = True
        if prepared is not None:
            prepared.close()


def _oracle_spec(settings: Settings, task: Task, grade_dir: Path, attempt: int, remaining: float) -> SandboxSpec:
    env = task_env(settings, task, grade_dir, attempt, None, oracle=True)
    argv = bytecode.python_argv(task.record.oracle_cmd, bytecode_mirror(settings, task).prefix)
    spec = sandbox_spec(settings, argv, grade_dir, env, remaining, task=task)
    if is_oracle_cmd(task.record.oracle_cmd):
        # The trusted function-level oracle: its package bound read-only (an editable install
        # lives outside the Python prefix), and run as the sandbox's pid 1, which nothing
        # the candidate starts can signal or rewrite (see sealbench.function_oracle).
        spec = replace(spec, readonly_paths=(*spec.readonly_paths, Path(__file__).resolve().parent), as_pid_1=True)
    return spec


def prepare_oracle(settings: Settings, task: Task, task_ws: TaskWorkspace, attempt: int,
                   remaining: float) -> OracleAhead | None:
    """Set the oracle of ``attempt`` up in its sandbox, held at its gate, on an empty grading
    directory that :func:`grade` fills (the sandbox binds the directory, not what it holds):
    the sandbox's own set-up then overlaps the capture of the patch instead of following it.
    Only the time the oracle runs counts: :func:`grade` gives it what remains then.

    None when there is nothing to set up ahead (a guarded pytest oracle, no time left). A
    set-up that fails is done again by :func:`grade`, which reports the failure as it always has.
    """
    if remaining <= 0 or pytest_oracle.is_guarded(task.record.oracle_cmd):
        return None
    grade_dir = task_ws.root / f"grade-{attempt}"
    try:
        remove_tree(grade_dir)
        grade_dir.mkdir()
    except OSError:
        return None
    return OracleAhead(settings.sandbox, _oracle_spec(settings, task, grade_dir, attempt, remaining))


def grade(settings: Settings, cancel: Cancellation, task: Task, task_ws: TaskWorkspace, attempt: int, patch: bytes,
          changed: list[str], remaining: float, ahead: OracleAhead | None = None) -> dict[str, Any]:
    """Grade one attempt in a new directory; never in the agent's. Returns the ``graded`` payload.

    ``ahead``: the oracle set up by :func:`prepare_oracle` for this attempt (closed here,
    whether it ran or not).

    Raises:
        HarnessError: the hidden tests changed under the run, or the harness failed.
        Stopped: cancelled while a guarded oracle ran.
        subprocess.TimeoutExpired: applying the patch ran out of the time that remains.
    """
    try:
        return _grade(settings, cancel, task, task_ws, attempt, patch, changed, remaining, ahead)
    finally:
        if ahead is not None:
            ahead.close()


def _grade(settings: Settings, cancel: Cancellation, task: Task, task_ws: TaskWorkspace, attempt: int, patch: bytes,
           changed: list[str], remaining: float, ahead: OracleAhead | None) -> dict[str, Any]:
    hidden_paths = task.hidden_paths()
    # A file the test patch deletes is one of its files too: reset (removed) at grading.
    forbidden = forbidden_hits(changed, settings.contract.forbidden_paths or [],
                               [*hidden_paths, *task.record.deleted_test_files],
                               reset=task.record.test_files == "reset")
    if not pytest_oracle.is_guarded(task.record.oracle_cmd) and not is_oracle_cmd(task.record.oracle_cmd):
        # sealbench-pytest's guard sees a shadowed module itself (flag module_shadowed), and the
        # function-level oracle runs isolated (python -I, -P: no working directory on sys.path);
        # a script oracle, or pytest run by the oracle itself, has nobody watching its imports.
        forbidden += [p for p in module_shadows(changed, task.pack_workspace, task_ws.agent_dir, hidden_paths, task.record.oracle_cmd)
                      if p not in forbidden]
    grade_dir = task_ws.root / f"grade-{attempt}"
    # Without the pack's bytecode: Python would run a stale or planted .pyc as the pack's code.
    if ahead is None:
        remove_tree(grade_dir)
        copy_tree(task.pack_workspace, grade_dir, ignore=bytecode.ignore_bytecode)
    else:  # prepare_oracle made it, empty
        copy_tree(task.pack_workspace, grade_dir, into=True, ignore=bytecode.ignore_bytecode)
    applies, apply_msg = apply_patch(grade_dir, patch, timeout_s=remaining)
    # Bytecode the patch carries (the copy holds none of the pack's) runs under the name it was
    # compiled with: forbidden, whatever the contract lists.
    forbidden += [p for p in changed if bytecode.is_bytecode(p) and p not in forbidden and exists_at(grade_dir, p)]
    result: dict[str, Any] = {"patch_applies_clean": applies, "forbidden": forbidden,
                              "no_forbidden_path": not forbidden, "tests_green": False}
    if apply_msg:
        result["apply_message"] = apply_msg[:2000]
    if applies and not forbidden:
        # The pack could change under a long run: grade only against the sealed tests.
        if not same_digest(task.record.hidden_tests_sha256, tree_digest(task.hidden, settings.pack_root)):
            raise HarnessError(f"{task.task_id}: hidden tests no longer match hidden_tests_sha256")
        for rel in task.record.deleted_test_files:
            remove_entry(grade_dir, rel)  # never through a link the patch put on the way
        overlay(task.hidden, grade_dir)
        if pytest_oracle.is_guarded(task.record.oracle_cmd):
            green = grade_guarded(settings, cancel, task, task_ws, attempt, changed, grade_dir, remaining, result)
        else:
            if task.record.junit_xml:
                remove_planted_report(grade_dir, task.record.junit_xml)
            prepared = ahead.take() if ahead is not None else None
            if prepared is not None:
                try:
                    res = prepared.start(remaining)
                finally:
                    prepared.close()
            else:
                res = settings.sandbox.run(_oracle_spec(settings, task, grade_dir, attempt, remaining))
            facts = process_facts(settings, res)
            result["oracle"] = facts
            rule = task.record.decided_by
            green = pytest_oracle.exit_passes(res.exit_code, rule if task.record.junit_xml else "all") and not res.timed_out
            if task.record.junit_xml:
                verdict = junit_verdict(grade_dir, task.record.junit_xml, task.record.required_tests, rule)
                result["junit"] = verdict
                green = green and bool(verdict["ok"])
            result["oracle_timed_out"] = res.timed_out
        result["tests_green"] = green
    # In-process forging cannot be prevented in repository tests, only flagged: the contract
    # decides whether a flagged pass counts (by default it does not).
    flagged = bool(result.get("forging_flags"))
    counted = not flagged or flagged_pass_counts(settings.contract)
    if flagged and result["tests_green"]:
        result["flagged_pass"] = "counted" if counted else "not_counted"
    result["task_pass"] = bool(result["tests_green"] and applies and not forbidden and counted)
    if ahead is not None:
        ahead.close()  # never started (the patch did not apply, or was forbidden): before its folder goes
    if not settings.keep_work:
        # The code under test wrote in it: removed without recursion, whatever its depth.
        with contextlib.suppress(OSError):
            remove_tree(grade_dir)
            remove_tree(task_ws.root / f"oracle-{attempt}")
            remove_tree(task_ws.root / f"install-{attempt}")
    return result


INSTALL_FILE = Path(__file__).resolve().parent / "repo_install.py"


def with_pythonpath(args: Sequence[str], extra: str) -> list[str]:
    """A pytest command line whose ``pythonpath`` ini option also names ``extra`` (last): its
    last ``-o pythonpath=`` extended, or one put first when it has none."""
    out = list(args)
    for i in range(len(out) - 1, -1, -1):
        for prefix in ("-o", "--override-ini=", ""):
            if out[i].startswith(prefix + "pythonpath=") and (prefix or (i > 0 and out[i - 1] in ("-o", "--override-ini"))):
                out[i] = f"{out[i]} {extra}"
                return out
    return [out[0], "-o", f"pythonpath={extra}", *out[1:]]


def install_repository(settings: Settings, cancel: Cancellation, task: Task, task_ws: TaskWorkspace, attempt: int,
                       grade_dir: Path, remaining: float, result: dict[str, Any]) -> tuple[Path | None, float]:
    """Install the grading copy by its own build backend, in the sandbox (see
    :mod:`sealbench.repo_install`), when its environment says so: (the folder to bind read-only
    for the oracle, whose ``site/`` holds the metadata; the time left). The folder is None when
    there is nothing to install, and also when the install failed (``result`` says so: the
    candidate's failure, since the backend and its build are the candidate's code).
    """
    spec = task.record.environment
    if spec is None or spec.install != "editable":
        return None, remaining
    out = task_ws.root / f"install-{attempt}"
    remove_tree(out)
    out.mkdir()
    env = task_env(settings, task, grade_dir, attempt, None, oracle=True)
    res, facts = sandboxed(settings, cancel, ["python", "-P", "-s", str(INSTALL_FILE), str(out)], grade_dir, env,
                           remaining, (INSTALL_FILE,), (out,), task=task)
    result["repo_install"] = facts
    if res.exit_code != 0 or res.timed_out:
        return None, 0.0
    return out, max(0.0, remaining - res.elapsed_s)


def grade_guarded(settings: Settings, cancel: Cancellation, task: Task, task_ws: TaskWorkspace, attempt: int,
                  changed: list[str], grade_dir: Path, remaining: float, result: dict[str, Any]) -> bool:
    """Run a ``sealbench-pytest`` oracle (see :mod:`sealbench.pytest_oracle`); fills ``result``
    with its facts, JUnit verdict and forging flags, and returns whether the tests are green."""
    installed, remaining = install_repository(settings, cancel, task, task_ws, attempt, grade_dir, remaining, result)
    if "repo_install" in result and installed is None:
        return False
    private = task_ws.root / f"oracle-{attempt}"
    remove_tree(private)
    owned = (set(task_ws.base) - set(changed)) | set(task.hidden_paths())
    # The installed metadata joins the import roots on sys.path through pytest, once the guard watches.
    cmd = task.record.oracle_cmd if installed is None else with_pythonpath(task.record.oracle_cmd,
                                                                            str(installed / "site"))
    try:
        guarded = pytest_oracle.prepare(private, cmd, owned)
    except ValueError as e:
        raise HarnessError(f"{task.task_id}: oracle_cmd: {e}") from None
    env = {**task_env(settings, task, grade_dir, attempt, None, oracle=True), **guarded.env}
    argv = bytecode.python_argv(guarded.argv, bytecode_mirror(settings, task).prefix)
    readonly = (*guarded.readonly, *((installed,) if installed is not None else ()))
    res, facts = sandboxed(settings, cancel, argv, grade_dir, env, remaining, readonly,
                           guarded.writable, task=task)
    rule = task.record.decided_by
    verdict = pytest_oracle.read_verdict(guarded, task.record.required_tests, res.exit_code, rule)
    result["oracle"] = facts
    result["oracle_guard"] = pytest_oracle.GUARD_LABEL
    result["junit"] = verdict.junit
    if pytest_oracle.crashed(res.exit_code, res.timed_out, verdict.junit):
        result["junit"] = {**verdict.junit, "why": whose_crash(settings, cancel, task, task_ws, attempt, res, verdict.junit)}
    if verdict.ignored:
        result["oracle_ignored"] = verdict.ignored
    if verdict.flags:
        result["forging_flags"] = verdict.flags
        result["forging_detail"] = verdict.details
    result["oracle_timed_out"] = res.timed_out
    return pytest_oracle.exit_passes(res.exit_code, rule) and not res.timed_out and bool(verdict.junit["ok"])


def _output(res: SandboxResult) -> str:
    return b"\n".join(b for b in (res.stdout, res.stderr) if b).decode("utf-8", "replace")


def pinned_versions(settings: Settings, task: Task) -> str:
    """Which pytest and pluggy the task's oracle runs on, in words."""
    environment = environment_of(settings, task)
    if environment is None:
        return "it runs on sealbench's own Python"
    pins = [p.replace("==", " ") for p in environment.packages if p.lower().split("==")[0] in ("pytest", "pluggy")]
    return f"the environment pins {' and '.join(sorted(pins, reverse=True)) or 'no pytest'}"


def whose_crash(settings: Settings, cancel: Cancellation, task: Task, task_ws: TaskWorkspace, attempt: int,
                res: SandboxResult, junit: Mapping[str, Any]) -> str:
    """A guarded run that crashed (:func:`pytest_oracle.crashed`): the harness's own test run,
    in the same environment with nothing of the candidate's, says whose crash it was.

    Returns the JUnit verdict's why when the harness's run passes (the candidate's code ended
    the run: the agent's failure, told with the tail of the run's output).

    Raises:
        HarnessError: the harness's run crashes too: the guard or the environment is broken,
            never the agent's doing; the message says how, with the tail of the output.
        Stopped: cancelled.
    """
    root = task_ws.root / f"self-check-{attempt}"
    remove_tree(root)
    try:
        guarded, workdir = pytest_oracle.prepare_self_check(root)
        env = {**task_env(settings, task, workdir, attempt, None, oracle=True), **guarded.env}
        check, _facts = sandboxed(settings, cancel, guarded.argv, workdir, env, pytest_oracle.SELF_CHECK_S,
                                  guarded.readonly, guarded.writable, task=task)
        healthy = pytest_oracle.self_check_healthy(guarded, check.exit_code, check.timed_out)
    finally:
        with contextlib.suppress(OSError):
            remove_tree(root)
    ended = pytest_oracle.process_end(res.exit_code, res.signal)
    if not healthy:
        own = _output(check)
        what = (f"did not end within {pytest_oracle.SELF_CHECK_S:g} s" if check.timed_out else
                pytest_oracle.process_end(check.exit_code, check.signal))
        raise HarnessError(
            f"{task.task_id}: the test runner crashed: {pytest_oracle.crash_summary(own) or 'it ' + what}; "
            f"{pinned_versions(settings, task)}. The harness's own one-test run crashes the same way here ({what}), "
            f"so this is the harness's or the environment's failure, not the agent's. Its output ends: "
            f"{pytest_oracle.output_tail(own)}")
    output = _output(res)
    said = pytest_oracle.crash_summary(output)
    return (f"{junit.get('why')}: the test process {ended}" + (f" ({said})" if said else "")
            + "; the harness's own test run passes in this environment, so the code under test ended it. "
            f"Its output ends: {pytest_oracle.output_tail(output, chars=400)}")


def feedback(settings: Settings, cancel: Cancellation, task: Task, task_ws: TaskWorkspace, attempt: int,
             remaining: float) -> tuple[str, ev.Feedback | None]:
    """What the agent is shown after failed attempt ``attempt``, and the ``feedback`` event to
    journal when the visible tests ran (None otherwise).

    Raises:
        Stopped: cancelled while the visible tests ran.
    """
    policy = settings.budget.feedback
    if policy == "none":
        return "", None
    if policy == "pass_fail":
        return f"Attempt {attempt} did not pass the hidden tests.", None
    cmd = task.record.visible_test_cmd
    if not cmd:
        return f"Attempt {attempt} did not pass the hidden tests. (This task has no visible tests.)", None
    env = task_env(settings, task, task_ws.agent_dir, attempt, None)
    argv = bytecode.python_argv(cmd, bytecode_mirror(settings, task).prefix)
    res, facts = sandboxed(settings, cancel, argv, task_ws.agent_dir, env, min(remaining, 60.0), task=task)
    out = (res.stdout or b"")[:FEEDBACK_CAP].decode("utf-8", "replace")
    event = ev.Feedback(task_id=task.task_id, attempt=attempt, policy=policy, visible_tests=ev.ProcessFacts(**facts))
    return f"Attempt {attempt} did not pass the hidden tests. Output of the visible tests:\n{out}", event
