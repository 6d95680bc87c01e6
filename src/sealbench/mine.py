"""Fresh repository tasks mined from a git history after a cutoff date.

``sealbench mine REPO --since DATE [--until DATE] [--max N] -o PACK`` reads a clone (or a git
bundle) and turns recent fixes into sealed repository tasks no model trained before DATE has
seen:

* candidates: the commits of the current branch's first-parent history (a merge counts, diffed
  against its first parent, its author date the oldest of the commits it brings in) whose author
  date and committer date are both after ``--since``
  (and not after ``--until``), oldest first, and that change non-test Python source. At most
  ``--max`` are examined;
* the split: files under a ``tests``/``test``/``testing`` directory, ``test_*.py``,
  ``*_test.py`` and ``conftest.py`` are the test patch (withheld from the workspace, put back at
  grading); everything else is the fix (the reference solution);
* the statement: the commit message (trailers and merge boilerplate removed), with the text of
  any issue it names (``#N``) that the repository holds as ``issues/N.md`` (or ``.txt``,
  ``.rst``, under any directory). Nothing is invented: a message of fewer than
  :data:`MIN_STATEMENT_WORDS` words drops the candidate;
* the environment: the SWE-bench importer's, derived from the parent commit's tree (its uv.lock,
  else a test requirements file, else pytest alone) and built with ``env build``'s machinery;
* the tests: the Python files of the test patch run in the sandbox, in the environment,
  ``repeat`` times on the parent with the test patch and ``repeat`` times with the fix too.
  FAIL_TO_PASS are the tests that never passed before and always passed after; PASS_TO_PASS
  those that always passed in both. A test whose outcome changed between repeats is dropped
  and named;
* the seal: every kept candidate is written as a pack (the SWE-bench importer's task, its
  provenance carrying the repository, the commit id and both dates) and goes through ``pack
  validate``; a task that does not validate is dropped and the pack written again without it.

Every candidate ends kept or dropped with one reason (:data:`DROP_REASONS`), reported as a
table and as JSON (:class:`MineReport`). The clone is only read.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final

from .errors import EnvironmentRefused, HarnessError, PackError, UsageError
from .formats import Provenance
from .freshness import parse_date

if TYPE_CHECKING:
    from .environments import BuiltEnv
    from .formats import EnvironmentSpec
    from .importers.draft import FileEntry, TaskDraft
    from .importers.sources import SourceRecord
    from .importers.swebench import _Scratch

NO_TESTS: Final = "no tests"
NO_ENVIRONMENT: Final = "environment did not build"
NO_FAILING_TEST: Final = "no failing test before the fix"
FLAKY: Final = "flaky"
NO_STATEMENT: Final = "statement missing"
NOT_VALID: Final = "did not validate"
DROP_REASONS: Final = (NO_TESTS, NO_ENVIRONMENT, NO_FAILING_TEST, FLAKY, NO_STATEMENT, NOT_VALID)
MIN_STATEMENT_WORDS: Final = 4
TEST_TIMEOUT_S: Final = 600.0
_TEST_DIRS: Final = frozenset({"tests", "test", "testing"})
_TRAILER = re.compile(r"^[A-Za-z][A-Za-z-]*: \S")
_MERGE_LINE = re.compile(r"^(Merge (pull request|branch|remote-tracking branch) .*)$")
_ISSUE_REF = re.compile(r"(?<![\w/])#(\d{1,7})\b")


# --- the pure core -------------------------------------------------------------------------------


def is_test_path(path: str) -> bool:
    """Whether a changed file belongs to the test patch (module docstring)."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return (any(p in _TEST_DIRS for p in parts[:-1]) or name == "conftest.py"
            or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))))


def is_source_path(path: str) -> bool:
    """Whether a changed file is non-test Python source: what makes a commit a candidate."""
    return path.endswith(".py") and not is_test_path(path)


