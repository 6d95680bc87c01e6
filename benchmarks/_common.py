"""Shared helpers for the benchmark scripts: timing real processes and their peak memory, and
printing each figure as the median and range of several runs beside its floor.

Every figure is measured ``--runs`` times (at least 3); each run measures its floor too, right
before the figure itself, so a ratio compares the two under the same load. A target is "met"
when the median meets it, "MISSED" otherwise, with how many single runs met it. With
``--against REV`` each ratio of the two builds also gets the 95% interval of its median (see
:func:`sealbench.stats.median_interval`), which says whether the runs settle the target at all.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sealbench.stats import median_interval

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "sealbench" / "examples" / "sample_pack"
SEALBENCH = str(Path(sys.executable).parent / "sealbench")

# Every benchmark's runs go to an index of its own, removed at exit: a benchmark never records
# runs in the user's index, and a run_id a benchmark locked before never refuses it again.
_INDEX = tempfile.mkdtemp(prefix="sealbench-bench-index-")
os.environ["SEALBENCH_DATA_DIR"] = _INDEX
atexit.register(shutil.rmtree, _INDEX, ignore_errors=True)


@dataclass
class Measured:
    seconds: float
    peak_mb: float
    returncode: int
    stdout: bytes
    cpu_seconds: float = 0.0
    """User + system time of the command and every descendant it waited for."""
    system_seconds: float = 0.0
    """Of :attr:`cpu_seconds`, the time spent in the kernel (making and removing files, say)."""


def measure(argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> Measured:
    """Run a command to completion; wall time and the child's peak resident memory (ru_maxrss)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t0
    return Measured(seconds, usage.ru_maxrss / 1024, proc.returncode, out, usage.ru_utime + usage.ru_stime,
                    usage.ru_stime)


def floor_seconds(tries: int = 5) -> float:
    """A bare ``python -c pass``: the best of a few, so one slow start does not count."""
    return min(measure([sys.executable, "-c", "pass"]).seconds for _ in range(tries))


def bare_loop(n: int, argv: Sequence[str], jobs: int = 1) -> float:
    """Seconds to run ``argv`` ``n`` times as plain subprocesses, ``jobs`` at a time."""
    t0 = time.perf_counter()
    if jobs == 1:
        for _ in range(n):
            subprocess.run(list(argv), check=True)
    else:
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(lambda _: subprocess.run(list(argv), check=True), range(n)))
    return time.perf_counter() - t0


MIN_RUNS = 3


def runs_argument(value: str) -> int:
    """``--runs``: at least three, or no median and range worth printing."""
    try:
        runs = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if runs < MIN_RUNS:
        raise argparse.ArgumentTypeError(f"at least {MIN_RUNS} (a median and a range need them), got {runs}")
    return runs


@dataclass(frozen=True)
class Target:
    """A published target: ``bound`` in the unit of the values, ``text`` as the docs state it."""

    bound: float
    text: str
    strict: bool = True

    def met(self, value: float) -> bool:
        return value < self.bound if self.strict else value <= self.bound


def seconds(v: float) -> str:
    return f"{v:.2f} s"


def millis(v: float) -> str:
    return f"{v * 1000:.0f} ms"


def megabytes(v: float) -> str:
    return f"{v:.0f} MB"


def times(v: float) -> str:
    return f"{v:.2f}x"


def signed_ms(v: float) -> str:
    return f"{v:+.1f} ms"


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """"<median> (runs <lo> to <hi>, n=<n>)"."""
    return f"{fmt(statistics.median(values))} (runs {fmt(min(values))} to {fmt(max(values))}, n={len(values)})"


def verdict(values: Sequence[float], target: Target) -> str:
    within = sum(target.met(v) for v in values)
    status = "met" if target.met(statistics.median(values)) else "MISSED"
    return f"target {target.text}: {status} ({within} of {len(values)} runs within)"


def figure(label: str, values: Sequence[float], fmt: Callable[[float], str], target: Target | None = None) -> None:
    """One line: the median and range of ``values``, and the target's verdict when there is one."""
    row(label, spread(values, fmt) + (f"; {verdict(values, target)}" if target else ""))


