"""What the runs index costs a run: recording it before its journal exists, marking its first
event, and recording how it ended, in an index that is new and in one holding 1,000 runs;
and `sealbench runs list` over those runs. Every write holds the index's lock; the record
made before a run's journal exists is fsynced once (its line in the index's log), SQLite is
not fsynced (what a machine crash loses is found in the log and the run directories).
Run: .venv/bin/python benchmarks/bench_runs_index.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import SEALBENCH, check, measure, private_runs_index, row

from sealbench.events import RunStarted
from sealbench.formats import AccessClass, AgentSpec, Budget, Controls, PackRef, ScoringContract
from sealbench.runner import RunResult
from sealbench.runs_index import claim_run, journal_started, record_end


def contract(run_id: str) -> ScoringContract:
    return ScoringContract(
        run_id=run_id, locked_at="2026-11-30T00:00:00Z", task_ids=["t"],
        controls=Controls(narration_probe=None, oracle_validity="unavailable"),
        access_class=AccessClass(host="benchmark machine"), agent=AgentSpec(label="bench", command="true"),
        budget=Budget(max_attempts=1, wall_clock_s=60), pack=PackRef(path="p", sha256="sha256:" + "0" * 64))


def one_run(root: Path, run_id: str) -> float:
    """The index's share of one run: claim, first event, end."""
    c = contract(run_id)
    run_dir = root / "runs" / run_id
    t0 = time.perf_counter()
    claim_run(c, run_dir, RunStarted(run_nonce=run_id, sandbox={"kind": "bubblewrap"}))
    journal_started(c, run_dir)
    record_end(c, RunResult(run_dir=run_dir, outcomes={}, complete=True, scorecards=[]))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        print(f"bench_runs_index: the index's share of a run, and runs list over {args.runs} runs")
        first = one_run(root, "first")
        row("first run (creates the index)", f"{first * 1000:.1f} ms")
        times = [one_run(root, f"run-{i:05d}") for i in range(args.runs)]
        row(f"each of the next {args.runs} runs", f"median {statistics.median(times) * 1000:.1f} ms, "
                                                 f"max {max(times) * 1000:.1f} ms")
        m = check(measure([SEALBENCH, "runs", "list"]), "runs list")
        row(f"sealbench runs list, {args.runs + 1} runs", f"{m.seconds:.2f} s, peak {m.peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
