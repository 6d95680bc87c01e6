"""Run one untrusted command under hard caps, isolated from the host.

Agent code is hostile: this module assumes the command tries to read the hidden tests, write
outside its workspace, phone home, outlive its attempt, fork-bomb the machine and flood its
output. Every backend enforces the same caps; only ``bubblewrap`` also isolates.

Isolation model of :class:`BubblewrapSandbox` (``bwrap`` >= 0.8 tested)
-----------------------------------------------------------------------
* Namespaces: new user, mount, pid, network, ipc, uts and cgroup namespaces
  (``--unshare-all --unshare-user``), every capability dropped (``--cap-drop ALL``), no nested
  user namespaces (``--disable-userns``), ``no_new_privs`` set by bwrap.
* Filesystem: the root is an empty tmpfs made read-only. Read-only binds of ``/usr``, ``/bin``,
  ``/sbin``, ``/lib``, ``/lib32``, ``/lib64``, ``/etc`` (those that exist; merged-usr symlinks
  are recreated as symlinks), the interpreter's ``sys.base_prefix`` / ``sys.prefix`` and the
  spec's ``readonly_paths``, each at its host path. A fresh size-capped tmpfs on ``/tmp`` and
  ``/dev/shm``, bwrap's minimal ``/dev`` (null, zero, full, random, urandom, tty, pts) made
  read-only, a private ``/proc`` showing only the sandbox's processes, no ``/sys``. ``HOME``
  is created inside the workdir, on the private ``/tmp``, or as its own tmpfs. ``workdir`` and
  the spec's ``writable_paths`` (each at its host path) are the only writable host
  directories; with ``workdir_caps`` / ``writable_caps`` they are size-capped tmpfs mounts
  instead, copied in from the host before the command and back after the sandbox is gone (a
  disk quota). Everything else of the host (``/root``, ``/home``,
  ``/work``, ``/run``, sibling directories of the workdir such as hidden tests) is absent.
* Network: an empty network namespace with only a loopback device, so the host's loopback
  services, its resolver and the outside world are unreachable; ``/etc/resolv.conf`` names the
  sandbox's own loopback, so a name lookup fails at once instead of waiting out a timeout. A
  spec's ``relay`` (model-backed agents) adds one way out: a relay started in place of the
  command listens on ``127.0.0.1:PORT`` inside and forwards bytes to one unix socket of the
  host's model gateway, whose directory alone is bound in (read-only), then execs the command
  (:mod:`sealbench.relay`).
* Processes: the command runs in its own session and process group (``--new-session``, apart
  from bwrap's monitor, which would take the namespace down at once if it got the SIGTERM); at
  the deadline the group gets SIGTERM and, :data:`KILL_GRACE_S` later, SIGKILL. When bwrap exits, its
  ``--die-with-parent`` pid-1 reaper dies and the kernel kills everything left in the pid
  namespace; :meth:`run` returns only once that reaper has exited, which the kernel reports
  only after every other process of the namespace is gone (a per-run cgroup, when there is
  one, is also swept and must be empty).
* Caps: RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE and RLIMIT_CORE=0 are set before exec; the
  process count is bounded by a per-run ``pids`` cgroup (v1 or v2) when one is writable, else
  by RLIMIT_NPROC when not root (see :func:`process_limit_method`). stdout and stderr are
  captured through pipes, at most ``output_bytes`` each is kept and the rest is counted and
  discarded, so the command never blocks on a full pipe.

Launch (thread-safe: :meth:`run` is called from many threads at once)
---------------------------------------------------------------------
:meth:`~BubblewrapSandbox.prepare` does everything below and lets bwrap build the namespaces
and mounts, which then waits on its start gate; :meth:`Prepared.start` opens that gate and
starts the deadline (the command is exec'd about a millisecond later), so a runner can set the
next command up while the current one runs. :meth:`run` is prepare then start.

The gate is bwrap's ``--seccomp`` fd, read to its end after the sandbox is built and before
the exec. Opened, it carries a one-instruction program that allows every system call. If it
closes empty (the runner died, or gave the command up), bwrap cannot load a program of no
instruction and exits without exec'ing: a command held ahead never starts without its runner.
bwrap's own ``--block-fd`` would not do: it proceeds on end of file too, and its pid-1 only
binds itself to its parent's life after the gate, so the command would run unsupervised.
:meth:`BubblewrapSandbox.smoke_test` checks the installed bwrap for this behaviour. Once
started, a command dies with the runner: the runner's death kills bwrap
(``--die-with-parent``), and bwrap's death tears its pid namespace down. :class:`NoSandbox`
has no namespace: a watcher left in the command's process group kills the group when the
runner's end of the gate pipe closes.

No Python code runs between fork and exec (``preexec_fn`` is unsafe in a threaded process and
forces a full fork). The child is ``/bin/sh``, which blocks on a pipe while the parent writes
its pid into the run cgroup's ``cgroup.procs`` (when there is one) and sets its rlimits with
prlimit(2) (soft = hard), then execs the backend's command, keeping its pid: the command and
all it forks are born inside the cgroup and under the caps (nothing untrusted runs before
that, and if either step fails the child is killed and never execs). A cgroup removed under
us before the move (an older sealbench's sweep) is replaced by a fresh one.

Run cgroups are named ``run-<pid>-<n>`` under ``<pids hierarchy>/sealbench``. After a run,
once its processes are all dead, a cgroup the kernel still reports busy is retried for a
second on a thread of its own (the command's caller does not wait for it;
:func:`settle_cgroup_removals` does), then left for a later sweep and recorded
(:func:`deferred_cgroup_removals`) rather than failing the run. :func:`open_sandbox` sweeps
stale run cgroups: those whose owner pid no longer exists (a runner killed with SIGKILL), and
this process's own leftovers; their processes are killed first. A live owner's cgroups are
never touched.

Known limits
------------
* ``/etc`` is exposed whole (minus entries that are not world-readable, which are masked):
  hostnames, users and groups, installed package configuration and any world-readable secret
  an administrator left there are visible. The Python prefix exposes its site-packages.
* The command runs as uid 0 of its user namespace, mapped to the caller's uid: without
  capabilities it cannot bypass file permissions, but it can read whatever the caller's uid
  may read among the exposed paths and it owns the files it writes in the workdir.
* No seccomp filter but the start gate's, which allows every call: the whole syscall surface
  of the kernel is reachable. bwrap must be built with seccomp support for the gate. No
  memory cgroup: memory is bounded per process (RLIMIT_AS) and by the tmpfs sizes, not per run.
* CPU time is bounded only by the wall-clock deadline.
* Stale-cgroup ownership is judged by pid in the caller's pid namespace: runners sharing one
  cgroup hierarchy from different pid namespaces must not share its ``sealbench`` directory.
  A dead runner's pid reused by another process delays the cleanup until that one exits.
* :class:`NoSandbox` checks up front that the command is an executable on ``PATH``; any other
  exec failure is reported as the gate shell reports it (exit code 126 or 127, its message on
  stderr). It runs as the caller, so a root command can leave its cgroup, and one that leaves
  its process group (setsid) is out of the reaper's reach when the runner dies; the caller's
  own processes, the reaper included, are within its reach.
* A command killed by a signal inside bwrap is reported like a shell does, as exit code
  ``128 + signal`` (``signal`` stays ``None``); :class:`NoSandbox` reports the signal itself.
* The environment is exactly ``spec.env`` plus ``PWD`` (bwrap always sets it; :class:`NoSandbox`
  sets it too, to the workdir).

:class:`NoSandbox` applies the same caps, kill policy and output capture to a plain subprocess
(``kind`` "none"): it isolates nothing. A util-linux ``unshare`` backend is deliberately not
provided: without a per-launch mount helper it cannot hide the host filesystem, so the hidden
tests would be readable and a grade obtained under it would mean nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import functools
import itertools
import json
import math
import os
import queue
import resource
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from sealbench import scratch
from sealbench.agentfs import TreeCaps, TreeRejected, copy_tree_fd, open_dir
from sealbench.errors import HarnessError, RunRefusal, UsageError

__all__ = [
    "KILL_GRACE_S",
    "BubblewrapSandbox",
    "Limits",
    "NoSandbox",
    "Prepared",
    "PreparedProcess",
    "Relay",
    "Sandbox",
    "SandboxResult",
    "SandboxSpec",
    "command_path",
    "deferred_cgroup_removals",
    "open_ahead",
    "open_bubblewrap",
    "open_none",
    "open_sandbox",
    "process_limit_method",
    "settle_cgroup_removals",
    "sweep_stale_cgroups",
    "unescape_mount_field",
]

COMMAND_NICENESS: Final = 10
"""How much lower than the runner's the sandboxed commands' scheduling priority is in a run of
many agents at once (``SandboxSpec.yield_cpu``; nice, set on the gated child before it execs,
so everything it forks inherits it and cannot undo it without CAP_SYS_NICE). Hundreds of
sandboxes busy at once then cannot starve the runner, whose journal must get a line written
within its lease; idle CPU still goes to the commands. Not below that: at --jobs 1 the lower
priority cost about 5% of a trivial task's time (bubblewrap's set-up yields to the runner)."""
YIELD_ABOVE_JOBS: Final = 16
"""The --jobs above which the commands and the executor's threads yield to the runner (the
default --jobs is at most this)."""
KILL_GRACE_S: Final = 0.5
"""Seconds between SIGTERM and SIGKILL once the deadline has passed."""

_REAP_S: Final = 5.0
_DRAIN_S: Final = 2.0
_SWEEP_S: Final = 5.0
_SETUP_S: Final = 30.0
_SETUP_TICK_S: Final = 0.002
_REMOVE_S: Final = 1.0
_CGROUP_TRIES: Final = 5
_VANISHED: Final = (errno.ENOENT, errno.ENODEV)
_SHELL: Final = "/bin/sh"
# Runs as the launched child itself, before anything untrusted: waits until the parent has put
# it into the run cgroup and set its rlimits (a closed pipe means the parent gave up), then
# execs the backend's command.
_GATE_SCRIPT: Final = 'read -r go || exit 125; exec "$@" </dev/null'
# The reaper (see _Reaper): reads "+pgid" / "-pgid" lines until the runner's end of the pipe
# closes, then SIGKILLs every process group still registered.
_REAPER_CODE: Final = """
import os, signal, sys
live = set()
for line in sys.stdin.buffer:
    op, pgid = line[:1], int(line[1:])
    (live.add if op == b"+" else live.discard)(pgid)
