"""The kill soak: a real ``sealbench run`` at ``--jobs 4``, its whole process group killed with
SIGKILL 30 times at seeded moments and resumed after each kill, until the run completes.

The agents keep their own account. Each stamps the monotonic clock (the sandbox shares the
host's) every 50 ms into a FIFO the test owns and reads from a thread of its own, outside the
runner's process group: the FIFO's directory is the agent's read-only mount, and a FIFO is
opened for writing on a read-only mount. A stamp never comes after the agent stopped, so the
stamps bound from below how long every attempt ran, whatever killed it. Each agent sleeps a
seeded time, some far past the task's wall-clock cap, and passes or fails by a seeded draw.

After the last resume the test checks, from the journal, the CLI and the stamps: no task
started more attempts than its cap, none twice; no task's agents ran longer in total than its
wall-clock cap plus the second the README allows for killing an agent past its deadline, no
task was charged more than its cap, and none was charged less than its agents ran; a task is
an ``infra_error`` exactly when a kill ended its last attempt; ``score``, ``bundle`` and
``verify`` agree with the journal, whose chain verifies (a rate and a verified bundle, or a
refusal naming the infrastructure errors); no process carrying the test's marker is left, nor
any scratch.

Run with ``make test-soak`` (minutes; not part of ``make test``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import make_contract, needs_bwrap
from sealbench.journal import read_chain
from sealbench.pack import seal_pack
from test_resume import check_run

TASKS = 80
MAX_ATTEMPTS = 3
CAP_S = 8.0
KILLS = 30
TICK_S = 0.05
KILLED_WITHIN_S = 1.0
"""The README's promise: an agent past its deadline is killed within 1 s, whatever it ignores."""

pytestmark = [pytest.mark.soak, needs_bwrap]


def sealbench_exe() -> str:
    exe = Path(sys.executable).parent / "sealbench"
    return str(exe) if exe.exists() else ""


needs_exe = pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test-soak)")


def soak_pack(root: Path, n: int) -> Path:
    """n tiny tasks, each graded by a real oracle in the sandbox (mod.VALUE must be i + 1)."""
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "t.txt").write_text("{task_prompt}\n{feedback}\n")
    (root / "pack.json").write_text(json.dumps({"pack_version": 1, "name": "soak"}))
    for i in range(n):
        d = root / "tasks" / f"task-{i:03d}"
        for sub in ("workspace", "hidden", "solution"):
            (d / sub).mkdir(parents=True)
        (d / "workspace" / "mod.py").write_text(f"VALUE = {i}\n")
        (d / "solution" / "mod.py").write_text(f"VALUE = {i + 1}\n")
        (d / "hidden" / "check_value.py").write_text(f"import mod\nassert mod.VALUE == {i + 1}\n")
        (d / "prompt.md").write_text(f"Make VALUE in mod.py equal to {i + 1}.\n")
        (d / "task.json").write_text(json.dumps({
            "task_id": f"task-{i:03d}", "prompt_template_id": "t", "oracle_cmd": ["python", "check_value.py"],
            "hidden_tests_sha256": "pending-local-hash", "max_attempts": MAX_ATTEMPTS, "wall_clock_s": 60,
            "language": "python"}))
    seal_pack(root)
    return root


def soak_agent(fifo: Path, seed: int, marker: str) -> str:
    """A command agent: stamps ``<task> <attempt> <monotonic>`` into ``fifo`` every 50 ms for a
    seeded time (one attempt in six runs far past the cap), then writes a seeded right or
    wrong answer. ``marker`` is in its command line, so a survivor can be found in /proc."""
    code = textwrap.dedent(f"""\
        # {marker}
        import os, random, time
        task, attempt = os.environ["SEALBENCH_TASK_ID"], os.environ["SEALBENCH_ATTEMPT"]
        rng = random.Random("{seed} " + task + " " + attempt)
        seconds = {CAP_S} + 10 if rng.random() < 1 / 6 else rng.uniform(0.2, 2.0)
        fifo = os.open({str(fifo)!r}, os.O_WRONLY)
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            os.write(fifo, f"{{task}} {{attempt}} {{now:.4f}}\\n".encode())
            if now >= end:
                break
            time.sleep({TICK_S})
        value = int(task.split("-")[1]) + 1 if rng.random() < 0.4 else -int(attempt)
        open("mod.py", "w").write(f"VALUE = {{value}}\\n")
    """)
    return "python -c " + shlex.quote(code)


