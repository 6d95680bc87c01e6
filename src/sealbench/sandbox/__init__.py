"""Run one untrusted command under hard caps, isolated from the host.

Agent code is hostile: this module assumes the command tries to read the hidden tests, write
outside its workspace, phone home, outlive its attempt, fork-bomb the machine and flood its
output. Every backend enforces the same caps; only ``bubblewrap`` also isolates.

The package's parts, each importable on its own, every public name re-exported here:

* :mod:`~sealbench.sandbox.protocol`: the :class:`Sandbox` and :class:`Prepared` interfaces,
  :class:`SandboxSpec`, :class:`Limits`, :class:`Relay` and :class:`SandboxResult`.
* :mod:`~sealbench.sandbox.conformance`: the checks any backend passes to prove itself
  (imported only when asked for).
* :mod:`~sealbench.sandbox.cgroups`: the process count, by a ``pids`` cgroup per run.
* :mod:`~sealbench.sandbox.process`: launch, caps, kill and output capture, shared by the backends.
* :mod:`~sealbench.sandbox.plain`: :class:`NoSandbox` (``none``), the caps without isolation.
* :mod:`~sealbench.sandbox.bubblewrap`: :class:`BubblewrapSandbox`, the isolating backend (its
  module docstring draws the isolation model).
* :mod:`~sealbench.sandbox.opening`: a backend opened by name, smoke-tested once per process.

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

from sealbench.sandbox.bubblewrap import BubblewrapSandbox
from sealbench.sandbox.cgroups import (
    deferred_cgroup_removals,
    process_limit_method,
    settle_cgroup_removals,
    sweep_stale_cgroups,
    unescape_mount_field,
)
from sealbench.sandbox.opening import command_path, open_ahead, open_bubblewrap, open_none, open_sandbox
from sealbench.sandbox.plain import NoSandbox
from sealbench.sandbox.process import COMMAND_NICENESS, KILL_GRACE_S, YIELD_ABOVE_JOBS, PreparedProcess
from sealbench.sandbox.protocol import Limits, Prepared, Relay, Sandbox, SandboxResult, SandboxSpec

__all__ = [
    "COMMAND_NICENESS",
    "KILL_GRACE_S",
    "YIELD_ABOVE_JOBS",
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