for pgid in live:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""
# bubblewrap's start gate: bwrap reads a seccomp program from its --seccomp fd until EOF after
# building the sandbox and before exec'ing the command. Released, the fd carries one BPF
# instruction, "return ALLOW" (struct sock_filter: u16 code, u8 jt, u8 jf, u32 k). Closed empty
# (the runner died, or gave up), bwrap cannot load a filter of no instruction and exits without
# exec'ing: a closed gate means stop. BubblewrapSandbox.smoke_test checks exactly that.
_ALLOW_ALL: Final = struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000)
_CHUNK: Final = 1 << 16
_STDERR_HEAD: Final = 4096
_POLL_TICK_S: Final = 0.005
_SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")
_KERNEL_DIRS: Final = ("/proc", "/dev", "/sys")
# bwrap's outer monitor and its pid-1 reaper share the cgroup with the command. Its setup
# helper lives only while the sandbox is built, before the command exists, so it needs no slot
# of its own (counting it let the command run one process over its cap).
_BWRAP_HELPERS: Final = 2
_RLIMITS_TEXT: Final = (
    "RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE and RLIMIT_CORE=0 set with prlimit(2) before exec"
)
_KILL_TEXT: Final = f"SIGTERM to the process group at the deadline, SIGKILL {KILL_GRACE_S} s later"


@dataclass(frozen=True)
class Limits:
    """Hard caps for one sandboxed run.

    ``processes`` bounds live processes and threads of the command (sandbox helpers excluded);
    ``output_bytes`` bounds what is kept of each of stdout and stderr; ``tmp_bytes`` is the
    size of each private tmpfs (``/tmp``, ``/dev/shm``, a ``HOME`` outside the workdir).

    Raises:
        ValueError: a cap is not a positive integer.
    """

    address_space_bytes: int = 4 * 2**30
    processes: int = 256
    file_size_bytes: int = 256 * 2**20
    open_files: int = 512
    output_bytes: int = 1 * 2**20
    tmp_bytes: int = 512 * 2**20

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class Relay:
    """One loopback port inside the sandbox, relayed to a unix socket of the host.

    ``socket`` is an absolute path whose directory holds nothing the command may not see: the
    directory is bound read-only into the sandbox at its host path.
    """

    port: int
    socket: Path

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"relay port must be 1-65535: {self.port!r}")
        if not Path(self.socket).is_absolute():
            raise ValueError(f"relay socket must be absolute: {self.socket}")


