"""The run journal: append-only JSON lines, one writer, every event hash-chained.

Each line is one :class:`~sealbench.formats.JournalEvent`: ``seq``, UTC ``time``, ``kind``,
``task_id``, ``attempt``, ``payload``, the previous event's hash (``prev``) and its own
(``hash``, sha256 over the canonical bytes of every other field). Version 2 lines also carry
``mono_ms`` and ``boot_id`` (:mod:`sealbench.clock`), inside the hash: they are the evidence
time is charged from. Version 1 lines (older releases) are read and verified as they were
written; a resumed version 1 journal continues with version 2 lines.

Every append is flushed and fsynced before :meth:`Journal.append` returns, so the runner acts
only on what is on disk; a heartbeat is only written (see :mod:`sealbench.clock`). A crash can
leave at most a torn last line; :func:`open_for_resume` moves it aside (nothing is deleted),
records the repair as an event and continues the chain.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time as _time
from collections.abc import Iterator
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

from . import events as ev
from .clock import Clock
from .digest import canonical_json, sha256_bytes, strict_json
from .errors import STORAGE_ERRNOS, HarnessError, RunRefusal, StorageError, VerificationFailed

JOURNAL_VERSION = 2
_FIELDS_V1 = ev.FIELDS_V1
_FIELDS = ev.FIELDS_V2
# Each version's lines keep exactly the fields it was written with: a bundle made by an older
# release verifies, and derives the same bytes, as it did then.
_FIELDS_BY_VERSION: dict[int, frozenset[str]] = {1: frozenset(_FIELDS_V1), 2: frozenset(_FIELDS)}


def event_hash(event: dict[str, Any]) -> str:
    """The hash of an event: over the canonical bytes of every field except ``hash``."""
    return sha256_bytes(canonical_json({k: v for k, v in event.items() if k != "hash"}))


@dataclass
class ChainReport:
    """What reading a journal found: every line that is a JSON object (``events``, as parsed),
    the typed lines among them (``lines``: those whose event this release reads), and every
    problem, naming its line."""

    events: list[dict[str, Any]] = field(default_factory=list)
    lines: list[ev.Line] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    torn_tail: bytes = b""
    good_bytes: int = 0


def check_event(event: Any, lineno: int, seq: int, prev: str | None, *, hashed: bool | None = None) -> list[str]:
    """Everything wrong with one parsed line at ``lineno`` given the chain so far (its event
    is checked apart: :func:`typed_line`). ``hashed`` says whether its hash was found to match
    already (None: checked here)."""
    where = f"journal.jsonl line {lineno}"
    if not isinstance(event, dict):
        return [f"{where}: not a JSON object"]
    problems = []
    version = event.get("journal_version")
    fields = _FIELDS_BY_VERSION.get(version) if type(version) is int else None
    if fields is None:
        return [f"{where}: journal_version {version!r} is not one this release reads"]
    if set(event) != fields:
        problems.append(f"{where}: fields {sorted(event)} differ from the journal format (version {version})")
        return problems
    if event["seq"] != seq:
        problems.append(f"{where}: seq {event['seq']} where {seq} was expected (lines reordered, added or dropped)")
    if event["prev"] != prev:
        problems.append(f"{where}: prev does not match the hash of the event before it (chain broken)")
    if not (hashed if hashed is not None else event["hash"] == event_hash(event)):
        problems.append(f"{where}: content does not match its hash (edited)")
    return problems


def _shaped(event: dict[str, Any]) -> bool:
    """True when a line has exactly its version's fields (its event can be read)."""
    version = event.get("journal_version")
    fields = _FIELDS_BY_VERSION.get(version) if type(version) is int else None
    return fields is not None and event.keys() == fields


def typed_line(event: dict[str, Any], lineno: int, canonical: bytes | None = None) -> ev.Line:
    """The typed line of a parsed line whose envelope :func:`check_event` accepted (``canonical``:
    its canonical bytes, when the reader keeps them).

    Raises:
        EventError: a kind or a payload field this release does not read, named by its line.
    """
    return ev.line_of(event, lambda: f"journal.jsonl line {lineno}", canonical)


