"""A run's story: each task's journal events grouped by task and attempt, the record every
view reads (``sealbench show``, the report's pages, a run's summary). Nothing here renders.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import events as ev
from .outcomes import Outcome, TaskState


@dataclass
class AttemptStory:
    """One attempt's events, in the order the runner writes them."""

    number: int
    started: ev.AttemptStarted | None = None
    agent: ev.AgentFinished | None = None
    patch: ev.PatchCaptured | None = None
    graded: ev.Graded | None = None
    feedback: ev.Feedback | None = None
    finished: ev.AttemptFinished | None = None
    interrupted: ev.AttemptInterrupted | None = None
    errors: list[ev.HarnessFailed] = field(default_factory=list)
    calls: list[ev.ModelCall] = field(default_factory=list)
    started_calls: list[ev.ModelCallStarted] = field(default_factory=list)

    @property
    def result(self) -> str:
        if self.finished is not None and self.finished.result:
            return self.finished.result
        if self.interrupted is not None:
            return TaskState.INTERRUPTED.value
        if self.errors:
            return Outcome.HARNESS_ERROR.value
        return TaskState.UNFINISHED.value


@dataclass
class TaskStory:
    """One task's events: its caps, each attempt, time charged after crashes, its outcome."""

    task_id: str
    started: ev.TaskStarted | None = None
    attempts: dict[int, AttemptStory] = field(default_factory=dict)
    errors: list[ev.HarnessFailed] = field(default_factory=list)
    charges: list[ev.TimeCharged] = field(default_factory=list)
    finished: ev.TaskFinished | None = None

    @property
    def outcome(self) -> str:
        return (self.finished.outcome if self.finished is not None and self.finished.outcome
                else TaskState.UNFINISHED.value)

    def attempt(self, number: int) -> AttemptStory:
        return self.attempts.setdefault(number, AttemptStory(number))

    def last_attempt(self) -> AttemptStory | None:
        return self.attempts[max(self.attempts)] if self.attempts else None


class StoryBook:
    """Each task's story, told one journal line at a time (:meth:`add`), in denominator order
    (tasks with no event included, unfinished): a run builds it while it derives its files
    from the journal, so its summary's why needs no second read of the journal."""

    def __init__(self, task_ids: Sequence[str]) -> None:
        self.tasks = {tid: TaskStory(tid) for tid in task_ids}

    def add(self, line: ev.Line) -> None:
        e = line.event
        if e.task_id is None:
            return
        task = self.tasks.setdefault(e.task_id, TaskStory(e.task_id))
        n = e.attempt
        if isinstance(e, ev.TaskStarted):
            task.started = e
        elif isinstance(e, ev.TaskFinished):
            task.finished = e
        elif isinstance(e, ev.TimeCharged):
            task.charges.append(e)
        elif isinstance(e, ev.HarnessFailed):
            (task.attempt(n).errors if n is not None else task.errors).append(e)
        elif n is not None:
            a = task.attempt(n)
            if isinstance(e, ev.AttemptStarted):
                a.started = e
            elif isinstance(e, ev.AgentFinished):
                a.agent = e
            elif isinstance(e, ev.PatchCaptured):
                a.patch = e
            elif isinstance(e, ev.Graded):
                a.graded = e
            elif isinstance(e, ev.Feedback):
                a.feedback = e
            elif isinstance(e, ev.AttemptFinished):
                a.finished = e
            elif isinstance(e, ev.AttemptInterrupted):
                a.interrupted = e
            elif isinstance(e, ev.ModelCall):
                a.calls.append(e)
            elif isinstance(e, ev.ModelCallStarted):
                a.started_calls.append(e)


def stories(lines: Iterable[ev.Line], task_ids: Sequence[str]) -> dict[str, TaskStory]:
    """Each task's story, in denominator order (tasks with no event included, unfinished)."""
    book = StoryBook(task_ids)
    for line in lines:
        book.add(line)
    return book.tasks