def statement(message: str, issues: Mapping[str, str] | None = None) -> str | None:
    """The problem statement of a commit: its message without trailers and merge boilerplate,
    then each linked issue's text; None when fewer than :data:`MIN_STATEMENT_WORDS` words remain
    of the message and the issues together."""
    lines = message.strip().splitlines()
    while lines and (_TRAILER.match(lines[-1]) or not lines[-1].strip()):
        lines.pop()
    body = "\n".join(line for line in lines if not _MERGE_LINE.match(line.strip())).strip()
    parts = [body] if body else []
    for number, text in sorted((issues or {}).items(), key=lambda kv: int(kv[0])):
        if text.strip():
            parts.append(f"Issue #{number}:\n\n{text.strip()}")
    told = "\n\n".join(parts)
    return told + "\n" if len(told.split()) >= MIN_STATEMENT_WORDS else None


def issue_numbers(message: str) -> list[str]:
    """The issue numbers a message names as ``#N``, in order, once each."""
    return list(dict.fromkeys(_ISSUE_REF.findall(message)))


@dataclass(frozen=True)
class SplitOfTests:
    """FAIL_TO_PASS, PASS_TO_PASS and the flaky tests, from repeated runs (:func:`split_tests`)."""

    fail_to_pass: list[str]
    pass_to_pass: list[str]
    flaky: list[str]
    flaky_would_decide: bool


def split_tests(before: Sequence[Mapping[str, str]], after: Sequence[Mapping[str, str]]) -> SplitOfTests:
    """Sort the tests of repeated runs (each a test name -> outcome map; a test missing from a
    run did not run there, as when its file failed to import before the fix).

    A test is flaky when its outcome differs between the repeats of one side; it is dropped, and
    ``flaky_would_decide`` says whether one of them failed before and passed after at least once
    (the candidate's only failing tests may be flaky). FAIL_TO_PASS: never passed before, always
    passed after; PASS_TO_PASS: always passed on both sides."""
    names = sorted({n for run in [*before, *after] for n in run})
    f2p: list[str] = []
    p2p: list[str] = []
    flaky: list[str] = []
    would_decide = False
    for name in names:
        was = [run.get(name, "absent") for run in before]
        now = [run.get(name, "absent") for run in after]
        if len(set(was)) > 1 or len(set(now)) > 1:
            flaky.append(name)
            would_decide = would_decide or ("passed" in now and any(w != "passed" for w in was))
        elif now[0] == "passed" and was[0] == "passed":
            p2p.append(name)
        elif now[0] == "passed":
            f2p.append(name)
    return SplitOfTests(f2p, p2p, flaky, would_decide)


@dataclass(frozen=True)
class Outcome:
    """What became of one candidate: kept (with its task id) or dropped, with one reason."""

    commit: str
    committer_date: str
    subject: str
    kept: bool
    reason: str | None = None
    detail: str = ""
    task_id: str | None = None
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    flaky: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "committer_date": self.committer_date, "subject": self.subject,
                "kept": self.kept, "reason": self.reason, "detail": self.detail, "task_id": self.task_id,
                "fail_to_pass": list(self.fail_to_pass), "pass_to_pass": list(self.pass_to_pass),
                "flaky": list(self.flaky)}


@dataclass(frozen=True)
class MineReport:
    """Every candidate of one mining and what became of it."""

    repository: str
    since: str
    until: str | None
    outcomes: tuple[Outcome, ...]
    pack: str | None
    elapsed_s: float

    @property
    def kept(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.kept]

    def dropped_by_reason(self) -> dict[str, int]:
        counts = {reason: 0 for reason in DROP_REASONS}
        for o in self.outcomes:
            if not o.kept and o.reason is not None:
                counts[o.reason] += 1
        return {reason: n for reason, n in counts.items() if n}

    def to_json(self) -> dict[str, Any]:
        return {"repository": self.repository, "since": self.since, "until": self.until, "pack": self.pack,
                "candidates": len(self.outcomes), "kept": len(self.kept), "dropped": self.dropped_by_reason(),
                "elapsed_s": round(self.elapsed_s, 3), "outcomes": [o.to_json() for o in self.outcomes]}

    def table(self) -> str:
        rows = [("commit", "committed", "result", "why", "subject")]
        for o in self.outcomes:
            why = o.task_id or "" if o.kept else f"{o.reason}{': ' + o.detail if o.detail else ''}"
            rows.append((o.commit[:12], o.committer_date[:10], "kept" if o.kept else "dropped", why[:70],
                         o.subject[:50]))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
        dropped = ", ".join(f"{n} {reason}" for reason, n in self.dropped_by_reason().items())
        lines.append(f"{len(self.outcomes)} candidates, {len(self.kept)} kept"
                     + (f", {len(self.outcomes) - len(self.kept)} dropped ({dropped})" if dropped else ""))
        return "\n".join(lines)


