"""The documentation pages generated from code, rewritten (``make docs``) or checked (``--check``).

- docs/reference/formats.md and docs/reference/journal-events.md: the blocks between their
  markers, from the models (``sealbench.schema_doc``);
- docs/reference/cli/: one page per command, from the argument parser (``sealbench.cli_doc``);
- docs/explanation/defences.md: the table between its markers, from tests/defences.toml.

The Figures block of docs/benchmarks.md is the output of ``make bench`` and is written there,
not here: measuring takes many minutes.

Run: ``.venv/bin/python tests/docs_pages.py [--check]``; with ``--check`` nothing is written and
the exit code is 1 when a page is stale, naming it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/defences.py, run as a script

from defences import LIST, PAGE, load, splice_table
from sealbench import cli_doc, schema_doc

ROOT = Path(__file__).resolve().parents[1]
SPLICED = (Path("docs") / "reference" / "formats.md", Path("docs") / "reference" / "journal-events.md")


def wanted(root: Path) -> dict[Path, str]:
    """Every generated page as it should read, by its path from ``root``."""
    out = {p: schema_doc.splice((root / p).read_text(encoding="utf-8")) for p in SPLICED}
    out[PAGE] = splice_table((root / PAGE).read_text(encoding="utf-8"), load(LIST))
    out.update(cli_doc.pages())
    return out


def stale(root: Path) -> list[Path]:
    """The generated pages under ``root`` that are out of date, missing, or no longer generated."""
    found = [p for p, text in wanted(root).items()
             if not (root / p).is_file() or (root / p).read_text(encoding="utf-8") != text]
    return found + [p for p in cli_doc.stale(root) if p not in found]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale page")
    ap.add_argument("--root", type=Path, default=ROOT, help="the project whose pages are generated")
    args = ap.parse_args(argv)
    if args.check:
        out = stale(args.root)
        for p in out:
            print(f"docs: {p} is stale: run `make docs`", file=sys.stderr)
        return 1 if out else 0
    for p, text in wanted(args.root).items():
        (args.root / p).write_text(text, encoding="utf-8")
    cli_doc.write(args.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
