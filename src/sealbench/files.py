"""Reading formats from files and writing files atomically.

Foreign errors enter here once: a pydantic ValidationError, a JSON syntax error or an
OSError while reading becomes the caller's refusal class, naming the file and the key.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from .errors import Refusal

M = TypeVar("M", bound=BaseModel)


def nearest_folders(path: Path, holds: str) -> str:
    """Words for a folder that is not there: whether ``path`` exists at all, and the folders
    beside it that hold a file named ``holds`` (the nearest names first), so that a typo
    names its fix."""
    import difflib

    if path.exists() and not path.is_dir():
        return "it is a file, not a folder"
    parent = path.parent if str(path.parent) else Path(".")
    try:
        candidates = sorted(p.name for p in parent.iterdir()
                            if p.is_dir() and not p.is_symlink() and (p / holds).is_file())
    except OSError:
        candidates = []
    said = "it does not exist" if not path.exists() else f"it holds no {holds}"
    if not candidates:
        return said
    close = difflib.get_close_matches(path.name, candidates, n=3, cutoff=0.5)
    if close:
        return f"{said}; did you mean {' or '.join(str(parent / c) for c in close)}?"
    shown = ", ".join(candidates[:8]) + (f" and {len(candidates) - 8} more" if len(candidates) > 8 else "")
    return f"{said}; beside it: {shown}"


def describe_validation_error(err: ValidationError) -> str:
    """One line per problem: ``key.path: message`` (``missing required key``, ``unknown key``)."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        kind = e["type"]
        if kind == "missing":
            msg = "missing required key"
        elif kind == "extra_forbidden":
            msg = "unknown key"
        else:
            msg = e["msg"]
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def read_text(path: Path, error: type[Refusal]) -> str:
    """Read UTF-8 text or raise ``error`` naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror})") from None


def read_model(path: Path, model: type[M], error: type[Refusal]) -> M:
    """Load and validate one JSON file as ``model``, refusing with the file and key named."""
    text = read_text(path, error)
    try:
        return model.model_validate_json(text)
    except ValidationError as e:
        if any(x["type"] == "json_invalid" for x in e.errors()):
            try:
                json.loads(text)
            except json.JSONDecodeError as je:
                raise error(f"{path}: invalid JSON ({je.msg} at line {je.lineno})") from None
        raise error(f"{path}: {describe_validation_error(e)}") from None


def model_json(model: BaseModel) -> str:
    """The human-readable file form of a model: indented JSON with a final newline."""
    return json.dumps(model.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


def write_atomic(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename.

    A crash leaves either the old file or the new one, never half of one; a half-written
    temporary file left by a killed process is named after it (``.<name>.tmp-<pid>-<random>``)
    and swept by the next command (:mod:`sealbench.scratch`). ``durable=False`` skips the
    fsyncs, for files that are re-derived from the journal anyway.
    """
    write_atomic_pieces(path, (data.encode("utf-8") if isinstance(data, str) else data,), durable=durable)


def write_atomic_pieces(path: Path, pieces: Iterable[bytes | str], *, durable: bool = True) -> None:
    """:func:`write_atomic` of the concatenation of ``pieces`` (text as UTF-8), each written
    as it comes: a large file is never held whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece.encode("utf-8") if isinstance(piece, str) else piece)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
