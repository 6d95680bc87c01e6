"""The blob store: a run directory's (or bundle's) ``blobs/`` folder, each file named by the
sha256 of its bytes.

:func:`store_bytes` keeps bytes there (durably, before the journal line that names them);
:class:`Blobs` reads one back without following a link, up to a cap.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from .digest import sha256_bytes
from .files import write_atomic
from .safe_text import inert

FULL_CAP = 4 * 2**20
"""Bytes of a blob read at most, even with ``--full``."""
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Blob:
    """What one stored blob holds, as read: ``data`` (at most the cap), whether it was longer,
    and whether its bytes match the digest that names it (unknown when not read whole)."""

    data: bytes
    truncated: bool
    matches: bool | None

    def text(self) -> str:
        return inert(self.data.decode("utf-8", "replace"))


class Blobs:
    """The ``blobs/`` folder of a run directory or bundle, read without following links."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self, digest: str | None, cap: int = FULL_CAP) -> Blob | None:
        """The blob ``digest`` names, or None when there is none (no digest, a malformed one,
        or no regular file of that name)."""
        m = _DIGEST.fullmatch(digest or "")
        if m is None:
            return None
        try:
            dir_fd = os.open(self.root / "blobs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fd = os.open(m.group(1), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return None
        finally:
            os.close(dir_fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks: list[bytes] = []
            size = 0
            while size <= cap:
                chunk = os.read(fd, min(1 << 20, cap + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if len(data) > cap:
            return Blob(data[:cap], True, None)
        return Blob(data, False, sha256_bytes(data) == digest)


def store_bytes(run_dir: Path, data: bytes, *, durable: bool = True) -> str:
    """Keep ``data`` in blobs/ under its digest, durably (before the journal event naming it)
    unless ``durable`` is False (a cluster node's scratch: the coordinator stores it again)."""
    digest = sha256_bytes(data)
    dest = run_dir / "blobs" / digest.removeprefix("sha256:")
    if not dest.exists():
        write_atomic(dest, data, durable=durable)
    return digest
