"""Grading: an attempt's patch judged by the hidden tests in a pristine copy, JUnit reports
read as hostile input, and the feedback shown before the next attempt.

Nothing here writes the journal: :func:`grade` returns one grading's ``graded`` event and
:func:`feedback` the text and event of one feedback; the caller (the run's coordinator, or
``pack validate``) decides what to record. What grading needs of the run is passed as one
value, a :class:`GradeContext`: the run-wide :class:`~sealbench.settings.Settings` and the
:class:`~sealbench.cancellation.Cancellation` that stops its sandboxed commands at once. An
attempt's oracle set up ahead has one owner, a :class:`HeldOracle` the attempt enters.
"""

from __future__ import annotations

import contextlib
import posixpath
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from . import bytecode, pytest_oracle
from . import events as ev
from .agentfs import TreeCaps, exists_at, read_regular, remove_entry, remove_tree
from .blobs import store_bytes
from .cancellation import Cancellation
from .contract import flagged_pass_counts
from .digest import same_digest, tree_digest
from .errors import HarnessError
from .function_oracle import is_oracle_cmd
from .pack import Task
from .sandbox import Prepared, Sandbox, SandboxResult, SandboxSpec
from .sandbox import command_path as sandbox_path
from .settings import Settings
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

JUNIT_REPORT_CAP = 16 * 2**20

FEEDBACK_CAP = 16 * 1024

PRIVATE_CAPS = TreeCaps(max_entries=1000, max_bytes=4 * JUNIT_REPORT_CAP)
"""Quota and caps of a harness-private folder bound writable into the grading sandbox (the
guarded pytest's report and record): the code under test can write there too."""


def private_caps(workspace: TreeCaps) -> TreeCaps:
    """:data:`PRIVATE_CAPS`, its quota no larger than the workspace's: a contract that sizes its
    sandboxes down for many model-bound agents at once sizes this folder with them."""
    return replace(PRIVATE_CAPS, max_bytes=min(PRIVATE_CAPS.max_bytes, workspace.max_bytes))


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


class HeldOracle:
    """The one owner of an attempt's oracle set up ahead: entered for the attempt, it sets the
    oracle up at most once (:meth:`set_up`, see :func:`prepare_oracle`), :func:`grade` takes it
    to start it (:meth:`take`), and leaving closes it, once, whether it ran or not, so that
    nothing of it outlives the attempt."""

    def __init__(self, settings: Settings, task: Task, task_ws: TaskWorkspace, attempt: int) -> None:
        self._where = (settings, task, task_ws, attempt)
        self._asked = False
        self._ahead: OracleAhead | None = None

    def set_up(self, remaining: float) -> None:
        """Begin setting the oracle up, with ``remaining`` seconds left; only the first call does."""
        if not self._asked:
            self._asked = True
            self._ahead = prepare_oracle(*self._where, remaining)

    @property
    def made_grade_dir(self) -> bool:
        """Whether the set-up made the grading directory (empty, for :func:`grade` to fill)."""
        return self._ahead is not None

    def take(self) -> Prepared | None:
        """The oracle held at its gate (see :meth:`OracleAhead.take`); the caller closes it."""
        return self._ahead.take() if self._ahead is not None else None

    def __enter__(self) -> HeldOracle:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ahead is not None:
            self._ahead.close()  # never taken (not graded, or not in time) or already closed by its taker


@dataclass(frozen=True)
class GradeContext:
    """What grading needs of the run (or of ``pack validate``), passed as one value: the
    run-wide settings, and the cancellation that stops its sandboxed commands at once."""

    settings: Settings
    cancel: Cancellation


@dataclass(frozen=True)
class GradeJob:
    """One grading: the attempt's captured patch, the paths it changed, and the time that remains."""

    task: Task
    task_ws: TaskWorkspace
    attempt: int
    patch: bytes
    changed: Sequence[str]
    remaining: float

    @property
    def grade_dir(self) -> Path:
        """The grading copy: a new directory, never the agent's."""
        return self.task_ws.root / f"grade-{self.attempt}"


