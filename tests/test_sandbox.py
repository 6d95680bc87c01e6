"""Conformance suite for sealbench.sandbox: real processes, real namespaces, no mocks.

Checks that make sense without isolation (caps, kill, output capture, clean environment) run
for every backend; isolation checks run for the isolating backends only. Each isolation test is
named after the exploit it blocks. Every sandboxed process carries ``SEALBENCH_MARK=<uuid>`` in
its environment so that survivors can be found in /proc afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from conftest import needs_bwrap
from sealbench import sandbox as sandbox_module
from sealbench import sandboxes
from sealbench.errors import HarnessError, RunRefusal, UsageError
from sealbench.sandbox import (
    BubblewrapSandbox,
    Limits,
    NoSandbox,
    Sandbox,
    SandboxResult,
    SandboxSpec,
    open_sandbox,
    process_limit_method,
)
from sealbench.sandbox import cgroups as sandbox_cgroups
from sealbench.sandbox import process as sandbox_process

PY = sys.executable
HAVE_BWRAP = shutil.which("bwrap") is not None
# Every registered backend: the conformance suite runs over each (needs_bwrap skips only
# where bwrap is not installed, and never under CI).
ISOLATING = [pytest.param(b.name, marks=needs_bwrap) for b in sandboxes.backends() if b.isolating]
EVERY = [*ISOLATING, *(b.name for b in sandboxes.backends() if not b.isolating)]
HAS_PIDS_CGROUP = process_limit_method().startswith("pids cgroup")
PROMISED_KILL_S = 1.0  # README: killed within 1 s of the deadline, whatever it ignores


def marked_pids(mark: str) -> list[int]:
    """Pids of live (non-zombie) processes whose environment carries this test's mark."""
    needle = f"SEALBENCH_MARK={mark}".encode()
    found = []
    with os.scandir("/proc") as listing:
        for entry in listing:
            if entry.name.isdigit():
                try:
                    environ = Path("/proc", entry.name, "environ").read_bytes()
                except OSError:
                    continue
                if needle in environ.split(b"\0"):
                    found.append(int(entry.name))
    return found


class Agent:
    """Builds specs in a private tmp tree: ``work`` is the workdir, its siblings are host-only."""

    def __init__(self, root: Path, sandbox: Sandbox) -> None:
        self.root = root
        self.sandbox = sandbox
        self.workdir = root / "work"
        self.workdir.mkdir()
        self.mark = uuid.uuid4().hex
        self.env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(root / "home"),
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "SEALBENCH_MARK": self.mark,
        }

    def spec(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 10.0,
        limits: Limits | None = None,
        env: dict[str, str] | None = None,
        readonly_paths: tuple[Path, ...] = (),
        network: bool = False,
    ) -> SandboxSpec:
        return SandboxSpec(
            argv=tuple(argv),
            workdir=self.workdir,
            env=self.env if env is None else env,
            timeout_s=timeout_s,
            stdout_path=self.root / "stdout",
            stderr_path=self.root / "stderr",
            limits=limits or Limits(processes=64),
            readonly_paths=readonly_paths,
            network=network,
        )

    def run(self, argv: Sequence[str], **kwargs: Any) -> tuple[SandboxResult, str, str]:
        result = self.sandbox.run(self.spec(argv, **kwargs))
        return result, self.stdout(), (self.root / "stderr").read_text(errors="replace")

    def stdout(self) -> str:
        return (self.root / "stdout").read_text(errors="replace")

    def sh(self, script: str, **kwargs: Any) -> tuple[SandboxResult, str, str]:
        return self.run(["sh", "-c", script], **kwargs)

    def python(self, code: str, **kwargs: Any) -> tuple[SandboxResult, str, str]:
        return self.run([PY, "-c", code], **kwargs)


@pytest.fixture(params=EVERY)
def agent(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Agent]:
    sandbox = open_sandbox(request.param)
    yield Agent(tmp_path, sandbox)


@pytest.fixture(params=ISOLATING)
def jailed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Agent]:
    sandbox = open_sandbox(request.param)
    yield Agent(tmp_path, sandbox)


def needs_cgroup_without_isolation(agent: Agent) -> None:
    if agent.sandbox.kind == "none" and not HAS_PIDS_CGROUP:
        pytest.skip("without a pids cgroup the none backend cannot find escaped processes")


# --- every backend: caps, kill, output, environment ---------------------------------------


def test_runs_in_workdir_and_reports_exit_code_and_output(agent: Agent) -> None:
    result, out, err = agent.sh("pwd; echo oops >&2; exit 3")
    assert result.exit_code == 3 and result.signal is None and not result.timed_out
    assert out == f"{agent.workdir}\n" and err == "oops\n"
    assert (result.stdout_bytes, result.stderr_bytes) == (len(out), len(err))
    assert not result.stdout_truncated and not result.stderr_truncated
    assert 0 < result.elapsed_s < 5


def test_exploit_floods_stdout(agent: Agent) -> None:
    cap = 1 * 2**20
    flood, side = 50 * 2**20, 3 * 2**20
    started = time.monotonic()
    result, _, _ = agent.sh(
        f"head -c {flood} /dev/zero; head -c {side} /dev/zero >&2; echo done > finished",
        limits=Limits(processes=64, output_bytes=cap),
    )
    wall = time.monotonic() - started
    assert result.exit_code == 0 and not result.timed_out
    assert (agent.workdir / "finished").read_text() == "done\n"  # never blocked on a full pipe
    assert wall < 10, wall
    assert (result.stdout_bytes, result.stderr_bytes) == (flood, side)
    assert result.stdout_truncated and result.stderr_truncated
    assert (agent.root / "stdout").read_bytes() == b"\0" * cap
    assert (agent.root / "stderr").stat().st_size == cap
    assert result.stdout is None and result.stderr is None  # written to the files instead


def test_exploit_floods_stdout_kept_in_memory(agent: Agent) -> None:
    cap = 64 * 2**10
    spec = agent.spec(["sh", "-c", "head -c 5000000 /dev/zero; echo oops >&2"],
                      limits=Limits(processes=64, output_bytes=cap))
    result = agent.sandbox.run(dataclasses.replace(spec, stdout_path=None, stderr_path=None))
    assert result.exit_code == 0
    assert result.stdout == b"\0" * cap and result.stdout_bytes == 5_000_000 and result.stdout_truncated
    assert result.stderr == b"oops\n" and not result.stderr_truncated
    assert not (agent.root / "stdout").exists() and not (agent.root / "stderr").exists()


