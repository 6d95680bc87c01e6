"""SWE-bench-style instances against a local clone: one repository-level task per instance.

An instance (JSON list or JSON Lines) has instance_id, base_commit, patch (the gold fix),
test_patch, FAIL_TO_PASS and PASS_TO_PASS (lists, or JSON-encoded lists as in the published
dataset) and problem_statement. Each task becomes:

* workspace: the base commit's tree as plain files (no history), test files included: the
  agent sees the repository's tests as they were before the fix (``test_files: "reset"``);
* hidden: the files the test_patch adds or modifies, in their post-patch state. Grading puts
  them in place of whatever the attempt left there, as SWE-bench resets the test patch's
  files before applying it: an attempt may edit the test files (add a regression test, say),
  and only the test patch's version counts;
* solution: the files the gold patch adds or modifies, in their post-patch state (a file the
  gold patch deletes cannot be expressed as a solution file and stays);
* oracle: the harness's pytest (``sealbench-pytest``) on the Python files the test_patch
  touches, as SWE-bench's test command runs them, and on the file of any FAIL_TO_PASS or
  PASS_TO_PASS node id outside them; required_tests = FAIL_TO_PASS +
  PASS_TO_PASS, named as pytest's report names them, and decided_by = "required": only those
  tests decide, and other tests of the files may fail;
* environment: the Python environment the tests run in (:mod:`sealbench.environments`): the
  requirements of the repository's ``uv.lock`` at the instance's ``environment_setup_commit``
  (else its base commit), exported with their hashes, with the first dependency group named
  tests, test or testing; else a requirements file of the tests (``requirements/tests.txt``
  and the like) plus pytest; else pytest alone, said in the spec's ``source``. Every line
  ends pinned (``name==version``, with hashes) as ``env build`` demands: a lock that names a
  path, URL or editable project is refused; a requirements file's lines that are not plain
  requirements of the index (``-e``, ``-r``, URLs, paths) are left out and named in the
  source, and the rest resolved by ``uv pip compile`` to wheels (never building one). The repository
  is imported from the workspace or grading copy (its ``src/`` for a src/ layout; the oracle's
  ``-o pythonpath=src``, the agent's ``PYTHONPATH``). An
  ``--env-spec`` file overrides any of it per repository (``"owner/name"``) or repository and
  version (``"owner/name@version"``): a JSON object whose values hold any of ``name``,
  ``python``, ``requirements`` (replacing the derived ones), ``pins`` (lines added to them,
  replacing a derived line of the same package), ``source``, ``import_roots`` and ``install``
  (``"none"`` keeps the repository off the environment); its requirement lines must be
  pinned too. When the repository declares how it is installed (``[build-system]`` in its
  pyproject.toml, or a setup.py), the spec's ``install`` is ``"editable"`` and the backend's
  requirements are resolved at import (within the other pins) and added: each grading copy
  is then installed by that backend, in the sandbox (:mod:`sealbench.repo_install`);
* prompt.md: the problem statement.

The clone of an instance's repository (its ``repo`` field, "owner/name") is ``--repo
owner/name=PATH`` when given, else ``--repo PATH``: that clone for every instance, or, when
PATH is not itself a clone, the one found under it as ``owner__name``, ``name`` or
``owner/name``.

The clone is only read, never written: trees are read through a private scratch repository
that borrows the clone's objects (git "alternates"), and patches are applied to plain copies
of the touched files in a scratch directory, with system and global git configuration
disabled and no hooks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from ..digest import sha256_bytes
from ..errors import PackError, UsageError
from ..files import describe_validation_error
from ..formats import EnvironmentSpec
from .draft import FileEntry, FileKind, ImportOptions, PackDraft, TaskDraft, make_record
from .oracle import import_roots, junit_test_name, pytest_oracle_cmd
from .provenance import describe, load_template, provenance
from .sources import (
    SourceRecord,
    check_unique,
    file_digest,
    first_records,
    get_str,
    get_str_list,
    named,
    read_records,
    require_fields,
    task_id_for,
)

TEMPLATE_ID = "issue-v1"
WALL_CLOCK_S = 300.0
FIELDS = ("instance_id", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "problem_statement")
_COMMIT_RE = re.compile(r"^[0-9a-f]{7,64}$")
_MODES: dict[bytes, FileKind] = {b"100644": "file", b"100755": "exec", b"120000": "symlink"}


class _Scratch:
    """A private bare repository reading the clone's objects; every git call goes through it."""

    def __init__(self, clone: Path, root: Path) -> None:
        """Borrow ``clone``'s objects in a new bare repository under ``root``.

        Raises:
            PackError: ``clone`` is not a git repository, or git cannot be run.
        """
        self.root = root
        self.git_dir = root / "scratch.git"
        proc = self._run(["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=clone, git_dir=None)
        if proc.returncode != 0:
            raise PackError(f"{clone}: not a git repository ({_last_line(proc.stderr)})")
        objects = Path(proc.stdout.decode("utf-8", "surrogateescape").strip()) / "objects"
        proc = self._run(["init", "-q", "--bare", str(self.git_dir)], git_dir=None)
        if proc.returncode != 0:
            raise PackError(f"cannot create a scratch repository in {root}: {_last_line(proc.stderr)}")
        (self.git_dir / "objects" / "info" / "alternates").write_text(f"{objects}\n", encoding="utf-8")

    def _run(self, args: Sequence[str], *, cwd: Path | None = None, git_dir: Path | None,
             stdin: bytes | None = None, ceiling: Path | None = None) -> subprocess.CompletedProcess[bytes]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.root),
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
        }
        if git_dir is not None:
            env["GIT_DIR"] = str(git_dir)
        if ceiling is not None:
            env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
        cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "--literal-pathspecs", *args]
        try:
            return subprocess.run(cmd, cwd=cwd or self.root, env=env, input=stdin, capture_output=True, check=False)
        except OSError as e:
            raise PackError(f"cannot run git ({e.strerror}); swebench imports need git") from None

    def git(self, args: Sequence[str], *, stdin: bytes | None = None, failure: str = "") -> bytes:
        """Run git on the scratch repository.

        Raises:
            PackError: git fails (``failure`` says what failed) or cannot be run.
        """
        proc = self._run(args, git_dir=self.git_dir, stdin=stdin)
        if proc.returncode != 0:
            raise PackError(f"{failure or 'git ' + args[0] + ' failed'}: {_last_line(proc.stderr)}")
        return proc.stdout

    def blobs(self, shas: Sequence[str], where: str) -> list[bytes]:
        """The contents of ``shas``, in one ``cat-file --batch`` call.

        Raises:
            PackError: an object is missing from the clone (a shallow or partial clone).
        """
        if not shas:
            return []
        out = self.git(["cat-file", "--batch"], stdin="".join(f"{s}\n" for s in shas).encode(),
                       failure=f"{where}: cannot read objects")
        found: list[bytes] = []
        pos = 0
        for sha in shas:
            end = out.index(b"\n", pos)
            header = out[pos:end].split()
            if len(header) != 3:
                raise PackError(f"{where}: object {sha} is missing from the clone")
            size = int(header[2])
            found.append(out[end + 1:end + 1 + size])
            pos = end + 1 + size + 1
        return found

    def tree(self, commit: str, where: str) -> dict[str, FileEntry]:
        """Every file of ``commit``'s tree, raw (no attributes, filters or line-end conversion).

        Submodules (gitlinks) are not files and are left out.

        Raises:
            PackError: the commit cannot be listed or one of its blobs is missing.
        """
        listing = self.git(["ls-tree", "-r", "-z", "--full-tree", commit],
                           failure=f"{where}: cannot list base_commit {commit}")
        modes: list[FileKind] = []
        paths: list[str] = []
        shas: list[str] = []
        for item in listing.split(b"\0"):
            if not item:
                continue
            meta, _, raw_path = item.partition(b"\t")
            mode, kind, sha = meta.split()
            if kind != b"blob":
                continue
            modes.append(_MODES.get(mode, "file"))
            paths.append(raw_path.decode("utf-8", "surrogateescape"))
            shas.append(sha.decode())
        return {p: FileEntry(data, m) for p, m, data in zip(paths, modes, self.blobs(shas, where), strict=True)}

    def patched(self, base: Mapping[str, FileEntry], patch: str, where: str,
                what: str) -> tuple[dict[str, FileEntry], list[str]]:
        """Apply ``patch`` to the touched files of ``base``: (added or changed files, deleted paths).

        The patch is applied to plain files in a scratch directory, never through an index:
        writing an object the clone already holds makes git refresh that object's mtime in
        the clone.

        Raises:
            PackError: the patch touches an unsafe path or does not apply cleanly, naming the
                record and the patch field.
        """
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:
            patch_file = Path(tmp) / "change.patch"
            patch_file.write_bytes(patch.encode("utf-8", "surrogateescape"))
            worktree = Path(tmp) / "wt"
            worktree.mkdir()
            # The reversed patch's paths are the pre-images: the old names of renames.
            paths = sorted(set(self._touched(patch_file, worktree, where, what, reverse=False))
                           | set(self._touched(patch_file, worktree, where, what, reverse=True)))
            for rel in paths:
                if rel in base:
                    _materialise(worktree / rel, base[rel])
            proc = self._run(["apply", "--whitespace=nowarn", str(patch_file)], cwd=worktree, git_dir=None,
                             ceiling=Path(tmp))
            if proc.returncode != 0:
                raise PackError(f"{where}: {what} does not apply to base_commit: {_last_line(proc.stderr)}")
            changed: dict[str, FileEntry] = {}
            deleted: list[str] = []
            for rel in paths:
                path = worktree / rel
                if path.is_symlink() or path.exists():
                    entry = _read_entry(path)
                    if base.get(rel) != entry:
                        changed[rel] = entry
                elif rel in base:
                    deleted.append(rel)
        return changed, deleted

    def _touched(self, patch_file: Path, worktree: Path, where: str, what: str, *, reverse: bool) -> list[str]:
        proc = self._run(["apply", "--numstat", "-z", *(["-R"] if reverse else []), str(patch_file)],
                         cwd=worktree, git_dir=None, ceiling=worktree.parent)
        if proc.returncode != 0:
            raise PackError(f"{where}: {what} is not a patch git can read: {_last_line(proc.stderr)}")
        paths = [item.split(b"\t", 2)[2].decode("utf-8", "surrogateescape")
                 for item in proc.stdout.split(b"\0") if item.count(b"\t") >= 2]
        for rel in paths:
            parts = PurePosixPath(rel).parts
            if not rel or rel.startswith("/") or ".." in parts or ".git" in parts:
                raise PackError(f"{where}: {what} touches an unsafe path {rel!r}")
        return paths


