"""The one exception hierarchy of sealbench.

::

    SealbenchError                  exit 1 unless a subclass says otherwise
    +-- UsageError                  exit 2: the command line itself is wrong
    +-- Refusal                     exit 3: no rate emitted (bad input included)
    |   +-- PackError               a task pack or task record is malformed or unsafe
    |   +-- IncompleteScorecard     seed 000: a scorecard or task lacks its controls
    |   +-- ContractError           a scoring contract cannot be locked or is not locked
    |   +-- ScoreRefusal            events cannot be scored under the locked contract
    |   +-- RunRefusal              a run cannot start or resume (another writer included)
    |   |   +-- EnvironmentRefused  a task's environment is missing, changed or cannot be built
    |   +-- RunsIndexError          the local runs index cannot be read or written
    |   +-- StorageError            the harness's own storage failed: nothing was decided
    |   +-- NotABundle              verify was given a run directory: bundle it first
    +-- HarnessError                exit 1: the sandbox or grading machinery failed
    +-- VerificationFailed          exit 4: tampering found; carries every discrepancy

    KeyboardInterrupt
    +-- Terminated                  SIGTERM (exit 143), handled wherever Ctrl-C is (exit 130)

Foreign errors (pydantic.ValidationError, OSError, subprocess errors) are translated once,
where they enter, into one of these with the file, key or task id that caused them. An
OSError that says the storage itself failed (:data:`STORAGE_ERRNOS`) becomes a
:class:`StorageError` wherever it enters.
"""

from __future__ import annotations

import errno
import os

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
"""Errors of the storage itself (full, over quota, failing, read-only), not of what is stored."""


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


class EnvironmentRefused(RunRefusal):
    """A task's environment is not built, changed since it was built, or cannot be built here."""


class RunsIndexError(Refusal):
    """The local index of runs cannot be read or written (a read-only data directory, ...)."""


class StorageError(Refusal):
    """The harness's own storage failed (disk full, quota, I/O error, read-only file system).

    Infrastructure, not the agent and not the harness's logic: what was being done is left
    undecided (no task outcome is written), and the command can be repeated, or the run
    resumed, once the storage works again.
    """


def storage_failure(exc: BaseException) -> OSError | None:
    """The OSError of the storage itself behind ``exc`` (its cause or context), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in STORAGE_ERRNOS:
            return current
        current = current.__cause__ or current.__context__
    return None


def describe_storage_failure(err: OSError) -> str:
    """One line: what failed and where (``No space left on device (runs/x/blobs/ab12)``)."""
    what = err.strerror or os.strerror(err.errno or 0)
    where = f" ({err.filename})" if err.filename else ""
    return f"{what}{where}"


class NotABundle(Refusal):
    """``verify`` was given a run directory: it must be bundled first (nothing is recorded)."""


class HarnessError(SealbenchError):
    """The harness itself (sandbox, grading, storage) failed: not the agent's fault."""


class VerificationFailed(SealbenchError):
    """A bundle or journal does not verify; ``problems`` lists every discrepancy found."""

    exit_code = 4

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{len(self.problems)} problem(s): " + "; ".join(self.problems[:3]))


class MadeByNewerRelease(VerificationFailed):
    """A bundle made by a newer release: this one cannot re-derive it, which says nothing about
    tampering. Exit 4, like any bundle that does not verify."""


class Terminated(KeyboardInterrupt):
    """SIGTERM received: stop as Ctrl-C does (recorded, resumable), exit 143 instead of 130."""
