"""Repository tasks: what grading in a mounted environment costs per task, on the click instances.

The three click instances of the data folder beside this project, imported once. Three packs
of them, sealed side by side: the import as it is (each task's environment, built by uv and
bound read-only into the sandbox, each grading copy installed by click's own build backend in
the sandbox before the oracle, its interpreter running the harness's pytest, the repository
linked in); the same import with the install turned off (`--env-spec` install "none": the
floor the install adds to); and the same tasks graded as before environments (no environment:
the harness's own interpreter, with `-o pythonpath=src`; click's tests need nothing but pytest,
so they run there too). Each run times `run` with builtin:reference over the three tasks in
each pack, rotating which goes first, in the real bubblewrap sandbox at --jobs 1, the
contracts written and locked before the clock starts. The figures are the differences per
task and the installed run's ratio to the floor, median and range over the runs. Also
printed: the environment build, cold (an empty uv cache) and cached, and its size.
Not part of `make bench` (it needs the data folder).
Run: .venv/bin/python benchmarks/env_grading.py [--runs R]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from _common import SEALBENCH, figure, megabytes, private_runs_index, runs_argument, seconds, signed_ms

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "repos"


def sb(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([SEALBENCH, *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"sealbench {' '.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def without_environment(pack: Path) -> None:
    """Grade as before environments: the harness's interpreter, the repository on pythonpath."""
    for record in sorted(pack.glob("tasks/*/task.json")):
        data = json.loads(record.read_text())
        data.pop("environment")
        data["oracle_cmd"] = [data["oracle_cmd"][0], "-q", "-o", "pythonpath=src", *data["oracle_cmd"][2:]]
        record.write_text(json.dumps(data, indent=2) + "\n")
    sb("pack", "seal", str(pack), "--update")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=runs_argument, default=3, help="runs per figure (default: 3)")
    args = parser.parse_args()
    if not (DATA / "click.bundle").is_file():
        raise SystemExit(f"the click instances are not on this machine ({DATA} is absent)")
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-env-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        os.environ["SEALBENCH_ENV_CACHE"] = str(root / "envs")
        subprocess.run(["git", "clone", "-q", str(DATA / "click.bundle"), str(root / "click")], check=True)
        packs = {"environment": root / "env-pack", "not installed": root / "floor-pack",
                 "no environment": root / "plain-pack"}
        floor = root / "no-install.json"
        floor.write_text(json.dumps({"pallets/click": {"install": "none"}}))
        for name, pack in packs.items():
            sb("import", "swebench", str(DATA / "click-instances.jsonl"), "-o", str(pack),
               "--repo", f"pallets/click={root / 'click'}", *(["--env-spec", str(floor)] if name == "not installed" else []))
        without_environment(packs["no environment"])
        started = time.perf_counter()
        sb("env", "build", str(packs["environment"]), env={**os.environ, "UV_CACHE_DIR": str(root / "uv-cache")})
        cold = time.perf_counter() - started
        cached = []
        for _ in range(args.runs):
            started = time.perf_counter()
            sb("env", "build", str(packs["environment"]))
            cached.append(time.perf_counter() - started)
        size = sum(f.stat().st_size for f in (root / "envs").rglob("*") if f.is_file() and not f.is_symlink())
        sb("env", "build", str(packs["not installed"]))
        for pack in packs.values():
            sb("pack", "validate", str(pack), "--repeat", "1", "--no-progress")
        walls: dict[str, list[float]] = {name: [] for name in packs}
        for run in range(args.runs):
            items = list(packs.items())
            order = items[run % len(items):] + items[:run % len(items)]
            for name, pack in order:
                contract = root / f"{name.replace(' ', '-')}-{run}.json"
                sb("contract", "new", str(pack), "-o", str(contract), "--agent", "builtin:reference", "--agent-label",
                   "reference", "--host", "benchmark machine", "--no-narration-probe")
                sb("contract", "lock", str(contract), "--run-id", f"bench-env-{name.replace(' ', '-')}-{run}-{os.getpid()}")
                started = time.perf_counter()
                sb("run", str(contract), "--out", str(root / f"run-{name.replace(' ', '-')}-{run}"), "--no-progress",
                   "--jobs", "1")
                walls[name].append(time.perf_counter() - started)
        tasks = 3
        print(f"click instances ({tasks} tasks), builtin:reference at --jobs 1; {args.runs} runs")
        figure("run, graded in the tasks' environments", walls["environment"], seconds)
        figure("run, in the environments, not installed (the floor)", walls["not installed"], seconds)
        figure("run, graded as before environments (the harness's Python)", walls["no environment"], seconds)
        figure("per task, install by the backend against none", [(e - f) / tasks * 1000 for e, f in
                                                                  zip(walls["environment"], walls["not installed"],
                                                                      strict=True)], signed_ms)
        figure("run installed / floor", [e / f for e, f in zip(walls["environment"], walls["not installed"],
                                                                strict=True)], lambda v: f"{v:.2f}x")
        figure("per task, environment (not installed) against none", [(f - p) / tasks * 1000 for f, p in
                                                                     zip(walls["not installed"],
                                                                         walls["no environment"], strict=True)],
               signed_ms)
        print(f"  env build, cold (empty uv cache; 2 environments)          {cold:.2f} s")
        figure("env build, cached", cached, seconds)
        print(f"  environments on disk (2)                                  {megabytes(size / 1e6)}")


if __name__ == "__main__":
    main()
