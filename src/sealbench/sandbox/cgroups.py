"""Process-count enforcement: a ``pids`` cgroup per run, removed after it and swept when stale.

Run cgroups are named ``run-<pid>-<n>`` under ``<pids hierarchy>/sealbench``. After a run,
once its processes are all dead, a cgroup the kernel still reports busy is retried for a
second on a thread of its own (the command's caller does not wait for it;
:func:`settle_cgroup_removals` does), then left for a later sweep and recorded
(:func:`deferred_cgroup_removals`) rather than failing the run. :func:`open_sandbox` sweeps
stale run cgroups: those whose owner pid no longer exists (a runner killed with SIGKILL), and
this process's own leftovers; their processes are killed first. A live owner's cgroups are
never touched.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import itertools
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sealbench import scratch

_SWEEP_S: Final = 5.0
_REMOVE_S: Final = 1.0
_CGROUP_TRIES: Final = 5
_VANISHED: Final = (errno.ENOENT, errno.ENODEV)
_POLL_TICK_S: Final = 0.005



@dataclass(frozen=True)
class _PidsHierarchy:
    """A writable ``pids`` cgroup hierarchy, with ``root`` the sealbench parent cgroup."""

    version: int
    root: Path

    def describe(self) -> str:
        return f"pids cgroup v{self.version} ({self.root})"


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def unescape_mount_field(text: str) -> str:
    """A field of ``/proc/self/mounts`` as written there, with blanks and backslashes escaped
    as octal (``\\040`` ...), read back."""
    return text.encode().decode("unicode_escape") if "\\" in text else text


def _cgroup_mounts() -> Iterator[tuple[Path, str, set[str]]]:
    try:
        lines = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            yield Path(unescape_mount_field(parts[1])), parts[2], set(parts[3].split(","))


def _prepare_hierarchy(mount: Path, fstype: str, options: set[str]) -> _PidsHierarchy | None:
    if fstype == "cgroup":
        if "pids" not in options:
            return None
        hierarchy = _PidsHierarchy(1, mount / "sealbench")
        hierarchy.root.mkdir(exist_ok=True)
    else:
        if "pids" not in (mount / "cgroup.controllers").read_text(encoding="ascii").split():
            return None
        hierarchy = _PidsHierarchy(2, mount / "sealbench")
        if "pids" not in (mount / "cgroup.subtree_control").read_text(encoding="ascii").split():
            _write_text(mount / "cgroup.subtree_control", "+pids")
        hierarchy.root.mkdir(exist_ok=True)
        _write_text(hierarchy.root / "cgroup.subtree_control", "+pids")
    probe = hierarchy.root / f"probe-{os.getpid()}-{threading.get_ident()}"
    probe.mkdir()
    try:
        _write_text(probe / "pids.max", "max")
    finally:
        probe.rmdir()
    sweep_stale_cgroups(hierarchy)
    return hierarchy


@functools.cache
def _pids_hierarchy() -> _PidsHierarchy | None:
    for mount, fstype, options in _cgroup_mounts():
        try:
            hierarchy = _prepare_hierarchy(mount, fstype, options)
        except OSError:
            continue
        if hierarchy is not None:
            return hierarchy
    return None


def process_limit_method() -> str:
    """Say how ``Limits.processes`` is enforced on this machine, for the run journal.

    A per-run ``pids`` cgroup is preferred; RLIMIT_NPROC is the fallback when not root (it is
    counted per uid, so the caller's other processes share it); as root without a writable
    ``pids`` cgroup the cap is not enforced, and the returned text says so.
    """
    hierarchy = _pids_hierarchy()
    if hierarchy is not None:
        return hierarchy.describe()
    if os.geteuid() != 0:
        return f"RLIMIT_NPROC (per uid {os.getuid()}, raised by the tasks it already runs)"
    return "unenforced: root ignores RLIMIT_NPROC and no writable pids cgroup was found"


# Run cgroups of this process that are in use (created, not yet given up). Every other
# ``run-<pid>-<n>`` named after this process is a leftover: of an earlier process that had the
# same pid, or one of ours whose removal was deferred.
_active_cgroups: set[str] = set()
# Emptied run cgroups of this process whose removal failed (still busy): path -> reason.
_deferred_cgroups: dict[str, str] = {}
_cgroups_lock = threading.Lock()


def deferred_cgroup_removals() -> dict[str, str]:
    """Run cgroups of this process left for a later sweep (path -> why), for diagnostics.

    A run whose processes were all killed but whose cgroup could not be removed in time
    leaves it here instead of failing; the end of every later run and every
    :func:`open_sandbox` retries, and the first sweep after this process is gone removes it.
    """
    with _cgroups_lock:
        return dict(_deferred_cgroups)


class _RunCgroup:
    """One per-run pids cgroup: created before the launch, emptied and removed after it."""

    _names = itertools.count()

    def __init__(self, version: int, path: Path, max_pids: int) -> None:
        self.version = version
        self.path = path
        self.max_pids = max_pids

    @classmethod
    def create(cls, hierarchy: _PidsHierarchy, max_pids: int) -> _RunCgroup:
        cgroup = cls(hierarchy.version, hierarchy.root, max_pids)
        cgroup.path = cgroup._make(hierarchy.root)
        return cgroup

    def _make(self, root: Path) -> Path:
        for attempt in range(_CGROUP_TRIES):
            path = root / f"run-{os.getpid()}-{next(self._names)}"
            with _cgroups_lock:  # before mkdir: a sweep in another thread must not take it
                _active_cgroups.add(path.name)
            try:
                path.mkdir()
            except FileExistsError:
                _forget(path)  # a leftover of an earlier process that had our pid
                continue
            except OSError:
                _forget(path)
                raise
            try:
                _write_text(path / "pids.max", str(self.max_pids))
                return path
            except OSError as exc:
                _forget(path)
                with contextlib.suppress(OSError):
                    path.rmdir()
                # ENOENT / ENODEV: removed under us (an old sealbench's sweep); take another.
                if exc.errno not in _VANISHED or attempt == _CGROUP_TRIES - 1:
                    raise
        raise OSError(errno.EEXIST, f"no free run cgroup name under {root}")

    def admit(self, pid: int) -> None:
        """Move ``pid`` (held at the launch gate, so it has no children yet) into the cgroup.

        A cgroup removed under us is replaced by a fresh one; a transient refusal is retried.
        """
        pause = 0.001
        for attempt in range(_CGROUP_TRIES):
            try:
                _write_text(self.path / "cgroup.procs", str(pid))
                return
            except OSError as exc:
                if attempt == _CGROUP_TRIES - 1:
                    raise
                if exc.errno in _VANISHED:
                    _forget(self.path)
                    self.path = self._make(self.path.parent)
                elif exc.errno in (errno.EAGAIN, errno.EINTR, errno.EBUSY):
                    time.sleep(pause)
                    pause *= 4
                else:
                    raise

    def _members(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text(encoding="ascii")
        except OSError as exc:
            if exc.errno in _VANISHED:
                return []  # removed or being removed (by a sweep), so it was empty
            raise
        return [int(pid) for pid in text.split()]

    def kill_all(self, timeout_s: float = _SWEEP_S) -> bool:
        """SIGKILL every member until the cgroup is empty; False if some outlive ``timeout_s``."""
        with contextlib.suppress(OSError):
            # No member can fork any more, so one sweep usually empties the cgroup.
            _write_text(self.path / "pids.max", "0")
        if self.version == 2 and (self.path / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write_text(self.path / "cgroup.kill", "1")
        give_up = time.monotonic() + timeout_s
        pause = 0.0001
        while True:
            members = self._members()
            if not members:
                return True
            if time.monotonic() > give_up:
                return False
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            # Usually only bwrap's reaper is still exiting: a short first pause saves a launch
            # most of the fixed tick.
            time.sleep(pause)
            pause = min(pause * 2, _POLL_TICK_S)

    def remove(self, timeout_s: float) -> str | None:
        """Remove the emptied cgroup: None once gone, else why it is still there.

        The kernel can report a cgroup busy for a moment after its last member is gone; that
        is retried until ``timeout_s``, not turned into a failure of the run.
        """
        give_up = time.monotonic() + timeout_s
        pause = 0.0005
        while True:
            busy, reason = self.try_remove()
            if reason is None:
                _forget(self.path)
                return None
            if not busy or time.monotonic() > give_up:
                return reason
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def release(self) -> None:
        """Remove after a run, on the remover's thread (:data:`_REMOVER`): the caller never
        waits for the kernel to let go of the cgroup."""
        _REMOVER.put(self)

    def try_remove(self) -> tuple[bool, str | None]:
        """One removal: ``(busy, why not)``; ``(False, None)`` once gone, ``busy`` while the kernel
        still holds the emptied cgroup for a moment."""
        try:
            self.path.rmdir()
        except OSError as exc:
            if exc.errno in _VANISHED:
                return False, None
            return exc.errno == errno.EBUSY, f"{exc.strerror} (errno {exc.errno})"
        return False, None

    def settle(self, reason: str | None) -> None:
        """The removal is over: gone (``reason`` None), or deferred to a later sweep (recorded)."""
        with _cgroups_lock:
            _active_cgroups.discard(self.path.name)
            if reason is None:
                _deferred_cgroups.pop(str(self.path), None)
            else:
                _deferred_cgroups[str(self.path)] = reason
            retry = [Path(p) for p in _deferred_cgroups if p != str(self.path)]
        for path in retry:  # earlier deferrals: one cheap attempt each
            _RunCgroup(self.version, path, 0).remove(0.0)


class _Remover:
    """Removes emptied run cgroups on a thread of its own.

    An attempt's end waited for its cgroup's removal, and the next attempt with it: the
    ``rmdir`` itself blocked in the kernel for up to 15 ms now and then, and about one in five
    was refused busy for a moment after the last member died, then retried. The cgroup is
    empty and no process can enter it (only the runner moves one in, before its command
    starts), so nothing a run measures depends on when it goes. Until then it stays among this
    process's active cgroups, so a sweep leaves it alone. A busy one is retried (backing off,
    others meanwhile) for :data:`_REMOVE_S`, then deferred to a later sweep and recorded, as
    before. :func:`settle_cgroup_removals` waits for the removals under way; the process waits
    for them at exit.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_RunCgroup] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._pending = 0
        self._thread: threading.Thread | None = None

    def put(self, cgroup: _RunCgroup) -> None:
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="sealbench-cgroup-remover", daemon=True)
                self._thread.start()
                atexit.register(self.settle)
        self._queue.put(cgroup)

    def _work(self) -> None:
        # cgroup -> (when to try next, the pause after that, when to give up)
        waiting: dict[_RunCgroup, tuple[float, float, float]] = {}
        while True:
            now = time.monotonic()
            due = min((next_try for next_try, _, _ in waiting.values()), default=None)
            try:
                cgroup = self._queue.get(timeout=None if due is None else max(0.0, due - now))
                waiting[cgroup] = (0.0, 0.0005, time.monotonic() + _REMOVE_S)
            except queue.Empty:
                pass
            now = time.monotonic()
            for cgroup, (next_try, pause, give_up) in list(waiting.items()):
                if next_try > now:
                    continue
                try:
                    busy, reason = cgroup.try_remove()
                    if busy and now < give_up:
                        waiting[cgroup] = (time.monotonic() + pause, min(pause * 2, 0.05), give_up)
                        continue
                    cgroup.settle(reason)
                except BaseException as exc:  # never lose the bookkeeping: recorded as deferred
                    cgroup.settle(f"{type(exc).__name__}: {exc}")
                del waiting[cgroup]
                with self._lock:
                    self._pending -= 1
                    self._lock.notify_all()

    def settle(self, timeout_s: float = 2 * _REMOVE_S) -> bool:
        """Wait until every removal handed over has ended (True), or ``timeout_s`` passes."""
        with self._lock:
            return self._lock.wait_for(lambda: self._pending == 0, timeout=timeout_s)


