"""Exercism-style tracks (Python): ``exercises/practice/<slug>/`` becomes one task per exercise.

Each exercise directory holds ``.docs/instructions.md`` (optionally ``introduction.md`` before
it and ``instructions.append.md`` after it), ``.meta/config.json`` whose ``files`` lists the
``solution`` stub(s), the ``test`` file(s) and the ``example`` solution(s), and those files.

* workspace: the exercise directory without ``.docs/``, ``.meta/``, dot-entries, caches and
  the test files: the stub and any helper file the student gets;
* hidden: the test files, at their paths; the oracle runs the harness's pytest on them
  (``sealbench-pytest``, with ``-o pythonpath=`` naming the solution's folder when a test is
  in another, such as ``tests/``), and every test method found in them is a required test;
* solution: the example file(s), under the solution file names;
* prompt.md: the exercise's documents, in the order Exercism shows them.
"""

from __future__ import annotations

import ast
import json
import os
import posixpath
import stat
from pathlib import Path
from typing import Any

from ..errors import PackError, UsageError
from ..files import read_text
from ..formats import check_id
from .draft import FileEntry, Files, ImportOptions, PackDraft, TaskDraft, make_record
from .oracle import junit_test_name, pytest_oracle_cmd
from .provenance import describe, load_template, provenance
from .sources import check_unique, directory_digest, first_records, parse_python, task_id_for

TEMPLATE_ID = "exercise-v1"
WALL_CLOCK_S = 60.0
_DOCS = ("introduction.md", "instructions.md", "instructions.append.md")
_SKIP_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def _config(exercise: Path) -> dict[str, list[str]]:
    path = exercise / ".meta" / "config.json"
    text = read_text(path, PackError)
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise PackError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise PackError(f"{path}: missing field 'files'")
    out: dict[str, list[str]] = {}
    for key in ("solution", "test", "example", "editor"):
        value = files.get(key, [] if key == "editor" else None)
        if value is None:
            raise PackError(f"{path}: missing field 'files.{key}'")
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise PackError(f"{path}: field 'files.{key}' should be a list of paths")
        for rel in value:
            parts = Path(rel).parts
            if Path(rel).is_absolute() or ".." in parts:
                raise PackError(f"{path}: files.{key}: {rel!r} leaves the exercise directory")
        out[key] = [Path(v).as_posix() for v in value]
    for key in ("solution", "test"):
        if not out[key]:
            raise PackError(f"{path}: field 'files.{key}' is empty")
    for rel in out["test"]:
        if not rel.endswith(".py"):
            raise PackError(f"{path}: test file {rel!r} is not Python; only Python tracks are supported")
    return out


def _entry(path: Path) -> FileEntry:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return FileEntry(os.readlink(path).encode("utf-8", "surrogateescape"), "symlink")
    if not stat.S_ISREG(st.st_mode):
        raise PackError(f"{path}: not a regular file or symlink")
    return FileEntry(path.read_bytes(), "exec" if st.st_mode & 0o111 else "file")


def _file(exercise: Path, rel: str, what: str) -> FileEntry:
    path = exercise / rel
    if not path.is_file() and not path.is_symlink():
        raise PackError(f"{exercise / '.meta' / 'config.json'}: {what} {rel!r} does not exist")
    try:
        return _entry(path)
    except OSError as e:
        raise PackError(f"{path}: cannot read ({e.strerror})") from None


def _workspace(exercise: Path, tests: set[str]) -> Files:
    files: dict[str, FileEntry] = {}
    for dirpath, dirnames, filenames in os.walk(exercise):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in sorted(filenames):
            rel = (here / name).relative_to(exercise).as_posix()
            if name.startswith(".") or rel in tests or name.endswith((".pyc", ".pyo")):
                continue
            try:
                files[rel] = _entry(here / name)
            except OSError as e:
                raise PackError(f"{here / name}: cannot read ({e.strerror})") from None
    return files


def _import_dirs(solution: list[str], tests: list[str]) -> list[str]:
    """The solution's folders when a test is elsewhere (``tests/x_test.py``): pytest puts only a
    test's own folder on ``sys.path`` (the harness's runs with ``-P``, not the working directory
    first as ``python -m pytest`` did), so the stub would not import."""
    folders = sorted({posixpath.dirname(rel) or "." for rel in solution})
    beside = {posixpath.dirname(rel) or "." for rel in tests} <= set(folders)
    return [] if beside else folders


def _solution(exercise: Path, config: dict[str, list[str]]) -> Files:
    solution, example = config["solution"], config["example"]
    if len(solution) == 1 and len(example) == 1:
        return {solution[0]: _file(exercise, example[0], "example")}
    by_name = {Path(s).name: s for s in solution}
    out: dict[str, FileEntry] = {}
    for rel in example:
        target = by_name.get(Path(rel).name)
        if target is None:
            raise PackError(f"{exercise / '.meta' / 'config.json'}: example {rel!r} matches no solution file "
                            f"by name ({', '.join(solution)})")
        out[target] = _file(exercise, rel, "example")
    return out


