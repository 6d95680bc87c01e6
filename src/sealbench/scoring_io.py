"""Where ``score`` gets its events: an events.json file, or a run directory's journal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .consistency import Contradictions
from .derive import FinishedTwice, derive_hashed, derive_iter
from .errors import ScoreRefusal, VerificationFailed
from .events import Line, RunHeader, TaskFinished
from .files import read_text
from .formats import ScoringContract, SeedEvent
from .journal import iter_verified
from .lock import hold_reader
from .progress import JOURNAL_STEP, Steps
from .score import Tally, parse_events_json


def events_from(source: Path, contract: ScoringContract, steps: Steps | None = None) -> Tally:
    """Events to score: re-derived from ``source/journal.jsonl`` for a run directory (``steps``
    counting its tasks as they finish).

    A run directory is scored from its journal, never from files derived from it, so an
    edited events.json cannot change the rate.

    Raises:
        ScoreRefusal: unreadable or invalid events, or a run directory a run is writing now.
        VerificationFailed: the journal's chain is broken or belongs to another contract.
    """
    if source.is_dir():
        with hold_reader(source, "score") or contextlib.nullcontext():
            return _events_from_run(source, contract, steps)
    return Tally(parse_events_json(read_text(source, ScoreRefusal), str(source)))


def _events_from_run(source: Path, contract: ScoringContract, steps: Steps | None) -> Tally:
    journal = source / "journal.jsonl"
    if not journal.is_file():
        raise ScoreRefusal(f"{source}: no journal.jsonl in this run directory")
    try:
        return _seed_events(journal, contract, whole=False, steps=steps)
    except FinishedTwice:
        # A task finished again after its entry was made: the entries are made whole, from a
        # second read, the later finish in place of the earlier (as events.json holds them).
        return _seed_events(journal, contract, whole=True, steps=steps)


def _seed_events(journal: Path, contract: ScoringContract, *, whole: bool, steps: Steps | None = None) -> Tally:
    """The seed events of a run's journal, as events.json holds them: what seed_event made of
    each scorecard, made one task at a time (:func:`derive.derive_hashed`) unless ``whole``."""
    pinned: list[str | None] = []
    # What the events mean is checked as they stream by, as verify checks a bundle's: a journal
    # whose outcomes were rewritten, chain and all, is refused, never scored.
    meaning = Contradictions(contract)
    if steps is not None:
        steps.step(JOURNAL_STEP + (", again whole" if whole else ""), len(contract.task_ids))

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
            if steps is not None and isinstance(line.event, TaskFinished):
                steps.advance()
            yield line

    tally = Tally()

    def add(entry: dict[str, Any]) -> None:
        tally.add(SeedEvent.model_validate(entry))

    endpoints = contract.model_endpoints or ()
    if whole:
        seeds: list[dict[str, Any]] = []
        for _ in derive_iter(checked(), contract.task_ids, endpoints, None, seeds):
            pass
        for entry in seeds:
            add(entry)
    else:
        # Each trace is dropped as soon as it is made, each task's entry once it is tallied.
        for _ in derive_hashed(checked(), contract.task_ids, endpoints, add):
            pass
    if meaning.problems:
        raise VerificationFailed(meaning.problems)
    return tally