def iter_lines(path: Path, line_cap: int | None = None) -> Iterator[tuple[int, bytes, bool]]:
    """Yield ``(line_number, raw_line_without_newline, complete)`` from a journal file.

    With ``line_cap``, a line longer than that many bytes is never held: it is yielded as
    :data:`TOO_LONG` (complete, so the chain check names it) and the file is read on past it in
    pieces of at most ``line_cap`` bytes.
    """
    with path.open("rb") as f:
        if line_cap is None:
            for lineno, raw in enumerate(f, start=1):
                complete = raw.endswith(b"\n")
                yield lineno, raw[:-1] if complete else raw, complete
            return
        lineno = 0
        while raw := f.readline(line_cap + 1):
            lineno += 1
            if len(raw) > line_cap and not raw.endswith(b"\n"):
                while (rest := f.readline(line_cap)) and not rest.endswith(b"\n"):
                    pass
                yield lineno, TOO_LONG, True
                continue
            complete = raw.endswith(b"\n")
            yield lineno, raw[:-1] if complete else raw, complete


TOO_LONG = b"\x00too long"
"""What :func:`iter_lines` yields for a line longer than its cap (never JSON: named by its line)."""


def _scalar_json(value: Any) -> bytes:
    """:func:`canonical_json` of one value, without the encoder's machinery for the usual ones."""
    if value is None:
        return b"null"
    if type(value) is int:
        return str(value).encode()
    if type(value) is str:
        return encode_basestring(value).encode("utf-8")
    return canonical_json(value)


def _hashed_canonical(event: dict[str, Any]) -> tuple[bytes, bool]:
    """The canonical bytes of a line whose fields are its version's, and whether its ``hash``
    is the hash of them without it: one serialisation for both (the hash's input is these
    bytes less the ``"hash"`` member, which sorts after ``attempt`` and ``boot_id``)."""
    full = canonical_json(event)
    prefix = b'{"attempt":' + _scalar_json(event["attempt"])
    if "boot_id" in event:
        prefix += b',"boot_id":' + _scalar_json(event["boot_id"])
    member = b',"hash":' + _scalar_json(event["hash"])
    if full.startswith(prefix + member):
        body = prefix + full[len(prefix) + len(member):]
        return full, "sha256:" + hashlib.sha256(body).hexdigest() == event["hash"]
    return full, event["hash"] == event_hash(event)  # never in a dict of these keys; kept exact


@dataclass
class ChainScan:
    """What :func:`scan_chain` found, filled in as it goes: every problem, naming its line, a
    torn last line apart, and how many bytes of whole lines precede it."""

    problems: list[str] = field(default_factory=list)
    torn_tail: bytes = b""
    good_bytes: int = 0


def scan_chain(path: Path, scan: ChainScan, *, line_cap: int | None = None,
               canonical: bool = False) -> Iterator[tuple[dict[str, Any], ev.Line | None]]:
    """Read a journal line by line, checking the hash chain as it goes; yield each line that is
    a JSON object with its typed line (None when its event is not one this release reads).

    Nothing but the line at hand is held. Problems go to ``scan.problems`` as they are found (a
    torn last line to ``scan.torn_tail``); ``line_cap`` bounds the bytes of one line read (see
    :func:`iter_lines`). With ``canonical``, each typed line keeps its canonical bytes
    (:attr:`events.Line.canonical`): a trace is then made of them without serialising again.
    """
    prev: str | None = None
    seq = 0
    offset = 0
    same: dict[str, str] = {}
    for lineno, raw, complete in iter_lines(path, line_cap):
        if not complete:
            # Only the last line can lack its newline: a crash mid-write, repaired, not judged.
            scan.torn_tail = raw
            continue
        seq += 1
        offset += len(raw) + 1
        if raw is TOO_LONG:
            scan.problems.append(f"journal.jsonl line {lineno}: longer than {line_cap} bytes, not read (edited)")
            continue
        try:
            event = strict_json(raw)
        except ValueError:
            scan.problems.append(f"journal.jsonl line {lineno}: not valid JSON (edited)")
            continue
        full = None
        if type(event) is dict and type(tid := event.get("task_id")) is str:
            # One string per task, however many lines and checks keep it.
            event["task_id"] = same.setdefault(tid, tid)
        if _shaped(event):
            full, hashed = _hashed_canonical(event)
            problems = check_event(event, lineno, seq - 1, prev, hashed=hashed)
        else:
            problems = check_event(event, lineno, seq - 1, prev)
        scan.problems.extend(problems)
        scan.good_bytes = offset
        if not isinstance(event, dict):
            continue
        prev = event.get("hash")
        line: ev.Line | None = None
        if full is not None:
            # Typed even when the chain is broken at this line: verify then says what it means too.
            try:
                line = typed_line(event, lineno, full if canonical else None)
            except ev.EventError as e:
                scan.problems.append(str(e))
        yield event, line