@dataclass(frozen=True)
class OracleRun:
    """What running the hidden tests said: whether they are green, and the oracle's fields of
    the ``graded`` event (a field that does not apply stays None, and out of the line)."""

    green: bool
    oracle: dict[str, Any] | None = None
    oracle_guard: str | None = None
    repo_install: dict[str, Any] | None = None
    junit: dict[str, Any] | None = None
    oracle_ignored: list[str] | None = None
    forging_flags: list[str] | None = None
    forging_detail: list[str] | None = None
    oracle_timed_out: bool | None = None

    def fields(self) -> dict[str, Any]:
        return ev.present(oracle=self.oracle, oracle_guard=self.oracle_guard, repo_install=self.repo_install,
                          junit=self.junit, oracle_ignored=self.oracle_ignored, forging_flags=self.forging_flags,
                          forging_detail=self.forging_detail, oracle_timed_out=self.oracle_timed_out)


def task_verdict(*, green: bool, applies: bool, forbidden: Sequence[str], flagged: bool,
                 flagged_counts: bool) -> tuple[bool, str | None]:
    """Whether the task passes, and what a flagged green run's pass is (``counted`` or
    ``not_counted``; None unless the run is both flagged and green)."""
    # In-process forging cannot be prevented in repository tests, only flagged: the contract
    # decides whether a flagged pass counts (by default it does not).
    counted = not flagged or flagged_counts
    flagged_pass = ("counted" if counted else "not_counted") if flagged and green else None
    return green and applies and not forbidden and counted, flagged_pass


def grade(ctx: GradeContext, job: GradeJob, held: HeldOracle | None = None) -> ev.Graded:
    """Grade one attempt in a new directory; never in the agent's. Returns the ``graded`` event.

    ``held``: the attempt's oracle set up ahead, started here when the hidden tests run (its
    owner closes it).

    Raises:
        HarnessError: the hidden tests changed under the run, or the harness failed.
        Stopped: cancelled while a guarded oracle ran.
        subprocess.TimeoutExpired: applying the patch ran out of the time that remains.
    """
    settings, task, grade_dir = ctx.settings, job.task, job.grade_dir
    forbidden = _forbidden(settings, job)
    applies, apply_msg = _grading_copy(job, made=held is not None and held.made_grade_dir)
    # Bytecode the patch carries (the copy holds none of the pack's) runs under the name it was
    # compiled with: forbidden, whatever the contract lists.
    forbidden += [p for p in job.changed if bytecode.is_bytecode(p) and p not in forbidden and exists_at(grade_dir, p)]
    run = _run_oracle(ctx, job, held) if applies and not forbidden else OracleRun(green=False)
    passed, flagged_pass = task_verdict(green=run.green, applies=applies, forbidden=forbidden,
                                        flagged=bool(run.forging_flags),
                                        flagged_counts=flagged_pass_counts(settings.contract))
    if not settings.keep_work:
        # The code under test wrote in it: removed without recursion, whatever its depth.
        with contextlib.suppress(OSError):
            remove_tree(grade_dir)
            remove_tree(job.task_ws.root / f"oracle-{job.attempt}")
            remove_tree(job.task_ws.root / f"install-{job.attempt}")
    return ev.Graded(task_id=task.task_id, attempt=job.attempt, patch_applies_clean=applies, forbidden=forbidden,
                     no_forbidden_path=not forbidden, tests_green=run.green,
                     **ev.present(apply_message=apply_msg[:2000] if apply_msg else None), **run.fields(),
                     **ev.present(flagged_pass=flagged_pass), task_pass=passed)


def _forbidden(settings: Settings, job: GradeJob) -> list[str]:
    """The changed paths the contract forbids, the hidden tests' included, and those that shadow
    a module where nobody watches the oracle's imports."""
    task = job.task
    hidden_paths = task.hidden_paths()
    # A file the test patch deletes is one of its files too: reset (removed) at grading.
    forbidden = forbidden_hits(job.changed, settings.contract.forbidden_paths or [],
                               [*hidden_paths, *task.record.deleted_test_files],
                               reset=task.record.test_files == "reset")
    if not pytest_oracle.is_guarded(task.record.oracle_cmd) and not is_oracle_cmd(task.record.oracle_cmd):
        # sealbench-pytest's guard sees a shadowed module itself (flag module_shadowed), and the
        # function-level oracle runs isolated (python -I, -P: no working directory on sys.path);
        # a script oracle, or pytest run by the oracle itself, has nobody watching its imports.
        forbidden += [p for p in module_shadows(job.changed, task.pack_workspace, job.task_ws.agent_dir, hidden_paths, task.record.oracle_cmd)
                      if p not in forbidden]
    return forbidden


