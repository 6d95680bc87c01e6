"""Rendering runs for people on a terminal: scorecards as a table, the rate or the refusal."""

from __future__ import annotations

import sys
from pathlib import Path

from .contract import load_contract
from .derive import rate_bytes
from .errors import Refusal, VerificationFailed
from .files import write_atomic
from .formats import Rate, Scorecard
from .score import score
from .scoring_io import events_from


def read_scorecards(run_dir: Path) -> list[Scorecard]:
    """The scorecards a run directory holds (derived from its journal)."""
    path = run_dir / "scorecards.jsonl"
    if not path.is_file():
        return []
    return [Scorecard.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def print_scorecards(cards: list[Scorecard], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in ("task_id", "outcome", "attempts", "first try", "elapsed", "trace"):
        table.add_column(col)
    for c in cards:
        table.add_row(c.task_id, c.outcome.value, f"{c.attempts_used}/{c.max_attempts}",
                      "pass" if c.first_attempt_passed else "-", f"{c.elapsed_ms / 1000:.2f}s",
                      c.tool_trace_sha256[:19] + "...")
    Console(width=110).print(table)


def rate_lines(rate: Rate) -> list[str]:
    """The rate as evidence sentences, caps attached."""
    b = rate.budget
    caps = f"max_attempts {b.max_attempts}, wall_clock_s {b.wall_clock_s:g}, feedback {b.feedback}" if b else "no budget"
    lo, hi = rate.wilson_95.low, rate.wilson_95.high
    return [
        f"{rate.sentence} ({rate.run_id}, locked {rate.locked_at})",
        f"  Wilson 95% interval [{lo:.3f}, {hi:.3f}]; {caps}",
        "  outcomes: " + ", ".join(f"{k} {v}" for k, v in rate.outcomes.items()),
        f"  access: host {rate.access_class.host}, model {rate.access_class.model_access}; {rate.note}",
    ]


def print_run_summary(contract_file: Path, run_dir: Path) -> int:
    """Print a run's scorecards and its rate, or the refusal; returns the exit code."""
    contract = load_contract(contract_file)
    print_scorecards(read_scorecards(run_dir), f"scorecards of {contract.run_id}")
    try:
        rate = score(contract, events_from(run_dir, contract))
    except VerificationFailed:
        raise
    except Refusal as e:
        print(f"no rate emitted: {e}", file=sys.stderr)
        return e.exit_code
    write_atomic(run_dir / "rate.json", rate_bytes(rate), durable=False)
    for line in rate_lines(rate):
        print(line)
    return 0
