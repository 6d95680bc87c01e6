"""What an importer returns: a pack described as values, before anything touches the disk.

An importer reads its source and returns a :class:`PackDraft`; :func:`sealbench.importers.
import_pack` writes the draft into a temporary sibling of the output, seals it and renames it
into place. Importers therefore never write pack files themselves and cannot leave half a
pack behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError

from ..errors import PackError, UsageError
from ..files import describe_validation_error
from ..formats import EnvironmentSpec, Provenance, TaskRecord

CONTAMINATION = "public set: contamination unknown"
PLACEHOLDER_DIGEST = "pending-local-hash"


FileKind = Literal["file", "exec", "symlink"]


@dataclass(frozen=True)
class FileEntry:
    """One file of a workspace, hidden-test or solution tree.

    ``kind`` "file" is a regular file, "exec" an executable one, "symlink" a symbolic link
    whose target is ``data`` (kept as a link, never followed).
    """

    data: bytes
    kind: FileKind = "file"


Files = Mapping[str, FileEntry]
"""Relative POSIX path -> file; directories are implied by the paths."""


def text_file(text: str) -> FileEntry:
    """A regular file holding ``text`` as UTF-8."""
    return FileEntry(text.encode("utf-8"))


@dataclass(frozen=True)
class TaskDraft:
    """One task of a draft pack.

    ``record.hidden_tests_sha256`` may be a placeholder: the writer records the digest of the
    hidden tree it wrote. ``origin`` names the source record (file and line or record id) so a
    failure while writing the task can say where it came from.
    """

    record: TaskRecord
    prompt: str
    workspace: Files
    hidden: Files
    solution: Files
    origin: str


@dataclass(frozen=True)
class PackDraft:
    """A whole pack as values: manifest fields, frozen templates and the tasks.

    ``tasks`` may be a generator (importers of large sources build one task at a time); it is
    consumed once, by the writer.
    """

    name: str
    description: str
    provenance: Provenance
    templates: Mapping[str, str]
    tasks: Iterable[TaskDraft]


@dataclass(frozen=True)
class ImportOptions:
    """Knobs of one import; every importer receives all of them and refuses what it cannot use.

    ``max_attempts`` and ``wall_clock_s`` become every task's pack ceilings (one value per pack,
    so ``contract new`` needs no override); ``wall_clock_s`` ``None`` takes the importer's
    default. ``limit`` keeps the first N records (all records are still checked). ``repo`` is
    the local clone a SWE-bench-style import reads, or a directory holding one clone per
    repository; ``repos`` names clones by repository ("owner/name" to a path). ``python`` is
    the Python version of the environments it writes (default: the one running sealbench), and
    ``env_spec`` a JSON file of environment overrides per repository and version (see
    :mod:`sealbench.importers.swebench`). ``name`` and ``license`` override the pack name and
    the recorded license.
    """

    max_attempts: int = 1
    wall_clock_s: float | None = None
    limit: int | None = None
    repo: Path | None = None
    repos: tuple[tuple[str, Path], ...] = ()
    python: str | None = None
    env_spec: Path | None = None
    name: str | None = None
    license: str | None = None

    def repository_options(self) -> list[str]:
        """The options only a repository import reads that were given (for other importers to refuse)."""
        given = [("--repo", self.repo is not None or bool(self.repos)), ("--python", self.python is not None),
                 ("--env-spec", self.env_spec is not None)]
        return [flag for flag, on in given if on]

    @classmethod
    def parse(cls, options: Mapping[str, object]) -> ImportOptions:
        """Options from keyword arguments, checked (``None`` means the default).

        Raises:
            UsageError: an unknown option or a value of the wrong type or range.
        """
        known = ("max_attempts", "wall_clock_s", "limit", "repo", "repos", "python", "env_spec", "name", "license")
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise UsageError(f"unknown import option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        given = {k: v for k, v in options.items() if v is not None}
        # checked in this order, so that the first of several wrong values is the one named
        for key, check in _OPTION_CHECKS.items():
            if key in given:
                given[key] = check(key, given[key])
        return cls(**given)  # type: ignore[arg-type]


def _count(key: str, value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{key} must be a whole number of at least 1, got {value!r}")
    return value


def _seconds(key: str, value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise UsageError(f"{key} must be a number of seconds above 0, got {value!r}")
    return float(value)


def _path(key: str, value: object) -> object:
    if not isinstance(value, str | Path):
        raise UsageError(f"{key} must be a path, got {value!r}")
    return Path(value)


def _repos(key: str, value: object) -> object:
    pairs = list(value.items()) if isinstance(value, Mapping) else value
    if not isinstance(pairs, list | tuple) or not all(
            isinstance(p, tuple | list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str | Path)
            for p in pairs):
        raise UsageError(f"{key} must map repository names to paths, got {value!r}")
    return tuple((str(n), Path(p)) for n, p in pairs)


def _text(key: str, value: object) -> object:
    if not isinstance(value, str):
        raise UsageError(f"{key} must be a string, got {value!r}")
    return value


_OPTION_CHECKS: Final[dict[str, Callable[[str, object], object]]] = {
    "max_attempts": _count, "limit": _count, "wall_clock_s": _seconds, "repo": _path, "env_spec": _path,
    "repos": _repos, "name": _text, "license": _text, "python": _text,
}
"""Each import option's check, which returns its value as ImportOptions holds it."""


def make_record(
    where: str,
    *,
    task_id: str,
    template_id: str,
    oracle_cmd: Sequence[str],
    max_attempts: int,
    wall_clock_s: float,
    provenance: Provenance,
    junit_xml: str | None = None,
    required_tests: Sequence[str] = (),
    language: str = "python",
    decided_by: Literal["all", "required"] = "all",
    environment: EnvironmentSpec | None = None,
    test_files: Literal["forbidden", "reset"] = "forbidden",
    deleted_test_files: Sequence[str] = (),
) -> TaskRecord:
    """A task record with a placeholder hidden-tests digest (the writer fills it).

    Raises:
        PackError: a field the record refuses, named with the source record's location.
    """
    try:
        return TaskRecord(
            task_id=task_id,
            prompt_template_id=template_id,
            oracle_cmd=list(oracle_cmd),
            hidden_tests_sha256=PLACEHOLDER_DIGEST,
            max_attempts=max_attempts,
            wall_clock_s=wall_clock_s,
            language=language,
            junit_xml=junit_xml,
            required_tests=list(required_tests),
            decided_by=decided_by,
            provenance=provenance,
            environment=environment,
            test_files=test_files,
            deleted_test_files=list(deleted_test_files),
        )
    except ValidationError as e:
        raise PackError(f"{where}: {describe_validation_error(e)}") from None
