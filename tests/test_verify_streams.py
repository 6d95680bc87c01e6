"""verify reads a bundle as a stream: every listed file in pieces, the journal line by line.

A bundle is made of a small run whose first task's agent wrote a large standard output (a
blob the journal names, so the bundle holds it and verify must hash it), then verified by the
real CLI in a process of its own, whose peak resident memory (ru_maxrss) is read from the
kernel when it ends.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sealbench import events
from sealbench.bundle import CHUNK, make_bundle
from sealbench.contract import lock_contract
from sealbench.digest import sha256_bytes
from sealbench.files import model_json, write_atomic
from sealbench.formats import AccessClass, AgentSpec, Budget, Controls, PackRef, ScoringContract
from sealbench.journal import Journal

SEALBENCH = Path(sys.executable).parent / "sealbench"


def zeros_digest(size: int) -> str:
    """The sha256 of ``size`` zero bytes, made a piece at a time."""
    h = hashlib.sha256()
    piece = bytes(CHUNK)
    for _ in range(size // CHUNK):
        h.update(piece)
    h.update(bytes(size % CHUNK))
    return h.hexdigest()


def sparse(path: Path, size: int) -> None:
    """``size`` zero bytes that take no room on disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


def run_with_output(run_dir: Path, stdout_size: int, n: int = 3) -> str:
    """An n-task run whose first task's agent printed ``stdout_size`` zero bytes; the hex name of
    that output's blob, held in the run's blobs/ as a sparse file."""
    ids = [f"task-{i}" for i in range(n)]
    contract = lock_contract(ScoringContract(
        task_ids=ids, controls=Controls(narration_probe=None, oracle_validity="unavailable"),
        access_class=AccessClass(host="test machine"), agent=AgentSpec(label="synthetic", command="true"),
        budget=Budget(max_attempts=1, wall_clock_s=60), forbidden_paths=["conftest.py"],
        pack=PackRef(path="pack", sha256=sha256_bytes(b"pack")),
    ), "streams", datetime.now(UTC))
    run_dir.mkdir(parents=True)
    write_atomic(run_dir / "scoring_contract.json", model_json(contract))
    output = zeros_digest(stdout_size)
    sparse(run_dir / "blobs" / output, stdout_size)
    patch = b"--- a/mod.py\n+++ b/mod.py\n@@ -1 +1 @@\n-VALUE = 0\n+VALUE = 1\n"
    (run_dir / "blobs" / sha256_bytes(patch).removeprefix("sha256:")).write_bytes(patch)
    journal = Journal.create(run_dir / "journal.jsonl", fsync=False)
    journal.append(events.RunStarted(contract_sha256=contract.contract_sha256, run_id=contract.run_id,
                                     pack_sha256=sha256_bytes(b"pack"), argv=None, probe=False,
                                     sandbox={"kind": "bubblewrap"}))
    for i, tid in enumerate(ids):
        journal.append(events.TaskStarted(task_id=tid, max_attempts=1, wall_clock_s=60, prompt_template_id="t",
                                          hidden_tests_sha256=sha256_bytes(b"hidden"), oracle_cmd=["python", "t.py"]))
        journal.append(events.AttemptStarted(task_id=tid, attempt=1, budget_s=60))
        journal.append(events.AgentFinished(task_id=tid, attempt=1, exit_code=0, timed_out=False, elapsed_ms=5,
                                            **({"stdout": "sha256:" + output} if i == 0 else {})))
        journal.append(events.PatchCaptured(task_id=tid, attempt=1, patch_sha256=sha256_bytes(patch), empty=False,
                                            changed=["mod.py"], changed_count=1))
        journal.append(events.Graded(task_id=tid, attempt=1, patch_applies_clean=True, forbidden=[],
                                     no_forbidden_path=True, tests_green=True,
                                     oracle=events.ProcessFacts(exit_code=0, timed_out=False),
                                     oracle_timed_out=False, task_pass=True))
        journal.append(events.AttemptFinished(task_id=tid, attempt=1, result="pass", elapsed_ms=10))
        journal.append(events.TaskFinished(task_id=tid, outcome="pass", attempts_used=1, elapsed_ms=12,
                                           first_attempt_passed=True, patch_sha256=sha256_bytes(patch)))
    journal.append(events.RunFinished())
    journal.close()
    return output


# Started by a small process of its own: a child's ru_maxrss counts the memory of the process
# it was forked from (until it execs), and this test process is larger than verify.
LAUNCH = ("import os, subprocess, sys\n"
          "p = subprocess.Popen(sys.argv[1:], stdout=sys.stderr)\n"
          "_, status, usage = os.wait4(p.pid, 0)\n"
          "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)\n")


def verify_peak(bundle: Path, data_dir: Path) -> tuple[int, float, str]:
    """``sealbench verify BUNDLE`` in a process of its own: its exit code, its peak resident
    memory in MB, and what it printed."""
    proc = subprocess.run([sys.executable, "-c", LAUNCH, str(SEALBENCH), "verify", str(bundle)],
                          capture_output=True, text=True, env={**os.environ, "SEALBENCH_DATA_DIR": str(data_dir)})
    code, peak_kb = proc.stdout.split()
    return int(code), int(peak_kb) / 1024, proc.stderr


@pytest.mark.skipif(not SEALBENCH.exists(), reason="console script not installed (run through make test)")
def test_a_listed_file_of_50_mb_costs_verify_no_more_memory_than_one_of_a_byte(tmp_path: Path) -> None:
    """Held whole, the 50 MB output would add 50 MB to verify's peak; read in 1 MiB pieces it
    adds nothing beyond the noise of two runs."""
    peaks = {}
    for size in (1, 50 << 20):
        run_with_output(tmp_path / f"run-{size}", size)
        make_bundle(tmp_path / f"run-{size}", tmp_path / f"out-{size}")
        code, peak, out = verify_peak(tmp_path / f"out-{size}" / "streams", tmp_path / "data")
        assert code == 0 and "ok: bundle" in out, out
        peaks[size] = peak
    assert peaks[50 << 20] - peaks[1] < 20, peaks


@pytest.mark.slow
@pytest.mark.skipif(not SEALBENCH.exists(), reason="console script not installed (run through make test)")
def test_a_bundle_with_a_listed_file_of_2_gib_verifies_in_less_than_300_mb(tmp_path: Path) -> None:
    size = 2 << 30
    output = run_with_output(tmp_path / "run", size)
    # Bundled by another process: bundling holds each blob whole, verify must not.
    made = subprocess.run([str(SEALBENCH), "bundle", str(tmp_path / "run"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env={**os.environ, "SEALBENCH_DATA_DIR": str(tmp_path / "data")})
    assert made.returncode == 0, made.stderr
    blob = tmp_path / "out" / "streams" / "blobs" / output
    assert blob.stat().st_size == size
    blob.unlink()
    sparse(blob, size)  # the same bytes, without 2 GiB of room on the disk
    code, peak, out = verify_peak(tmp_path / "out" / "streams", tmp_path / "data")
    assert code == 0 and "ok: bundle" in out, out
    assert peak < 300, f"verify's peak resident memory was {peak:.0f} MB"