def check(m: Measured, what: str) -> Measured:
    if m.returncode != 0:
        sys.stderr.write(m.stdout.decode(errors="replace")[-3000:])
        raise SystemExit(f"{what} failed with exit {m.returncode}")
    return m


def write_pack(root: Path, n: int, *, oracle: list[str], wall_clock_s: float = 60, name: str = "bench") -> Path:
    """An n-task pack whose tasks are tiny and alike (one workspace file, one hidden file)."""
    if root.exists():
        shutil.rmtree(root)
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "t.txt").write_text("{task_prompt}\n{feedback}\n")
    (root / "pack.json").write_text(json.dumps({"pack_version": 1, "name": name}))
    for i in range(n):
        d = root / "tasks" / f"task-{i:05d}"
        (d / "workspace").mkdir(parents=True)
        (d / "hidden").mkdir()
        (d / "workspace" / "mod.py").write_text(f"VALUE = {i}\n")
        (d / "hidden" / "check_value.py").write_text(f"import mod\nassert mod.VALUE == {i + 1}, 'value is wrong'\n")
        (d / "prompt.md").write_text(f"Make VALUE in mod.py equal to {i + 1}.\n")
        (d / "task.json").write_text(json.dumps({
            "task_id": f"task-{i:05d}", "prompt_template_id": "t", "oracle_cmd": oracle,
            "hidden_tests_sha256": "pending-local-hash", "max_attempts": 1, "wall_clock_s": wall_clock_s,
            "language": "python"}))
    return root


def lock_contract(pack: Path, contract: Path, run_id: str, agent: str, jobs_note: str = "", *,
                  exe: str = SEALBENCH) -> None:
    check(measure([exe, "contract", "new", str(pack), "-o", str(contract), "--host", "benchmark machine",
                   "--agent-label", "bench", "--agent", agent, "--oracle-validity-unavailable",
                   "--no-narration-probe", "--force"]), "contract new")
    check(measure([exe, "contract", "lock", str(contract), "--run-id", run_id]), "contract lock")


AGAINST_TARGET = Target(1.05, "<= 1.05x", strict=False)
"""``--against REV``: the current code may take at most 5% longer than REV on the same workload."""


@dataclass(frozen=True)
class Build:
    """A build of the code to time: ``label`` names it in the output, ``exe`` is its CLI."""

    label: str
    exe: str


CURRENT = Build("current", SEALBENCH)


def build_revision(rev: str) -> Build:
    """REV of this repository, installed into a private virtualenv under ``.cache/against/``.

    A ``git archive`` of REV is pip-installed without its dependencies: the virtualenv reads
    them from this interpreter's own site-packages (a ``.pth`` line), so both builds run on
    the same libraries and nothing but the build backend is fetched. Built once per commit.
    """
    try:
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"--against {rev}: not a commit of this repository ({e})") from None
    home = ROOT / ".cache" / "against" / sha
    exe = home / "venv" / "bin" / "sealbench"
    stamp = home / "installed"
    if not stamp.exists():
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        archive = home / "src.tar.gz"
        subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar.gz", "-o", str(archive), sha], check=True)
        python = str(home / "venv" / "bin" / "python")
        subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
        site, ours = (subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                                     capture_output=True, text=True).stdout.strip() for py in (python, sys.executable))
        # Appended after the virtualenv's own site-packages: REV's sealbench is found first,
        # and this interpreter's editable install of the current code is never loaded there.
        Path(site, "zz-dependencies.pth").write_text(ours + "\n")
        proc = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps",
                               "--disable-pip-version-check", str(archive)], capture_output=True, text=True)
        if proc.returncode != 0 or not exe.exists():
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
            raise SystemExit(f"--against {rev}: installing {sha[:12]} into {home} failed (exit {proc.returncode})")
        stamp.write_text(sha + "\n")
    return Build(rev, str(exe))


def builds(against: str | None) -> list[Build]:
    """The builds to time: the current code, and REV when ``--against REV`` was given.

    pip byte-compiles what it installs, so REV's commands never compile their source; the
    current code is an editable install whose bytecode Python may never have written (with
    PYTHONDONTWRITEBYTECODE set, every command compiles about 30 modules, some 0.1 s of CPU).
    Compiling it here first gives both builds the same start. Never the examples: a
    ``__pycache__`` in the sample pack's folders would become part of every copy of it.
    """
    if against is None:
        return [CURRENT]
    previous = build_revision(against)
    compile_package(ROOT / "src" / "sealbench")
    return [CURRENT, previous]


