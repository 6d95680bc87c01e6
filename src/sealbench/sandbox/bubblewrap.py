"""The ``bubblewrap`` backend: the shared caps, and isolation from the host by ``bwrap``.

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
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Final

from sealbench import scratch
from sealbench.errors import HarnessError
from sealbench.sandbox.cgroups import process_limit_method
from sealbench.sandbox.process import (
    _KILL_TEXT,
    _RLIMITS_TEXT,
    _Launch,
    _ProcessSandbox,
    _signal_group,
    _Supervisor,
)
from sealbench.sandbox.protocol import _KERNEL_DIRS, _SYSTEM_DIRS, SandboxSpec, _within

# bwrap's outer monitor and its pid-1 reaper share the cgroup with the command. Its setup
# helper lives only while the sandbox is built, before the command exists, so it needs no slot
# of its own (counting it let the command run one process over its cap).
_BWRAP_HELPERS: Final = 2


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
