"""Where ``score`` gets its events: an events.json file, or a run directory's journal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .consistency import Contradictions
from .derive import derive_iter
from .errors import ScoreRefusal, VerificationFailed
from .events import Line, RunHeader
from .files import read_text
from .formats import ScoringContract, SeedEvent
from .journal import iter_verified
from .lock import hold_reader
from .score import parse_events_json


def events_from(source: Path, contract: ScoringContract) -> list[SeedEvent]:
    """Events to score: re-derived from ``source/journal.jsonl`` for a run directory.

    A run directory is scored from its journal, never from files derived from it, so an
    edited events.json cannot change the rate.

    Raises:
        ScoreRefusal: unreadable or invalid events, or a run directory a run is writing now.
        VerificationFailed: the journal's chain is broken or belongs to another contract.
    """
    if source.is_dir():
        with hold_reader(source, "score") or contextlib.nullcontext():
            return _events_from_run(source, contract)
    return parse_events_json(read_text(source, ScoreRefusal), str(source))


def _events_from_run(source: Path, contract: ScoringContract) -> list[SeedEvent]:
    journal = source / "journal.jsonl"
    if not journal.is_file():
        raise ScoreRefusal(f"{source}: no journal.jsonl in this run directory")
    pinned: list[str | None] = []
    # What the events mean is checked as they stream by, as verify checks a bundle's: a journal
    # whose outcomes were rewritten, chain and all, is refused, never scored.
    meaning = Contradictions(contract)

    def checked() -> Iterator[Line]:
        # Streamed: a long run's journal is never held in memory at once.
        for line in iter_verified(journal):
            if not pinned:
                pinned.append(line.event.contract_sha256 if isinstance(line.event, RunHeader) else None)
                if pinned[0] != contract.contract_sha256:
                    raise VerificationFailed([
                        f"journal.jsonl: run was made under contract {pinned[0]}, "
                        f"not {contract.contract_sha256}"])
            meaning.feed(line)
            yield line

    seeds: list[dict[str, Any]] = []
    # Each trace is dropped as soon as it is made: only events.json's entries are kept.
    for _ in derive_iter(checked(), contract.task_ids, contract.model_endpoints or (), None, seeds):
        pass
    if meaning.problems:
        raise VerificationFailed(meaning.problems)
    # The seed events as events.json holds them: what seed_event made of each scorecard.
    return [SeedEvent.model_validate(entry) for entry in seeds]