def test_exploit_sleeps_past_cap_is_killed_within_1s(agent: Agent) -> None:
    started = time.monotonic()
    result, _, _ = agent.run(["sleep", "30"], timeout_s=1.0)
    wall = time.monotonic() - started
    assert result.timed_out and result.exit_code is None
    assert result.signal in (signal.SIGTERM, signal.SIGKILL)
    assert wall < 2.2 and result.elapsed_s < 2.2, wall
    assert marked_pids(agent.mark) == []


def test_exploit_ignores_sigterm_is_killed_within_1s(agent: Agent) -> None:
    started = time.monotonic()
    result, _, _ = agent.sh("trap '' TERM; sleep 30 & sleep 30", timeout_s=1.0)
    wall = time.monotonic() - started
    assert result.timed_out and result.exit_code is None
    assert wall < 1.0 + PROMISED_KILL_S, wall  # the promise, not the grace constant it is built from
    assert marked_pids(agent.mark) == []


def test_deadline_sends_sigterm_then_sigkill_after_a_grace_within_1s(agent: Agent) -> None:
    """SIGTERM reaches the command at the deadline and leaves it time to act (bubblewrap's own
    monitor must not die of it and take the namespace down at once); SIGKILL ends it within
    the promised second."""
    started = time.monotonic()
    result, _, _ = agent.sh("trap 'echo term > term.txt; sleep 0.2; echo graced > graced.txt' TERM; "
                            "sleep 30 & wait; sleep 30", timeout_s=1.0)
    wall = time.monotonic() - started
    assert result.timed_out and result.exit_code is None
    assert (agent.workdir / "term.txt").read_text() == "term\n"
    assert (agent.workdir / "graced.txt").read_text() == "graced\n"
    assert result.signal == signal.SIGKILL
    assert wall < 1.0 + PROMISED_KILL_S, wall
    assert marked_pids(agent.mark) == []


def test_exploit_background_process_outlives_attempt(agent: Agent) -> None:
    needs_cgroup_without_isolation(agent)
    started = time.monotonic()
    result, _, _ = agent.sh(
        "(sleep 1; echo x > leaked) >/dev/null 2>&1 &"
        " setsid sh -c 'sleep 1; echo y > leaked_setsid' >/dev/null 2>&1 &"
        " nohup sh -c 'sleep 1; echo z > leaked_nohup' >/dev/null 2>&1 &"
        " exit 0"
    )
    assert result.exit_code == 0 and not result.timed_out
    assert time.monotonic() - started < 1.0  # run() did not wait for the leftovers
    assert marked_pids(agent.mark) == []  # dead when run() returns
    time.sleep(1.5)
    assert sorted(p.name for p in agent.workdir.iterdir()) == []


class BubblewrapWithoutCgroup(BubblewrapSandbox):
    """bubblewrap as a machine without a writable pids cgroup runs it."""

    def _hierarchy(self) -> None:
        return None


@needs_bwrap
def test_exploit_background_process_outlives_attempt_without_pids_cgroup(tmp_path: Path) -> None:
    agent = Agent(tmp_path, BubblewrapWithoutCgroup())
    for _ in range(5):  # the teardown race this guards against is short: give it chances
        result, _, _ = agent.sh(
            "setsid sh -c 'sleep 0.5; echo y >> leaked' >/dev/null 2>&1 </dev/null & exit 0"
        )
        assert result.exit_code == 0
        assert marked_pids(agent.mark) == []
    time.sleep(0.8)
    assert not (agent.workdir / "leaked").exists()


def test_exploit_fork_bomb_is_contained(agent: Agent) -> None:
    needs_cgroup_without_isolation(agent)
    if not HAS_PIDS_CGROUP and os.geteuid() == 0:
        pytest.skip("root without a pids cgroup: the process cap is not enforceable")
    cap = 32
    # A Python parent that never forks again keeps the attempt alive until the deadline.
    bomb = "import subprocess, time; subprocess.Popen(['bash', '-c', 'b() { b | b & }; b']); time.sleep(30)"
    spec = agent.spec([PY, "-c", bomb], timeout_s=3.0, limits=Limits(processes=cap))
    peak, probe_s = 0, []
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        future = pool.submit(agent.sandbox.run, spec)
        while not future.done():
            peak = max(peak, len(marked_pids(agent.mark)))
            if time.monotonic() - started > 0.5 and len(probe_s) < 3:
                t0 = time.monotonic()
                subprocess.run(["true"], check=True)
                probe_s.append(time.monotonic() - t0)
            time.sleep(0.05)
        result = future.result()
    assert result.timed_out and result.elapsed_s < 3.0 + 1.0, result
    assert 2 < peak <= cap, peak  # the bomb really forked, and no further than the cap
    assert probe_s and max(probe_s) < 1.0, probe_s  # the host can still start processes
    assert marked_pids(agent.mark) == []
    if HAS_PIDS_CGROUP:
        root = Path(process_limit_method().split("(", 1)[1].rstrip(")"))
        assert sandbox_module.settle_cgroup_removals()
        assert list(root.glob(f"run-{os.getpid()}-*")) == []


def test_process_cap_stops_the_command_at_its_limit(agent: Agent) -> None:
    """The gentle counterpart of the fork bomb: forty sleepers asked for, a dozen allowed."""
    needs_cgroup_without_isolation(agent)
    if not HAS_PIDS_CGROUP and os.geteuid() == 0:
        pytest.skip("root without a pids cgroup: the process cap is not enforceable")
    code = ("import subprocess\nprocs = []\n"
            "try:\n    for _ in range(40):\n        procs.append(subprocess.Popen(['sleep', '5']))\n"
            "except OSError as e:\n    print('refused', e.errno)\n"
            "print(len(procs))\nfor p in procs:\n    p.kill()\n")
    result, out, err = agent.python(code, limits=Limits(processes=12), timeout_s=20.0)
    assert result.exit_code == 0, err
    lines = out.split()
    assert lines[:2] == ["refused", str(errno.EAGAIN)], out
    assert int(lines[-1]) <= 12, out
    assert marked_pids(agent.mark) == []


