"""The checks any sandbox backend passes to prove it keeps the :class:`Sandbox` contract.

A backend registered by another package (:func:`sealbench.sandboxes.register`) runs
:func:`check` on itself; sealbench's own tests run it over every registered backend. Each
check starts real commands in the backend (``/bin/sh`` and this Python) in a scratch directory
of its own and says what it saw when a promise is broken::

    problems = conformance.check(MySandbox(), isolating=True)
    assert problems == [], problems

Every backend must run the command in its workdir with exactly the spec's environment (plus
``PWD``), report its exit code and output, cap what is kept of the output and the size of a
file, kill it within :data:`PROMISED_KILL_S` of its deadline even when it ignores SIGTERM,
hold a prepared command until it is started (and never run one closed unstarted), and stop a
started one killed from another thread. An isolating backend must also hide the workdir's
sibling directories, keep writes outside the workdir off the host, reach no loopback service
of the host and leave no process behind. These are the promises a runner relies on; the
exploits in ``tests/test_sandbox.py`` probe each defence further.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sealbench import scratch
from sealbench.sandbox.opening import command_path
from sealbench.sandbox.protocol import Limits, Sandbox, SandboxResult, SandboxSpec

PROMISED_KILL_S: Final = 1.0
"""Seconds past its deadline within which a command that ignores SIGTERM is gone."""
_DEADLINE_S: Final = 0.5
_SLACK_S: Final = 0.5  # a loaded machine's scheduling, on top of the promise


@dataclass(frozen=True)
class _Scene:
    """One check's private tree: ``work`` is the workdir, ``hidden`` a sibling of it."""

    sandbox: Sandbox
    root: Path
    mark: str

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    def spec(self, script: str, *, timeout_s: float = 10.0, limits: Limits | None = None,
             argv: Sequence[str] | None = None) -> SandboxSpec:
        return SandboxSpec(
            argv=tuple(argv) if argv is not None else (shutil.which("sh") or "/bin/sh", "-c", script),
            workdir=self.workdir,
            env={"PATH": command_path(), "HOME": str(self.workdir), "LANG": "C.UTF-8",
                 "CONFORMANCE_MARK": self.mark},
            timeout_s=timeout_s,
            stdout_path=self.root / "stdout",
            stderr_path=self.root / "stderr",
            limits=limits or Limits(processes=64),
        )

    def run(self, script: str, *, timeout_s: float = 10.0, limits: Limits | None = None,
            ) -> tuple[SandboxResult, str, str]:
        result = self.sandbox.run(self.spec(script, timeout_s=timeout_s, limits=limits))
        out = (self.root / "stdout").read_text(errors="replace")
        err = (self.root / "stderr").read_text(errors="replace")
        return result, out, err

    def leftovers(self) -> list[int]:
        """Live processes of this check's commands, found by the mark in their environment."""
        needle = f"CONFORMANCE_MARK={self.mark}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    status = Path(f"/proc/{entry}/stat").read_text()
                    if status.rpartition(")")[2].split()[0] != "Z" and needle in Path(
                            f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                        found.append(int(entry))
        return found


def _exit_code_and_output(s: _Scene) -> list[str]:
    result, out, err = s.run("pwd; echo oops >&2; exit 3")
    problems = []
    if (result.exit_code, result.timed_out, result.signal) != (3, False, None):
        problems.append(f"exit 3 reported as exit_code={result.exit_code}, timed_out={result.timed_out}, "
                        f"signal={result.signal}")
    if (out, err) != (f"{s.workdir}\n", "oops\n"):
        problems.append(f"stdout {out!r} and stderr {err!r}, not the workdir and 'oops'")
    if (result.stdout_bytes, result.stderr_bytes) != (len(out.encode()), len(err.encode())):
        problems.append(f"byte counts {result.stdout_bytes}/{result.stderr_bytes} for what was written")
    return problems


def _output_in_memory(s: _Scene) -> list[str]:
    spec = dataclasses.replace(s.spec("echo kept"), stdout_path=None, stderr_path=None)
    result = s.sandbox.run(spec)
    if (result.stdout, result.stderr) != (b"kept\n", b""):
        return [f"output kept in memory is {result.stdout!r} / {result.stderr!r}, not b'kept\\n' / b''"]
    return []


def _output_capped(s: _Scene) -> list[str]:
    cap, written = 4096, 200_000
    result, out, _ = s.run(f"head -c {written} /dev/zero", limits=Limits(processes=64, output_bytes=cap))
    if result.exit_code != 0 or result.stdout_bytes != written or not result.stdout_truncated or len(out) != cap:
        return [f"{written} bytes on stdout under a cap of {cap}: exit {result.exit_code}, counted "
                f"{result.stdout_bytes}, truncated={result.stdout_truncated}, kept {len(out)}"]
    return []


def _file_size_capped(s: _Scene) -> list[str]:
    cap = 65536
    s.run("head -c 200000 /dev/zero > big", limits=Limits(processes=64, file_size_bytes=cap))
    size = (s.workdir / "big").stat().st_size if (s.workdir / "big").exists() else 0
    return [f"a file grew to {size} bytes under a cap of {cap}"] if size > cap else []


def _environment_exact(s: _Scene) -> list[str]:
    result, out, _ = s.run("env")
    seen = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    wanted = {**s.spec("").env, "PWD": str(s.workdir)}
    if result.exit_code != 0 or seen != wanted:
        return [f"the environment inside is {sorted(seen)}, not exactly the spec's plus PWD ({sorted(wanted)})"]
    return []


def _workdir_writable(s: _Scene) -> list[str]:
    s.run("echo made > made")
    made = s.workdir / "made"
    if not made.is_file() or made.read_text() != "made\n":
        return ["a file written in the workdir is not on the host afterwards"]
    return []


def _killed_at_deadline(s: _Scene) -> list[str]:
    problems = []
    for what, script in (("a sleeping command", "sleep 3"),
                         ("a command ignoring SIGTERM", "trap '' TERM; sleep 3 & sleep 3")):
        started = time.monotonic()
        result, _, _ = s.run(script, timeout_s=_DEADLINE_S)
        wall = time.monotonic() - started
        if not result.timed_out or result.exit_code is not None:
            problems.append(f"{what} past its deadline: timed_out={result.timed_out}, exit_code={result.exit_code}")
        if wall > _DEADLINE_S + PROMISED_KILL_S + _SLACK_S:
            problems.append(f"{what} took {wall:.2f} s to end, past a deadline of {_DEADLINE_S} s")
    return problems


def _held_until_started(s: _Scene) -> list[str]:
    problems = []
    prepared = s.sandbox.prepare(s.spec("echo ran > ran"))
    try:
        time.sleep(0.2)
        if (s.workdir / "ran").exists():
            problems.append("a prepared command ran before its start")
    finally:
        prepared.close()
    time.sleep(0.2)
    if (s.workdir / "ran").exists():
        problems.append("a prepared command closed unstarted ran")
    prepared = s.sandbox.prepare(s.spec("echo ran > ran"))
    try:
        result = prepared.start()
    finally:
        prepared.close()
    if result.exit_code != 0 or not (s.workdir / "ran").exists():
        problems.append(f"a prepared command, started, did not run (exit {result.exit_code})")
    return problems


def _killed_from_another_thread(s: _Scene) -> list[str]:
    prepared = s.sandbox.prepare(s.spec("sleep 30"))
    results: list[SandboxResult] = []
    runner = threading.Thread(target=lambda: results.append(prepared.start()), daemon=True)
    try:
        started = time.monotonic()
        runner.start()
        time.sleep(0.3)
        prepared.kill()
        runner.join(PROMISED_KILL_S + _SLACK_S)
        wall = time.monotonic() - started
    finally:
        prepared.close()
    runner.join()
    if not results or results[0].exit_code == 0 or wall > 0.3 + PROMISED_KILL_S + _SLACK_S:
        return [f"a command killed from another thread was not stopped within {PROMISED_KILL_S} s"]
    return []


def _described(s: _Scene) -> list[str]:
    facts = s.sandbox.describe()
    if facts.get("kind") != s.sandbox.kind or not all(isinstance(v, str) for v in facts.values()):
        return [f"describe() gives {facts!r}: it must name kind {s.sandbox.kind!r}, every value a string"]
    return []


def _siblings_hidden(s: _Scene) -> list[str]:
    hidden = s.root / "hidden"
    hidden.mkdir()
    (hidden / "secret").write_text("the hidden tests\n")
    _, out, _ = s.run(f"cat {hidden}/secret; ls {hidden}")
    return ["a sibling directory of the workdir is readable inside"] if "hidden tests" in out or "secret" in out else []


def _writes_outside_kept_off_the_host(s: _Scene) -> list[str]:
    outside = s.root / "escaped"
    s.run(f"echo out > {outside}; echo out > ../escaped2")
    leaked = [p.name for p in (outside, s.root / "escaped2") if p.exists()]
    return [f"writes outside the workdir reached the host: {leaked}"] if leaked else []


def _host_loopback_unreachable(s: _Scene) -> list[str]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')"
        spec = s.spec("", argv=(sys.executable, "-c", code))
        s.sandbox.run(spec)
    out = (s.root / "stdout").read_text(errors="replace")
    return [f"a service on the host's loopback (port {port}) is reachable inside"] if "connected" in out else []


def _nothing_left_behind(s: _Scene) -> list[str]:
    s.run("(setsid sleep 30 &) ; sleep 30 & exit 0")
    left = s.leftovers()
    return [f"processes the command started outlived it: {left}"] if left else []


_Check = Callable[[_Scene], list[str]]

EVERY_BACKEND: Final[tuple[tuple[str, _Check], ...]] = (
    ("exit code and output", _exit_code_and_output),
    ("output in memory", _output_in_memory),
    ("output capped", _output_capped),
    ("file size capped", _file_size_capped),
    ("environment exact", _environment_exact),
    ("workdir writable", _workdir_writable),
    ("killed at the deadline", _killed_at_deadline),
    ("held until started", _held_until_started),
    ("killed from another thread", _killed_from_another_thread),
    ("described", _described),
)
"""What every backend promises, isolating or not."""
ISOLATING_ONLY: Final[tuple[tuple[str, _Check], ...]] = (
    ("siblings hidden", _siblings_hidden),
    ("writes outside kept off the host", _writes_outside_kept_off_the_host),
    ("host loopback unreachable", _host_loopback_unreachable),
    ("nothing left behind", _nothing_left_behind),
)
"""What a backend that isolates (``auto`` may pick it) promises besides."""


def check(sandbox: Sandbox, *, isolating: bool) -> list[str]:
    """Run every check of :data:`EVERY_BACKEND` (and :data:`ISOLATING_ONLY` when ``isolating``)
    on ``sandbox``; the broken promises, each as ``"check: what was seen"``, or ``[]``.

    A check that raises is a broken promise too: its exception is reported, and the checks
    after it still run, so one call lists everything wrong.
    """
    checks = EVERY_BACKEND + (ISOLATING_ONLY if isolating else ())
    base = scratch.temp_dir("conformance")
    problems: list[str] = []
    try:
        for n, (name, run) in enumerate(checks):
            scene = _Scene(sandbox, base / str(n), uuid.uuid4().hex)
            scene.workdir.mkdir(parents=True)
            try:
                found = run(scene)
            except Exception as exc:  # a backend's failure is what this reports, whatever its kind
                found = [f"raised {type(exc).__name__}: {exc}"]
            problems += [f"{name}: {p}" for p in found]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return problems
