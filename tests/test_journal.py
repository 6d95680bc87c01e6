"""The journal: hash-chained, append-only, durable; tampering is named, a torn tail repaired."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealbench import events as ev
from sealbench.errors import RunRefusal, StorageError, VerificationFailed
from sealbench.journal import Journal, event_hash, open_for_resume, read_chain


def write_journal(path: Path, n: int = 5) -> list[dict[str, object]]:
    j = Journal.create(path)
    events = [j.append(ev.AttemptStarted(task_id=f"t{i % 2}", attempt=1, budget_s=i)) for i in range(n)]
    j.close()
    return events


def test_events_chain_and_verify(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    events = write_journal(path)
    report = read_chain(path)
    assert report.problems == [] and report.torn_tail == b""
    assert report.events == events
    assert events[0]["prev"] is None and events[1]["prev"] == events[0]["hash"]
    assert all(e["hash"] == event_hash(e) for e in events)


def test_create_refuses_existing_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    write_journal(path)
    with pytest.raises(RunRefusal, match="exists; resume it"):
        Journal.create(path)


@settings(max_examples=40, deadline=None)
@given(line=st.integers(0, 5), column=st.integers(0, 400), byte=st.integers(0, 255))
def test_one_edited_byte_is_named_by_line(tmp_path_factory: pytest.TempPathFactory, line: int, column: int,
                                          byte: int) -> None:
    path = tmp_path_factory.mktemp("j") / "journal.jsonl"
    write_journal(path, 6)
    lines = path.read_bytes().split(b"\n")
    target = bytearray(lines[line])
    column %= len(target)
    if target[column] == byte or byte == ord("\n"):
        return
    target[column] = byte
    lines[line] = bytes(target)
    path.write_bytes(b"\n".join(lines))
    report = read_chain(path)
    assert any(f"line {line + 1}:" in p for p in report.problems), report.problems


def test_an_edit_that_stays_valid_json_is_named_by_its_line(tmp_path: Path) -> None:
    # Only the line's own hash can tell: the JSON parses, the event is typed, the chain's links
    # are the recorded hashes. (The property test above finds such edits by chance.)
    path = tmp_path / "journal.jsonl"
    write_journal(path, 6)
    lines = path.read_bytes().split(b"\n")
    assert b'"task_id":"t1"' in lines[3]
    lines[3] = lines[3].replace(b'"task_id":"t1"', b'"task_id":"t0"')
    path.write_bytes(b"\n".join(lines))
    assert any("line 4:" in p for p in read_chain(path).problems)


def test_reordered_lines_are_named(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    write_journal(path)
    lines = path.read_text().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    path.write_text("".join(lines))
    problems = read_chain(path).problems
    assert any("line 2:" in p and "seq 2 where 1" in p for p in problems)


def test_dropped_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    write_journal(path)
    lines = path.read_text().splitlines(keepends=True)
    del lines[2]
    path.write_text("".join(lines))
    assert any("line 3:" in p for p in read_chain(path).problems)


def test_torn_last_line_is_repaired_on_resume_and_nothing_before_it_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    events = write_journal(path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 17])
    report = read_chain(path)
    assert report.problems == [] and report.torn_tail and len(report.events) == 4
    journal, resumed = open_for_resume(path)
    journal.append(ev.RunResumed())
    journal.close()
    final = read_chain(path)
    assert final.problems == []
    assert final.events[:4] == events[:4]
    repaired = final.events[4]
    assert repaired["kind"] == "journal_repaired" and repaired["payload"]["torn_bytes"] == len(report.torn_tail)
    assert (tmp_path / repaired["payload"]["moved_to"]).read_bytes() == report.torn_tail
    assert resumed[-1].raw == repaired


def test_resume_refuses_a_broken_chain(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    write_journal(path)
    lines = path.read_text().splitlines(keepends=True)
    event = json.loads(lines[1])
    event["payload"]["budget_s"] = 99
    lines[1] = json.dumps(event) + "\n"
    path.write_text("".join(lines))
    with pytest.raises(VerificationFailed, match="line 2: content does not match its hash"):
        open_for_resume(path)


def test_concurrent_appends_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path, fsync=False)

    def writer(k: int) -> None:
        for i in range(50):
            journal.append(ev.AttemptStarted(task_id=f"t{k}", budget_s=i))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal.close()
    report = read_chain(path)
    assert report.problems == [] and len(report.events) == 400


def test_full_disk_keeps_every_earlier_event(tmp_path: Path) -> None:
    """A failed write cuts the file back to its last whole event; a full disk is a storage
    failure (exit 3, resumable), not a harness error."""
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    journal.append(ev.RunStarted())
    import os

    real_write = os.write
    calls = {"n": 0}

    def failing_write(fd: int, data: bytes) -> int:
        calls["n"] += 1
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    os.write = failing_write  # type: ignore[assignment]
    try:
        with pytest.raises(StorageError, match="No space left on device"):
            journal.append(ev.RunFinished(outcomes={"x": 1}))
    finally:
        os.write = real_write
    journal.append(ev.RunResumed())
    journal.close()
    report = read_chain(path)
    assert report.problems == [] and [e["kind"] for e in report.events] == ["run_started", "run_resumed"]


def test_group_commit_returns_only_after_an_fsync_covering_the_line(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Concurrent appends share fsyncs, but none returns before its own bytes were synced."""
    import os
    import time

    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    covered: list[int] = []  # file size when each fsync began: what it makes durable at least
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        covered.append(os.fstat(fd).st_size)
        time.sleep(0.002)  # a slow disk: the window in which others append
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    seen: list[tuple[int, int]] = []  # (seq, durable bytes when its append returned)
    lock = threading.Lock()

    def writer(k: int) -> None:
        for i in range(40):
            event = journal.append(ev.AttemptStarted(task_id=f"t{k}", budget_s=i))
            with lock:
                seen.append((event["seq"], max(covered)))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal.close()
    lines = path.read_bytes().splitlines(keepends=True)
    ends = [sum(len(line) for line in lines[: i + 1]) for i in range(len(lines))]
    assert read_chain(path).problems == [] and len(lines) == 320
    assert all(durable >= ends[seq] for seq, durable in seen)
    assert len(covered) < 320  # shared: fewer fsyncs than appends


def test_failed_fsync_stops_the_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a failed fsync what reached the disk is unknown: nothing more is appended."""
    import os

    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    journal.append(ev.RunStarted())
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(StorageError, match=r"fsync failed .*Input/output error"):
        journal.append(ev.RunInterrupted())
    monkeypatch.setattr(os, "fsync", real_fsync)
    with pytest.raises(StorageError, match="fsync failed"):
        journal.append(ev.RunResumed())
    journal.close()
    assert [e["kind"] for e in read_chain(path).events] == ["run_started", "run_interrupted"]
