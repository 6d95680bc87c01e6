"""Honest time across crashes: a killed runner's agents are charged, from the monotonic clock,
at least the time they ran, and never more than the cap allows.

The agents here keep their own account: each appends monotonic stamps to a file in its trace
directory (the only place it can write that the patch ignores); the test reads that file
after each kill, before a resume materialises the workspace afresh. The sandbox shares the
host's monotonic clock, so the agent's stamps, the test's kill times and the journal's
``mono_ms`` are all on one clock. The file is read from the host's workspace while the agent
runs and after it was killed, so these runs bind the workspace (``--no-workspace-quota``):
under the disk quota it would live in the sandbox's own tmpfs, gone with a killed runner.
"""

from __future__ import annotations

import json
import random
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import make_contract, needs_bwrap
from sealbench.bundle import verify_bundle
from sealbench.charge import sessions
from sealbench.clock import LEASE_MANY_MS, LEASE_MS, Clock
from sealbench.derive import derive
from sealbench.journal import read_chain
from sealbench.runner import RunOptions, execute

TASK = "t_11_fix_off_by_one"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"
FIXTURES = Path(__file__).parent / "fixtures" / "journal_v1"
OTHER_BOOT = "00000000-0000-4000-8000-000000000000"

pytestmark = needs_bwrap


def stamping_agent(seconds: float, *, first_attempt_only: bool = False, marker: str = "") -> str:
    """A command agent that stamps the monotonic clock every 20 ms for ``seconds``, then writes
    the fix (with ``first_attempt_only``, later attempts write it at once). ``marker`` goes into
    its command line, where ``pgrep -f`` finds it."""
    code = textwrap.dedent(f"""\
        # {marker}
        import os, time
        stamps = open(os.path.join(os.environ["SEALBENCH_TRACE_DIR"], "stamps"), "a", buffering=1)
        end = time.monotonic() + ({seconds} if os.environ["SEALBENCH_ATTEMPT"] == "1" or not {first_attempt_only}
                                  else 0)
        while True:
            now = time.monotonic()
            stamps.write(f"{{now:.4f}}\\n")
            if now >= end:
                break
            time.sleep(0.02)
        open("window.py", "w").write({FIX!r})
    """)
    return "python -c " + shlex.quote(code)


def stamps_file(run_dir: Path) -> Path:
    return run_dir / "work" / TASK / "ws" / ".sealbench" / "trace" / "stamps"


def read_stamps(path: Path) -> list[float]:
    if not path.exists():
        return []
    return [float(x) for x in path.read_text().split()]