@dataclass(frozen=True)
class SandboxSpec:
    """What to run, where, and under which caps.

    ``workdir`` is absolute, the only writable host directory, mounted at the same path and
    used as the working directory. ``env`` is the complete environment inside (the caller
    builds it clean). ``timeout_s`` is a hard wall-clock deadline measured from start.
    Captured output goes to ``stdout_path`` / ``stderr_path`` on the host (keep them outside
    the workdir, or the command can overwrite them); ``None`` keeps it in memory instead, in
    :attr:`SandboxResult.stdout` / :attr:`SandboxResult.stderr` (no file to create and remove).
    ``as_pid_1`` runs the command as pid 1 of its pid namespace, with no bwrap reaper beside
    it: nothing it starts can signal it without its consent, nor rewrite a reaper (a dumpable
    process of the same uid) to forge its exit status. It is for a trusted supervisor that
    reaps its own children (:mod:`sealbench.function_oracle`); :class:`NoSandbox` ignores it.
    ``readonly_paths`` are exposed read-only and ``writable_paths`` (existing directories, for
    what the command must hand back outside its workdir) writable, each at its host path.
    ``workdir_caps`` gives the workdir a disk quota (bubblewrap 0.7 or newer): inside the
    sandbox it is a tmpfs of ``workdir_caps.max_bytes`` bytes, filled from the host directory
    before the command starts and copied back over it, under these caps, once every process
    of the sandbox is gone; a write past the quota fails inside with ENOSPC.
    ``writable_caps`` does the same for each of ``writable_paths``. :class:`NoSandbox` ignores
    both (no quota there). ``relay`` opens one loopback port inside to a host unix socket
    (:class:`Relay`; bubblewrap only, :class:`NoSandbox` refuses it).

    Raises:
        ValueError: argv is empty, a path is relative, the timeout is not positive, or an
            environment entry cannot be passed to a process.
    """

    argv: tuple[str, ...]
    workdir: Path
    env: Mapping[str, str]
    timeout_s: float
    stdout_path: Path | None
    stderr_path: Path | None
    limits: Limits = field(default_factory=Limits)
    readonly_paths: tuple[Path, ...] = ()
    network: bool = False
    as_pid_1: bool = False
    writable_paths: tuple[Path, ...] = ()
    workdir_caps: TreeCaps | None = None
    writable_caps: TreeCaps | None = None
    relay: Relay | None = None
    links: tuple[tuple[str, str], ...] = ()
    """(path, target) pairs: symlinks made inside the sandbox, on its own root, before it is
    made read-only (a repository environment's fixed path to the workdir). A path must be
    absolute and outside every directory the sandbox binds or mounts; bubblewrap only."""
    yield_cpu: bool = False
    """True: the command runs :data:`COMMAND_NICENESS` below the runner's priority (a run of
    many agents at once, whose sandboxes could otherwise starve the runner)."""

    def __post_init__(self) -> None:
        if not self.argv or not all(isinstance(a, str) and "\0" not in a for a in self.argv):
            raise ValueError(f"argv must be a non-empty tuple of strings without NUL: {self.argv!r}")
        for name in ("workdir", "stdout_path", "stderr_path"):
            if getattr(self, name) is not None and not Path(getattr(self, name)).is_absolute():
                raise ValueError(f"{name} must be absolute: {getattr(self, name)}")
        for path in self.readonly_paths:
            if not Path(path).is_absolute():
                raise ValueError(f"readonly path must be absolute: {path}")
        for path in self.writable_paths:
            if not Path(path).is_absolute():
                raise ValueError(f"writable path must be absolute: {path}")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(f"timeout_s must be positive and finite: {self.timeout_s!r}")
        for key, value in self.env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"environment entry cannot be passed to a process: {key!r}")
        home = self.env.get("HOME")
        if home is not None and not os.path.isabs(home):
            raise ValueError(f"HOME must be absolute: {home!r}")
        for link, target in self.links:
            norm = os.path.normpath(link)
            taken = (*_SYSTEM_DIRS, *_KERNEL_DIRS, "/tmp", str(self.workdir), *(str(p) for p in self.readonly_paths),
                     *(str(p) for p in self.writable_paths))
            if (not os.path.isabs(link) or norm == "/" or "\0" in link or "\0" in target
                    or any(_within(norm, d) or _within(d, norm) for d in taken)):
                raise ValueError(f"link path must be absolute and outside the sandbox's mounts: {link!r}")


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one sandboxed command.

    ``exit_code`` is ``None`` when the command was killed (by the deadline or, outside bwrap,
    by any signal, then named in ``signal``). Byte counts are everything the command wrote,
    kept or discarded. ``stdout`` / ``stderr`` hold what was kept when the spec asked for
    output in memory (a ``None`` path), else ``None``. ``workdir_rejected`` says why the copy
    back of a quota'd workdir stopped (a cap of ``SandboxSpec.workdir_caps`` broken: what the
    command left is its failure); what was copied until then is in the host directory.
    """

    exit_code: int | None
    timed_out: bool
    elapsed_s: float
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    signal: int | None
    stdout: bytes | None = None
    stderr: bytes | None = None
    workdir_rejected: str | None = None


class Prepared(Protocol):
    """One command set up in a sandbox, held before it runs: what a runner needs of any backend."""

    def start(self, timeout_s: float | None = None) -> SandboxResult:
        """Run the command to completion or its deadline (``timeout_s``, else the spec's),
        counted from now; once.

        Raises:
            HarnessError: the sandbox could not run it or clean up after it.
        """
        ...

    def kill(self) -> None:
        """Stop the command from another thread; a :meth:`start` under way then returns."""
        ...

    def close(self) -> None:
        """Kill what is left, a command that never started included, and free everything;
        may be called twice."""
        ...

    def fills_ahead(self) -> bool:
        """Whether :meth:`fill_ahead` has anything to do (when unsure: True)."""
        ...

    def fill_ahead(self) -> None:
        """Do now what :meth:`start` would do first and need not wait for (copying the working
        directory into its quota'd tmpfs), for a command set up ahead of its turn. The caller
        promises that the host directories do not change between this and :meth:`start`. A
        backend with nothing to do ahead does nothing."""
        ...


class Sandbox(Protocol):
    """A way to run one untrusted command under :class:`Limits`."""

    kind: str

    def run(self, spec: SandboxSpec) -> SandboxResult:
        """Run ``spec`` to completion or to its deadline.

        Raises:
            HarnessError: the sandbox could not start the command or clean up after it.
        """
        ...

    def prepare(self, spec: SandboxSpec) -> Prepared:
        """Set ``spec`` up to run later; :meth:`Prepared.start` runs it, then close it.

        Raises:
            HarnessError: the sandbox could not be set up.
        """
        ...

    def describe(self) -> dict[str, str]:
        """Facts to record in a run journal (kind, tool version, enforcement methods)."""
        ...


# --- process-count enforcement ------------------------------------------------------------


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


def _rlimits(limits: Limits, nproc: int | None) -> list[tuple[int, int]]:
    """(resource, value) pairs to set as both soft and hard limit, capped by our own hard limit."""
    wanted = [
        (resource.RLIMIT_AS, limits.address_space_bytes),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
    ]
    if nproc is not None:
        wanted.append((resource.RLIMIT_NPROC, nproc))
    out = []
    for which, value in wanted:
        _, hard = resource.getrlimit(which)
        out.append((which, value if hard == resource.RLIM_INFINITY else min(value, hard)))
    return out


def _find_command(command: str, env: Mapping[str, str], cwd: str) -> bool:
    """Whether execvp(3) in ``cwd`` with ``env`` would find an executable ``command``."""

    def runnable(path: str) -> bool:
        full = os.path.join(cwd, path)
        return os.path.isfile(full) and os.access(full, os.X_OK)

    if "/" in command:
        return runnable(command)
    return any(runnable(os.path.join(d or ".", command)) for d in env.get("PATH", os.defpath).split(":"))


def _uid_tasks(uid: int) -> int:
    count = 0
    with os.scandir("/proc") as listing:
        for entry in listing:
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat().st_uid == uid:
                        count += len(os.listdir(f"/proc/{entry.name}/task"))
    return count


# --- supervision -------------------------------------------------------------------------


class _Capture:
    """One output pipe: keeps at most ``cap`` bytes in ``out_fd`` (in :attr:`memory` when it is
    ``None``), counts and drops the rest."""

    def __init__(self, read_fd: int, out_fd: int | None, cap: int) -> None:
        self.read_fd = read_fd
        self.out_fd = out_fd
        self.memory = bytearray() if out_fd is None else None
        self.cap = cap
        self.kept = 0
        self.total = 0
        self.head = bytearray()

    def pump(self) -> bool:
        """Move one chunk; False at EOF."""
        data = os.read(self.read_fd, _CHUNK)
        if not data:
            return False
        self.total += len(data)
        if len(self.head) < _STDERR_HEAD:
            self.head += data[: _STDERR_HEAD - len(self.head)]
        room = self.cap - self.kept
        if room > 0:
            view = memoryview(data)[:room]
            if self.memory is not None:
                self.memory += view
            else:
                assert self.out_fd is not None
                while view:
                    view = view[os.write(self.out_fd, view) :]
            self.kept += min(room, len(data))
        return True

    @property
    def truncated(self) -> bool:
        return self.total > self.kept


class _Supervisor:
    """Drains the output pipes while waiting for the child, without threads."""

    def __init__(self, proc: subprocess.Popen[bytes], captures: list[_Capture], status_fd: int | None,
                 status_head: bytes = b""):
        self.proc = proc
        self.poller = select.poll()
        self.captures = {capture.read_fd: capture for capture in captures}
        self.status_fd = status_fd
        self.status = bytearray(status_head)
        for fd in [*self.captures, *([status_fd] if status_fd is not None else [])]:
            self.poller.register(fd, select.POLLIN)
        self.pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(proc.pid)
            self.poller.register(self.pidfd, select.POLLIN)
        self.exited = False
        self.reaper_pid: int | None = None
        self.reaper_pidfd: int | None = None
        if b"\n" in self.status:  # read before the start, to reach a quota'd workdir
            self._watch_reaper()

    def _child_exited(self) -> bool:
        # WNOWAIT leaves the zombie in place: its pid, hence its process group, stays reserved.
        info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return info is not None and info.si_pid != 0

    def _step(self, timeout_s: float) -> None:
        tick = timeout_s if self.pidfd is not None or self.exited else min(timeout_s, _POLL_TICK_S)
        for fd, _events in self.poller.poll(max(0, math.ceil(tick * 1000))):
            if fd == self.pidfd:
                self.exited = True
                self.poller.unregister(fd)
            elif fd == self.status_fd:
                chunk = os.read(fd, _CHUNK)
                self.status += chunk
                if not chunk:
                    self.poller.unregister(fd)
                    self.status_fd = None
                elif self.reaper_pidfd is None and b"\n" in self.status:
                    self._watch_reaper()
            elif not self.captures[fd].pump():
                self.poller.unregister(fd)
                del self.captures[fd]
        if self.pidfd is None and not self.exited:
            self.exited = self._child_exited()

    def _watch_reaper(self) -> None:
        # bwrap's first status record names the pid-1 reaper of the sandbox; it is alive now,
        # since the monitor (our child) has not exited yet.
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError, OSError):
            first = json.loads(bytes(self.status).split(b"\n", 1)[0])
            self.reaper_pidfd = os.pidfd_open(int(first["child-pid"]))
            self.reaper_pid = int(first["child-pid"])

    def wait_reaper(self, deadline: float) -> bool:
        """Wait until the sandbox's pid-1 reaper is gone (True) or ``deadline`` passes.

        The kernel signals its exit only after every other process of the pid namespace has
        been killed and reaped, which pipe EOF alone does not guarantee.
        """
        if self.reaper_pidfd is None:
            return True
        waiter = select.poll()
        waiter.register(self.reaper_pidfd, select.POLLIN)
        return bool(waiter.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000))))

    def wait_exit(self, deadline: float) -> bool:
        """Pump until the child exits (True) or ``deadline`` passes (False)."""
        while not self.exited:
            remaining = deadline - time.monotonic()
            self._step(max(0.0, remaining))
            if remaining <= 0:
                break
        return self.exited

    def drain(self, deadline: float) -> bool:
        """Pump until every pipe is at EOF (True) or ``deadline`` passes (False)."""
        while self.captures or self.status_fd is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._step(remaining)
        return True

    def close(self) -> None:
        for fd in (self.pidfd, self.reaper_pidfd):
            if fd is not None:
                os.close(fd)
        self.pidfd = self.reaper_pidfd = None


def _reach_tmpfs(child: int, host: Path, quota: int, deadline: float) -> int | None:
    """A descriptor of the tmpfs bwrap mounts at ``host`` inside the sandbox of ``child`` (held
    at its gate), once it is there; None if ``child`` is gone."""
    page = os.sysconf("SC_PAGE_SIZE")
    size = -(-quota // page) * page
    host_dev = os.stat(host).st_dev
    where = f"/proc/{child}/root{os.path.normpath(host)}"
    pause = 0.0005
    while True:
        try:
            fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            if not os.path.exists(f"/proc/{child}"):
                return None
        else:
            vfs = os.fstatvfs(fd)
            if vfs.f_blocks * vfs.f_frsize == size and os.fstat(fd).st_dev != host_dev:
                return fd
            os.close(fd)
        if time.monotonic() > deadline:
            raise HarnessError(f"the bubblewrap sandbox did not mount the quota'd {host} within {_SETUP_S:g} s")
        time.sleep(pause)
        # A grading sandbox is started as soon as it is set up: a short tick keeps the wait
        # for bwrap's mounts close to what bwrap itself takes.
        pause = min(pause * 2, _SETUP_TICK_S)


def _readable(fd: int, deadline: float) -> bool:
    """Whether ``fd`` has data (or its end) before ``deadline``: poll, not select, which cannot
    take a descriptor past 1023 (a run with hundreds of sandboxes open goes past it)."""
    waiter = select.poll()
    waiter.register(fd, select.POLLIN)
    return bool(waiter.poll(max(0.0, deadline - time.monotonic()) * 1000))


def _first_status_pid(fd: int, head: bytearray, deadline: float) -> int | None:
    """The ``child-pid`` of bwrap's first status record, read from ``fd`` into ``head`` (kept
    for the supervisor); None if bwrap ended without one."""
    while b"\n" not in head:
        if not _readable(fd, deadline):
            raise HarnessError(f"bubblewrap did not report its sandbox within {_SETUP_S:g} s")
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return None
        head += chunk
    try:
        return int(json.loads(bytes(head).split(b"\n", 1)[0])["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _open_output(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)


@dataclass
class _Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    pass_fds: tuple[int, ...]


class _Reaper:
    """Kills this process's sandboxed commands if it dies: one helper process per runner.

    bwrap's ``--die-with-parent`` binds the sandbox's pid 1 to bwrap only once the command is
    about to start, and :class:`NoSandbox` has no pid namespace at all; so a runner killed
    right after opening a gate, or one running commands unsandboxed, would leave commands
    running unsupervised. The reaper, a small Python process in its own session (a kill of
    the runner's process group does not reach it), learns the process group of every command
    launched (``+pgid``) and reaped (``-pgid``) through a pipe only the runner writes; when
    that pipe closes (the runner exited, however) it SIGKILLs every group still registered.
    A group is unregistered once it has been killed (or has exited) and before its leader is
    reaped, so its id cannot name another process while registered. Started on the first
    launch; restarted if it was killed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._live: set[int] = set()

    def _send(self, line: bytes) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            os.write(self._proc.stdin.fileno(), line)
        except BrokenPipeError:  # killed since: a new one, told every group alive
            self._start()
            os.write(self._proc.stdin.fileno(), line)

    def _start(self) -> None:
        old = self._proc
        if old is not None:
            with contextlib.suppress(OSError):
                old.stdin.close()  # type: ignore[union-attr]
            old.wait()
        self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _REAPER_CODE], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        assert self._proc.stdin is not None
        if self._live:
            os.write(self._proc.stdin.fileno(), b"".join(b"+%d\n" % pgid for pgid in sorted(self._live)))

    def close(self) -> None:
        """At exit: the reaper kills what is still registered, then ends. It is waited for only
        when something was still registered: with nothing to kill, its own shutdown (about
        10 ms of a Python interpreter's) need not delay the runner's exit."""
        with self._lock:
            proc, self._proc = self._proc, None
            pending = bool(self._live)
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
            if pending:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5.0)

    def register(self, pgid: int) -> None:
        with self._lock:
            self._live.add(pgid)
            self._send(b"+%d\n" % pgid)

    def unregister(self, pgid: int) -> None:
        with self._lock:
            if pgid in self._live:
                self._live.discard(pgid)
                with contextlib.suppress(OSError):
                    self._send(b"-%d\n" % pgid)


