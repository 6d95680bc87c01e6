"""Stress the sandbox the way the runner uses it: many threads, short commands, a loaded machine.

Runs ``--runs`` sandboxed commands (``python -c pass``, ``true``, a short ``sh -c``) from
``--threads`` threads while ``--burners`` CPU burners keep the machine busy, and counts every
outcome: successes, each HarnessError by message (numbers and paths folded), other exceptions
and wrong results. ``--serial N`` also times N sequential ``true`` launches (the per-launch
overhead). ``--impl FILE`` loads a version of the sandbox from the time it was one module,
``sandbox.py``, instead of the ``sealbench.sandbox`` package, to compare with it, e.g.::

    git show OLD:src/sealbench/sandbox.py > /tmp/old_sandbox.py
    .venv/bin/python benchmarks/stress_sandbox.py --impl /tmp/old_sandbox.py --diagnose

``--diagnose`` (implementations that still use a ``preexec_fn``) records, from inside the forked
child, the exception the preexec hook raised: subprocess only reports "Exception occurred in
preexec_fn". ``--rival-sweeps`` starts a second process that opens the sandbox over and over,
as concurrent sealbench processes (other test runs, other runners) on the same machine do;
``--rival-impl FILE`` makes that process run another version (an older one sweeps harder).
Exit status 1 when any run failed.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from sealbench.errors import HarnessError

COMMANDS: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("python", (sys.executable, "-c", "pass"), 0),
    ("true", ("true",), 0),
    ("sh", ("sh", "-c", "echo out; echo err >&2; exit 3"), 3),
    # Leaves two processes behind: the teardown must kill them and remove the emptied cgroup.
    ("leftover", ("sh", "-c", "sleep 30 & sleep 30 & echo started"), 0),
)
BURNER = "while True: pass"
RIVAL = (
    "import importlib.util, sys, time\n"
    "if sys.argv[1]:\n"
    "    spec = importlib.util.spec_from_file_location('rival_sandbox', sys.argv[1])\n"
    "    sandbox = sys.modules['rival_sandbox'] = importlib.util.module_from_spec(spec)\n"
    "    spec.loader.exec_module(sandbox)\n"
    "else:\n"
    "    from sealbench import sandbox\n"
    "end = time.monotonic() + float(sys.argv[2])\n"
    "while time.monotonic() < end:\n"
    # the package keeps these in its cgroups and opening modules; an old sandbox.py in itself
    "    getattr(sandbox, 'cgroups', sandbox)._pids_hierarchy.cache_clear()\n"
    "    getattr(sandbox, 'opening', sandbox)._opened.clear()\n"
    "    try:\n"
    "        sandbox.open_sandbox('bubblewrap')\n"
    "    except Exception as exc:\n"
    "        print('rival:', exc, file=sys.stderr)\n"
)


def load_impl(path: str | None) -> ModuleType:
    if path is None:
        from sealbench import sandbox

        return sandbox
    spec = importlib.util.spec_from_file_location("sealbench_sandbox_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fold(message: str) -> str:
    """One bucket per kind of message: paths and numbers folded."""
    message = re.sub(r"/\S+", "<path>", message)
    return re.sub(r"\d+", "N", message)[:200]


def instrument_preexec(module: ModuleType, log_path: Path) -> bool:
    """Make the child-side preexec hook log the exception it raises (before re-raising it)."""
    make = getattr(module, "_make_preexec", None)
    if make is None:
        return False
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def wrapped(*args: Any) -> Callable[[], None]:
        inner = make(*args)
        cgroup = args[1] if len(args) > 1 else None
        where = str(getattr(cgroup, "path", "-"))

        def preexec() -> None:
            try:
                inner()
            except BaseException as exc:
                exists = os.path.exists(where) if where != "-" else None
                line = f"{os.getpid()} {type(exc).__name__} {exc!r} cgroup={where} exists={exists}\n"
                os.write(log_fd, line.encode())
                raise

        return preexec

    module._make_preexec = wrapped  # type: ignore[attr-defined]
    return True


def start_burners(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(n)]


def serial_overhead(module: ModuleType, sandbox: Any, root: Path, n: int) -> list[float]:
    work = root / "serial"
    work.mkdir()
    times = []
    for _ in range(n):
        spec = module.SandboxSpec(
            argv=("true",),
            workdir=work,
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=30.0,
            stdout_path=root / "serial.out",
            stderr_path=root / "serial.err",
        )
        t0 = time.perf_counter()
        result = sandbox.run(spec)
        times.append(time.perf_counter() - t0)
        assert result.exit_code == 0, result
    return times


def stress(module: ModuleType, sandbox: Any, root: Path, runs: int, threads: int) -> dict[str, Any]:
    outcomes: collections.Counter[str] = collections.Counter()
    latency: dict[str, list[float]] = collections.defaultdict(list)
    lock = threading.Lock()

    def one(i: int) -> None:
        name, argv, expected = COMMANDS[i % len(COMMANDS)]
        run_dir = root / f"r{i}"
        (run_dir / "work").mkdir(parents=True)
        spec = module.SandboxSpec(
            argv=argv,
            workdir=run_dir / "work",
            env={"PATH": "/usr/bin:/bin", "HOME": str(run_dir / "home"), "LANG": "C.UTF-8"},
            timeout_s=60.0,
            stdout_path=run_dir / "stdout",
            stderr_path=run_dir / "stderr",
            limits=module.Limits(processes=64),
        )
        t0 = time.perf_counter()
        try:
            result = sandbox.run(spec)
        except HarnessError as exc:
            key = f"HarnessError: {fold(str(exc))}"
        except Exception as exc:  # every failure is counted, by type
            key = f"{type(exc).__name__}: {fold(str(exc))}"
        else:
            ok = result.exit_code == expected and not result.timed_out
            key = "ok" if ok else f"wrong result: exit {result.exit_code} timed_out={result.timed_out}"
        with lock:
            outcomes[key] += 1
            latency[name].append(time.perf_counter() - t0)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(runs)))
    return {"outcomes": outcomes, "latency": latency, "wall": time.perf_counter() - started}


def ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--threads", type=int, default=12)
    ap.add_argument("--burners", type=int, default=3, help="CPU burner processes during the stress")
    ap.add_argument("--serial", type=int, default=0, help="also time N sequential `true` launches")
    ap.add_argument("--impl", help="path of another sandbox.py to test instead of sealbench.sandbox")
    ap.add_argument("--diagnose", action="store_true", help="log the exceptions raised in preexec_fn")
    ap.add_argument("--rival-sweeps", action="store_true", help="a second process reopens the sandbox meanwhile")
    ap.add_argument("--rival-impl", help="the sandbox.py the rival process runs (default: as --impl)")
    args = ap.parse_args()

    module = load_impl(args.impl)
    sandbox = module.open_sandbox("bubblewrap")
    with tempfile.TemporaryDirectory(prefix="sealbench-stress-") as tmp:
        root = Path(tmp)
        log = root / "preexec.log"
        diagnosing = args.diagnose and instrument_preexec(module, log)
        if args.serial:
            times = serial_overhead(module, sandbox, root, args.serial)
            print(
                f"serial `true` x{len(times)} (load {os.getloadavg()[0]:.1f}): median "
                f"{1000 * statistics.median(times):.1f} ms, p10 {ms(times, 0.1)} ms, p90 {ms(times, 0.9)} ms"
            )
        burners = start_burners(args.burners)
        rival = None
        if args.rival_sweeps:
            rival = subprocess.Popen([sys.executable, "-c", RIVAL, args.rival_impl or args.impl or "", "3600"], stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            report = stress(module, sandbox, root, args.runs, args.threads)
            load = os.getloadavg()[0]
        finally:
            for proc in [*burners, *([rival] if rival else [])]:
                proc.kill()
                proc.wait()
        outcomes = report["outcomes"]
        failed = args.runs - outcomes["ok"]
        print(
            f"stress: {args.runs} runs, {args.threads} threads, {args.burners} burners"
            f"{', rival sweeps' if rival else ''}, load {load:.1f}, {report['wall']:.1f} s: "
            f"{outcomes['ok']} ok, {failed} failed"
        )
        for key, count in outcomes.most_common():
            if key != "ok":
                print(f"  {count:5d}  {key}")
        for name, values in sorted(report["latency"].items()):
            print(f"  latency {name:<6}: median {ms(values, 0.5)} ms, p90 {ms(values, 0.9)} ms, max {ms(values, 1.0)} ms")
        if diagnosing:
            lines = log.read_text().splitlines() if log.exists() else []
            kinds = collections.Counter(fold(" ".join(line.split()[1:])) for line in lines)
            print(f"  child-side preexec exceptions: {len(lines)}")
            for kind, count in kinds.most_common():
                print(f"  {count:5d}  {kind}")
            for line in lines[:5]:
                print(f"    e.g. {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
