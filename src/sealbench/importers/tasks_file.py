"""Many small tasks in one file: ``tasks.toml`` (or ``tasks.jsonl``, one task a line).

A pack written by hand need not be 28 files. ``tasks.toml`` holds the pack's name, defaults
and every task's prompt, workspace, hidden tests and reference solution, file by file::

    name = "toy"
    description = "Five toy tasks."

    [[tasks]]
    id = "add"
    prompt = "`add(a, b)` in calc.py returns the wrong sum. Fix it."
    workspace = { "calc.py" = "def add(a, b):\\n    return a - b\\n" }
    hidden = { "test_calc.py" = "from calc import add\\n\\ndef test_add():\\n    assert add(2, 3) == 5\\n" }
    solution = { "calc.py" = "def add(a, b):\\n    return a + b\\n" }

``pack seal DIR``, on a folder that holds such a file, expands it into the sealed layout
(``pack.json``, ``prompts/``, ``tasks/<id>/``) beside it and seals that, under the same
digest rules as a pack written out by hand: a hidden test edited after the seal is refused
unless ``--update``. ``import tasks FILE -o PACK`` writes the same layout to a new folder.
The layout is derived: edit the file, never the layout.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import PackError
from ..files import describe_validation_error, model_json, read_model
from ..formats import Id, PackManifest, Provenance, TaskRecord
from .draft import PLACEHOLDER_DIGEST, ImportOptions, PackDraft, TaskDraft, make_record, text_file

TASKS_FILES = ("tasks.toml", "tasks.jsonl")
"""The names a folder's tasks file may have, in the order they are looked for."""
TEMPLATE_ID = "task-v1"
TEMPLATE = """\
You are working in a git repository (the current directory). Task {task_id}, attempt {attempt} of {max_attempts}.

{task_prompt}

{feedback}
Change files in this directory only. Hidden tests you cannot see will grade your change; editing test \
configuration (conftest.py, pytest.ini, setup.cfg, tox.ini, *.pth, sitecustomize.py) fails the task.
"""
CONTAMINATION = "written for this pack; not published before it"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskEntry(_Strict):
    """One task of a tasks file."""

    id: Id = Field(description="The task's id (its folder name in the sealed layout).")
    prompt: str = Field(min_length=1, description="What the agent is asked to do.")
    workspace: dict[str, str] = Field(description="The files the agent starts from: path -> text.")
    hidden: dict[str, str] = Field(min_length=1, description="The tests that decide the task: path -> text. "
                                   "The agent never sees them.")
    solution: dict[str, str] = Field(default_factory=dict, description="The reference solution's files: "
                                     "path -> text; `pack validate` checks that it passes.")
    oracle: list[str] | None = Field(None, min_length=1, description="The command that grades (default: "
                                     "`sealbench-pytest -q` over the hidden files named test_*.py).")
    max_attempts: int | None = Field(None, ge=1, description="This task's retry ceiling (default: the file's).")
    wall_clock_s: float | None = Field(None, gt=0, description="This task's wall-clock ceiling in seconds.")


class TasksFile(_Strict):
    """A pack's tasks in one file."""

    name: Id = Field(description="The pack's name.")
    description: str = Field("", description="What the pack is for.")
    license: str | None = Field(None, description="The license of the tasks.")
    contamination: str = Field(CONTAMINATION, min_length=1,
                               description="What is known about the tasks' overlap with model training data.")
    max_attempts: int = Field(1, ge=1, description="Every task's retry ceiling unless it sets its own.")
    wall_clock_s: float = Field(60.0, gt=0, description="Every task's wall-clock ceiling unless it sets its own.")
    template: str = Field(TEMPLATE, min_length=1, description="The prompt template (placeholders: {task_id}, "
                          "{attempt}, {max_attempts}, {task_prompt}, {feedback}).")
    tasks: list[TaskEntry] = Field(min_length=1, description="The tasks.")


def find_tasks_file(folder: Path) -> Path | None:
    """The tasks file of ``folder``, if it holds one."""
    for name in TASKS_FILES:
        path = folder / name
        if path.is_file():
            return path
    return None


