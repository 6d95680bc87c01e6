"""Issue 4 targets: concurrency and memory of a run.

1. 64 tasks whose agent sleeps 0.5 s, at --jobs 16: within 1.3x of the ideal 2 s. The floor,
   timed in each run, is the same 64 `sleep 0.5` as bare subprocesses, 16 at a time.
2. 200 trivial tasks at --jobs 2 against --jobs 1, both in each run; the floor is 200 bare
   `true` one after another.
3. A 10,000-task run of trivial tasks keeps the runner under 200 MB peak memory (events
   streamed to the journal; nothing kept per task beyond its scorecard). Its floors, in each
   run: `pack check` of the same pack (memory) and 10,000 bare `true`, 8 at a time (time).
Every line is measured --runs times, each run under a contract locked for it.
With ``--against REV`` each of the three workloads runs under the current code and under REV
(built into a private virtualenv under .cache/), alternately, and prints the ratio current/REV
of every run against the 5% target of issue 16, with the 95% interval of its median (and the
peak memory of both); no floors then.
Run: .venv/bin/python benchmarks/bench_concurrency.py [--big N] [--skip-big] [--runs R] [--against REV [--no-quota]]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from _common import (
    SEALBENCH,
    Build,
    Measured,
    Target,
    against_lines,
    alternate,
    bare_loop,
    builds,
    check,
    figure,
    lock_contract,
    measure,
    megabytes,
    no_quota,
    private_runs_index,
    runs_argument,
    scratch_filesystem,
    seconds,
    times,
    write_pack,
)


def run(contract: Path, out: Path, jobs: int, exe: str = SEALBENCH, extra: Sequence[str] = ()) -> tuple[float, float]:
    m = timed_run(contract, out, jobs, exe, extra)
    return m.seconds, m.peak_mb


def timed_run(contract: Path, out: Path, jobs: int, exe: str = SEALBENCH, extra: Sequence[str] = ()) -> Measured:
    return check(measure([exe, "run", str(contract), "--out", str(out), "--no-progress", "--jobs", str(jobs),
                          *extra]), "run")


def sealed(root: Path, n: int, exe: str = SEALBENCH) -> Path:
    pack = write_pack(root, n, oracle=["true"])
    check(measure([exe, "pack", "seal", str(pack)]), "seal")
    return pack


def against(root: Path, runs: int, rev: str, big_n: int | None, quota: bool = True) -> None:
    """The three workloads under the current code and REV, alternately, each on a pack it sealed;
    ``quota`` False: every run with --no-workspace-quota where the build knows it."""
    both: list[Build] = builds(rev)
    print(f"bench_concurrency --against {rev}: {runs} runs of each line, the current code and {rev} alternately"
          + ("" if quota else "; every run with --no-workspace-quota where the build knows it")
          + f"; packs and runs on {scratch_filesystem(root)} (TMPDIR chooses where)")
    paired_workloads(root, both, runs, big_n, quota)


def paired_workloads(root: Path, both: list[Build], runs: int, big_n: int | None, quota: bool = True) -> None:
    """The three workloads (four with ``big_n``), ``runs`` times under both builds alternately
    (the current code first), and their ratios current / the other build."""
    rev = both[1].label
    workloads = [("sleepy", 64, "sleep 0.5", 16, "64 tasks, agent sleeps 0.5 s, --jobs 16 (--no-workspace-quota where known)"),
                 ("trivial", 200, "true", 1, "200 trivial tasks (agent `true`), --jobs 1"),
                 ("trivial", 200, "true", 2, "200 trivial tasks (agent `true`), --jobs 2")]
    if big_n is not None:
        workloads.append(("big", big_n, "true", 8, f"{big_n} trivial tasks, --jobs 8"))
    packs: dict[tuple[str, str], Path] = {}
    for key, n, agent, jobs, label in workloads:
        walls: dict[str, list[float]] = {b.label: [] for b in both}
        cpus: dict[str, list[float]] = {b.label: [] for b in both}
        peaks: dict[str, list[float]] = {b.label: [] for b in both}
        for b in both:
            if (key, b.label) not in packs:
                packs[key, b.label] = sealed(root / f"{key}-{b.label}", n, b.exe)
        for r in range(runs):
            for b in alternate(r, both):
                name = f"{key}-j{jobs}-{r}-{b.label}"
                lock_contract(packs[key, b.label], root / f"{name}.json", name, agent, exe=b.exe)
                m = timed_run(root / f"{name}.json", root / f"{name}-run", jobs, b.exe,
                              extra=no_quota(b.exe) if key == "sleepy" or not quota else ())
                walls[b.label].append(m.seconds)
                cpus[b.label].append(m.cpu_seconds)
                peaks[b.label].append(m.peak_mb)
        against_lines(label, rev, walls, cpus, current=both[0].label)
        if key == "big":
            for b in both:
                figure(f"    runner peak memory, {b.label}", peaks[b.label], megabytes)


def sleepers(root: Path, runs: int) -> None:
    pack = sealed(root / "sleepy", 64)
    ideal = 64 * 0.5 / 16
    floors, walls = [], []
    for r in range(runs):
        floors.append(bare_loop(64, ["sleep", "0.5"], jobs=16))
        contract = root / f"sleepy-{r}.json"
        lock_contract(pack, contract, f"sleepy-{r}", "sleep 0.5")
        # Sixteen 1 GiB workspace quotas (tmpfs, so memory) do not fit a 24 GiB machine; the
        # sleepers write nothing, so their workspaces are bound from the host instead.
        walls.append(run(contract, root / f"sleepy-run-{r}", 16, extra=["--no-workspace-quota"])[0])
    print(f"  64 tasks, agent sleeps 0.5 s, --jobs 16 --no-workspace-quota (the ideal is {ideal:.0f} s)")
    figure("    floor: 64 bare `sleep 0.5`, 16 at a time", floors, seconds)
    figure("    wall time", walls, seconds)
    figure("    against the ideal", [w / ideal for w in walls], times, Target(1.3, "<= 1.3x", strict=False))
    figure("    against the floor of the same run", [w / f for w, f in zip(walls, floors, strict=True)], times)


def jobs_one_and_two(root: Path, runs: int) -> None:
    pack = sealed(root / "trivial", 200)
    floors: list[float] = []
    ones: list[float] = []
    twos: list[float] = []
    for r in range(runs):
        floors.append(bare_loop(200, ["true"]))
        for jobs, into in ((1, ones), (2, twos)):
            contract = root / f"trivial-j{jobs}-{r}.json"
            lock_contract(pack, contract, f"trivial-j{jobs}-{r}", "true")
            into.append(run(contract, root / f"trivial-j{jobs}-{r}", jobs)[0])
    print("  200 trivial tasks (agent `true`)")
    figure("    floor: 200 bare `true`, one after another", floors, seconds)
    figure("    --jobs 1", ones, seconds)
    figure("    --jobs 2", twos, seconds)
    figure("    speed of --jobs 2 over --jobs 1, same run", [o / t for o, t in zip(ones, twos, strict=True)], times)


def big(root: Path, n: int, runs: int) -> None:
    pack = sealed(root / "big", n)
    checks, floors, walls, peaks = [], [], [], []
    for r in range(runs):
        checks.append(check(measure([SEALBENCH, "pack", "check", str(pack)]), "check").peak_mb)
        floors.append(bare_loop(n, ["true"], jobs=8))
        contract = root / f"big-{r}.json"
        lock_contract(pack, contract, f"big-{r}", "true")
        wall, peak = run(contract, root / f"big-run-{r}", 8)
        walls.append(wall)
        peaks.append(peak)
    print(f"  {n} trivial tasks, --jobs 8")
    figure(f"    floor: {n} bare `true`, 8 at a time", floors, seconds)
    figure("    wall time", walls, seconds)
    figure("    floor: peak memory of `pack check` alone", checks, megabytes)
    figure("    runner peak memory", peaks, megabytes, Target(200, "< 200 MB"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=int, default=10_000)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--runs", type=runs_argument, default=3)
    ap.add_argument("--against", metavar="REV", help="time this revision too (e.g. the previous release)")
    ap.add_argument("--no-quota", action="store_true",
                    help="with --against: every run with --no-workspace-quota where the build knows it, to "
                         "compare against a release from before workspace quotas")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        if args.against:
            against(root, args.runs, args.against, None if args.skip_big else args.big, quota=not args.no_quota)
            return
        print(f"bench_concurrency: {args.runs} runs of each line")
        sleepers(root, args.runs)
        jobs_one_and_two(root, args.runs)
        if not args.skip_big:
            big(root, args.big, args.runs)


if __name__ == "__main__":
    main()
