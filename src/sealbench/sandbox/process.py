"""The launch, cap, kill and capture machinery every process-based backend shares.

Launch (thread-safe: :meth:`~_ProcessSandbox.run` is called from many threads at once)
---------------------------------------------------------------------------------------
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
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import math
import os
import resource
import select
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sealbench.agentfs import TreeCaps, TreeRejected, copy_tree_fd, open_dir
from sealbench.errors import HarnessError
from sealbench.sandbox.cgroups import _POLL_TICK_S, _pids_hierarchy, _PidsHierarchy, _RunCgroup
from sealbench.sandbox.protocol import _KERNEL_DIRS, _SYSTEM_DIRS, Limits, SandboxResult, SandboxSpec, _within

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
_SETUP_S: Final = 30.0
_SETUP_TICK_S: Final = 0.002
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
_RLIMITS_TEXT: Final = (
    "RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE and RLIMIT_CORE=0 set with prlimit(2) before exec"
)
_KILL_TEXT: Final = f"SIGTERM to the process group at the deadline, SIGKILL {KILL_GRACE_S} s later"


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
