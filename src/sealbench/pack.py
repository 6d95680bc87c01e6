"""Task packs: loading with refusals, sealing, checking, and the visible-tests control.

A pack is a directory::

    pack.json                         name, description, provenance, seal, validity
    prompts/<prompt_template_id>.txt  frozen prompt templates
    tasks/<task_id>/task.json         the task record (the scorecard rules' fields plus the runner's)
    tasks/<task_id>/prompt.md         the task's prompt text
    tasks/<task_id>/workspace/        what the agent starts from
    tasks/<task_id>/hidden/           hidden tests, overlaid on a workspace copy at grading
    tasks/<task_id>/solution/         optional reference files (builtin:reference copies them)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .digest import UnsafeTree, digest_json, is_real_digest, same_digest, sha256_bytes, tree_digest
from .errors import PackError, VerificationFailed
from .files import model_json, nearest_folders, read_model, read_text, write_atomic
from .formats import PackManifest, Seal, TaskDigests, TaskRecord, check_id
from .pytest_oracle import HARNESS_PYTEST, is_guarded, owned_option_problem
from .scratch import sweep_temp_files

PACK_FORMAT = "sealbench.pack/1"
# Lines too common to prove a leak: boilerplate shared by tests and code alike.
_BOILERPLATE = frozenset(
    {
        'if __name__ == "__main__":',
        "if __name__ == '__main__':",
        "unittest.main()",
        "pytest.main()",
        "raise NotImplementedError",
        "raise NotImplementedError()",
    }
)
MIN_LEAK_LINE = 16


@dataclass(frozen=True)
class Task:
    """One loaded task: its record, its folder and its prompt texts."""

    record: TaskRecord
    dir: Path
    prompt: str
    template: str

    @property
    def task_id(self) -> str:
        return self.record.task_id

    @property
    def pack_workspace(self) -> Path:
        return self.dir / "workspace"

    @property
    def hidden(self) -> Path:
        return self.dir / "hidden"

    @property
    def solution(self) -> Path:
        return self.dir / "solution"

    def hidden_paths(self) -> list[str]:
        """Relative paths of the hidden test files (where they land in the grading copy)."""
        out: list[str] = []
        for dirpath, _dirs, files in os.walk(self.hidden):
            for name in files:
                out.append((Path(dirpath) / name).relative_to(self.hidden).as_posix())
        return sorted(out)


@dataclass(frozen=True)
class Pack:
    """A loaded (not necessarily sealed) pack."""

    root: Path
    manifest: PackManifest
    tasks: dict[str, Task]

    @property
    def sealed_digest(self) -> str | None:
        return self.manifest.seal.pack_sha256 if self.manifest.seal else None


def _inside(path: Path, root: Path) -> bool:
    resolved = path.resolve()
    return resolved == root or root in resolved.parents


def _iter_task_dirs(root: Path) -> Iterator[Path]:
    tasks_dir = root / "tasks"
    if not tasks_dir.is_dir():
        raise PackError(f"{tasks_dir}: missing tasks/ directory")
    # ``root`` is resolved: below a tasks/ that is no symlink, a folder that is none is inside.
    linked = tasks_dir.is_symlink()
    for entry in sorted(tasks_dir.iterdir()):
        if entry.name.startswith("."):
            continue
        if not entry.is_dir():
            raise PackError(f"{entry}: expected a task folder")
        if (linked or entry.is_symlink()) and not _inside(entry, root):
            raise PackError(f"{entry}: symlink leaves the pack")
        yield entry


def load_task(task_dir: Path, root: Path, templates: dict[str, str] | None = None) -> Task:
    """Load one task folder, refusing with the file and key named.

    Raises:
        PackError: malformed record, id mismatch, missing prompt or template, unsafe symlink.
    """
    task_json = task_dir / "task.json"
    record = read_model(task_json, TaskRecord, PackError)
    try:
        check_id(task_dir.name)
    except ValueError as e:
        raise PackError(f"{task_dir}: folder name: {e}") from None
    if record.task_id != task_dir.name:
        raise PackError(
            f"{task_json}: task_id: {record.task_id!r} differs from its folder {task_dir.name!r}"
        )
    problem = _record_problem(record)
    if problem is not None:
        raise PackError(f"{task_json}: {problem}")
    prompt = read_text(task_dir / "prompt.md", PackError)
    template = _template(record.prompt_template_id, root, templates if templates is not None else {}, task_json)
    for sub in ("workspace", "hidden", "solution", "prompt.md", "task.json"):
        p = task_dir / sub
        if p.is_symlink() and not _inside(p, root):
            raise PackError(f"{p}: symlink leaves the pack")
    return Task(record=record, dir=task_dir, prompt=prompt, template=template)


def _template(template_id: str, root: Path, cache: dict[str, str], task_json: Path) -> str:
    """The pack's prompt template ``template_id``, read once per pack into ``cache``."""
    template = cache.get(template_id)
    if template is None:
        tpath = root / "prompts" / f"{template_id}.txt"
        if not tpath.is_file():
            raise PackError(
                f"{task_json}: prompt_template_id: no template {template_id!r} "
                f"(expected {tpath})"
            )
        if not _inside(tpath, root):
            raise PackError(f"{tpath}: symlink leaves the pack")
        template = read_text(tpath, PackError)
        cache[template_id] = template
    return template


