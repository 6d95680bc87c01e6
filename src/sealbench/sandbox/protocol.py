"""The interface every sandbox backend implements, and the values that cross it.

:class:`Sandbox` runs one :class:`SandboxSpec` under its :class:`Limits` and returns a
:class:`SandboxResult`; :class:`Prepared` is a command set up ahead and held before it runs.
:func:`sealbench.sandbox.conformance.check` tells whether a backend keeps these promises.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from sealbench.agentfs import TreeCaps

_SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")
_KERNEL_DIRS: Final = ("/proc", "/dev", "/sys")


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
        for rule in (_argv_problem, _path_problem, _timeout_problem, _env_problem, _link_problem):
            problem = rule(self)
            if problem is not None:
                raise ValueError(problem)


def _argv_problem(spec: SandboxSpec) -> str | None:
    if not spec.argv or not all(isinstance(a, str) and "\0" not in a for a in spec.argv):
        return f"argv must be a non-empty tuple of strings without NUL: {spec.argv!r}"
    return None


def _timeout_problem(spec: SandboxSpec) -> str | None:
    if not (spec.timeout_s > 0 and math.isfinite(spec.timeout_s)):
        return f"timeout_s must be positive and finite: {spec.timeout_s!r}"
    return None


def _path_problem(spec: SandboxSpec) -> str | None:
    for name in ("workdir", "stdout_path", "stderr_path"):
        if getattr(spec, name) is not None and not Path(getattr(spec, name)).is_absolute():
            return f"{name} must be absolute: {getattr(spec, name)}"
    for kind, paths in (("readonly", spec.readonly_paths), ("writable", spec.writable_paths)):
        for path in paths:
            if not Path(path).is_absolute():
                return f"{kind} path must be absolute: {path}"
    return None


def _env_problem(spec: SandboxSpec) -> str | None:
    for key, value in spec.env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            return f"environment entry cannot be passed to a process: {key!r}"
    home = spec.env.get("HOME")
    if home is not None and not os.path.isabs(home):
        return f"HOME must be absolute: {home!r}"
    return None


def _link_problem(spec: SandboxSpec) -> str | None:
    taken = (*_SYSTEM_DIRS, *_KERNEL_DIRS, "/tmp", str(spec.workdir), *(str(p) for p in spec.readonly_paths),
             *(str(p) for p in spec.writable_paths))
    for link, target in spec.links:
        norm = os.path.normpath(link)
        if (not os.path.isabs(link) or norm == "/" or "\0" in link or "\0" in target
                or any(_within(norm, d) or _within(d, norm) for d in taken)):
            return f"link path must be absolute and outside the sandbox's mounts: {link!r}"
    return None


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


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")
