"""The local index of runs: which run_ids this machine has run, where, and what came of them.

A run_id names one run of one locked contract. Nothing in a run directory or a bundle stops
anyone from running the same locked contract again into a new directory and publishing the
better of the two, so ``run`` consults an index of the runs made on this machine and refuses
a second run of a run_id (exit 3, naming the first run's directory; ``--resume`` continues
that one). Each run's first journal event carries a random ``run_nonce``, so two runs of
one run_id are told apart wherever their files end up.

The index is one SQLite file (stdlib sqlite3, imported only when the index is used) in the
user's data directory: ``$SEALBENCH_DATA_DIR``, else ``$XDG_DATA_HOME/sealbench``, else
``~/.local/share/sealbench``. Beside it ``runs.log.jsonl`` lists every place the index has
recorded (one JSON line each, appended and fsynced: the durable record, one fsync per run;
the database itself is not fsynced) and ``runs.lock`` is held by every writer, so two runs
starting at once are recorded one after the other. The run directories and bundles
stay the source of truth: ``sealbench runs rebuild [DIRS...]`` recreates the index from
them and from the places it knew; a corrupt index file is moved aside and rebuilt the same
way, never a crash. A run whose directory is gone stays recorded as missing: deleting a run
does not free its run_id.

One directory continues a run: each start and resume journals a random ``continuation`` the
index records first, and a resume needs the run's latest one in its journal (a copy left behind
is refused), and a copy at the same point is refused while the run's own directory holds the
run, until ``sealbench runs move OLD NEW`` moves the run there.

What it cannot do: it knows one machine and one data directory. Another machine, another
account, another ``SEALBENCH_DATA_DIR`` or a deleted index start with no memory of earlier
runs. Two bundles of one run_id with different run nonces show that it was run twice, but
nothing reveals runs that were never published.

:func:`plan_index` is the pure core (what the files say, in; the index's rows, out); the
rest reads files and the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import RunRefusal, RunsIndexError
from .outcomes import RunState

if TYPE_CHECKING:
    import sqlite3

    from .events import RunHeader
    from .formats import Scorecard, ScoringContract
    from .runner import RunResult

ENV = "SEALBENCH_DATA_DIR"
INDEX = "runs.sqlite3"
LOG = "runs.log.jsonl"
LOCK = "runs.lock"
INDEX_VERSION = 2
"""The schema version, kept in SQLite's ``user_version`` (2: each run's continuation)."""

RUN, BUNDLE = "run", "bundle"
NOT_BUNDLED = "not bundled (sealbench bundle RUN_DIR, then sealbench verify BUNDLE)"

_SCHEMA = f"""
BEGIN;
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    run_dir TEXT NOT NULL,
    run_nonce TEXT,
    started_at TEXT NOT NULL,
    state TEXT NOT NULL,
    contract_sha256 TEXT,
    max_attempts INTEGER,
    wall_clock_s REAL,
    feedback TEXT,
    access_class TEXT,
    isolation TEXT,
    rate TEXT,
    updated_at TEXT NOT NULL,
    continuation TEXT,
    prior_continuation TEXT,
    moved_from TEXT
);
CREATE TABLE places (
    path TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    run_nonce TEXT,
    started_at TEXT,
    status TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX places_by_run_id ON places (run_id);
PRAGMA user_version = {INDEX_VERSION};
COMMIT;
"""

_MIGRATE_1 = f"""
BEGIN IMMEDIATE;
ALTER TABLE runs ADD COLUMN continuation TEXT;
ALTER TABLE runs ADD COLUMN prior_continuation TEXT;
ALTER TABLE runs ADD COLUMN moved_from TEXT;
PRAGMA user_version = {INDEX_VERSION};
COMMIT;
"""

T = TypeVar("T")


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class RunRecord:
    """One run_id as the index knows it: the first run of it made on this machine."""

    run_id: str
    run_dir: str
    run_nonce: str | None
    """The random nonce of the run's first journal event; None for journals made before nonces."""
    started_at: str
    state: str
    """claimed, started (or still running), finished, interrupted, missing, or why its journal does not verify."""
    contract_sha256: str | None = None
    max_attempts: int | None = None
    wall_clock_s: float | None = None
    feedback: str | None = None
    access_class: str | None = None
    isolation: str | None = None
    rate: str | None = None
    """The evidence sentence with its Wilson interval, or why no rate was emitted."""
    updated_at: str = ""
    continuation: str | None = None
    """The ``continuation`` of the run's latest start or resume: only a directory whose journal
    holds it continues the run; a copy whose journal stops before it was left behind."""
    prior_continuation: str | None = None
    """While a resume's first line is not yet known written: the continuation its journal ended with."""
    moved_from: str | None = None
    """The directory the run left (``runs move``, or a rename), until its next resume journals it."""


@dataclass(frozen=True)
class PlaceRecord:
    """Another place that holds a run of an indexed run_id: a bundle, or a second run directory."""

    path: str
    run_id: str
    kind: str
    run_nonce: str | None
    started_at: str | None
    status: str
    """For a bundle, what verify said; for a run directory, how it relates to the indexed run."""
    updated_at: str = ""


@dataclass(frozen=True)
class Found:
    """What one run directory or bundle on disk says about its run."""

    kind: str
    run: RunRecord
    """Its run's facts (``run_dir`` is this place's path)."""
    status: str
    """For a bundle, what verify said."""
    chain: tuple[str | None, ...] = ()
    """The ``continuation`` of each start and resume its journal holds, in order."""


@dataclass(frozen=True)
class RebuildReport:
    """What :func:`rebuild` found."""

    index: Path
    runs: int
    bundles: int
    missing: tuple[str, ...]
    twice: tuple[str, ...]
    """run_ids with more than one run on this machine (different run nonces)."""
    skipped: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The rebuild as sentences for a terminal."""
        out = [f"rebuilt {self.index}: {self.runs} run(s), {self.bundles} bundle(s)"]
        if self.missing:
            out.append(f"  {len(self.missing)} run(s) whose directory is gone stay recorded (their run_ids stay "
                       f"used): {', '.join(self.missing[:10])}")
        for run_id in self.twice:
            out.append(f"  run_id {run_id} was run more than once on this machine (see sealbench runs show {run_id})")
        out += [f"  skipped {s}" for s in self.skipped]
        return out


def data_dir(override: Path | None = None) -> Path:
    """Where the index lives: ``override``, ``$SEALBENCH_DATA_DIR``, ``$XDG_DATA_HOME/sealbench``
    or ``~/.local/share/sealbench``."""
    if override is not None:
        return override
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser().absolute()
    xdg = os.environ.get("XDG_DATA_HOME", "")
    # The XDG spec ignores a relative XDG_DATA_HOME.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "sealbench"


def now() -> str:
    from .clock import Clock

    return Clock(boot_id=None).wall()


# --------------------------------------------------------------------------- pure core


def rate_text(contract: ScoringContract, cards: Sequence[Scorecard]) -> str:
    """The rate of ``cards`` as the index shows it (sentence and Wilson interval), or the refusal."""
    from .derive import seed_event
    from .errors import Refusal
    from .score import score

    try:
        rate = score(contract, [seed_event(c) for c in cards])
    except Refusal as e:
        return f"no rate emitted: {e}"
    except ValueError as e:
        return f"no rate emitted: {e}"
    return f"{rate.sentence}; Wilson 95% [{rate.wilson_95.low:.3f}, {rate.wilson_95.high:.3f}]"


def contract_facts(contract: ScoringContract) -> dict[str, Any]:
    """The caps and access class of a contract, as the index keeps them."""
    budget, access = contract.budget, contract.access_class
    terms = f"terms read on {access.terms_read_on}" if access is not None and access.terms_read_on else "terms not read"
    return {
        "contract_sha256": contract.contract_sha256,
        "max_attempts": budget.max_attempts if budget is not None else None,
        "wall_clock_s": budget.wall_clock_s if budget is not None else None,
        "feedback": budget.feedback if budget is not None else None,
        "access_class": (f"host {access.host}; model access {access.model_access}; {terms}"
                         if access is not None else "not recorded"),
    }


def plan_index(found: Sequence[Found], remembered: Sequence[RunRecord],
               stamp: str) -> tuple[list[RunRecord], list[PlaceRecord]]:
    """The index's rows from what the files say (``found``) and the runs it had recorded.

    Per run_id, the earliest run found is the run; of the directories holding it (the same
    nonce), the one furthest along (the longest chain of continuations; the recorded one among
    equals) is its directory. Another with the same nonce is a copy, left behind or at the same
    point, or a fork when its continuations part from the run's; one with another nonce (or
    without nonces to compare) is a second run. A recorded run whose directory holds no run any
    more stays, as missing: its run_id stays used. Bundles are places of their run_id, with what
    verify said, and a fork of the run's continuations said too.
    """
    runs: dict[str, RunRecord] = {}
    chains: dict[str, tuple[str | None, ...]] = {}
    places: list[PlaceRecord] = []
    where = {r.run_id: r.run_dir for r in remembered}
    ordered = sorted(found, key=lambda f: (f.run.started_at, f.run.run_dir))
    first_of: dict[str, Found] = {}
    for f in ordered:
        if f.kind == RUN:
            first_of.setdefault(f.run.run_id, f)

    def rank(f: Found) -> tuple[int, bool, str]:
        return -len(f.chain), f.run.run_dir != where.get(f.run.run_id), f.run.run_dir

    for f in sorted((f for f in ordered if f.kind == RUN), key=rank):
        earliest = first_of[f.run.run_id].run
        if f.run.run_id not in runs and (f.run is earliest or _same_run(f.run, earliest)):
            runs[f.run.run_id] = replace(f.run, updated_at=stamp)
            chains[f.run.run_id] = f.chain
    for f in ordered:
        r = f.run
        first = runs.get(r.run_id)
        if f.kind == BUNDLE:
            status = f.status
            if first is not None and _same_run(r, first):
                status += fork_note(f.chain, chains[r.run_id], first.run_dir)
            places.append(PlaceRecord(r.run_dir, r.run_id, BUNDLE, r.run_nonce, r.started_at, status, stamp))
            continue
        assert first is not None
        if r.run_dir == first.run_dir:
            continue
        if _same_run(r, first):
            places.append(PlaceRecord(r.run_dir, r.run_id, RUN, r.run_nonce, r.started_at,
                                      copy_status(f.chain, chains[r.run_id], first.run_dir), stamp))
        else:
            places.append(PlaceRecord(r.run_dir, r.run_id, RUN, r.run_nonce, r.started_at,
                                      f"ANOTHER RUN of this run_id (run_nonce {r.run_nonce} where the first run's "
                                      f"is {first.run_nonce}): it was run more than once on this machine", stamp))
    for r in sorted(remembered, key=lambda r: r.started_at):
        if r.run_id not in runs:
            # A claim whose journal never started stays one; any other run not found is missing.
            runs[r.run_id] = replace(r, state=RunState.CLAIMED if r.state == RunState.CLAIMED else RunState.MISSING,
                                     updated_at=stamp)
    return sorted(runs.values(), key=lambda r: (r.started_at, r.run_id)), places


def _same_run(r: RunRecord, first: RunRecord) -> bool:
    return r.run_nonce is not None and r.run_nonce == first.run_nonce


def _forks(chain: Sequence[str | None], run_chain: Sequence[str | None]) -> bool:
    """Whether two journals of one run went on apart: neither's continuations begin the other's."""
    n = min(len(chain), len(run_chain))
    return tuple(chain[:n]) != tuple(run_chain[:n])


def copy_status(chain: Sequence[str | None], run_chain: Sequence[str | None], run_dir: str) -> str:
    """How a second directory holding a run relates to the run's own directory."""
    if _forks(chain, run_chain):
        return (f"ANOTHER RUN of this run_id: a fork of the run in {run_dir} (same run_nonce; continued apart "
                f"from it after a copy, so tasks it had not finished ran twice)")
    if len(chain) < len(run_chain):
        return f"a copy of the run in {run_dir} left behind (the run continued there after the copy; never resumed)"
    return (f"a copy of the run in {run_dir} (same run_nonce, same point): one of them continues "
            f"(`sealbench runs move` names which)")