def read_tasks_file(path: Path) -> TasksFile:
    """Read and check a ``tasks.toml`` or ``tasks.jsonl`` (whose pack is named after its folder).

    Raises:
        PackError: the file cannot be read or parsed, or a field is wrong (named with its task).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PackError(f"{path}: cannot read the tasks file: {e}") from None
    raw: dict[str, Any]
    if path.suffix == ".toml":
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise PackError(f"{path}: not valid TOML: {e}") from None
    else:
        tasks: list[Any] = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    tasks.append(json.loads(line))
                except ValueError as e:
                    raise PackError(f"{path} line {lineno}: not valid JSON: {e}") from None
        raw = {"name": path.parent.resolve().name, "tasks": tasks}
    try:
        return TasksFile.model_validate(raw)
    except ValidationError as e:
        raise PackError(f"{path}: {_where(raw, e)}{describe_validation_error(e)}") from None


def _where(raw: dict[str, Any], error: ValidationError) -> str:
    """``task 'add': `` when the first error is inside a task."""
    loc = error.errors()[0]["loc"]
    if len(loc) >= 2 and loc[0] == "tasks" and isinstance(loc[1], int):
        tasks = raw.get("tasks")
        if isinstance(tasks, list) and loc[1] < len(tasks) and isinstance(tasks[loc[1]], dict):
            return f"task {tasks[loc[1]].get('id', loc[1])!r}: "
    return ""


def _oracle(entry: TaskEntry, where: str) -> list[str]:
    if entry.oracle is not None:
        return entry.oracle
    tests = sorted(p for p in entry.hidden if Path(p).name.startswith("test_") and p.endswith(".py"))
    if not tests:
        raise PackError(f"{where}: no hidden file is named test_*.py; name the tests so, or give `oracle`")
    return ["sealbench-pytest", "-q", *tests]


def draft_of(spec: TasksFile, source: Path) -> PackDraft:
    """The tasks file as an importer's draft (values only).

    Raises:
        PackError: a task without a test to run, or a record its format refuses.
    """
    provenance = Provenance(source=f"{spec.name} tasks file", license=spec.license, contamination=spec.contamination)

    def task(entry: TaskEntry) -> TaskDraft:
        where = f"{source}: task {entry.id!r}"
        record = make_record(where, task_id=entry.id, template_id=TEMPLATE_ID, oracle_cmd=_oracle(entry, where),
                             max_attempts=entry.max_attempts or spec.max_attempts,
                             wall_clock_s=entry.wall_clock_s or spec.wall_clock_s, provenance=provenance)
        return TaskDraft(record=record, prompt=entry.prompt.rstrip("\n") + "\n",
                         workspace={p: text_file(t) for p, t in entry.workspace.items()},
                         hidden={p: text_file(t) for p, t in entry.hidden.items()},
                         solution={p: text_file(t) for p, t in entry.solution.items()}, origin=where)

    return PackDraft(name=spec.name, description=spec.description, provenance=provenance,
                     templates={TEMPLATE_ID: spec.template}, tasks=[task(e) for e in spec.tasks])


def import_tasks_file(source: Path, options: ImportOptions) -> PackDraft:
    """The ``tasks`` importer: a ``tasks.toml`` or ``tasks.jsonl`` (or a folder holding one).

    Raises:
        PackError: no tasks file, or one that does not parse or check.
        UsageError: an option this importer cannot use.
    """
    from ..errors import UsageError

    path = find_tasks_file(source) if source.is_dir() else source
    if path is None:
        raise PackError(f"{source}: no {' or '.join(TASKS_FILES)} in this folder")
    unusable = options.repository_options() + (["--limit"] if options.limit is not None else [])
    if unusable:
        raise UsageError(f"the tasks importer does not take {', '.join(unusable)}")
    spec = read_tasks_file(path)
    if options.name is not None:
        spec = spec.model_copy(update={"name": options.name})
    return draft_of(spec, path)


def expand_in_place(folder: Path) -> Path | None:
    """Write the sealed layout of ``folder``'s tasks file beside it; None without one.

    The layout is derived from the file: task folders the file no longer names are removed,
    and every other part is written anew, except each task's recorded hidden-tests digest,
    which is kept so that the seal still refuses hidden tests changed since it (unless
    ``--update``). The manifest keeps its seal and validity for the seal to judge.

    Raises:
        PackError: the tasks file is wrong, or a path in it is unsafe.
    """
    from .writer import write_task_files

    path = find_tasks_file(folder)
    if path is None:
        return None
    draft = draft_of(read_tasks_file(path), path)
    manifest_path = folder / "pack.json"
    old = read_model(manifest_path, PackManifest, PackError) if manifest_path.is_file() else None
    manifest = PackManifest(name=draft.name, description=draft.description, provenance=draft.provenance,
                            seal=old.seal if old else None, validity=old.validity if old else None)
    (folder / "prompts").mkdir(exist_ok=True)
    for template_id, text in draft.templates.items():
        (folder / "prompts" / f"{template_id}.txt").write_text(text, encoding="utf-8")
    tasks_dir = folder / "tasks"
    tasks_dir.mkdir(exist_ok=True)
    named = {t.record.task_id: t for t in draft.tasks}
    for existing in tasks_dir.iterdir():
        if existing.name not in named:
            _remove(existing)
    for task_id, task in named.items():
        task_dir = tasks_dir / task_id
        recorded = PLACEHOLDER_DIGEST
        if (task_dir / "task.json").is_file():
            recorded = read_model(task_dir / "task.json", TaskRecord, PackError).hidden_tests_sha256
        _remove(task_dir)
        write_task_files(task_dir, task)
        record = task.record.model_copy(update={"hidden_tests_sha256": recorded})
        (task_dir / "task.json").write_text(model_json(record), encoding="utf-8")
    manifest_path.write_text(model_json(manifest), encoding="utf-8")
    return path


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
