"""What the run's safeguards cost: the current code against a copy of itself without them.

The safeguards that keep a run trustworthy after anything (a crash, a kill, a second process):
the heartbeat and its watchdog, the run directory's writer lock, the journal's check before
every line that no other process wrote it, the runs index (one run per run_id on a machine),
and the sweep of what killed runs left behind. They are not free, and their target is that a
run with them takes at most 5% longer than the same run without them.

The copy is ``src/sealbench`` with :data:`CUTS` applied: each is an exact edit whose old text
must occur exactly once in its file, or the benchmark stops (it never times a copy that kept a
safeguard because the code moved; ``tests/test_benchmark_cuts.py`` applies them on every
``make test``).
Both run the workloads of ``bench_harness.py`` (200 one-attempt tasks, agent ``true`` and an
agent whose edit is graded, at ``--jobs 1`` and the CLI's default) and those of
``bench_concurrency.py --against`` (64 agents sleeping 0.5 s at ``--jobs 16``; 200 trivial
tasks at ``--jobs 1`` and 2), alternately, each on a pack it sealed, with
``--no-workspace-quota``; each line prints the ratio current / without of every run and the
95% interval of its median against the target.

Run: TMPDIR=<a tmpfs> .venv/bin/python benchmarks/safeguards_cost.py [--tasks N] [--jobs J] [--runs R]
"""

from __future__ import annotations

import argparse
import py_compile
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _common import (
    CURRENT,
    ROOT,
    Build,
    check,
    compile_package,
    measure,
    private_runs_index,
    runs_argument,
    scratch_filesystem,
    write_pack,
)
from bench_concurrency import paired_workloads
from bench_harness import paired_lines

WITHOUT = "no-safeguards"


@dataclass(frozen=True)
class Cut:
    """One exact edit of the copy: ``old`` (found exactly once in ``file``) becomes ``new``."""

    what: str
    file: str
    old: str
    new: str


CUTS: tuple[Cut, ...] = (
    Cut("the heartbeat and its watchdog are never started", "clock.py",
        """        self._since = time.monotonic()
        for thread in self._threads:
            thread.start()
        return self""",
        """        return self"""),
    Cut("no check before each journal line that no other process wrote it", "journal.py",
        """        try:
            named = os.stat(self._path_text)""",
        """        return
        try:
            named = os.stat(self._path_text)"""),
    Cut("no writer lock on the run directory", "runner.py",
        """        with hold_writer(plan.base, plan.command_line):""",
        """        with contextlib.nullcontext(plan.base.mkdir(parents=True, exist_ok=True)):"""),
    Cut("no sweep of what killed runs left in the run directory", "runner.py",
        '''    """What killed runs left in this run directory: half-written files, and their workspaces."""
''',
        '''    """What killed runs left in this run directory: half-written files, and their workspaces."""
    return
'''),
    Cut("the runs index does not claim the run_id", "runs_index.py",
        """    record = RunRecord(run_id=run_id, run_dir=str(run_dir), run_nonce=header.run_nonce,""",
        """    return
    record = RunRecord(run_id=run_id, run_dir=str(run_dir), run_nonce=header.run_nonce,"""),
    Cut("the runs index does not record the first line", "runs_index.py",
        '''    """Record that the run claimed in ``run_dir`` has written its first event; best effort."""
''',
        '''    """Record that the run claimed in ``run_dir`` has written its first event; best effort."""
    return
'''),
    Cut("the runs index does not record the end", "runs_index.py",
        '''    """Record how a run ended and its rate; best effort (a note on stderr when it cannot)."""
''',
        '''    """Record how a run ended and its rate; best effort (a note on stderr when it cannot)."""
    return
'''),
)


class CutError(Exception):
    """An edit no longer applies: its old text is not in its file exactly once."""


def cut_copy(dest: Path) -> Path:
    """Copy ``src/sealbench`` under ``dest/src`` and apply :data:`CUTS`; returns ``dest/src``.

    Raises:
        CutError: an edit's old text occurs in its file zero times or more than once.
    """
    src = dest / "src"
    shutil.copytree(ROOT / "src" / "sealbench", src / "sealbench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for cut in CUTS:
        path = src / "sealbench" / cut.file
        text = path.read_text(encoding="utf-8")
        found = text.count(cut.old)
        if found != 1:
            raise CutError(f"{cut.file}: the text to cut for '{cut.what}' occurs {found} times, not once; "
                           f"update CUTS in {Path(__file__).name} to the code as it is now")
        path.write_text(text.replace(cut.old, cut.new), encoding="utf-8")
        py_compile.compile(str(path), doraise=True)
    return src


def without_build(dest: Path) -> Build:
    """The copy without the safeguards, started the way the installed ``sealbench`` command is."""
    src = cut_copy(dest)
    # Both builds compiled ahead (with PYTHONDONTWRITEBYTECODE set, every start would compile them).
    compile_package(src / "sealbench")
    compile_package(ROOT / "src" / "sealbench")
    exe = dest / "bin" / "sealbench"
    exe.parent.mkdir()
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(src)!r})\n"
                   "from sealbench.cli import entry\nsys.exit(entry())\n", encoding="utf-8")
    exe.chmod(0o755)
    return Build(WITHOUT, str(exe))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=None, help="also measure at this --jobs (default: the CLI default)")
    ap.add_argument("--runs", type=runs_argument, default=6)
    args = ap.parse_args()
    from sealbench.sizing import default_jobs

    jobs_default = args.jobs or default_jobs()
    with tempfile.TemporaryDirectory(prefix="sealbench-bench-") as tmp:
        root = Path(tmp)
        private_runs_index(root)
        both = [CURRENT, without_build(root / "without")]
        packs = {}
        for b in both:
            packs[b.label] = write_pack(root / f"pack-{b.label}", args.tasks, oracle=["python", "-c", "pass"])
            check(measure([b.exe, "pack", "seal", str(packs[b.label])]), f"seal ({b.label})")
        print(f"safeguards_cost: {args.tasks} one-attempt tasks, oracle python -c pass, {args.runs} runs of each "
              f"line, the current code and a copy of it with the safeguards cut out ({WITHOUT}) alternately, "
              f"every run with --no-workspace-quota; packs and runs on {scratch_filesystem(root)} (TMPDIR "
              f"chooses where)")
        print("  cut from the copy: " + "; ".join(cut.what for cut in CUTS))
        extra = {b.label: ["--no-workspace-quota"] for b in both}
        paired_lines(root, both, packs, extra, sorted({1, jobs_default}), args.runs)
        paired_workloads(root, both, args.runs, None, quota=False)


if __name__ == "__main__":
    main()
