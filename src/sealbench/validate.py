"""Oracle validity: prove, before any contract is locked, that each oracle discriminates.

For every task, in the sandbox: the reference solution is graded ``repeat`` times and must
pass every time; the empty change is graded ``repeat`` times and must fail every time; then
each trivial solution (:mod:`sealbench.trivial`: the stub returning None, its first argument,
a constant of the reference's return type; for repository tasks the stub's raise removed) is
graded once and must fail. A task that does not is marked with its reason (reference fails,
empty change passes, flaky, passes a trivial solution) and the evidence, which is written
into the sealed pack, bound to its digest.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import pytest_oracle
from .agents import resolve_agent
from .cancellation import Cancellation
from .contract import DEFAULT_FORBIDDEN
from .errors import PackError, RunRefusal, storage_failure
from .files import model_json, write_atomic
from .formats import Budget, ScoringContract, Validity, ValidityEvidence
from .function_oracle import is_oracle_cmd, parse_summary
from .grading import GradeContext, GradeJob, grade
from .pack import Pack, Task, check_pack
from .progress import Progress
from .sandbox import open_sandbox
from .scratch import sweep_temp_files, temp_dir
from .settings import Settings
from .trivial import trivial_candidates
from .workspace import TaskWorkspace

if TYPE_CHECKING:
    from .environments import BuiltEnv
    from .ray_executor import RayOptions
    from .sandbox import Sandbox


@dataclass(frozen=True)
class _Validation:
    """What every grading of one validation shares."""

    settings: Settings
    cancel: Cancellation

    def grade(self, task: Task, task_ws: TaskWorkspace, attempt: int, patch: bytes, changed: list[str]) -> dict[str, Any]:
        job = GradeJob(task, task_ws, attempt, patch, changed, task.record.wall_clock_s)
        return grade(GradeContext(self.settings, self.cancel), job).payload()


def verdict(reference: list[bool], empty: list[bool],
            trivial: Mapping[str, bool] | None = None) -> tuple[bool, str | None]:
    """The validity of one task from its repeated grades and its trivial solutions' (pure)."""
    reasons = []
    if len(set(reference)) > 1 or len(set(empty)) > 1:
        reasons.append("flaky")
    if not any(reference):
        reasons.append("reference fails")
    if all(empty) and empty:
        reasons.append("empty change passes")
    passed = [name for name, ok in (trivial or {}).items() if ok]
    if passed:
        reasons.append(f"passes a trivial solution ({'; '.join(passed)})")
    return (not reasons, ", ".join(reasons) or None)


def _oracle_summary(ctx: _Validation, graded: dict[str, Any]) -> dict[str, Any]:
    """A function-level oracle's summary line in a grade's stdout; empty without one."""
    digest = (graded.get("oracle") or {}).get("stdout")
    if not digest:
        return {}
    return parse_summary((ctx.settings.run_dir / "blobs" / digest.removeprefix("sha256:")).read_bytes()) or {}


def _why_reference_failed(ctx: _Validation, graded: Mapping[str, Any]) -> str | None:
    """Why one failing grade of the reference failed, in words (see ValidityEvidence.why)."""
    from .blobs import Blobs
    from .show import failed_tests, last_text_line

    before = _why_not_run(graded)
    if before is not None:
        return before
    oracle = graded.get("oracle") or {}
    blobs = Blobs(ctx.settings.run_dir)
    stdout = blobs.read(oracle.get("stdout"))
    parts = _verdicts(graded, failed_tests(stdout))
    err = blobs.read(oracle.get("stderr"))
    output = "\n".join(b.text() for b in (stdout, err) if b is not None)
    setup = _setup_problem(output)
    if setup is not None:
        # Not the reference's fault: the tests could not start (the environment, most often).
        parts.insert(0, setup)
    elif not parts:
        tail = (last_text_line(stdout.text()) if stdout is not None else None) or (
            last_text_line(err.text()) if err is not None else None)
        code = oracle.get("exit_code")
        parts.append(f"the oracle exited {code}" + (f": {tail}" if tail else ""))
    return "; ".join(parts)[:900]


def _why_not_run(graded: Mapping[str, Any]) -> str | None:
    """Why a grade failed before its tests said anything: the patch, or the oracle's clock."""
    if graded.get("forbidden"):
        return "the reference touches forbidden paths: " + ", ".join(map(str, graded["forbidden"][:5]))
    if graded.get("patch_applies_clean") is False:
        return "the reference's patch does not apply to a pristine copy"
    oracle = graded.get("oracle") or {}
    if graded.get("oracle_timed_out") or oracle.get("timed_out"):
        return "the oracle ran out of time"
    return None