def test_exploit_writes_huge_file_is_stopped_by_rlimit_fsize(agent: Agent) -> None:
    cap = 2**20
    result, _, _ = agent.sh("exec head -c 8000000 /dev/zero > big", limits=Limits(file_size_bytes=cap))
    assert (agent.workdir / "big").stat().st_size == cap
    # SIGXFSZ: bwrap reports it shell-style as 128 + n, a plain child as the signal itself.
    if isinstance(agent.sandbox, NoSandbox):
        assert (result.exit_code, result.signal) == (None, signal.SIGXFSZ)
    else:
        assert (result.exit_code, result.signal) == (128 + signal.SIGXFSZ, None)


def test_rlimits_are_set_and_cannot_be_raised(agent: Agent) -> None:
    limits = Limits(address_space_bytes=2 * 2**30, file_size_bytes=3 * 2**20, open_files=100, processes=64)
    code = (
        "import resource as r\n"
        "print(r.getrlimit(r.RLIMIT_AS), r.getrlimit(r.RLIMIT_FSIZE), r.getrlimit(r.RLIMIT_NOFILE),"
        " r.getrlimit(r.RLIMIT_CORE))\n"
        "try:\n    r.setrlimit(r.RLIMIT_NOFILE, (200, 200)); print('raised')\n"
        "except (ValueError, OSError): print('refused')\n"
        "fds = []\n"
        "try:\n    [fds.append(open('/dev/null')) for _ in range(500)]\n"
        "except OSError as e: print('EMFILE', e.errno)\n"
        "try:\n    b = bytearray(3 * 2**30); print('allocated')\n"
        "except MemoryError: print('MemoryError')\n"
    )
    result, out, err = agent.python(code, limits=limits)
    assert result.exit_code == 0, err
    a, f, n = 2 * 2**30, 3 * 2**20, 100
    assert out.splitlines() == [
        f"({a}, {a}) ({f}, {f}) ({n}, {n}) (0, 0)",
        "refused",
        "EMFILE 24",
        "MemoryError",
    ]


def _priority(box: Agent, code: str, yield_cpu: bool) -> tuple[int | None, str]:
    import dataclasses

    result = box.sandbox.run(dataclasses.replace(box.spec([PY, "-c", code]), yield_cpu=yield_cpu))
    return result.exit_code, box.stdout().strip()


def test_commands_of_a_run_of_many_agents_run_below_the_runner_s_priority(agent: Agent) -> None:
    # Hundreds of sandboxes busy at once must not starve the runner's journal heartbeat; a run
    # of a few keeps the runner's priority (the lower one cost bubblewrap's set-up about 5%).
    from sealbench.sandbox import COMMAND_NICENESS

    base = os.getpriority(os.PRIO_PROCESS, 0)
    code = "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"
    assert _priority(agent, code, True) == (0, str(min(19, base + COMMAND_NICENESS)))
    assert _priority(agent, code, False) == (0, str(base))


def test_exploit_agent_raises_its_own_priority_back(jailed: Agent) -> None:
    code = "import os\ntry:\n    os.setpriority(os.PRIO_PROCESS, 0, 0); print('raised')\nexcept PermissionError: print('refused')\n"
    assert _priority(jailed, code, True) == (0, "refused")


def test_a_runner_holding_descriptors_past_1023_still_starts_sandboxes(agent: Agent) -> None:
    # select() cannot take a descriptor past 1023; a run with hundreds of sandboxes open gets there.
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) > 1023
        result, out, err = agent.sh("echo started")
        assert (result.exit_code, out) == (0, "started\n"), err
    finally:
        for fd in held:
            os.close(fd)


def test_exploit_reads_host_secret_from_environment(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    result, _, _ = agent.run(["env", "-0"])
    assert result.exit_code == 0
    inside = dict(item.split("=", 1) for item in agent.stdout().split("\0") if item)
    assert "SECRET_TOKEN" not in inside
    assert inside == {**agent.env, "PWD": str(agent.workdir)}


def test_command_that_cannot_start_raises_harness_error(agent: Agent) -> None:
    with pytest.raises(HarnessError, match="nonexistent"):
        agent.run(["/nonexistent/agent-binary"])


def test_missing_host_paths_raise_harness_error(agent: Agent) -> None:
    with pytest.raises(HarnessError, match="does not exist"):
        agent.run(["true"], readonly_paths=(agent.root / "missing",))
    spec = agent.spec(["true"])
    shutil.rmtree(agent.workdir)
    with pytest.raises(HarnessError, match="workdir"):
        agent.sandbox.run(spec)


# --- isolating backends: each test is an exploit the sandbox must block -------------------


def test_exploit_write_outside_workspace_leaves_host_untouched(jailed: Agent) -> None:
    sibling = jailed.root / "outside.txt"
    # Named per run, and removed if written: a sandbox that lets them through (a mutant of
    # the defence suite) must not leave files on the host or trip a concurrent run.
    probe = f"sealbench-probe-{jailed.mark}"
    host_targets = [Path("/etc", probe), Path("/usr", probe), Path("/", probe), Path("/root", probe),
                    Path("/usr/bin", probe)]
    script = "; ".join(f"(echo pwned > {t}) 2>/dev/null && echo WROTE {t}" for t in host_targets)
    script += f"; echo pwned > {sibling}; mount -o remount,rw /usr 2>/dev/null && echo REMOUNTED"
    script += "; unshare -U true 2>/dev/null && echo USERNS; echo mine > inside.txt"
    try:
        result, out, _ = jailed.sh(script)
        assert result.exit_code == 0
        assert "WROTE" not in out and "REMOUNTED" not in out and "USERNS" not in out, out
        for target in [*host_targets, sibling]:
            assert not target.exists(), target
        assert (jailed.workdir / "inside.txt").read_text() == "mine\n"
    finally:
        for target in host_targets:
            with contextlib.suppress(OSError):
                target.unlink()


def test_exploit_reads_hidden_tests_from_sibling_path(jailed: Agent) -> None:
    hidden = jailed.root / "hidden" / "test_hidden.py"
    hidden.parent.mkdir()
    hidden.write_text("SECRET_EXPECTED = 'grader-only-4242'\n")
    code = (
        "import os\n"
        f"for p in ['../hidden/test_hidden.py', {str(hidden)!r}]:\n"
        "    try:\n        print(open(p).read())\n"
        "    except OSError as e:\n        print(type(e).__name__)\n"
        f"print(sorted(os.listdir({str(jailed.root)!r})))\n"
        "print(sorted(os.listdir('/')))\n"
        "print(os.path.exists('/work'), os.path.exists('/home'), os.path.exists('/run'))\n"
    )
    result, out, err = jailed.python(code)
    assert result.exit_code == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["FileNotFoundError", "FileNotFoundError"]
    assert lines[2] == "['home', 'work']"  # the run directory holds no hidden/, stdout, stderr
    top = set(eval(lines[3]))
    prefix_tops = {Path(p).parts[1] for p in (sys.base_prefix, sys.prefix)}
    assert top <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "proc", "sbin", "tmp", "usr", *prefix_tops}
    # A top directory exists inside only when the interpreter's prefix (a venv) lives under it.
    prefixes = {sys.base_prefix, sys.prefix}
    expected = [any(p == d or p.startswith(d + "/") for p in prefixes) for d in ("/work", "/home", "/run")]
    assert lines[4] == " ".join(str(e) for e in expected)


