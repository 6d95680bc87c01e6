"""The closed words a run's ends are said in: how a task ended, what an attempt's result was,
what a view says of a task the run did not decide, and the state of a run in the runs index.

Each is a :class:`~enum.StrEnum`: a member is equal to, hashes as, and serialises to the very
string it replaced, so no journal line or derived byte changes. A word is spelled here once;
every module imports it (``tests/test_events.py`` checks that none spells one by hand).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

__all__ = ["SHOWN_OUTCOMES", "AttemptResult", "Outcome", "RunState", "TaskState"]


class Outcome(StrEnum):
    """How a task ended. harness_error is the harness's failure, not the agent's; infra_error
    says the agent did not end the task's last attempt (a crash, a stop, a full disk, a lost
    node ended it, and no attempt or time remained), derivation version 5 on. Both refuse the rate."""

    PASS = "pass"
    FAIL = "fail"
    ABSTAIN = "abstain"
    TIMEOUT = "timeout"
    HARNESS_ERROR = "harness_error"
    INFRA_ERROR = "infra_error"


class AttemptResult(StrEnum):
    """What attempt_finished says of one attempt; the probe's attempts end as probe_pass (the
    workspace left unchanged) or probe_fail."""

    PASS = "pass"
    FAIL = "fail"
    ABSTAIN = "abstain"
    TIMEOUT = "timeout"
    PROBE_PASS = "probe_pass"
    PROBE_FAIL = "probe_fail"


class TaskState(StrEnum):
    """What is said of a task (or an attempt) the run did not decide: stopped while it ran
    (interrupted), or with no end in the journal yet (unfinished)."""

    INTERRUPTED = "interrupted"
    UNFINISHED = "unfinished"


class RunState(StrEnum):
    """A run's state in the runs index."""

    CLAIMED = "claimed"
    """Recorded before the journal exists; ``started`` once its first event is written."""
    STARTED = "started"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    MISSING = "missing"


SHOWN_OUTCOMES: Final[tuple[str, ...]] = (*(o.value for o in Outcome), TaskState.UNFINISHED.value)
"""The outcomes ``show --outcome`` selects tasks by, in the order a summary counts them: each
:class:`Outcome`, and unfinished (plain strings: argparse names its choices by their ``repr``)."""