def _materialise(path: Path, entry: FileEntry) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if entry.kind == "symlink":
        os.symlink(entry.data.decode("utf-8", "surrogateescape"), path)
    else:
        path.write_bytes(entry.data)
        if entry.kind == "exec":
            path.chmod(0o755)


def _read_entry(path: Path) -> FileEntry:
    if path.is_symlink():
        return FileEntry(os.readlink(path).encode("utf-8", "surrogateescape"), "symlink")
    return FileEntry(path.read_bytes(), "exec" if path.stat().st_mode & 0o100 else "file")


def _last_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "no message"


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


_TEST_GROUPS = ("tests", "test", "testing")
_REQUIREMENT_FILES = ("requirements/tests.txt", "requirements/test.txt", "requirements/testing.txt",
                      "requirements-tests.txt", "requirements-test.txt", "test-requirements.txt",
                      "tests/requirements.txt")
_OVERRIDE_KEYS = frozenset({"name", "python", "requirements", "pins", "source", "import_roots", "install"})


def _requirement_lines(text: str) -> list[str]:
    """Requirement lines with continuations joined and comments dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line = (pending + line.strip()).strip()
        pending = ""
        if line:
            out.append(" ".join(line.split()))
    if pending.strip():
        out.append(" ".join(pending.split()))
    return out


def _pinned(lines: Sequence[str], where: str, what: str) -> list[str]:
    """``lines`` as ``env build`` installs them, each a pinned package of the index.

    Raises:
        PackError: a line is not (a URL, a path, ``-e``, an option, no exact version), naming it.
    """
    from ..environments import pinned_requirement

    out: list[str] = []
    for line in lines:
        try:
            out.append(pinned_requirement(line))
        except ValueError as e:
            raise PackError(f"{where}: {what} names {line[:200]!r}, which env build would refuse: {e}") from None
    return out


def _plain_requirement(line: str) -> str | None:
    """A repository's requirement line rebuilt from its parse when it names a package of the index
    by name, versions and markers only; None for anything else (``-e``, ``-r``, a URL or path)."""
    from packaging.requirements import InvalidRequirement, Requirement

    if line.startswith("-") or any(ord(c) < 0x20 for c in line):
        return None
    try:
        req = Requirement(line)
    except InvalidRequirement:
        return None
    return None if req.url is not None else str(req)


def _uv_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH")}


def resolve_requirements(requirements: Sequence[str], python: str, where: str, what: str,
             constraints: Sequence[str] = ()) -> list[str]:
    """``requirements`` resolved against the package index: each package pinned, with its hashes.

    Wheels only (``--no-build``): resolving never builds, so no code of a package runs here.

    Raises:
        PackError: uv cannot resolve them (a package with no wheel, a conflict, no index).
    """
    from ..environments import uv_binary

    argv = [uv_binary(), "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--generate-hashes",
            "--no-build", "--python-version", python, "-"]
    with tempfile.TemporaryDirectory(prefix="sealbench-resolve-") as tmp:
        if constraints:
            (Path(tmp) / "constraints.txt").write_text("".join(f"{c}\n" for c in constraints), encoding="utf-8")
            argv[-1:] = ["-c", "constraints.txt", "-"]
        proc = subprocess.run(argv, cwd=tmp, input="".join(f"{r}\n" for r in requirements), capture_output=True,
                              text=True, env=_uv_env(), check=False)
    if proc.returncode != 0:
        said = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        raise PackError(f"{where}: uv cannot resolve {what} to pinned wheels of the package index: "
                        f"{' '.join(said[-3:]) or 'no message'}")
    return _pinned(_requirement_lines(proc.stdout), where, f"the resolution of {what}")


def _from_lock(files: Mapping[str, FileEntry], where: str, commit: str) -> tuple[list[str], str] | None:
    """The requirements ``uv export`` reads from the repository's uv.lock, or None without one.

    Raises:
        PackError: the lock cannot be exported, or names something other than pinned packages
            of the index (a path, a URL, an editable project).
    """
    if "uv.lock" not in files or "pyproject.toml" not in files:
        return None
    from ..environments import uv_binary

    try:
        project = tomllib.loads(files["pyproject.toml"].data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise PackError(f"{where}: pyproject.toml at {commit[:12]} cannot be read: {e}") from None
    groups = project.get("dependency-groups") or {}
    group = next((g for g in _TEST_GROUPS if g in groups), None)
    with tempfile.TemporaryDirectory(prefix="sealbench-uvexport-") as tmp:
        for name in ("pyproject.toml", "uv.lock"):
            (Path(tmp) / name).write_bytes(files[name].data)
        argv = [uv_binary(), "export", "--frozen", "--no-emit-project", "--no-default-groups",
                *(["--group", group] if group else []), "--format", "requirements-txt", "--no-header",
                "--no-annotate", "--quiet"]
        proc = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, env=_uv_env(), check=False)
    if proc.returncode != 0:
        raise PackError(f"{where}: uv cannot export the requirements of uv.lock at {commit[:12]}: "
                        f"{_last_line(proc.stderr.encode())}")
    digest = sha256_bytes(files["uv.lock"].data).removeprefix("sha256:")[:12]
    source = f"uv.lock (sha256 {digest}...)" + (f", dependency group {group!r}" if group else ", no test group")
    return _pinned(_requirement_lines(proc.stdout), where, f"uv.lock at {commit[:12]}"), source


def _from_requirements(files: Mapping[str, FileEntry], python: str, where: str) -> tuple[list[str], str] | None:
    """A tests requirements file of the repository, plus pytest, resolved to pinned wheels.

    Only lines naming packages of the index by name and versions are read; the rest (``-e``,
    ``-r``, URLs, paths) are left out and named in the source.
    """
    for rel in _REQUIREMENT_FILES:
        if rel in files:
            lines: list[str] = []
            left_out: list[str] = []
            for line in _requirement_lines(files[rel].data.decode("utf-8", "replace")):
                plain = _plain_requirement(line)
                (lines if plain is not None else left_out).append(plain if plain is not None else line)
            if not any(re.match(r"pytest\b", line, re.IGNORECASE) for line in lines):
                lines.append("pytest")
            skipped = f"; left out: {', '.join(repr(x[:80]) for x in left_out[:5])}" if left_out else ""
            return (resolve_requirements(lines, python, where, rel),
                    f"{rel}, plus pytest when it does not name it, resolved with hashes at import{skipped}")
    return None


def _build_requirements(files: Mapping[str, FileEntry]) -> tuple[list[str], list[str]] | None:
    """What the repository's build backend needs (``[build-system] requires``, or setuptools for
    a bare setup.py, as pip reads them), split into plain requirements and lines left out; None
    when nothing declares how the repository is installed."""
    system: Any = None
    if "pyproject.toml" in files:
        try:
            system = tomllib.loads(files["pyproject.toml"].data.decode("utf-8")).get("build-system")
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            system = None
    if not isinstance(system, dict):
        return (["setuptools>=40.8.0"], []) if "setup.py" in files else None
    requires: list[Any] = system["requires"] if isinstance(system.get("requires"), list) else []
    plain = [_plain_requirement(str(r)) for r in requires]
    return [r for r in plain if r is not None], [str(r) for r, q in zip(requires, plain, strict=True) if q is None]


def load_overrides(path: Path | None) -> dict[str, dict[str, Any]]:
    """The ``--env-spec`` file: overrides by "owner/name" or "owner/name@version".

    Raises:
        PackError: the file cannot be read, is not a JSON object of objects, or uses a key
            an environment spec does not have.
    """
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PackError(f"{path}: cannot read the environment overrides: {e}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise PackError(f"{path}: must be a JSON object mapping \"owner/name\" or \"owner/name@version\" to objects")
    for key, value in data.items():
        unknown = sorted(set(value) - _OVERRIDE_KEYS)
        if unknown:
            raise PackError(f"{path}: {key}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_OVERRIDE_KEYS))}")
    return data


def _environment(scratch: _Scratch, rec: SourceRecord, base: Mapping[str, FileEntry], base_commit: str,
                 options: ImportOptions, overrides: Mapping[str, Mapping[str, Any]]) -> EnvironmentSpec:
    """The environment spec of one instance (module docstring)."""
    repo = _repo_name(rec)
    version = rec.data.get("version") if isinstance(rec.data.get("version"), str) else ""
    commit = _setup_commit(rec.data.get("environment_setup_commit"), base_commit)
    files = base if commit == base_commit else scratch.tree(commit, rec.where)
    override = {**overrides.get(repo or "", {}), **(overrides.get(f"{repo}@{version}", {}) if version else {})}
    python = str(override.get("python", options.python or f"{sys.version_info.major}.{sys.version_info.minor}"))
    requirements, source = _requirements(files, override, python, rec.where, commit)
    install = str(override.get("install", "editable"))
    build = _build_requirements(files) if install == "editable" else None
    if build is None or build[1]:
        install = "none"  # nothing declares the build, or its requirements are not all of the index
    else:
        requirements, source = _with_build(requirements, source, build[0], python, rec.where)
    requirements, source = _hashes_all_or_none(requirements, source)
    if "requirements" in override or "pins" in override:
        source = str(override.get("source", f"{source}, overridden by --env-spec"))
    label = f"{repo or 'repository'}{'@' + version if version else ''} tests, Python {python}"
    try:
        return EnvironmentSpec.model_validate({
            "name": override.get("name", label), "python": python,
            "requirements": requirements, "source": override.get("source", source),
            "import_roots": override.get("import_roots", import_roots(base)), "install": install})
    except ValidationError as e:
        raise PackError(f"{rec.where}: its environment: {describe_validation_error(e)}") from None


def _setup_commit(setup: Any, base_commit: str) -> str:
    """The commit whose files declare the environment: the record's environment_setup_commit
    when it is a commit id, else the base commit."""
    return setup.strip() if isinstance(setup, str) and _COMMIT_RE.match(setup.strip()) else base_commit


def _with_build(requirements: list[str], source: str, build: list[str], python: str,
                where: str) -> tuple[list[str], str]:
    """The requirements with what the repository's build backend needs, resolved under them."""
    named = {_name(r) for r in requirements}
    constraints = [r.split(" --hash=", 1)[0] for r in requirements]
    requirements = requirements + [r for r in resolve_requirements(build, python, where, "the build requirements",
                                                                   constraints)
                                   if _name(r) not in named]
    return requirements, source + "; the repository installed by its build backend, whose requirements were " \
                                  "resolved at import"


