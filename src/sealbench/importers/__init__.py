"""Importers: public task sets turned into sealed packs.

``import_pack(kind, source, out, **options)`` looks the importer up in the registry, lets it
read the source into a draft (values only), and writes the draft as a sealed pack, all or
nothing. Built-in kinds are registered below through the same :func:`register_importer` a
plugin uses:

* ``humaneval``: HumanEval.jsonl.gz; ``humanevalplus``: HumanEval+ original format;
* ``mbpp``: mbpp.jsonl or sanitized-mbpp.json (told apart by content); ``mbppplus``: MBPP+;
* ``exercism``: an Exercism-style track directory (exercises/practice/<slug>/);
* ``swebench``: SWE-bench-style instances (JSON list or JSON Lines) against a local clone;
* ``tasks``: a pack written by hand as one ``tasks.toml`` or ``tasks.jsonl`` (see
  :mod:`.tasks_file`; ``pack seal`` on a folder holding one expands it in place).

Every refusal is a :class:`~sealbench.errors.PackError` naming the file and the record, or a
:class:`~sealbench.errors.UsageError` for a bad option or an existing output.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..pack import Pack
from . import exercism, humaneval, mbpp, swebench, tasks_file
from .draft import FileEntry, Files, ImportOptions, PackDraft, TaskDraft, make_record, text_file
from .registry import Importer, get_importer, importer_kinds, register_importer
from .writer import write_pack

register_importer("exercism", exercism.import_exercism)
register_importer("humaneval", humaneval.import_humaneval)
register_importer("humanevalplus", humaneval.import_humanevalplus)
register_importer("mbpp", mbpp.import_mbpp)
register_importer("mbppplus", mbpp.import_mbppplus)
register_importer("swebench", swebench.import_swebench)
register_importer("tasks", tasks_file.import_tasks_file)


def import_pack(kind: str, source: Path, out: Path, **options: object) -> Pack:
    """Import ``source`` with the ``kind`` importer into a new sealed pack at ``out``.

    Options: max_attempts (default 1), wall_clock_s (default: the importer's), limit (first N
    records), repo (swebench: the local clone), name (pack name), license (override).

    Raises:
        UsageError: unknown kind or option, a bad option value, or ``out`` exists.
        PackError: bad input (damaged file, record missing fields, duplicate ids, text that
            is not UTF-8, ...) naming the file and the record, or a seal refusal.
    """
    importer = get_importer(kind)
    opts = ImportOptions.parse(options)
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise UsageError(f"{out} exists; importing never overwrites a pack")
    draft = importer(Path(source), opts)
    return write_pack(draft, out)


__all__ = [
    "FileEntry",
    "Files",
    "ImportOptions",
    "Importer",
    "PackDraft",
    "TaskDraft",
    "get_importer",
    "import_pack",
    "importer_kinds",
    "make_record",
    "register_importer",
    "text_file",
]