# --- the shell: git, the environment, the sandbox, the pack --------------------------------------


@dataclass(frozen=True)
class _Commit:
    sha: str
    parent: str
    author_date: str
    committer_date: str
    subject: str


@dataclass
class MineOptions:
    """Knobs of one mining (see :func:`mine`)."""

    since: str
    until: str | None = None
    max_candidates: int | None = None
    repeat: int = 3
    repository: str | None = None
    name: str | None = None
    python: str | None = None
    sandbox: str = "auto"
    say: Callable[[str], None] = field(default=lambda _line: None)


def _git_env(home: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}


def _clone_of(source: Path, tmp: Path) -> Path:
    """``source`` when it is a clone; a bare clone of it in ``tmp`` when it is a bundle.

    Raises:
        PackError: neither, or git cannot read it.
    """
    if source.is_dir():
        return source
    if not source.is_file():
        raise PackError(f"{source}: no such clone or bundle")
    dest = tmp / "bundle.git"
    proc = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "clone", "--quiet", "--bare", str(source),
                           str(dest)], env=_git_env(tmp), capture_output=True, check=False)
    if proc.returncode != 0:
        raise PackError(f"{source}: not a git bundle git can read: "
                        f"{proc.stderr.decode('utf-8', 'replace').strip().splitlines()[-1:]}")
    return dest


