"""Issue 15: per-attempt grading cost of the separated function-level oracle on HumanEval,
against the in-process script oracle that earlier releases generated, timed in the same run.

Two packs of the same 163 HumanEval tasks differ only in their oracle: the trusted
``python -I -m sealbench.function_oracle`` (a parent plus a worker process, the parent the
sandbox's pid 1) and the earlier ``python test_sealbench_oracle.py`` script (candidate and test
in one process, a JUnit report written last). Each run is ``sealbench run`` of the reference
agent at ``--jobs 1``, so every attempt is graded, one at a time; the two kinds alternate,
``--repeat`` runs each (default 3). Printed per attempt, median and range: wall-clock time and
CPU time (user + system of the whole run, sandboxes and oracles included: the figure that
does not depend on what else the machine runs); then the ratios and differences.
Run: .venv/bin/python benchmarks/bench_oracle.py [--data PATH] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _common import ROOT, SEALBENCH, check, lock_contract, measure, row

# The script oracle as sealbench.importers generated it before the function-level oracle.
LEGACY_HEADER = '''import os as _sealbench_os

_SEALBENCH_REPORT = "sealbench-oracle-junit.xml"
if _sealbench_os.path.lexists(_SEALBENCH_REPORT):
    _sealbench_os.remove(_SEALBENCH_REPORT)

import solution as _sealbench_candidate

globals().update(
    {_k: _v for _k, _v in vars(_sealbench_candidate).items() if not (_k.startswith("__") and _k.endswith("__"))}
)

'''
LEGACY_FOOTER = '''
with open(_SEALBENCH_REPORT, "w", encoding="utf-8") as _sealbench_file:
    _sealbench_file.write(
        '<testsuite name="sealbench" tests="1"><testcase classname="{classname}" name="check"/></testsuite>\\n'
    )
'''


def legacy_pack(new: Path, dest: Path) -> Path:
    """A copy of ``new`` whose tasks use the script oracle of earlier releases."""
    shutil.copytree(new, dest)
    manifest = json.loads((dest / "pack.json").read_text())
    manifest.update(seal=None, validity=None, name=manifest["name"] + "-script")
    (dest / "pack.json").write_text(json.dumps(manifest))
    for task in sorted((dest / "tasks").iterdir()):
        hidden = task / "hidden"
        test = (hidden / "test_sealbench_oracle.py").read_text()
        (hidden / "sealbench_oracle.json").unlink()
        (hidden / "test_sealbench_oracle.py").write_text(LEGACY_HEADER + test + LEGACY_FOOTER.format(classname=task.name))
        record = json.loads((task / "task.json").read_text())
        record.update(oracle_cmd=["python", "test_sealbench_oracle.py"], hidden_tests_sha256="pending-local-hash",
                      junit_xml="sealbench-oracle-junit.xml", required_tests=[f"{task.name}::check"])
        (task / "task.json").write_text(json.dumps(record))
    check(measure([SEALBENCH, "pack", "seal", str(dest)]), "seal the script-oracle pack")
    return dest


def timed(argv: Sequence[str]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (user + system, every descendant included) of one command."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[1]} failed: {proc.stderr.read().decode(errors='replace')[-2000:] if proc.stderr else ''}")
    return wall, usage.ru_utime + usage.ru_stime


def passes(run_dir: Path) -> int:
    cards = [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]
    return sum(c["outcome"] == "pass" for c in cards)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT / ".cache" / "data" / "HumanEval.jsonl.gz")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        check(measure([SEALBENCH, "import", "humaneval", str(args.data), "-o", str(root / "he")]), "import")
        packs = {"function-level oracle (separated)": root / "he",
                 "script oracle (in-process, earlier)": legacy_pack(root / "he", root / "he-script")}
        # A locked run_id runs once: every run gets its own contract (locked before the timing).
        contracts = {(k, label): root / f"contract-{k}-{i}.json"
                     for k in range(args.repeat) for i, label in enumerate(packs)}
        for (k, label), contract in contracts.items():
            lock_contract(packs[label], contract, f"bench-oracle-{k}-{list(packs).index(label)}", "builtin:reference")
        n = len(list((root / "he" / "tasks").iterdir()))
        print(f"bench_oracle: HumanEval, {n} tasks, reference agent, --jobs 1, {args.repeat} runs of each kind")
        wall: dict[str, list[float]] = {label: [] for label in packs}
        cpu: dict[str, list[float]] = {label: [] for label in packs}
        for k in range(args.repeat):
            for i, label in enumerate(packs):
                out = root / f"run-{k}-{i}"
                seconds, cpu_s = timed([SEALBENCH, "run", str(contracts[k, label]), "--out", str(out), "--no-progress",
                                        "--jobs", "1"])
                if passes(out) != n:
                    raise SystemExit(f"{label}: the reference passed {passes(out)} of {n}")
                wall[label].append(seconds / n * 1000)
                cpu[label].append(cpu_s / n * 1000)
                shutil.rmtree(out)
        for what, values in (("wall-clock", wall), ("CPU", cpu)):
            medians = {}
            for label, runs in values.items():
                medians[label] = statistics.median(runs)
                row(f"{label}, {what} ms per attempt", f"median {medians[label]:.1f} (range {min(runs):.1f}-"
                    f"{max(runs):.1f}; runs {', '.join(f'{v:.1f}' for v in runs)})")
            new, old = medians.values()
            row(f"separated / in-process, {what}", f"{new / old:.2f}x, {new - old:+.1f} ms per attempt")


if __name__ == "__main__":
    main()