def read_chain(path: Path, *, keep_events: bool = True) -> ChainReport:
    """Read and verify a journal; report every problem, and a torn last line apart.

    A last line without its newline is a torn tail (a crash mid-write), kept apart for
    repair. Every other defect is listed in ``problems`` with its line.
    """
    scan = ChainScan()
    report = ChainReport(problems=scan.problems)
    for event, line in scan_chain(path, scan):
        if keep_events:
            report.events.append(event)
            if line is not None:
                report.lines.append(line)
    report.torn_tail = scan.torn_tail
    report.good_bytes = scan.good_bytes
    return report


def iter_verified(path: Path) -> Iterator[ev.Line]:
    """Yield a journal's typed lines one by one, verifying the chain as it goes.

    Raises:
        VerificationFailed: at the first defect (a torn last line included).
    """
    prev: str | None = None
    for seq, (lineno, raw, complete) in enumerate(iter_lines(path)):
        if not complete:
            raise VerificationFailed([f"journal.jsonl line {lineno}: torn last line (resume the run to repair it)"])
        try:
            event = strict_json(raw)
        except ValueError:
            raise VerificationFailed([f"journal.jsonl line {lineno}: not valid JSON (edited)"]) from None
        problems = check_event(event, lineno, seq, prev)
        if problems:
            raise VerificationFailed(problems)
        try:
            line = typed_line(event, lineno)
        except ev.EventError as e:
            raise VerificationFailed([str(e)]) from None
        prev = event["hash"]
        yield line


