"""The Ray executor's targets, on a local cluster this script starts (a head and a second worker
node, loopback only, Ray's own multi-node harness):

1. the cluster's start time (head and worker node up, both registered);
2. 200 trivial tasks (agent ``true``) with ``--executor ray`` against the local pool, in the
   same run: the target is under +5 ms per task. The run's fixed cost on Ray (connecting, and
   placing and checking a runner on each node) is measured apart by a run of one task on each
   executor. Two per-task figures follow: what remains of the totals once the fixed cost is
   taken off, and the difference of the runs' journal spans (first line to last, the monotonic
   clock), which leaves the fixed cost out without subtracting a second noisy measurement;
   the target is checked on the second;
3. 64 tasks whose agent sleeps 0.5 s, 16 at once, on the cluster, against the ideal 2 s.

Every line is measured --runs times, the two executors alternately, each run under a contract
locked for it. Run: .venv/bin/python benchmarks/ray_scale.py [--runs R] [--tasks N]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    SEALBENCH,
    Target,
    check,
    figure,
    interval_verdict,
    lock_contract,
    measure,
    private_runs_index,
    row,
    runs_argument,
    seconds,
    signed_ms,
    times,
    write_pack,
)

MIB = 1024 * 1024
RAY_TARGET = Target(5.0, "< +5 ms")
"""Issue 17: a task on the cluster costs under 5 ms more than on the local pool (journal spans)."""


def start_cluster(temp: Path) -> tuple[Any, str, float]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    common: dict[str, Any] = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 * MIB}
    # Ray's harness writes the cluster's address there whatever temp_dir says, and never makes the folder.
    (Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp") / "ray").mkdir(exist_ok=True)
    t0 = time.perf_counter()
    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={**common, "num_cpus": 2, "include_dashboard": False, "temp_dir": str(temp)})
    cluster.add_node(**common, num_cpus=2)
    cluster.wait_for_nodes()
    return cluster, cluster.address, time.perf_counter() - t0


def timed(contract: Path, out: Path, jobs: int, executor: list[str], extra: list[str] | None = None) -> float:
    return check(measure([SEALBENCH, "run", str(contract), "--out", str(out), "--no-progress", "--jobs", str(jobs),
                          *executor, *(extra or [])]), "run").seconds


def journal_span_s(out: Path) -> float:
    """Seconds from the run's first journal line to its last (monotonic clock): the tasks'
    part of the run, without what comes before its first line and after its last."""
    lines = (out / "journal.jsonl").read_bytes().splitlines()
    first, last = json.loads(lines[0]), json.loads(lines[-1])
    return float(last["mono_ms"] - first["mono_ms"]) / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=runs_argument, default=3)
    ap.add_argument("--tasks", type=int, default=200, help="trivial tasks per run (default: 200)")
    args = ap.parse_args()
    n = args.tasks
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        temp = Path(tempfile.mkdtemp(prefix="sbray-", dir="/tmp"))  # Ray's sockets: a short path
        cluster, address, started = start_cluster(temp)
        try:
            ray = ["--executor", "ray", "--address", address]
            print(f"ray_scale: a local cluster of two nodes (2 CPUs each, loopback); {args.runs} runs of each line")
            figure("cluster start (head and a worker node registered)", [started], seconds)
            trivial = write_pack(root / "trivial", n, oracle=["true"])
            check(measure([SEALBENCH, "pack", "seal", str(trivial)]), "seal")
            single = write_pack(root / "single", 1, oracle=["true"], name="single")
            check(measure([SEALBENCH, "pack", "seal", str(single)]), "seal")
            for jobs in (1, 4):
                walls: dict[str, list[float]] = {"local": [], "ray": []}
                fixed: dict[str, list[float]] = {"local": [], "ray": []}
                spans: dict[str, list[float]] = {"local": [], "ray": []}
                for r in range(args.runs):
                    order = ("local", "ray") if r % 2 == 0 else ("ray", "local")
                    for name in order:
                        executor = ray if name == "ray" else []
                        for pack, into, label in ((single, fixed, "one"), (trivial, walls, "all")):
                            run_id = f"{label}-{name}-j{jobs}-{r}"
                            lock_contract(pack, root / f"{run_id}.json", run_id, "true")
                            into[name].append(timed(root / f"{run_id}.json", root / run_id, jobs, executor))
                            if into is walls:
                                spans[name].append(journal_span_s(root / run_id))
                print(f"  {n} trivial tasks (agent `true`), --jobs {jobs}")
                figure("    local pool", walls["local"], seconds)
                figure("    Ray executor", walls["ray"], seconds)
                starts = [f - g for f, g in zip(fixed["ray"], fixed["local"], strict=True)]
                figure("    fixed cost of a run on Ray (1-task runs, ray - local)", starts, seconds)
                per_task = [((w - v) - s) / max(1, n - 1) * 1000
                            for w, v, s in zip(walls["ray"], walls["local"], starts, strict=True)]
                figure("    per task on Ray beyond the local pool, from the totals", per_task, signed_ms)
                in_journal = [(r - v) / n * 1000 for r, v in zip(spans["ray"], spans["local"], strict=True)]
                figure("    per task on Ray beyond the local pool, first to last journal line", in_journal, signed_ms,
                       RAY_TARGET)
                row("    the same, the median's 95% interval", interval_verdict(in_journal, RAY_TARGET, signed_ms))
            sleepy = write_pack(root / "sleepy", 64, oracle=["true"], name="sleepy")
            check(measure([SEALBENCH, "pack", "seal", str(sleepy)]), "seal")
            ideal = 64 * 0.5 / 16
            sleeps = []
            for r in range(args.runs):
                run_id = f"sleepy-{r}"
                lock_contract(sleepy, root / f"{run_id}.json", run_id, "sleep 0.5")
                # Sixteen 1 GiB workspace quotas (tmpfs, so memory) do not fit a node of this
                # machine; the sleepers write nothing, so their workspaces are bound instead.
                sleeps.append(timed(root / f"{run_id}.json", root / run_id, 16, ray, ["--no-workspace-quota"]))
            print(f"  64 tasks, agent sleeps 0.5 s, --jobs 16 on Ray (the ideal is {ideal:.0f} s)")
            figure("    wall time", sleeps, seconds)
            figure("    against the ideal", [w / ideal for w in sleeps], times)
        finally:
            cluster.shutdown()


if __name__ == "__main__":
    main()
