"""Repository-level pytest oracles that read nothing from the workspace but the code under test.

A task record whose ``oracle_cmd`` is ``["sealbench-pytest", ARG...]`` asks the runner for the
harness's own pytest: the ``ARG``s are the pack's pytest arguments (test files or node ids,
and the options the tests need, e.g. ``-o pythonpath=src`` for a src/ layout or ``-m "not
slow"``), and everything else is the harness's. The runner starts
:mod:`sealbench.pytest_guard` (bound read-only into the sandbox) as
``python -P -s pytest_guard.py PRIVATE -- ARG...`` in the grading copy, with plugin autoload
off, a configuration file of its own (``-c``; the workspace's pytest.ini, tox.ini, setup.cfg
and pyproject.toml are not read), only the pack's own ``conftest.py`` files, and the JUnit
report and the guard's record written in ``PRIVATE``, a host directory outside the grading
copy bound writable at its own path. Options the harness owns are refused in a pack
(:func:`owned_option_problem`).

The code under test still runs inside the pytest process, so what it does there is not
prevented; the known forging means are flagged (:data:`sealbench.pytest_guard.FLAGS`), and
the contract decides whether a flagged pass counts. The guard's record of them ends with an
HMAC under a key made here for each grade (:attr:`GuardedOracle.key`), which the tests never
hold: a record they cut short or forge does not authenticate and is itself a flag.

A pack whose ``oracle_cmd`` runs pytest itself (``python -m pytest ...``, the form sealbench
generated before) is run as sealed, unguarded: its meaning is not changed behind its seal.
The runner records it on the task's ``task_started`` event (``oracle_guard: "none"``), and
``contract new`` also forbids pyproject.toml and ``*.egg-info/`` for such a pack. Re-import
the pack (the importers write ``sealbench-pytest``) or edit its records, then seal and
validate it again, to have it guarded.

Everything read back from ``PRIVATE`` is read without following a link, with a size cap: the
code under test could write there.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from xml.parsers import expat

from . import pytest_guard
from .digest import sha256_bytes

HARNESS_PYTEST: Final = "sealbench-pytest"
GUARD_FILE: Final = Path(pytest_guard.__file__).resolve()
GUARD_LABEL: Final = f"{HARNESS_PYTEST}/{pytest_guard.GUARD_VERSION}"
REPORT_CAP: Final = 64 * 2**20
JUNIT_MAX_DEPTH: Final = 64
RECORD_CAP: Final = 8 * 2**20
_DETAILS_KEPT: Final = 20
# Options that would hand the workspace back what the harness takes away, or move the report.
# (-p stays the pack's: with autoload off, it is how a pack loads an installed plugin; the
# guard flags a plugin that comes from the workspace.)
_OWNED_OPTIONS: Final = ("-c", "--config-file", "--rootdir", "--confcutdir", "--junitxml", "--junit-xml",
                         "--noconftest")
NO_REPORT: Final = "no JUnit report written"
SELF_CHECK_TEST: Final = "test_sealbench_self_check.py"
SELF_CHECK_S: Final = 60.0
"""The harness's own test run (:func:`prepare_self_check`): one test, which passes."""
_SELF_CHECK_NAME: Final = "test_sealbench_self_check::test_the_harness_runs"
# pytest's own statuses for a session that ran: passed, failed, interrupted, nothing collected.
_SESSION_STATUSES: Final = (0, 1, 2, 5)
_EXCEPTION_LINE: Final = re.compile(r"^(?:INTERNALERROR> )?(?:E +)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)"
                                    r"(?::.*)?)$")
_INI: Final = "[pytest]\n# sealbench's own pytest configuration: the workspace's is never read.\n"


def is_guarded(argv: Sequence[str]) -> bool:
    """True for an oracle_cmd that asks for the harness's pytest."""
    return bool(argv) and argv[0] == HARNESS_PYTEST


def runs_pytest_unguarded(argv: Sequence[str]) -> bool:
    """True for an oracle_cmd that starts pytest itself (``python -m pytest``, ``pytest``)."""
    if not argv or is_guarded(argv):
        return False
    if os.path.basename(argv[0]) in ("pytest", "py.test"):
        return True
    return any(a == "-m" and b in ("pytest", "py.test") for a, b in itertools.pairwise(argv))


