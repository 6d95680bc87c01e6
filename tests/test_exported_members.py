"""The public surface is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import subprocess
import sys

import sealbench

EXPECTED = [
    "AgentSpec", "ContractError", "HarnessError", "IncompleteScorecard", "Outcome", "PackError", "Rate",
    "Refusal", "RunOptions", "RunRefusal", "ScoreRefusal", "Scorecard", "ScoringContract", "SealbenchError",
    "StorageError", "TaskRecord", "UsageError", "VerificationFailed", "__version__", "check_pack", "derive", "execute",
    "load_contract", "load_pack", "load_task", "lock_contract", "new_contract", "parse_events",
    "register_builtin", "require_locked", "score", "seal_pack", "validate_pack", "validate_scorecard",
]


def test_all_is_sorted_and_pinned() -> None:
    assert sealbench.__all__ == sorted(sealbench.__all__) == sorted(EXPECTED)


def test_every_exported_name_resolves() -> None:
    for name in sealbench.__all__:
        assert getattr(sealbench, name) is not None


def test_import_is_cheap() -> None:
    code = "import sys, sealbench; print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'rich'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