def _hashes_all_or_none(requirements: list[str], source: str) -> tuple[list[str], str]:
    """Hashes on every line or on none, as env build takes them: where some lines carry none,
    the others' are dropped (and the source says so)."""
    if 0 < sum("--hash=" in r for r in requirements) < len(requirements):
        return [r.split(" --hash=", 1)[0] for r in requirements], source + ", hashes dropped (some lines carry none)"
    return requirements, source


def _requirements(files: Mapping[str, FileEntry], override: Mapping[str, Any], python: str, where: str,
                  commit: str) -> tuple[list[str], str]:
    """The environment's requirements before the build's, and where they came from: the
    --env-spec's, else the repository's lock or test requirements, else pytest alone; then the
    --env-spec's pins over them."""
    if "requirements" in override:
        # Pinned as given, and with everything they need: env build installs exactly these lines.
        given = _pinned(list(override["requirements"]), where, "--env-spec's requirements")
        requirements = resolve_requirements([r.split(" --hash=", 1)[0] for r in given], python, where,
                                            "--env-spec's requirements")
        source = "--env-spec, with what its requirements need resolved at import"
    else:
        found = _from_lock(files, where, commit) or _from_requirements(files, python, where)
        requirements, source = found if found is not None else (
            resolve_requirements(["pytest"], python, where, "pytest"),
            "no uv.lock or test requirements file: pytest only, resolved with hashes at import")
    if "pins" in override:
        pins = _pinned(list(override["pins"]), where, "--env-spec's pins")
        named = {_name(p) for p in pins}
        requirements = [r for r in requirements if _name(r) not in named] + pins
    return requirements, source


