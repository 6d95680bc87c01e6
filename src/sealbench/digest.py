"""Canonical bytes and algorithm-tagged digests.

Every digest sealbench writes says its algorithm (``sha256:<hex>``) and is computed over
canonical bytes: JSON with sorted keys, compact separators, UTF-8, no NaN. Directory trees
are digested over their sorted relative paths, the executable bit and the contents, so the
digest is independent of file order, mtimes and every other permission bit.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_BARE_HEX_RE = re.compile(r"^[0-9a-f]{64}$")
TREE_FORMAT = "sealbench.tree/1"


# One encoder for every call: json.dumps with options builds a new one each time.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` to the canonical bytes every sealbench digest is taken over."""
    return _CANONICAL.encode(value).encode("utf-8")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of a float's range")
    return value


# One decoder for every call: json.loads with options builds a new one each time.
_STRICT = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def strict_json(data: bytes | str) -> Any:
    """Parse JSON that :func:`canonical_json` can serialise again: no NaN, no Infinity, and no
    number too large for a float (``1e999``).

    Raises:
        ValueError: not UTF-8, not JSON, NaN or Infinity, an integer of more digits than Python
            converts, or nesting deeper than Python's recursion limit (hostile files read by
            verify, score and resume all end up here: an error that names the line, not a crash).
    """
    try:
        return _STRICT.decode(data.decode("utf-8") if isinstance(data, bytes) else data)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8: {e}") from None


def sha256_bytes(data: bytes) -> str:
    """Return the tagged sha256 digest of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the tagged sha256 digest of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def digest_json(value: Any) -> str:
    """Return the tagged digest of ``value``'s canonical JSON."""
    return sha256_bytes(canonical_json(value))


def is_real_digest(text: str) -> bool:
    """True for ``sha256:<64 hex>`` or a bare 64-hex sha256; anything else is a placeholder."""
    return bool(DIGEST_RE.match(text) or _BARE_HEX_RE.match(text))


def same_digest(recorded: str, computed: str) -> bool:
    """Compare a recorded digest (tagged or bare hex) with a computed tagged one."""
    if _BARE_HEX_RE.match(recorded):
        recorded = "sha256:" + recorded
    return recorded == computed


class UnsafeTree(Exception):
    """A tree holds something that cannot be sealed: a symlink out of bounds, a device, a fifo."""

    def __init__(self, path: Path, why: str) -> None:
        self.path = path
        self.why = why
        super().__init__(f"{path}: {why}")


def tree_entries(root: Path, bound: Path | None = None) -> list[list[str]]:
    """List ``[relative_path, kind, digest]`` for every entry under ``root``, sorted by path.

    ``kind`` is ``f`` (file), ``x`` (executable file) or ``l`` (symlink; its digest is over the
    link text). A missing ``root`` is an empty tree. Symlinks whose target resolves outside
    ``bound`` (default ``root``) and special files raise :class:`UnsafeTree`.
    """
    if not root.exists() and not root.is_symlink():
        return []
    limit: Path | None = None  # resolved only when a symlink needs it (most trees have none)
    top = os.fspath(root)
    entries: list[list[str]] = []
    # Plain strings, not Path objects: a pack's check walks every file of every task.
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        dirnames.sort()
        prefix = dirpath[len(top) + 1:] + "/" if dirpath != top else ""
        for name in [*filenames, *[d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]]:
            path = os.path.join(dirpath, name)
            rel = prefix + name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                resolved = (Path(dirpath) / target).resolve()
                if limit is None:
                    limit = (bound or root).resolve()
                if resolved != limit and limit not in resolved.parents:
                    raise UnsafeTree(Path(path), f"symlink leaves the pack (points to {target})")
                entries.append([rel, "l", sha256_bytes(target.encode("utf-8"))])
            elif stat.S_ISREG(st.st_mode):
                kind = "x" if st.st_mode & 0o111 else "f"
                entries.append([rel, kind, sha256_file(path)])
            else:
                raise UnsafeTree(Path(path), "not a regular file, directory or symlink")
    entries.sort(key=lambda e: e[0])
    return entries


def tree_digest(root: Path, bound: Path | None = None) -> str:
    """Return the tagged digest of the tree under ``root`` (see :func:`tree_entries`)."""
    return digest_json([TREE_FORMAT, tree_entries(root, bound)])