def wait_for_stamp(path: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> bool:
    """True once the agent has stamped; False if the runner ended first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if read_stamps(path):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    raise AssertionError("the agent never started")


def settled_stamps(path: Path) -> list[float]:
    """The stamps once the file has stopped growing for half a second (the agent is gone)."""
    before = read_stamps(path)
    while True:
        time.sleep(0.5)
        after = read_stamps(path)
        if after == before:
            return after
        before = after


def sealbench_argv() -> list[str]:
    exe = Path(sys.executable).parent / "sealbench"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sealbench.cli"]


def events_of(run_dir: Path) -> list[dict[str, Any]]:
    report = read_chain(run_dir / "journal.jsonl")
    assert report.problems == []
    return report.events


def card_of(run_dir: Path) -> dict[str, Any]:
    card: dict[str, Any] = json.loads((run_dir / "scorecards.jsonl").read_text())
    return card


def kill_mid_attempt(argv: Sequence[str], run_dir: Path, after_s: float) -> list[float]:
    """Start ``argv`` (a runner), SIGKILL it ``after_s`` into its agent's first stamp; the
    agent's stamps once it is gone."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_for_stamp(stamps_file(run_dir), proc)
    time.sleep(after_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return settled_stamps(stamps_file(run_dir))


def charges(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["payload"] for e in events if e["kind"] == "time_charged"]


# --- the defect of issue 16: the wall-clock cap did not bind across crashes ------------------


@pytest.mark.parametrize("seed", [16, 1616])
def test_repeated_kill_9_never_lets_an_agent_run_past_the_cap(sealed_pack: Path, tmp_path: Path, seed: int) -> None:
    """A 5 s attempt under a 6 s cap, the runner killed with SIGKILL at random points of every
    session until the task ends: the agent's own stamps, summed over the sessions, stay within
    the cap; each session is charged at least what the agent ran in it; no pass."""
    cap = 6.0
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=stamping_agent(5.0), run_id="kills",
                  wall_clock_s=cap, max_attempts=5)
    run_dir = tmp_path / "run"
    rng = random.Random(seed)
    ran: list[float] = []  # the agent's running time in each killed session, by its own stamps
    for session in range(12):
        mode = ["--resume", str(run_dir)] if session else ["--out", str(run_dir)]
        with (tmp_path / f"stderr-{session}").open("wb") as err:
            proc = subprocess.Popen([*sealbench_argv(), "run", str(contract), *mode, "--no-progress",
                                     "--no-workspace-quota", "--keep-work"],
                                    stdout=subprocess.DEVNULL, stderr=err)
        path = stamps_file(run_dir)
        if wait_for_stamp(path, proc):
            time.sleep(rng.uniform(0.5, 4.0))
        if proc.poll() is not None:
            break  # the task ended on its own in this session
        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait()
        stamps = settled_stamps(path)
        # The agent died with its runner: nothing stamped after the kill.
        assert stamps and stamps[-1] <= killed_at + 0.2, (stamps[-1], killed_at)
        ran.append(stamps[-1] - stamps[0])
        path.unlink()
    else:
        raise AssertionError("the task never ended")
    code = proc.wait()  # 3 when the rate is refused (an infra_error, below)
    assert code in (0, 3), (tmp_path / f"stderr-{session}").read_text()
    final = read_stamps(stamps_file(run_dir))
    if final:
        ran.append(final[-1] - final[0])
    events = events_of(run_dir)
    card = card_of(run_dir)
    print(f"seed {seed}: agent ran {ran}, charged {[c['charged_s'] for c in charges(events)]}, {card}")
    assert len(ran) >= 2, "no kill landed mid-attempt"
    assert sum(ran) <= cap, f"the agent ran {sum(ran):.2f} s under a {cap} s cap ({ran})"
    # A timeout when the cap ended the last attempt; an infra_error when a kill did and its
    # charge used up the time left (the agent did not end that attempt).
    ends = [e for e in events if e["kind"] in ("attempt_finished", "attempt_interrupted")]
    assert card["outcome"] == ("infra_error" if ends[-1]["kind"] == "attempt_interrupted" else "timeout"), ends[-1]
    assert (code == 3) == (card["outcome"] == "infra_error"), code
    assert card["passed"] is False
    # Charges are never below what the agent ran in the session they charge (same order).
    charged = [c["charged_s"] for c in charges(events)]
    assert len(charged) >= len(ran) - 1
    for spent, charge in zip(ran, charged, strict=False):
        assert charge >= spent, (charge, spent)
    assert sum(charged) <= cap + 1e-9
    # The attempt cap binds too, and the task's elapsed time never falls below what was charged.
    assert card["attempts_used"] <= 5
    assert card["elapsed_ms"] >= int(sum(charged) * 1000) - 1


def test_one_kill_charges_the_time_run_plus_at_most_the_lease(sealed_pack: Path, tmp_path: Path) -> None:
    """Killed 2 s into a 3 s attempt under a 30 s cap: the charge covers those 2 s and exceeds
    them by no more than the heartbeat lease (plus set-up); attempt 2 then passes."""
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=stamping_agent(3.0, first_attempt_only=True),
                  run_id="one-kill", wall_clock_s=30.0, max_attempts=2)
    run_dir = tmp_path / "run"
    stamps = kill_mid_attempt([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress",
                               "--no-workspace-quota", "--keep-work"], run_dir, 2.0)
    execute(contract, run_dir, RunOptions(progress=False, workspace_quota=False, resume=True))
    events = events_of(run_dir)
    (charge,) = charges(events)
    spent = stamps[-1] - stamps[0]
    assert spent <= charge["charged_s"] <= spent + LEASE_MS / 1000 + 1.0, (spent, charge)
    assert "heartbeat lease" in charge["basis"]
    assert card_of(run_dir)["outcome"] == "pass"


