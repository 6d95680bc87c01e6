"""Scratch named after the process that made it, and the sweep that removes what the dead left.

A command killed with SIGKILL cannot clean up after itself. So everything sealbench writes
before renaming it into place carries the writer's process id in its name, and the next
command that works in the same place removes the scratch whose process is gone:

* ``.<name>.tmp-<pid>-<random>``: a file being written atomically (:func:`files.write_atomic`);
* ``.<run_id>.partial-<pid>-<random>``: a bundle being assembled beside its target;
* ``.<pack>.importing-<pid>-<random>``: a pack being imported beside its target;
* ``sealbench-<what>-<pid>-<random>`` in the temporary directory: validation scratch, the
  sandbox's smoke test, the agent command's check before a run, ``agent check``'s run, the
  sandbox's loopback resolv.conf, the model gateway's sockets, each Ray runner's pack and
  workspaces, and a sandbox backend's conformance check (:data:`TEMP_DIR_KINDS`: :func:`temp_dir`
  makes no other kind, so none escapes the sweep).

Scratch of a live process is never touched. Liveness is judged by pid on this machine: a
dead writer's pid reused by another process only delays the removal until that one is gone,
and a directory shared by machines (NFS) is swept only of what this machine's pids left.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Final

TEMP_FILE: Final = re.compile(r"^\..+\.tmp-(?P<pid>\d{1,10})-[A-Za-z0-9_]+$")
PARTIAL_BUNDLE: Final = re.compile(r"^\..+\.partial-(?P<pid>\d{1,10})-[A-Za-z0-9_]+$")
IMPORTING_PACK: Final = re.compile(r"^\..+\.importing-(?P<pid>\d{1,10})-[A-Za-z0-9_]+$")
TEMP_DIR_KINDS: Final = ("validate", "smoke", "resolv", "gateway", "preflight", "agentcheck", "ray-node", "pycache",
                         "pycache-root", "conformance")
TEMP_DIR_SCRATCH: Final = re.compile(
    rf"^sealbench-(?:{'|'.join(re.escape(k) for k in TEMP_DIR_KINDS)})-(?P<pid>\d{{1,10}})-[A-Za-z0-9_]+$")


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (it may belong to someone else)."""
    if pid <= 0:
        return True  # never a name sealbench makes: leave it alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's, or a number no process has: never a name sealbench made
    return True


def tag(kind: str) -> str:
    """The infix that names this process as the owner: ``<kind>-<pid>-``."""
    return f"{kind}-{os.getpid()}-"


def temp_dir(what: str) -> Path:
    """A new private directory ``sealbench-<what>-<pid>-<random>`` in the temporary directory.

    Earlier ones of dead processes are swept first.

    Raises:
        ValueError: ``what`` is not one of :data:`TEMP_DIR_KINDS` (the sweep would never find it).
    """
    if what not in TEMP_DIR_KINDS:
        raise ValueError(f"scratch kind {what!r} is not one the sweep knows ({', '.join(TEMP_DIR_KINDS)})")
    sweep(Path(tempfile.gettempdir()), TEMP_DIR_SCRATCH)
    return Path(tempfile.mkdtemp(prefix=f"sealbench-{what}-{os.getpid()}-"))


def sweep(directory: Path, pattern: re.Pattern[str]) -> list[Path]:
    """Remove the entries of ``directory`` named by ``pattern`` whose process is gone.

    Housekeeping: an entry that cannot be removed now (permissions, a race with another
    sweep) is left for the next one. Symlinks are removed, never followed. Returns what was
    removed.
    """
    removed: list[Path] = []
    try:
        with os.scandir(directory) as listing:
            entries = list(listing)
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or pid_alive(int(match.group("pid"))):
            continue
        path = Path(entry.path)
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed


def sweep_temp_files(*directories: Path) -> list[Path]:
    """Remove the half-written files of dead writers from each directory (not recursively)."""
    removed: list[Path] = []
    for directory in directories:
        removed += sweep(directory, TEMP_FILE)
    return removed
