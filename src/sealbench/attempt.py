"""What one attempt's facts mean: a pure classification, tested without a sandbox.

The runner gathers an attempt's facts (how the agent ended, what capturing its patch found,
what grading said) and asks :func:`must_grade` whether the hidden tests run at all, then
:func:`classify` for the attempt's result. Nothing here touches a file, a process or the
journal, so every rule has a row in ``tests/test_attempt.py``.

An attempt's result is an :class:`~sealbench.formats.Outcome` value, or ``probe_pass`` /
``probe_fail`` in the narration probe. A harness failure is never an attempt's result: the
runner records it for the task (``harness_error``) and decides nothing about the agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .formats import Outcome

PROBE_PASS: Final = "probe_pass"
PROBE_FAIL: Final = "probe_fail"


@dataclass(frozen=True)
class AgentEnd:
    """How the agent's attempt ended and what capturing its workspace found."""

    exit_code: int | None
    timed_out: bool
    patch_empty: bool
    capture_timed_out: bool = False
    rejected: str | None = None
    """Why the workspace could not be captured (its own doing: odd files, over a cap)."""


@dataclass(frozen=True)
class Grading:
    """What running the hidden tests said; None stands for grading that never finished
    (no time left before it, or its own deadline)."""

    task_pass: bool
    oracle_timed_out: bool = False


def must_grade(end: AgentEnd, *, probe: bool = False) -> bool:
    """Whether the hidden tests run for this attempt."""
    return classify(end, None, probe=probe, graded=False) is None


def classify(end: AgentEnd, grading: Grading | None, *, probe: bool = False, graded: bool = True) -> str | None:
    """The attempt's result.

    ``graded`` says whether grading was attempted (``grading`` None then means it ran out of
    time); with ``graded=False`` the result is None exactly when grading must decide.
    """
    if end.timed_out or end.capture_timed_out:
        return Outcome.TIMEOUT.value
    if end.rejected is not None:
        # What the workspace holds is the agent's doing: its failure, never a harness error.
        return Outcome.FAIL.value
    if probe:
        return PROBE_PASS if end.patch_empty else PROBE_FAIL
    if end.exit_code == 0 and end.patch_empty:
        return Outcome.ABSTAIN.value
    if not graded:
        return None
    if grading is None:
        return Outcome.TIMEOUT.value
    if grading.task_pass:
        return Outcome.PASS.value
    if grading.oracle_timed_out:
        return Outcome.TIMEOUT.value
    return Outcome.FAIL.value


def final_outcome(result: str) -> Outcome:
    """The task's outcome once an attempt's result ends it."""
    if result == PROBE_PASS:
        return Outcome.PASS
    if result == PROBE_FAIL:
        return Outcome.FAIL
    return Outcome(result)