def _grading_copy(job: GradeJob, *, made: bool) -> tuple[bool, str]:
    """The pack's workspace copied to the grading directory (``made`` empty by the oracle's
    set-up) and the patch applied to it: whether it applied, and what applying said."""
    grade_dir = job.grade_dir
    # Without the pack's bytecode: Python would run a stale or planted .pyc as the pack's code.
    if not made:
        remove_tree(grade_dir)
        copy_tree(job.task.pack_workspace, grade_dir, ignore=bytecode.ignore_bytecode)
    else:
        copy_tree(job.task.pack_workspace, grade_dir, into=True, ignore=bytecode.ignore_bytecode)
    return apply_patch(grade_dir, job.patch, timeout_s=job.remaining)


def _run_oracle(ctx: GradeContext, job: GradeJob, held: HeldOracle | None) -> OracleRun:
    """The hidden tests over the patched grading copy, and the oracle run on it."""
    task, grade_dir = job.task, job.grade_dir
    # The pack could change under a long run: grade only against the sealed tests.
    if not same_digest(task.record.hidden_tests_sha256, tree_digest(task.hidden, ctx.settings.pack_root)):
        raise HarnessError(f"{task.task_id}: hidden tests no longer match hidden_tests_sha256")
    for rel in task.record.deleted_test_files:
        remove_entry(grade_dir, rel)  # never through a link the patch put on the way
    overlay(task.hidden, grade_dir)
    if pytest_oracle.is_guarded(task.record.oracle_cmd):
        return grade_guarded(ctx, job)
    return _run_script_oracle(ctx.settings, job, held)


def _run_script_oracle(settings: Settings, job: GradeJob, held: HeldOracle | None) -> OracleRun:
    """An oracle of the task's own (a script, or pytest it runs itself): its exit decides, and
    its JUnit report too when the task names one."""
    task, grade_dir, remaining = job.task, job.grade_dir, job.remaining
    if task.record.junit_xml:
        remove_planted_report(grade_dir, task.record.junit_xml)
    prepared = held.take() if held is not None else None
    if prepared is not None:
        try:
            res = prepared.start(remaining)
        finally:
            prepared.close()
    else:
        res = settings.sandbox.run(_oracle_spec(settings, task, grade_dir, job.attempt, remaining))
    facts = process_facts(settings, res)
    rule = task.record.decided_by
    green = pytest_oracle.exit_passes(res.exit_code, rule if task.record.junit_xml else "all") and not res.timed_out
    verdict = None
    if task.record.junit_xml:
        verdict = junit_verdict(grade_dir, task.record.junit_xml, task.record.required_tests, rule)
        green = green and bool(verdict["ok"])
    return OracleRun(green=green, oracle=facts, junit=verdict, oracle_timed_out=res.timed_out)


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


class Installed(NamedTuple):
    """What installing the grading copy did: the folder to bind read-only for the oracle (None
    when there was nothing to install, or the install failed), the install's facts (None when
    there was nothing to install), and the time left."""

    folder: Path | None
    facts: dict[str, Any] | None
    remaining: float


def install_repository(ctx: GradeContext, job: GradeJob) -> Installed:
    """Install the grading copy by its own build backend, in the sandbox (see
    :mod:`sealbench.repo_install`), when its environment says so; its folder's ``site/`` holds
    the metadata. A failed install is the candidate's failure, since the backend and its build
    are the candidate's code.
    """
    settings, task = ctx.settings, job.task
    spec = task.record.environment
    if spec is None or spec.install != "editable":
        return Installed(None, None, job.remaining)
    out = job.task_ws.root / f"install-{job.attempt}"
    remove_tree(out)
    out.mkdir()
    env = task_env(settings, task, job.grade_dir, job.attempt, None, oracle=True)
    res, facts = sandboxed(settings, ctx.cancel, ["python", "-P", "-s", str(INSTALL_FILE), str(out)], job.grade_dir,
                           env, job.remaining, (INSTALL_FILE,), (out,), task=task)
    if res.exit_code != 0 or res.timed_out:
        return Installed(None, facts, 0.0)
    return Installed(out, facts, max(0.0, job.remaining - res.elapsed_s))