def _head(clone: Path, tmp: Path) -> str:
    proc = subprocess.run(["git", "rev-parse", "--verify", "HEAD^{commit}"], cwd=clone, env=_git_env(tmp),
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise PackError(f"{clone}: its HEAD is not a commit")
    return proc.stdout.decode().strip()


def _commits(scratch: _Scratch, head: str, since: datetime, until: datetime | None) -> list[_Commit]:
    """First-parent commits after ``since`` (both dates) and not after ``until``, oldest first."""
    out = scratch.git(["log", "--first-parent", "--reverse", "--format=%H%x00%P%x00%aI%x00%cI%x00%s",
                       f"--since={since.isoformat()}", head], failure="cannot read the history")
    found = []
    for line in out.decode("utf-8", "replace").splitlines():
        sha, parents, author, committer, subject = line.split("\0", 4)
        if not parents:
            continue  # a root commit has no parent to be the workspace
        if len(parents.split()) > 1:
            # A merge is only as fresh as the oldest change it brings in.
            brought = scratch.git(["log", "--format=%aI", f"{parents.split()[0]}..{sha}"],
                                  failure=f"{sha[:12]}: cannot read the merge's commits")
            author = min(brought.decode().split(), key=datetime.fromisoformat, default=author)
        dates = (datetime.fromisoformat(author), datetime.fromisoformat(committer))
        if min(dates) <= since or (until is not None and max(dates) > until):
            continue
        found.append(_Commit(sha, parents.split()[0], author, committer, subject))
    return found


def _changed(scratch: _Scratch, c: _Commit) -> list[str]:
    out = scratch.git(["diff", "--no-renames", "--name-only", "-z", c.parent, c.sha],
                      failure=f"{c.sha[:12]}: cannot diff")
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def _patch(scratch: _Scratch, c: _Commit, paths: Sequence[str]) -> str:
    if not paths:
        return ""
    out = scratch.git(["diff", "--no-renames", "--binary", "--full-index", "--no-color", c.parent, c.sha, "--",
                       *paths], failure=f"{c.sha[:12]}: cannot diff")
    return str(out.decode("utf-8", "surrogateescape"))


def _issue_texts(base: Mapping[str, FileEntry], message: str) -> dict[str, str]:
    texts: dict[str, str] = {}
    for number in issue_numbers(message):
        pattern = re.compile(rf"(?:^|/)issues?/(?:issue-?)?{number}(?:\.md|\.txt|\.rst)?$")
        for path in sorted(base):
            if pattern.search(path) and base[path].kind == "file":
                texts[number] = base[path].data.decode("utf-8", "replace")
                break
    return texts


def _write_tree(root: Path, files: Mapping[str, FileEntry]) -> None:
    from .importers.swebench import _materialise

    for rel, entry in files.items():
        _materialise(root / rel, entry)


def _outcomes(report: bytes | None) -> dict[str, str]:
    """Each test of a JUnit report (``classname::name``, as the oracle names it) -> outcome."""
    from .pytest_oracle import JUnitCase, read_junit

    found: dict[str, str] = {}
    if report is None:
        return found

    def note(case: JUnitCase) -> None:
        outcome = ("failed" if {"failure", "error"} & case.marks else "skipped" if "skipped" in case.marks
                   else "passed")
        key = f"{case.cls}::{case.name}" if case.cls else case.name
        # A test reported twice (a teardown error) keeps its worst outcome.
        found[key] = outcome if found.get(key, "passed") == "passed" else found[key]

    read_junit(report, note)
    return found


class _Runner:
    """Runs a candidate's test files in the sandbox, in its built environment."""

    def __init__(self, sandbox: str) -> None:
        from .sandbox import open_sandbox

        self.box = open_sandbox(sandbox)

    def run(self, tree: Path, targets: Sequence[str], built: BuiltEnv, import_roots: Sequence[str]) -> dict[str, str]:
        import posixpath

        from .environments import REPO_MOUNT
        from .pytest_oracle import read_private
        from .sandbox import SandboxSpec
        from .sandbox import command_path as sandbox_path

        private = Path(tempfile.mkdtemp(prefix="report-", dir=tree.parent))
        report = private / "junit.xml"
        roots = [posixpath.normpath(f"{REPO_MOUNT}/{r}") for r in import_roots]
        argv = ["python", "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}", *targets]
        env = {"PATH": sandbox_path(str(built.bin)), "VIRTUAL_ENV": str(built.root), "HOME": "/tmp/home",
               "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": ":".join(roots)}
        spec = SandboxSpec(argv=tuple(argv), workdir=tree, env=env, timeout_s=TEST_TIMEOUT_S, stdout_path=None,
                           stderr_path=None, readonly_paths=tuple(built.readonly()), writable_paths=(private,),
                           links=((REPO_MOUNT, str(tree)),))
        self.box.run(spec)
        found = _outcomes(read_private(report, 64 * 2**20))
        shutil.rmtree(private, ignore_errors=True)
        return found


def _task_id(repository: str, sha: str) -> str:
    from .importers.sources import task_id_for

    return task_id_for(f"{repository.replace('/', '__')}-{sha[:12]}", sha)


class _Miner:
    def __init__(self, clone: Path, options: MineOptions, tmp: Path) -> None:
        from .importers.swebench import _Scratch

        self.options = options
        self.tmp = tmp
        root = tmp / "scratch"
        root.mkdir()
        self.scratch = _Scratch(clone, root)
        self.repository = options.repository or clone.resolve().name.removesuffix(".git")
        self._runner: _Runner | None = None

    @property
    def runner(self) -> _Runner:
        if self._runner is None:
            self._runner = _Runner(self.options.sandbox)
        return self._runner

    def examine(self, c: _Commit) -> tuple[Outcome, TaskDraft | None]:
        """The outcome of one candidate and, when kept so far, its task draft."""
        from .importers.sources import SourceRecord

        changed = _changed(self.scratch, c)
        tests = [p for p in changed if is_test_path(p)]
        fix = [p for p in changed if not is_test_path(p)]
        here = Outcome(c.sha, c.committer_date, c.subject, kept=False)
        if not any(p.endswith(".py") for p in tests):
            return replace(here, reason=NO_TESTS, detail="the commit changes no Python test file"), None
        message = self.scratch.git(["log", "-1", "--format=%B", c.sha]).decode("utf-8", "replace")
        base = self.scratch.tree(c.parent, c.sha[:12])
        told = statement(message, _issue_texts(base, message))
        if told is None:
            return replace(here, reason=NO_STATEMENT,
                           detail=f"the message has fewer than {MIN_STATEMENT_WORDS} words"), None
        rec = SourceRecord(f"commit {c.sha[:12]}", {
            "repo": self.repository, "instance_id": _task_id(self.repository, c.sha), "base_commit": c.parent,
            "patch": _patch(self.scratch, c, fix), "test_patch": _patch(self.scratch, c, tests),
            "problem_statement": told})
        try:
            spec, built = self._environment(rec, base, c)
        except (PackError, EnvironmentRefused, HarnessError) as e:
            return replace(here, reason=NO_ENVIRONMENT, detail=str(e)[:300]), None
        split = self._split(rec, base, spec, built)
        flaky = tuple(split.flaky)
        if not split.fail_to_pass:
            if split.flaky_would_decide:
                return replace(here, reason=FLAKY, detail=", ".join(flaky[:5]), flaky=flaky), None
            return replace(here, reason=NO_FAILING_TEST, flaky=flaky), None
        rec.data["FAIL_TO_PASS"] = split.fail_to_pass
        rec.data["PASS_TO_PASS"] = split.pass_to_pass
        draft = self._draft(rec, c)
        return replace(here, kept=True, task_id=draft.record.task_id, fail_to_pass=tuple(split.fail_to_pass),
                       pass_to_pass=tuple(split.pass_to_pass), flaky=flaky,
                       detail=f"flaky, left out: {', '.join(flaky[:5])}" if flaky else ""), draft

    def _environment(self, rec: SourceRecord, base: Mapping[str, FileEntry], c: _Commit) -> tuple[EnvironmentSpec, BuiltEnv]:
        from . import environments
        from .importers.draft import ImportOptions
        from .importers.swebench import _environment

        spec = _environment(self.scratch, rec, base, c.parent, ImportOptions(python=self.options.python), {})
        built, _fresh = environments.build(spec)
        return spec, built

    def _split(self, rec: SourceRecord, base: Mapping[str, FileEntry], spec: EnvironmentSpec,
               built: BuiltEnv) -> SplitOfTests:
        tests, _ = self.scratch.patched(base, rec.data["test_patch"], rec.where, "the test patch")
        fixed, _ = self.scratch.patched(base, rec.data["patch"], rec.where, "the fix")
        targets = sorted(p for p in tests if p.endswith(".py") and is_test_path(p)
                         and PurePosixPath(p).name != "conftest.py")
        runs: dict[str, list[dict[str, str]]] = {"before": [], "after": []}
        for side, files in (("before", {**base, **tests}), ("after", {**base, **tests, **fixed})):
            for n in range(self.options.repeat):
                tree = self.tmp / "trees" / f"{rec.data['base_commit'][:12]}-{side}-{n}"
                tree.mkdir(parents=True)
                _write_tree(tree, files)
                runs[side].append(self.runner.run(tree, targets, built, spec.import_roots))
                shutil.rmtree(tree, ignore_errors=True)
        return split_tests(runs["before"], runs["after"])

    def _draft(self, rec: SourceRecord, c: _Commit) -> TaskDraft:
        from .importers.draft import ImportOptions
        from .importers.swebench import WALL_CLOCK_S, _task

        draft = _task(self.scratch, rec, ImportOptions(python=self.options.python), self._title(), "", WALL_CLOCK_S,
                      {})
        fresh = Provenance(source=self._title(), record_id=c.sha, repository=self.repository, commit=c.sha,
                           author_date=c.author_date, committer_date=c.committer_date,
                           contamination=f"committed after {self.options.since}: newer than the training data of "
                           f"a model whose data ends before then")
        return replace(draft, record=draft.record.model_copy(update={"provenance": fresh}))

    def _title(self) -> str:
        return f"commits of {self.repository}"


def mine(source: Path, out: Path, options: MineOptions) -> MineReport:
    """Mine ``source``'s history after ``options.since`` into a validated pack at ``out``.

    Nothing is written at ``out`` when no candidate is kept.

    Raises:
        UsageError: ``out`` exists, a date cannot be read, ``--max`` or ``--repeat`` below 1.
        PackError: ``source`` is not a clone or bundle git can read.
        RunRefusal: no sandbox to run the tests in.
    """
    started = time.monotonic()
    since = parse_date(options.since, "--since")
    until = parse_date(options.until, "--until") if options.until is not None else None
    if out.exists() or out.is_symlink():
        raise UsageError(f"{out} exists; mining never overwrites a pack")
    if options.repeat < 1 or (options.max_candidates is not None and options.max_candidates < 1):
        raise UsageError("--repeat and --max must be at least 1")
    with tempfile.TemporaryDirectory(prefix="sealbench-mine-") as tmp_name:
        tmp = Path(tmp_name)
        clone = _clone_of(source, tmp)
        miner = _Miner(clone, options, tmp)
        head = _head(clone, tmp)
        commits = [c for c in _commits(miner.scratch, head, since, until)
                   if any(is_source_path(p) for p in _changed(miner.scratch, c))]
        commits = commits[:options.max_candidates]
        options.say(f"{len(commits)} candidate commits of {miner.repository} after {options.since}")
        outcomes: list[Outcome] = []
        drafts: dict[str, TaskDraft] = {}
        for n, c in enumerate(commits, 1):
            outcome, draft = miner.examine(c)
            options.say(f"[{n}/{len(commits)}] {c.sha[:12]} {'kept' if outcome.kept else outcome.reason}")
            outcomes.append(outcome)
            if draft is not None:
                drafts[c.sha] = draft
        outcomes = _sealed(drafts, outcomes, out, miner, options)
    return MineReport(repository=miner.repository, since=options.since, until=options.until,
                      outcomes=tuple(outcomes), pack=str(out) if out.exists() else None,
                      elapsed_s=time.monotonic() - started)


def _sealed(drafts: Mapping[str, TaskDraft], outcomes: list[Outcome], out: Path, miner: _Miner,
            options: MineOptions) -> list[Outcome]:
    """Write the kept candidates as a pack and validate it; a task that does not validate is
    dropped and the pack written again without it, until every task in it is valid."""
    from .validate import validate_pack

    kept = dict(drafts)
    while kept:
        staging = out.parent / f".{out.name}.mining"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            _write(kept, staging, miner, options)
            validity = validate_pack(staging, repeat=options.repeat, progress=False)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        invalid = {sha: validity.tasks[d.record.task_id] for sha, d in kept.items()
                   if not validity.tasks[d.record.task_id].valid}
        if not invalid:
            staging.rename(out)
            break
        shutil.rmtree(staging)
        for sha, evidence in invalid.items():
            del kept[sha]
            outcomes = [replace(o, kept=False, reason=NOT_VALID, task_id=None,
                                detail=f"pack validate: {evidence.reason}{'; ' + evidence.why if evidence.why else ''}"[:300])
                        if o.commit == sha else o for o in outcomes]
            options.say(f"{sha[:12]} dropped: pack validate says {evidence.reason}")
    return outcomes


def _write(drafts: Mapping[str, TaskDraft], out: Path, miner: _Miner, options: MineOptions) -> None:
    from .freshness import task_date
    from .importers.draft import PackDraft
    from .importers.provenance import load_template
    from .importers.swebench import TEMPLATE_ID
    from .importers.writer import write_pack

    first = min(when for d in drafts.values() if (when := task_date(d.record)) is not None)
    from .importers.sources import task_id_for

    name = options.name or task_id_for(f"{miner.repository.replace('/', '__')}-fresh-{options.since[:10]}", "--name")
    description = (f"{len(drafts)} tasks mined from the commits of {miner.repository} after {options.since}"
                   f"{' until ' + options.until if options.until else ''} (the oldest committed "
                   f"{first.isoformat()}): the parent commit as the workspace, the commit's tests withheld "
                   f"and its fix as the reference.")
    write_pack(PackDraft(name=name, description=description,
                         provenance=Provenance(source=miner._title(), repository=miner.repository,
                                               contamination=f"every task committed after {options.since}"),
                         templates={TEMPLATE_ID: load_template(TEMPLATE_ID)}, tasks=list(drafts.values())), out)


def write_report(report: MineReport, path: Path) -> None:
    """The report as JSON (what ``mine --json`` writes)."""
    path.write_text(json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