_REMOVER: Final = _Remover()


def settle_cgroup_removals(timeout_s: float = 2 * _REMOVE_S) -> bool:
    """Wait for the removals of emptied run cgroups still under way on the remover's thread:
    True once each has ended (removed, or deferred and recorded, see
    :func:`deferred_cgroup_removals`)."""
    return _REMOVER.settle(timeout_s)


def _forget(path: Path) -> None:
    with _cgroups_lock:
        _active_cgroups.discard(path.name)
        _deferred_cgroups.pop(str(path), None)


def sweep_stale_cgroups(hierarchy: _PidsHierarchy | None = None) -> list[Path]:
    """Kill and remove stale ``run-<pid>-<n>`` cgroups; return those removed.

    Stale means its owner is gone: no process ``pid`` exists (a runner killed with SIGKILL
    leaves its run cgroups behind, sometimes with a bwrap stuck in setup inside), or ``pid``
    is this process and the cgroup is not one of its runs in progress (its removal was
    deferred, or an earlier process had the same pid). A run cgroup whose owner pid is alive
    is never touched; a reused pid only delays the cleanup until that process is gone.
    """
    hierarchy = hierarchy if hierarchy is not None else _pids_hierarchy()
    if hierarchy is None:
        return []
    removed = []
    me = os.getpid()
    for path in hierarchy.root.glob("run-*-*"):
        parts = path.name.split("-")
        if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()) or len(parts[1]) > 9:
            continue  # not a name this module makes
        owner = int(parts[1])
        with _cgroups_lock:
            active = path.name in _active_cgroups
        if active or owner == 0 or (owner != me and scratch.pid_alive(owner)):
            continue
        cgroup = _RunCgroup(hierarchy.version, path, 0)
        with contextlib.suppress(OSError):  # housekeeping: what fails now is retried next time
            if cgroup.kill_all(timeout_s=0.5) and cgroup.remove(0.1) is None:
                removed.append(path)
    return removed
