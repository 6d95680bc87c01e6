"""One writer per run directory: an exclusive lock held for the whole command.

``run`` and ``probe`` take :func:`hold_writer` on the directory they write (the run directory,
or its ``probe/``) before they read or repair its journal, and keep it until the command ends;
the lock file records the holder's pid and command line. A second writer is refused at once
(exit 3), naming the holder. ``score``, ``bundle`` and ``report`` read a run directory under a
shared lock (:func:`hold_reader`): they refuse a directory while it is being written, and a
writer that starts while they read is refused in turn. The kernel drops a lock when its holder
exits, however it exits, so a killed run never leaves a stale lock behind.

The lock is ``flock(2)`` on ``<dir>/writer.lock``, opened close-on-exec so that no sandboxed
process inherits it. It binds the processes of one machine; on a network file system it may
bind only those of one client.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import stat
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Final

from . import scratch
from .errors import Refusal, RunRefusal, ScoreRefusal

LOCK_NAME: Final = "writer.lock"
_RECORD_WAIT_S: Final = 1.0


class DirLock:
    """A lock on one directory, held until :meth:`release` (or the end of a ``with`` block)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _describe_holder(fd: int) -> str:
    """Who holds the lock on ``fd``'s file: "being written by pid N (command)" or readers."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pass
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "being read by another sealbench command (score, bundle or report)"
    # The holder writes its record just after taking the lock: until then the file is empty or
    # still names the previous holder, which has ended. Wait a moment for the live one.
    deadline = time.monotonic() + _RECORD_WAIT_S
    while True:
        try:
            record = json.loads(os.pread(fd, 4096, 0) or b"{}")
            pid: int | None = int(record["pid"])
            command = record.get("command")
        except (OSError, ValueError, KeyError, TypeError):
            record, pid, command = {}, None, None
        if (pid is not None and scratch.pid_alive(pid)) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if pid is None or not scratch.pid_alive(pid):
        return "being written by another process"
    what = f"`{shlex.join(command)}`, " if isinstance(command, list) and all(isinstance(a, str) for a in command) else ""
    return f"being written by pid {pid} ({what}since {record.get('since', '?')})"


def _open_lock(path: Path, flags: int, error: type[Refusal], mode: int = 0o644) -> int:
    """Open the lock file at ``path``: never through a link, never blocking on a FIFO, and only a
    regular file (a bundle from elsewhere may carry a ``writer.lock`` of any kind).

    Raises:
        Refusal (``error``): ``path`` is a link, FIFO, socket, device or directory.
        FileNotFoundError, NotADirectoryError, OSError: as ``os.open``.
    """
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise error(f"{path} is not a regular file (a link, directory or socket): "
                        f"not a lock sealbench made; this directory was not written by sealbench") from None
        raise
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise error(f"{path} is not a regular file (a FIFO, device or directory): "
                    f"not a lock sealbench made; this directory was not written by sealbench")
    return fd


def hold_writer(directory: Path, command: Sequence[str] | None) -> DirLock:
    """Take the exclusive writer lock of ``directory`` (created if needed) and record the holder.

    Raises:
        RunRefusal: another process writes ``directory``, or a command reads it right now, or
            its lock file is not a regular file.
        OSError: the lock file cannot be created (a storage failure among them).
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    fd = _open_lock(path, os.O_RDWR | os.O_CREAT, RunRefusal)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _describe_holder(fd)
        os.close(fd)
        raise RunRefusal(
            f"{directory} is {holder}: one run directory has one writer; wait for that command to end "
            f"(or stop it: it can be resumed)"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    record = {"pid": os.getpid(), "command": list(command) if command is not None else None,
              "since": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    # Informational only (the lock is the flock): a full disk must not stop it being taken.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode() + b"\n", 0)
    return DirLock(path, fd)


def hold_reader(directory: Path, command: str, error: type[Refusal] = ScoreRefusal) -> DirLock | None:
    """Take a shared lock on ``directory`` while ``command`` reads it; None if no writer ever locked it.

    Raises:
        Refusal (``error``): a run or probe is writing ``directory`` right now, or its lock file
            is not a regular file (a link, FIFO or device planted in a bundle).
    """
    try:
        fd = _open_lock(directory / LOCK_NAME, os.O_RDONLY, error)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _describe_holder(fd)
        os.close(fd)
        raise error(f"{directory} is {holder}; {command} it once that command has ended") from None
    except BaseException:
        os.close(fd)
        raise
    return DirLock(directory / LOCK_NAME, fd)
