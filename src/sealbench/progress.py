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
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar

            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                            TimeRemainingColumn(), transient=False)
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