def _verdicts(graded: Mapping[str, Any], names: list[str]) -> list[str]:
    """What the grade's report, its failed tests (``names``) and the guard's flags say, in words."""
    junit = graded.get("junit") or {}
    parts = []
    if junit and not junit.get("ok"):
        parts.append(f"JUnit: {junit.get('why')}")
    if names:
        parts.append("failed: " + ", ".join(names[:5]) + (", ..." if len(names) > 5 else ""))
    flags = graded.get("forging_flags") or []
    if flags and graded.get("tests_green"):
        # Green, but the guard saw the code under test reach what decides the verdict.
        details = [str(d) for d in graded.get("forging_detail") or []] or [str(f) for f in flags]
        parts.append("the tests passed, but the guard flagged " + "; ".join(details[:3]))
    return parts


_SETUP_MARKS = ("ModuleNotFoundError", "ImportError", "ERROR collecting", "error during collection",
                "errors during collection", "No module named", "command not found", "No such file or directory")


def _setup_problem(output: str) -> str | None:
    """What stopped the tests from starting (an import or collection error), with the tail of
    the oracle's output, or None when they ran."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    marked = next((line for line in lines if any(m in line for m in _SETUP_MARKS)), None)
    if marked is None:
        return None
    tail = " | ".join(lines[-6:])
    return (f"the tests could not be imported or collected, so the task's environment is likely incomplete "
            f"({marked.strip()[:200]}); the oracle's output ends: {tail[-450:]}")


def _returned(summary: Mapping[str, Any]) -> dict[str, list[str]]:
    returned = summary.get("returned")
    if not isinstance(returned, dict):
        return {}
    return {k: [t for t in v if isinstance(t, str)] for k, v in returned.items() if isinstance(v, list)}


def _trivial_grades(ctx: _Validation, task: Task, task_ws: TaskWorkspace, first: int,
                    returned: Mapping[str, list[str]]) -> dict[str, bool]:
    """Grade each trivial solution once, from the unchanged workspace."""
    texts: dict[str, str] = {}
    for path in sorted(p for p in task.solution.rglob("*.py") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(task.solution).as_posix()
        original = task.pack_workspace / rel
        if original.is_file() and not original.is_symlink():
            texts[rel] = original.read_text(encoding="utf-8", errors="replace")
    candidates = trivial_candidates(texts, function_level=is_oracle_cmd(task.record.oracle_cmd),
                                    returned=returned)
    if not candidates:
        return {}
    task_ws.materialise()
    out: dict[str, bool] = {}
    for i, cand in enumerate(candidates):
        for rel, text in cand.files.items():
            (task_ws.agent_dir / rel).write_text(text, encoding="utf-8")
        changed = task_ws.changes()
        patch = task_ws.capture_patch() if changed else b""
        graded = ctx.grade(task, task_ws, first + i, patch, changed)
        out[cand.name] = bool(graded["task_pass"])
        for rel in cand.files:
            (task_ws.agent_dir / rel).write_text(texts[rel], encoding="utf-8")
    return out


def _validate_task(ctx: _Validation, task: Task, repeat: int) -> ValidityEvidence:
    task_ws = TaskWorkspace(ctx.settings.run_dir / "work" / task.task_id, task.pack_workspace)
    try:
        task_ws.materialise()
        if not task.solution.is_dir():
            return ValidityEvidence(valid=False, reason="no reference solution", reference_passes=[],
                                    empty_change_passes=[])
        if not task.hidden.is_dir() or not any(task.hidden.iterdir()):
            return ValidityEvidence(valid=False, reason="no hidden tests", reference_passes=[],
                                    empty_change_passes=[], why=f"{task.hidden} is missing or empty")
        reference = resolve_agent("reference", "builtin:reference")
        assert reference.builtin is not None
        reference.builtin(task, task_ws.agent_dir, 1)
        changed = task_ws.changes()
        patch = task_ws.capture_patch() if changed else b""
        ref_grades: list[dict[str, Any]] = []
        slowest = 0.0
        for i in range(1, repeat + 1):
            # The whole grade (copy, patch, oracle) is what a run's wall clock pays for grading.
            start = time.monotonic()
            ref_grades.append(ctx.grade(task, task_ws, i, patch, changed))
            slowest = max(slowest, time.monotonic() - start)
        ref = [bool(g["task_pass"]) for g in ref_grades]
        empty = [bool(ctx.grade(task, task_ws, repeat + i, b"", [])["task_pass"]) for i in range(1, repeat + 1)]
        # A task already invalid gains nothing from more grades.
        summary = _oracle_summary(ctx, ref_grades[0])
        trivial = (_trivial_grades(ctx, task, task_ws, 2 * repeat + 1, _returned(summary))
                   if all(ref) and not any(empty) else {})
    except Exception as e:  # the evidence records the harness failure instead of guessing
        if storage_failure(e) is not None or ctx.cancel.cancelled:
            raise  # a full disk or a stop decides nothing about the oracle
        return ValidityEvidence(valid=False, reason=f"harness error: {type(e).__name__}: {e}",
                                reference_passes=[], empty_change_passes=[])
    finally:
        shutil.rmtree(task_ws.root, ignore_errors=True)
    valid, reason = verdict(ref, empty, trivial)
    if not any(ref) and summary.get("reason"):
        # The function-level oracle says why (a result that is not plain data, for instance).
        reason = f"{reason} ({str(summary['reason'])[:300]})"
    failing = next((g for g, ok in zip(ref_grades, ref, strict=True) if not ok), None)
    why = _why_reference_failed(ctx, failing) if failing is not None else None
    return ValidityEvidence(valid=valid, reason=reason, reference_passes=ref, empty_change_passes=empty,
                            trivial_passes=trivial, why=why, reference_grading_s=round(slowest, 3))


class Validator:
    """The grading of one validation on this machine: a scratch folder (removed by
    :meth:`close`) and the settings every task's grades share."""

    def __init__(self, pack: Pack, box: Sandbox, environments: Mapping[str, BuiltEnv]) -> None:
        self.scratch = temp_dir("validate")  # named after this process: a killed validate's is swept by the next
        (self.scratch / "blobs").mkdir()
        contract = ScoringContract(forbidden_paths=list(DEFAULT_FORBIDDEN))
        first = next(iter(pack.tasks.values())).record
        settings = Settings(contract=contract, budget=Budget(max_attempts=1, wall_clock_s=first.wall_clock_s),
                            pack_root=pack.root, run_dir=self.scratch, sandbox=box,
                            agent=resolve_agent("reference", "builtin:reference"), environments=environments)
        self.ctx = _Validation(settings, Cancellation())
        self.pack = pack

    def validate(self, task_id: str, repeat: int) -> ValidityEvidence:
        return _validate_task(self.ctx, self.pack.tasks[task_id], repeat)

    def stop(self, why: str) -> None:
        self.ctx.cancel.cancel(why)

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def _validate_here(pack: Pack, box: Sandbox, environments: Mapping[str, BuiltEnv], *, repeat: int, jobs: int,
                   done: Callable[[str, ValidityEvidence], None]) -> None:
    validator = Validator(pack, box, environments)
    lock = threading.Lock()
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(validator.validate, tid, repeat): tid for tid in pack.tasks}
            with _stop_all_on_failure(validator.ctx, futures):
                for fut in as_completed(futures):
                    ev = fut.result()
                    with lock:
                        done(futures[fut], ev)
    finally:
        validator.close()