def _oracle_problem(record: TaskRecord) -> str | None:
    if is_guarded(record.oracle_cmd):
        problem = owned_option_problem(record.oracle_cmd)
        if problem is not None:
            return f"oracle_cmd: {problem}"
        if record.junit_xml is not None:
            return (f"junit_xml: must be null for a {HARNESS_PYTEST} oracle "
                    "(the harness writes its JUnit report outside the workspace)")
    elif record.required_tests and not record.junit_xml:
        return f"required_tests: needs junit_xml (or a {HARNESS_PYTEST} oracle) to be checked"
    return None


def _decided_by_problem(record: TaskRecord) -> str | None:
    if record.decided_by == "required" and not record.required_tests:
        return "decided_by: 'required' needs required_tests, the tests that decide"
    if record.decided_by == "required" and not (record.junit_xml or is_guarded(record.oracle_cmd)):
        return (f"decided_by: 'required' needs junit_xml (or a {HARNESS_PYTEST} oracle): "
                "only a test report tells which tests passed")
    return None


def _visible_tests_problem(record: TaskRecord) -> str | None:
    if record.visible_test_cmd and is_guarded(record.visible_test_cmd):
        return (f"visible_test_cmd: {HARNESS_PYTEST} is for oracles; the visible tests are "
                "the agent's own (use python -m pytest ...)")
    return None


def _paths_problem(record: TaskRecord) -> str | None:
    if record.junit_xml is not None and (
        record.junit_xml.startswith("/") or ".." in Path(record.junit_xml).parts
    ):
        return "junit_xml: must be a relative path inside the workspace"
    for rel in record.deleted_test_files:
        parts = rel.split("/")
        if record.test_files != "reset" or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            return (f"deleted_test_files: {rel!r}: must be a plain relative path inside the "
                    "workspace, in a task whose test_files is 'reset'")
    return None


_RECORD_RULES = (_oracle_problem, _decided_by_problem, _visible_tests_problem, _paths_problem)
"""The checks of a task record its model cannot make alone, in the order they are reported."""


def _record_problem(record: TaskRecord) -> str | None:
    """The first problem of a task record (``key: why``) beyond its model's own checks, or None."""
    for rule in _RECORD_RULES:
        problem = rule(record)
        if problem is not None:
            return problem
    return None