def test_readonly_paths_are_visible_but_not_writable(jailed: Agent) -> None:
    shared = jailed.root / "task-pack"
    shared.mkdir()
    (shared / "README").write_text("public task text\n")
    result, out, _ = jailed.sh(
        f"cat {shared}/README; echo x > {shared}/new 2>/dev/null || echo denied", readonly_paths=(shared,)
    )
    assert result.exit_code == 0
    assert out == "public task text\ndenied\n"
    assert not (shared / "new").exists()


def test_private_home_is_writable_and_kept_off_the_host(jailed: Agent) -> None:
    for home in (jailed.root / "home", Path("/home/agent"), jailed.workdir / ".home"):
        env = {**jailed.env, "HOME": str(home)}
        result, out, _ = jailed.sh('echo hi > "$HOME/f" && cat "$HOME/f"', env=env)
        assert (result.exit_code, out) == (0, "hi\n"), home
        assert (home / "f").exists() == (home.parent == jailed.workdir), home
    with pytest.raises(HarnessError, match="HOME"):
        jailed.run(["true"], env={**jailed.env, "HOME": "/usr"})


def test_exploit_network_connection_to_loopback_is_refused(jailed: Agent) -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        port = server.getsockname()[1]
        udp.bind(("127.0.0.1", 0))
        udp_port = udp.getsockname()[1]
        code = (
            "import socket\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
            "except OSError as e: print(type(e).__name__)\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)\n"
            f"s.connect(('127.0.0.1', {udp_port})); s.send(b'\\x12\\x34\\x01\\x00\\x00\\x01' + bytes(6))\n"
            "try:\n    s.recv(512); print('ANSWERED')\n"
            "except OSError as e: print(type(e).__name__)\n"
        )
        result, out, err = jailed.python(code)
        assert result.exit_code == 0, err
        assert out.split() == ["ConnectionRefusedError", "ConnectionRefusedError"], out
        server.setblocking(False)
        udp.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
        with pytest.raises(BlockingIOError):
            udp.recv(512)


def test_network_knob_shares_host_loopback_as_control(jailed: Agent) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = (
            f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')"
        )
        result, out, _ = jailed.python(code, network=True)
        assert (result.exit_code, out) == (0, "CONNECTED\n")


def test_exploit_dns_lookup_fails(jailed: Agent) -> None:
    # The lookup runs only after proving there is no interface but lo, so no query can leave.
    code = (
        "import socket, sys\n"
        "devs = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n"
        "print(devs)\n"
        "if devs != ['lo']: sys.exit(3)\n"
        "try:\n    socket.getaddrinfo('example.com', 443); print('RESOLVED')\n"
        "except socket.gaierror as e: print('gaierror')\n"
    )
    result, out, err = jailed.python(code)
    assert result.exit_code == 0, err
    assert out.splitlines() == ["['lo']", "gaierror"]


def test_exploit_reads_etc_entries_that_are_not_world_readable(jailed: Agent) -> None:
    hidden = [p for p in ("/etc/shadow", "/etc/gshadow", "/etc/ssl/private")
              if os.path.lexists(p) and not os.stat(p).st_mode & stat.S_IROTH]
    if not hidden:
        pytest.skip("no entry of this host's /etc is kept from other users, so there is nothing to mask")
    code = ("import os\n"
            f"for p in {hidden!r}:\n"
            "    try:\n        print(len(os.listdir(p)) if os.path.isdir(p) else len(open(p, 'rb').read()))\n"
            "    except PermissionError:\n        print('denied')\n")
    result, out, err = jailed.python(code)
    assert result.exit_code == 0, err
    # Masked: /dev/null (which a nodev mount will not even open) or an empty directory.
    assert all(seen in ("0", "denied") for seen in out.split()) and len(out.split()) == len(hidden), out


def test_exploit_uses_root_capabilities_inside(jailed: Agent) -> None:
    result, out, _ = jailed.sh("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status")
    assert result.exit_code == 0
    caps = dict(line.split(":", 1) for line in out.splitlines())
    assert len(caps) == 5 and all(int(value, 16) == 0 for value in caps.values()), caps


def test_exploit_kills_host_process(jailed: Agent) -> None:
    victim = subprocess.Popen(["sleep", "30"])
    try:
        result, out, _ = jailed.sh(
            f"kill -9 {victim.pid} 2>/dev/null || echo unreachable; ls /proc | grep -c '^[0-9]'"
        )
        assert result.exit_code == 0
        lines = out.split()
        assert lines[0] == "unreachable" and int(lines[1]) < 10  # only the sandbox's own pids
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


# --- selection and description ------------------------------------------------------------


@needs_bwrap
def test_open_sandbox_auto_picks_bubblewrap_once() -> None:
    first = open_sandbox("auto")
    assert first.kind == "bubblewrap" and isinstance(first, BubblewrapSandbox)
    assert open_sandbox("auto") is first and open_sandbox("bubblewrap") is first
    facts = first.describe()
    assert facts["kind"] == "bubblewrap" and facts["tool_version"].startswith("bubblewrap ")
    assert facts["process_limit"] == process_limit_method()
    assert facts["network"].startswith("private network namespace")


