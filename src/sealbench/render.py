"""Rendering runs for people on a terminal: scorecards as a table, the rate or the refusal."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from .contract import load_contract
from .derive import NO_SANDBOX, isolation_sentence, rate_bytes, seed_event
from .errors import Refusal, VerificationFailed
from .files import write_atomic
from .formats import Rate, Scorecard
from .outcomes import Outcome
from .safe_text import inert
from .score import score
from .scoring_io import events_from

if TYPE_CHECKING:
    from .runner import RunResult
    from .stories import TaskStory


def read_scorecards(run_dir: Path) -> list[Scorecard]:
    """The scorecards a run directory holds (derived from its journal)."""
    path = run_dir / "scorecards.jsonl"
    if not path.is_file():
        return []
    return [Scorecard.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def load_table_printer() -> threading.Thread:
    """Begin importing the table printer (rich's console and table) on a thread of its own.

    A run calls this once its agents are running: its summary then prints without waiting on
    those imports (about 35 ms on a slow machine) after the last task. Not a daemon: a run
    that ends first waits for the import to finish rather than stop it half-way.
    """

    def load() -> None:
        try:
            import rich.console
            import rich.table  # noqa: F401
        except ImportError:  # printing imports them again, and says what is missing
            pass

    thread = threading.Thread(target=load, name="sealbench-load-table-printer")
    thread.start()
    return thread


TABLE_ROWS = 20
"""A run with more tasks prints only the rows of tasks that did not pass, at most this many."""


def print_scorecards(cards: list[Scorecard], title: str, where: Path | None = None) -> None:
    """Print the scorecards as a table; past :data:`TABLE_ROWS` tasks, only those that did not
    pass (at most that many), with a line saying where all of them are."""
    shown = cards
    note = None
    if len(cards) > TABLE_ROWS:
        missed = [c for c in cards if c.outcome is not Outcome.PASS]
        shown = missed[:TABLE_ROWS]
        place = f" in {where}" if where is not None else ""
        note = (f"{len(cards)} scorecards{place}; shown: {len(shown)} of the {len(missed)} tasks that did not pass"
                if missed else f"{len(cards)} scorecards{place}; every task passed")
    if shown:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for col in ("task_id", "outcome", "attempts", "first try", "elapsed", "trace"):
            table.add_column(col)
        for c in shown:
            table.add_row(c.task_id, c.outcome.value, f"{c.attempts_used}/{c.max_attempts}",
                          Outcome.PASS.value if c.first_attempt_passed else ("n/a" if c.attempts_used == 0 else "no"),
                          f"{c.elapsed_ms / 1000:.2f}s",
                          c.tool_trace_sha256[:19] + "...")
        Console(width=110).print(table)
    if note is not None:
        print(note)


def print_cards_and_why(run_id: str | None, run_dir: Path, cards: list[Scorecard],
                        stories: dict[str, TaskStory] | None = None) -> None:
    """Print the scorecards, then one line per task that did not pass saying why (see
    :func:`sealbench.show.why_lines`), from ``stories`` when the run just told them, else read
    from the run's journal."""
    print_scorecards(cards, f"scorecards of {run_id}", run_dir / "scorecards.jsonl")
    if cards and all(c.outcome is Outcome.PASS for c in cards):
        return  # nothing to explain; the journal is not read again
    import contextlib

    from .lock import hold_reader
    from .show import read_run, shown_run, why_lines

    if stories is not None:
        lines = why_lines(shown_run(run_dir, run_id, stories))
    else:
        with hold_reader(run_dir, "score") or contextlib.nullcontext():
            lines = why_lines(read_run(run_dir))
    for line in lines:
        print(line)


def rate_lines(rate: Rate) -> list[str]:
    """The rate as evidence sentences, caps attached."""
    b = rate.budget
    caps = f"max_attempts {b.max_attempts}, wall_clock_s {b.wall_clock_s:g}, feedback {b.feedback}" if b else "no budget"
    lo, hi = rate.wilson_95.low, rate.wilson_95.high
    return [
        f"{rate.sentence} ({rate.run_id}, locked {rate.locked_at})",
        f"  Wilson 95% interval [{lo:.3f}, {hi:.3f}]; {caps}",
        "  outcomes: " + ", ".join(f"{k} {v}" for k, v in rate.outcomes.items()),
        f"  access: host {inert(str(rate.access_class.host))}, model {inert(str(rate.access_class.model_access))}; "
        f"{inert(rate.note)}",
    ]


def _setup_mistake(stories: dict[str, TaskStory]) -> str | None:
    """The first harness error saying the agent never started (its path and the fix), if any."""
    from .usage import NEVER_STARTED

    for story in stories.values():
        for attempt in story.attempts.values():
            for error in attempt.errors:
                if error.error and error.error.startswith(NEVER_STARTED):
                    return inert(error.error)
    return None


def print_run_summary(contract_file: Path, run_dir: Path, result: RunResult | None = None) -> int:
    """Print a run's scorecards and its rate, or the refusal; returns the exit code.

    ``result``, from the run that just ended, carries the scorecards it derived from its
    journal, which saves streaming the journal again; without it they are re-derived here.

    Raises:
        VerificationFailed: the journal's chain is broken, or the run was made under another
            contract than ``contract_file`` holds now.
    """
    contract = load_contract(contract_file)
    cards = result.scorecards if result is not None else None
    if result is not None and result.contract_sha256 != contract.contract_sha256:
        raise VerificationFailed([f"{contract_file}: changed during the run (the run was made under contract "
                                  f"{result.contract_sha256}, not {contract.contract_sha256})"])
    print_cards_and_why(contract.run_id, run_dir, cards if cards is not None else read_scorecards(run_dir),
                        result.stories if result is not None else None)
    if result is not None and result.isolation is not None and NO_SANDBOX in result.isolation.split("+"):
        print(f"isolation: {isolation_sentence(result.isolation)}")
    try:
        events = [seed_event(c) for c in cards] if cards is not None else events_from(run_dir, contract)
        rate = score(contract, events)
    except VerificationFailed:
        raise
    except Refusal as e:
        print(f"no rate emitted: {e}", file=sys.stderr)
        setup = _setup_mistake(result.stories) if result is not None and result.stories else None
        if setup is not None:
            print(f"no rate emitted: {setup}", file=sys.stderr)
        return e.exit_code
    write_atomic(run_dir / "rate.json", rate_bytes(rate), durable=False)
    from .runs_index import replay_of

    replayed = replay_of(run_dir / "journal.jsonl")
    if replayed is not None:
        print(f"a replay of run {replayed.get('run_id')} (nonce {replayed.get('run_nonce')}): every model reply came "
              "from that run's record, so this reproduces a run and measures nothing; the rate below is the "
              "replay's, not a measurement")
    for line in rate_lines(rate):
        print(line)
    from .freshness import statement

    fresh = statement(contract)
    if fresh is not None:
        print(fresh)
    return 0