def load_pack(root: Path) -> Pack:
    """Load a pack directory and every task in it.

    Raises:
        PackError: naming the file and key of the first problem found.
    """
    if not root.is_dir():
        raise PackError(f"{root}: not a pack folder: {nearest_folders(root, 'pack.json')}")
    root = root.resolve()
    manifest = read_model(root / "pack.json", PackManifest, PackError)
    templates: dict[str, str] = {}
    tasks: dict[str, Task] = {}
    folded: dict[str, str] = {}
    for task_dir in _iter_task_dirs(root):
        task = load_task(task_dir, root, templates)
        key = task.task_id.lower()
        if key in folded:
            raise PackError(
                f"{task_dir}: duplicate task id {task.task_id!r} (collides with {folded[key]!r})"
            )
        folded[key] = task.task_id
        tasks[task.task_id] = task
    if not tasks:
        raise PackError(f"{root}/tasks: the pack has no tasks")
    return Pack(root=root, manifest=manifest, tasks=tasks)


def task_digests(task: Task, root: Path, record: TaskRecord | None = None) -> TaskDigests:
    """Compute the digests of one task's parts (``record`` overrides the loaded record).

    Raises:
        PackError: a symlink leaves the pack or a special file is present.
    """
    rec = record or task.record
    try:
        return TaskDigests(
            record=digest_json(rec.model_dump(mode="json")),
            prompt=sha256_bytes(task.prompt.encode("utf-8")),
            template=sha256_bytes(task.template.encode("utf-8")),
            workspace=tree_digest(task.pack_workspace, root),
            hidden_tests=tree_digest(task.hidden, root),
            solution=tree_digest(task.solution, root) if task.solution.exists() else None,
        )
    except UnsafeTree as e:
        raise PackError(f"{e.path}: {e.why}") from None


def pack_digest(name: str, digests: dict[str, TaskDigests]) -> str:
    """The pack digest: over the pack's name and every task's digests, in id order."""
    return digest_json(
        {
            "format": PACK_FORMAT,
            "name": name,
            "tasks": {tid: digests[tid].model_dump(mode="json") for tid in sorted(digests)},
        }
    )


def _text_files(root: Path) -> Iterator[tuple[str, str]]:
    top = os.fspath(root)
    for dirpath, dirs, files in os.walk(top):
        dirs.sort()
        prefix = dirpath[len(top) + 1:] + "/" if dirpath != top else ""
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (UnicodeDecodeError, OSError):
                continue
            yield prefix + name, text


def _leak_lines(text: str) -> set[str]:
    lines = set()
    for raw in text.splitlines():
        line = raw.strip()
        if len(line) < MIN_LEAK_LINE or line in _BOILERPLATE:
            continue
        if line.startswith(("#", "import ", "from ")):
            continue
        lines.add(line)
    return lines


def visible_test_leaks(task: Task) -> list[str]:
    """Where hidden test content is visible to the agent (the scorecard rules: refuse to grade then).

    A leak is a hidden test file's name appearing in the prompt, the template or a workspace
    file; one of its non-trivial lines (at least 16 characters, not a comment, an import or
    boilerplate) appearing in the prompt or the template; or a workspace file holding at least
    half of its non-trivial lines (a copy of the test). A few lines shared with a workspace
    file are not a leak: a repository's test files share decorators, fixtures and calls.

    For a task whose test files are reset at grading (``test_files: "reset"``), a hidden
    file the workspace holds in its pre-patch form is the repository's own test file: its name
    and the lines it already had are not a leak (other tests name it, and the agent may read
    it). What must not be visible is what the hidden version adds: those lines are checked as
    above, against the prompt, the template and every workspace file.
    """
    prompts = [("prompt.md", task.prompt), ("template", task.template)]
    workspace = [(f"workspace/{rel}", text, {line.strip() for line in text.splitlines()})
                 for rel, text in _text_files(task.pack_workspace)]
    before = {w.removeprefix("workspace/"): vlines for w, _t, vlines in workspace}
    reset = task.record.test_files == "reset"
    leaks: list[str] = []
    for rel, text in _text_files(task.hidden):
        name = Path(rel).name
        lines = sorted(_leak_lines(text))
        known = reset and rel in before
        if known:
            lines = [line for line in lines if line not in before[rel]]  # what the hidden version adds
        else:
            for where, vtext in [*prompts, *((w, t) for w, t, _ in workspace)]:
                if name in vtext:
                    leaks.append(f"hidden test name {name!r} appears in {where}")
        for where, vtext in prompts:
            for line in lines:
                if line in vtext:
                    leaks.append(f"line of hidden/{rel} appears in {where}: {line[:60]!r}")
                    break
        for where, _vtext, vlines in workspace:
            shared = [line for line in lines if line in vlines]
            if shared and 2 * len(shared) >= len(lines):
                leaks.append(f"{len(shared)} of {len(lines)} {'new ' if known else ''}lines of hidden/{rel} appear "
                             f"in {where}: {shared[0][:60]!r}")
    return leaks


