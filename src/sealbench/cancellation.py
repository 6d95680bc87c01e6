"""Stopping an attempt (or a whole validation) at once: the :class:`Cancellation` its sandboxed
commands run through, and :class:`Stopped`, what the code it was given raises then."""

from __future__ import annotations

import threading

from .errors import HarnessError
from .sandbox import Prepared, SandboxResult


class Stopped(Exception):
    """The attempt under way was stopped (a second interrupt, a storage failure, a cancel)."""


class Cancellation:
    """Reaches the sandboxed commands of one attempt (or of a whole validation) to kill them at once.

    Whoever owns it (an executor, ``pack validate``) calls :meth:`cancel`; the code it was
    given to runs its commands through :meth:`start` and waits through :meth:`pause`.
    """

    def __init__(self) -> None:
        self._live: set[Prepared] = set()
        self._lock = threading.Lock()
        self._abort = threading.Event()
        self._soon = threading.Event()
        self.reasons: list[str] = []

    @property
    def cancelled(self) -> bool:
        return self._abort.is_set()

    @property
    def reason(self) -> str | None:
        return self.reasons[0] if self.reasons else None

    def cancel(self, reason: str) -> None:
        """Kill the commands running now; none starts after this."""
        self._soon.set()
        with self._lock:
            self.reasons.append(reason)
            self._abort.set()
            live = list(self._live)
        for prepared in live:
            prepared.kill()

    def wind_down(self) -> None:
        """End waits (:meth:`pause`) early; running commands go on."""
        self._soon.set()

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less once winding down or cancelled."""
        self._soon.wait(max(0.0, seconds))

    def start(self, prepared: Prepared, timeout_s: float | None = None) -> SandboxResult:
        """Start a prepared command where :meth:`cancel` can reach it.

        Raises:
            Stopped: cancelled (before or while the command ran).
        """
        with self._lock:
            if self._abort.is_set():
                raise Stopped
            self._live.add(prepared)
        try:
            result = prepared.start(timeout_s)
        except HarnessError:
            if self._abort.is_set():
                raise Stopped from None
            raise
        finally:
            with self._lock:
                self._live.discard(prepared)
        if self._abort.is_set():
            raise Stopped
        return result
