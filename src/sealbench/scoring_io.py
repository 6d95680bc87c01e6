"""Where ``score`` gets its events: an events.json file, or a run directory's journal."""

from __future__ import annotations

from pathlib import Path

from .derive import derive, seed_event
from .errors import ScoreRefusal, VerificationFailed
from .files import read_text
from .formats import ScoringContract, SeedEvent
from .journal import read_chain
from .score import parse_events_json


def events_from(source: Path, contract: ScoringContract) -> list[SeedEvent]:
    """Events to score: re-derived from ``source/journal.jsonl`` for a run directory.

    A run directory is scored from its journal, never from files derived from it, so an
    edited events.json cannot change the rate.

    Raises:
        ScoreRefusal: unreadable or invalid events.
        VerificationFailed: the journal's chain is broken or belongs to another contract.
    """
    if source.is_dir():
        journal = source / "journal.jsonl"
        if not journal.is_file():
            raise ScoreRefusal(f"{source}: no journal.jsonl in this run directory")
        report = read_chain(journal)
        problems = list(report.problems)
        if report.torn_tail:
            problems.append("journal.jsonl: torn last line (resume the run to repair it)")
        first = report.events[0]["payload"] if report.events else {}
        if first.get("contract_sha256") != contract.contract_sha256:
            problems.append(
                f"journal.jsonl: run was made under contract {first.get('contract_sha256')}, "
                f"not {contract.contract_sha256}"
            )
        if problems:
            raise VerificationFailed(problems)
        return [seed_event(c) for c in derive(report.events, contract.task_ids).scorecards]
    return parse_events_json(read_text(source, ScoreRefusal), str(source))