def _name(line: str) -> str:
    from packaging.utils import canonicalize_name

    return canonicalize_name(re.split(r"[=;\s\[]", line, maxsplit=1)[0])


def _repo_name(rec: SourceRecord) -> str | None:
    repo = rec.data.get("repo")
    return repo.strip() if isinstance(repo, str) and repo.strip() else None


def _task(scratch: _Scratch, rec: SourceRecord, options: ImportOptions, title: str, digest: str,
          wall_clock_s: float, overrides: Mapping[str, Mapping[str, Any]]) -> TaskDraft:
    instance = get_str(rec, "instance_id")
    task_id = task_id_for(instance, rec.where)
    commit = get_str(rec, "base_commit").strip()
    fail_to_pass = get_str_list(rec, "FAIL_TO_PASS", json_encoded=True)
    pass_to_pass = get_str_list(rec, "PASS_TO_PASS", json_encoded=True)
    scratch.git(["cat-file", "-e", f"{commit}^{{commit}}"],
                failure=f"{rec.where}: base_commit {commit} is not a commit of the clone")
    base = scratch.tree(commit, rec.where)
    tests, deleted = scratch.patched(base, get_str(rec, "test_patch"), rec.where, "test_patch")
    fix, fix_deleted = scratch.patched(base, get_str(rec, "patch"), rec.where, "patch")
    if not tests:
        raise PackError(f"{rec.where}: test_patch adds or changes no file")
    both = sorted((set(tests) | set(deleted)) & (set(fix) | set(fix_deleted)))
    if both:
        # The hidden overlay would replace the agent's own change to these files.
        raise PackError(f"{rec.where}: patch and test_patch both change {', '.join(both)}")
    ids = _unique([*fail_to_pass, *pass_to_pass])
    # SWE-bench's test command runs the test patch's files; a decisive test in another file
    # (FAIL_TO_PASS and PASS_TO_PASS found by running more) has its file run too, or it could
    # never pass.
    named = {t.split("::", 1)[0] for t in ids if "::" in t and t.split("::", 1)[0].endswith(".py")}
    targets = sorted({p for p in tests if p.endswith(".py")}
                     | {p for p in named if (p in base or p in tests) and p not in deleted})
    if not targets:
        raise PackError(f"{rec.where}: test_patch touches no Python file for pytest to run")
    environment = _environment(scratch, rec, base, commit, options, overrides)
    record = make_record(
        rec.where, task_id=task_id, template_id=TEMPLATE_ID,
        # The repository goes on sys.path through pytest, once the guard watches: never at the
        # interpreter's start, where code under test would run unwatched.
        oracle_cmd=pytest_oracle_cmd(targets, pythonpath=environment.import_roots),
        max_attempts=options.max_attempts, wall_clock_s=wall_clock_s,
        provenance=provenance(title, digest, options.license, instance),
        required_tests=_unique([junit_test_name(t) for t in ids]),
        # SWE-bench's rule: FAIL_TO_PASS and PASS_TO_PASS decide; other tests of the files may fail.
        decided_by="required",
        environment=environment,
        test_files="reset",
        deleted_test_files=sorted(deleted),
    )
    return TaskDraft(record=record, prompt=get_str(rec, "problem_statement").rstrip() + "\n",
                     workspace=dict(base), hidden=tests, solution=fix, origin=rec.where)