def fork_note(chain: Sequence[str | None], run_chain: Sequence[str | None], run_dir: str) -> str:
    """What a bundle's status adds when its journal forks from the run's."""
    if not _forks(chain, run_chain):
        return ""
    return (f"; but ANOTHER RUN of this run_id: a fork of the run in {run_dir} (same run_nonce, continued apart "
            f"from it after a copy, so tasks it had not finished ran twice)")


def chain_of(journal: Path) -> tuple[str | None, ...]:
    """The ``continuation`` of each run_started and run_resumed line of ``journal`` (None for a
    line without one), read without verifying the chain; () when it cannot be read."""
    from .events import RUN_RESUMED, RUN_STARTED, EventError, RunHeader, parse

    marks = (json.dumps(RUN_STARTED).encode(), json.dumps(RUN_RESUMED).encode())
    out: list[str | None] = []
    try:
        with journal.open("rb") as f:
            for raw in f:
                if not any(mark in raw for mark in marks):
                    continue
                with contextlib.suppress(ValueError, EventError):
                    line = json.loads(raw)
                    event = parse(line, str(journal)) if isinstance(line, dict) else None
                    if isinstance(event, RunHeader):
                        out.append(event.continuation)
    except OSError:
        return ()
    return tuple(out)


# --------------------------------------------------------------------------- reading files


