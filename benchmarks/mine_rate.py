"""Issue 41: mining fresh tasks from the click history, against reading the same commits.

sealbench mines the click bundle's commits after --since (default 2026-07-09): each candidate's
environment, its test files run before and after its fix (--repeat 3), and the kept tasks
through pack validate. Reported: candidates per minute and the share kept. The floor, timed in
the same run, is what any miner must do at least: clone the bundle, list the same commits
(git log) and read each one's diff (git diff against its parent). No target: the floor runs
no test, so the ratio says how much of mining is running tests.
Run: .venv/bin/python benchmarks/mine_rate.py [--bundle PATH] [--since DATE] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from _common import ROOT, SEALBENCH, check, figure, measure, runs_argument, seconds, times


def floor(bundle: Path, since: str, commits: list[str], scratch: Path) -> float:
    """Clone the bundle, list the commits after ``since`` and diff each candidate."""
    t0 = time.perf_counter()
    clone = scratch / "floor.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(bundle), str(clone)], check=True)
    subprocess.run(["git", "--git-dir", str(clone), "log", "--first-parent", f"--since={since}", "--format=%H %P"],
                   check=True, capture_output=True)
    for sha in commits:
        subprocess.run(["git", "--git-dir", str(clone), "diff", "--binary", f"{sha}^", sha], check=True,
                       capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", type=Path, default=ROOT.parent / "shared" / "data" / "repos" / "click.bundle")
    ap.add_argument("--since", default="2026-07-09")
    ap.add_argument("--runs", type=runs_argument, default=3)
    args = ap.parse_args()
    mined: list[float] = []
    floors: list[float] = []
    rates: list[float] = []
    shares: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        for r in range(args.runs):
            report_file = root / f"mined-{r}.json"
            m = check(measure([SEALBENCH, "mine", str(args.bundle), "--since", args.since, "--repository",
                               "pallets/click", "-o", str(root / f"pack-{r}"), "--json", str(report_file)]), "mine")
            report = json.loads(report_file.read_text())
            if r == 0:
                print(f"mine_rate: click after {args.since}: {report['candidates']} candidates, {report['kept']} "
                      f"kept, dropped {report['dropped']}; {args.runs} runs")
            mined.append(m.seconds)
            rates.append(report["candidates"] / (m.seconds / 60))
            shares.append(report["kept"] / report["candidates"])
            scratch = root / f"floor-{r}"
            scratch.mkdir()
            floors.append(floor(args.bundle, args.since, [o["commit"] for o in report["outcomes"]], scratch))
    figure("floor: clone, git log and a diff per candidate", floors, seconds)
    figure("sealbench mine (--repeat 3, pack validate included)", mined, seconds)
    figure("  candidates per minute", rates, lambda v: f"{v:.1f}/min")
    figure("  share of candidates kept", shares, lambda v: f"{v:.0%}")
    figure("  against the floor of the same run", [m / f for m, f in zip(mined, floors, strict=True)], times)


if __name__ == "__main__":
    main()
