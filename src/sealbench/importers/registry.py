"""The importer registry: a kind name -> a function turning a source into a draft pack.

Built-in importers are registered through :func:`register_importer` like third-party ones.
The kind and options used are written into the pack's description, so a pack says how it
was made.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import UsageError
from .draft import ImportOptions, PackDraft

Importer = Callable[[Path, ImportOptions], PackDraft]
"""``importer(source, options) -> PackDraft``; raises PackError on bad input, UsageError on bad options."""

_IMPORTERS: dict[str, Importer] = {}


def register_importer(kind: str, func: Importer, *, replace: bool = False) -> None:
    """Make ``sealbench import KIND`` use ``func``.

    Raises:
        ValueError: ``kind`` is not a plain lowercase name, or is taken and ``replace`` is not set.
    """
    if not kind or not all(c.islower() or c.isdigit() or c in "-_" for c in kind) or not kind[0].isalpha():
        raise ValueError(f"importer kind {kind!r} must be lowercase letters, digits, '-' or '_'")
    if kind in _IMPORTERS and not replace:
        raise ValueError(f"importer kind {kind!r} is already registered")
    _IMPORTERS[kind] = func


def get_importer(kind: str) -> Importer:
    """The importer registered for ``kind``.

    Raises:
        UsageError: no importer of that kind, with the known kinds listed.
    """
    try:
        return _IMPORTERS[kind]
    except KeyError:
        raise UsageError(f"unknown importer {kind!r}; known: {', '.join(importer_kinds())}") from None


def importer_kinds() -> list[str]:
    """Every registered kind, sorted."""
    return sorted(_IMPORTERS)