def missing_pytest(oracle_cmds: Iterable[Sequence[str]]) -> str | None:
    """Why these oracles cannot run on this installation, or None.

    Oracles run on the interpreter that runs sealbench. Without pytest beside it every pytest
    oracle would exit 1 whatever the candidate wrote, and each attempt would be scored as the
    agent's failure: a broken installation must refuse before it decides anything.
    """
    import importlib.util
    import sys

    needs = next((list(cmd) for cmd in oracle_cmds if is_guarded(cmd) or runs_pytest_unguarded(cmd)), None)
    if needs is None or importlib.util.find_spec("pytest") is not None:
        return None
    return (f"the oracles run pytest ({' '.join(needs)}), but pytest is not installed beside sealbench "
            f"({sys.executable}); install sealbench with its dependencies (pip install sealbench brings pytest)")


def owned_option_problem(argv: Sequence[str]) -> str | None:
    """Why a ``sealbench-pytest`` oracle_cmd cannot be run as written, or None."""
    for arg in argv[1:]:
        if arg == "--":
            break
        for option in _OWNED_OPTIONS:
            if arg == option or (option.startswith("--") and arg.startswith(option + "=")) or (
                    option == "-c" and arg.startswith(option) and len(arg) > 2):
                return (f"{arg!r}: the harness owns this pytest option (configuration file, rootdir, "
                        "conftest, plugins and the JUnit report); declare test options with -o, -k, -m or paths")
    return None


@dataclass(frozen=True)
class GuardedOracle:
    """How to start one guarded pytest run, and where it leaves its report and record.

    ``key`` authenticates the record the run leaves; it is given to the run in a file the
    guard deletes before any code under test runs, and kept here to check the record.
    """

    argv: tuple[str, ...]
    env: dict[str, str]
    readonly: tuple[Path, ...]
    writable: tuple[Path, ...]
    private: Path
    key: bytes = field(repr=False)


def prepare(private: Path, oracle_cmd: Sequence[str], owned: Iterable[str]) -> GuardedOracle:
    """Create ``private`` (it must not exist) with the harness's configuration; the command.

    ``owned`` are the grading copy's relative paths that are the pack's own: the hidden tests
    and the workspace files the patch left unchanged. Only those may be imported as a
    ``conftest.py``, and code in them is not code under test.

    Raises:
        ValueError: ``oracle_cmd`` is not a ``sealbench-pytest`` one, or uses an option the
            harness owns.
        OSError: ``private`` exists or cannot be written.
    """
    if not is_guarded(oracle_cmd):
        raise ValueError(f"not a {HARNESS_PYTEST} oracle: {list(oracle_cmd)!r}")
    problem = owned_option_problem(oracle_cmd)
    if problem is not None:
        raise ValueError(problem)
    private.mkdir(mode=0o700)
    key = secrets.token_bytes(32)
    config = {"guard_version": pytest_guard.GUARD_VERSION, "owned": sorted(set(owned)), "key": key.hex()}
    (private / pytest_guard.CONFIG_NAME).write_text(json.dumps(config), encoding="utf-8")
    (private / pytest_guard.INI_NAME).write_text(_INI, encoding="utf-8")
    argv = ("python", "-P", "-s", str(GUARD_FILE), str(private), "--", *oracle_cmd[1:])
    return GuardedOracle(argv=argv, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, readonly=(GUARD_FILE,),
                         writable=(private,), private=private, key=key)


