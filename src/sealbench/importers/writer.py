"""Writing a :class:`~sealbench.importers.draft.PackDraft` as a sealed pack, all or nothing.

The pack is built in a temporary sibling of the output directory, sealed there with
:func:`sealbench.pack.seal_pack`, flushed to disk and renamed into place. Any failure removes
the temporary directory: the output either does not exist or is a complete sealed pack.

A task whose hidden tests the seal would find visible to the agent (a source's test repeating
a line of its prompt) is left out before sealing and named, with the line, in the pack's
description: the source's tests are never rewritten to pass the control.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from pydantic import ValidationError

from ..digest import UnsafeTree, tree_digest
from ..errors import PackError, UsageError
from ..files import describe_validation_error, fsync_dir, model_json
from ..formats import PackManifest, check_id
from ..pack import Pack, load_pack, seal_pack, visible_test_leaks
from ..scratch import IMPORTING_PACK, sweep, tag
from ..workspace import META_DIR
from .draft import Files, PackDraft, TaskDraft


def _safe_relpath(rel: str, where: str, tree: str) -> PurePosixPath:
    path = PurePosixPath(rel)
    if (not rel or path.is_absolute() or any(p in ("", ".", "..") for p in rel.split("/"))
            or "\\" in rel or "\0" in rel):
        raise PackError(f"{where}: {tree} path {rel!r} is not a plain relative path")
    # The runner owns these names in every workspace: its git repository and its metadata.
    if path.parts[0] in (".git", META_DIR) or ".git" in path.parts:
        raise PackError(f"{where}: {tree} path {rel!r} is reserved")
    return path


def _write_tree(root: Path, files: Files, where: str, tree: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for rel in sorted(files):
        entry = files[rel]
        dest = root.joinpath(*_safe_relpath(rel, where, tree).parts)
        parent = dest.parent
        while parent != root:
            # Writing through a link the same tree just made could land outside the pack.
            if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
                raise PackError(f"{where}: {tree} path {rel!r} lies under a symlink or a file")
            parent = parent.parent
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists() or dest.is_symlink():
            raise PackError(f"{where}: {tree} path {rel!r} collides with another entry")
        if entry.kind == "symlink":
            target = entry.data.decode("utf-8", "surrogateescape")
            os.symlink(target, dest)
            continue
        dest.write_bytes(entry.data)
        if entry.kind == "exec":
            dest.chmod(0o755)


def write_task_files(task_dir: Path, task: TaskDraft) -> None:
    """A new ``task_dir`` holding the task's workspace, hidden tests, solution and prompt (its
    ``task.json`` is the caller's: what its hidden-tests digest records is the caller's rule).

    Raises:
        PackError: an unsafe or colliding path, named by the task's source record.
    """
    task_dir.mkdir()
    _write_tree(task_dir / "workspace", task.workspace, task.origin, "workspace")
    _write_tree(task_dir / "hidden", task.hidden, task.origin, "hidden")
    if task.solution:
        _write_tree(task_dir / "solution", task.solution, task.origin, "solution")
    (task_dir / "prompt.md").write_text(task.prompt, encoding="utf-8")


def _write_task(tasks_dir: Path, task: TaskDraft, pack_root: Path) -> None:
    task_dir = tasks_dir / task.record.task_id
    write_task_files(task_dir, task)
    try:
        hidden = tree_digest(task_dir / "hidden", pack_root)
    except UnsafeTree as e:
        raise PackError(f"{task.origin}: {e.path}: {e.why}") from None
    record = task.record.model_copy(update={"hidden_tests_sha256": hidden})
    (task_dir / "task.json").write_text(model_json(record), encoding="utf-8")


def _leave_out_leaking(root: Path, origins: dict[str, str]) -> dict[str, str]:
    """Remove tasks the seal would refuse for visible hidden tests; returns id -> first leak.

    Such a task is the source's own design (e.g. a test repeating a prompt example verbatim),
    not damaged input: it is left out and named in the pack description rather than
    refusing the whole import or rewriting the source's test.
    """
    pack = load_pack(root)
    left_out: dict[str, str] = {}
    for task_id, task in pack.tasks.items():
        leaks = visible_test_leaks(task)
        if leaks:
            left_out[task_id] = leaks[0] + (f" and {len(leaks) - 1} more" if len(leaks) > 1 else "")
            shutil.rmtree(task.dir)
    if len(left_out) == len(pack.tasks):
        first = next(iter(left_out))
        raise PackError(f"{origins[first.lower()]}: every task's hidden tests are visible to the agent, "
                        f"e.g. {first}: {left_out[first]}")
    return left_out


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def _missing_parents(path: Path) -> Iterator[Path]:
    for parent in path.parents:
        if parent.exists():
            return
        yield parent


def write_pack(draft: PackDraft, out: Path) -> Pack:
    """Write ``draft`` as a sealed pack at ``out``; nothing is left behind on failure.

    Raises:
        UsageError: ``out`` already exists.
        PackError: an unsafe or colliding path, a duplicate task id, a bad pack name, or a seal
            refusal (hidden tests visible to the agent included), named by source record.
    """
    out = Path(os.path.abspath(out))
    if out.exists() or out.is_symlink():
        raise UsageError(f"{out} exists; importing never overwrites a pack")
    try:
        check_id(draft.name)
    except ValueError as e:
        raise PackError(f"pack name: {e}") from None
    created = list(_missing_parents(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    # Named after this process: what a killed import left is swept by the next one here.
    sweep(out.parent, IMPORTING_PACK)
    tmp = out.parent / f".{out.name}.{tag('importing')}{secrets.token_hex(6)}"
    tmp.mkdir()
    try:
        (tmp / "prompts").mkdir()
        for template_id, text in sorted(draft.templates.items()):
            try:
                check_id(template_id)
            except ValueError as e:
                raise PackError(f"prompt template id: {e}") from None
            (tmp / "prompts" / f"{template_id}.txt").write_text(text, encoding="utf-8")
        try:
            manifest = PackManifest(name=draft.name, description=draft.description, provenance=draft.provenance)
        except ValidationError as e:
            raise PackError(f"pack.json of {draft.name!r}: {describe_validation_error(e)}") from None
        (tmp / "pack.json").write_text(model_json(manifest), encoding="utf-8")
        tasks_dir = tmp / "tasks"
        tasks_dir.mkdir()
        seen: dict[str, str] = {}
        for task in draft.tasks:
            key = task.record.task_id.lower()
            if key in seen:
                raise PackError(f"{task.origin}: duplicate task id {task.record.task_id!r} "
                                f"(already used by {seen[key]})")
            seen[key] = task.origin
            _write_task(tasks_dir, task, tmp)
        if not seen:
            raise PackError(f"{draft.name}: the source gave no tasks")
        left_out = _leave_out_leaking(tmp, seen)
        if left_out:
            note = (" Left out before sealing, because their hidden tests are visible to the agent: "
                    + "; ".join(f"{tid} ({why})" for tid, why in left_out.items()) + ".")
            manifest = manifest.model_copy(update={"description": manifest.description + note})
            (tmp / "pack.json").write_text(model_json(manifest), encoding="utf-8")
        seal_pack(tmp)
        _fsync_tree(tmp)
        if out.exists() or out.is_symlink():
            raise UsageError(f"{out} appeared while importing; importing never overwrites a pack")
        os.rename(tmp, out)
        fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for parent in created:
            try:
                parent.rmdir()
            except OSError:
                break
        raise
    return load_pack(out)
