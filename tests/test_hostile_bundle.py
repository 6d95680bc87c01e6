"""A bundle from elsewhere is hostile input: the commands that read it never hang, crash or
follow a link out of it.

Each test plants one thing in a copy of a committed fixture bundle (a release's honest demo)
and runs the real CLI on it: a journal line Python's JSON reader cannot take back as the
canonical JSON it hashes, a ``writer.lock`` that is a FIFO or a link, a report folder beside
the bundle that is a link aimed elsewhere.
"""

from __future__ import annotations

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
