"""The one exception hierarchy of sealbench.

::

    SealbenchError                  exit 1 unless a subclass says otherwise
    +-- UsageError                  exit 2: the command line itself is wrong
    +-- Refusal                     exit 3: no rate emitted (bad input included)
    |   +-- PackError               a task pack or task record is malformed or unsafe
    |   +-- IncompleteScorecard     a scorecard or task lacks its controls (the scorecard rules)
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
from typing import ClassVar

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
"""Errors of the storage itself (full, over quota, failing, read-only), not of what is stored."""


class SealbenchError(Exception):
    """Base of every error sealbench raises on purpose."""

    way_out: ClassVar[str] = "read the message: it names what was wrong; rerun with --debug for the traceback"

    exit_code = 1


class UsageError(SealbenchError):
    """The command line is wrong (exit 2)."""

    way_out: ClassVar[str] = (
        "fix the command line; `sealbench COMMAND --help` lists the command's arguments, with examples"
    )

    exit_code = 2


class Refusal(SealbenchError):
    """sealbench refuses to go on; no rate is emitted (exit 3)."""

    way_out: ClassVar[str] = "mend the input the message names and run the command again: nothing was recorded"

    exit_code = 3


class PackError(Refusal):
    """A pack, task record or template is malformed, unsafe or does not match its seal."""

    way_out: ClassVar[str] = (
        "mend the pack the message names (`sealbench pack check PACK` says what is wrong), then seal it again "
        "with `sealbench pack seal PACK`"
    )


class IncompleteScorecard(Refusal):
    """A task or scorecard is missing a control (the scorecard rules' name for the refusal)."""

    way_out: ClassVar[str] = (
        "give the task or scorecard the control it lacks (the message names it), then seal or score again"
    )


class ContractError(Refusal):
    """A scoring contract is incomplete, already locked, not locked, or edited after lock."""

    way_out: ClassVar[str] = (
        "mend the contract the message names (or write it again with `sealbench contract new`); an unlocked one "
        "is locked with `sealbench contract lock FILE --run-id NAME`; one edited after its lock cannot be used: "
        "restore it, or write a new contract under a new run_id"
    )


class ScoreRefusal(Refusal):
    """Events cannot be scored under the locked contract: no rate emitted."""

    way_out: ClassVar[str] = (
        "score the run under the contract it was locked with; an unfinished run is resumed first with `sealbench run CONTRACT --resume RUN_DIR`"
    )


class RunRefusal(Refusal):
    """A run cannot start or resume (no sandbox, different contract, ...)."""

    way_out: ClassVar[str] = "mend what the message names and start the run again: its run_id was not spent"


class EnvironmentRefused(RunRefusal):
    """A task's environment is not built, changed since it was built, or cannot be built here."""

    way_out: ClassVar[str] = "build the task's environment with `sealbench env build PACK`, then run again"


class RunsIndexError(Refusal):
    """The local index of runs cannot be read or written (a read-only data directory, ...)."""

    way_out: ClassVar[str] = (
        "make the data directory readable and writable (or point SEALBENCH_DATA_DIR elsewhere), then run the command again"
    )


class StorageError(Refusal):
    """The harness's own storage failed (disk full, quota, I/O error, read-only file system).

    Infrastructure, not the agent and not the harness's logic: what was being done is left
    undecided (no task outcome is written), and the command can be repeated, or the run
    resumed, once the storage works again.
    """

    way_out: ClassVar[str] = (
        "free space (or fix the storage), then run the command again or resume the run: nothing was decided"
    )


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

    way_out: ClassVar[str] = (
        "bundle the run directory first (`sealbench bundle RUN_DIR --out DIR`), then verify the bundle"
    )


class HarnessError(SealbenchError):
    """The harness itself (sandbox, grading, storage) failed: not the agent's fault."""

    way_out: ClassVar[str] = "the harness failed, not the input: rerun with --debug and report the traceback"


class VerificationFailed(SealbenchError):
    """A bundle or journal does not verify; ``problems`` lists every discrepancy found."""

    way_out: ClassVar[str] = (
        "the bundle or journal was changed after it was made: get it again from its publisher"
    )

    exit_code = 4

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{len(self.problems)} problem(s): " + "; ".join(self.problems[:3]))


class MadeByNewerRelease(VerificationFailed):
    """A bundle made by a newer release: this one cannot re-derive it, which says nothing about
    tampering. Exit 4, like any bundle that does not verify."""

    way_out: ClassVar[str] = "verify it with the release that made it (named in the message), or a newer one"


class Terminated(KeyboardInterrupt):
    """SIGTERM received: stop as Ctrl-C does (recorded, resumable), exit 143 instead of 130."""
