"""The journal's clocks and the heartbeat: lines carry monotonic time and the boot id inside
their hash; a silent journal gets heartbeats; a journal that cannot be written ends the run."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sealbench import events
from sealbench.clock import Clock, Heartbeat, read_boot_id
from sealbench.digest import canonical_json
from sealbench.journal import Journal, event_hash, open_for_resume, read_chain


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lines_carry_monotonic_time_and_the_boot_id_inside_their_hash(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    before = int(time.monotonic() * 1000)
    journal.append(events.AttemptStarted(task_id="t", attempt=1))
    journal.close()
    (event,) = lines(path)
    assert event["journal_version"] == 2 and event["boot_id"] == read_boot_id()
    assert before <= event["mono_ms"] <= int(time.monotonic() * 1000)
    for field, value in (("mono_ms", event["mono_ms"] - 5000), ("boot_id", "another")):
        edited = {**event, field: value}
        assert event_hash(edited) != event["hash"]
        path.write_bytes(canonical_json(edited) + b"\n")
        assert any("edited" in p for p in read_chain(path).problems), field


def test_boot_id_is_this_kernels() -> None:
    boot = read_boot_id()
    if not Path("/proc/sys/kernel/random/boot_id").exists():
        assert boot is None
    else:
        assert boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_a_stepped_wall_clock_moves_time_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    ahead = Clock(utc=lambda: datetime.now(UTC) + timedelta(hours=1))
    journal = Journal.create(path, clock=Clock())
    journal.append(events.RunStarted())
    journal.close()
    journal, _ = open_for_resume(path, clock=ahead)
    journal.append(events.RunResumed())
    journal.close()
    a, b = lines(path)
    assert b["time"][:13] > a["time"][:13]  # an hour later on the wall
    assert 0 <= b["mono_ms"] - a["mono_ms"] < 5000  # moments later in fact
    assert read_chain(path).problems == []


def test_version_1_lines_keep_their_fields_and_other_shapes_are_named(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    journal.append(events.RunInterrupted())
    journal.close()
    (event,) = lines(path)
    v1 = {k: v for k, v in event.items() if k not in ("mono_ms", "boot_id")} | {"journal_version": 1}
    v1["hash"] = event_hash(v1)
    cases = {
        "v1": (v1, []),
        "v1 with clocks": ({**event, "journal_version": 1}, ["differ from the journal format (version 1)"]),
        "v2 without clocks": ({**v1, "journal_version": 2}, ["differ from the journal format (version 2)"]),
        "v3": ({**event, "journal_version": 3}, ["journal_version 3 is not one this release reads"]),
    }
    for name, (line, expected) in cases.items():
        path.write_bytes(canonical_json(line) + b"\n")
        problems = read_chain(path).problems
        assert all(any(e in p for p in problems) for e in expected) and bool(problems) == bool(expected), name


def test_a_heartbeat_is_written_without_an_fsync_and_a_later_fsync_covers_it(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    journal.append(events.Heartbeat(), durable=False)
    assert synced == [] and len(lines(path)) == 1
    journal.append(events.RunInterrupted())
    assert len(synced) == 1
    journal.close()


def test_a_silent_journal_gets_a_heartbeat_every_interval(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    lapses: list[str] = []
    heartbeat = Heartbeat(journal, interval_ms=100, lease_ms=2000, on_lapse=lapses.append).start()
    time.sleep(1.0)
    heartbeat.stop()
    journal.close()
    beats = [e["mono_ms"] for e in lines(path) if e["kind"] == "heartbeat"]
    assert len(beats) >= 7 and lapses == []
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert min(gaps) >= 100 and max(gaps) < 1000, gaps


def test_other_lines_make_heartbeats_unneeded(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    heartbeat = Heartbeat(journal, interval_ms=300, lease_ms=2000, on_lapse=lambda m: None).start()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        journal.append(events.RunInterrupted(), durable=False)
        time.sleep(0.05)
    heartbeat.stop()
    journal.close()
    assert [e for e in lines(path) if e["kind"] == "heartbeat"] == []


def test_a_journal_that_cannot_be_written_ends_the_run_within_the_lease(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    journal.append(events.RunInterrupted())
    lapsed = threading.Event()
    messages: list[str] = []

    def on_lapse(message: str) -> None:
        messages.append(message)
        lapsed.set()

    heartbeat = Heartbeat(journal, interval_ms=100, lease_ms=600, on_lapse=on_lapse).start()
    os.close(journal._fd)  # every later write fails (EBADF), as on a dead disk
    journal._fd = os.open(os.devnull, os.O_RDONLY)
    t0 = time.monotonic()
    assert lapsed.wait(5)
    assert time.monotonic() - t0 < 0.6
    heartbeat.stop()
    journal.close()
    # The descriptor swapped under the journal is also seen as a file changed under the writer.
    assert ("journal write failed" in messages[0] or "the run stopped before writing again" in messages[0])
    assert "--resume" in messages[0]


def test_a_journal_opened_long_before_the_heartbeat_starts_is_not_a_lapse(tmp_path: Path) -> None:
    """A resume reads a large journal between opening it and starting the heartbeat."""
    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    journal.append(events.RunInterrupted())
    time.sleep(0.8)
    real_append = journal.append

    def slow_append(event: events.Event, **kw: Any) -> dict[str, Any]:
        time.sleep(0.2)  # a slow disk: the first heartbeat lands after the watchdog has looked
        return real_append(event, **kw)

    journal.append = slow_append
    lapses: list[str] = []
    heartbeat = Heartbeat(journal, interval_ms=100, lease_ms=600, on_lapse=lapses.append).start()
    time.sleep(0.5)
    heartbeat.stop()
    journal.close()
    assert lapses == [] and [e["kind"] for e in lines(path)][1] == "heartbeat"