_REAPER: Final = _Reaper()
atexit.register(_REAPER.close)


class _ProcessSandbox:
    """Shared launch, cap, kill and capture machinery of the backends."""

    kind: str = "abstract"
    _helpers = 0
    _status_pipe = False
    _start_gate = False

    def _hierarchy(self) -> _PidsHierarchy | None:
        return _pids_hierarchy()

    def _check_workdir(self, spec: SandboxSpec) -> None:
        workdir = os.path.normpath(spec.workdir)
        if not spec.workdir.is_dir():
            raise HarnessError(f"sandbox workdir does not exist or is not a directory: {spec.workdir}")
        if workdir == "/" or any(_within(workdir, d) for d in (*_SYSTEM_DIRS, *_KERNEL_DIRS)):
            raise HarnessError(f"refusing a system directory as sandbox workdir: {spec.workdir}")
        for path in spec.readonly_paths:
            if not path.exists():
                raise HarnessError(f"read-only path for the sandbox does not exist: {path}")
        for path in spec.writable_paths:
            where = os.path.normpath(path)
            if not path.is_dir() or path.is_symlink():
                raise HarnessError(f"writable path for the sandbox is not a directory: {path}")
            if where == "/" or any(_within(where, d) or _within(d, where) for d in (*_SYSTEM_DIRS, *_KERNEL_DIRS)):
                raise HarnessError(f"refusing a system directory as a writable sandbox path: {path}")

    def _launch(self, spec: SandboxSpec, status_fd: int | None, block_fd: int | None) -> _Launch:
        raise NotImplementedError

    def _failed_to_start(self, status: bytes, returncode: int) -> bool:
        return False

    def quota_applies(self, spec: SandboxSpec) -> bool:
        """Whether ``spec``'s workdir gets a disk quota in this backend."""
        return False

    def _terminate(self, proc: subprocess.Popen[bytes], supervisor: _Supervisor) -> None:
        """At the deadline: SIGTERM to the command's process group (SIGKILL follows the grace)."""
        _signal_group(proc.pid, signal.SIGTERM)

    def prepare(self, spec: SandboxSpec) -> PreparedProcess:
        """Set ``spec`` up and hold it just before the command runs; see :class:`PreparedProcess`.

        Raises:
            HarnessError: the spec points at missing host paths, or the sandbox could not be
                set up (an error of bwrap's own setup surfaces at :meth:`Prepared.start`).
        """
        self._check_workdir(spec)
        prepared = PreparedProcess(self, spec)
        try:
            prepared._setup()
        except BaseException:
            prepared.close()
            raise
        return prepared

    def run(self, spec: SandboxSpec) -> SandboxResult:
        """Run ``spec`` to completion or to its deadline, then kill everything it left.

        Raises:
            HarnessError: the spec points at missing host paths, the command could not be
                started, output could not be written, or its processes could not be removed.
        """
        prepared = self.prepare(spec)
        try:
            return prepared.start()
        finally:
            prepared.close()


