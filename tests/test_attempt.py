"""The outcome of an attempt, as a pure function of its facts: one row per rule."""

from __future__ import annotations

import pytest

from sealbench.attempt import AgentEnd, Grading, classify, final_outcome, must_grade

PASSED, FAILED, ORACLE_TIMED_OUT = Grading(task_pass=True), Grading(task_pass=False), Grading(False, True)


def end(exit_code: int | None = 1, *, timed_out: bool = False, empty: bool = False, capture_timed_out: bool = False,
        rejected: str | None = None) -> AgentEnd:
    return AgentEnd(exit_code=exit_code, timed_out=timed_out, patch_empty=empty,
                    capture_timed_out=capture_timed_out, rejected=rejected)


CASES = [
    # (what happened, facts, grading, probe, result)
    ("agent ran past its deadline", end(None, timed_out=True), PASSED, False, "timeout"),
    ("agent ran past its deadline with an empty patch", end(None, timed_out=True, empty=True), None, False,
     "timeout"),
    ("capturing the workspace ran out of time", end(0, capture_timed_out=True), PASSED, False, "timeout"),
    ("workspace holds what git refuses (the agent's doing)", end(0, rejected="a fifo"), PASSED, False, "fail"),
    ("exit 0 and no change", end(0, empty=True), None, False, "abstain"),
    ("exit 1 and no change: graded, and the unchanged stub fails", end(1, empty=True), FAILED, False, "fail"),
    ("exit 0 and a change the hidden tests pass", end(0), PASSED, False, "pass"),
    ("a crash (exit 1) whose change the hidden tests pass", end(1), PASSED, False, "pass"),
    ("a change the hidden tests fail", end(0), FAILED, False, "fail"),
    ("the oracle ran past the deadline", end(0), ORACLE_TIMED_OUT, False, "timeout"),
    ("no time was left to grade, or grading timed out", end(0), None, False, "timeout"),
    ("killed by a signal, its change graded", end(None), FAILED, False, "fail"),
    ("probe: no change", end(0, empty=True), None, True, "probe_pass"),
    ("probe: a change (never graded)", end(0), None, True, "probe_fail"),
    ("probe: past its deadline", end(None, timed_out=True, empty=True), None, True, "timeout"),
    ("probe: an odd workspace is still the agent's failure", end(0, rejected="a device"), None, True, "fail"),
]


@pytest.mark.parametrize(("what", "facts", "grading", "probe", "result"), CASES, ids=[c[0] for c in CASES])
def test_an_attempt_is_classified_by_its_facts(what: str, facts: AgentEnd, grading: Grading | None, probe: bool,
                                               result: str) -> None:
    assert classify(facts, grading, probe=probe) == result


@pytest.mark.parametrize(("what", "facts", "grading", "probe", "result"), CASES, ids=[c[0] for c in CASES])
def test_the_hidden_tests_run_only_when_their_verdict_decides(what: str, facts: AgentEnd, grading: Grading | None,
                                                              probe: bool, result: str) -> None:
    decided_without = classify(facts, None, probe=probe, graded=False)
    assert must_grade(facts, probe=probe) is (decided_without is None)
    if decided_without is not None:  # grading could not have changed it
        assert decided_without == result == classify(facts, PASSED, probe=probe) == classify(facts, FAILED, probe=probe)


def test_a_probe_result_ends_the_task_as_a_pass_or_a_fail() -> None:
    assert final_outcome("probe_pass").value == "pass" and final_outcome("probe_fail").value == "fail"
    assert final_outcome("timeout").value == "timeout"
