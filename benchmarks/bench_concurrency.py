"""Issue 4 targets: concurrency and memory of a run.

1. 64 tasks whose agent sleeps 0.5 s, at --jobs 16: within 1.3x of the ideal 2 s (median of 3 runs).
2. 200 trivial tasks at --jobs 2 against --jobs 1 (same run, same machine).
3. A 10,000-task run of trivial tasks keeps the runner under 200 MB peak memory
   (events streamed to the journal; nothing kept per task beyond its scorecard).
Run: .venv/bin/python benchmarks/bench_concurrency.py [--big N] [--skip-big]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from _common import SEALBENCH, check, lock_contract, measure, private_runs_index, row, write_pack


def run(contract: Path, out: Path, jobs: int) -> tuple[float, float]:
    m = check(measure([SEALBENCH, "run", str(contract), "--out", str(out), "--no-progress", "--jobs", str(jobs)]),
              "run")
    return m.seconds, m.peak_mb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=int, default=10_000)
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        print("bench_concurrency")
        pack = write_pack(root / "sleepy", 64, oracle=["true"])
        check(measure([SEALBENCH, "pack", "seal", str(pack)]), "seal")
        ideal = 64 * 0.5 / 16
        # Three runs, one after the other: each deletes its workspaces, which slows the next
        # one's file creation on some file systems; all three are printed. One run per locked
        # run_id: each run has a contract of its own.
        for k in range(3):
            lock_contract(pack, root / f"sleepy-{k}.json", f"sleepy-{k}", "sleep 0.5")
        times = sorted(run(root / f"sleepy-{k}.json", root / f"sleepy-run-{k}", 16)[0] for k in range(3))
        seconds = statistics.median(times)
        row("64 tasks, agent sleeps 0.5 s, --jobs 16 (median of 3)",
            f"{seconds:.2f} s = {seconds / ideal:.2f}x the ideal {ideal:.0f} s (target 1.3x); "
            f"runs {', '.join(f'{t:.2f}' for t in times)} s")

        pack = write_pack(root / "trivial", 200, oracle=["true"])
        check(measure([SEALBENCH, "pack", "seal", str(pack)]), "seal")
        for jobs in (1, 2):
            lock_contract(pack, root / f"trivial-j{jobs}.json", f"trivial-j{jobs}", "true")
        one, _ = run(root / "trivial-j1.json", root / "trivial-j1", 1)
        two, _ = run(root / "trivial-j2.json", root / "trivial-j2", 2)
        row("200 trivial tasks, --jobs 1", f"{one:.2f} s")
        row("200 trivial tasks, --jobs 2", f"{two:.2f} s = {one / two:.2f}x the speed of --jobs 1")

        if not args.skip_big:
            pack = write_pack(root / "big", args.big, oracle=["true"])
            check(measure([SEALBENCH, "pack", "seal", str(pack)]), "seal")
            contract = root / "big.json"
            lock_contract(pack, contract, "big", "true")
            seconds, peak = run(contract, root / "big-run", 8)
            row(f"{args.big} trivial tasks, --jobs 8", f"{seconds:.1f} s, runner peak {peak:.0f} MB (target < 200 MB)")


if __name__ == "__main__":
    main()