def _is_clone(path: Path) -> bool:
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


def _clone_for(rec: SourceRecord, options: ImportOptions) -> Path:
    """The local clone of ``rec``'s repository (module docstring).

    Raises:
        UsageError: no clone is given for it.
        PackError: the clone named does not exist.
    """
    repo = _repo_name(rec)
    named = dict(options.repos)
    if repo is not None and repo in named:
        path = named[repo]
    elif options.repo is not None and _is_clone(options.repo):
        path = options.repo
    elif options.repo is not None and options.repo.is_dir() and repo is not None:
        owner, _, name = repo.partition("/")
        candidates = [options.repo / f"{owner}__{name}", options.repo / name, options.repo / owner / name]
        found = next((c for c in candidates if _is_clone(c)), None)
        if found is None:
            raise PackError(f"{rec.where}: no clone of {repo} under {options.repo} (looked for "
                            f"{', '.join(c.relative_to(options.repo).as_posix() for c in candidates)}); "
                            f"pass --repo {repo}=PATH")
        path = found
    elif options.repo is not None:
        path = options.repo
    else:
        which = f" (its repo is {repo})" if repo else ""
        raise UsageError(f"{rec.where}: no clone for this instance{which}: pass --repo PATH or --repo "
                         f"{repo or 'owner/name'}=PATH")
    if not path.is_dir():
        raise PackError(f"{path}: no such directory (the clone to read {repo or 'the instances'} from)")
    return path


