"""A backend chosen and opened by name (:mod:`sealbench.sandboxes` registers them), smoke-tested
once per process."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from sealbench.errors import HarnessError, RunRefusal, UsageError
from sealbench.sandbox.bubblewrap import BubblewrapSandbox, _system_binds
from sealbench.sandbox.cgroups import sweep_stale_cgroups
from sealbench.sandbox.plain import NoSandbox
from sealbench.sandbox.protocol import Sandbox

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
    smoke test result is cached per process. ``"unshare"`` is refused (see
    :mod:`sealbench.sandbox.plain`). ``bwrap_executable`` overrides the ``bwrap`` found on PATH.

    Raises:
        RunRefusal: no sandbox of the requested kind works on this machine.
        UsageError: ``requested`` is not ``auto`` or a registered backend.
    """
    from sealbench import sandboxes

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