def grade_guarded(ctx: GradeContext, job: GradeJob) -> OracleRun:
    """Run a ``sealbench-pytest`` oracle (see :mod:`sealbench.pytest_oracle`): its facts, JUnit
    verdict and forging flags, and whether the tests are green."""
    settings, task, grade_dir = ctx.settings, job.task, job.grade_dir
    installed = install_repository(ctx, job)
    if installed.facts is not None and installed.folder is None:
        return OracleRun(green=False, repo_install=installed.facts)
    private = job.task_ws.root / f"oracle-{job.attempt}"
    remove_tree(private)
    owned = (set(job.task_ws.base) - set(job.changed)) | set(task.hidden_paths())
    # The installed metadata joins the import roots on sys.path through pytest, once the guard watches.
    cmd = task.record.oracle_cmd if installed.folder is None else with_pythonpath(task.record.oracle_cmd,
                                                                                   str(installed.folder / "site"))
    try:
        guarded = pytest_oracle.prepare(private, cmd, owned)
    except ValueError as e:
        raise HarnessError(f"{task.task_id}: oracle_cmd: {e}") from None
    env = {**task_env(settings, task, grade_dir, job.attempt, None, oracle=True), **guarded.env}
    argv = bytecode.python_argv(guarded.argv, bytecode_mirror(settings, task).prefix)
    readonly = (*guarded.readonly, *((installed.folder,) if installed.folder is not None else ()))
    res, facts = sandboxed(settings, ctx.cancel, argv, grade_dir, env, installed.remaining, readonly,
                           guarded.writable, task=task)
    rule = task.record.decided_by
    verdict = pytest_oracle.read_verdict(guarded, task.record.required_tests, res.exit_code, rule)
    junit = verdict.junit
    if pytest_oracle.crashed(res.exit_code, res.timed_out, verdict.junit):
        junit = {**verdict.junit, "why": whose_crash(ctx, job, res, verdict.junit)}
    green = pytest_oracle.exit_passes(res.exit_code, rule) and not res.timed_out and bool(verdict.junit["ok"])
    return OracleRun(green=green, oracle=facts, oracle_guard=pytest_oracle.GUARD_LABEL, repo_install=installed.facts,
                     junit=junit, oracle_ignored=verdict.ignored or None, forging_flags=verdict.flags or None,
                     forging_detail=verdict.details if verdict.flags else None, oracle_timed_out=res.timed_out)


def _output(res: SandboxResult) -> str:
    return b"\n".join(b for b in (res.stdout, res.stderr) if b).decode("utf-8", "replace")


def pinned_versions(settings: Settings, task: Task) -> str:
    """Which pytest and pluggy the task's oracle runs on, in words."""
    environment = environment_of(settings, task)
    if environment is None:
        return "it runs on sealbench's own Python"
    pins = [p.replace("==", " ") for p in environment.packages if p.lower().split("==")[0] in ("pytest", "pluggy")]
    return f"the environment pins {' and '.join(sorted(pins, reverse=True)) or 'no pytest'}"


def whose_crash(ctx: GradeContext, job: GradeJob, res: SandboxResult, junit: Mapping[str, Any]) -> str:
    """A guarded run that crashed (:func:`pytest_oracle.crashed`): the harness's own test run,
    in the same environment with nothing of the candidate's, says whose crash it was.

    Returns the JUnit verdict's why when the harness's run passes (the candidate's code ended
    the run: the agent's failure, told with the tail of the run's output).

    Raises:
        HarnessError: the harness's run crashes too: the guard or the environment is broken,
            never the agent's doing; the message says how, with the tail of the output.
        Stopped: cancelled.
    """
    settings, task, attempt = ctx.settings, job.task, job.attempt
    root = job.task_ws.root / f"self-check-{attempt}"
    remove_tree(root)
    try:
        guarded, workdir = pytest_oracle.prepare_self_check(root)
        env = {**task_env(settings, task, workdir, attempt, None, oracle=True), **guarded.env}
        check, _facts = sandboxed(settings, ctx.cancel, guarded.argv, workdir, env, pytest_oracle.SELF_CHECK_S,
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


def feedback(ctx: GradeContext, task: Task, task_ws: TaskWorkspace, attempt: int,
             remaining: float) -> tuple[str, ev.Feedback | None]:
    """What the agent is shown after failed attempt ``attempt``, and the ``feedback`` event to
    journal when the visible tests ran (None otherwise).

    Raises:
        Stopped: cancelled while the visible tests ran.
    """
    settings = ctx.settings
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
    res, facts = sandboxed(settings, ctx.cancel, argv, task_ws.agent_dir, env, min(remaining, 60.0), task=task)
    out = (res.stdout or b"")[:FEEDBACK_CAP].decode("utf-8", "replace")
    event = ev.Feedback(task_id=task.task_id, attempt=attempt, policy=policy, visible_tests=ev.ProcessFacts(**facts))
    return f"Attempt {attempt} did not pass the hidden tests. Output of the visible tests:\n{out}", event