def test_open_sandbox_none_unknown_and_unshare() -> None:
    none = open_sandbox("none")
    assert isinstance(none, NoSandbox) and none.describe()["kind"] == "none"
    assert "not isolated" in none.describe()["filesystem"]
    with pytest.raises(UsageError):
        open_sandbox("docker")
    with pytest.raises(RunRefusal, match="install bubblewrap"):
        open_sandbox("unshare")


def test_opening_ahead_changes_nothing_a_later_open_says(monkeypatch: pytest.MonkeyPatch) -> None:
    from sealbench.sandbox import open_ahead

    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    for requested in ("unshare", "docker", "none"):
        thread = open_ahead(requested)
        assert not thread.daemon  # a command that ends early waits for it, never cuts it short
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert raised == []  # what the thread met is dropped: the later open says it
    with pytest.raises(RunRefusal, match="install bubblewrap"):
        open_sandbox("unshare")
    with pytest.raises(UsageError):
        open_sandbox("docker")
    assert isinstance(open_sandbox("none"), NoSandbox)


def test_open_sandbox_without_bubblewrap_refuses_with_advice(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-bwrap")
    with pytest.raises(RunRefusal, match=r"install bubblewrap.*--sandbox none"):
        open_sandbox("auto", bwrap_executable=missing)
    with pytest.raises(RunRefusal, match="not usable"):
        open_sandbox("bubblewrap", bwrap_executable=missing)


def test_process_limit_method_matches_privileges() -> None:
    method = process_limit_method()
    if (
        os.geteuid() == 0
        and Path("/sys/fs/cgroup/pids").is_dir()
        and os.access("/sys/fs/cgroup/pids", os.W_OK)
    ):
        assert method.startswith("pids cgroup v1")
    elif os.geteuid() != 0 and not method.startswith("pids cgroup"):
        assert method.startswith("RLIMIT_NPROC")


def test_invalid_specs_and_limits_are_rejected(tmp_path: Path) -> None:
    base = dict(
        workdir=tmp_path, env={}, timeout_s=1.0, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e"
    )
    with pytest.raises(ValueError, match="argv"):
        SandboxSpec(argv=(), **base)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="workdir"):
        SandboxSpec(argv=("true",), **{**base, "workdir": Path("rel")})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        SandboxSpec(argv=("true",), **{**base, "timeout_s": 0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="environment"):
        SandboxSpec(argv=("true",), **{**base, "env": {"A=B": "x"}})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="processes"):
        Limits(processes=0)


@pytest.mark.parametrize(("change", "refusal"), [
    ({}, None),
    ({"argv": ("tr\0ue",)}, "argv must be a non-empty tuple of strings without NUL"),
    ({"stdout_path": Path("out")}, "stdout_path must be absolute: out"),
    ({"readonly_paths": (Path("ro"),)}, "readonly path must be absolute: ro"),
    ({"writable_paths": (Path("rw"),)}, "writable path must be absolute: rw"),
    ({"timeout_s": float("inf")}, "timeout_s must be positive and finite: inf"),
    ({"env": {"": "x"}}, "environment entry cannot be passed to a process: ''"),
    ({"env": {"A": "x\0y"}}, "environment entry cannot be passed to a process: 'A'"),
    ({"env": {"HOME": "home"}}, "HOME must be absolute: 'home'"),
    ({"links": (("/opt/repo", "/w"),)}, None),
    ({"links": (("opt/repo", "/w"),)}, "link path must be absolute and outside the sandbox's mounts: 'opt/repo'"),
    ({"links": (("/usr/lib/x", "/w"),)}, "link path must be absolute and outside the sandbox's mounts: '/usr/lib/x'"),
    ({"links": (("/w/inside", "/w"),)}, "link path must be absolute and outside the sandbox's mounts: '/w/inside'"),
    ({"links": (("/", "/w"),)}, "link path must be absolute and outside the sandbox's mounts: '/'"),
    # the first rule broken is the one named: argv before paths before the timeout
    ({"argv": (), "workdir": Path("rel"), "timeout_s": 0}, "argv must be"),
    ({"workdir": Path("rel"), "timeout_s": 0}, "workdir must be absolute"),
])
def test_a_spec_names_the_first_rule_it_breaks(change: dict[str, Any], refusal: str | None) -> None:
    base: dict[str, Any] = dict(argv=("true",), workdir=Path("/w"), env={}, timeout_s=1.0,
                                stdout_path=Path("/o"), stderr_path=Path("/e"))
    if refusal is None:
        SandboxSpec(**{**base, **change})
    else:
        with pytest.raises(ValueError) as e:
            SandboxSpec(**{**base, **change})
        assert str(e.value).startswith(refusal), e.value


def test_concurrent_runs_do_not_interfere(tmp_path: Path) -> None:
    sandbox = open_sandbox("bubblewrap") if HAVE_BWRAP else open_sandbox("none")
    agents = []
    for i in range(4):
        (tmp_path / str(i)).mkdir()
        agents.append(Agent(tmp_path / str(i), sandbox))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda a: a.sh("echo $SEALBENCH_MARK; sleep 0.2"), agents))
    assert [out for _, out, _ in results] == [f"{a.mark}\n" for a in agents]


# --- concurrency and cgroup housekeeping ----------------------------------------------------


def test_many_concurrent_launches_all_succeed(tmp_path: Path) -> None:
    # The runner launches from a thread pool: no launch may fail because another is starting.
    sandbox = open_sandbox("bubblewrap") if HAVE_BWRAP else open_sandbox("none")
    commands = [
        (["true"], 0, ""),
        ([PY, "-c", "print('py')"], 0, "py\n"),
        (["sh", "-c", "echo sh; exit 3"], 3, "sh\n"),
        (["sh", "-c", "sleep 30 & echo bg"], 0, "bg\n"),
    ]
    agents = []
    for i in range(32):
        (tmp_path / str(i)).mkdir()
        agents.append(Agent(tmp_path / str(i), sandbox))

    def launch(i: int) -> tuple[int | None, str, str]:
        argv, _, _ = commands[i % len(commands)]
        result, out, err = agents[i].run(argv)
        return result.exit_code, out, err

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(launch, range(32)))
    assert outcomes == [(code, out, "") for code, out in [commands[i % 4][1:] for i in range(32)]]
    assert all(marked_pids(a.mark) == [] for a in agents)
    if HAS_PIDS_CGROUP:
        assert sandbox_module.settle_cgroup_removals()
        assert list(cgroup_root().glob(f"run-{os.getpid()}-*")) == []
        assert sandbox_module.deferred_cgroup_removals() == {}


