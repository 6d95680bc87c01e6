"""A run's story: each task's journal events grouped by task and attempt, the record every
view reads (``sealbench show``, the report's pages, a run's summary). Nothing here renders.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
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
        tid = line.event.task_id
        if tid is not None:
            note(self.tasks.setdefault(tid, TaskStory(tid)), line.event)


def note(task: TaskStory, e: ev.Event) -> None:
    """``e`` (an event of ``task``) added to its story."""
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
        _note_attempt(task.attempt(n), e)


def _note_attempt(a: AttemptStory, e: ev.Event) -> None:
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


class Teller:
    """Each task's story told as soon as its task_finished is read (:meth:`add`), then the
    rest (:meth:`rest`): a reader of a large run holds only the stories of tasks still
    running, never the whole run.

    A line of a task read after its story was told is left out of it and the task named in
    :attr:`late`: its story is told again, whole, by :func:`stories` over a second read
    restricted to those tasks. A journal the runner wrote has no such line.
    """

    def __init__(self, task_ids: Sequence[str]) -> None:
        self._ids = task_ids
        self._open: dict[str, TaskStory] = {}
        self._told: set[str] = set()
        self.late: set[str] = set()
        """Tasks with a line read after their story was told."""

    def add(self, line: ev.Line) -> TaskStory | None:
        """``line`` added to its task's story; that story when ``line`` finished the task."""
        e = line.event
        tid = e.task_id
        if tid is None:
            return None
        if tid in self._told:
            self.late.add(tid)
            return None
        task = self._open.get(tid)
        if task is None:
            task = self._open[tid] = TaskStory(tid)
        note(task, e)
        if not isinstance(e, ev.TaskFinished):
            return None
        self._told.add(tid)
        return self._open.pop(tid)

    def rest(self) -> Iterator[TaskStory]:
        """The stories not told yet: the denominator's in its order (a task with no event
        included, unfinished), then those of tasks outside it in the order first read."""
        for tid in self._ids:
            if tid not in self._told:
                self._told.add(tid)
                yield self._open.pop(tid) if tid in self._open else TaskStory(tid)
        while self._open:
            tid = next(iter(self._open))
            self._told.add(tid)
            yield self._open.pop(tid)


def stories(lines: Iterable[ev.Line], task_ids: Sequence[str]) -> dict[str, TaskStory]:
    """Each task's story, in denominator order (tasks with no event included, unfinished)."""
    book = StoryBook(task_ids)
    for line in lines:
        book.add(line)
    return book.tasks
