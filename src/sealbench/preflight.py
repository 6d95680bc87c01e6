"""Before a run spends its run_id: does the agent's command start inside the sandbox?

The sandbox shows the agent only the system's directories, this Python and the contract's
agent mounts. A command whose program or script lives elsewhere on the host works in a
shell and fails in every attempt of a run, as a harness error that spends the run_id. So
``run`` (and the probe) look first, inside the sandbox's own view, with the agent's ``PATH``:

* the command's program must resolve (a bare name on ``PATH``, or an absolute path to an
  executable file);
* every absolute path in the command that exists on this machine must be visible there.

* every absolute path in the command that does not exist on this machine must be one the
  agent could create there (under ``/tmp``, outside its read-only mounts): anything else is a
  typo that would make every attempt fail before the agent started.

What the check cannot know is left to the run: a path relative to the workspace (``./agent``,
resolved in each task's workspace) and a placeholder (``{workspace}``, filled per attempt). ``contract new`` runs the same check and warns, so the mistake shows before the lock.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from . import scratch
from .errors import ContractError, HarnessError, RunRefusal
from .sandbox import Sandbox, SandboxResult, SandboxSpec, command_path, open_ahead

if TYPE_CHECKING:
    from .formats import ModelEndpoint

# Runs inside the sandbox with the agent's PATH: what resolves there. argv: program, paths...
# Prints 1 when the program resolves (else 0), then the 1-based index of each path that does
# not exist there, one a line. A shell, not Python: it starts in a millisecond, not fifteen.
_CHECK: Final = r"""
set -f
program=$1
shift
found=0
case $program in
*/*) if [ -f "$program" ] && [ -x "$program" ]; then found=1; fi ;;
*)
    IFS=:
    for dir in $PATH; do
        if [ -f "${dir:-.}/$program" ] && [ -x "${dir:-.}/$program" ]; then found=1; break; fi
    done
    unset IFS ;;
esac
echo "$found"
i=0
for path in "$@"; do
    i=$((i + 1))
    if [ ! -e "$path" ] && [ ! -L "$path" ]; then echo "$i"; fi
done
"""
_SHELL: Final = "/bin/sh"
_TIMEOUT_S: Final = 30.0
_PLACEHOLDER: Final = "{"
_WRITABLE: Final = ("/tmp", "/dev/shm")
_MOUNT_IT: Final = "add --agent-mount PATH (the file or its folder) to `contract new` and lock the contract again"


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


def _never_there(tokens: Sequence[str], program: str, mounts: Sequence[str]) -> list[str]:
    """Absolute paths named in the command that exist nowhere: not on this machine, and not in
    a place the agent could create them in the sandbox. Its root is read-only and so are the
    agent's mounts; only ``/tmp``, ``/dev/shm`` and the workspace (always named by placeholder)
    are writable."""

    def under(path: str, places: Sequence[str]) -> bool:
        return any(path == place or path.startswith(place.rstrip("/") + "/") for place in places)

    read_only = [os.path.normpath(m) for m in mounts if os.path.isabs(m)]
    paths: list[str] = []
    for token in tokens:
        for word in (token, token.partition("=")[2]):
            if not word.startswith("/") or _PLACEHOLDER in word or os.path.lexists(word):
                continue
            norm = os.path.normpath(word)
            if norm != os.path.normpath(program) and (under(norm, read_only) or not under(norm, _WRITABLE)):
                paths.append(norm)
    return list(dict.fromkeys(paths))


def _on_host(program: str) -> str | None:
    if "/" in program:
        return program if os.path.isfile(program) else None
    return shutil.which(program)


# Checks begun ahead (check_ahead), by what they check: the sandbox object (opened once per
# process), the command, its mounts and PATH. A later check of exactly that takes the result.
_Key = tuple[int, str, tuple[str, ...], str]
_early: dict[_Key, Future[list[Problem]]] = {}
_early_lock = threading.Lock()


def check_ahead(contract: os.PathLike[str] | str, requested: str) -> threading.Thread:
    """Open the ``requested`` sandbox ahead (:func:`sealbench.sandbox.open_ahead`) and, on the
    same thread, check the contract's agent command in it, read straight from the contract's
    JSON, so that both overlap the run's imports; the run's own :func:`problems` of the same
    command, mounts and PATH in the same sandbox then takes this result (waiting if need be).
    A contract that cannot be read here is left to the run, which says what is wrong with it.
    """
    try:
        with open(contract, encoding="utf-8") as fh:
            agent = json.load(fh)["agent"]
        command, mounts = agent["command"], agent.get("mounts") or []
        ok = isinstance(command, str) and isinstance(mounts, list) and all(isinstance(m, str) for m in mounts)
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok or command.startswith("builtin:"):
        return open_ahead(requested)

    def then(sandbox: Sandbox) -> None:
        path_env = command_path()
        future: Future[list[Problem]] = Future()
        with _early_lock:
            _early[(id(sandbox), command, tuple(mounts), path_env)] = future
        try:
            future.set_result(_problems(command, mounts, sandbox, path_env))
        except BaseException as e:  # the run's own check raises it, in its own order
            future.set_exception(e)

    return open_ahead(requested, then=then)


def problems(command: str, mounts: Sequence[str], sandbox: Sandbox, path_env: str) -> list[Problem]:
    """What would keep ``command`` (a contract's agent command template) from starting in
    ``sandbox`` with ``mounts`` read-only and ``PATH`` set to ``path_env``; empty when nothing.

    Raises:
        RunRefusal: the command does not parse.
        HarnessError: the check itself could not run in the sandbox.
    """
    with _early_lock:
        early = _early.pop((id(sandbox), command, tuple(mounts), path_env), None)
    if early is not None:
        return early.result()
    return _problems(command, mounts, sandbox, path_env)


def _problems(command: str, mounts: Sequence[str], sandbox: Sandbox, path_env: str) -> list[Problem]:
    from .agents import split_template  # here: check_ahead imports this module before anything heavy

    tokens = split_template(command)
    program = tokens[0]
    check_program = _PLACEHOLDER not in program and (program.startswith("/") or "/" not in program)
    paths = [p for p in _host_paths(tokens) if p != os.path.normpath(program)]
    nowhere = [Problem(f"{path}, named in the agent's command, does not exist on this machine, and the agent "
                       f"cannot create it in the sandbox (its mounts are read-only; only its workspace and /tmp are "
                       f"writable there)",
                       "check that path in the contract's agent command (a typo?), then lock the contract again")
               for path in _never_there(tokens, program, mounts)]
    if not check_program and not paths:
        return nowhere
    root = scratch.temp_dir("preflight")
    try:
        (root / "work").mkdir()
        # The agent's view: its mounts read-only, its PATH, a scratch workspace (never a task's).
        spec = SandboxSpec(argv=(_SHELL, "-c", _CHECK, "sh", program if check_program else "true", *paths),
                           workdir=root / "work", env={"PATH": path_env, "HOME": "/tmp/home", "LANG": "C.UTF-8"},
                           timeout_s=_TIMEOUT_S, stdout_path=None, stderr_path=None,
                           readonly_paths=tuple(Path(m) for m in mounts if os.path.isabs(m)))
        res = sandbox.run(spec)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    found, missing = _check_result(res, paths, sandbox.kind)
    out = [_program_problem(program, sandbox.kind, path_env)] if check_program and not found else []
    for path in missing:
        out.append(Problem(f"{path}, named in the agent's command, exists on this machine but is not visible "
                           f"inside the {sandbox.kind} sandbox", _MOUNT_IT))
    return out + nowhere


def _check_result(res: SandboxResult, paths: Sequence[str], kind: str) -> tuple[bool, list[str]]:
    """Whether the check found the program, and which of ``paths`` it did not see.

    Raises:
        HarnessError: the check's own output is not what it prints (it failed, not the agent).
    """
    try:
        head, *rest = (res.stdout or b"").decode("ascii").split()
        if res.exit_code != 0 or head not in ("0", "1"):
            raise ValueError(head)
        return head == "1", [paths[int(i) - 1] for i in rest]
    except (ValueError, IndexError, UnicodeDecodeError):
        tail = (res.stderr or b"").decode("utf-8", "replace").strip().splitlines()[-1:]
        raise HarnessError(f"could not check the agent's command inside the {kind} sandbox "
                           f"(exit {res.exit_code}): {' '.join(tail) or 'no output'}") from None


def _program_problem(program: str, kind: str, path_env: str) -> Problem:
    """Why the agent's program was not found inside the sandbox, from what this machine has."""
    host = _on_host(program)
    if "/" in program and host is not None and not os.access(program, os.X_OK):
        return Problem(f"the agent's program {program!r} is not executable",
                       "make it executable (chmod +x), or run it through its interpreter")
    if host is not None:
        return Problem(f"the agent's program {program!r} is not visible inside the {kind} sandbox "
                       f"(on this machine it is {host})", _MOUNT_IT)
    if "/" in program:
        return Problem(f"the agent's program {program!r} does not exist, inside the sandbox or on this "
                       "machine", "check the contract's agent command")
    return Problem(f"the agent's program {program!r} is not on the sandbox's PATH ({path_env}) "
                   "nor on this machine's", "install it, or give its absolute path and mount it "
                   "with --agent-mount")


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


CONNECT_TIMEOUT_S: Final = 3.0
"""How long an endpoint has to accept a TCP connection before the run is refused."""


def unreachable(base_url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why ``base_url``'s host does not accept a TCP connection within ``timeout_s``, or None."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no TCP connection to {host}:{port} within {timeout_s:g} s"
    except OSError as e:
        return f"no TCP connection to {host}:{port} ({e.strerror or type(e).__name__})"


def refuse_unreachable(endpoints: Sequence[ModelEndpoint] | None, *, replayed: bool = False,
                       timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse (before any journal line) a run whose model endpoints do not accept a TCP
    connection: every call its agent made would fail, and each attempt would end as the
    endpoint's failure, spending the run_id. A replay calls no endpoint, and is not checked.

    Raises:
        RunRefusal: naming each endpoint, its URL and why; the run_id is not spent.
    """
    if replayed or not endpoints:
        return
    down = [f"endpoint {e.name!r} at {e.base_url}: {why}" for e in endpoints
            if (why := unreachable(e.base_url, timeout_s)) is not None]
    if down:
        raise RunRefusal("the model endpoint does not accept connections, so the run did not start (its run_id "
                         "is not spent): " + "; ".join(down) + "; start the endpoint (or fix its base_url among the "
                         "contract's model_endpoints, in a new contract) and run again")


def nearest(path: str) -> str | None:
    """The existing path nearest to ``path`` (which does not exist): its closest sibling by name
    (``/opt/agent/run.sh`` for ``/opt/agent/rnu.sh``), else its deepest existing folder; None
    when not even its first folder exists."""
    import difflib

    parent, name = os.path.split(os.path.normpath(path))
    while parent != "/" and not os.path.isdir(parent):
        parent, name = os.path.split(parent)
    try:
        names = os.listdir(parent)
    except OSError:
        names = []
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close:
        return os.path.join(parent, close[0])
    return parent if parent != "/" else None


def refuse_missing_paths(command: str, mounts: Sequence[str]) -> None:
    """Refuse (at ``contract new``) an agent command naming an absolute path that exists nowhere:
    not on this machine, and not in a place the agent could create it (:func:`_never_there`),
    the program included. Every attempt would fail before the agent started.

    Raises:
        ContractError: naming each such path and the nearest existing one; nothing is written.
    """
    from .agents import split_template

    tokens = split_template(command)
    program = tokens[0]
    missing = _never_there(tokens, "", mounts)
    if program.startswith("/") and _PLACEHOLDER not in program and not os.path.lexists(program) \
            and os.path.normpath(program) not in missing:
        missing.insert(0, os.path.normpath(program))
    if not missing:
        return
    said = []
    for path in missing:
        near = nearest(path)
        said.append(f"{path} does not exist" + (f" (the nearest existing path is {near})" if near else ""))
    raise ContractError("the agent's command names a path that does not exist, so every attempt would fail "
                        "before the agent started: " + "; ".join(said) + "; fix the path in --agent and run "
                        "`sealbench contract new` again")