def compile_package(package: Path) -> None:
    """Byte-compile a copy of the sealbench package, never its examples (see :func:`builds`)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", "/examples/", str(package)], check=True)


def alternate(run: int, items: Sequence[Build]) -> list[Build]:
    """Builds in alternating order, run by run (current first, then REV first, ...), so neither
    is always timed second, on a warmer cache or a busier machine."""
    return list(items) if run % 2 == 0 else list(reversed(items))


def against_lines(label: str, rev: str, walls: dict[str, list[float]], cpus: dict[str, list[float]],
                  current: str = CURRENT.label) -> None:
    """Wall-clock and CPU time of each build, and the ratio current/REV of each run with its
    verdict. CPU time (user + system of the run and its sandboxes) is the figure that depends
    least on what else the machine runs; wall-clock time is what a user waits. ``current`` is
    the label of the build whose cost is judged."""
    print(f"  {label}")
    for what, values in (("wall-clock", walls), ("CPU", cpus)):
        figure(f"    {what} time, {current}", values[current], seconds)
        figure(f"    {what} time, {rev}", values[rev], seconds)
        ratios = [c / p for c, p in zip(values[current], values[rev], strict=True)]
        figure(f"    {what} time, {current} / {rev}, each run", ratios, times, AGAINST_TARGET)
        row(f"    {what} time, {current} / {rev}, the median's 95% interval", interval_verdict(ratios, AGAINST_TARGET))


def interval_verdict(values: Sequence[float], target: Target, fmt: Callable[[float], str] = times) -> str:
    """Whether the runs settle ``target`` for the median, from its 95% interval (a sign-test
    interval from the order statistics, :func:`sealbench.stats.median_interval`: it assumes
    nothing of how the runs spread, only that they are independent): within the target when
    the whole interval is, beyond it when the whole interval is beyond, and otherwise that these
    runs cannot tell (the machine's noise is wider than the margin; more runs narrow it)."""
    interval = median_interval(values)
    if interval is None:
        return f"needs at least 6 runs (n={len(values)})"
    lo, hi = interval
    if target.met(hi):
        status = "within the target"
    elif not target.met(lo):
        status = "beyond the target"
    else:
        status = "these runs cannot tell"
    return f"[{fmt(lo)}, {fmt(hi)}], n={len(values)}; target {target.text}: {status}"


def no_quota(exe: str) -> list[str]:
    """``--no-workspace-quota`` for a build that knows it: sixteen 1 GiB workspace quotas (tmpfs,
    so memory) do not fit a 24 GiB machine, and a release from before quotas bound workspaces
    from the host anyway (``--no-quota`` compares the two on that footing)."""
    known = "--no-workspace-quota" in subprocess.run([exe, "run", "--help"], capture_output=True, text=True).stdout
    return ["--no-workspace-quota"] if known else []


def scratch_filesystem(path: Path) -> str:
    """The type of the filesystem that holds ``path`` (``tmpfs``, ``ext4``...), or ``unknown``.

    The against-benchmarks print it: where the packs and runs live decides how much the runs
    spread. On an ext4 ``/tmp`` that the benchmark itself fills and empties thousands of times a
    minute, creating a file or directory cost 0.7 to 1 ms of CPU (the allocator passes over
    inodes freed in the last minutes) against 0.05 ms in a quiet directory and 0.007 ms on a
    tmpfs; a line's slowest run of one build took 56% longer than its fastest there (the median
    line of fourteen), 24% on a tmpfs. ``TMPDIR`` chooses the filesystem.
    """
    from sealbench.sandbox import unescape_mount_field

    target = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = unescape_mount_field(fields[1])
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        pass
    return kind


def private_runs_index(root: Path) -> None:
    """Record the benchmark's runs in an index under ``root``, never in the user's data directory."""
    os.environ["SEALBENCH_DATA_DIR"] = str(root / "runs-index")


def row(label: str, value: str) -> None:
    print(f"  {label:<58} {value}", flush=True)