def _checked(records: Sequence[SourceRecord]) -> list[SourceRecord]:
    out: list[SourceRecord] = []
    for rec in records:
        rec = named(rec, "instance_id")
        require_fields(rec, FIELDS)
        commit = get_str(rec, "base_commit").strip()
        if not _COMMIT_RE.match(commit):
            raise PackError(f"{rec.where}: base_commit {commit!r} is not a commit id (hex)")
        if not get_str_list(rec, "FAIL_TO_PASS", json_encoded=True):
            raise PackError(f"{rec.where}: FAIL_TO_PASS is empty: nothing would tell a fix from no change")
        get_str_list(rec, "PASS_TO_PASS", json_encoded=True)
        for key in ("patch", "test_patch", "problem_statement"):
            if not get_str(rec, key).strip():
                raise PackError(f"{rec.where}: field {key!r} is empty")
        out.append(rec)
    return out


def import_swebench(source: Path, options: ImportOptions) -> PackDraft:
    """Import SWE-bench-style instances, reading trees and applying patches in local clones.

    Every record's fields are checked before any task is built; trees and patches are read
    only for the records kept (``limit``), one task at a time.

    Raises:
        UsageError: no clone for an instance's repository (``--repo``).
        PackError: a damaged file or record, a duplicate id, a base commit missing from the
            clone, a patch that does not apply, an environment that cannot be derived,
            naming the file and the record.
    """
    if options.repo is None and not options.repos:
        raise UsageError("swebench imports need --repo PATH (a local clone of the instances' repository, or a "
                         "directory of clones) or --repo owner/name=PATH")
    overrides = load_overrides(options.env_spec)
    digest = file_digest(source)
    records = _checked(read_records(source))
    check_unique((task_id_for(get_str(r, "instance_id"), r.where), r.where) for r in records)
    chosen = first_records(records, options.limit)
    clones = [_clone_for(rec, options) for rec in chosen]  # every clone found before any task is built
    wall = options.wall_clock_s or WALL_CLOCK_S
    title = f"SWE-bench-style instances ({source.name})"

    def tasks() -> Iterator[TaskDraft]:
        with tempfile.TemporaryDirectory(prefix="sealbench-swebench-") as tmp:
            scratches: dict[Path, _Scratch] = {}
            for rec, clone in zip(chosen, clones, strict=True):
                key = clone.resolve()
                if key not in scratches:
                    root = Path(tmp) / f"clone-{len(scratches)}"
                    root.mkdir()
                    scratches[key] = _Scratch(clone, root)
                yield _task(scratches[key], rec, options, title, digest, wall, overrides)

    names = sorted({c.resolve().name for c in clones})
    return PackDraft(
        name=options.name or task_id_for(f"swebench-{source.name.split('.')[0]}", str(source)),
        description=describe(title=title, kind="swebench", source=source, digest=digest, known_digest=None,
                             imported=len(chosen), total=len(records), options=options, wall_clock_s=wall,
                             note=f"Trees and patches read from local clones ({', '.join(n + '/' for n in names)})."),
        provenance=provenance(title, digest, options.license),
        templates={TEMPLATE_ID: load_template(TEMPLATE_ID)},
        tasks=tasks(),
    )