def test_no_python_runs_between_fork_and_exec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    real = subprocess.Popen

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(sandbox_process.subprocess, "Popen", recording)
    agent = Agent(tmp_path, NoSandbox())
    result, out, _ = agent.sh("ulimit -n; cat /proc/self/cgroup")
    assert result.exit_code == 0
    assert seen and all(kwargs.get("preexec_fn") is None for kwargs in seen)
    assert out.splitlines()[0] == str(Limits().open_files)
    if HAS_PIDS_CGROUP:  # moved in before its command started: the gate held it
        pids_line = next(line for line in out.splitlines()[1:] if ":pids:" in line or line.startswith("0::"))
        assert f"/sealbench/run-{os.getpid()}-" in pids_line, out


def cgroup_root() -> Path:
    return Path(process_limit_method().split("(", 1)[1].rstrip(")"))


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


needs_cgroup = pytest.mark.skipif(not HAS_PIDS_CGROUP, reason="no writable pids cgroup")


@needs_cgroup
def test_stale_run_cgroups_of_dead_runners_are_cleaned_at_open(tmp_path: Path) -> None:
    root = cgroup_root()
    sleeper = subprocess.Popen(["sleep", "30"])  # stands for a bwrap a killed runner left behind
    live_owner = subprocess.Popen(["sleep", "30"])
    stale_busy = root / f"run-{dead_pid()}-0"
    stale_empty = root / f"run-{dead_pid()}-1"
    predecessor = root / f"run-{os.getpid()}-999999"  # our pid, not one of our runs
    alive = root / f"run-{live_owner.pid}-0"
    try:
        for path in (stale_busy, stale_empty, predecessor, alive):
            path.mkdir()
        (stale_busy / "cgroup.procs").write_text(str(sleeper.pid))
        open_sandbox("none")
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
        assert not stale_busy.exists() and not stale_empty.exists() and not predecessor.exists()
        assert alive.is_dir()  # its owner still runs: never touched
    finally:
        for proc in (sleeper, live_owner):
            proc.kill()
            proc.wait()
        for path in (stale_busy, stale_empty, predecessor, alive):
            with contextlib.suppress(FileNotFoundError):
                path.rmdir()


@needs_cgroup
def test_busy_cgroup_after_a_completed_run_is_deferred_not_a_harness_error(tmp_path: Path) -> None:
    # A child cgroup keeps the run cgroup busy after its last process is gone.
    agent = Agent(tmp_path, NoSandbox())
    script = (
        "cg=$(sed -n 's/^[0-9]*:pids:\\(.*\\)$/\\1/p; s/^0::\\(.*\\)$/\\1/p' /proc/self/cgroup | head -n1)"
        f"; mkdir {cgroup_root().parent}$cg/pin && echo $cg"
    )
    t0 = time.monotonic()
    result, out, _ = agent.sh(script)
    # The command's end does not wait for its busy cgroup (retried for a second on the remover's thread).
    assert time.monotonic() - t0 < sandbox_cgroups._REMOVE_S / 2
    assert result.exit_code == 0
    run_cgroup = cgroup_root().parent / out.strip().lstrip("/")
    try:
        assert run_cgroup.name.startswith(f"run-{os.getpid()}-") and run_cgroup.is_dir()
        assert sandbox_module.settle_cgroup_removals()  # retried for a second off the caller's path
        assert str(run_cgroup) in sandbox_module.deferred_cgroup_removals()
    finally:
        (run_cgroup / "pin").rmdir()
    open_sandbox("none")  # the next open sweeps it
    assert not run_cgroup.exists()
    assert sandbox_module.deferred_cgroup_removals() == {}


@needs_cgroup
def test_run_cgroup_removed_before_admission_is_replaced() -> None:
    # An older sealbench's sweep removed every empty run cgroup, ours between mkdir and launch.
    hierarchy = sandbox_cgroups._pids_hierarchy()
    assert hierarchy is not None
    cgroup = sandbox_cgroups._RunCgroup.create(hierarchy, 8)
    first = cgroup.path
    first.rmdir()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        cgroup.admit(sleeper.pid)
        assert cgroup.path != first and (cgroup.path / "cgroup.procs").read_text().split() == [str(sleeper.pid)]
        assert (cgroup.path / "pids.max").read_text().strip() == "8"
    finally:
        sleeper.kill()
        sleeper.wait()
        assert cgroup.kill_all() and cgroup.remove(5.0) is None


# --- prepared commands: set up ahead, started later ------------------------------------------


@pytest.mark.parametrize("kind", EVERY)
def test_prepared_command_does_not_run_before_start_and_its_deadline_counts_from_start(
    kind: str, tmp_path: Path
) -> None:
    agent = Agent(tmp_path, open_sandbox(kind))
    spec = agent.spec(["sh", "-c", "touch ran; sleep 0.3; echo done"], timeout_s=0.6)
    with agent.sandbox.prepare(spec) as prepared:
        time.sleep(1.0)  # longer than the deadline: held, not running
        assert not (agent.workdir / "ran").exists()
        t0 = time.monotonic()
        result = prepared.start()
        took = time.monotonic() - t0
    assert (result.exit_code, result.timed_out) == (0, False)
    assert agent.stdout() == "done\n"
    assert (agent.workdir / "ran").exists()
    assert 0.3 <= result.elapsed_s <= took < 0.6


@pytest.mark.parametrize("kind", EVERY)
def test_prepared_command_takes_the_deadline_given_at_start(kind: str, tmp_path: Path) -> None:
    agent = Agent(tmp_path, open_sandbox(kind))
    with agent.sandbox.prepare(agent.spec(["sleep", "30"], timeout_s=30.0)) as prepared:
        t0 = time.monotonic()
        result = prepared.start(0.2)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - t0 < 0.2 + PROMISED_KILL_S


