"""Docs generated from code stay in step with it."""

from __future__ import annotations

from pathlib import Path

from sealbench.schema_doc import splice

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_format_tables_are_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert splice(text) == text, "README format tables are stale: run `make docs`"


def test_readme_gives_the_two_commands_on_its_first_screen() -> None:
    first_screen = "\n".join(README.read_text(encoding="utf-8").splitlines()[:30])
    assert "make demo" in first_screen and "make test" in first_screen
