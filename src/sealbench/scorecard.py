"""The scorecard rules for task records and scorecards, as library functions."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import IncompleteScorecard
from .files import read_model
from .formats import Scorecard, TaskRecord

REQUIRED_TASK_KEYS = (
    "task_id",
    "prompt_template_id",
    "oracle_cmd",
    "hidden_tests_sha256",
    "max_attempts",
    "wall_clock_s",
)
REQUIRED_SCORE_KEYS = (
    "task_id",
    "passed",
    "attempts_used",
    "max_attempts",
    "elapsed_ms",
    "wall_clock_s",
    "prompt_template_id",
    "hidden_tests_sha256",
    "tool_trace_sha256",
    "scorecard_complete",
)


def load_task_record(path: Path) -> TaskRecord:
    """A task record read under the scorecard rules, with every control, or a refusal.

    Raises:
        IncompleteScorecard: missing fields (named), max_attempts < 1, any other bad key.
    """
    return read_model(path, TaskRecord, IncompleteScorecard)


def missing_score_fields(scorecard: Mapping[str, Any]) -> list[str]:
    """The keys the scorecard rules require that ``scorecard`` lacks."""
    return [key for key in REQUIRED_SCORE_KEYS if key not in scorecard]


def validate_scorecard(scorecard: Scorecard | Mapping[str, Any]) -> None:
    """A scorecard checked against the scorecard rules.

    Raises:
        IncompleteScorecard: missing fields, attempts_used over the published cap, or
            scorecard_complete false.
    """
    card = scorecard.model_dump(mode="json") if isinstance(scorecard, Scorecard) else scorecard
    missing = missing_score_fields(card)
    if missing:
        raise IncompleteScorecard(f"scorecard missing fields: {missing}")
    if card["attempts_used"] > card["max_attempts"]:
        raise IncompleteScorecard("attempts_used exceeds published retry cap")
    if not card["scorecard_complete"]:
        raise IncompleteScorecard("scorecard_complete is false")