class Journal:
    """The single writer of one journal file. Thread-safe; every append is durable.

    Appends are ordered and written under one lock; the fsync that makes them durable is a
    group commit: a thread whose line an fsync begun after its write has already covered
    returns without its own. After a failed fsync nothing more is appended (what reached
    the disk is unknown until the chain is verified on resume). Before each write the file
    must still be the one opened and exactly as long as this writer left it: anything else
    means a second writer, and nothing more is appended.

    ``last_written`` is the monotonic time (seconds) stamped on the last line written, or the
    time the journal was opened: the heartbeat's and the watchdog's reference.
    """

    def __init__(self, path: Path, seq: int, prev: str | None, *, fsync: bool = True,
                 clock: Clock | None = None, exclusive: bool = False) -> None:
        self.path = path
        self._path_text = os.fspath(path)
        self._seq = seq
        self._prev = prev
        self._fsync = fsync
        self._clock = clock or Clock()
        self.last_written = _time.monotonic()
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_EXCL if exclusive else 0)
        self._fd = os.open(path, flags, 0o644)
        st = os.fstat(self._fd)
        self._size = st.st_size
        self._file_id = (st.st_dev, st.st_ino)
        self._synced = self._size
        self._failed: str | None = None
        self._failed_storage = False

    @classmethod
    def create(cls, path: Path, *, fsync: bool = True, clock: Clock | None = None) -> Journal:
        """Start a new journal; refuses to touch an existing one (``O_EXCL``: even one created
        a moment ago by another process).

        Raises:
            RunRefusal: the file exists already (resume it instead).
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return cls(path, 0, None, fsync=fsync, clock=clock, exclusive=True)
        except FileExistsError:
            raise RunRefusal(f"{path} exists; resume it with --resume or choose a new --out") from None

    def _raise_if_failed(self) -> None:
        if self._failed is not None:
            raise (StorageError if self._failed_storage else HarnessError)(self._failed)

    def _check_sole_writer(self) -> None:
        """Stop before writing if anything but this writer changed the file (a second writer).

        One ``stat`` of the journal's name tells both: when it still names the file this writer
        holds open, its size is that file's size. (It runs before every line, on the thread that
        journals: every system call there lets the interpreter lock go to another thread.)"""
        try:
            named = os.stat(self._path_text)
        except FileNotFoundError:
            named = None
        if named is None or (named.st_dev, named.st_ino) != self._file_id:
            problem = "was removed or replaced under this run"
        elif named.st_size != self._size:
            problem = (f"is {named.st_size} bytes where this run wrote {self._size}: another process "
                       f"{'appended to' if named.st_size > self._size else 'cut'} it")
        else:
            return
        self._failed = (f"{self.path.name} {problem}; the run stopped before writing again. Only one "
                        f"process may write a run: check the journal (sealbench verify, or resume it to "
                        f"have it checked) and look for a second writer")
        raise HarnessError(self._failed)

    @property
    def next_seq(self) -> int:
        return self._seq

    def append(self, event: ev.Event, *, time: str | None = None, durable: bool = True) -> dict[str, Any]:
        """Append one event and make it durable before returning its line.

        ``durable=False`` only writes it (a heartbeat: the page cache keeps it past the death
        of this process; a later fsync covers it).

        Raises:
            StorageError: the storage failed (disk full, quota, I/O error, read-only); the
                file is cut back to its last complete event so nothing half-written remains.
            HarnessError: any other write failure; or the file changed under this writer
                (another process appended to, cut or replaced it), found before writing.
        """
        with self._lock:
            self._raise_if_failed()
            self._check_sole_writer()
            mono = _time.monotonic()
            try:
                line_fields = ev.envelope(JOURNAL_VERSION, self._seq, time or self._clock.wall(),
                                          int(mono * 1000), self._clock.boot_id, event, self._prev)
                line_fields["hash"] = event_hash(line_fields)
                line = canonical_json(line_fields) + b"\n"
            except (ValueError, TypeError) as e:  # UnicodeEncodeError included: nothing was written
                raise HarnessError(f"a {event.kind} event could not be written as JSON ({e}); nothing of it "
                                   f"was written") from None
            try:
                written = os.write(self._fd, line)
                if written != len(line):
                    raise OSError(28, "short write")
            except OSError as e:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._size)
                message = (f"journal write failed ({e.strerror or e}); the run stopped with every "
                           f"earlier event kept: free space and resume")
                if e.errno in STORAGE_ERRNOS:
                    raise StorageError(message) from e
                raise HarnessError(message) from None
            self._size += len(line)
            self._seq += 1
            self._prev = line_fields["hash"]
            self.last_written = mono
            end = self._size
        if self._fsync and durable:
            self._sync(end)
        return line_fields

    def sync(self) -> None:
        """Make every line appended so far durable (those appended with ``durable=False`` too).

        Raises:
            StorageError, HarnessError: the fsync failed (see :meth:`append`).
        """
        if not self._fsync:
            return
        with self._lock:
            self._raise_if_failed()
            end = self._size
        self._sync(end)

    def _sync(self, end: int) -> None:
        """Return once the file is durable up to byte ``end`` (the end of the caller's line)."""
        with self._sync_lock:
            if self._synced >= end:
                return  # an fsync begun after our write covered it
            self._raise_if_failed()
            covers = self._size  # every byte counted here was written before the fsync below
            try:
                os.fsync(self._fd)
            except OSError as e:
                self._failed = (f"journal fsync failed ({e.strerror or e}); the run stopped: resume verifies "
                                f"what reached the disk")
                self._failed_storage = e.errno in STORAGE_ERRNOS
                self._raise_if_failed()
            self._synced = covers

    def close(self) -> None:
        with self._sync_lock, self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def open_for_resume(path: Path, *, fsync: bool = True,
                    clock: Clock | None = None) -> tuple[Journal, list[ev.Line]]:
    """Verify a journal, repair a torn last line, and reopen it for appending.

    The torn bytes are moved to ``journal.torn-<seq>`` beside the journal (nothing is
    deleted) and a ``journal_repaired`` event records their length and digest.

    Raises:
        RunRefusal: no journal at ``path``.
        VerificationFailed: the chain is broken anywhere but a torn last line, or a line holds an
            event this release does not read (an unknown kind or field).
    """
    if not path.is_file():
        raise RunRefusal(f"{path}: no journal to resume")
    report = read_chain(path)
    if report.problems:
        raise VerificationFailed(report.problems)
    events = report.lines
    prev = events[-1].raw["hash"] if events else None
    torn = report.torn_tail
    if torn:
        aside = path.with_name(f"{path.name}.torn-{len(events)}")
        aside.write_bytes(torn)
        with path.open("r+b") as f:
            f.truncate(report.good_bytes)
            f.flush()
            os.fsync(f.fileno())
    journal = Journal(path, len(events), prev, fsync=fsync, clock=clock)
    if torn:
        repaired = ev.JournalRepaired(torn_bytes=len(torn), torn_sha256=sha256_bytes(torn), moved_to=aside.name)
        events.append(typed_line(journal.append(repaired), len(events) + 1))
    return journal, events