@contextlib.contextmanager
def _stop_all_on_failure(ctx: _Validation, futures: Iterable[Future[ValidityEvidence]]) -> Iterator[None]:
    """On any exception (Ctrl-C, SIGTERM, a storage failure): kill the oracles running, drop the
    tasks not started, so that the pool's exit waits for nothing long."""
    try:
        yield
    except BaseException:
        for fut in futures:
            fut.cancel()
        ctx.cancel.cancel("validation stopped")
        raise


def validate_pack(
    root: Path,
    *,
    repeat: int = 3,
    jobs: int = 2,
    sandbox: str = "auto",
    progress: bool | None = None,
    on_task: Callable[[str, ValidityEvidence], None] | None = None,
    ray: RayOptions | None = None,
) -> Validity:
    """Validate every oracle of a sealed pack and record the evidence in its pack.json.

    ``ray``: grade on the nodes of a Ray cluster (``pack validate --executor ray``), ``jobs``
    tasks at once on each.

    Raises:
        PackError, VerificationFailed: the pack is unsealed or does not match its seal.
        RunRefusal: no sandbox.
        OSError, HarnessError: the storage failed (a full disk decides no oracle's validity).
    """
    if repeat < 1:
        raise PackError("--repeat must be at least 1")
    pack: Pack = check_pack(root)
    assert pack.sealed_digest is not None
    missing = pytest_oracle.missing_pytest(task.record.oracle_cmd for task in pack.tasks.values())
    if missing is not None:
        raise RunRefusal(missing)
    sweep_temp_files(pack.root)
    from .environments import require

    environments = require(pack)  # a missing or changed environment would only fail every oracle
    box = open_sandbox(sandbox)
    if environments and box.kind == "none":
        raise RunRefusal("the tasks' environments need the bubblewrap sandbox (--sandbox bubblewrap)")
    evidence: dict[str, ValidityEvidence] = {}
    bar = Progress(len(pack.tasks), 0, progress, f"validate {pack.manifest.name}")

    def done(tid: str, ev: ValidityEvidence) -> None:
        evidence[tid] = ev
        bar.update(tid, "valid" if ev.valid else (ev.reason or "invalid").split(":")[0])
        if on_task is not None:
            on_task(tid, ev)

    try:
        if ray is not None:
            from .ray_executor import validate_on_ray

            # Each node checks the pack, its sandbox and environments before any oracle runs there.
            validate_on_ray(ray, pack, box, environments, repeat=repeat, jobs=jobs, done=done)
        else:
            _validate_here(pack, box, environments, repeat=repeat, jobs=jobs, done=done)
    finally:
        bar.close()
    validity = Validity(pack_sha256=pack.sealed_digest, repeat=repeat, sandbox=box.kind,
                        tasks={tid: evidence[tid] for tid in sorted(evidence)})
    manifest = pack.manifest.model_copy(update={"validity": validity})
    write_atomic(pack.root / "pack.json", model_json(manifest))
    return validity