class PreparedProcess:
    """One command set up in its sandbox and held just before it runs.

    With a start gate (bubblewrap reading its ``--seccomp`` fd) the child is spawned, admitted
    to its run cgroup and rlimited, and bwrap builds every namespace and mount, then waits;
    :meth:`start` opens the gate, so the launch costs the command's deadline nothing and a
    runner can set the next task up while the current one runs. A gate that closes without
    being opened (the runner died) makes bwrap exit without running the command. Without a
    gate (:class:`NoSandbox`) the command is spawned by :meth:`start`. The deadline counts
    from :meth:`start`.

    :meth:`start` runs once; :meth:`kill` stops the command from another thread (a
    :meth:`start` under way then returns); :meth:`close` kills whatever is left (a command
    that never started included) and frees the pipes and the run cgroup; it may be called twice.
    """

    def __init__(self, sandbox: _ProcessSandbox, spec: SandboxSpec) -> None:
        self.spec = spec
        self._box = sandbox
        self._opened: list[int] = []
        self._cgroup: _RunCgroup | None = None
        self._nproc: int | None = None
        self._out_fd: int | None = None
        self._err_fd: int | None = None
        self._pipes: list[tuple[int, int]] = []
        self._block: tuple[int, int] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = False
        # kill() may come from another thread: it must never signal a process group whose
        # leader has been reaped (its id could name someone else by then). Reentrant: a spawn
        # under it that fails reaps its child under it too.
        self._kill_lock = threading.RLock()
        self._killed = False
        self._reaping = False
        self._quota_fds: list[tuple[Path, TreeCaps, int]] = []
        self._status_head = bytearray()
        self._filled: bool | None = None
        """Whether the quota'd directories were copied in (:meth:`fill_ahead`); None: not yet."""
        # The copy in may run on another thread than start and close (fill_ahead): it holds
        # this lock, and so does every other use of the quota descriptors.
        self._fill_lock = threading.Lock()
        self._closed = False

    def _pipe(self) -> tuple[int, int]:
        pair = os.pipe()
        self._opened += pair
        return pair

    def _close_fd(self, fd: int) -> None:
        # Closed exactly once: another thread may be handed this number right after.
        self._opened.remove(fd)
        os.close(fd)

    def _setup(self) -> None:
        box, spec = self._box, self.spec
        try:
            hierarchy = box._hierarchy()
            if hierarchy is None and os.geteuid() != 0:
                self._nproc = spec.limits.processes + box._helpers + _uid_tasks(os.getuid())
            if hierarchy is not None:
                self._cgroup = _RunCgroup.create(hierarchy, spec.limits.processes + box._helpers)
            if spec.stdout_path is not None:
                self._out_fd = _open_output(spec.stdout_path)
                self._opened.append(self._out_fd)
            if spec.stderr_path is not None:
                self._err_fd = _open_output(spec.stderr_path)
                self._opened.append(self._err_fd)
            self._pipes = [self._pipe() for _ in range(3 if box._status_pipe else 2)]
            if box._start_gate:
                self._block = self._pipe()
                self._spawn()
        except OSError as exc:
            raise HarnessError(f"{box.kind} sandbox failed for {spec.argv[0]!r}: {exc}") from exc

    def _spawn(self) -> None:
        box, spec = self._box, self.spec
        status_write = self._pipes[2][1] if len(self._pipes) > 2 else None
        launch = box._launch(spec, status_write, self._block[0] if self._block else None)
        # No Python runs between fork and exec (preexec_fn is unsafe in a threaded runner): the
        # child is a /bin/sh gate that waits on stdin until we have moved it into the run cgroup
        # and set its rlimits, then execs the backend's command, so the command and everything
        # it forks are born inside the cgroup and under the caps.
        argv = [_SHELL, "-c", _GATE_SCRIPT, "sh", *launch.argv]
        stdin, gate = self._pipe()
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=self._pipes[0][1],
                stderr=self._pipes[1][1],
                env=launch.env,
                cwd=launch.cwd,
                pass_fds=launch.pass_fds,
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise HarnessError(f"could not start {spec.argv[0]!r} in the {box.kind} sandbox: {exc}") from exc
        try:
            _REAPER.register(self._proc.pid)
        except OSError as exc:
            _signal_group(self._proc.pid, signal.SIGKILL)
            self._reap()
            raise HarnessError(f"could not start the reaper that kills {spec.argv[0]!r} if the runner dies: "
                               f"{exc}") from exc
        child_ends = [w for _, w in self._pipes] + [stdin]
        if self._block is not None:
            child_ends.append(self._block[0])
        for fd in child_ends:
            self._close_fd(fd)
        self._admit(gate)

    def _admit(self, gate: int) -> None:
        """Move the gated child into its cgroup and cap it, then let it exec; on failure it never does."""
        proc = self._proc
        assert proc is not None
        step = "setting its rlimits"
        try:
            if self._cgroup is not None:
                step = f"moving it into {self._cgroup.path}"
                self._cgroup.admit(proc.pid)
                step = "setting its rlimits"
            for which, value in _rlimits(self.spec.limits, self._nproc):
                # Soft and hard both: the command must not be able to raise its own caps.
                resource.prlimit(proc.pid, which, (value, value))
            if self.spec.yield_cpu:
                step = "lowering its priority"
                # Relative to the runner's main thread (a pid names it), never below what the
                # child inherited from the thread that spawned it, so no privilege is needed.
                os.setpriority(os.PRIO_PROCESS, proc.pid,
                               min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + COMMAND_NICENESS))
            os.write(gate, b"go\n")
        except (OSError, ValueError) as exc:
            _signal_group(proc.pid, signal.SIGKILL)
            self._reap()
            raise HarnessError(
                f"could not start {self.spec.argv[0]!r} in the {self._box.kind} sandbox: {step} failed: {exc}"
            ) from exc
        finally:
            self._close_fd(gate)

    def _reap(self) -> int:
        """Wait for the (killed, or exited) command; from then on its group id may name another."""
        assert self._proc is not None
        with self._kill_lock:
            self._reaping = True
        _REAPER.unregister(self._proc.pid)  # before the id is freed, never after
        return self._proc.wait()

    def kill(self) -> None:
        """Stop the command now, from any thread; a :meth:`start` under way returns, one to come
        raises. Its result says how it died (``signal`` 9, or exit code 137 inside bwrap)."""
        with self._kill_lock:
            self._killed = True
            proc, cgroup = self._proc, self._cgroup
            if proc is None or self._reaping:
                return
            _signal_group(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            with contextlib.suppress(OSError):
                cgroup.kill_all()

    def _wait_exited(self, timeout_s: float) -> int | None:
        """Reap a command expected to exit by itself (its gate closed unopened); None if it did not."""
        assert self._proc is not None
        with self._kill_lock:
            self._reaping = True
        _REAPER.unregister(self._proc.pid)
        try:
            return self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None  # close() kills and reaps it

    def _close_gate(self) -> None:
        """Close a held command's gate without opening it: it must then exit without running."""
        if self._block is not None:
            self._close_fd(self._block[1])
            self._block = None

    def start(self, timeout_s: float | None = None) -> SandboxResult:
        """Let the command run to completion or to its deadline, then kill everything it left.

        ``timeout_s`` overrides the spec's deadline (the time that remains when it starts).

        Raises:
            HarnessError: the command could not be started, output could not be written, or its
                processes could not be removed; also a second call.
        """
        if self._started:
            raise HarnessError("a prepared sandbox command runs once")
        self._started = True
        if self._closed:
            raise HarnessError(f"{self.spec.argv[0]!r} was closed before it started")
        timeout = self.spec.timeout_s if timeout_s is None else max(0.0, timeout_s)
        try:
            with self._fill_lock:  # waits for a copy under way on another thread (fill_ahead)
                filled = self._fill()
            if not filled:
                self._close_gate()  # the quota'd workdir was not reached: the command never runs
            with self._kill_lock:
                if self._killed:
                    raise HarnessError(f"{self.spec.argv[0]!r} was stopped before it started")
                start = time.monotonic()
                if self._proc is None:
                    self._spawn()
                elif self._block is not None:
                    with contextlib.suppress(BrokenPipeError):
                        # bwrap already gone (its setup failed): the status pipe tells why below.
                        os.write(self._block[1], _ALLOW_ALL)
                    self._close_fd(self._block[1])
                    self._block = None
            result = self._supervise(start, timeout)
            with self._fill_lock:
                if self._quota_fds:
                    result = dataclasses.replace(result, workdir_rejected=self._drain_workdir())
            return result
        except OSError as exc:
            raise HarnessError(f"{self._box.kind} sandbox failed for {self.spec.argv[0]!r}: {exc}") from exc

    def fills_ahead(self) -> bool:
        """True while quota'd directories wait to be copied in (a hint: :meth:`fill_ahead` checks again)."""
        return self._filled is None and not self._started and self._copies_in()

    def _copies_in(self) -> bool:
        """Whether this command's quota'd directories are copied into their tmpfs before it runs."""
        return (self._proc is not None and self._block is not None and self._box.quota_applies(self.spec)
                and bool(self._quota_dirs()))

    def fill_ahead(self) -> None:
        """Copy the quota'd directories into their tmpfs now, while the command waits at its
        gate, so that :meth:`start` only opens the gate (see :meth:`Prepared.fill_ahead`).

        Raises:
            HarnessError: as :meth:`start` would for the copy.
        """
        with self._fill_lock:
            if self._started or self._filled is not None:
                return
            try:
                self._fill()
            except OSError as exc:
                raise HarnessError(f"{self._box.kind} sandbox failed for {self.spec.argv[0]!r}: {exc}") from exc

    def _fill(self) -> bool:
        """Copy the quota'd directories in, once; False when bwrap died before they could be.
        Called with the fill lock held. A copy that failed is tried again by the next call."""
        if self._filled is None:
            if self._copies_in():
                while self._quota_fds:  # what a failed copy left: begun again from the start
                    os.close(self._quota_fds.pop()[2])
                self._filled = self._fill_workdir()
            else:
                self._filled = True
        return self._filled

    def _quota_dirs(self) -> list[tuple[Path, TreeCaps]]:
        spec = self.spec
        dirs = [] if spec.workdir_caps is None else [(spec.workdir, spec.workdir_caps)]
        if spec.writable_caps is not None:
            dirs += [(path, spec.writable_caps) for path in spec.writable_paths]
        return dirs

    def _fill_workdir(self) -> bool:
        """Reach each quota'd directory's tmpfs and copy the host directory into it; False if
        bwrap died first.

        Reached through ``/proc/<pid>/root`` of the sandbox's first process while its gate is
        closed, so only bwrap's own code runs there; recognised by its size (the quota) and its
        device (not the host directory's). The descriptor keeps the tmpfs
        alive once the sandbox is gone, so the copy back reads it with no process of the
        sandbox left.

        Raises:
            HarnessError: a tmpfs was not seen in time, or a host directory does not fit.
        """
        deadline = time.monotonic() + _SETUP_S
        child = _first_status_pid(self._pipes[2][0], self._status_head, deadline)
        if child is None:
            return False
        for host, caps in self._quota_dirs():
            fd = _reach_tmpfs(child, host, caps.max_bytes, deadline)
            if fd is None:
                return False  # bwrap's setup failed: the status pipe tells why
            self._quota_fds.append((host, caps, fd))
            src = open_dir(host)
            try:
                os.fchmod(fd, stat.S_IMODE(os.fstat(src).st_mode) | 0o700)
                copy_tree_fd(src, fd, caps, what=str(host))
            except (TreeRejected, OSError) as exc:
                why = exc.reason if isinstance(exc, TreeRejected) else exc.strerror
                raise HarnessError(f"{host} does not fit its quota of {caps.max_bytes} bytes ({why}); "
                                   "raise the workspace cap (TreeCaps.max_bytes)") from None
            finally:
                os.close(src)
        return True

    def _drain_workdir(self) -> str | None:
        """Copy each quota'd directory back over its host directory, once every process of the
        sandbox is gone, and free its tmpfs; returns why a copy stopped early, if one did."""
        why: str | None = None
        while self._quota_fds:
            host, caps, fd = self._quota_fds.pop(0)
            try:
                dst = open_dir(host)
                try:
                    copy_tree_fd(fd, dst, caps, what="the working directory" if host == self.spec.workdir
                                 else f"the sandbox's writable {host.name}")
                finally:
                    os.close(dst)
            except TreeRejected as exc:
                why = why or exc.reason
            finally:
                os.close(fd)
        return why

    def close(self) -> None:
        """Kill what is left (a command that never started included) and free everything."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            # A copy in under way on another thread ends once bwrap is gone; then its lock is free.
            with contextlib.suppress(OSError):
                _signal_group(proc.pid, signal.SIGKILL)
        with self._fill_lock:
            self._filled = False
            self._closed = True
            while self._quota_fds:
                os.close(self._quota_fds.pop()[2])
        try:
            if proc is not None and proc.returncode is None:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.kill()
                self._reap()
                if self._cgroup is not None:
                    self._cgroup.kill_all()
        finally:
            for fd in self._opened:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._opened.clear()
            if self._cgroup is not None:
                # Emptied (or the run failed already): a cgroup that stays busy is left to a
                # later sweep and recorded, never a failure of an attempt that completed.
                self._cgroup.release()
                self._cgroup = None

    def __enter__(self) -> PreparedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _supervise(self, start: float, timeout_s: float) -> SandboxResult:
        box, spec, proc = self._box, self.spec, self._proc
        assert proc is not None
        cgroup = self._cgroup
        status_read = self._pipes[2][0] if len(self._pipes) > 2 else None
        stdout = _Capture(self._pipes[0][0], self._out_fd, spec.limits.output_bytes)
        stderr = _Capture(self._pipes[1][0], self._err_fd, spec.limits.output_bytes)
        supervisor = _Supervisor(proc, [stdout, stderr], status_read, bytes(self._status_head))
        sent: int | None = None
        try:
            timed_out = not supervisor.wait_exit(start + timeout_s)
            if timed_out:
                box._terminate(proc, supervisor)
                sent = signal.SIGTERM
                if not supervisor.wait_exit(time.monotonic() + KILL_GRACE_S):
                    _signal_group(proc.pid, signal.SIGKILL)
                    sent = signal.SIGKILL
                    if cgroup is not None:
                        cgroup.kill_all()
                    if not supervisor.wait_exit(time.monotonic() + _REAP_S):
                        raise HarnessError(f"{box.kind} sandbox: pid {proc.pid} survived SIGKILL")
            # The leader is an unreaped zombie here, so its group id cannot name anyone else.
            _signal_group(proc.pid, signal.SIGKILL)
            if cgroup is not None and not cgroup.kill_all():
                raise HarnessError(f"{box.kind} sandbox: processes in {cgroup.path} survived SIGKILL")
            returncode = self._reap()
            supervisor.drain(time.monotonic() + _DRAIN_S)
            if not supervisor.wait_reaper(time.monotonic() + _DRAIN_S):
                raise HarnessError(f"{box.kind} sandbox: its pid namespace outlived bwrap")
            elapsed = time.monotonic() - start
        finally:
            if proc.returncode is None:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.kill()
                self._reap()
            supervisor.close()
        if not timed_out and not self._killed and box._failed_to_start(bytes(supervisor.status), returncode):
            detail = stderr.head.decode("utf-8", "replace").strip() or f"exit status {returncode}"
            raise HarnessError(f"the {box.kind} sandbox failed to start {spec.argv[0]!r}: {detail}")
        if timed_out:
            exit_code, died_of = None, (-returncode if returncode < 0 else sent)
        elif returncode < 0:
            exit_code, died_of = None, -returncode
        else:
            exit_code, died_of = returncode, None
        return SandboxResult(
            exit_code=exit_code,
            timed_out=timed_out,
            elapsed_s=elapsed,
            stdout_bytes=stdout.total,
            stderr_bytes=stderr.total,
            stdout_truncated=stdout.truncated,
            stderr_truncated=stderr.truncated,
            signal=died_of,
            stdout=None if stdout.memory is None else bytes(stdout.memory),
            stderr=None if stderr.memory is None else bytes(stderr.memory),
        )


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


# --- backends ----------------------------------------------------------------------------


class NoSandbox(_ProcessSandbox):
    """A plain subprocess with the same caps, kill policy and output capture; no isolation.

    The command's process group dies with the runner (the reaper kills it); a command that
    leaves its group (setsid) escapes that, and only a pids cgroup sweep finds it later.
    """

    kind = "none"

    def _launch(self, spec: SandboxSpec, status_fd: int | None, block_fd: int | None) -> _Launch:
        if spec.relay is not None:
            raise HarnessError("the none sandbox has no network namespace of its own to relay a port into; "
                               "model endpoints need the bubblewrap sandbox")
        if spec.links:
            raise HarnessError("the none sandbox has no root of its own to make a link in; a task's environment "
                               f"(its repository at {spec.links[0][0]}) needs the bubblewrap sandbox")
        home = spec.env.get("HOME")
        if home is not None:
            os.makedirs(home, exist_ok=True)
        env = dict(spec.env)
        env["PWD"] = str(spec.workdir)
        # The gate shell execs the command: check up front what a failed exec would only tell as 127.
        if not _find_command(spec.argv[0], env, str(spec.workdir)):
            raise HarnessError(
                f"could not start {spec.argv[0]!r} in the {self.kind} sandbox: no such executable "
                f"(PATH={env.get('PATH', os.defpath)}, cwd {spec.workdir})"
            )
        return _Launch(list(spec.argv), env, str(spec.workdir), ())

    def describe(self) -> dict[str, str]:
        """Facts to record in a run journal."""
        return {
            "kind": self.kind,
            "tool": "subprocess",
            "tool_version": f"python {sys.version.split()[0]}",
            "process_limit": process_limit_method(),
            "rlimits": _RLIMITS_TEXT,
            "kill": _KILL_TEXT + "; leftovers killed by process group and pids cgroup; the process group "
                    "is killed if the runner dies (reaper)",
            "network": "host network (not isolated)",
            "filesystem": "host filesystem (not isolated)",
        }


def _etc_masks() -> list[str]:
    args: list[str] = []
    for root, dirs, files in os.walk("/etc"):
        for name in sorted([*dirs, *files]):
            path = os.path.join(root, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode) or mode & stat.S_IROTH:
                continue
            if stat.S_ISDIR(mode):
                dirs.remove(name)
                args += ["--tmpfs", path, "--remount-ro", path]
            else:
                args += ["--ro-bind", "/dev/null", path]
    return args


@functools.cache
def _system_binds() -> tuple[str, ...]:
    args: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    if os.path.isdir("/etc") and not os.path.islink("/etc"):
        args += _etc_masks()
    return tuple(args)


@functools.cache
def _python_prefixes() -> tuple[str, ...]:
    candidates = sorted(
        {os.path.abspath(p) for p in (sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix)}
    )
    kept: list[str] = []
    for prefix in candidates:
        if prefix == "/" or not os.path.isdir(prefix):
            continue
        if any(_within(prefix, d) for d in (*_SYSTEM_DIRS, *kept)):
            continue
        kept.append(prefix)
    return tuple(kept)


@functools.cache
def _relay_source() -> str:
    from sealbench import relay

    return Path(relay.__file__).read_text(encoding="utf-8")


@functools.cache
def _loopback_resolver() -> tuple[str, ...]:
    """Binds a resolv.conf naming 127.0.0.1 over the host's (a regular file; a symlink into the
    absent /run already leaves glibc its loopback default)."""
    if os.path.islink("/etc/resolv.conf") or not os.path.isfile("/etc/resolv.conf"):
        return ()
    folder = scratch.temp_dir("resolv")
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "resolv.conf"
    path.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n", encoding="ascii")
    path.chmod(0o444)
    return ("--ro-bind", str(path), "/etc/resolv.conf")


@functools.cache
def _bwrap_version(executable: str) -> tuple[str, tuple[int, ...]]:
    try:
        text = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise HarnessError(f"cannot run {executable} --version: {exc}") from exc
    numbers = tuple(int(n) for n in text.split()[-1].split(".") if n.isdigit()) if text else ()
    return text, numbers


class BubblewrapSandbox(_ProcessSandbox):
    """Isolating backend built on ``bwrap``; see the module docstring for the model.

    Raises:
        HarnessError: ``bwrap`` is not installed or does not run (``executable`` names it).
    """

    kind = "bubblewrap"
    _helpers = _BWRAP_HELPERS
    _status_pipe = True
    _start_gate = True

    def __init__(self, executable: str | None = None) -> None:
        found = shutil.which(executable or "bwrap")
        if found is None:
            raise HarnessError(f"bubblewrap executable not found: {executable or 'bwrap'}")
        self.executable = found
        self.version_text, version = _bwrap_version(found)
        # Options newer than some distributions' bwrap are dropped rather than failing there.
        self._disable_userns = version >= (0, 8)
        self._sized_tmpfs = version >= (0, 7)
        self._fixed = self._fixed_args()

    def _fixed_args(self) -> tuple[str, ...]:
        args = [self.executable, "--unshare-all", "--unshare-user", "--cap-drop", "ALL"]
        if self._disable_userns:
            args.append("--disable-userns")
        # --new-session: the command leads its own process group, so the deadline's SIGTERM can
        # reach it without killing bwrap (see _terminate).
        args += ["--die-with-parent", "--new-session", "--hostname", "sandbox", *_system_binds(), "--proc", "/proc"]
        return tuple(args)

    def _tmpfs(self, path: str, size: int) -> list[str]:
        return ["--size", str(size), "--tmpfs", path] if self._sized_tmpfs else ["--tmpfs", path]

    def quota_applies(self, spec: SandboxSpec) -> bool:
        """Whether ``spec``'s workdir gets its quota here (a tmpfs needs ``--size``, bwrap 0.7)."""
        return (spec.workdir_caps is not None or spec.writable_caps is not None) and self._sized_tmpfs

    def _home_args(self, spec: SandboxSpec) -> tuple[list[str], list[str]]:
        """Arguments creating HOME: (before the binds, after the workdir bind)."""
        home = spec.env.get("HOME")
        if home is None:
            return [], []
        home = os.path.normpath(home)
        # Created from inside, after the writable mounts exist: a host-side makedirs would
        # follow symlinks a previous attempt planted in the workdir.
        if _within(home, os.path.normpath(spec.workdir)) or _within(home, "/tmp"):
            return [], ["--dir", home]
        if home == "/" or any(_within(home, d) or _within(d, home) for d in (*_SYSTEM_DIRS, *_KERNEL_DIRS)):
            raise HarnessError(f"HOME cannot be a system directory inside the sandbox: {home}")
        # Before the binds, so that a HOME such as /root does not hide the Python prefix.
        return self._tmpfs(home, spec.limits.tmp_bytes), []

    def _launch(self, spec: SandboxSpec, status_fd: int | None, block_fd: int | None) -> _Launch:
        assert status_fd is not None and block_fd is not None  # _status_pipe and _start_gate
        size = spec.limits.tmp_bytes
        workdir = str(spec.workdir)
        # bwrap sets every namespace and mount up, then reads its seccomp program from block_fd
        # until EOF before the command: the start gate (see _ALLOW_ALL).
        args = [*self._fixed, "--json-status-fd", str(status_fd), "--seccomp", str(block_fd)]
        if spec.network:
            args.append("--share-net")
        if spec.as_pid_1:
            args.append("--as-pid-1")
        args += ["--dev", "/dev", *self._tmpfs("/dev/shm", size), "--remount-ro", "/dev"]
        # Mounts under /tmp (a workdir from tempfile, a venv) must come after the /tmp tmpfs.
        home_first, home_last = self._home_args(spec)
        args += [*self._tmpfs("/tmp", size), *home_first]
        for path in (*_python_prefixes(), *(str(p) for p in spec.readonly_paths)):
            args += ["--ro-bind", path, path]
        if not spec.network:
            args += _loopback_resolver()
        argv = spec.argv
        if spec.relay is not None:
            sock_dir = str(Path(spec.relay.socket).parent)
            args += ["--ro-bind", sock_dir, sock_dir]
            argv = (sys.executable, "-I", "-S", "-c", _relay_source(), str(spec.relay.port),
                    str(spec.relay.socket), "--", *spec.argv)
        if spec.workdir_caps is not None and self._sized_tmpfs:
            # A size-capped tmpfs, filled and emptied by the host through a descriptor (see
            # PreparedProcess._fill_workdir): the command's writes past the quota fail inside.
            args += [*self._tmpfs(workdir, spec.workdir_caps.max_bytes), *home_last]
        else:
            args += ["--bind", workdir, workdir, *home_last]
        for writable in spec.writable_paths:
            if spec.writable_caps is not None and self._sized_tmpfs:
                args += self._tmpfs(str(writable), spec.writable_caps.max_bytes)
            else:
                args += ["--bind", str(writable), str(writable)]
        for link, target in spec.links:
            args += ["--symlink", target, link]
        args += ["--remount-ro", "/", "--chdir", workdir, "--clearenv"]
        for key, value in spec.env.items():
            args += ["--setenv", key, value]
        args += ["--", *argv]
        return _Launch(args, {}, None, (status_fd, block_fd))

    def _terminate(self, proc: subprocess.Popen[bytes], supervisor: _Supervisor) -> None:
        """SIGTERM to the command's own process group, never to bwrap's monitor.

        The monitor dies of SIGTERM, and with it, at once, the whole pid namespace: the command
        would get no grace before SIGKILL. With ``--new-session`` the sandbox's pid-1 reaper and
        the command it forks lead a session of their own (the reaper ignores signals from
        outside its namespace). Until the reaper has forked the command there is nothing to
        warn: then bwrap's group gets the SIGTERM, monitor included.
        """
        children: list[str] = []
        reaper = supervisor.reaper_pid
        if reaper is not None:
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{reaper}/task/{reaper}/children").read_text().split()
        groups: set[int] = set()
        for child in children:
            with contextlib.suppress(OSError, ValueError):  # gone already: nothing to warn
                groups.add(os.getpgid(int(child)))
        groups.discard(proc.pid)
        for group in groups:
            _signal_group(group, signal.SIGTERM)
        if not groups:
            _signal_group(proc.pid, signal.SIGTERM)

    def _failed_to_start(self, status: bytes, returncode: int) -> bool:
        # bwrap reports "exit-code" only for a command it managed to exec.
        for line in status.splitlines():
            with contextlib.suppress(ValueError):
                if "exit-code" in json.loads(line):
                    return False
        return True

    def describe(self) -> dict[str, str]:
        """Facts to record in a run journal."""
        hardening = "--cap-drop ALL" + (", --disable-userns" if self._disable_userns else "")
        return {
            "kind": self.kind,
            "tool": self.executable,
            "tool_version": self.version_text,
            "process_limit": process_limit_method(),
            "rlimits": _RLIMITS_TEXT,
            "kill": _KILL_TEXT + "; pid namespace torn down with bwrap (--die-with-parent, and the reaper "
                    "if the runner dies); a command held ahead never starts once its gate closes unopened",
            "network": "private network namespace, loopback only",
            "filesystem": (
                "read-only "
                + ", ".join(p for p in _SYSTEM_DIRS if os.path.lexists(p))
                + ", "
                + ", ".join(_python_prefixes())
                + "; /etc entries not world-readable masked; tmpfs /tmp and /dev/shm"
                + ("" if self._sized_tmpfs else " (unsized)")
                + "; workdir (and a spec's writable paths) the only writable host paths"
                + ("; with a quota, a size-capped tmpfs copied in before the command and back after it"
                   if self._sized_tmpfs else "")
            ),
            "namespaces": "user, mount, pid, net, ipc, uts, cgroup; " + hardening,
        }

    def smoke_test(self) -> None:
        """Run ``true`` inside a scratch workdir; check that a gate closed unopened runs nothing.

        Raises:
            HarnessError: the sandbox does not start, ``true`` fails inside it, or a command
                held ahead would start once its gate closed (a bwrap that loads an empty
                seccomp program, or one without seccomp support).
        """
        root = scratch.temp_dir("smoke")
        try:
            (root / "work").mkdir()
            spec = SandboxSpec(argv=("true",), workdir=root / "work", env={"PATH": "/usr/bin:/bin"},
                               timeout_s=30.0, stdout_path=root / "stdout", stderr_path=root / "stderr")
            # Set up while `true` runs: the gate check costs start-up no second launch's time.
            held = self.prepare(dataclasses.replace(spec, argv=("touch", str(root / "work" / "ran")),
                                                    stdout_path=None, stderr_path=None))
            try:
                result = self.run(spec)
                if result.exit_code != 0:
                    detail = (root / "stderr").read_text(encoding="utf-8", errors="replace").strip()
                    raise HarnessError(f"`true` failed inside bubblewrap ({result}): {detail}")
                held._close_gate()
                code = held._wait_exited(30.0)
            finally:
                held.close()
            if code is None or code == 0 or (root / "work" / "ran").exists():
                raise HarnessError("a command held in bubblewrap did not stop when its start gate closed unopened")
        finally:
            shutil.rmtree(root, ignore_errors=True)


