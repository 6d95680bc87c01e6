"""Issue 42 targets: verify a 100,000-task bundle in < 30 s and < 300 MB, and score and report
it within the same bounds; a 10,000-task bundle no slower and no larger than before (issue
5's < 5 s and < 300 MB).

Each bundle is synthesised with sealbench's own journal writer, seven events per task as the
runner writes them (task started, attempt started, agent finished, patch captured, graded,
attempt finished, task finished; a third of the tasks pass), bundled with `sealbench
bundle`, then timed with `sealbench verify`, which checks every sum and the chain,
re-derives every derived file byte for byte and checks each task's events against its
outcome, with `sealbench score CONTRACT BUNDLE --json`, which re-derives the rate from
the journal, and with `sealbench report BUNDLE --out DIR`, which verifies the bundle and
writes report.md, report.html, a page per task and a copy of every trace and patch (into a
folder of its own each time, all removed once every figure is taken; the script lets the
disk settle for 30 s after each, see `settle`). Each is a process of its own: its wall-clock time, its CPU time and its peak
resident memory (ru_maxrss of the child) are recorded.

The floor, timed in the same run right before each figure, is the least any verify must do:
a process that hashes every file of the bundle in 1 MiB pieces and reads the journal line by
line, doing nothing else. The ratios say how much more than that verify and score cost.
With ``--against REV`` the same bundles are verified by REV's code too (see
``_common.build_revision``), in alternating order.
Run: .venv/bin/python benchmarks/bench_verify.py [--tasks N ...] [--runs N] [--against REV] [--keep DIR]
(the 100,000-task figures: --tasks 100000 --keep DIR, which keeps the bundle for the next run)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from _common import (
    CURRENT,
    SEALBENCH,
    Build,
    Measured,
    Target,
    alternate,
    builds,
    check,
    figure,
    measure,
    megabytes,
    runs_argument,
    seconds,
    times,
)
from figures import cpu_model

from sealbench import events
from sealbench.contract import lock_contract
from sealbench.digest import sha256_bytes
from sealbench.files import model_json, write_atomic
from sealbench.formats import AccessClass, AgentSpec, Budget, Controls, PackRef, ScoringContract
from sealbench.journal import ChainScan, Journal, scan_chain
from sealbench.runner import write_derived

FLOOR = r"""
import hashlib, os, sys
root = sys.argv[1]
for here, _, names in os.walk(root):
    for name in names:
        h = hashlib.sha256()
        with open(os.path.join(here, name), "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
with open(os.path.join(root, "journal.jsonl"), "rb") as f:
    for line in f:
        pass
"""
"""The floor: every byte of the bundle hashed in 1 MiB pieces, and the journal read line by line."""

PARSE_FLOOR = r"""
import hashlib, json, sys
chained = b""
with open(sys.argv[1] + "/journal.jsonl", "rb") as f:
    for line in f:
        value = json.loads(line)
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        chained = hashlib.sha256(chained + canonical).digest()
"""
"""The Python floor: each journal line parsed and written canonically again, its hash chained
to the last; the least any check of the journal's chain does in Python. The floor above is
mostly the disk's; this one is mostly the processor's, so a command's ratio to it says how
much Python it runs per line, whatever the machine's speed."""

TARGETS = {
    10_000: (Target(5, "< 5 s"), Target(300, "< 300 MB")),
    100_000: (Target(30, "< 30 s"), Target(300, "< 300 MB")),
}
REPORT_TARGETS = {100_000: TARGETS[100_000]}
"""report on the 100,000-task bundle stays within verify's bounds (the 10,000-task figure has none)."""


def synthesise(run_dir: Path, n: int) -> None:
    ids = [f"task-{i:05d}" for i in range(n)]
    contract = ScoringContract(
        task_ids=ids, controls=Controls(narration_probe=None, oracle_validity="unavailable"),
        access_class=AccessClass(host="benchmark machine"), agent=AgentSpec(label="synthetic", command="true"),
        budget=Budget(max_attempts=1, wall_clock_s=60), forbidden_paths=["conftest.py"],
        pack=PackRef(path="pack", sha256=sha256_bytes(b"synthetic pack")),
    )
    contract = lock_contract(contract, "bench-verify", datetime.now(UTC))
    run_dir.mkdir(parents=True)
    write_atomic(run_dir / "scoring_contract.json", model_json(contract))
    journal = Journal.create(run_dir / "journal.jsonl", fsync=False)
    journal.append(events.RunStarted(contract_sha256=contract.contract_sha256, run_id=contract.run_id,
                                     pack_sha256=contract.pack.sha256 if contract.pack else None,
                                     argv=None, probe=False, sandbox={"kind": "bubblewrap"}))
    hidden = sha256_bytes(b"hidden tests")
    patch = b"--- a/mod.py\n+++ b/mod.py\n@@ -1 +1 @@\n-VALUE = 0\n+VALUE = 1\n"
    patch_digest = sha256_bytes(patch)
    (run_dir / "blobs").mkdir()
    (run_dir / "blobs" / patch_digest.removeprefix("sha256:")).write_bytes(patch)
    for i, tid in enumerate(ids):
        passed = i % 3 == 0
        journal.append(events.TaskStarted(task_id=tid, max_attempts=1, wall_clock_s=60, prompt_template_id="t",
                                          hidden_tests_sha256=hidden, oracle_cmd=["python", "check_value.py"]))
        journal.append(events.AttemptStarted(task_id=tid, attempt=1, budget_s=60))
        journal.append(events.AgentFinished(task_id=tid, attempt=1, exit_code=0, timed_out=False, elapsed_ms=5))
        journal.append(events.PatchCaptured(task_id=tid, attempt=1, patch_sha256=patch_digest, empty=False,
                                            changed=["mod.py"], changed_count=1))
        journal.append(events.Graded(task_id=tid, attempt=1, patch_applies_clean=True, forbidden=[],
                                     no_forbidden_path=True, tests_green=passed,
                                     oracle=events.ProcessFacts(exit_code=0 if passed else 1, timed_out=False),
                                     oracle_timed_out=False, task_pass=passed))
        journal.append(events.AttemptFinished(task_id=tid, attempt=1, result="pass" if passed else "fail",
                                              elapsed_ms=10))
        journal.append(events.TaskFinished(task_id=tid, outcome="pass" if passed else "fail", attempts_used=1,
                                           elapsed_ms=12, first_attempt_passed=passed, patch_sha256=patch_digest))
    journal.append(events.RunFinished())
    journal.close()
    write_derived(run_dir, (line for _, line in scan_chain(run_dir / "journal.jsonl", ChainScan())
                            if line is not None), ids)


def bundle_of(root: Path, n: int) -> Path:
    """The bundle of an n-task run made under ``root`` (made once; reused when it is there)."""
    bundle = root / f"bundles-{n}" / "bench-verify"
    if not (bundle / "SHA256SUMS").is_file():
        synthesise(root / f"run-{n}", n)
        check(measure([SEALBENCH, "bundle", str(root / f"run-{n}"), "--out", str(bundle.parent)]), "bundle")
    return bundle


# Each command is started by a small process of its own, which reports its figures: a child's
# ru_maxrss counts the memory of the process it was forked from until it execs, and this one
# holds what synthesising a bundle left behind.
LAUNCH = r"""
import json, os, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, usage = os.wait4(p.pid, 0)
print(json.dumps([time.perf_counter() - t0, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status),
                  usage.ru_utime + usage.ru_stime, usage.ru_stime, err[-3000:].decode(errors="replace")]))
"""


def fresh(argv: list[str], what: str) -> Measured:
    """``argv`` run to completion, started by :data:`LAUNCH`: its wall-clock and CPU time and
    its own peak resident memory."""
    m = check(measure([sys.executable, "-c", LAUNCH, *argv]), f"{what} (launcher)")
    wall, peak, code, cpu, system, err = json.loads(m.stdout.decode().splitlines()[-1])
    return check(Measured(wall, peak, code, err.encode(), cpu, system), what)


def timed(build: Build, argv: list[str], what: str) -> Measured:
    return fresh([build.exe, *argv], f"{what} ({build.label})")


SETTLE_S: Final = 30.0


def settle() -> None:
    """Let the disk settle after a report wrote a third of a million files: on this machine's
    disk the writes (and, worse, removals) of that many files leave the kernel busy for a
    while after, and whatever is timed next would pay for them."""
    os.sync()
    time.sleep(SETTLE_S)


def bench(bundle: Path, n: int, runs: int, items: list[Build]) -> None:
    lines = sum(1 for _ in (bundle / "journal.jsonl").open("rb"))
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    print(f"bench_verify: {n} tasks, {lines} journal events, {size / 1e6:.0f} MB in the bundle, {runs} runs; "
          f"{os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}", flush=True)
    floors: list[Measured] = []
    parse_floors: list[Measured] = []
    verify: dict[str, list[Measured]] = {b.label: [] for b in items}
    score: dict[str, list[Measured]] = {b.label: [] for b in items}
    report: dict[str, list[Measured]] = {b.label: [] for b in items}
    contract = str(bundle / "scoring_contract.json")
    outs = bundle.parent.parent / f"reports-{n}"
    shutil.rmtree(outs, ignore_errors=True)
    settle()
    for run in range(runs):
        floors.append(fresh([sys.executable, "-c", FLOOR, str(bundle)], "floor"))
        parse_floors.append(fresh([sys.executable, "-c", PARSE_FLOOR, str(bundle)], "parse floor"))
        for build in alternate(run, items):
            verify[build.label].append(timed(build, ["verify", str(bundle)], "verify"))
            score[build.label].append(timed(build, ["score", contract, str(bundle), "--json"], "score"))
            out = outs / f"{build.label}-{run}"
            report[build.label].append(timed(build, ["report", str(bundle), "--out", str(out)], "report"))
            settle()
    # Each report is kept until every figure is taken: removing a report's files (a third of
    # a million of them at 100,000 tasks) slowed what this machine did next, all of it, for
    # up to a minute.
    shutil.rmtree(outs, ignore_errors=True)
    settle()
    figure("floor: hash every file, read the journal's lines", [m.seconds for m in floors], seconds)
    figure("  peak memory", [m.peak_mb for m in floors], megabytes)
    figure("Python floor: parse each journal line, chain its hash", [m.seconds for m in parse_floors], seconds)
    for build in items:
        label = "" if build is CURRENT else f" ({build.label})"
        for what, measured, targets in ((f"sealbench verify{label}", verify[build.label], TARGETS),
                                        (f"sealbench score --json{label}", score[build.label], TARGETS),
                                        (f"sealbench report{label}", report[build.label], REPORT_TARGETS)):
            wall, peak = targets.get(n, (None, None))
            figure(what, [m.seconds for m in measured], seconds, wall if build is CURRENT else None)
            figure("  CPU time (user + system)", [m.cpu_seconds for m in measured], seconds)
            if measured is report[build.label]:
                figure("    of which system (making the report's files)", [m.system_seconds for m in measured],
                       seconds)
            figure("  peak memory", [m.peak_mb for m in measured], megabytes, peak if build is CURRENT else None)
            figure("  against the floor of the same run",
                   [m.seconds / f.seconds for m, f in zip(measured, floors, strict=True)], times)
            figure("  against the Python floor of the same run",
                   [m.seconds / f.seconds for m, f in zip(measured, parse_floors, strict=True)], times)
    if len(items) == 2:
        now, then = (verify[b.label] for b in items)
        for what, key in (("wall-clock", "seconds"), ("CPU", "cpu_seconds"), ("peak memory", "peak_mb")):
            figure(f"verify, current / {items[1].label}: {what}, each run",
                   [getattr(x, key) / getattr(y, key) for x, y in zip(now, then, strict=True)], times)


def main() -> None:
    ap = argparse.ArgumentParser()
    # 10,000 by default (make bench): making and bundling 100,000 tasks takes a few minutes.
    ap.add_argument("--tasks", type=int, nargs="+", default=[10_000])
    ap.add_argument("--runs", type=runs_argument, default=3)
    ap.add_argument("--against", metavar="REV", help="also time REV's verify and score on the same bundles")
    ap.add_argument("--keep", metavar="DIR", type=Path,
                    help="make the bundles under DIR and keep them (a second run reuses them)")
    args = ap.parse_args()
    items = builds(args.against)
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = args.keep or Path(tmp)
        for n in args.tasks:
            bench(bundle_of(root, n), n, args.runs, items)


if __name__ == "__main__":
    main()
