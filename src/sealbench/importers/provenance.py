"""Where an imported pack comes from: provenance records, the pack description, its template.

Every task and the pack carry a :class:`~sealbench.formats.Provenance` (source name, source
digest, license, original record id, contamination). The pack description says which importer
made the pack from which file, with which options, and whether the file is the published one.
"""

from __future__ import annotations

from pathlib import Path

from .. import __version__
from ..errors import PackError
from ..formats import Provenance
from .draft import CONTAMINATION, ImportOptions

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


def load_template(template_id: str) -> str:
    """The text of a frozen prompt template shipped with sealbench (``prompts/<id>.txt``).

    Raises:
        PackError: no such template in the installation.
    """
    path = PROMPTS_DIR / f"{template_id}.txt"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise PackError(f"{path}: cannot read the prompt template ({e.strerror})") from None


def provenance(source: str, digest: str, license: str | None, record_id: str | None = None) -> Provenance:
    """Provenance of a public set's pack or of one of its records."""
    return Provenance(source=source, source_sha256=digest, license=license, record_id=record_id,
                      contamination=CONTAMINATION)


def describe(*, title: str, kind: str, source: Path, digest: str, known_digest: str | None,
             imported: int, total: int, options: ImportOptions, wall_clock_s: float, note: str = "") -> str:
    """The pack description: what was imported, from which file, how, and what to know."""
    if known_digest is None:
        origin = ""
    elif digest.removeprefix("sha256:") == known_digest:
        origin = ", the published file"
    else:
        origin = ", NOT the published file: its sha256 differs"
    text = (
        f"{title}: {imported} of {total} records of {source.name} ({digest}{origin}). "
        f"Imported by sealbench {__version__} `import {kind}` with max_attempts={options.max_attempts}, "
        f"wall_clock_s={wall_clock_s:g}, limit={options.limit}."
    )
    return text + (f" {note}" if note else "")