@pytest.mark.parametrize("kind", EVERY)
def test_prepared_command_closed_unstarted_never_runs_and_leaves_nothing(kind: str, tmp_path: Path) -> None:
    agent = Agent(tmp_path, open_sandbox(kind))
    prepared = agent.sandbox.prepare(agent.spec(["sh", "-c", "touch ran"]))
    time.sleep(0.2)
    prepared.close()
    prepared.close()  # twice is fine
    time.sleep(0.2)
    assert not (agent.workdir / "ran").exists()
    assert marked_pids(agent.mark) == []
    if HAS_PIDS_CGROUP:
        assert sandbox_module.settle_cgroup_removals()
        assert list(cgroup_root().glob(f"run-{os.getpid()}-*")) == []


def test_prepared_command_runs_once(tmp_path: Path) -> None:
    agent = Agent(tmp_path, NoSandbox())
    with agent.sandbox.prepare(agent.spec(["true"])) as prepared:
        assert prepared.start().exit_code == 0
        with pytest.raises(HarnessError, match="runs once"):
            prepared.start()


def bwrap_pids_for(workdir: Path) -> list[int]:
    needle = str(workdir).encode()
    found = []
    with os.scandir("/proc") as listing:
        for entry in listing:
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    argv = Path("/proc", entry.name, "cmdline").read_bytes().split(b"\0")
                    if argv and argv[0].endswith(b"bwrap") and needle in argv:
                        found.append(int(entry.name))
    return found


@needs_bwrap
def test_prepared_bubblewrap_is_held_with_its_namespaces_built(tmp_path: Path) -> None:
    """Held: bwrap and its child already live in new namespaces, the command has not run."""
    agent = Agent(tmp_path, open_sandbox("bubblewrap"))
    with agent.sandbox.prepare(agent.spec(["sh", "-c", "echo $$"])) as prepared:
        time.sleep(0.3)
        held = bwrap_pids_for(agent.workdir)
        assert len(held) == 2, held  # the monitor and the sandbox's pid 1, waiting on the gate
        namespaces = {os.readlink(f"/proc/{pid}/ns/pid") for pid in held}
        assert os.readlink("/proc/self/ns/pid") in namespaces and len(namespaces) == 2
        assert marked_pids(agent.mark) == []
        result = prepared.start()
    assert result.exit_code == 0 and agent.stdout().strip() == "2"  # pid 2: under bwrap's pid 1
    assert bwrap_pids_for(agent.workdir) == []


# --- no command outlives its runner ----------------------------------------------------------

_DYING_RUNNER = """
import os, signal, sys, threading, time
from pathlib import Path
from sealbench.sandbox import Limits, SandboxSpec, open_sandbox
kind, workdir, mark, start = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "start"
box = open_sandbox(kind)
script = "(while :; do date +%s%N >> child-ticks; sleep 0.02; done) & while :; do date +%s%N >> ticks; sleep 0.02; done"
spec = SandboxSpec(argv=("sh", "-c", script), workdir=workdir, env={"PATH": "/usr/bin:/bin", "SEALBENCH_MARK": mark},
                   timeout_s=60.0, stdout_path=None, stderr_path=None, limits=Limits(processes=64))
prepared = box.prepare(spec)
if start:
    threading.Thread(target=prepared.start, daemon=True).start()
    while not (workdir / "child-ticks").exists():
        time.sleep(0.01)
else:
    time.sleep(0.3)  # held: its sandbox built, waiting on the gate
print("ready", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _kill_a_runner(kind: str, tmp_path: Path, *, started: bool) -> tuple[Path, str]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    mark = uuid.uuid4().hex
    # A test-only backend opens where the tests are importable: in this runner too.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                                     os.environ.get("PYTHONPATH")]))}
    runner = subprocess.run([PY, "-c", _DYING_RUNNER, kind, str(workdir), mark, "start" if started else "hold"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert runner.returncode == -signal.SIGKILL and runner.stdout == "ready\n", runner.stderr
    return workdir, mark


@pytest.mark.parametrize("kind", ISOLATING)
def test_held_command_never_starts_when_its_runner_is_killed(kind: str, tmp_path: Path) -> None:
    """bwrap's --block-fd proceeds on EOF: a held agent used to start, unsupervised, when its runner died."""
    workdir, mark = _kill_a_runner(kind, tmp_path, started=False)
    time.sleep(1.0)
    assert sorted(os.listdir(workdir)) == []
    assert marked_pids(mark) == []


@pytest.mark.parametrize("kind", EVERY)
def test_running_command_and_its_children_die_with_their_killed_runner(kind: str, tmp_path: Path) -> None:
    workdir, mark = _kill_a_runner(kind, tmp_path, started=True)
    time.sleep(0.2)  # the kernel's and the reaper's moment
    sizes = {name: (workdir / name).stat().st_size for name in ("ticks", "child-ticks")}
    time.sleep(1.0)
    assert {name: (workdir / name).stat().st_size for name in sizes} == sizes
    assert marked_pids(mark) == []


@pytest.mark.parametrize("kind", EVERY)
def test_kill_from_another_thread_stops_a_started_command_and_forbids_a_start(kind: str, tmp_path: Path) -> None:
    agent = Agent(tmp_path, open_sandbox(kind))
    with agent.sandbox.prepare(agent.spec(["sleep", "30"], timeout_s=30.0)) as prepared:
        threading.Timer(0.3, prepared.kill).start()
        t0 = time.monotonic()
        result = prepared.start()
        assert time.monotonic() - t0 < 5.0
    assert not result.timed_out and result.exit_code in (None, 128 + signal.SIGKILL)
    assert marked_pids(agent.mark) == []
    with agent.sandbox.prepare(agent.spec(["touch", "ran"])) as prepared:
        prepared.kill()
        with pytest.raises(HarnessError, match="stopped before it started"):
            prepared.start()
    assert not (agent.workdir / "ran").exists()