# --- selection ---------------------------------------------------------------------------

_opened: dict[tuple[str, str | None], Sandbox | RunRefusal] = {}
_opened_lock = threading.Lock()
_UNSHARE_REFUSAL: Final = (
    "the unshare sandbox is not supported: it cannot hide the host filesystem (hidden tests "
    "would be readable); install bubblewrap (apt-get install bubblewrap)"
)


def _open_bubblewrap(executable: str | None) -> Sandbox | RunRefusal:
    try:
        sandbox = BubblewrapSandbox(executable)
        sandbox.smoke_test()
    except HarnessError as exc:
        return RunRefusal(f"bubblewrap is not usable here: {exc}")
    return sandbox


def open_bubblewrap(bwrap_executable: str | None = None) -> Sandbox:
    """The ``bubblewrap`` backend: a ``bwrap`` that runs ``true`` inside the full isolation,
    smoke-tested once per process and executable.

    Raises:
        RunRefusal: bubblewrap is missing or does not work here.
    """
    with _opened_lock:
        key = ("bubblewrap", bwrap_executable)
        if key not in _opened:
            _opened[key] = _open_bubblewrap(bwrap_executable)
        outcome = _opened[key]
    if isinstance(outcome, RunRefusal):
        raise RunRefusal(str(outcome))
    return outcome