def required_tests(rel: str, source: bytes, where: str) -> list[str]:
    """JUnit names of the test methods and functions a pytest run of ``rel`` must pass.

    Parametrised and skip-decorated tests are left out: their report names cannot be told
    in advance, or they never pass.

    Raises:
        PackError: the test file does not parse.
    """
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PackError(f"{where}: {rel}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    tree = parse_python(text, where, rel)

    def plain(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        marks = " ".join(ast.unparse(d) for d in fn.decorator_list)
        return fn.name.startswith("test") and "parametrize" not in marks and "skip" not in marks

    def test_class(cls: ast.ClassDef) -> bool:
        # pytest collects Test* classes and every unittest.TestCase subclass (Exercism's style).
        return cls.name.startswith("Test") or any("TestCase" in ast.unparse(b) for b in cls.bases)

    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and plain(node):
            names.append(junit_test_name(f"{rel}::{node.name}"))
        elif isinstance(node, ast.ClassDef) and test_class(node):
            names.extend(junit_test_name(f"{rel}::{node.name}::{fn.name}") for fn in node.body
                         if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and plain(fn))
    return names


def task_prompt(exercise: Path, solution_files: list[str]) -> str:
    """prompt.md: the exercise's documents and where the solution goes (never the tests).

    Raises:
        PackError: ``instructions.md`` is missing, or a document cannot be read as UTF-8.
    """
    docs = [read_text(exercise / ".docs" / name, PackError).strip()
            for name in _DOCS if (exercise / ".docs" / name).is_file() or name == "instructions.md"]
    where = ", ".join(f"`{f}`" for f in solution_files)
    return "\n\n".join(docs) + f"\n\nWrite your solution in {where}.\n"


def _license(track: Path) -> str | None:
    for name in ("LICENSE", "LICENSE.md", "LICENSE.txt"):
        path = track / name
        if path.is_file():
            first = next((line.strip() for line in read_text(path, PackError).splitlines() if line.strip()), "")
            return f"{first} (see {name} of the track)" if first else f"see {name} of the track"
    return None


def _task(track: Path, exercise: Path, options: ImportOptions, title: str, license: str | None,
          wall_clock_s: float) -> TaskDraft:
    where = str(exercise)
    config = _config(exercise)
    tests = config["test"]
    hidden = {rel: _file(exercise, rel, "test file") for rel in tests}
    required = [name for rel in tests for name in required_tests(rel, hidden[rel].data, where)]
    for rel in config["solution"]:
        _file(exercise, rel, "solution stub")
    record_id = exercise.relative_to(track).as_posix()
    record = make_record(
        where, task_id=exercise.name, template_id=TEMPLATE_ID,
        oracle_cmd=pytest_oracle_cmd(tests, pythonpath=_import_dirs(config["solution"], tests)),
        max_attempts=options.max_attempts, wall_clock_s=wall_clock_s,
        provenance=provenance(title, directory_digest(exercise), license, record_id),
        required_tests=required,
    )
    return TaskDraft(
        record=record,
        prompt=task_prompt(exercise, config["solution"]),
        workspace=_workspace(exercise, set(tests)),
        hidden=hidden,
        solution=_solution(exercise, config) if config["example"] else {},
        origin=where,
    )


def import_exercism(source: Path, options: ImportOptions) -> PackDraft:
    """Import the practice exercises of an Exercism-style Python track directory.

    Raises:
        PackError: no ``exercises/practice/``, an exercise without its config, documents, stub,
            tests or example, a file that cannot be read, a non-Python track, a bad slug.
        UsageError: an option this importer does not take.
    """
    if options.repository_options():
        raise UsageError(f"{', '.join(options.repository_options())} is for swebench imports, not exercism")
    practice = source / "exercises" / "practice"
    if not practice.is_dir():
        raise PackError(f"{source}: no exercises/practice/ directory; is it an Exercism track?")
    exercises = sorted(p for p in practice.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not exercises:
        raise PackError(f"{practice}: no exercises")
    for exercise in exercises:
        try:
            check_id(exercise.name)
        except ValueError as e:
            raise PackError(f"{exercise}: slug: {e}") from None
    check_unique((e.name, str(e)) for e in exercises)
    track = source.resolve().name
    title = f"Exercism-style track {track}"
    name = options.name or task_id_for(f"exercism-{track}"[:128], str(source))
    license = options.license or _license(source)
    wall = options.wall_clock_s or WALL_CLOCK_S
    chosen = first_records(exercises, options.limit)
    # Tasks of skipped exercises are still built: a broken exercise refuses the import.
    tasks = [_task(source, e, options, title, license, wall) for e in exercises]
    digest = directory_digest(practice)
    return PackDraft(
        name=name,
        description=describe(title=title, kind="exercism", source=source, digest=digest, known_digest=None,
                             imported=len(chosen), total=len(exercises), options=options, wall_clock_s=wall,
                             note="The digest is over exercises/practice/; each task's over its exercise."),
        provenance=provenance(title, digest, license),
        templates={TEMPLATE_ID: load_template(TEMPLATE_ID)},
        tasks=tasks[: len(chosen)],
    )