def is_place(path: Path) -> bool:
    """Whether ``path`` is a run directory or a bundle (a contract beside a journal) of a
    measured run: a replay (``run --replay``) reproduces a run and is never a run of its run_id."""
    if not ((path / "journal.jsonl").is_file() and (path / "scoring_contract.json").is_file()):
        return False
    return replay_of(path / "journal.jsonl") is None


def replay_of(journal: Path) -> dict[str, Any] | None:
    """The run a journal's run replays (its first event's ``replay_of``), or None."""
    from .events import EventError, RunHeader, parse

    first = _first_event(journal)
    try:
        event = parse(first, "journal.jsonl line 1") if first else None
    except EventError:
        return None
    return event.replay_of if isinstance(event, RunHeader) else None


def find_places(roots: Sequence[Path]) -> list[Path]:
    """Every run directory and bundle at or under ``roots`` (symlinks are not followed)."""
    out: list[Path] = []
    for root in roots:
        if is_place(root):
            out.append(root.resolve())
            continue
        for dirpath, dirnames, _ in os.walk(root):
            here = Path(dirpath)
            keep = []
            for name in sorted(dirnames):
                sub = here / name
                if sub.is_symlink():
                    continue
                if is_place(sub):
                    out.append(sub.resolve())
                else:
                    keep.append(name)
            dirnames[:] = keep
    return list(dict.fromkeys(out))


def _first_event(journal: Path) -> dict[str, Any]:
    try:
        with journal.open("rb") as f:
            event = json.loads(f.readline())
    except (OSError, ValueError):
        return {}
    return event if isinstance(event, dict) else {}


def _nonce_of(first: dict[str, Any]) -> str | None:
    """The run_nonce of a journal's first line, read without verifying the journal."""
    from .events import EventError, RunHeader, parse

    try:
        event = parse(first, "journal.jsonl line 1")
    except EventError:
        return None
    return event.run_nonce if isinstance(event, RunHeader) else None


def read_place(path: Path) -> Found:
    """What the run directory or bundle at ``path`` says about its run.

    Raises:
        ContractError: its contract is unreadable (its run_id is unknown).
    """
    from .bundle import parse_contract, verify_bundle
    from .derive import CONTRACT, JOURNAL, derive_iter, isolation_of
    from .errors import ContractError, SealbenchError, VerificationFailed
    from .events import RUN_FINISHED, RUN_INTERRUPTED, Line, RunHeader
    from .formats import Scorecard
    from .journal import iter_verified

    contract = parse_contract((path / CONTRACT).read_bytes(), str(path / CONTRACT))
    if contract.run_id is None:
        raise ContractError(f"{path / CONTRACT}: unlocked contract")
    first = _first_event(path / JOURNAL)
    chain = chain_of(path / JOURNAL)
    base = RunRecord(run_id=str(contract.run_id), run_dir=str(path), run_nonce=_nonce_of(first),
                     started_at=str(first.get("time", "")), state=RunState.STARTED,
                     continuation=chain[-1] if chain else None,
                     **contract_facts(contract))
    if (path / "SHA256SUMS").is_file():
        try:
            report = verify_bundle(path)
        except VerificationFailed as e:
            status = f"does not verify: {len(e.problems)} problem(s); first: {e.problems[0]}"
            return Found(BUNDLE, base, status, chain)
        except SealbenchError as e:
            return Found(BUNDLE, base, f"cannot be checked: {e}", chain)
        return Found(BUNDLE, replace(base, isolation=report.isolation,
                                     rate=f"{report.rate.sentence}; Wilson 95% [{report.rate.wilson_95.low:.3f}, "
                                          f"{report.rate.wilson_95.high:.3f}]"),
                     verify_status(report.signed, report.signature), chain)
    headers: list[RunHeader] = []
    last_run_event = [""]

    def events() -> Iterator[Line]:
        for line in iter_verified(path / JOURNAL):
            if line.task_id is None:
                last_run_event[0] = line.kind
                if isinstance(line.event, RunHeader):
                    headers.append(line.event)
            yield line

    try:
        files = dict(derive_iter(events(), contract.task_ids, contract.model_endpoints or ()))
    except VerificationFailed as e:
        return Found(RUN, replace(base, state=f"its journal does not verify: {e.problems[0]}"), "", chain)
    except (KeyError, TypeError, ValueError) as e:
        return Found(RUN, replace(base, state=f"its journal cannot be read ({type(e).__name__}: {e})"), "", chain)
    cards = [Scorecard.model_validate_json(line) for line in files["scorecards.jsonl"].splitlines() if line]
    state: str = {RUN_FINISHED: RunState.FINISHED, RUN_INTERRUPTED: RunState.INTERRUPTED}.get(
        last_run_event[0], RunState.STARTED)
    if headers and headers[0].contract_sha256 != contract.contract_sha256:
        state = f"its journal was made under contract {headers[0].contract_sha256}, not this one"
    return Found(RUN, replace(base, state=state, isolation=isolation_of(headers), rate=rate_text(contract, cards)), "",
                 chain)


def verify_status(signed: bool, signature: str) -> str:
    """What a bundle that verified proves, in the index's words."""
    if signed:
        return f"verifies; {signature}"
    return f"verifies; {signature}: internal consistency only"


# --------------------------------------------------------------------------- the database


def _unwritable(root: Path, err: OSError | Exception) -> str:
    why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    return (f"cannot write the runs index in {root} ({why}); make that directory writable, or set {ENV} to a "
            f"writable directory. sealbench records every run there so that a locked run_id is not run twice "
            f"on this machine")


def _corrupt(err: Exception) -> bool:
    import sqlite3

    return getattr(err, "sqlite_errorcode", None) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


