"""Reading public task-set files as records, refusing damaged input with the record named.

Sources are gzip or plain files holding JSON Lines or one JSON array of objects. Every
refusal is a :class:`~sealbench.errors.PackError` that names the file and the record: the
line number for JSON Lines, the position for an array, plus the record's own id once known.
Foreign errors (OSError, gzip, zlib, JSON, Unicode) are translated here, once.
"""

from __future__ import annotations

import ast
import gzip
import json
import re
import warnings
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ..digest import UnsafeTree, sha256_file, tree_digest
from ..errors import PackError
from ..formats import check_id

_GZIP_MAGIC = b"\x1f\x8b"
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_DOT_RUNS = re.compile(r"\.{2,}")
T = TypeVar("T")


class SourceRecord(NamedTuple):
    """One record of a source file and where it was found (``/path/file line 3``)."""

    where: str
    data: dict[str, Any]


def read_source_bytes(path: Path) -> bytes:
    """The bytes of a source file, gunzipped when it starts with the gzip magic number.

    Raises:
        PackError: the file cannot be read or its gzip stream is damaged or truncated.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PackError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise PackError(f"{path}: is a directory, expected a data file") from None
    except OSError as e:
        raise PackError(f"{path}: cannot read ({e.strerror})") from None
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise PackError(f"{path}: damaged or truncated gzip data ({e})") from None


def read_records(path: Path) -> list[SourceRecord]:
    """Every record of a JSON Lines file or of a file holding one JSON array of objects.

    The format is told by content: a first non-blank ``[`` means an array.

    Raises:
        PackError: unreadable or damaged file, a line that is not UTF-8, invalid JSON, a
            record that is not an object, or no records at all.
    """
    raw = read_source_bytes(path)
    records = _array(path, raw) if raw.lstrip().startswith(b"[") else _json_lines(path, raw)
    if not records:
        raise PackError(f"{path}: no records")
    return records


def _json_lines(path: Path, raw: bytes) -> list[SourceRecord]:
    out: list[SourceRecord] = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {lineno}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PackError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise PackError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(value, dict):
            raise PackError(f"{where}: expected a JSON object, got {type(value).__name__}")
        out.append(SourceRecord(where, value))
    return out


def _array(path: Path, raw: bytes) -> list[SourceRecord]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise PackError(f"{path}: line {line}: not UTF-8 text ({e.reason})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise PackError(f"{path}: invalid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(value, list):
        raise PackError(f"{path}: expected a JSON array of records")
    out: list[SourceRecord] = []
    for i, item in enumerate(value, start=1):
        where = f"{path}: record {i}"
        if not isinstance(item, dict):
            raise PackError(f"{where}: expected a JSON object, got {type(item).__name__}")
        out.append(SourceRecord(where, item))
    return out


def require_fields(rec: SourceRecord, names: Sequence[str]) -> None:
    """Refuse a record that lacks any of ``names``, listing every missing one.

    Raises:
        PackError: naming the record and the missing fields.
    """
    missing = [n for n in names if n not in rec.data]
    if missing:
        raise PackError(f"{rec.where}: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")


def _utf8(rec: SourceRecord, key: str, text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        # JSON escapes can carry lone surrogates, which no UTF-8 file can hold.
        raise PackError(f"{rec.where}: field {key!r}: not UTF-8 text ({e.reason} at character {e.start})") from None
    return text


def get_str(rec: SourceRecord, key: str) -> str:
    """A text field.

    Raises:
        PackError: missing, not a string, or not encodable as UTF-8.
    """
    require_fields(rec, [key])
    value = rec.data[key]
    if not isinstance(value, str):
        raise PackError(f"{rec.where}: field {key!r} should be a string, got {type(value).__name__}")
    return _utf8(rec, key, value)


def get_int(rec: SourceRecord, key: str) -> int:
    """An integer field (a boolean is not an integer).

    Raises:
        PackError: missing or not an integer.
    """
    require_fields(rec, [key])
    value = rec.data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise PackError(f"{rec.where}: field {key!r} should be an integer, got {type(value).__name__}")
    return value


def get_str_list(rec: SourceRecord, key: str, *, json_encoded: bool = False) -> list[str]:
    """A list-of-strings field; with ``json_encoded`` a string holding a JSON list is accepted too.

    Raises:
        PackError: missing, not a list of strings, or an encoded list that does not parse.
    """
    require_fields(rec, [key])
    value = rec.data[key]
    if json_encoded and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise PackError(f"{rec.where}: field {key!r}: invalid JSON-encoded list ({e.msg})") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PackError(f"{rec.where}: field {key!r} should be a list of strings")
    return [_utf8(rec, key, v) for v in value]


def named(rec: SourceRecord, key: str) -> SourceRecord:
    """The same record, its location extended with its own id (``line 3 (HumanEval/2)``) when
    the id field holds a string or an integer, so every later refusal names it."""
    value = rec.data.get(key)
    if isinstance(value, str) and value:
        return SourceRecord(f"{rec.where} ({value})", rec.data)
    if isinstance(value, int) and not isinstance(value, bool):
        return SourceRecord(f"{rec.where} ({key} {value})", rec.data)
    return rec


def task_id_for(original: str, where: str) -> str:
    """A safe task id for a source id: characters outside ``[A-Za-z0-9._-]`` and runs of dots
    become ``_`` ("HumanEval/0" -> "HumanEval_0").

    Raises:
        PackError: the result is still not a valid id (empty or longer than 128 characters).
    """
    mapped = _DOT_RUNS.sub(lambda m: "_" * len(m.group(0)), _UNSAFE_ID_CHARS.sub("_", original))
    try:
        return check_id(mapped)
    except ValueError as e:
        raise PackError(f"{where}: cannot make a task id from {original!r}: {e}") from None


def check_unique(ids: Iterable[tuple[str, str]]) -> None:
    """Refuse duplicate task ids, compared without case as pack loading does.

    ``ids`` holds (task id, where the record is) pairs.

    Raises:
        PackError: naming both records of the first duplicate.
    """
    seen: dict[str, tuple[str, str]] = {}
    for task_id, where in ids:
        key = task_id.lower()
        if key in seen:
            first_id, first_where = seen[key]
            raise PackError(
                f"{where}: duplicate task id {task_id!r} (already used by {first_where}"
                + (f" as {first_id!r}" if first_id != task_id else "") + ")"
            )
        seen[key] = (task_id, where)


def file_digest(path: Path) -> str:
    """The tagged sha256 of a source file's bytes (of the file as given, compressed or not).

    Raises:
        PackError: the file cannot be read.
    """
    try:
        return sha256_file(path)
    except FileNotFoundError:
        raise PackError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise PackError(f"{path}: is a directory, expected a data file") from None
    except OSError as e:
        raise PackError(f"{path}: cannot read ({e.strerror})") from None


def directory_digest(path: Path) -> str:
    """The tagged tree digest of a source directory.

    Raises:
        PackError: the tree holds a link leaving it, a special file, or cannot be read.
    """
    try:
        return tree_digest(path)
    except UnsafeTree as e:
        raise PackError(f"{e.path}: {e.why}") from None
    except OSError as e:
        raise PackError(f"{path}: cannot read ({e.strerror})") from None


def fenced(text: str, language: str = "") -> str:
    """``text`` in a Markdown code fence longer than any backtick run inside it."""
    longest = max((len(m.group(0)) for m in re.finditer(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def parse_python(code: str, where: str, what: str) -> ast.Module:
    """Parse source text from a data set, whatever the caller's warning filters.

    Data-set code carries invalid escapes ("\\w" outside raw strings): a warning at compile
    time, which ``-W error`` would turn into a SyntaxError for valid code.

    Raises:
        PackError: the code does not parse, naming the record and what was parsed.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return ast.parse(code)
        except SyntaxError as e:
            raise PackError(f"{where}: {what} does not parse as Python ({e.msg}, line {e.lineno})") from None


def first_records(items: Sequence[T], limit: int | None) -> Sequence[T]:
    """The first ``limit`` items (all of them for ``None``)."""
    return items if limit is None else items[:limit]
