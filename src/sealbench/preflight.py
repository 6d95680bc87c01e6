"""Before a run spends its run_id: does the agent's command start inside the sandbox?

The sandbox shows the agent only the system's directories, this Python and the contract's
agent mounts. A command whose program or script lives elsewhere on the host works in a
shell and fails in every attempt of a run, as a harness error that spends the run_id. So
``run`` (and the probe) look first, inside the sandbox's own view, with the agent's ``PATH``:

* the command's program must resolve (a bare name on ``PATH``, or an absolute path to an
  executable file);
* every absolute path in the command that exists on this machine must be visible there.

What the check cannot know is left to the run: a path relative to the workspace (``./agent``,
resolved in each task's workspace), a placeholder (``{workspace}``, filled per attempt), and
an absolute path that does not exist on this machine either (perhaps an output the agent
writes). ``contract new`` runs the same check and warns, so the mistake shows before the lock.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from . import scratch
from .agents import split_template
from .errors import HarnessError, RunRefusal
from .sandbox import Sandbox, SandboxSpec

# Runs inside the sandbox with the agent's PATH: what resolves there. argv: program, paths...
_CHECK: Final = r"""
import json, os, shutil, sys
program, paths = sys.argv[1], sys.argv[2:]
if "/" in program:
    found = program if os.path.isfile(program) and os.access(program, os.X_OK) else None
else:
    found = shutil.which(program)
print(json.dumps({"program": found, "missing": [p for p in paths if not os.path.lexists(p)]}))
"""
_TIMEOUT_S: Final = 30.0
_PLACEHOLDER: Final = "{"


@dataclass(frozen=True)
class Problem:
    """One reason the agent's command would not start in the sandbox, and how to mend it."""

    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}; {self.fix}"


def _host_paths(tokens: Sequence[str]) -> list[str]:
    """Absolute paths named in the command (as a word or after ``--opt=``) that exist here."""
    paths: list[str] = []
    for token in tokens:
        for word in (token, token.partition("=")[2]):
            if word.startswith("/") and _PLACEHOLDER not in word and os.path.lexists(word):
                paths.append(os.path.normpath(word))
    return list(dict.fromkeys(paths))


def _on_host(program: str) -> str | None:
    if "/" in program:
        return program if os.path.isfile(program) else None
    return shutil.which(program)


def problems(command: str, mounts: Sequence[str], sandbox: Sandbox, path_env: str) -> list[Problem]:
    """What would keep ``command`` (a contract's agent command template) from starting in
    ``sandbox`` with ``mounts`` read-only and ``PATH`` set to ``path_env``; empty when nothing.

    Raises:
        RunRefusal: the command does not parse.
        HarnessError: the check itself could not run in the sandbox.
    """
    tokens = split_template(command)
    program = tokens[0]
    check_program = _PLACEHOLDER not in program and (program.startswith("/") or "/" not in program)
    paths = [p for p in _host_paths(tokens) if p != os.path.normpath(program)]
    if not check_program and not paths:
        return []
    root = scratch.temp_dir("preflight")
    try:
        (root / "work").mkdir()
        # The agent's view: its mounts read-only, its PATH, a scratch workspace (never a task's).
        spec = SandboxSpec(argv=(sys.executable, "-I", "-S", "-c", _CHECK, program if check_program else "true",
                                 *paths),
                           workdir=root / "work", env={"PATH": path_env, "HOME": "/tmp/home", "LANG": "C.UTF-8"},
                           timeout_s=_TIMEOUT_S, stdout_path=None, stderr_path=None,
                           readonly_paths=tuple(Path(m) for m in mounts if os.path.isabs(m)))
        res = sandbox.run(spec)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    try:
        seen = json.loads((res.stdout or b"").decode("utf-8"))
        found, missing = seen["program"], list(seen["missing"])
    except (ValueError, KeyError, TypeError):
        tail = (res.stderr or b"").decode("utf-8", "replace").strip().splitlines()[-1:]
        raise HarnessError(f"could not check the agent's command inside the {sandbox.kind} sandbox "
                           f"(exit {res.exit_code}): {' '.join(tail) or 'no output'}") from None
    out: list[Problem] = []
    mend = "add --agent-mount PATH (the file or its folder) to `contract new` and lock the contract again"
    if check_program and found is None:
        host = _on_host(program)
        if host is not None:
            out.append(Problem(f"the agent's program {program!r} is not visible inside the {sandbox.kind} sandbox "
                               f"(on this machine it is {host})", mend))
        elif "/" in program:
            out.append(Problem(f"the agent's program {program!r} does not exist, inside the sandbox or on this "
                               "machine", "check the contract's agent command"))
        else:
            out.append(Problem(f"the agent's program {program!r} is not on the sandbox's PATH ({path_env}) "
                               "nor on this machine's", "install it, or give its absolute path and mount it "
                               "with --agent-mount"))
    for path in missing:
        out.append(Problem(f"{path}, named in the agent's command, exists on this machine but is not visible "
                           f"inside the {sandbox.kind} sandbox", mend))
    return out


def refuse_unless_starts(command: str, mounts: Sequence[str], sandbox: Sandbox, path_env: str) -> None:
    """Refuse (before any journal line) an agent command that cannot start in ``sandbox``.

    Raises:
        RunRefusal: naming each problem; the run_id is not spent.
        HarnessError: the check itself could not run in the sandbox.
    """
    found = problems(command, mounts, sandbox, path_env)
    if found:
        raise RunRefusal("the agent's command would not start inside the sandbox, so the run did not start "
                         "(its run_id is not spent): " + "; ".join(str(p) for p in found))
