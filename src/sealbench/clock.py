"""Honest time: the clocks a journal line carries, and the heartbeat that bounds a session.

Every line a journal writes (version 2) carries three times: ``time``, the UTC wall clock, for
people; ``mono_ms``, the monotonic clock in milliseconds (it never steps: an NTP correction or
an operator setting the date moves ``time``, never ``mono_ms``); and ``boot_id``, the kernel's
random id of the boot the line was written in (monotonic times compare only within one boot).
Time is charged from ``mono_ms`` differences alone (:mod:`sealbench.charge`).

A runner process is a *session* of its journal. While it runs, :class:`Heartbeat` keeps two
promises that let a later resume bound how long the agents of a killed session ran:

* the journal is never silent longer than :data:`HEARTBEAT_MS`: when no line was written for
  that long a ``heartbeat`` line is appended. It is written but not fsynced: what a process
  wrote outlives the process in the page cache, and only a restart of the machine loses it,
  which changes the boot id (and then the whole remaining budget is charged);
* no agent runs more than :data:`LEASE_MS` past the journal's last line: if no line could be
  written for that long (a failed or stalled disk, a starved process), the watchdog ends the
  process, and the agents die with it (bubblewrap's ``--die-with-parent``).

So a session killed at any moment ended at most its lease after its last line, and that is
what an interrupted task is charged up to. The lease is :data:`LEASE_MS`, or
:data:`LEASE_MANY_MS` for a run of more than ``sealbench.sandbox.YIELD_ABOVE_JOBS`` tasks at
once (:func:`lease_for`), and each session records the one it kept.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .journal import Journal

HEARTBEAT_MS = 500
"""The longest a running session's journal stays silent before a ``heartbeat`` line."""
LEASE_MS = 2000
"""How long past the journal's last line a session may still have run agents."""
LEASE_MANY_MS = 10_000
"""The lease of a run of many tasks at once (model-bound agents, hundreds at a time). Its
runner has hundreds of threads (relays, gateway, set-up) queueing for the interpreter lock,
and the disk serves hundreds of sandboxes' writes, flushes and discards: a heartbeat line was
seen to wait 4 s on this machine at --jobs 256 with the CPU and the disk otherwise doing fine.
A longer lease is never a gift to the agent: a crash charges each interrupted task more of its
budget, never less."""
_MARGIN_MS = 250
"""The watchdog ends the process this much before the lease runs out (process teardown time)."""

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@functools.cache
def read_boot_id() -> str | None:
    """This boot's id (Linux), or None where the kernel does not say: then no charge can rely on it."""
    try:
        text = BOOT_ID_PATH.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _UUID_RE.match(text) else None


def _utc() -> datetime:
    return datetime.now(UTC)


def monotonic_ms() -> int:
    """The monotonic clock in whole milliseconds: the clock every deadline is measured with."""
    return int(time.monotonic() * 1000)


@dataclass(frozen=True)
class Clock:
    """Where a journal's wall time and boot id come from: a parameter, so that tests can step the
    wall clock or pretend the machine restarted. The monotonic clock is not a parameter: it is
    the one the sandbox's deadlines run on."""

    utc: Callable[[], datetime] = _utc
    boot_id: str | None = field(default_factory=read_boot_id)

    def wall(self) -> str:
        """The wall time as the journal writes it (UTC, milliseconds, Z)."""
        return self.utc().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def lease_for(jobs: int, *, many_above: int) -> int:
    """The heartbeat lease (ms) of a run of ``jobs`` tasks at once (module docstring)."""
    return LEASE_MANY_MS if jobs > many_above else LEASE_MS


def end_process(message: str) -> None:
    """The watchdog's last resort: say why, then end the process at once (agents die with it)."""
    try:
        sys.stderr.write(f"sealbench: error: {message}\n")
        sys.stderr.flush()
    finally:
        os._exit(1)


class Heartbeat:
    """Keep a running session's promises (module docstring): a line at least every
    ``interval_ms``, and the process ended by ``on_lapse`` when none could be written for
    ``lease_ms`` less a margin. Two daemon threads: the watchdog never touches the journal's
    locks, so a write stuck in the kernel cannot hold it up.
    """

    def __init__(self, journal: Journal, *, interval_ms: int = HEARTBEAT_MS, lease_ms: int = LEASE_MS,
                 on_lapse: Callable[[str], None] = end_process) -> None:
        self._journal = journal
        self._interval = interval_ms / 1000
        self._lease = lease_ms / 1000
        self._fire_after = max(self._interval, (lease_ms - _MARGIN_MS) / 1000)
        self._on_lapse = on_lapse
        self._stop = threading.Event()
        self._error: str | None = None
        self._since = time.monotonic()
        self._threads = [threading.Thread(target=self._beat, name="sealbench-heartbeat", daemon=True),
                         threading.Thread(target=self._watch, name="sealbench-watchdog", daemon=True)]

    def start(self) -> Heartbeat:
        # The journal may have been opened long before (a large one read on resume): the lease
        # counts from now, and the first heartbeat is written at once.
        self._since = time.monotonic()
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop both threads (once no agent runs); a heartbeat stuck in a write is not waited for long."""
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=2 * self._interval)

    def _beat(self) -> None:
        from . import events
        from .errors import HarnessError

        beat = events.Heartbeat()
        journal = self._journal
        while not self._stop.is_set():
            wait = journal.last_written + self._interval - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)
                continue
            try:
                journal.append(beat, durable=False)
            except HarnessError as e:
                self._error = str(e)
                self._stop.wait(self._interval)

    def _watch(self) -> None:
        journal = self._journal
        while not self._stop.is_set():
            last = max(journal.last_written, self._since)
            wait = last + self._fire_after - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)
                continue
            silent = time.monotonic() - last
            why = self._error or "its writes stalled, or the runner was starved of the CPU"
            self._on_lapse(
                f"the journal has recorded nothing for {silent:.1f} s ({why}); the run was ended so that no "
                f"agent runs unaccounted. Once the disk is writable again, continue with --resume: each "
                f"interrupted task is charged up to the journal's last line plus {self._lease:g} s."
            )
            return
