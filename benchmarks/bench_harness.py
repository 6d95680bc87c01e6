"""Issue 3 target: harness overhead per attempt, against bare subprocesses timed in the same run.

200 one-attempt tasks, agent `true`, oracle `python -c pass`; the floor is 200 bare
`python -c pass` subprocesses run one after another. Targets: at most 1.5x the floor and at
most 15 ms of harness time per attempt. Because `true` changes nothing, sealbench records an
abstain and never runs the oracle; a second run uses an agent that edits a file so every
attempt is graded too (agent and oracle both in the sandbox), against a floor of two bare
subprocesses per task. Every configuration runs --runs times, each time right after its own
floor, under a contract locked for that run.
With ``--against REV`` the same workloads run under the current code and under REV (built
into a private virtualenv under .cache/), alternately, and each configuration prints the ratio
current/REV of every run against the 5% target of issue 16, with the 95% interval of its
median; no floors are timed then.
Run: .venv/bin/python benchmarks/bench_harness.py [--tasks N] [--jobs J] [--runs R] [--against REV [--no-quota]]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path

from _common import (
    SEALBENCH,
    Build,
    Target,
    against_lines,
    alternate,
    bare_loop,
    builds,
    check,
    figure,
    lock_contract,
    measure,
    no_quota,
    private_runs_index,
    runs_argument,
    scratch_filesystem,
    seconds,
    signed_ms,
    times,
    write_pack,
)

AGENTS = {
    "true": ("agent `true` (abstain, no oracle)", "true", 1),
    "edit": ("agent edits a file, graded by the oracle", "sh -c 'echo \"VALUE = 0\" >> mod.py'", 2),
}


def run(contract: Path, out: Path, jobs: int) -> float:
    m = check(measure([SEALBENCH, "run", str(contract), "--out", str(out), "--no-progress", "--jobs", str(jobs)]),
              "run")
    return m.seconds


def against(root: Path, n: int, jobs_default: int, runs: int, rev: str, quota: bool = True) -> None:
    """Every configuration under the current code and REV, alternately, each on a pack it sealed;
    ``quota`` False: every run with --no-workspace-quota where the build knows it."""
    both: list[Build] = builds(rev)
    extra = {b.label: [] if quota else no_quota(b.exe) for b in both}
    packs = {}
    for b in both:
        packs[b.label] = write_pack(root / f"pack-{b.label}", n, oracle=["python", "-c", "pass"])
        check(measure([b.exe, "pack", "seal", str(packs[b.label])]), f"seal ({b.label})")
    print(f"bench_harness --against {rev}: {n} one-attempt tasks, oracle python -c pass, {runs} runs of each "
          f"line, the current code and {rev} alternately"
          + ("" if quota else "; every run with --no-workspace-quota where the build knows it")
          + f"; packs and runs on {scratch_filesystem(root)} (TMPDIR chooses where)")
    paired_lines(root, both, packs, extra, sorted({1, jobs_default}), runs)


def paired_lines(root: Path, both: list[Build], packs: dict[str, Path], extra: dict[str, list[str]],
                 jobs_list: list[int], runs: int, only: Collection[tuple[str, int]] | None = None) -> None:
    """Each workload of :data:`AGENTS` at each ``--jobs`` (those of ``only`` when given: pairs of
    an AGENTS key and a --jobs), ``runs`` times under both builds alternately (the first build
    first), and its ratios first / second build."""
    for key, (label, agent, _per_task) in AGENTS.items():
        for jobs in jobs_list:
            if only is not None and (key, jobs) not in only:
                continue
            walls: dict[str, list[float]] = {b.label: [] for b in both}
            cpus: dict[str, list[float]] = {b.label: [] for b in both}
            for r in range(runs):
                for b in alternate(r, both):
                    name = f"{key}-j{jobs}-{r}-{b.label}"
                    lock_contract(packs[b.label], root / f"{name}.json", f"bench-{name}", agent, exe=b.exe)
                    m = check(measure([b.exe, "run", str(root / f"{name}.json"), "--out", str(root / name),
                                       "--no-progress", "--jobs", str(jobs), *extra[b.label]]), f"run ({b.label})")
                    walls[b.label].append(m.seconds)
                    cpus[b.label].append(m.cpu_seconds)
            against_lines(f"{label}, --jobs {jobs}", both[1].label, walls, cpus, current=both[0].label)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=None, help="also measure at this --jobs (default: the CLI default)")
    ap.add_argument("--runs", type=runs_argument, default=3)
    ap.add_argument("--against", metavar="REV", help="also time this revision (e.g. the previous release)")
    ap.add_argument("--no-quota", action="store_true",
                    help="with --against: every run with --no-workspace-quota where the build knows it, to "
                         "compare against a release from before workspace quotas")
    args = ap.parse_args()
    n = args.tasks
    from sealbench.sizing import default_jobs

    jobs_default = args.jobs or default_jobs()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        if args.against:
            against(root, n, jobs_default, args.runs, args.against, quota=not args.no_quota)
            return
        pack = write_pack(root / "pack", n, oracle=["python", "-c", "pass"])
        check(measure([SEALBENCH, "pack", "seal", str(pack)]), "seal")
        print(f"bench_harness: {n} one-attempt tasks, oracle python -c pass, {args.runs} runs of each line")
        for key, (label, agent, per_task) in AGENTS.items():
            floors: list[float] = []
            walls: dict[int, list[float]] = {}
            for r in range(args.runs):
                floors.append(bare_loop(n * per_task, [sys.executable, "-c", "pass"]))
                for jobs in sorted({1, jobs_default}):
                    contract = root / f"{key}-j{jobs}-{r}.json"
                    lock_contract(pack, contract, f"bench-{key}-j{jobs}-{r}", agent)
                    walls.setdefault(jobs, []).append(run(contract, root / f"{key}-j{jobs}-{r}", jobs))
            figure(f"floor: {n * per_task} x bare `python -c pass`", floors, seconds)
            for jobs, values in walls.items():
                ratios = [w / f for w, f in zip(values, floors, strict=True)]
                per_attempt = [(w - f) / n for w, f in zip(values, floors, strict=True)]
                print(f"  {label}, --jobs {jobs}")
                figure("    wall time", values, seconds)
                figure("    against the floor of the same run", ratios, times,
                       Target(1.5, "<= 1.5x", strict=False) if key == "true" else None)
                figure("    harness time per attempt", [p * 1000 for p in per_attempt],
                       signed_ms, Target(15, "<= 15 ms", strict=False) if key == "true" else None)


if __name__ == "__main__":
    main()