@dataclass(frozen=True)
class GuardedVerdict:
    """What a guarded run left: the JUnit verdict and the forging flags, read safely."""

    junit: dict[str, Any]
    flags: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def read_private(path: Path, cap: int) -> bytes | None:
    """The bytes of a regular file, never through a link; None when missing, not a regular
    file, or over ``cap`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 16):
            size += len(chunk)
            if size > cap:
                return None
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def junit_verdict(data: bytes | None, required: Sequence[str], decided_by: str = "all") -> dict[str, Any]:
    """Counts, failures and whether the tests that decide passed, from a JUnit report's bytes
    (see :func:`verdict` for the two rules).

    The code under test can write the report: it is read as a stream (:func:`read_junit`), and
    only the required tests' names are kept, so a report of millions of cases costs counts.
    """
    if data is None:
        return {"ok": False, "why": NO_REPORT}
    wanted = set(required)
    ran = failed = 0
    passed: set[str] = set()
    not_passed: set[str] = set()

    def count(case: JUnitCase) -> None:
        nonlocal ran, failed
        names = _names(case.cls, case.name) & wanted
        if "skipped" in case.marks:
            not_passed.update(names)
            return
        ran += 1
        if "failure" in case.marks or "error" in case.marks:
            failed += 1
            not_passed.update(names)
            return
        passed.update(names)

    try:
        read_junit(data, count)
    except (expat.ExpatError, ValueError) as e:
        return {"ok": False, "why": f"unreadable JUnit report: {e}"}
    return verdict(ran, failed, passed, required, decided_by, not_passed)


@dataclass
class JUnitCase:
    """One ``testcase`` of a JUnit report and which of skipped, failure, error it has."""

    name: str
    cls: str
    marks: set[str] = field(default_factory=set)


def read_junit(data: bytes, on_case: Callable[[JUnitCase], None]) -> None:
    """Call ``on_case`` with every ``testcase`` element of a JUnit report (at any depth), once
    it closes, with which of ``skipped``, ``failure`` and ``error`` it has as direct children.

    Read as a stream, never built as a tree, and refused past :data:`JUNIT_MAX_DEPTH` levels:
    the code under test can write the report, and a tree of millions of nested elements
    within the size cap cost the runner 700 MB (2.6 GB, and its threads for 14 s, at 60 MiB).

    Raises:
        expat.ExpatError: the report is not well-formed XML.
        ValueError: it nests deeper than the cap.
    """
    open_elements: list[JUnitCase | None] = []
    # The namespace separator of ElementTree: a namespaced testcase is not a testcase there either.
    parser = expat.ParserCreate(namespace_separator="}")

    def start(tag: str, attrs: dict[str, str]) -> None:
        if len(open_elements) >= JUNIT_MAX_DEPTH:
            raise ValueError(f"elements nested deeper than {JUNIT_MAX_DEPTH}")
        parent = open_elements[-1] if open_elements else None
        if parent is not None and tag in ("skipped", "failure", "error"):
            parent.marks.add(tag)
        open_elements.append(JUnitCase(attrs.get("name", ""), attrs.get("classname", "")) if tag == "testcase"
                             else None)

    def end(tag: str) -> None:
        closed = open_elements.pop()
        if closed is not None:
            on_case(closed)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.Parse(data, True)


def _names(cls: str, name: str) -> set[str]:
    # The runner matches a required test by classname::name, classname.name or its name alone.
    return {name, f"{cls}::{name}", f"{cls}.{name}"}


def verdict(ran: int, failed: int, passed: set[str], required: Sequence[str], decided_by: str = "all",
            not_passed: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """A test report's verdict under a task's rule (``TaskRecord.decided_by``): ``all``, every test
    that ran passed and the required ones among them; ``required``, each required test passed
    (a required test that did not run fails it) and the others may fail.

    A required name passes only when every test it names passed: ``passed`` and ``not_passed``
    hold each test's aliases (``cls::name``, ``cls.name``, ``name``), so a required ``test_x``
    that failed in one file is not covered by a ``test_x`` that passed in another."""
    missing = [t for t in required if t not in passed or t in not_passed]
    if decided_by == "required":
        ok = ran > 0 and bool(required) and not missing
        why = None if ok else ("no test ran" if ran == 0 else "no required tests" if not required
                               else f"not passed: {missing[:5]}")
    else:
        ok = ran > 0 and failed == 0 and not missing
        why = None if ok else ("no test ran" if ran == 0 else f"{failed} failed" if failed
                               else f"not passed: {missing[:5]}")
    return {"ok": ok, "ran": ran, "failed": failed, "missing_required": missing, "why": why}


def exit_passes(exit_code: int | None, decided_by: str = "all") -> bool:
    """Whether the oracle's exit code allows a pass: 0, or under the ``required`` rule also 1
    (pytest's code when some test failed; the report then decides). Interrupted (2), internal
    error (3), usage error (4), nothing collected (5) and a signal never pass."""
    return exit_code == 0 or (decided_by == "required" and exit_code == 1)


def _guard_verdict(tests: dict[str, str], required: Sequence[str], decided_by: str = "all") -> dict[str, Any]:
    """The same verdict, from the outcomes the guard saw (``classname::name`` -> outcome)."""
    ran = failed = 0
    passed: set[str] = set()
    not_passed: set[str] = set()
    for key, outcome in tests.items():
        cls, _, name = key.rpartition("::")
        if outcome == "skipped":
            not_passed.update(_names(cls, name))
            continue
        ran += 1
        if outcome != "passed":
            failed += 1
            not_passed.update(_names(cls, name))
            continue
        passed.update(_names(cls, name))
    return verdict(ran, failed, passed, required, decided_by, not_passed)


@dataclass
class _Record:
    flags: list[tuple[str, str]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    ignored: list[str] = field(default_factory=list)


def _authentic(data: bytes, key: bytes) -> tuple[bool, bytes]:
    """Whether the record's last line authenticates every byte before it; those bytes."""
    body, _, last = data.rstrip(b"\n").rpartition(b"\n")
    body = body + b"\n" if body else b""
    try:
        entry = json.loads(last)
    except ValueError:
        return False, data
    if not isinstance(entry, dict) or entry.get("kind") != "mac" or not isinstance(entry.get("mac"), str):
        return False, data
    expected = pytest_guard.record_mac(key, hashlib.sha256(body).digest())
    return hmac.compare_digest(expected, entry["mac"]), body


def _parse_record(data: bytes | None, key: bytes) -> _Record:
    """The guard's record; every way it can be wrong is a flag, never an error."""
    rec = _Record()
    if data is None:
        rec.flags.append(("record_tampered", "the guard's record is missing, not a file, or too large"))
        return rec
    authentic, body = _authentic(data, key)
    if not authentic:
        rec.flags.append(("record_tampered", "the record does not authenticate: cut short, edited, or not the guard's"))
    for line in body.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        kind = entry.get("kind")
        if kind == "flag":
            name, detail = entry.get("flag"), entry.get("detail")
            # Lines of a record that does not authenticate can only add flags.
            if name in pytest_guard.FLAGS and isinstance(detail, str):
                rec.flags.append((name, detail))
        elif kind == "ignored" and isinstance(entry.get("path"), str):
            rec.ignored.append(entry["path"])
        elif kind == "end" and authentic:
            rec.end = entry
        elif kind == "end":
            rec.flags.extend((str(i[0]), str(i[1])) for i in entry.get("flags") or []
                             if isinstance(i, list) and len(i) == 2 and i[0] in pytest_guard.FLAGS)
    if rec.end is None:
        rec.flags.append(("session_cut_short", "the test process ended before the harness's end of session"))
    else:
        for item in rec.end.get("flags") or []:
            if isinstance(item, list) and len(item) == 2 and item[0] in pytest_guard.FLAGS:
                rec.flags.append((str(item[0]), str(item[1])))
    return rec


def read_verdict(oracle: GuardedOracle, required: Sequence[str], exit_code: int | None = 0,
                 decided_by: str = "all") -> GuardedVerdict:
    """Read what a guarded run left in its private directory: the JUnit verdict under the task's
    rule (``decided_by``), checked against the guard's own account, and the flags (the guard's
    and those this check finds).

    A record that is cut short or does not authenticate is a flag only when the exit code
    allows a pass (:func:`exit_passes`): a timeout or a crash already fails, and is no sign of
    forging.
    """
    private = oracle.private
    report = read_private(private / pytest_guard.REPORT_NAME, REPORT_CAP)
    junit = junit_verdict(report, required, decided_by)
    rec = _parse_record(read_private(private / pytest_guard.RECORD_NAME, RECORD_CAP), oracle.key)
    passing_exit = exit_passes(exit_code, decided_by)
    flags = [f for f in rec.flags if passing_exit or f[0] not in ("record_tampered", "session_cut_short")]
    end = rec.end
    if end is not None:
        recorded = end.get("report_sha256")
        actual = sha256_bytes(report) if report is not None else None
        if recorded != actual:
            flags.append(("report_write", "the JUnit report differs from the one pytest wrote"))
        tests = end.get("tests")
        if isinstance(tests, dict) and junit["ok"]:
            seen = _guard_verdict({str(k): str(v) for k, v in tests.items()}, required, decided_by)
            if not seen["ok"] or (seen["ran"], seen["failed"]) != (junit["ran"], junit["failed"]):
                flags.append(("report_mismatch",
                              f"JUnit: {junit['ran']} ran, {junit['failed']} failed; the harness saw "
                              f"{seen['ran']} ran, {seen['failed']} failed"))
    names = sorted({name for name, _ in flags})
    details = list(dict.fromkeys(f"{name}: {detail}" for name, detail in flags))[:_DETAILS_KEPT]
    return GuardedVerdict(junit=junit, flags=names, details=details, ignored=rec.ignored[:_DETAILS_KEPT])


def crashed(exit_code: int | None, timed_out: bool, junit: dict[str, Any]) -> bool:
    """Whether a guarded run ended as a crash does: without its report, or with a status pytest
    gives only when it breaks (3, an internal error; 4, a usage error), a signal, or the guard's
    own (:data:`sealbench.pytest_guard.SETUP_FAILED`). A timeout is not a crash."""
    return not timed_out and (junit.get("why") == NO_REPORT or exit_code not in _SESSION_STATUSES)


def prepare_self_check(root: Path) -> tuple[GuardedOracle, Path]:
    """The harness's own test run: a grading directory under ``root`` (which must not exist)
    holding one test that passes, and its guarded oracle; (the oracle, its directory).

    Run in the environment of a run that crashed, it tells whose the crash was: nothing of the
    candidate's is in it, so where it crashes too, the harness or the environment is broken."""
    workdir = root / "work"
    workdir.mkdir(parents=True)
    # Not rewritten: pytest before 6.2.4 cannot rewrite a test module on Python 3.11, and a pack
    # for it runs with --assert=plain, which this run does not know of.
    (workdir / SELF_CHECK_TEST).write_text('"""PYTEST_DONT_REWRITE"""\n\n\ndef test_the_harness_runs():\n    pass\n',
                                           encoding="utf-8")
    return prepare(root / "private", [HARNESS_PYTEST, "-q", SELF_CHECK_TEST], [SELF_CHECK_TEST]), workdir


def self_check_healthy(oracle: GuardedOracle, exit_code: int | None, timed_out: bool) -> bool:
    """Whether the harness's own test run passed its one test, with no flag."""
    if timed_out or exit_code != 0:
        return False
    verdict = read_verdict(oracle, [_SELF_CHECK_NAME], exit_code)
    return bool(verdict.junit.get("ok")) and not verdict.flags


def crash_summary(output: str) -> str | None:
    """The line of a crashed test run's output that says what broke: the guard's own crash
    line, else the last exception line (pytest's INTERNALERROR lines too), else None."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(pytest_guard.CRASH_MARK):
            return line[:600]
    for line in reversed(lines):
        found = _EXCEPTION_LINE.match(line.strip())
        if found:
            where = _guard_frame(lines)
            return found.group(1)[:400] + (f" ({where})" if where else "")
    return None


def _guard_frame(lines: list[str]) -> str | None:
    """Where in the guard a traceback ends, when it passes through the guard."""
    marks = [line.strip() for line in lines if "pytest_guard.py\", line " in line]
    if not marks:
        return None
    found = re.search(r'line (\d+), in (\S+)', marks[-1])
    return f"in the guard, pytest_guard.py line {found.group(1)}, in {found.group(2)}" if found else "in the guard"


def output_tail(output: str, lines: int = 6, chars: int = 500) -> str:
    """The last ``lines`` non-blank lines of ``output``, joined on one line, at most ``chars``."""
    kept = [" ".join(line.split()) for line in output.splitlines() if line.strip()][-lines:]
    return " | ".join(kept)[-chars:]


def process_end(exit_code: int | None, signal: int | None) -> str:
    """How a test process ended, in words."""
    if exit_code is None:
        return f"was killed by signal {signal}" if signal else "was killed"
    if exit_code == pytest_guard.SETUP_FAILED:
        return f"exited {exit_code} (the guard failed before pytest ran)"
    if 128 < exit_code < 128 + 65:  # how a shell, or the sandbox's init, reports a signal
        return f"exited {exit_code} (killed by signal {exit_code - 128})"
    return f"exited {exit_code}" + {3: " (pytest's internal error)", 4: " (pytest's usage error)"}.get(exit_code, "")