def open_none(**_options: object) -> Sandbox:
    """The ``none`` backend: :class:`NoSandbox`."""
    return NoSandbox()


def open_sandbox(requested: str = "auto", *, bwrap_executable: str | None = None) -> Sandbox:
    """Return the sandbox to run agents in, by its registered name (:mod:`sealbench.sandboxes`).

    ``"auto"`` opens the first isolating backend that works here (bubblewrap); a backend's
    smoke test result is cached per process. ``"unshare"`` is refused (see the module
    docstring). ``bwrap_executable`` overrides the ``bwrap`` found on PATH.

    Raises:
        RunRefusal: no sandbox of the requested kind works on this machine.
        UsageError: ``requested`` is not ``auto`` or a registered backend.
    """
    from . import sandboxes

    if requested == "unshare":
        raise RunRefusal(_UNSHARE_REFUSAL)
    chosen = sandboxes.backend(requested)
    if requested != sandboxes.AUTO and chosen is None:
        raise UsageError(f"unknown sandbox {requested!r}; choose one of {', '.join(sandboxes.names())}")
    # Run cgroups left by runners killed with SIGKILL, and our own deferred removals.
    sweep_stale_cgroups()
    options = {"bwrap_executable": bwrap_executable} if bwrap_executable is not None else {}
    if chosen is not None:
        return chosen.open(**(options if chosen.name == "bubblewrap" else {}))
    refusals = []
    for candidate in sandboxes.backends():
        if not candidate.isolating:
            continue
        try:
            return candidate.open(**(options if candidate.name == "bubblewrap" else {}))
        except RunRefusal as outcome:
            refusals.append(str(outcome))
    # Nothing isolating works here: never a silent fall back to no sandbox.
    raise RunRefusal(
        f"no sandbox available ({'; '.join(refusals) or 'none is registered'}); install bubblewrap "
        "(apt-get install bubblewrap) or pass --sandbox none to run agents without isolation"
    )


