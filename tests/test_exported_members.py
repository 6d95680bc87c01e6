"""The public surface is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sealbench

EXPECTED = [
    "AgentSpec", "ContractError", "EnvironmentRefused", "HarnessError", "IncompleteScorecard", "MadeByNewerRelease", "Outcome",
    "PackError", "Rate", "Refusal", "RunOptions", "RunRefusal", "ScoreRefusal", "Scorecard", "ScoringContract",
    "SealbenchError", "StorageError", "TaskRecord", "UsageError", "VerificationFailed", "__version__",
    "check_pack", "compare_bundles", "derive_files", "execute", "import_pack", "load_contract", "load_pack",
    "load_task_record", "lock_contract", "make_bundle", "new_contract", "parse_events", "register_builtin",
    "require_locked", "score_events", "seal_pack", "validate_pack", "validate_scorecard", "verify_bundle",
    "write_report",
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


def test_no_exported_name_depends_on_what_was_imported_first() -> None:
    # `from sealbench import derive` gave the function in a fresh interpreter and the module
    # once anything had imported sealbench.derive. Every submodule is imported first here.
    code = """
import importlib, inspect, json, pkgutil, types
import pytest

import sealbench
names = [m.name for m in pkgutil.walk_packages(sealbench.__path__, "sealbench.")
         if ".examples" not in m.name and not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
wrong = {}
for name in sealbench.__all__:
    value = getattr(sealbench, name)
    if isinstance(value, types.ModuleType):
        wrong[name] = "a module"
    elif name != "__version__" and not (inspect.isfunction(value) or inspect.isclass(value)):
        wrong[name] = type(value).__name__
print(json.dumps({"modules": len(names), "wrong": wrong}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    import json

    found = json.loads(out)
    assert found["modules"] > 30 and found["wrong"] == {}


def test_the_library_can_do_what_the_cli_does() -> None:
    import inspect

    from sealbench import bundle, compare, importers, report, runner, score, validate

    assert sealbench.execute is runner.execute
    assert sealbench.score_events is score.score
    assert sealbench.make_bundle is bundle.make_bundle and sealbench.verify_bundle is bundle.verify_bundle
    assert sealbench.write_report is report.write_report
    assert sealbench.compare_bundles is compare.compare
    assert sealbench.import_pack is importers.import_pack and sealbench.validate_pack is validate.validate_pack
    assert all(inspect.getdoc(getattr(sealbench, n)) for n in sealbench.__all__ if n != "__version__")


def test_a_renamed_export_still_answers_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="load_task_record"):
        old = sealbench.load_task
    assert old is sealbench.load_task_record
    assert "load_task" not in sealbench.__all__ and "load_task" not in dir(sealbench)
