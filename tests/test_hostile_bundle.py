"""A bundle from elsewhere is hostile input: the commands that read it never hang, crash or
follow a link out of it.

Each test plants one thing in a copy of a committed fixture bundle (a release's honest demo)
and runs the real CLI on it: a journal line Python's JSON reader cannot take back as the
canonical JSON it hashes, a ``writer.lock`` that is a FIFO or a link, a report folder beside
the bundle that is a link aimed elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "bundles" / "made-by-5b8050d" / "demo-reference"


def sealbench_exe() -> str:
    exe = Path(sys.executable).parent / "sealbench"
    return str(exe) if exe.exists() else ""


def copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "demo-reference"))


def insert_line(journal: Path, index: int, line: bytes) -> None:
    lines = journal.read_bytes().splitlines(keepends=True)
    lines.insert(index, line + b"\n")
    journal.write_bytes(b"".join(lines))


def nan_copy(journal: Path) -> bytes:
    """An event line of the journal with NaN in it: Python reads it, canonical JSON cannot
    write it back, so the line's hash could not even be computed (so with 1e999, read as
    infinity)."""
    first = journal.read_bytes().splitlines()[0]
    return first[:-1] + b',"elapsed_ms":NaN}'


LINES: dict[str, Callable[[Path], bytes]] = {
    "nested-past-the-recursion-limit": lambda _j: b"[" * 200_000 + b"]" * 200_000,
    "integer-of-5000-digits": lambda _j: b'{"seq":' + b"9" * 5000 + b"}",
    "nan": nan_copy,
    "float-out-of-range": lambda j: nan_copy(j).replace(b"NaN", b"1e999"),
}


@pytest.mark.parametrize("name", sorted(LINES))
def test_exploit_a_journal_line_python_cannot_read_back_is_named_never_a_crash(
        tmp_path: Path, cli: Any, name: str) -> None:
    bundle = copy(tmp_path)
    insert_line(bundle / "journal.jsonl", 4, LINES[name](bundle / "journal.jsonl"))
    code, _out, err = cli("verify", bundle)
    assert code == 4, err
    assert "journal.jsonl line 5: not valid JSON (edited)" in err
    assert "unexpected error" not in err


@pytest.mark.parametrize("name", sorted(LINES))
def test_a_scorecard_line_python_cannot_read_back_is_named_never_a_crash(tmp_path: Path, cli: Any, name: str) -> None:
    bundle = copy(tmp_path)
    cards = bundle / "scorecards.jsonl"
    cards.write_bytes(LINES[name](bundle / "journal.jsonl") + b"\n" + cards.read_bytes())
    code, _out, err = cli("verify", bundle)
    assert code == 4 and "scorecards.jsonl line 1: not a JSON object" in err, err


@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
@pytest.mark.parametrize("plant", ["fifo", "link"])
@pytest.mark.parametrize("command", ["report", "show", "score"])
def test_exploit_a_writer_lock_planted_in_a_bundle_is_refused_never_waited_on(
        tmp_path: Path, plant: str, command: str) -> None:
    bundle = copy(tmp_path)
    lock = bundle / "writer.lock"
    if plant == "fifo":
        os.mkfifo(lock)  # opened for reading, it waited for a writer that never comes
    else:
        lock.symlink_to("/etc/passwd")
    argv = [str(bundle / "scoring_contract.json"), str(bundle)] if command == "score" else [str(bundle)]
    proc = subprocess.run([sealbench_exe(), command, *argv], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SEALBENCH_DATA_DIR": str(tmp_path / "data")})
    assert proc.returncode == 3, proc.stderr
    assert f"{lock} is not a regular file" in proc.stderr and "not a lock sealbench made" in proc.stderr
    assert not (tmp_path / "demo-reference-report").exists()


def test_exploit_a_report_folder_beside_the_bundle_linked_elsewhere_is_never_written_through(
        tmp_path: Path, cli: Any) -> None:
    bundle = copy(tmp_path)
    target = tmp_path / "victim"
    target.mkdir()
    (tmp_path / "demo-reference-report").symlink_to(target)
    code, _out, err = cli("report", bundle)
    assert code == 3 and f"{tmp_path / 'demo-reference-report'} is a link" in err, err
    assert list(target.iterdir()) == []
    real = tmp_path / "real-report"
    (real / "files").mkdir(parents=True)
    (real / "files" / "traces").symlink_to(target)
    code, _out, err = cli("report", bundle, "--out", real)
    assert code == 3 and "traces is a link" in err, err
    assert list(target.iterdir()) == []
    # A folder the user names with --out may be a link of theirs.
    mine = tmp_path / "mine"
    mine.symlink_to(target)
    code, _out, err = cli("report", bundle, "--out", mine)
    assert code == 0, err
    assert (target / "report.html").is_file()


@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_exploit_a_sparse_file_of_gigabytes_beside_the_bundle_s_files_is_never_read(tmp_path: Path) -> None:
    import resource

    bundle = copy(tmp_path)
    with (bundle / "zz_sparse").open("wb") as f:
        f.truncate(1 << 40)  # 1 TiB of nothing on disk: never read (hashing it would take many minutes)

    def one_gib() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = subprocess.run([sealbench_exe(), "verify", str(bundle)], capture_output=True, text=True, timeout=120,
                          preexec_fn=one_gib, env={**os.environ, "SEALBENCH_DATA_DIR": str(tmp_path / "data")})
    assert proc.returncode == 4 and "zz_sparse: not listed in SHA256SUMS" in proc.stderr, proc.stderr
    assert "too large to read into memory" not in proc.stderr


@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_exploit_a_listed_file_made_a_sparse_file_of_gigabytes_is_hashed_in_pieces_and_refused(tmp_path: Path) -> None:
    """A listed file is hashed in pieces, never held whole: 2 GiB in place of a blob, under an
    address space of 1.5 GiB, is named as differing from its sum, never a crash."""
    import resource

    bundle = copy(tmp_path)
    blob = sorted((bundle / "blobs").iterdir())[0]  # listed in SHA256SUMS
    with blob.open("r+b") as f:
        f.truncate(2 << 30)

    def one_and_a_half_gib() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))

    proc = subprocess.run([sealbench_exe(), "verify", str(bundle)], capture_output=True, text=True, timeout=120,
                          preexec_fn=one_and_a_half_gib, env={**os.environ, "SEALBENCH_DATA_DIR": str(tmp_path / "data")})
    assert proc.returncode == 4, proc.stderr
    assert f"blobs/{blob.name}: content differs from its sha256 in SHA256SUMS line" in proc.stderr, proc.stderr
    assert f"blobs/{blob.name}: content does not match its name" in proc.stderr, proc.stderr


def _forged_finished_twice_then_unsafe(bundle: Path) -> None:
    """The journal with one task finished twice and a last line finishing a task whose id is
    not a file name (``bad/id``): the chain is redone, so only the meaning is wrong."""
    from conftest import rewrite_journal

    journal = bundle / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_bytes().splitlines()]
    finished = next(e for e in events if e["kind"] == "task_finished")
    events.append(dict(finished))
    events.append({**finished, "task_id": "bad/id"})
    for seq, e in enumerate(events, 1):
        e["seq"] = seq
    rewrite_journal(journal, events)


def test_exploit_a_task_finished_twice_then_a_task_named_with_a_slash_is_refused_by_verify_never_a_crash(
        tmp_path: Path, cli: Any) -> None:
    # The report tells each task's story from verify's read of the journal: what it cannot
    # tell (a page named bad/id) must not replace or join verify's refusal.
    bundle = copy(tmp_path)
    _forged_finished_twice_then_unsafe(bundle)
    code, _out, err = cli("verify", bundle)
    assert code == 4, err
    code, _out, err = cli("report", bundle)
    assert code == 3 and "does not verify" in err, err
    assert "unexpected error" not in err and "not a safe file name" not in err, err
    assert not (tmp_path / "demo-reference-report").exists()


def test_exploit_a_forged_bundle_with_a_link_beside_it_is_refused_for_what_verify_finds(
        tmp_path: Path, cli: Any) -> None:
    bundle = copy(tmp_path)
    _forged_finished_twice_then_unsafe(bundle)
    (tmp_path / "victim").mkdir()
    (tmp_path / "demo-reference-report").symlink_to(tmp_path / "victim")
    code, _out, err = cli("report", bundle)
    assert code == 3 and "does not verify" in err and "is a link" not in err, err
    assert list((tmp_path / "victim").iterdir()) == []


@pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")
def test_a_page_the_report_cannot_write_is_the_report_s_failure_never_the_bundle_s(tmp_path: Path) -> None:
    import resource

    bundle = copy(tmp_path)
    out = tmp_path / "deep" / "er" / "report"

    def small_files() -> None:  # a page is over 10 kB: writing one fails as a full disk would
        resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000))

    proc = subprocess.run([sealbench_exe(), "report", str(bundle), "--out", str(out)], capture_output=True,
                          text=True, timeout=120, preexec_fn=small_files,
                          env={**os.environ, "SEALBENCH_DATA_DIR": str(tmp_path / "data")})
    assert proc.returncode not in (0, 3, 4), proc.stderr
    assert "File too large" in proc.stderr and "does not verify" not in proc.stderr, proc.stderr
    assert not (tmp_path / "deep").exists()  # the folders it made are gone with the report


def test_a_failed_report_leaves_the_earlier_report_as_it_was(tmp_path: Path, cli: Any) -> None:
    bundle = copy(tmp_path)
    out = tmp_path / "report"
    code, _out, err = cli("report", bundle, "--out", out)
    assert code == 0, err
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    _forged_finished_twice_then_unsafe(bundle)
    code, _out, err = cli("report", bundle, "--out", out)
    assert code == 3, err
    after = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert after == before
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # nothing staged is left


def test_a_report_into_a_folder_of_the_user_s_replaces_its_own_files_and_touches_nothing_else(
        tmp_path: Path, cli: Any) -> None:
    # --out . is a folder of the user's: its tasks/ and files/ may be theirs, and only the
    # report's own files (by name) are replaced.
    bundle = copy(tmp_path)
    out = tmp_path / "mine"
    theirs = {Path("files/notes.txt"): b"mine", Path("files/traces/other.json"): b"{}",
              Path("tasks/other.html"): b"<p>another run</p>", Path("report-old.svg"): b"<svg/>"}
    for rel, data in theirs.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    stale = out / "tasks" / "csv-split-001.html"
    stale.write_bytes(b"an earlier page of this task")
    code, _out, err = cli("report", bundle, "--out", out)
    assert code == 0, err
    assert {rel: (out / rel).read_bytes() for rel in theirs} == theirs
    assert b"csv-split-001" in stale.read_bytes() and stale.read_bytes() != b"an earlier page of this task"
    assert (out / "report.md").is_file() and (out / "files" / "traces" / "csv-split-001.json").is_file()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK) or os.stat("/dev/shm").st_dev == os.stat(FIXTURE).st_dev,
                    reason="no second file system to write to")
def test_a_report_into_a_folder_on_another_file_system_is_written(tmp_path: Path, cli: Any) -> None:
    import tempfile

    bundle = copy(tmp_path)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as elsewhere:
        (tmp_path / "mine").symlink_to(elsewhere)
        code, _out, err = cli("report", bundle, "--out", tmp_path / "mine")
        assert code == 0, err
        assert (Path(elsewhere) / "report.md").is_file() and any((Path(elsewhere) / "tasks").iterdir())


@pytest.mark.parametrize("where", ["the-bundle", "inside-the-bundle", "another-bundle"])
def test_a_report_is_never_written_into_a_bundle(tmp_path: Path, cli: Any, where: str) -> None:
    bundle = copy(tmp_path)
    other = Path(shutil.copytree(FIXTURE, tmp_path / "other"))
    out = {"the-bundle": bundle, "inside-the-bundle": bundle / "traces" / "r", "another-bundle": other}[where]
    code, _out, err = cli("report", bundle, "--out", out)
    assert code == 3 and "no report:" in err and "choose another folder with --out" in err, err
    for b in (bundle, other):
        code, _out, err = cli("verify", b)
        assert code == 0, err  # nothing was added to either


@pytest.mark.parametrize("plant", ["file", "dangling-link"])
def test_a_report_folder_that_is_no_folder_is_refused_after_verify_s_words(
        tmp_path: Path, cli: Any, plant: str) -> None:
    bundle = copy(tmp_path)
    out = tmp_path / "out"
    if plant == "file":
        out.write_text("mine")
    else:
        out.symlink_to(tmp_path / "nowhere")
    code, _out, err = cli("report", bundle, "--out", out)
    assert code == 3 and f"{out} is not a folder" in err, err
    _forged_finished_twice_then_unsafe(bundle)
    code, _out, err = cli("report", bundle, "--out", out)
    assert code == 3 and "does not verify" in err, err


def test_a_report_sweeps_only_a_dead_report_s_staging_folder_never_the_user_s_hidden_files(
        tmp_path: Path, cli: Any) -> None:
    bundle = copy(tmp_path)
    out = tmp_path / "home"
    theirs = out / ".photos.tmp-20240501-backup"  # the shape of a scratch name, and no such process
    (theirs / "album").mkdir(parents=True)
    (out / ".notes.tmp-9999999999-x").write_text("a number no process has")
    dead = out / ".sealbench-report.tmp-4194305-abc"  # above any pid this kernel gives
    (dead / "tasks").mkdir(parents=True)
    code, _out, err = cli("report", bundle, "--out", out)
    assert code == 0, err
    assert (theirs / "album").is_dir() and (out / ".notes.tmp-9999999999-x").is_file()
    assert not dead.exists()


def test_a_report_cut_short_while_moving_in_leaves_no_report_md_beside_the_new_pages(
        tmp_path: Path, cli: Any) -> None:
    bundle = copy(tmp_path)
    out = tmp_path / "report"
    code, _out, err = cli("report", bundle, "--out", out)
    assert code == 0, err
    page = out / "tasks" / "t_22_reject_network_call.html"
    page.unlink()
    page.mkdir()  # the last page cannot be moved in: the move stops there
    code, _out, err = cli("report", bundle, "--out", out)
    assert code != 0, err
    assert not (out / "report.md").exists()  # never a report that looks whole and is not
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
