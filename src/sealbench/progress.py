"""The progress display of a run or a validation: a rich bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    """A rich progress display on a terminal, plain lines otherwise."""

    def __init__(self, total: int, done: int, enabled: bool | None, label: str) -> None:
        self.total, self.done = total, done
        self.counts: dict[str, int] = {}
        self.t0 = time.monotonic()
        self.live = sys.stderr.isatty() if enabled is None else enabled
        self.label = label
        self._bar: Any = None
        if self.live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar

            # On stderr, as the plain lines are: stdout carries the run's summary, perhaps to a file.
            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                            TimeRemainingColumn(), transient=False, console=Console(stderr=True))
            self._bar.start()
            self._task = self._bar.add_task(label, total=total, completed=done, counts="")

    def update(self, task_id: str, outcome: str) -> None:
        self.done += 1
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        counts = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, counts=counts)
        else:
            print(f"[{self.done}/{self.total}] {task_id}: {outcome} ({time.monotonic() - self.t0:.1f}s)",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


JOURNAL_STEP = "reading the journal (tasks finished)"
"""The step of a journal's read, counted in task_finished lines (verify, score, report)."""


class Steps:
    """The steps of a long command over a bundle (verify, score, report), each a bar on a terminal
    while it lasts and gone when the command ends: what the command prints is unchanged.
    Nothing is shown when stderr is not a terminal (``enabled`` None) or when ``enabled`` is
    False (``--no-progress``).

    :meth:`advance` is called once a file or a task, hundreds of thousands of times for a large
    bundle: it counts, and redraws the bar at most :data:`REDRAW_S` apart.
    """

    REDRAW_S = 0.1

    def __init__(self, enabled: bool | None, label: str) -> None:
        self.live = sys.stderr.isatty() if enabled is None else enabled
        self.label = label
        self.what = ""
        self.done = 0
        self.total: int | None = None
        self._drawn = 0.0
        self._bar: Any = None
        self._task: Any = None

    def step(self, what: str, total: int | None) -> None:
        """Start the step ``what`` of ``total`` units (None: a count without an end)."""
        self.what, self.done, self.total = what, 0, total
        if not self.live:
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            # On stderr: stdout carries the command's words, perhaps to a file or a pipe.
            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), transient=True, console=Console(stderr=True))
            self._bar.start()
            self._task = self._bar.add_task("", total=total)
        # Drawn at once: a step may end before the next redraw would show it.
        self._bar.update(self._task, description=f"{self.label}: {what}", total=total, completed=0, refresh=True)
        self._drawn = time.monotonic()

    def advance(self, n: int = 1) -> None:
        """``n`` more units of the step done."""
        self.done += n
        if self._bar is not None and self.done & 0x3F == 0 and time.monotonic() - self._drawn >= self.REDRAW_S:
            self._bar.update(self._task, completed=self.done)
            self._drawn = time.monotonic()

    def close(self) -> None:
        """Remove the bar (the command's own output follows it)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Steps:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
