"""Issue 5 target: verify a 10,000-task bundle in < 5 s and < 300 MB.

The run is synthesised with sealbench's own journal writer, seven events per task as the
runner writes them (task started, attempt started, agent finished, patch captured, graded,
attempt finished, task finished; a third of the tasks pass), bundled with `sealbench
bundle`, then timed with `sealbench verify`, which checks every sum and the chain,
re-derives every derived file byte for byte and checks each task's events against its
outcome. The floor is `python -c pass`, timed in the same run.
Run: .venv/bin/python benchmarks/bench_verify.py [--tasks N]
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from _common import (
    SEALBENCH,
    Target,
    check,
    figure,
    floor_seconds,
    measure,
    megabytes,
    millis,
    runs_argument,
    seconds,
    times,
)

from sealbench import events
from sealbench.contract import lock_contract
from sealbench.digest import sha256_bytes
from sealbench.files import model_json, write_atomic
from sealbench.formats import AccessClass, AgentSpec, Budget, Controls, PackRef, ScoringContract
from sealbench.journal import Journal, read_chain
from sealbench.runner import write_derived


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
    write_derived(run_dir, read_chain(run_dir / "journal.jsonl").lines, ids)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--runs", type=runs_argument, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        synthesise(root / "run", args.tasks)
        events = len(read_chain(root / "run" / "journal.jsonl").events)
        check(measure([SEALBENCH, "bundle", str(root / "run"), "--out", str(root / "bundles")]), "bundle")
        print(f"bench_verify: {args.tasks} tasks, {events} journal events, {args.runs} runs")
        floors, walls, peaks = [], [], []
        for _ in range(args.runs):
            floors.append(floor_seconds())
            m = check(measure([SEALBENCH, "verify", str(root / "bundles" / "bench-verify")]), "verify")
            walls.append(m.seconds)
            peaks.append(m.peak_mb)
        figure("floor: python -c pass (best of 5), in each run", floors, millis)
        figure("sealbench verify", walls, seconds, Target(5, "< 5 s"))
        figure("  peak memory", peaks, megabytes, Target(300, "< 300 MB"))
        figure("  against the floor of the same run", [w / f for w, f in zip(walls, floors, strict=True)], times)


if __name__ == "__main__":
    main()