def _refuse_leaks(pack: Pack, tasks: Iterable[Task]) -> None:
    problems: list[str] = []
    for task in tasks:
        problems.extend(f"{task.task_id}: {leak}" for leak in visible_test_leaks(task))
    if problems:
        raise PackError(
            "hidden tests are visible to the agent; refusing to grade against them: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        )


_PARTS = {"record": "task.json", "prompt": "prompt.md", "template": "its prompt template", "workspace": "workspace/",
          "hidden_tests": "hidden/", "solution": "solution/"}


def seal_changes(old: Seal | None, new: Seal) -> list[str]:
    """What differs between two seals, one line per task (added, removed, or the parts edited)."""
    if old is None:
        return [f"{tid}: sealed" for tid in new.tasks]
    lines = [f"{tid}: removed" for tid in old.tasks if tid not in new.tasks]
    for tid, digests in new.tasks.items():
        before = old.tasks.get(tid)
        if before is None:
            lines.append(f"{tid}: added")
            continue
        edited = [label for name, label in _PARTS.items() if getattr(before, name) != getattr(digests, name)]
        if edited:
            lines.append(f"{tid}: {', '.join(edited)} changed")
    return lines


def _has_hidden_tests(task: Task) -> bool:
    try:
        with os.scandir(task.hidden) as listing:
            return any(True for _ in listing)
    except (FileNotFoundError, NotADirectoryError):
        return False


def seal_pack(root: Path, *, update: bool = False, drop_validity: bool = False,
              changes: list[str] | None = None) -> Pack:
    """Seal a pack in place: fill placeholder hidden-test digests, write the seal.

    ``update`` takes edited hidden tests as they are now (their recorded digest is redigested);
    on a validated pack whose seal that changes, only with ``drop_validity``, which removes the
    old evidence (validate again). ``changes``, when given, gets one line per task that differs
    from the previous seal (:func:`seal_changes`).

    Raises:
        PackError: a load refusal; a task without hidden tests; hidden tests whose recorded
            digest does not match (without ``update``); a changed seal of a validated pack
            without ``drop_validity``; or hidden tests visible to the agent.
    """
    # What a killed seal left half-written beside pack.json and the task records.
    tasks_dir = root / "tasks"
    sweep_temp_files(root, *(tasks_dir.iterdir() if tasks_dir.is_dir() else ()))
    pack = load_pack(root)
    bare = [tid for tid, task in pack.tasks.items() if not _has_hidden_tests(task)]
    if bare:
        raise PackError(f"{len(bare)} task(s) without hidden tests ({', '.join(bare[:5])}"
                        f"{', ...' if len(bare) > 5 else ''}): nothing would decide them; put the tests that decide "
                        f"each task in its hidden/ folder (for example {pack.tasks[bare[0]].hidden})")
    old_seal = pack.manifest.seal
    _refuse_leaks(pack, pack.tasks.values())
    digests: dict[str, TaskDigests] = {}
    rewrites: list[tuple[Path, TaskRecord]] = []
    for tid, task in pack.tasks.items():
        hidden = tree_digest(task.hidden, pack.root)
        recorded = task.record.hidden_tests_sha256
        record = task.record
        if is_real_digest(recorded):
            if not same_digest(recorded, hidden) and update:
                record = record.model_copy(update={"hidden_tests_sha256": hidden})
                rewrites.append((task.dir / "task.json", record))
            elif not same_digest(recorded, hidden):
                raise PackError(
                    f"{task.dir / 'task.json'}: hidden_tests_sha256: recorded {recorded} "
                    f"but hidden/ digests to {hidden}: the hidden tests changed since the seal. If you "
                    f"edited them, `sealbench pack seal --update {pack.root}` takes them as they are now"
                )
            if recorded != hidden:
                record = record.model_copy(update={"hidden_tests_sha256": hidden})
                rewrites.append((task.dir / "task.json", record))
        else:
            record = record.model_copy(update={"hidden_tests_sha256": hidden})
            rewrites.append((task.dir / "task.json", record))
        digests[tid] = task_digests(task, pack.root, record)
    seal = Seal(pack_sha256=pack_digest(pack.manifest.name, digests), tasks=digests)
    validity = pack.manifest.validity
    if update and validity is not None and validity.pack_sha256 != seal.pack_sha256 and not drop_validity:
        # The evidence describes the pack as validated; it never silently describes another one.
        raise PackError(f"{pack.root}: the pack was validated, and --update would change what was validated; "
                        f"drop the old evidence and validate again: `sealbench pack seal --update --drop-validity "
                        f"{pack.root}`, then `sealbench pack validate {pack.root}`")
    if changes is not None:
        changes += seal_changes(old_seal, seal)
    for path, record in rewrites:
        write_atomic(path, model_json(record))
    # A new seal invalidates validity evidence bound to an older digest.
    if validity is not None and validity.pack_sha256 != seal.pack_sha256:
        validity = None
    manifest = pack.manifest.model_copy(update={"seal": seal, "validity": validity})
    write_atomic(pack.root / "pack.json", model_json(manifest))
    return load_pack(pack.root)


def check_pack(root: Path, task_ids: Iterable[str] | None = None) -> Pack:
    """Verify a sealed pack without writing; report every mismatch.

    Raises:
        PackError: not sealed, a placeholder digest, or hidden tests visible to the agent.
        VerificationFailed: any digest differs from the seal (every one is listed).
    """
    pack = load_pack(root)
    seal = pack.manifest.seal
    if seal is None:
        raise PackError(f"{pack.root / 'pack.json'}: seal: the pack is not sealed (run `sealbench pack seal`)")
    wanted = list(pack.tasks) if task_ids is None else list(task_ids)
    problems: list[str] = []
    for tid in wanted:
        task = pack.tasks.get(tid)
        if task is None:
            problems.append(f"task {tid}: in the seal or contract but not in the pack")
            continue
        if not is_real_digest(task.record.hidden_tests_sha256):
            raise PackError(
                f"{task.dir / 'task.json'}: hidden_tests_sha256: placeholder "
                f"{task.record.hidden_tests_sha256!r}; run `sealbench pack seal`"
            )
    _refuse_leaks(pack, (pack.tasks[t] for t in wanted if t in pack.tasks))
    if set(seal.tasks) != set(pack.tasks):
        extra = sorted(set(pack.tasks) - set(seal.tasks))
        gone = sorted(set(seal.tasks) - set(pack.tasks))
        if extra:
            problems.append(f"tasks not in the seal: {extra}")
        if gone:
            problems.append(f"sealed tasks missing from the pack: {gone}")
    computed: dict[str, TaskDigests] = {}
    for tid, task in pack.tasks.items():
        d = task_digests(task, pack.root)
        computed[tid] = d
        sealed = seal.tasks.get(tid)
        if sealed is None:
            continue
        if not same_digest(task.record.hidden_tests_sha256, d.hidden_tests):
            problems.append(f"task {tid}: hidden tests differ from hidden_tests_sha256")
        for part in ("record", "prompt", "template", "workspace", "hidden_tests", "solution"):
            if getattr(sealed, part) != getattr(d, part):
                problems.append(f"task {tid}: {part} differs from the seal")
    if not problems and pack_digest(pack.manifest.name, computed) != seal.pack_sha256:
        problems.append("pack digest differs from the seal")
    if problems:
        raise VerificationFailed(problems)
    return pack