def test_a_start_whose_admission_fails_raises_instead_of_hanging(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """NoSandbox spawns at start, under the lock kill() takes: a failed admission reaps under it too."""
    agent = Agent(tmp_path, NoSandbox())

    def refuse(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(sandbox_process.resource, "prlimit", refuse)
    raised: list[BaseException] = []

    def start() -> None:
        try:
            prepared.start()
        except BaseException as e:
            raised.append(e)

    with agent.sandbox.prepare(agent.spec(["touch", "ran"])) as prepared:
        starter = threading.Thread(target=start, daemon=True)  # a deadlock fails the test, never hangs it
        starter.start()
        starter.join(10)
        assert not starter.is_alive(), "start() deadlocked"
    assert len(raised) == 1 and isinstance(raised[0], HarnessError), raised
    assert "setting its rlimits failed" in str(raised[0])
    assert not (agent.workdir / "ran").exists()


# --- the registry ------------------------------------------------------------------------


def test_the_cli_offers_every_registered_backend_and_no_unshare() -> None:
    from sealbench.cli import main

    assert sandboxes.names() == ["auto", "bubblewrap", "none"]
    with pytest.raises(SystemExit) as info:  # an invalid choice is a usage error (exit 2)
        main(["run", "c.json", "--sandbox", "unshare"])
    assert info.value.code == 2


def test_a_registered_backend_is_opened_by_name_and_offered_by_the_cli(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from sealbench.cli import main

    monkeypatch.setitem(sandboxes._REGISTRY, "plain",
                        sandboxes.Backend("plain", "sealbench.sandbox:open_none", isolating=False, summary="test"))
    assert isinstance(open_sandbox("plain"), NoSandbox)
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "{auto,bubblewrap,none,plain}" in capsys.readouterr().out
    with pytest.raises(ValueError, match="already registered"):
        sandboxes.register(sandboxes.Backend("none", "x:y", isolating=False, summary=""))


def test_auto_never_falls_back_to_a_backend_that_does_not_isolate(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every isolating backend refusing here: auto refuses with each reason, never picks "none".
    monkeypatch.setattr(sandboxes, "_REGISTRY", {
        "bubblewrap": sandboxes.Backend("bubblewrap", "sealbench.sandbox:open_bubblewrap", isolating=True,
                                        summary=""),
        "none": sandboxes.Backend("none", "sealbench.sandbox:open_none", isolating=False, summary=""),
    })
    with pytest.raises(RunRefusal, match=r"no sandbox available \(bubblewrap .*\); install bubblewrap"):
        open_sandbox("auto", bwrap_executable="/nonexistent/bwrap")


# --- the workspace copied into its quota'd tmpfs ahead of the start ------------------------


def _quota_spec(work: Path, argv: Sequence[str]) -> SandboxSpec:
    from sealbench.agentfs import TreeCaps

    return SandboxSpec(argv=tuple(argv), workdir=work, env={"PATH": "/usr/bin:/bin"}, timeout_s=30.0,
                       stdout_path=None, stderr_path=None, workdir_caps=TreeCaps(max_bytes=1 << 20))


@needs_bwrap
def test_a_workspace_copied_in_ahead_is_what_the_command_sees_and_its_writes_come_back(tmp_path: Path) -> None:
    box = sandbox_module.open_sandbox("bubblewrap")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "in.txt").write_text("from the host\n")
    spec = _quota_spec(tmp_path / "work", ["sh", "-c", "cat in.txt; echo back > out.txt"])
    held = box.prepare(spec)
    try:
        assert held.fills_ahead() == box.quota_applies(spec)
        held.fill_ahead()
        assert not held.fills_ahead()
        held.fill_ahead()  # once only
        result = held.start()
    finally:
        held.close()
    assert result.exit_code == 0 and result.stdout == b"from the host\n"
    assert (tmp_path / "work" / "out.txt").read_text() == "back\n"


@needs_bwrap
def test_a_held_sandbox_without_a_quota_has_nothing_to_fill_ahead(tmp_path: Path) -> None:
    """The executor wakes no thread to copy a workspace that is bound, not copied, in."""
    box = sandbox_module.open_sandbox("bubblewrap")
    (tmp_path / "work").mkdir()
    held = box.prepare(SandboxSpec(argv=("true",), workdir=tmp_path / "work", env={"PATH": "/usr/bin:/bin"},
                                   timeout_s=30.0, stdout_path=None, stderr_path=None))
    try:
        assert not held.fills_ahead()
        assert held.start().exit_code == 0
    finally:
        held.close()


@needs_bwrap
def test_closing_a_held_sandbox_while_its_copy_is_under_way_on_another_thread_is_clean(tmp_path: Path) -> None:
    box = sandbox_module.open_sandbox("bubblewrap")
    for i in range(20):
        work = tmp_path / f"work{i}"
        work.mkdir()
        for n in range(50):
            (work / f"f{n}.txt").write_text("x" * 1000)
        held = box.prepare(_quota_spec(work, ["true"]))
        errors: list[BaseException] = []

        def fill(h: Any = held, errors: list[BaseException] = errors) -> None:
            try:
                h.fill_ahead()
            except HarnessError:
                pass  # bwrap was killed under it: the start would have said so
            except BaseException as e:  # anything else is the bug this looks for
                errors.append(e)

        t = threading.Thread(target=fill)
        t.start()
        time.sleep(0.001 * (i % 5))
        held.close()
        t.join(10)
        assert not t.is_alive() and errors == []
        with pytest.raises(HarnessError):
            held.start()  # a closed sandbox never runs its command


def test_the_package_re_exports_what_was_importable_from_the_module() -> None:
    """``sealbench.sandbox`` was one module; its parts are now modules of a package, and every
    public name importers use is still importable from the package itself."""
    assert set(sandbox_module.__all__) >= {
        "BubblewrapSandbox", "COMMAND_NICENESS", "KILL_GRACE_S", "Limits", "NoSandbox", "Prepared", "PreparedProcess",
        "Relay", "Sandbox", "SandboxResult", "SandboxSpec", "YIELD_ABOVE_JOBS", "command_path",
        "deferred_cgroup_removals", "open_ahead", "open_bubblewrap", "open_none", "open_sandbox",
        "process_limit_method", "settle_cgroup_removals", "sweep_stale_cgroups", "unescape_mount_field"}
    assert all(getattr(sandbox_module, name) is not None for name in sandbox_module.__all__)
