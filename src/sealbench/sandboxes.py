"""Sandbox backends by name: what ``--sandbox`` offers and :func:`sealbench.sandbox.open_sandbox` opens.

A backend is a name and the dotted path of a function that returns a
:class:`sealbench.sandbox.Sandbox` (raising :class:`sealbench.errors.RunRefusal` when it cannot
work on this machine). The path is imported only when the backend is opened, so that the CLI
lists the choices without loading any of them. ``auto`` opens the first isolating backend that
works, in the order they were registered; a backend that does not isolate (``none``) is never
chosen for the user.

Another package adds one with :func:`register` and proves it with
:func:`sealbench.sandbox.conformance.check`, which sealbench's tests run over every registered
backend (``tests/test_sandbox_conformance.py``), as they run their exploits
(``tests/test_sandbox.py``).

``fake`` is for sealbench's own tests only: its opener lives in ``tests/fake_sandbox.py``, so it
opens only where the tests are importable; ``--sandbox`` never offers it and ``auto`` never
picks it. It lets tests of the runner's logic (resume, bundle, compare, executors) run where
bubblewrap cannot start.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .sandbox import Sandbox

AUTO: Final = "auto"


@dataclass(frozen=True)
class Backend:
    """One registered backend."""

    name: str
    opener: str
    """``module:function``; the function takes the backend's keyword options."""
    isolating: bool
    """Whether it hides the host and the hidden tests from the agent (``auto`` picks only these)."""
    summary: str
    test_only: bool = False
    """Only sealbench's tests open it: never offered by ``--sandbox``, never picked by ``auto``."""

    def open(self, **options: Any) -> Sandbox:
        """The backend's sandbox.

        Raises:
            RunRefusal: it cannot work on this machine (the message says why and what to do).
        """
        module, _, function = self.opener.partition(":")
        if self.test_only:
            try:
                importlib.import_module(module)
            except ImportError:
                from .errors import RunRefusal

                raise RunRefusal(f"the {self.name!r} sandbox is for sealbench's own tests only; "
                                 f"choose one of {', '.join(names())}") from None
        opener: Callable[..., Sandbox] = getattr(importlib.import_module(module), function)
        return opener(**options)


_REGISTRY: dict[str, Backend] = {
    "bubblewrap": Backend("bubblewrap", "sealbench.sandbox:open_bubblewrap", isolating=True,
                          summary="namespaces, caps and disk quotas with bubblewrap (bwrap)"),
    "none": Backend("none", "sealbench.sandbox:open_none", isolating=False,
                    summary="no isolation: the agent and the oracles run on the host"),
    "fake": Backend("fake", "fake_sandbox:open_fake", isolating=False, test_only=True,
                    summary="tests only: plain child processes of the test, no isolation"),
}


def register(backend: Backend) -> None:
    """Add ``backend``; a name is registered once.

    Raises:
        ValueError: the name is taken, or is ``auto``.
    """
    if backend.name == AUTO or backend.name in _REGISTRY:
        raise ValueError(f"a sandbox backend named {backend.name!r} is already registered")
    _REGISTRY[backend.name] = backend


def backends() -> list[Backend]:
    """Every registered backend, in registration order."""
    return list(_REGISTRY.values())


def names() -> list[str]:
    """What ``--sandbox`` accepts: ``auto`` and every registered backend but the test-only ones."""
    return [AUTO, *(name for name, b in _REGISTRY.items() if not b.test_only)]


def backend(name: str) -> Backend | None:
    """The backend registered as ``name``, if any."""
    return _REGISTRY.get(name)
