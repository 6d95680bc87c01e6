"""show.cause as a table: one row per rule, each a task's events and the words that explain it.

No run, no file: the stories are built from events as the journal would carry them, and
``blobs`` is None (the words quote only the journal's facts).
"""

from __future__ import annotations

import pytest

from sealbench import events as ev
from sealbench.show import cause, grading_words
from sealbench.stories import AttemptStory, TaskStory


def task(outcome: str | None, *attempts: AttemptStory, max_attempts: int | None = 2, error: str | None = None,
         wall: float | None = None) -> TaskStory:
    story = TaskStory("t", started=ev.TaskStarted(max_attempts=max_attempts, wall_clock_s=wall),
                      finished=None if outcome is None else ev.TaskFinished(outcome=outcome, error=error))
    story.attempts = {a.number: a for a in attempts}
    return story


def attempt(n: int = 1, **events: object) -> AttemptStory:
    return AttemptStory(n, **events)  # type: ignore[arg-type]


EXITED_3 = ev.AgentFinished(exit_code=3)
EXITED_0 = ev.AgentFinished(exit_code=0)
FAILED_TESTS = ev.Graded(junit={"ok": False, "why": "2 failed"})
CALL_FAILED = ev.ModelCall(status=502, error="bad gateway")
CALL_OK = ev.ModelCall(status=200)

ROWS = [
    ("passed: the attempt that passed", task("pass", attempt(1), attempt(2)), "passed on attempt 2"),
    ("a command that could not start is a harness error, explained",
     task("harness_error", attempt(1, errors=[ev.HarnessFailed(
         error="sandbox failed to start sh: No such file or directory")])),
     "the agent's command could not start in the sandbox: No such file or directory (recorded as a "
     "harness error, which refuses the rate: check the contract's agent command)"),
    ("a failed endpoint is a harness error, not the agent's",
     task("harness_error", attempt(1, agent=EXITED_3), error="the model endpoint failed: 500"),
     "the declared model endpoint failed, not the agent: the model endpoint failed: 500 (recorded as a harness "
     "error, which refuses the rate: check the endpoint, then rerun under a new run_id)"),
    ("any other harness error quotes the first error recorded",
     task("harness_error", attempt(1, errors=[ev.HarnessFailed(error="disk full")])),
     "the harness failed, not the agent: disk full"),
    ("a harness error without a message says so", task("harness_error"),
     "the harness failed, not the agent: no message recorded"),
    ("an interrupted last attempt is an infrastructure error",
     task("infra_error", attempt(2, interrupted=ev.AttemptInterrupted(reason="node lost"))),
     "not decided by the agent: attempt 2 of 2 was interrupted (node lost), and no attempt or time remained; "
     "the attempt stays used (an infrastructure error, which refuses the rate: rerun under a new run_id)"),
    ("unfinished, interrupted", task(None, attempt(1, interrupted=ev.AttemptInterrupted(reason="stopped"))),
     "not finished: attempt 1 was interrupted (stopped)"),
    ("unfinished, never reached", task(None),
     "not finished: the run stopped before this task ended (continue it with run --resume)"),
    ("a result without an attempt", task("fail"), "fail without an attempt"),
    ("timed out while grading", task("timeout", attempt(1, graded=ev.Graded(oracle_timed_out=True))),
     "the task's wall-clock cap ran out during grading"),
    ("timed out while the agent ran", task("timeout", attempt(1, agent=ev.AgentFinished(timed_out=True))),
     "the task's wall-clock cap ran out while the agent ran"),
    ("timed out in between", task("timeout", attempt(1), wall=30.0), "the task's wall-clock cap of 30 s ran out"),
    ("a refused patch comes before the grade",
     task("fail", attempt(1, patch=ev.PatchCaptured(rejected="a symlink out"), graded=FAILED_TESTS)),
     "the workspace was refused: a symlink out (after 1 of 2 attempts)"),
    ("a workdir refused at copy-back", task("fail", attempt(1, agent=ev.AgentFinished(workdir_rejected="too big"))),
     "the workspace was refused: too big (after 1 of 2 attempts)"),
    ("abstained after exiting 0", task("abstain", attempt(1, agent=EXITED_0)),
     "the agent exited 0 without changing anything (after 1 of 2 attempts)"),
    ("an empty patch after exit 3 gives both facts",
     task("fail", attempt(1, agent=EXITED_3, patch=ev.PatchCaptured(empty=True))),
     "the agent changed nothing; the agent ended with exit code 3 (after 1 of 2 attempts)"),
    ("graded: the grade, and the agent's own failure beside it",
     task("fail", attempt(1, agent=EXITED_3, graded=FAILED_TESTS), max_attempts=None),
     "the hidden tests failed: 2 failed; the agent ended with exit code 3 (after 1 attempts)"),
    ("graded after a clean exit: the grade alone", task("fail", attempt(1, agent=EXITED_0, graded=FAILED_TESTS)),
     "the hidden tests failed: 2 failed (after 1 of 2 attempts)"),
    ("not graded: how the agent ended", task("fail", attempt(1, agent=EXITED_3)),
     "the agent ended with exit code 3 (after 1 of 2 attempts)"),
    ("failed model calls are the infrastructure's, said first",
     task("fail", attempt(1, agent=EXITED_3, calls=[CALL_OK, CALL_FAILED])),
     "the model endpoint failed 1 of the attempt's 2 call(s) (last: bad gateway): the infrastructure's failure, "
     "not the agent's; the agent ended with exit code 3 (after 1 of 2 attempts)"),
]


@pytest.mark.parametrize(("story", "words"), [pytest.param(s, w, id=name) for name, s, w in ROWS])
def test_cause_says_why_the_task_ended(story: TaskStory, words: str) -> None:
    assert cause(story, None) == words


GRADES = [
    ("forbidden paths first", ev.Graded(forbidden=["conftest.py"], oracle_timed_out=True),
     "the patch touched forbidden paths: conftest.py"),
    ("a patch that does not apply", ev.Graded(patch_applies_clean=False, apply_message="error: patch failed\nhunk 1"),
     "the patch did not apply to a pristine copy: hunk 1"),
    ("the oracle out of time", ev.Graded(oracle_timed_out=True), "the hidden tests ran out of the task's time"),
    ("a forged pass not counted", ev.Graded(flagged_pass="not_counted", forging_flags=["exit rewritten"]),
     "the hidden tests passed while the test process was seen forging: exit rewritten"),
    ("the JUnit report's reason", ev.Graded(junit={"ok": False}), "the hidden tests failed: the JUnit report says so"),
    ("a JUnit failure and an oracle killed", ev.Graded(junit={"ok": False, "why": "1 error"},
                                                       oracle=ev.ProcessFacts(exit_code=None, signal=9)),
     "the hidden tests failed: 1 error; the oracle was killed by signal 9"),
    ("no JUnit: the oracle's exit", ev.Graded(oracle=ev.ProcessFacts(exit_code=2)),
     "the hidden tests failed (the oracle exited with code 2)"),
    ("nothing to say but the fact", ev.Graded(oracle=ev.ProcessFacts(exit_code=0)), "the hidden tests did not pass"),
]


@pytest.mark.parametrize(("graded", "words"), [pytest.param(g, w, id=name) for name, g, w in GRADES])
def test_grading_words_say_why_a_grade_did_not_pass(graded: ev.Graded, words: str) -> None:
    assert grading_words(graded, None) == words
