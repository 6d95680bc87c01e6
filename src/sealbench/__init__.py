"""sealbench: measure coding agents honestly.

The public API is re-exported here and loaded lazily, so ``import sealbench`` stays cheap
(no pydantic until a name that needs it is used).
"""

from __future__ import annotations

import importlib

# typing costs a grade's interpreters (two per function-level check) several ms each.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "AgentSpec": "formats",
    "ContractError": "errors",
    "HarnessError": "errors",
    "IncompleteScorecard": "errors",
    "Outcome": "formats",
    "PackError": "errors",
    "Rate": "formats",
    "Refusal": "errors",
    "RunOptions": "runner",
    "RunRefusal": "errors",
    "ScoreRefusal": "errors",
    "Scorecard": "formats",
    "ScoringContract": "formats",
    "SealbenchError": "errors",
    "StorageError": "errors",
    "TaskRecord": "formats",
    "UsageError": "errors",
    "VerificationFailed": "errors",
    "check_pack": "pack",
    "derive": "derive",
    "execute": "runner",
    "load_contract": "contract",
    "load_pack": "pack",
    "load_task": "scorecard",
    "lock_contract": "contract",
    "new_contract": "contract",
    "parse_events": "score",
    "register_builtin": "agents",
    "require_locked": "contract",
    "score": "score",
    "seal_pack": "pack",
    "validate_pack": "validate",
    "validate_scorecard": "scorecard",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sealbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