def test_many_tasks_at_once_keep_the_longer_lease_and_are_charged_by_it(sealed_pack: Path, tmp_path: Path) -> None:
    """A session of more than 16 tasks at once records the longer lease, and a kill of it is
    charged by that lease; the resume, at --jobs 1, records the short one for its own session."""
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=stamping_agent(3.0, first_attempt_only=True),
                  run_id="many-lease", wall_clock_s=30.0, max_attempts=2)
    run_dir = tmp_path / "run"
    stamps = kill_mid_attempt([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress",
                               "--no-workspace-quota", "--jobs", "17", "--keep-work"], run_dir, 1.0)
    execute(contract, run_dir, RunOptions(progress=False, workspace_quota=False, resume=True, jobs=1))
    events = events_of(run_dir)
    leases = [e["payload"]["lease_ms"] for e in events if e["kind"] in ("run_started", "run_resumed")]
    assert leases == [LEASE_MANY_MS, LEASE_MS]
    (charge,) = charges(events)
    spent = stamps[-1] - stamps[0]
    assert spent <= charge["charged_s"] <= spent + LEASE_MANY_MS / 1000 + 1.0, (spent, charge)
    assert f"{LEASE_MANY_MS} ms heartbeat lease" in charge["basis"]
    assert card_of(run_dir)["outcome"] == "pass"


def test_wall_clock_step_of_an_hour_charges_nothing_extra(sealed_pack: Path, tmp_path: Path) -> None:
    """The runner's wall clock jumps an hour ahead mid-attempt, then the runner is killed; the
    resume (on the real clock, an hour "earlier") charges seconds, not 3,600, and attempt 2 passes."""
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=stamping_agent(4.0, first_attempt_only=True),
                  run_id="clock-step", wall_clock_s=30.0, max_attempts=2)
    run_dir = tmp_path / "run"
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent("""\
        import sys, time
        from datetime import UTC, datetime, timedelta
        from pathlib import Path
        from sealbench.clock import Clock
        from sealbench.runner import RunOptions, execute

        t0 = time.monotonic()

        def stepped() -> datetime:
            # An hour ahead from one second in: an NTP step, or an operator setting the date.
            ahead = timedelta(hours=1) if time.monotonic() - t0 > 1.0 else timedelta(0)
            return datetime.now(UTC) + ahead

        execute(Path(sys.argv[1]), Path(sys.argv[2]),
                RunOptions(progress=False, workspace_quota=False, jobs=1, keep_work=True, clock=Clock(utc=stepped)))
    """))
    stamps = kill_mid_attempt([sys.executable, str(driver), str(contract), str(run_dir)], run_dir, 2.5)
    times = [datetime.strptime(e["time"], "%Y-%m-%dT%H:%M:%S.%f%z") for e in events_of(run_dir)]
    assert (times[-1] - times[0]).total_seconds() > 3600  # the step is in the killed session's lines
    execute(contract, run_dir, RunOptions(progress=False, workspace_quota=False, resume=True))
    events = events_of(run_dir)
    (charge,) = charges(events)
    spent = stamps[-1] - stamps[0]
    assert spent <= charge["charged_s"] < spent + LEASE_MS / 1000 + 1.0, (spent, charge)
    card = card_of(run_dir)
    assert card["outcome"] == "pass" and card["elapsed_ms"] < 30_000


