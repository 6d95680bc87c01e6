"""What each step of a change cost: every commit of a list against the commit before it.

A comparison with an old release takes in everything done since, by every change. This script
times each step on its own instead: each commit of ``--steps`` (for a merge, the merge) against
its first parent, or for a step ``A..B`` commit B against commit A, alternately, in the same
session, on the workloads of ``bench_harness.py`` (200 one-attempt tasks: agent ``true`` at
``--jobs 1`` and at the CLI's default, and an agent whose edit is graded at the CLI's default),
every run with ``--no-workspace-quota`` where the build knows it. Each line prints the ratio
step / parent of every run and the 95% interval of its median against the 5% target. What
several steps cost together is a step ``A..B`` of its own: multiplying the steps' medians would
multiply their noise too.

The default steps are those that changed ``src/`` when the runner was split along its seams
(one vocabulary of typed journal events, an attempt that returns facts, a coordinator that alone
writes, executors and sandbox backends registered by name, versioned derivations, the public
API), in the order they landed.

Run: TMPDIR=<a tmpfs> .venv/bin/python benchmarks/step_cost.py [--steps REV,REV,...] [--tasks N] [--jobs J] [--runs R]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from _common import (
    ROOT,
    Build,
    build_revision,
    check,
    measure,
    no_quota,
    private_runs_index,
    runs_argument,
    scratch_filesystem,
    write_pack,
)
from bench_harness import paired_lines

SPLIT_STEPS = ("b94f3c5", "73982c9", "50cf3e4", "608a817", "233cd92", "93f5089")
"""The commits that split the runner along its seams, as they landed: derivations that stay
verifiable, the public API, typed journal events (a merge), sandbox backends by name, the pure
classification of an attempt, and the attempt, coordinator and executors (a merge)."""


def git(*args: str) -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'} (--steps takes "
                         f"commits of this clone, each with its first parent, or ranges A..B)")
    return proc.stdout.strip()


def step_builds(step: str) -> tuple[Build, Build, str]:
    """The step and the commit it is timed against (its first parent, or A of a step ``A..B``),
    each installed into a private virtualenv, labelled by their short hashes; and what the step
    is (its subject line, or the number of commits of a range)."""
    base, sep, tip = step.rpartition("..")
    sha = git("rev-parse", "--verify", f"{tip}^{{commit}}")
    parent = git("rev-parse", "--verify", f"{base}^{{commit}}" if sep else f"{sha}^1")
    if sha == parent:
        raise SystemExit(f"--steps {step}: both ends are the same commit; nothing to time")
    if sep:
        what = f"{git('rev-list', '--count', f'{parent}..{sha}')} commits, {base} to {tip}"
    else:
        what = git("log", "-1", "--format=%s", sha)
    this, before = build_revision(sha), build_revision(parent)
    return Build(sha[:7], this.exe), Build(parent[:7], before.exe), what


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--steps", default=",".join(SPLIT_STEPS),
                    help="commits to time, each against its first parent, or ranges A..B (B against A); "
                         "comma-separated (default: the runner's split)")
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=None, help="the --jobs of the parallel lines (default: the CLI default)")
    ap.add_argument("--runs", type=runs_argument, default=7)
    args = ap.parse_args()
    from sealbench.sizing import default_jobs

    jobs = args.jobs or default_jobs()
    steps = [s for s in args.steps.split(",") if s]
    lines = [("true", 1), ("true", jobs), ("edit", jobs)]
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        print(f"step_cost: {len(steps)} steps, each against its first parent (A for a step A..B); "
              f"{args.tasks} one-attempt tasks, oracle python -c pass, {args.runs} runs of each line, the step "
              f"and its parent alternately, every run with --no-workspace-quota where the build knows it; packs "
              f"and runs on {scratch_filesystem(root)} (TMPDIR chooses where)", flush=True)
        for i, step in enumerate(steps):
            this, before, subject = step_builds(step)
            print(f"step {this.label} against {before.label}: {subject}", flush=True)
            both = [this, before]
            here = root / f"step-{i}"
            private_runs_index(here)  # a build is both a step and the next step's parent: its own run_ids
            packs, extra = {}, {}
            for b in both:
                packs[b.label] = write_pack(here / f"pack-{b.label}", args.tasks, oracle=["python", "-c", "pass"])
                check(measure([b.exe, "pack", "seal", str(packs[b.label])]), f"seal ({b.label})")
                extra[b.label] = no_quota(b.exe)
            paired_lines(here, both, packs, extra, sorted({j for _, j in lines}), args.runs, only=lines)


if __name__ == "__main__":
    main()
