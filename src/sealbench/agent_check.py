"""``sealbench agent check CONTRACT [--task ID]``: run the agent once, before anything counts.

A preflight of the whole setup, not only of the command (:mod:`sealbench.preflight`): the
agent runs once, on one task, in the same sandbox and through the same model gateway a run
would use, in a scratch directory that is removed afterwards. Nothing of it is ever counted:
the contract file is not touched (it may be unlocked), no run_id is spent, the machine's runs
index never hears of it. What it tells: did the command start in the sandbox, how many model
calls the gateway forwarded and how many succeeded, did the agent leave a patch, its exit code
and the last line of its stderr, and what the hidden tests said of the patch.

It works by locking a copy of the contract for that one task and one attempt, under a run_id
of its own, and running it with the ordinary runner against a scratch runs index.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from . import events as ev
from . import scratch
from .blobs import Blobs
from .contract import UNSPECIFIED, load_contract, lock_contract, pack_path
from .errors import ContractError
from .files import model_json, write_atomic
from .formats import AccessClass, Controls
from .outcomes import Outcome
from .pack import check_pack
from .runner import RunOptions, execute
from .show import Shown, agent_words, cause, inert, last_text_line, not_started, read_run
from .stories import AttemptStory


@dataclass(frozen=True)
class CheckResult:
    """What one check found (see the module docstring); ``ok`` when the setup works."""

    task_id: str
    started: bool
    exit_code: int | None
    stderr_tail: str | None
    calls: int
    answered: int
    refused: int
    failed_upstream: int
    endpoints: bool
    patch_files: int
    passed: bool | None
    why: str

    @property
    def ok(self) -> bool:
        """The command started, exited 0, and (with endpoints) reached its model."""
        reached = not self.endpoints or (self.answered > 0 and self.failed_upstream == 0)
        return self.started and self.exit_code == 0 and reached

    def lines(self) -> list[str]:
        model = (f"{self.calls} forwarded or refused; {self.answered} answered, {self.refused} refused by the "
                 f"gateway, {self.failed_upstream} failed upstream" if self.endpoints
                 else "none declared (the agent has no network)")
        verdict = {True: "passed", False: "failed", None: "not run"}[self.passed]
        out = [
            f"agent check on {self.task_id} (nothing is recorded or counted):",
            f"  started in the sandbox: {'yes' if self.started else 'no'}",
            f"  exit code:              {self.exit_code if self.exit_code is not None else 'none'}",
            f"  last stderr line:       {inert(self.stderr_tail) if self.stderr_tail else '(none)'}",
            f"  model calls:            {model}",
            f"  patch:                  {f'{self.patch_files} file(s) changed' if self.patch_files else 'empty'}",
            f"  hidden tests:           {verdict}",
            f"  in words:               {self.why}",
        ]
        if self.ok:
            out.append("the setup works: lock the contract and run it")
        elif not self.started:
            out.append("the agent's command did not start: check the command and its --agent-mount paths")
        elif self.endpoints and (self.answered == 0 or self.failed_upstream):
            out.append("the agent did not reach its model: check model_endpoints (base_url, models, key_env) "
                       "and that the upstream answers")
        else:
            out.append("the agent exited non-zero: its last stderr line above says why")
        return out


def check_agent(contract_file: Path, task_id: str | None = None, *, sandbox: str = "auto",
                pack: Path | None = None) -> CheckResult:
    """Run the contract's agent once on ``task_id`` (default: its first task) in scratch.

    Raises:
        ContractError: no agent or no pack in the contract, or an unknown task.
        RunRefusal: what ``run`` refuses before its first line (a program the sandbox cannot
            see, an unset key variable, no sandbox).
        PackError, VerificationFailed: the pack does not match its seal.
    """
    contract = load_contract(contract_file)
    if contract.agent is None or contract.budget is None or contract.pack is None:
        raise ContractError(f"{contract_file}: needs an agent, a budget and a pack to check (see `contract new`)")
    tid = task_id or contract.task_ids[0]
    if tid not in contract.task_ids:
        raise ContractError(f"task {tid!r} is not in {contract_file}'s denominator ({', '.join(contract.task_ids[:5])}"
                            f"{', ...' if len(contract.task_ids) > 5 else ''})")
    root = (pack or pack_path(contract, contract_file)).resolve()
    sealed = check_pack(root, [tid])
    work = scratch.temp_dir("agentcheck")
    try:
        copy = contract.model_copy(update={
            "task_ids": [tid], "run_id": None, "locked_at": None, "contract_sha256": None,
            "budget": contract.budget.model_copy(update={"max_attempts": 1}),
            "controls": Controls(narration_probe=None, oracle_validity="unavailable"),
            "access_class": _checked_access(contract.access_class),
            "pack": contract.pack.model_copy(update={"path": str(root)}),
        })
        locked = lock_contract(copy, f"agent-check-{secrets.token_hex(4)}", datetime.now(UTC), sealed)
        file = work / "contract.json"
        write_atomic(file, model_json(locked))
        execute(file, work / "run", RunOptions(sandbox=sandbox, progress=False, jobs=1,
                                               runs_index=work / "index"))
        return _result(read_run(work / "run"), tid, bool(contract.model_endpoints))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _checked_access(access: AccessClass | None) -> AccessClass:
    """The contract's access class, with what the lock needs and a draft may leave unspecified."""
    given = access or AccessClass(host="agent check", model_access="agent check")
    update = {k: "agent check" for k in ("host", "model_access") if getattr(given, k) in UNSPECIFIED}
    return given.model_copy(update=update)


def call_counts(calls: Sequence[ev.ModelCall]) -> tuple[int, int, int]:
    """(answered, refused by the gateway, failed by the upstream) among an attempt's model calls."""
    refused = sum(1 for c in calls if c.refused is not None)
    failed = sum(1 for c in calls if c.refused is None and (c.status is None or c.status >= 500 or c.status == 429))
    answered = sum(1 for c in calls if c.refused is None and c.status is not None and c.status < 400)
    return answered, refused, failed


def _stderr_tail(agent: ev.AgentFinished | None, blobs: Blobs) -> str | None:
    blob = blobs.read(agent.stderr) if agent is not None and agent.stderr is not None else None
    return last_text_line(blob.data.decode("utf-8", "replace")) if blob is not None else None


def _result(shown: Shown, tid: str, endpoints: bool) -> CheckResult:
    story = shown.tasks[tid]
    attempt = story.attempts.get(1) or AttemptStory(1)
    agent = attempt.agent
    # A command the sandbox could not exec leaves no agent_finished, only a harness error.
    started = agent is not None and not not_started(attempt)
    answered, refused, failed = call_counts(attempt.calls)
    patch, graded = attempt.patch, attempt.graded
    why = cause(story, shown.blobs) if story.finished is not None and story.finished.outcome != Outcome.PASS else (
        agent_words(agent, shown.blobs) if agent is not None else "the agent did not run")
    return CheckResult(task_id=tid, started=started, exit_code=agent.exit_code if agent is not None else None,
                       stderr_tail=_stderr_tail(agent, shown.blobs), calls=len(attempt.calls), answered=answered,
                       refused=refused, failed_upstream=failed, endpoints=endpoints,
                       patch_files=(patch.changed_count or 0) if patch is not None and not patch.empty else 0,
                       passed=bool(graded.task_pass) if graded is not None else None, why=why)
