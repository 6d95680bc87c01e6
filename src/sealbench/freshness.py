"""Fresh tasks: a contract's claim that every task was committed after a date, and its checks.

``contract new --fresh-after DATE`` reads each task's commit date from its record's provenance
(the earlier of the commit's author and committer dates: a change is only as fresh as the first
time it existed), refuses a denominator with any task not after DATE or without a date, and
locks the date and every task's date in the contract (:class:`~sealbench.formats.FreshAfter`).
The runner journals each task's date on its ``task_started`` line, read again from the task
record it runs; ``verify`` re-checks that the two agree and are after the date. Every
scorecard, report and comparison then states "all N tasks committed after DATE".

A contract without ``--fresh-after`` carries none of this: its bytes, its journal's and its
bundle's are what they always were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from .errors import ContractError, UsageError
from .formats import FreshAfter, ScoringContract, TaskRecord


def parse_date(text: str, what: str) -> datetime:
    """A cutoff: ``YYYY-MM-DD`` (midnight UTC) or an ISO 8601 time (UTC when it names no offset).

    Raises:
        UsageError: neither.
    """
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"{what} {text!r} is not a date (YYYY-MM-DD) or an ISO 8601 time") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def task_date(record: TaskRecord) -> datetime | None:
    """A task's commit date from its record (see the module docstring), or None without one."""
    return record.provenance.committed_at() if record.provenance is not None else None


def fresh_after(records: Mapping[str, TaskRecord], date: str) -> FreshAfter:
    """The claim for a denominator (task id -> record), every task checked against ``date``.

    Raises:
        UsageError: ``date`` is not a date.
        ContractError: a task has no commit date or is not after ``date``, naming each.
    """
    cutoff = parse_date(date, "--fresh-after")
    dates = {tid: task_date(rec) for tid, rec in records.items()}
    undated = [tid for tid, when in dates.items() if when is None]
    older = [f"{tid} ({when.isoformat()})" for tid, when in dates.items() if when is not None and when <= cutoff]
    if undated or older:
        told = ([f"committed on or before {date}: {', '.join(older)}"] if older else []) + (
            [f"no commit date in the record: {', '.join(undated)}"] if undated else [])
        raise ContractError(f"--fresh-after {date}: {'; '.join(told)}; leave them out with --task, or mine "
                            "the pack with a later --since")
    return FreshAfter(date=date, tasks={tid: when.isoformat() for tid, when in dates.items() if when is not None})


def statement(contract: ScoringContract) -> str | None:
    """"all N tasks committed after DATE", or None for a contract that claims nothing."""
    if contract.fresh_after is None:
        return None
    n = len(contract.task_ids)
    return f"all {n} task{'s' if n != 1 else ''} committed after {contract.fresh_after.date}"


def problems(contract: ScoringContract, journaled: Mapping[str, str | None], started: Sequence[str]) -> list[str]:
    """What contradicts the contract's claim (pure): a task date not after the cutoff, a task of
    the denominator without a date, or a ``task_started`` line (``journaled``: task id -> its
    ``committed_at``, for the tasks of ``started``) whose date is not the contract's."""
    claim = contract.fresh_after
    if claim is None:
        return [f"{tid}: its task_started line says committed_at {journaled[tid]} but the contract claims "
                "no fresh tasks" for tid in started if journaled.get(tid) is not None]
    found: list[str] = []
    try:
        cutoff = parse_date(claim.date, "fresh_after.date")
    except UsageError as e:
        return [f"the contract's fresh_after: {e}"]
    extra = sorted(set(claim.tasks) - set(contract.task_ids))
    if extra:
        found.append(f"the contract's fresh_after dates tasks outside its denominator: {', '.join(extra)}")
    for tid in contract.task_ids:
        told = claim.tasks.get(tid)
        if told is None:
            found.append(f"{tid}: the contract claims every task committed after {claim.date} but dates not this one")
            continue
        try:
            when = datetime.fromisoformat(told)
        except ValueError:
            found.append(f"{tid}: its date {told!r} in the contract is not an ISO 8601 time")
            continue
        if when.tzinfo is None or when <= cutoff:
            found.append(f"{tid}: committed {told}, not after {claim.date} as the contract claims")
        if tid in started and journaled.get(tid) != told:
            found.append(f"{tid}: its task record said committed_at {journaled.get(tid)} at the run, the contract "
                         f"{told}")
    return found
