"""The one exception hierarchy of sealbench.

::

    SealbenchError                  exit 1 unless a subclass says otherwise
    +-- UsageError                  exit 2: the command line itself is wrong
    +-- Refusal                     exit 3: no rate emitted (bad input included)
    |   +-- PackError               a task pack or task record is malformed or unsafe
    |   +-- IncompleteScorecard     seed 000: a scorecard or task lacks its controls
    |   +-- ContractError           a scoring contract cannot be locked or is not locked
    |   +-- ScoreRefusal            events cannot be scored under the locked contract
    |   +-- RunRefusal              a run cannot start or resume
    |   +-- RunsIndexError          the local runs index cannot be read or written
    +-- HarnessError                exit 1: the sandbox or grading machinery failed
    +-- VerificationFailed          exit 4: tampering found; carries every discrepancy

Foreign errors (pydantic.ValidationError, OSError, subprocess errors) are translated once,
where they enter, into one of these with the file, key or task id that caused them.
"""

from __future__ import annotations


class SealbenchError(Exception):
    """Base of every error sealbench raises on purpose."""

    exit_code = 1


class UsageError(SealbenchError):
    """The command line is wrong (exit 2)."""

    exit_code = 2


class Refusal(SealbenchError):
    """sealbench refuses to go on; no rate is emitted (exit 3)."""

    exit_code = 3


class PackError(Refusal):
    """A pack, task record or template is malformed, unsafe or does not match its seal."""


class IncompleteScorecard(Refusal):
    """A task or scorecard is missing a control (seed 000's name for the refusal)."""


class ContractError(Refusal):
    """A scoring contract is incomplete, already locked, not locked, or edited after lock."""


class ScoreRefusal(Refusal):
    """Events cannot be scored under the locked contract: no rate emitted."""


class RunRefusal(Refusal):
    """A run cannot start or resume (no sandbox, different contract, ...)."""


class RunsIndexError(Refusal):
    """The local index of runs cannot be read or written (a read-only data directory, ...)."""


class HarnessError(SealbenchError):
    """The harness itself (sandbox, grading, storage) failed: not the agent's fault."""


class VerificationFailed(SealbenchError):
    """A bundle or journal does not verify; ``problems`` lists every discrepancy found."""

    exit_code = 4

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{len(self.problems)} problem(s): " + "; ".join(self.problems[:3]))