class Stamps:
    """Reads the agents' FIFO from a thread of the test: ``(task, attempt)`` -> its stamps."""

    def __init__(self, fifo: Path) -> None:
        os.mkfifo(fifo, 0o666)
        # Read and write: the FIFO never reports end-of-file between agents, and an agent's
        # open for writing never waits for a reader.
        self._fd = os.open(fifo, os.O_RDWR)
        self.by_attempt: dict[tuple[str, int], list[float]] = defaultdict(list)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        pending = b""
        while True:
            chunk = os.read(self._fd, 65536)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line == b"done":
                    return
                task, attempt, mono = line.decode().split()
                self.by_attempt[task, int(attempt)].append(float(mono))

    def close(self) -> None:
        os.write(self._fd, b"done\n")
        self._thread.join(10)
        os.close(self._fd)

    def ran(self, task: str) -> float:
        """Seconds the task's agents ran in all, by their own stamps (a lower bound)."""
        return sum(s[-1] - s[0] for (t, _), s in self.by_attempt.items() if t == task)


def marked_processes(marker: str) -> list[str]:
    """Live processes whose command line or environment carries ``marker``."""
    needle = marker.encode()
    found = []
    with os.scandir("/proc") as listing:
        for entry in listing:
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                with contextlib.suppress(OSError):
                    state = Path("/proc", entry.name, "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state == "Z":
                        continue
                    cmdline = Path("/proc", entry.name, "cmdline").read_bytes()
                    if needle in cmdline + Path("/proc", entry.name, "environ").read_bytes():
                        shown = cmdline.replace(b"\0", b" ")[:200]
                        found.append(f"{entry.name}: {shown!r}")
    return found


def wait_for_no_process(marker: str, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (left := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"{what}: processes of the run still alive after {timeout} s: {left}"


def scratch_left(*roots: Path, pids: set[int]) -> list[str]:
    """Scratch named by a process id (``.x.tmp-PID-*``, ``.x.partial-PID-*``, ``sealbench-*-PID-*``)
    under ``roots`` and in the temporary directory, made by one of ``pids``."""
    named = re.compile(r"(?:\.tmp-|\.partial-|\.importing-|^sealbench-[a-z]+-)(\d+)-")
    found = [str(p) for root in roots for p in root.rglob("*") if named.search(p.name)]
    for p in Path(tempfile.gettempdir()).iterdir():
        m = named.search(p.name)
        if m and int(m.group(1)) in pids:
            found.append(str(p))
    return found


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sealbench_exe(), *argv], capture_output=True, text=True, timeout=600)


@needs_exe
@pytest.mark.parametrize("seed", [20261201, 16])
def test_whole_group_killed_30_times_at_jobs_4_no_attempt_over_its_cap_nothing_left(tmp_path: Path,
                                                                                    seed: int) -> None:
    marker = f"sealbench-soak-{uuid.uuid4().hex}"
    pack = soak_pack(tmp_path / "pack", TASKS)
    ids = tuple(f"task-{i:03d}" for i in range(TASKS))
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    stamps = Stamps(evidence / "stamps.fifo")
    assert stat.S_ISFIFO((evidence / "stamps.fifo").stat().st_mode)
    contract = tmp_path / "contract.json"
    make_contract(pack, contract, task_ids=ids, command=soak_agent(evidence / "stamps.fifo", seed, marker),
                  run_id=f"soak-{seed}", max_attempts=MAX_ATTEMPTS, wall_clock_s=CAP_S, mounts=[str(evidence)],
                  narration_probe=False)
    run_dir = tmp_path / "run"
    rng = random.Random(seed)
    env = {**os.environ, "SEALBENCH_SOAK_MARKER": marker}  # every process of the run inherits it
    kills, segments, pids = 0, 0, set()
    proc: subprocess.Popen[bytes] | None = None
    t0 = time.monotonic()
    try:
        while True:
            resume = (run_dir / "journal.jsonl").exists()
            where = ["--resume", str(run_dir)] if resume else ["--out", str(run_dir)]
            with (tmp_path / f"stderr-{segments}").open("w") as err:
                proc = subprocess.Popen([sealbench_exe(), "run", str(contract), *where, "--no-progress", "--jobs", "4"],
                                        stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
            pids.add(proc.pid)
            segments += 1
            if kills < KILLS:
                try:
                    proc.wait(rng.uniform(0.5, 3.0))
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    kills += 1
            proc.wait(timeout=900)
            why = (tmp_path / f"stderr-{segments - 1}").read_text()
            assert proc.returncode in (0, -signal.SIGKILL), f"segment {segments}: exit {proc.returncode}: {why}"
            wait_for_no_process(marker, f"after segment {segments}")
            if proc.returncode == 0:
                if kills >= KILLS:
                    break
                # The run ended before every kill was spent; the contract's run is done.
                pytest.fail(f"the run completed after only {kills} kills; make the tasks longer")
    finally:
        stamps.close()
        if proc is not None and proc.poll() is None:  # a failed assertion above: stop this run's group
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    seconds = time.monotonic() - t0

    # Attempts: none started twice, none beyond the cap, one outcome per task; the derived
    # files are what the journal derives, and the journal's own account holds (check_run).
    events = check_run(run_dir, max_attempts=MAX_ATTEMPTS, ids=ids)
    started = {(e["task_id"], e["attempt"]) for e in events if e["kind"] == "attempt_started"}
    assert set(stamps.by_attempt) <= started, set(stamps.by_attempt) - started  # no agent ran unjournaled

    # Time: what each task's agents ran (their own stamps) fits the cap plus the time a kill at
    # the deadline may take; what each task was charged across crashes fits the cap, and its
    # elapsed time (which also counts grading) covers what its agents ran.
    cards = {c["task_id"]: c for c in map(json.loads, (run_dir / "scorecards.jsonl").read_text().splitlines())}
    overruns = {t: stamps.ran(t) - CAP_S for t in ids}
    worst_task = max(overruns, key=lambda t: overruns[t])
    for t in ids:
        assert stamps.ran(t) <= CAP_S + KILLED_WITHIN_S, f"{t}: agents ran {stamps.ran(t):.2f} s under a {CAP_S} s cap"
        assert cards[t]["elapsed_ms"] <= (CAP_S + KILLED_WITHIN_S) * 1000, cards[t]
        charged = sum(e["payload"]["charged_s"] for e in events if e["kind"] == "time_charged" and e["task_id"] == t)
        assert charged <= CAP_S + 1e-9, (t, charged)
        # A charge stops at the cap: a runner killed while its agent was in the second after
        # its deadline leaves the task charged the cap, though the agent ran up to that second
        # longer (bounded above). Below the cap, elapsed time covers what the agents ran.
        capped = cards[t]["elapsed_ms"] >= CAP_S * 1000 - 1
        assert capped or stamps.ran(t) <= cards[t]["elapsed_ms"] / 1000 + 0.001, (t, stamps.ran(t), cards[t])
    longest = max(s[-1] - s[0] for s in stamps.by_attempt.values())

    # A task is an infrastructure error exactly when a kill ended its last attempt.
    last = {e["task_id"]: e["attempt"] for e in events if e["kind"] == "attempt_started"}
    killed_last = {e["task_id"] for e in events if e["kind"] == "attempt_interrupted"
                   and e["attempt"] == last[e["task_id"]]}
    infra = {t for t, c in cards.items() if c["outcome"] == "infra_error"}
    assert infra == killed_last, (infra, killed_last)

    # score, bundle and verify agree with the journal: a rate and a verified bundle, or, with
    # infrastructure errors in it, a refusal of both that names them.
    score = cli("score", str(contract), str(run_dir), "--json")
    passed = sum(1 for c in cards.values() if c["passed"])
    bundled = cli("bundle", str(run_dir), "--out", str(tmp_path / "bundles"))
    if infra:
        assert score.returncode == 3 and f"infrastructure errors in {len(infra)} task(s)" in score.stderr, score.stderr
        assert bundled.returncode == 3 and "infrastructure errors" in bundled.stderr, bundled.stderr
    else:
        assert score.returncode == 0, score.stderr
        rate = json.loads(score.stdout)
        assert (rate["task_pass_count"], rate["n"]) == (passed, TASKS), (rate, passed)
        assert bundled.returncode == 0, bundled.stderr
        bundle = tmp_path / "bundles" / f"soak-{seed}"
        assert (bundle / "scorecards.jsonl").read_bytes() == (run_dir / "scorecards.jsonl").read_bytes()
        assert (bundle / "journal.jsonl").read_bytes() == (run_dir / "journal.jsonl").read_bytes()
        verified = cli("verify", str(bundle))
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert read_chain(bundle / "journal.jsonl").problems == []

    # Nothing left: no process, no workspace, no scratch.
    wait_for_no_process(marker, "at the end")
    assert not (run_dir / "work").exists() or not any((run_dir / "work").iterdir())
    assert scratch_left(run_dir, tmp_path / "bundles", pids=pids) == []

    kinds: dict[str, int] = defaultdict(int)
    for e in events:
        kinds[e["kind"]] += 1
    timeouts = sum(1 for c in cards.values() if c["outcome"] == "timeout")
    print(f"\nsoak seed {seed}: {kills} kills, {segments} segments, {len(events)} events, "
          f"{kinds['attempt_started']} attempts ({kinds['attempt_interrupted']} interrupted), "
          f"{kinds['run_resumed']} resumes, {kinds['time_charged']} charges, {passed} of {TASKS} passed, {timeouts} timeouts, {len(infra)} infra_error, {seconds:.0f} s; "
          f"longest attempt {longest:.2f} s; most agent time of a task {stamps.ran(worst_task):.2f} s "
          f"({worst_task}, {overruns[worst_task]:+.2f} s against its {CAP_S} s cap); longest elapsed "
          f"{max(c['elapsed_ms'] for c in cards.values())} ms")
    assert kills == KILLS
    # Some kills land while the command is still starting, before it journals anything; most
    # land with attempts under way.
    assert kinds["run_resumed"] >= KILLS // 2 and kinds["attempt_interrupted"] >= KILLS, kinds
