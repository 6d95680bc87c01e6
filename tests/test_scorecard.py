"""Seed 000's two unit tests, adapted to the package, and its scorecard rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sealbench.errors import IncompleteScorecard
from sealbench.scorecard import REQUIRED_SCORE_KEYS, load_task_record, validate_scorecard


def good_card() -> dict[str, Any]:
    return {
        "task_id": "x",
        "passed": True,
        "attempts_used": 1,
        "max_attempts": 2,
        "elapsed_ms": 900,
        "wall_clock_s": 30,
        "prompt_template_id": "p",
        "hidden_tests_sha256": "abc",
        "tool_trace_sha256": "def",
        "scorecard_complete": True,
    }


def test_load_task_rejects_missing_retry_cap(tmp_path: Path) -> None:
    payload = {
        "task_id": "x",
        "prompt_template_id": "p",
        "oracle_cmd": ["true"],
        "hidden_tests_sha256": "abc",
        "wall_clock_s": 10,
        "language": "python",
    }
    path = tmp_path / "task.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    with pytest.raises(IncompleteScorecard, match="max_attempts: missing required key"):
        load_task_record(path)


def test_load_task_rejects_zero_attempts(tmp_path: Path) -> None:
    path = tmp_path / "task.json"
    path.write_text(json.dumps({"task_id": "x", "prompt_template_id": "p", "oracle_cmd": ["true"],
                                "hidden_tests_sha256": "abc", "max_attempts": 0, "wall_clock_s": 10,
                                "language": "python"}))
    with pytest.raises(IncompleteScorecard, match="max_attempts"):
        load_task_record(path)


def test_validate_rejects_over_budget_attempts() -> None:
    scorecard = good_card() | {"attempts_used": 4}
    with pytest.raises(IncompleteScorecard, match="attempts_used exceeds published retry cap"):
        validate_scorecard(scorecard)


@pytest.mark.parametrize("key", REQUIRED_SCORE_KEYS)
def test_validate_rejects_each_missing_field(key: str) -> None:
    card = good_card()
    card.pop(key)
    with pytest.raises(IncompleteScorecard, match=f"scorecard missing fields: \\['{key}'\\]"):
        validate_scorecard(card)


def test_validate_rejects_incomplete_card() -> None:
    with pytest.raises(IncompleteScorecard, match="scorecard_complete is false"):
        validate_scorecard(good_card() | {"scorecard_complete": False})


def test_validate_accepts_complete_card() -> None:
    validate_scorecard(good_card())