def command_path(first: str | None = None) -> str:
    """``PATH`` inside the sandbox for a command: ``first`` (a task environment's bin) when
    given, this Python's bin, then the system's."""
    head = [first] if first is not None else []
    return ":".join(dict.fromkeys([*head, str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]))


def open_ahead(requested: str = "auto", then: Callable[[Sandbox], None] | None = None) -> threading.Thread:
    """Begin :func:`open_sandbox` (a backend's smoke test) on a thread of its own and return it;
    ``then`` is called there with the sandbox once it is open (not if it could not be).

    Opening mostly waits on sandboxed children, so a command starts it before its imports and
    checks, which then overlap it; its own :func:`open_sandbox` later finds the outcome in the
    per-process cache (waiting for it if need be), its refusal included. What this thread
    raises is dropped: that later call raises it again. The thread is not a daemon: a command
    that ends early waits for it at exit rather than kill its smoke test half-way.
    """

    def open_quietly() -> None:
        with contextlib.suppress(Exception):
            sandbox = open_sandbox(requested)
            if then is not None:
                then(sandbox)

    if requested in ("auto", "bubblewrap"):
        # Here, not on the thread: walking /etc is a thousand short system calls, and a thread
        # that gives up the interpreter lock at each one waits for it again behind the caller's
        # imports every time (12 ms here, the whole of the imports there).
        with contextlib.suppress(OSError):
            _system_binds()
    thread = threading.Thread(target=open_quietly, name="sealbench-open-sandbox")
    thread.start()
    return thread
