"""The ``none`` backend: the shared caps on a plain subprocess, no isolation.

:class:`NoSandbox` applies the same caps, kill policy and output capture to a plain subprocess
(``kind`` "none"): it isolates nothing. A util-linux ``unshare`` backend is deliberately not
provided: without a per-launch mount helper it cannot hide the host filesystem, so the hidden
tests would be readable and a grade obtained under it would mean nothing.
"""

from __future__ import annotations

import os
import sys

from sealbench.errors import HarnessError
from sealbench.sandbox.cgroups import process_limit_method
from sealbench.sandbox.process import _KILL_TEXT, _RLIMITS_TEXT, _find_command, _Launch, _ProcessSandbox
from sealbench.sandbox.protocol import SandboxSpec


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
