"""SWE-bench-style instances against a local clone: one repository-level task per instance.

An instance (JSON list or JSON Lines) has instance_id, base_commit, patch (the gold fix),
test_patch, FAIL_TO_PASS and PASS_TO_PASS (lists, or JSON-encoded lists as in the published
dataset) and problem_statement. Each task becomes:

* workspace: the base commit's tree as plain files (no history), without the files the
  test_patch touches: their post-patch versions are the hidden tests, and the line-based leak
  control of the seal would find most of their lines in the pre-patch versions;
* hidden: the files the test_patch adds or modifies, in their post-patch state;
* solution: the files the gold patch adds or modifies, in their post-patch state (a file the
  gold patch deletes cannot be expressed as a solution file and stays);
* oracle: the harness's pytest (``sealbench-pytest``, with ``-o pythonpath=src`` for a src/
  layout and ``-o pythonpath=.`` otherwise, since the repository is not installed) on the
  FAIL_TO_PASS and PASS_TO_PASS node ids (on the hidden test files when some ids are not node
  ids); required_tests = FAIL_TO_PASS + PASS_TO_PASS, named as pytest's report names them,
  and decided_by = "required": those tests decide, and other tests of the files may fail;
* prompt.md: the problem statement.

The clone is only read, never written: trees are read through a private scratch repository
that borrows the clone's objects (git "alternates"), and patches are applied to plain copies
of the touched files in a scratch directory, with system and global git configuration
disabled and no hooks.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from ..errors import PackError, UsageError
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


def _task(scratch: _Scratch, rec: SourceRecord, options: ImportOptions, title: str, digest: str,
          wall_clock_s: float) -> TaskDraft:
    instance = get_str(rec, "instance_id")
    task_id = task_id_for(instance, rec.where)
    commit = get_str(rec, "base_commit").strip()
    fail_to_pass = get_str_list(rec, "FAIL_TO_PASS", json_encoded=True)
    pass_to_pass = get_str_list(rec, "PASS_TO_PASS", json_encoded=True)
    scratch.git(["cat-file", "-e", f"{commit}^{{commit}}"],
                failure=f"{rec.where}: base_commit {commit} is not a commit of the clone")
    base = scratch.tree(commit, rec.where)
    tests, _ = scratch.patched(base, get_str(rec, "test_patch"), rec.where, "test_patch")
    fix, _ = scratch.patched(base, get_str(rec, "patch"), rec.where, "patch")
    if not tests:
        raise PackError(f"{rec.where}: test_patch adds or changes no file")
    both = sorted(set(tests) & set(fix))
    if both:
        # The hidden overlay would replace the agent's own change to these files.
        raise PackError(f"{rec.where}: patch and test_patch both change {', '.join(both)}")
    workspace = {p: e for p, e in base.items() if p not in tests}
    ids = _unique([*fail_to_pass, *pass_to_pass])
    node_ids = all("::" in t for t in ids)
    targets = ids if node_ids else sorted(p for p in tests if p.endswith(".py"))
    record = make_record(
        rec.where, task_id=task_id, template_id=TEMPLATE_ID,
        oracle_cmd=pytest_oracle_cmd(targets, pythonpath=import_roots(base)),
        max_attempts=options.max_attempts, wall_clock_s=wall_clock_s,
        provenance=provenance(title, digest, options.license, instance),
        required_tests=_unique([junit_test_name(t) for t in ids]),
        # SWE-bench's rule: FAIL_TO_PASS and PASS_TO_PASS decide; other tests of the files may fail.
        decided_by="required",
    )
    return TaskDraft(record=record, prompt=get_str(rec, "problem_statement").rstrip() + "\n",
                     workspace=workspace, hidden=tests, solution=fix, origin=rec.where)


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
    """Import SWE-bench-style instances, reading trees and applying patches in ``options.repo``.

    Every record's fields are checked before any task is built; trees and patches are read
    only for the records kept (``limit``), one task at a time.

    Raises:
        UsageError: no ``repo`` option.
        PackError: a damaged file or record, a duplicate id, a base commit missing from the
            clone, a patch that does not apply, naming the file and the record.
    """
    if options.repo is None:
        raise UsageError("swebench imports need --repo PATH, a local clone of the instances' repository")
    repo = options.repo
    if not repo.is_dir():
        raise PackError(f"{repo}: no such directory (the clone to read the instances from)")
    digest = file_digest(source)
    records = _checked(read_records(source))
    check_unique((task_id_for(get_str(r, "instance_id"), r.where), r.where) for r in records)
    chosen = first_records(records, options.limit)
    wall = options.wall_clock_s or WALL_CLOCK_S
    title = f"SWE-bench-style instances ({source.name})"

    def tasks() -> Iterator[TaskDraft]:
        with tempfile.TemporaryDirectory(prefix="sealbench-swebench-") as tmp:
            scratch = _Scratch(repo, Path(tmp))
            for rec in chosen:
                yield _task(scratch, rec, options, title, digest, wall)

    return PackDraft(
        name=options.name or task_id_for(f"swebench-{source.name.split('.')[0]}", str(source)),
        description=describe(title=title, kind="swebench", source=source, digest=digest, known_digest=None,
                             imported=len(chosen), total=len(records), options=options, wall_clock_s=wall,
                             note=f"Trees and patches read from a local clone ({repo.resolve().name}/)."),
        provenance=provenance(title, digest, options.license),
        templates={TEMPLATE_ID: load_template(TEMPLATE_ID)},
        tasks=tasks(),
    )