def test_resume_on_another_boot_charges_the_whole_remaining_budget(sealed_pack: Path, tmp_path: Path) -> None:
    """Heartbeats are written, not fsynced: after a restart of the machine the last ones may be
    lost, so an interrupted task is charged everything that remained and runs no more."""
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=stamping_agent(4.0, first_attempt_only=True),
                  run_id="reboot", wall_clock_s=30.0, max_attempts=2)
    run_dir = tmp_path / "run"
    kill_mid_attempt([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress",
                      "--no-workspace-quota"], run_dir, 1.0)
    execute(contract, run_dir, RunOptions(progress=False, workspace_quota=False, resume=True,
                                          clock=Clock(boot_id=OTHER_BOOT)))
    events = events_of(run_dir)
    (charge,) = charges(events)
    assert charge["charged_s"] == 30.0 and "another boot id" in charge["basis"]
    assert [e["attempt"] for e in events if e["kind"] == "attempt_started"] == [1]
    card = card_of(run_dir)
    # The attempt the reboot interrupted was its last: no time remained after its charge.
    assert card["outcome"] == "infra_error" and card["elapsed_ms"] >= 30_000


def test_stalled_journal_ends_the_run_before_the_lease_runs_out(sealed_pack: Path, tmp_path: Path) -> None:
    """Heartbeats that cannot be written (a stalled disk, here a write that never returns): the
    watchdog ends the runner, and its agent with it, within the lease of the journal's last line;
    the resume charges at least what the agent ran."""
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=stamping_agent(10.0, first_attempt_only=True),
                  run_id="stall", wall_clock_s=60.0, max_attempts=2)
    run_dir = tmp_path / "run"
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent("""\
        import sys, threading
        from pathlib import Path
        from sealbench.journal import Journal
        from sealbench.runner import RunOptions, execute

        append = Journal.append

        def stalling(self, event, **kw):
            if event.kind == "heartbeat":
                threading.Event().wait()  # the write never returns
            return append(self, event, **kw)

        Journal.append = stalling
        execute(Path(sys.argv[1]), Path(sys.argv[2]), RunOptions(progress=False, workspace_quota=False, jobs=1, keep_work=True))
    """))
    proc = subprocess.Popen([sys.executable, str(driver), str(contract), str(run_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert wait_for_stamp(stamps_file(run_dir), proc)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    assert "the journal has recorded nothing" in err.decode() and "--resume" in err.decode()
    stamps = settled_stamps(stamps_file(run_dir))
    last_line = events_of(run_dir)[-1]["mono_ms"] / 1000
    assert stamps[-1] <= last_line + LEASE_MS / 1000, (stamps[-1], last_line)
    execute(contract, run_dir, RunOptions(progress=False, workspace_quota=False, resume=True))
    (charge,) = charges(events_of(run_dir))
    assert charge["charged_s"] >= stamps[-1] - stamps[0]
    assert card_of(run_dir)["outcome"] == "pass"


def test_repeated_ctrl_c_leaves_no_agent_running_past_the_lease(sealed_pack: Path, tmp_path: Path) -> None:
    """Ctrl-C three times while an agent runs: the runner stops waiting for it and closes its
    journal; the agent must not run on unaccounted (the watchdog ends the process), and the
    resume charges at least what it ran."""
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=stamping_agent(10.0, first_attempt_only=True),
                  run_id="ctrl-c", wall_clock_s=60.0, max_attempts=2)
    run_dir = tmp_path / "run"
    # A background job of a non-interactive shell (how CI may start us) inherits SIGINT
    # ignored, and Python then leaves it ignored; a user's Ctrl-C reaches a default handler.
    proc = subprocess.Popen([*sealbench_argv(), "run", str(contract), "--out", str(run_dir), "--no-progress",
                             "--no-workspace-quota",
                             "--keep-work"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert wait_for_stamp(stamps_file(run_dir), proc)
    for _ in range(3):
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    stamps = settled_stamps(stamps_file(run_dir))
    last_line = events_of(run_dir)[-1]["mono_ms"] / 1000
    assert stamps[-1] <= last_line + LEASE_MS / 1000, (stamps[-1], last_line)
    execute(contract, run_dir, RunOptions(progress=False, workspace_quota=False, resume=True))
    (charge,) = charges(events_of(run_dir))
    assert charge["charged_s"] >= stamps[-1] - stamps[0]
    assert card_of(run_dir)["outcome"] == "pass"


def test_a_caller_that_survives_an_interrupt_cannot_keep_an_agent_running_unaccounted(
        sealed_pack: Path, tmp_path: Path) -> None:
    """A library caller whose execute() is interrupted (two Ctrl-C: stop the attempts now) while
    an agent still runs, and which then carries on: the agent must not run on to its deadline
    unrecorded (it is stopped, and its attempt journaled, before execute returns)."""
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=(TASK,), command=stamping_agent(10.0, first_attempt_only=True),
                  run_id="caller", wall_clock_s=60.0, max_attempts=2)
    run_dir = tmp_path / "run"
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""\
        import os, signal, sys, threading, time
        from pathlib import Path
        from sealbench.runner import RunOptions, execute

        stamps = Path(sys.argv[2]) / "work" / "{TASK}" / "ws" / ".sealbench" / "trace" / "stamps"

        def interrupt() -> None:
            while not stamps.exists():
                time.sleep(0.01)
            for _ in range(2):
                time.sleep(0.5)
                os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        try:
            execute(Path(sys.argv[1]), Path(sys.argv[2]), RunOptions(progress=False, workspace_quota=False, jobs=1, keep_work=True))
        except KeyboardInterrupt:
            pass
        time.sleep(3)  # the caller carries on
    """))
    proc = subprocess.Popen([sys.executable, str(driver), str(contract), str(run_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    stamps = settled_stamps(stamps_file(run_dir))
    last_line = events_of(run_dir)[-1]["mono_ms"] / 1000
    assert stamps[-1] <= last_line + LEASE_MS / 1000, (stamps[-1], last_line)


# --- journals written before mono_ms and boot_id ------------------------------------------


def test_bundle_made_before_journal_clocks_still_verifies_byte_for_byte() -> None:
    bundle = FIXTURES / "bundle"
    verify_bundle(bundle, pack=FIXTURES / "pack")  # raises VerificationFailed with every problem
    events = read_chain(bundle / "journal.jsonl").events
    assert {e["journal_version"] for e in events} == {1}
    contract = json.loads((bundle / "scoring_contract.json").read_text())
    for rel, data in derive(events, contract["task_ids"]).files.items():
        assert (bundle / rel).read_bytes() == data, rel


def test_old_journal_killed_mid_attempt_resumes_and_charges_the_whole_remaining_budget(tmp_path: Path) -> None:
    """A journal of an older release holds no heartbeat: its open attempt cannot be bounded, so
    the task is charged everything that remained (it once was charged 0 s and ran again)."""
    root = tmp_path / "fixture"
    shutil.copytree(FIXTURES, root)
    old = read_chain(root / "killed" / "journal.jsonl").events
    execute(root / "killed-contract.json", root / "killed", RunOptions(progress=False, resume=True, sandbox="none"))
    events = events_of(root / "killed")
    assert events[: len(old)] == old
    assert {e["journal_version"] for e in events[len(old):]} == {2}
    (charge,) = charges(events)
    assert charge["charged_s"] == 20.0 and "older release" in charge["basis"]
    cards = {c["task_id"]: c for c in map(json.loads, (root / "killed" / "scorecards.jsonl").read_text().splitlines())}
    assert cards[TASK]["outcome"] == "timeout" and cards[TASK]["attempts_used"] == 1
    # The task the old release finished keeps the trace it had then, byte for byte.
    finished = "t_03_rename_helper"
    assert (root / "killed" / "traces" / f"{finished}.json").read_bytes() == \
        derive(old, [finished]).files[f"traces/{finished}.json"]
    assert not any(e["kind"] == "attempt_started" for e in events[len(old):])
    assert len(sessions(events)) == 2