@dataclass
class _Store:
    root: Path
    notes: list[str] = field(default_factory=list)

    @property
    def db(self) -> Path:
        return self.root / INDEX

    @property
    def log(self) -> Path:
        return self.root / LOG

    def connect(self, *, readonly: bool = False) -> sqlite3.Connection:
        import sqlite3

        if readonly:
            con = sqlite3.connect(f"{self.db.as_uri()}?mode=ro", uri=True, timeout=0.2, isolation_level=None)
        else:
            con = sqlite3.connect(str(self.db), timeout=0.2, isolation_level=None)
            # The log is the durable record (fsynced once per run); the database indexes it and the
            # files. A process crash cannot damage it; what a machine crash loses or damages is
            # found in the log (claim_run reads it) and rebuilt (Store.recover).
            con.execute("PRAGMA synchronous = OFF")
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version == 0 and not readonly:
                tables = con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if tables:
                    raise sqlite3.DatabaseError("an SQLite file without sealbench's schema")
                con.executescript(_SCHEMA)
            elif version == 1 and not readonly:
                con.executescript(_MIGRATE_1)
            elif version > INDEX_VERSION:
                raise RunsIndexError(f"{self.db} was written by a newer sealbench (index version {version}, this "
                                     f"one reads {INDEX_VERSION}); upgrade sealbench or set {ENV} elsewhere")
        except BaseException:
            con.close()
            raise
        return con

    def use(self, op: Callable[[sqlite3.Connection], T], *, readonly: bool = False) -> T:
        """Run ``op`` on the database; a corrupt file is moved aside, rebuilt, and ``op`` run again."""
        import sqlite3

        for attempt in (1, 2):
            try:
                return self._use_when_free(op, readonly)
            except sqlite3.DatabaseError as e:
                foreign = "without sealbench's schema" in str(e)
                if not (_corrupt(e) or foreign):
                    raise RunsIndexError(_unwritable(self.root, e)) from None
                if attempt == 2 or readonly:
                    where = (" and cannot be rebuilt from here (read-only): run `sealbench runs rebuild` where "
                             "it is writable") if readonly else ""
                    raise RunsIndexError(f"the runs index {self.db} is corrupt ({e}){where}") from None
                self.recover(e)
        raise AssertionError("unreachable")

    def _use_when_free(self, op: Callable[[sqlite3.Connection], T], readonly: bool) -> T:
        """``op`` on the database once no other process holds it in a transaction (a held lock
        is waited for as the index's own lock is: :data:`WAIT_S`, saying who holds it)."""
        import sqlite3

        done: list[T] = []

        def take() -> bool:
            try:
                con = self.connect(readonly=readonly)
                try:
                    done.append(op(con))
                finally:
                    con.close()
            except sqlite3.OperationalError as e:
                if _busy(e):
                    return False
                raise
            return True

        _wait_for(self.db, take, "a transaction on its file")
        return done[0]

    def recover(self, err: Exception) -> None:
        aside = self.root / f"{INDEX}.corrupt-{now().replace(':', '')}-{os.getpid()}"
        os.replace(self.db, aside)
        for suffix in ("-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.root / (INDEX + suffix), self.root / (aside.name + suffix))
        report = self.rebuild([])
        note = (f"sealbench: the runs index {self.db} was corrupt ({err}); moved it to {aside.name} and rebuilt it "
                f"from the {report.runs + report.bundles} place(s) it had recorded")
        self.notes.append(note)
        print(note, file=sys.stderr)

    # ------------------------------------------------------------------- log of places

    def append_log(self, kind: str, run_id: str, path: str, nonce: str | None, at: str) -> None:
        line = json.dumps({"at": at, "kind": kind, "path": path, "run_id": run_id, "run_nonce": nonce,
                           "v": INDEX_VERSION}, sort_keys=True) + "\n"
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def logged_run(self, run_id: str) -> RunRecord | None:
        """The first run of ``run_id`` the log records, for when the database lost it."""
        needle = json.dumps(run_id)
        try:
            with self.log.open(encoding="utf-8", errors="replace") as f:
                lines = [line for line in f if needle in line]
        except FileNotFoundError:
            return None
        for line in lines:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("run_id") == run_id and entry.get("kind") == RUN:
                    path = str(entry.get("path", ""))
                    started = (Path(path) / "journal.jsonl").is_file()
                    nonce = entry.get("run_nonce")
                    return RunRecord(run_id, path, nonce if isinstance(nonce, str) else None,
                                     str(entry.get("at", "")), RunState.STARTED if started else RunState.CLAIMED)
        return None

    def logged(self) -> list[dict[str, Any]]:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and isinstance(entry.get("run_id"), str) and isinstance(entry.get("path"), str):
                    out.append(entry)
        return out

    # ------------------------------------------------------------------- rebuild

    def remembered(self) -> tuple[list[RunRecord], list[str]]:
        """Runs the index and its log recorded, and every path they name."""
        runs: dict[str, RunRecord] = {}
        paths: list[str] = []
        if self.db.exists():
            import sqlite3

            with contextlib.suppress(sqlite3.DatabaseError, RunsIndexError):
                con = self.connect()
                try:
                    for r in _runs(con):
                        runs[r.run_id] = r
                        paths.append(r.run_dir)
                    paths += [str(row[0]) for row in con.execute("SELECT path FROM places")]
                finally:
                    con.close()
        for entry in self.logged():
            paths.append(entry["path"])
            if entry.get("kind") == RUN and entry["run_id"] not in runs:
                nonce = entry.get("run_nonce")
                runs[entry["run_id"]] = RunRecord(entry["run_id"], entry["path"],
                                                  nonce if isinstance(nonce, str) else None,
                                                  str(entry.get("at", "")), RunState.MISSING)
        return list(runs.values()), list(dict.fromkeys(paths))

    def rebuild(self, roots: Sequence[Path]) -> RebuildReport:
        from .errors import ContractError

        remembered, known = self.remembered()
        skipped = [f"{r}: not a directory" for r in roots if not r.is_dir()]
        candidates = find_places([r for r in roots if r.is_dir()]) + [Path(p) for p in known if is_place(Path(p))]
        found: list[Found] = []
        for path in dict.fromkeys(candidates):
            try:
                found.append(read_place(path))
            except (ContractError, OSError) as e:
                skipped.append(f"{path}: {e}")
        stamp = now()
        runs, places = plan_index(found, remembered, stamp)
        tmp = self.root / f".{INDEX}.rebuild-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fresh = _Store(self.root)
        # Built beside the index and renamed over it: a reader sees the old index or the new one.
        fresh_db = fresh.connect_at(tmp)
        try:
            with fresh_db:
                for r in runs:
                    _put_run(fresh_db, r)
                for p in places:
                    _put_place(fresh_db, p)
        finally:
            fresh_db.close()
        os.replace(tmp, self.db)
        log_tmp = self.root / f".{LOG}.rebuild-{os.getpid()}"
        with log_tmp.open("w", encoding="utf-8") as f:
            for r in runs:
                f.write(json.dumps({"at": r.started_at, "kind": RUN, "path": r.run_dir, "run_id": r.run_id,
                                    "run_nonce": r.run_nonce, "v": INDEX_VERSION}, sort_keys=True) + "\n")
            for p in places:
                f.write(json.dumps({"at": p.started_at, "kind": p.kind, "path": p.path, "run_id": p.run_id,
                                    "run_nonce": p.run_nonce, "v": INDEX_VERSION}, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(log_tmp, self.log)
        twice = sorted({p.run_id for p in places if p.kind == RUN and p.status.startswith("ANOTHER RUN")})
        return RebuildReport(index=self.db, runs=sum(1 for r in runs if r.state != RunState.MISSING),
                             bundles=sum(1 for p in places if p.kind == BUNDLE),
                             missing=tuple(r.run_id for r in runs if r.state == RunState.MISSING), twice=tuple(twice),
                             skipped=tuple(skipped))

    def connect_at(self, path: Path) -> sqlite3.Connection:
        import sqlite3

        con = sqlite3.connect(str(path), timeout=30)
        con.executescript(_SCHEMA)
        return con


_RUN_COLUMNS = ("run_id", "run_dir", "run_nonce", "started_at", "state", "contract_sha256", "max_attempts",
                "wall_clock_s", "feedback", "access_class", "isolation", "rate", "updated_at", "continuation",
                "prior_continuation", "moved_from")
_PLACE_COLUMNS = ("path", "run_id", "kind", "run_nonce", "started_at", "status", "updated_at")


def _put_run(con: sqlite3.Connection, r: RunRecord) -> None:
    con.execute(f"INSERT OR REPLACE INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES ({', '.join('?' * len(_RUN_COLUMNS))})",
                tuple(getattr(r, c) for c in _RUN_COLUMNS))


def _put_place(con: sqlite3.Connection, p: PlaceRecord) -> None:
    con.execute(f"INSERT OR REPLACE INTO places ({', '.join(_PLACE_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_PLACE_COLUMNS))})", tuple(getattr(p, c) for c in _PLACE_COLUMNS))


def _runs(con: sqlite3.Connection, run_id: str | None = None) -> list[RunRecord]:
    # An index of version 1 read where it cannot be upgraded (read-only) has no continuations.
    has = {str(row[1]) for row in con.execute("PRAGMA table_info(runs)")}
    query = f"SELECT {', '.join(c if c in has else 'NULL' for c in _RUN_COLUMNS)} FROM runs"
    rows = con.execute(query + " WHERE run_id = ?", (run_id,)) if run_id is not None else \
        con.execute(query + " ORDER BY started_at, run_id")
    return [RunRecord(*row) for row in rows]


def _places(con: sqlite3.Connection, run_id: str | None = None) -> list[PlaceRecord]:
    query = f"SELECT {', '.join(_PLACE_COLUMNS)} FROM places"
    rows = con.execute(query + " WHERE run_id = ? ORDER BY started_at, path", (run_id,)) if run_id is not None else \
        con.execute(query + " ORDER BY started_at, path")
    return [PlaceRecord(*row) for row in rows]


@contextlib.contextmanager
def _writing(data: Path | None) -> Iterator[_Store]:
    """The index, locked against every other writer for the duration."""

    root = data_dir(data)
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise RunsIndexError(_unwritable(root, e)) from None
    try:
        _wait_for(root / LOCK, lambda: _flock_now(fd), "its lock")
        yield _Store(root)
    except OSError as e:
        raise RunsIndexError(_unwritable(root, e)) from None
    finally:
        os.close(fd)


WAIT_S = 10.0
"""How long a command waits for the index's lock, or a transaction on its file, before it refuses."""


def _flock_now(fd: int) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _wait_for(path: Path, take: Callable[[], bool], what: str) -> None:
    """Call ``take`` until it returns True, for :data:`WAIT_S` at most, saying on stderr once
    who holds ``path`` while it waits.

    Raises:
        RunsIndexError: still held at the end (naming the holder; exit 3).
    """
    import time

    if take():
        return
    start = time.monotonic()
    deadline, said = start + WAIT_S, False
    while time.monotonic() < deadline:
        # Other commands hold it for moments: only a wait past a second is worth a line.
        if not said and time.monotonic() - start >= min(1.0, WAIT_S / 2):
            print(f"sealbench: waiting up to {WAIT_S:g} s for the runs index ({what}, {path}), held by "
                  f"{holders(path)} ...", file=sys.stderr, flush=True)
            said = True
        time.sleep(0.02)
        if take():
            return
    raise RunsIndexError(
        f"the runs index ({what}, {path}) stayed held for {WAIT_S:g} s by {holders(path)}; nothing was written. "
        f"Let that command end (a stopped one continues with `kill -CONT PID` or `fg`, or end it) and try again")


def holders(path: Path) -> str:
    """Who holds a lock on ``path`` (an flock or a POSIX lock, as /proc/locks lists them), in words."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            rows = f.read().splitlines()
    except OSError:
        return "another process"
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: list[int] = []
    for row in rows:
        words = row.split()
        # "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END"; waiters carry "->" and are not holders.
        if len(words) >= 6 and words[1] != "->" and words[5] == where and words[4].isdigit():
            pid = int(words[4])
            if pid != os.getpid() and pid not in pids:
                pids.append(pid)
    return ", ".join(_process(pid) for pid in pids) or "another process"


def _process(pid: int) -> str:
    """``pid N (`command`)``, and that it is stopped when it is."""
    import shlex

    try:
        argv = [a.decode("utf-8", "replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        state = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace").rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return f"pid {pid}"
    stopped = ", stopped (Ctrl-Z or SIGSTOP)" if state in ("T", "t") else ""
    return f"pid {pid} (`{shlex.join(argv)}`{stopped})"


def _busy(err: Exception) -> bool:
    import sqlite3

    return (getattr(err, "sqlite_errorcode", 0) or 0) & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _write(data: Path | None, op: Callable[[_Store, sqlite3.Connection], T]) -> T:
    with _writing(data) as store:
        return store.use(lambda con: op(store, con))


# --------------------------------------------------------------------------- what the runner records


def _refusal(run_id: str, first: RunRecord, index: Path) -> RunRefusal:
    if Path(first.run_dir, "journal.jsonl").is_file():
        again = f"`sealbench run CONTRACT --resume {first.run_dir}` continues that run"
        gone = ""
    elif first.state == RunState.CLAIMED:
        again = f"it stopped before its journal was written: `sealbench run CONTRACT --out {first.run_dir}` starts it"
        gone = ""
    else:
        again = "that run cannot be continued"
        gone = "; its journal is no longer there"
    return RunRefusal(
        f"run_id {run_id} was already run on this machine, in {first.run_dir} (started {first.started_at}{gone}). "
        f"A locked run_id is run once: {again}; to measure again, lock a new contract (a new run_id). "
        f"Recorded in {index}; see `sealbench runs show {run_id}`"
    )


def claim_run(contract: ScoringContract, run_dir: Path, header: RunHeader, *,
              data: Path | None = None) -> None:
    """Record a new run of ``contract`` in ``run_dir`` before its journal is created.

    ``header`` is the run_started event about to be journaled (its run_nonce, sandbox and
    agent). The run directory must not hold a journal (the caller has checked).

    Raises:
        RunRefusal: this machine already ran the run_id in another directory.
        RunsIndexError: the index cannot be written.
    """
    from .derive import isolation_of

    run_id = str(contract.run_id)
    record = RunRecord(run_id=run_id, run_dir=str(run_dir), run_nonce=header.run_nonce,
                       started_at=now(), state=RunState.CLAIMED, isolation=isolation_of([header]),
                       updated_at=now(), continuation=header.continuation, **contract_facts(contract))

    def op(store: _Store, con: sqlite3.Connection) -> None:
        con.execute("BEGIN IMMEDIATE")
        try:
            (first,) = _runs(con, run_id) or (store.logged_run(run_id),)
            # Only a start that never wrote its first event may start again, in its own directory:
            # a run whose journal was deleted is still a run.
            if first is not None and (first.run_dir != record.run_dir or first.state != RunState.CLAIMED):
                raise _refusal(run_id, first, store.db)
            _put_run(con, record)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        # Logged once committed: the log never names a run the index refused or lost.
        store.append_log(RUN, run_id, record.run_dir, record.run_nonce, record.started_at)

    _write(data, op)


def journal_started(contract: ScoringContract, run_dir: Path, *, data: Path | None = None) -> None:
    """Record that the run claimed in ``run_dir`` has written its first event; best effort."""

    def op(store: _Store, con: sqlite3.Connection) -> None:
        with con:
            con.execute("UPDATE runs SET state = ?, updated_at = ? WHERE run_id = ? AND run_dir = ? AND state = ?",
                        (RunState.STARTED, now(), str(contract.run_id), str(run_dir), RunState.CLAIMED))

    try:
        _write(data, op)
    except RunsIndexError as e:
        print(f"sealbench: note: {e}", file=sys.stderr)


def continue_run(contract: ScoringContract, run_dir: Path, header: RunHeader, chain: Sequence[str | None], *,
                 data: Path | None = None) -> str | None:
    """Record that the run in ``run_dir`` resumes (``header`` is its run_resumed event, ``chain``
    the continuation of each start and resume its journal holds).

    One directory continues a run. Its journal must hold the run's latest continuation (a copy
    whose journal stops before it was left behind when the run went on elsewhere), and a
    directory other than the run's own continues it only once the run's own no longer holds it
    (renamed away) or ``sealbench runs move`` moved the run here.

    Returns:
        The directory the run continued in before, when it moved here; else None.

    Raises:
        RunRefusal: this machine ran the run_id in another directory, and the run here is not
            that one (another run_nonce), or a copy of it left behind or at the same point.
        RunsIndexError: the index cannot be written.
    """
    from .derive import isolation_of

    run_id = str(contract.run_id)
    nonce = header.run_nonce
    here = str(run_dir)
    moved: list[str | None] = [None]

    def op(store: _Store, con: sqlite3.Connection) -> None:
        con.execute("BEGIN IMMEDIATE")
        try:
            (first,) = _runs(con, run_id) or (None,)
            if first is not None:
                same = nonce is not None and first.run_nonce == nonce
                if first.run_dir != here and not same:
                    raise _refusal(run_id, first, store.db)
                if not _holds(first, chain, here):
                    raise _left_behind(run_id, here, first)
                if first.run_dir != here:
                    # A journal gone (renamed away) holds nothing; an empty one still holds the run.
                    own = Path(first.run_dir, "journal.jsonl")
                    if own.exists() and _holds(first, chain_of(own), first.run_dir):
                        raise _a_copy(run_id, here, first)
                    moved[0] = first.run_dir  # renamed, or copied and the original removed
                else:
                    moved[0] = first.moved_from
            else:
                # A run started before this index existed (or on a machine whose index was lost).
                first = RunRecord(run_id=run_id, run_dir="", run_nonce=nonce, started_at=now(),
                                  state=RunState.STARTED, isolation=isolation_of([header]), **contract_facts(contract))
            _put_run(con, replace(first, run_dir=here, state=RunState.STARTED, updated_at=now(),
                                  continuation=header.continuation, prior_continuation=chain[-1] if chain else None,
                                  moved_from=moved[0]))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        if first.run_dir != here or first.state == RunState.MISSING:
            store.append_log(RUN, run_id, here, nonce, first.started_at)

    _write(data, op)
    return moved[0]


def _holds(run: RunRecord, chain: Sequence[str | None], where: str) -> bool:
    """Whether a journal with ``chain`` in ``where`` holds the run's latest continuation: its own
    directory's resume whose first line may not be written also does."""
    if run.continuation is None or run.continuation in chain:
        return True
    if not chain and where == run.run_dir:
        return True  # its journal was killed before its first line: the run starts afresh, here
    return run.prior_continuation is not None and where == run.run_dir and run.prior_continuation in chain


def _left_behind(run_id: str, here: str, run: RunRecord) -> RunRefusal:
    return RunRefusal(
        f"{here} holds a copy of run {run_id} left behind: the run went on in {run.run_dir} (last resumed "
        f"{run.updated_at}) after this copy was made. A copy left behind is never resumed, or the tasks it had not "
        f"finished would run twice; continue the run in {run.run_dir} (see `sealbench runs show {run_id}`)")


def _a_copy(run_id: str, here: str, run: RunRecord) -> RunRefusal:
    return RunRefusal(
        f"{here} holds a copy of run {run_id}, whose directory is {run.run_dir}: one run continues in one directory, "
        f"or the tasks it had not finished would run twice. Resume it there (`sealbench run CONTRACT --resume "
        f"{run.run_dir}`), or move the run here first: `sealbench runs move {run.run_dir} {here}` (the run then "
        f"continues only here)")


def continuation_written(contract: ScoringContract, run_dir: Path, header: RunHeader, *,
                         data: Path | None = None) -> None:
    """Record that the resume in ``run_dir`` wrote its first line (``header``); best effort."""

    def op(store: _Store, con: sqlite3.Connection) -> None:
        with con:
            con.execute("UPDATE runs SET prior_continuation = NULL, moved_from = NULL, updated_at = ? "
                        "WHERE run_id = ? AND run_dir = ? AND continuation = ?",
                        (now(), str(contract.run_id), str(run_dir), header.continuation))

    try:
        _write(data, op)
    except RunsIndexError as e:
        print(f"sealbench: note: {e}", file=sys.stderr)


MOVED_NOTE = "MOVED.txt"
"""Left in a run directory whose run ``runs move`` moved elsewhere (for people; the index decides)."""


def move_run(old: Path, new: Path, *, data: Path | None = None) -> str:
    """Move the run recorded in ``old`` to ``new``, a copy of it at the same point: the run
    continues only in ``new`` (its next resume journals where it came from); ``old`` is retired.

    Returns:
        The run_id moved.

    Raises:
        RunRefusal: ``new`` holds no run, another one, or a copy left behind; the index records
            the run elsewhere; a process writes ``old`` or ``new`` now.
        RunsIndexError: the index cannot be written.
    """
    from .files import write_atomic
    from .lock import hold_writer

    old, new = old.resolve(), new.resolve()
    if not is_place(new) or (new / "SHA256SUMS").is_file():
        raise RunRefusal(f"{new} holds no run directory (a journal.jsonl beside a scoring_contract.json)")
    from .events import EventError, RunHeader, parse

    first = _first_event(new / "journal.jsonl")
    try:
        header = parse(first, "journal.jsonl line 1") if first else None
    except EventError:
        header = None
    run_id = header.run_id if isinstance(header, RunHeader) else None
    nonce = header.run_nonce if isinstance(header, RunHeader) else None
    if run_id is None:
        raise RunRefusal(f"{new / 'journal.jsonl'}: its first line names no run_id")
    if old == new:
        raise RunRefusal(f"{old}: the run is already there")
    chain = chain_of(new / "journal.jsonl")
    locks = [hold_writer(d, ["sealbench", "runs", "move", str(old), str(new)]) for d in (new, old) if d.is_dir()]

    def op(store: _Store, con: sqlite3.Connection) -> None:
        con.execute("BEGIN IMMEDIATE")
        try:
            (run,) = _runs(con, run_id) or (None,)
            if run is None:
                raise RunRefusal(f"the runs index {store.db} records no run {run_id}; `sealbench runs rebuild "
                                 f"{old}` records it first")
            if run.run_dir != str(old):
                raise RunRefusal(f"the runs index records run {run_id} in {run.run_dir}, not {old}; "
                                 f"`sealbench runs move {run.run_dir} {new}` moves it from there")
            if nonce is None or nonce != run.run_nonce:
                raise _refusal(run_id, run, store.db)
            if not _holds(run, chain, str(old)):
                raise _left_behind(run_id, str(new), run)
            _put_run(con, replace(run, run_dir=str(new), updated_at=now(), moved_from=str(old),
                                  prior_continuation=run.prior_continuation if run.prior_continuation in chain else None))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        store.append_log(RUN, run_id, str(new), nonce, run.started_at)

    try:
        _write(data, op)
        with contextlib.suppress(OSError):
            if old.is_dir():
                write_atomic(old / MOVED_NOTE, f"run {run_id} moved to {new} on {now()} (sealbench runs move): it "
                             f"continues there, and this directory is never resumed.\n".encode())
    finally:
        for lock in locks:
            lock.release()
    return run_id


def record_end(contract: ScoringContract, result: RunResult, *, data: Path | None = None) -> None:
    """Record how a run ended and its rate; best effort (a note on stderr when it cannot)."""
    state = RunState.FINISHED if result.complete else RunState.INTERRUPTED if result.interrupted else RunState.STARTED
    rate = rate_text(contract, result.scorecards or []) if result.complete else None
    run_id, run_dir = str(contract.run_id), str(result.run_dir)

    def op(store: _Store, con: sqlite3.Connection) -> None:
        with con:
            con.execute("UPDATE runs SET state = ?, rate = coalesce(?, rate), updated_at = ? "
                        "WHERE run_id = ? AND run_dir = ?", (state, rate, now(), run_id, run_dir))

    try:
        _write(data, op)
    except RunsIndexError as e:
        print(f"sealbench: note: {e}", file=sys.stderr)


def record_bundle(bundle: Path, status: str, *, data: Path | None = None) -> str:
    """Record a bundle and what verify said of it; best effort (a note on stderr when it cannot).

    Returns:
        ``status``, and that the bundle's journal forks from its run's on this machine, when it does.
    """
    from .derive import CONTRACT, JOURNAL

    try:
        raw = json.loads((bundle / CONTRACT).read_bytes())
        run_id = raw.get("run_id") if isinstance(raw, dict) else None
    except (OSError, ValueError):
        return status
    if not isinstance(run_id, str):
        return status
    first = _first_event(bundle / JOURNAL)
    nonce = _nonce_of(first)
    place = PlaceRecord(str(bundle.resolve()), run_id, BUNDLE, nonce, str(first.get("time", "")), status, now())
    said = [status]

    def op(store: _Store, con: sqlite3.Connection) -> None:
        nonlocal place
        (run,) = _runs(con, run_id) or (None,)
        if run is not None and nonce is not None and nonce == run.run_nonce and Path(run.run_dir).is_dir():
            note = fork_note(chain_of(bundle / JOURNAL), chain_of(Path(run.run_dir, JOURNAL)), run.run_dir)
            place = replace(place, status=status + note)
            said[0] = place.status
        with con:
            known = con.execute("SELECT 1 FROM places WHERE path = ?", (place.path,)).fetchone()
            _put_place(con, place)
        if known is None:
            store.append_log(BUNDLE, run_id, place.path, nonce, place.started_at or now())

    try:
        _write(data, op)
    except RunsIndexError as e:
        print(f"sealbench: note: {e}", file=sys.stderr)
    return said[0]


# --------------------------------------------------------------------------- what people read


def rebuild(roots: Sequence[Path], *, data: Path | None = None) -> RebuildReport:
    """Recreate the index from the run directories and bundles at or under ``roots`` and the
    places it had recorded.

    Raises:
        RunsIndexError: the index cannot be written.
    """
    with _writing(data) as store:
        return store.rebuild([Path(r) for r in roots])


def _read(data: Path | None, op: Callable[[sqlite3.Connection], T], empty: T) -> T:
    root = data_dir(data)
    store = _Store(root)
    if not store.db.exists():
        return empty
    if os.access(root, os.W_OK):
        with _writing(data) as locked:
            return locked.use(op)
    return store.use(op, readonly=True)


@dataclass(frozen=True)
class IndexView:
    """What the index knows, as sentences (runs by start time: never a ranking)."""

    index: Path
    runs: tuple[RunRecord, ...]
    places: tuple[PlaceRecord, ...]

    def list_lines(self) -> list[str]:
        """One line per run, oldest first, then bundles of runs not run here."""
        out = [f"runs recorded in {self.index}, oldest first (by start time; not a ranking)"]
        if not self.runs:
            out.append("  none")
        by_run = _by_run(self.places)
        for r in self.runs:
            out.append(f"  {r.started_at}  {r.run_id}  {_state(r)}")
            out.append(f"      {r.rate or 'no rate recorded'}; {_caps(r)}; {_isolation(r)}; "
                       f"{_verify(by_run.get(r.run_id, []))}")
            out.append(f"      {r.run_dir}")
        orphans = [p for p in self.places if p.run_id not in {r.run_id for r in self.runs}]
        if orphans:
            out.append("bundles whose run this index has not recorded (made elsewhere, or its directory never seen):")
            out += [f"  {p.run_id}  {p.path}: {p.status}" for p in orphans]
        return out


@dataclass(frozen=True)
class RunView:
    """One run_id as the index knows it."""

    index: Path
    run_id: str
    run: RunRecord | None
    places: tuple[PlaceRecord, ...]

    def lines(self) -> list[str]:
        """Every fact the index holds about the run_id."""
        out = [f"run_id {self.run_id} (from {self.index})"]
        r = self.run
        if r is not None:
            out += [
                f"  run directory: {r.run_dir}" + (f" (moved from {r.moved_from}; its next resume journals it)"
                                                    if r.moved_from else ""),
                f"  state: {_state(r)}",
                f"  latest continuation: {r.continuation or 'not recorded'} (only a journal that holds it resumes)",
                f"  started: {r.started_at}; run_nonce {r.run_nonce or 'not recorded (a journal made before nonces)'}",
                f"  caps: {_caps(r)}",
                f"  access class: {r.access_class or 'not recorded'}",
                f"  {_isolation(r)}",
                f"  rate: {r.rate or 'not recorded (the run has not finished here)'}",
                f"  contract: {r.contract_sha256 or 'not recorded'}",
            ]
        else:
            out.append("  no run of it recorded on this machine (its bundles may come from elsewhere)")
        bundles = [p for p in self.places if p.kind == BUNDLE]
        out.append(f"  verify: {_verify(bundles)}" if not bundles else "  bundles:")
        out += [f"    {p.path}: {p.status}" for p in bundles]
        for p in self.places:
            if p.kind == RUN:
                out.append(f"  also in {p.path}: {p.status}")
        return out


def _by_run(places: Sequence[PlaceRecord]) -> dict[str, list[PlaceRecord]]:
    out: dict[str, list[PlaceRecord]] = {}
    for p in places:
        out.setdefault(p.run_id, []).append(p)
    return out


def _state(r: RunRecord) -> str:
    if r.state == RunState.CLAIMED:
        return "claimed, but its journal never started (run it again into the same directory)"
    if r.state == RunState.STARTED:
        return "started, not finished (still running, or stopped: --resume continues it)"
    if r.state == RunState.INTERRUPTED:
        return "interrupted (--resume continues it)"
    if r.state == RunState.MISSING:
        return f"missing: no run in {r.run_dir} any more; its run_id stays used on this machine"
    return r.state


def _caps(r: RunRecord) -> str:
    if r.max_attempts is None:
        return "caps not recorded"
    return f"max_attempts {r.max_attempts}, wall_clock_s {r.wall_clock_s:g}, feedback {r.feedback}"


def _isolation(r: RunRecord) -> str:
    from .derive import isolation_sentence

    return f"isolation: {isolation_sentence(r.isolation)}" if r.isolation else "isolation: not recorded"


def _verify(places: Sequence[PlaceRecord]) -> str:
    bundles = [p for p in places if p.kind == BUNDLE]
    if not bundles:
        return NOT_BUNDLED
    twice = [p for p in places if p.kind == RUN and p.status.startswith("ANOTHER RUN")]
    verdicts = "; ".join(f"bundle {p.status}" for p in bundles)
    return verdicts + (f"; {len(twice)} other run(s) of this run_id found" if twice else "")


def list_runs(*, data: Path | None = None) -> IndexView:
    """Every run the index knows, by start time.

    Raises:
        RunsIndexError: the index cannot be read.
    """
    nothing: tuple[list[RunRecord], list[PlaceRecord]] = ([], [])
    runs, places = _read(data, lambda con: (_runs(con), _places(con)), nothing)
    return IndexView(data_dir(data) / INDEX, tuple(runs), tuple(places))


def show_run(run_id: str, *, data: Path | None = None) -> RunView:
    """What the index knows of ``run_id``.

    Raises:
        RunsIndexError: the index cannot be read.
        UsageError: the index knows nothing of ``run_id``.
    """
    from .errors import UsageError

    nothing: tuple[list[RunRecord], list[PlaceRecord]] = ([], [])
    runs, places = _read(data, lambda con: (_runs(con, run_id), _places(con, run_id)), nothing)
    if not runs and not places:
        raise UsageError(f"the runs index {data_dir(data) / INDEX} knows no run_id {run_id!r} "
                         f"(`sealbench runs list` lists what it knows; `sealbench runs rebuild DIRS` adds runs)")
    return RunView(data_dir(data) / INDEX, run_id, runs[0] if runs else None, tuple(places))
