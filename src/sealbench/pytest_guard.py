"""The pytest a repository-level oracle runs: started, configured and watched by the harness.

The runner starts this file inside the sandbox, in the grading copy, as::

    python -P -s pytest_guard.py <private dir> -- <the pack's pytest arguments>

It imports nothing of sealbench (the sandbox holds the interpreter, its site-packages and
this one file). The order of what it does is the defence:

1. ``-P`` keeps the working directory off ``sys.path`` while the interpreter starts and
   ``-s`` keeps the user site off it: the workspace's ``pytest.py``, ``_pytest/``,
   ``sitecustomize.py``, ``usercustomize.py``, ``*.pth`` and entry points are never seen.
2. Before pytest is imported (from the interpreter's site-packages): the harness's
   configuration is read from the private directory, the record is opened and its start
   written, an audit hook is installed, and ``os._exit``, ``sys.exit`` and ``atexit.register``
   are wrapped.
3. pytest runs with the harness's own ini file (``-c``: the workspace's pytest.ini, tox.ini,
   setup.cfg and pyproject.toml are not read), plugin autoload off (the runner sets
   ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``), no cache, the JUnit report written into the private
   directory, and this module's plugin. A ``conftest.py`` is imported only when it is the
   pack's own, unchanged by the patch; any other is ignored and the record says so.
4. At the end: processes the tests left are killed, the end checks run, the end record is
   written, and the process leaves with ``os._exit`` and pytest's status, so no exit hook
   or finaliser of the code under test runs after the verdict.

The code under test runs in this process (the tests import it), so it can reach everything
here: forging from inside is not prevented. The known means are detected and written to the
record the moment they are seen; the end record repeats every flag, the report's digest and
each test's outcome as the harness saw it, so that the runner can tell a report or record
changed behind the harness's back (:data:`FLAGS` names them all; the runner adds the ones it
finds itself). A forged record line is at worst a flag the candidate raised against itself.

"Code under test" here is every frame whose file is not the pack's own (the hidden tests and
the workspace files the patch left unchanged) and not the interpreter's or pytest's: files
the patch added or changed, files written at run time, and code compiled from strings.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.machinery
import json
import os
import shlex
import signal
import sys
import sysconfig
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any, Final, NoReturn

GUARD_VERSION: Final = 1
CONFIG_NAME: Final = "sealbench-guard.json"
INI_NAME: Final = "sealbench-pytest.ini"
REPORT_NAME: Final = "sealbench-junit.xml"
RECORD_NAME: Final = "sealbench-record.jsonl"

FLAGS: Final[dict[str, str]] = {
    "audit_hook": "an audit hook added by code under test",
    "disguised_code": "code compiled by code under test under a file name of the interpreter, pytest or the pack",
    "exit_hook": "os._exit, sys.exit or atexit.register called by code under test",
    "frame_walk": "frames reached by code under test (sys._getframe, sys._current_frames, "
                  "a traceback's or generator's frame)",
    "gc_walk": "objects reached through the garbage collector by code under test "
               "(gc.get_objects, gc.get_referrers, gc.get_referents)",
    "guard_error": "the harness's watch itself failed (a bug, or something broke it)",
    "module_shadowed": "a module of the standard library, pytest or an installed package loaded from "
                       "code under test (a workspace unittest.py, numpy/ ...)",
    "outcome_from_code_under_test": "a skip, xfail or exit raised from code under test",
    "record_tampered": "the harness's record is missing, out of order, or has lines the harness did not write",
    "report_mismatch": "the JUnit report disagrees with the outcomes the harness saw",
    "report_write": "a write to the harness's private files other than pytest's own JUnit writer, "
                    "or the report changed after pytest wrote it",
    "runner_hook": "a pytest plugin or hook registered from code under test",
    "runner_patched": "an object of pytest, pluggy, the harness or the standard modules they use "
                      "changed during the session, or a function's code replaced",
    "session_cut_short": "the test process ended before the harness's end of session "
                         "(os._exit, a signal or a crash)",
    "tests_not_run": "the session ended with status 0 while collected tests had not run",
    "trace_function": "a trace or profile function set (sys.settrace, sys.setprofile, threading.settrace)",
}
"""Every forging flag, with what raises it. The runner raises record_tampered,
report_mismatch, session_cut_short and report_write (a changed report) itself."""

_MAX_RECORD_LINES: Final = 500
_DETAIL_CHARS: Final = 300
_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# Modules whose objects a forger patches to change a verdict; compared at the end of the session.
_WATCHED_PREFIXES: Final = ("pytest", "_pytest", "pluggy", "iniconfig", "xml.etree")
_WATCHED_MODULES: Final = ("builtins", "os", "posix", "io", "atexit", "gc", "json", "unittest.case")
# Set by pytest itself while a test runs and put back after it.
_MUTABLE_BY_PYTEST: Final = frozenset({
    ("_pytest.assertion.util", "_reprcompare"),
    ("_pytest.assertion.util", "_assertion_pass"),
    ("_pytest.assertion.util", "_config"),
})
_FRAME_ATTRS: Final = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_PATH_EVENTS: Final = {
    "os.remove": (0,), "os.rmdir": (0,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,),
    "os.utime": (0,), "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (1,), "os.mkdir": (0,),
    "shutil.rmtree": (0,), "shutil.move": (0, 1), "shutil.copyfile": (1,),
}

LIBRARY, OWNED, CANDIDATE = "library", "owned", "candidate"


def _norm(path: str) -> str:
    return os.path.normpath(path)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Guard:
    """The watch over one pytest session: classification of code, the record, the checks."""

    def __init__(self, private: str, config: dict[str, Any], record_fd: int) -> None:
        self.private = _norm(private)
        self.rootdir = _norm(os.getcwd())
        self.report = os.path.join(self.private, REPORT_NAME)
        self.record_path = os.path.join(self.private, RECORD_NAME)
        self.record_fd = record_fd
        self.pid = os.getpid()
        self.owned = {_norm(os.path.join(self.rootdir, rel)) for rel in config.get("owned", [])}
        self.protected_names = frozenset({REPORT_NAME, RECORD_NAME, CONFIG_NAME, INI_NAME})
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                 *(p for p in sysconfig.get_paths().values() if p),
                 *(p for p in sys.path if p and os.path.isabs(p))}
        self.library_roots = tuple(sorted({_norm(r) for r in roots} | {os.path.realpath(r) for r in roots}))
        # The interpreter's own path, before pytest puts any test directory on it.
        self.library_path = [p for p in sys.path if p and os.path.isabs(p)]
        self.guard_file = _norm(os.path.abspath(__file__))
        self.flags: list[tuple[str, str]] = []
        self._seen: set[tuple[str, str]] = set()
        self._lines = 0
        self._bytes = 0
        self._busy = threading.local()
        self._lock = threading.RLock()
        self.report_window = False
        self.report_sha256: str | None = None
        self.junitxml_file: str | None = None
        self.ignored: list[str] = []
        self.collected: list[str] = []
        self.outcomes: dict[str, str] = {}
        self.junit_names: dict[str, str] = {}
        self.armed = False
        self.snapshot: dict[str, tuple[types.ModuleType, dict[str, Any]]] = {}
        self.processes_killed = 0
        self.helpers: frozenset[str] = frozenset()
        self.threading_file = ""
        self.real_exit: Callable[[int], NoReturn] = os._exit

    # --- the record ------------------------------------------------------------------

    def write(self, entry: dict[str, Any]) -> None:
        """Append one JSON line to the record, at once (no buffer an exit could lose)."""
        data = (json.dumps(entry, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")
        with self._lock:
            self._bytes += os.write(self.record_fd, data)
            self._lines += 1

    def flag(self, name: str, detail: str) -> None:
        """Raise ``name`` once per distinct detail; written before anything else happens."""
        assert name in FLAGS, name
        detail = detail[:_DETAIL_CHARS]
        key = (name, detail)
        with self._lock:
            if key in self._seen or os.getpid() != self.pid:
                return
            self._seen.add(key)
            self.flags.append(key)
            if self._lines < _MAX_RECORD_LINES:
                self.write({"kind": "flag", "flag": name, "detail": detail})

    # --- who is calling ----------------------------------------------------------------

    def classify_file(self, filename: str, module_globals: dict[str, Any] | None = None) -> str:
        """library, owned (the pack's files the patch left alone) or candidate."""
        if not filename.startswith("/"):
            if filename.startswith("<frozen "):
                return LIBRARY
            file = module_globals.get("__file__") if module_globals is not None else None
            if not isinstance(file, str) or not file.startswith("/"):
                return CANDIDATE
            filename = file
        path = _norm(filename)
        if path in self.owned:
            return OWNED
        if _under(path, self.rootdir):
            return CANDIDATE
        if path == self.guard_file or any(_under(path, root) for root in self.library_roots):
            return LIBRARY
        return CANDIDATE

    def classify(self, frame: types.FrameType | None) -> str:
        if frame is None:
            return LIBRARY
        return self.classify_file(frame.f_code.co_filename, frame.f_globals)

    def effective(self, frame: types.FrameType | None, helpers: Callable[[types.FrameType], bool]) -> types.FrameType | None:
        """The first frame from ``frame`` outwards that is not one of the ``helpers``."""
        while frame is not None and helpers(frame):
            frame = frame.f_back
        return frame

    def is_frame_helper(self, frame: types.FrameType) -> bool:
        """Standard helpers that hand out frames: the caller behind them is the one asking."""
        name = frame.f_code.co_filename
        return name in self.helpers or "/_pytest/_code/" in name

    @staticmethod
    def where(frame: types.FrameType | None) -> str:
        if frame is None:
            return "an unknown caller"
        return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"

    def caller_is_candidate(self, frame: types.FrameType | None) -> bool:
        return self.classify(frame) == CANDIDATE

    # --- the audit hook ------------------------------------------------------------------

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """Called for every audit event of the process; must be fast and never recurse."""
        if getattr(self._busy, "on", False):
            return
        handler = _HANDLERS.get(event)
        if handler is None:
            return
        self._busy.on = True
        try:
            # The frame that made the audited call (C functions have no frame of their own).
            handler(self, event, args, sys._getframe(1))
        except PermissionError:
            raise
        except Exception as e:  # a bug here must be seen, never crash the tests silently
            self.flag("guard_error", f"{event}: {type(e).__name__}: {e}")
        finally:
            self._busy.on = False

    def on_frames(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        if event == "object.__getattr__" and (len(args) < 2 or args[1] not in _FRAME_ATTRS):
            return
        frame = self.effective(caller, self.is_frame_helper)
        if self.caller_is_candidate(frame):
            what = f"{args[1]}" if event == "object.__getattr__" else event
            self.flag("frame_walk", f"{what} from {self.where(frame)}")

    def on_gc(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        frame = caller
        if self.caller_is_candidate(frame):
            self.flag("gc_walk", f"{event} from {self.where(frame)}")

    def on_trace(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        frame = self.effective(caller, lambda f: f.f_code.co_filename == self.threading_file)
        if self.caller_is_candidate(frame):
            self.flag("trace_function", f"{event} from {self.where(frame)}")

    def on_audit_hook(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        frame = caller
        if self.caller_is_candidate(frame):
            self.flag("audit_hook", f"sys.addaudithook from {self.where(frame)}")

    def on_setattr(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        if len(args) < 2 or args[1] != "__code__":
            return
        frame = caller
        if self.caller_is_candidate(frame):
            target = getattr(args[0], "__qualname__", repr(args[0]))
            self.flag("runner_patched", f"__code__ of {target} replaced from {self.where(frame)}")

    def on_compile(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        filename = args[1] if len(args) > 1 else None
        if isinstance(filename, bytes):
            filename = filename.decode("utf-8", "surrogateescape")
        if not isinstance(filename, str) or not filename.startswith("/"):
            return
        if self.classify_file(filename) == CANDIDATE:
            return
        frame = caller
        if self.caller_is_candidate(frame):
            self.flag("disguised_code", f"{event} of {filename} from {self.where(frame)}")

    def on_open(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        path, flags = args[0], args[2] if len(args) > 2 else 0
        if not isinstance(flags, int) or not flags & _WRITE_FLAGS:
            return
        if (self.report_window and isinstance(path, str) and _norm(path) == self.report
                and caller is not None and _norm(caller.f_code.co_filename) == self.junitxml_file):
            return
        self.protect(event, path, caller)

    def on_path(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        for index in _PATH_EVENTS[event]:
            if index < len(args):
                target = args[index]
                if event == "os.mkdir" and isinstance(target, str) and _norm(target) == self.private:
                    continue  # pytest's os.makedirs(exist_ok=True) of the report's directory
                self.protect(event, target, caller)

    def protect(self, event: str, target: Any, caller: types.FrameType | None) -> None:
        """Refuse (and flag) any change to the harness's private files."""
        path = self.resolve(target)
        if path is None:
            return
        if os.path.basename(path) in self.protected_names or _under(path, self.private) or _under(
                os.path.realpath(path), self.private):
            self.flag("report_write", f"{event} {path} from {self.where(caller)}")
            raise PermissionError(f"sealbench: {path} belongs to the test harness")
        if os.getpid() == self.pid and _under(path, self.rootdir):
            # A pack file rewritten at run time is no longer the pack's.
            self.owned.discard(path)

    @staticmethod
    def resolve(target: Any) -> str | None:
        if isinstance(target, int):
            try:
                return os.readlink(f"/proc/self/fd/{target}")
            except OSError:
                return None
        try:
            raw = os.fspath(target)
        except TypeError:
            return None
        text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
        return _norm(os.path.join(os.getcwd(), text))

    # --- wrappers of exits ----------------------------------------------------------------

    def wrap_exits(self) -> None:
        real_exit = os._exit
        real_sys_exit = sys.exit
        real_register = atexit.register
        guard = self

        def _exit(status: int) -> NoReturn:
            frame = sys._getframe(1)
            if os.getpid() == guard.pid and guard.caller_is_candidate(frame):
                guard.flag("exit_hook", f"os._exit({status!r}) from {guard.where(frame)}")
            real_exit(status)

        def exit(status: str | int | None = None) -> NoReturn:
            frame = sys._getframe(1)
            if guard.caller_is_candidate(frame):
                guard.flag("exit_hook", f"sys.exit({status!r}) from {guard.where(frame)}")
            real_sys_exit(status)

        def register(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Callable[..., Any]:
            frame = sys._getframe(1)
            if guard.caller_is_candidate(frame):
                guard.flag("exit_hook", f"atexit.register from {guard.where(frame)}")
            return real_register(func, *args, **kwargs)

        os._exit = _exit
        sys.exit = exit
        atexit.register = register
        self.real_exit = real_exit

    # --- outcome exceptions raised by code under test ---------------------------------------

    def watch_outcomes(self, outcome_classes: list[type[BaseException]]) -> None:
        """Flag skips, xfails and exits constructed outside the pack's tests and pytest."""
        for cls in outcome_classes:
            cls.__init__ = self._watched_init(cls.__init__)  # type: ignore[method-assign]

    def _watched_init(self, original: Callable[..., None]) -> Callable[..., None]:
        guard = self

        def init(exc: BaseException, *args: Any, **kwargs: Any) -> None:
            original(exc, *args, **kwargs)
            frame = guard.effective(sys._getframe(1), _is_outcome_helper)
            kind = guard.classify(frame)
            # pytest's own machinery (skip marks, unittest's skips) raises them too; any
            # other library raising one was handed the choice by code under test.
            if kind == CANDIDATE or (kind == LIBRARY and frame is not None
                                     and "/_pytest/" not in frame.f_code.co_filename):
                guard.flag("outcome_from_code_under_test",
                           f"{type(exc).__name__} raised from {guard.where(frame)}")

        return init

    # --- conftest files --------------------------------------------------------------------

    def filter_conftests(self, manager: Any) -> None:
        """Import a conftest.py only when it is the pack's own; record any other as ignored."""
        original = manager._importconftest
        guard = self

        def importconftest(conftestpath: Any, *args: Any, **kwargs: Any) -> types.ModuleType:
            path = _norm(str(conftestpath))
            if path not in guard.owned:
                rel = os.path.relpath(path, guard.rootdir)
                if rel not in guard.ignored:
                    guard.ignored.append(rel)
                    guard.write({"kind": "ignored", "path": rel})
                return types.ModuleType("sealbench_ignored_conftest")
            module: types.ModuleType = original(conftestpath, *args, **kwargs)
            return module

        manager._importconftest = importconftest

    # --- snapshot of what a forger patches ---------------------------------------------------

    def take_snapshot(self) -> None:
        for name in list(sys.modules):
            module = sys.modules.get(name)
            if module is None or not self._watched(name):
                continue
            self.snapshot[name] = (module, self._state(name, module))

    @staticmethod
    def _watched(name: str) -> bool:
        return name in _WATCHED_MODULES or any(name == p or name.startswith(p + ".") for p in _WATCHED_PREFIXES)

    @staticmethod
    def _state(name: str, module: types.ModuleType) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for attr, value in list(vars(module).items()):
            if (name, attr) in _MUTABLE_BY_PYTEST:
                continue
            state[attr] = value
            if isinstance(value, types.FunctionType):
                state[f"{attr}.__code__"] = value.__code__
                state[f"{attr}.__defaults__"] = value.__defaults__
            elif isinstance(value, type) and getattr(value, "__module__", None) == name:
                for key, member in list(vars(value).items()):
                    state[f"{attr}.{key}"] = member
                    if isinstance(member, types.FunctionType):
                        state[f"{attr}.{key}.__code__"] = member.__code__
        return state

    def compare_snapshot(self) -> list[str]:
        changed: list[str] = []
        for name, (module, before) in self.snapshot.items():
            if sys.modules.get(name) is not module:
                changed.append(f"sys.modules[{name!r}]")
                continue
            after = self._state(name, module)
            for key in before.keys() | after.keys():
                if key not in before and key.rsplit(".", 1)[-1].startswith("_pytest"):
                    continue  # pytest's own markers on its classes (warnings shown once)
                if before.get(key, _MISSING) is not after.get(key, _MISSING):
                    changed.append(f"{name}.{key}")
        return sorted(changed)

    # --- the end ---------------------------------------------------------------------------

    def kill_leftovers(self) -> None:
        """Kill what the tests left running, so nothing writes after the end record."""
        killed: set[int] = set()
        for _ in range(50):
            others = _other_processes(self.pid)
            if not others:
                break
            for pid in others:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
            with contextlib.suppress(ChildProcessError, OSError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            time.sleep(0.01)
        self.processes_killed = len(killed)

    def end_checks(self, status: int) -> None:
        if sys.gettrace() is not None or sys.getprofile() is not None:
            self.flag("trace_function", "a trace or profile function was left set")
        if threading.gettrace() is not None or threading.getprofile() is not None:
            self.flag("trace_function", "threading.settrace or threading.setprofile was left set")
        shadowed = self.shadowed_modules()
        if shadowed:
            self.flag("module_shadowed", "loaded from code under test: " + ", ".join(shadowed[:12]))
        changed = self.compare_snapshot()
        if changed:
            self.flag("runner_patched", "changed: " + ", ".join(changed[:12]))
        if status == 0:
            missing = [n for n in self.collected if n not in self.outcomes]
            if missing:
                self.flag("tests_not_run", f"{len(missing)} collected test(s) never ran, e.g. {missing[0]}")
        digest = _file_sha256(self.report)
        if self.report_sha256 is not None and digest != self.report_sha256:
            self.flag("report_write", "the JUnit report changed after pytest wrote it")

    def shadowed_modules(self) -> list[str]:
        """Top-level modules loaded from code under test whose name the interpreter already has."""
        out: list[str] = []
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if "." in name or not isinstance(file, str) or self.classify_file(file) != CANDIDATE:
                continue
            if name in sys.stdlib_module_names or name in ("pytest", "_pytest", "pluggy", "iniconfig") or (
                    importlib.machinery.PathFinder.find_spec(name, self.library_path) is not None):
                out.append(name)
        return sorted(out)

    @contextlib.contextmanager
    def own_work(self) -> Iterator[None]:
        """The guard's own file work: not watched (it would refuse itself)."""
        before = getattr(self._busy, "on", False)
        self._busy.on = True
        try:
            yield
        finally:
            self._busy.on = before

    def finish(self, status: int) -> None:
        """Kill leftovers, run the end checks and write the end record."""
        self.kill_leftovers()
        self.end_checks(status)
        with self.own_work():
            try:
                self._check_record_file()
            except OSError as e:
                self.flag("guard_error", f"the record could not be repaired: {e}")
        self.write({
            "kind": "end",
            "status": status,
            "offset": self._bytes,
            "flags": [[name, detail] for name, detail in self.flags],
            "report_sha256": _file_sha256(self.report),
            "tests": {self.junit_names.get(n, n): o for n, o in self.outcomes.items()},
            "ignored": self.ignored,
            "processes_killed": self.processes_killed,
        })

    def _check_record_file(self) -> None:
        """The record at its path must still be the file this process has been writing."""
        try:
            same = os.path.samestat(os.fstat(self.record_fd), os.stat(self.record_path, follow_symlinks=False))
            size_ok = os.fstat(self.record_fd).st_size == self._bytes
        except OSError:
            same, size_ok = False, False
        if same and size_ok:
            return
        self.flag("record_tampered", "the record was replaced, truncated or written by someone else")
        if not same:
            with contextlib.suppress(OSError):
                os.unlink(self.record_path)
            fd = os.open(self.record_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.close(self.record_fd)
            self.record_fd = fd
            self._bytes = 0
            self.write({"kind": "start", "guard_version": GUARD_VERSION, "restarted": True})
        for name, detail in self.flags:
            self.write({"kind": "flag", "flag": name, "detail": detail})


_MISSING: Final = object()
def _is_outcome_helper(frame: types.FrameType) -> bool:
    """pytest.skip() and friends, TestCase.skipTest: the one who called them decided."""
    name = frame.f_code.co_filename
    return name.endswith("/_pytest/outcomes.py") or (
        name.endswith("/unittest/case.py") and frame.f_code.co_name == "skipTest")


def _file_sha256(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    digest = hashlib.sha256()
    try:
        while chunk := os.read(fd, 1 << 16):
            digest.update(chunk)
    finally:
        os.close(fd)
    return "sha256:" + digest.hexdigest()


def _processes() -> Iterator[tuple[int, int]]:
    """(pid, parent pid) of every live process /proc shows (zombies are already dead)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and fields[0] not in (b"Z", b"X"):
            yield int(entry), int(fields[1])


def _other_processes(me: int) -> list[int]:
    """Processes the tests left: in the sandbox's own pid namespace (our parent is its pid 1)
    every one but pid 1 and us; outside one, only our descendants."""
    table = dict(_processes())
    if os.getppid() == 1:
        return [pid for pid in table if pid not in (1, me)]
    children: dict[int, list[int]] = {}
    for pid, parent in table.items():
        children.setdefault(parent, []).append(pid)
    out: list[int] = []
    todo = list(children.get(me, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


_HANDLERS: Final[dict[str, Callable[[Guard, str, tuple[Any, ...], types.FrameType | None], None]]] = {
    "sys._getframe": Guard.on_frames,
    "sys._current_frames": Guard.on_frames,
    "object.__getattr__": Guard.on_frames,
    "gc.get_objects": Guard.on_gc,
    "gc.get_referrers": Guard.on_gc,
    "gc.get_referents": Guard.on_gc,
    "sys.settrace": Guard.on_trace,
    "sys.setprofile": Guard.on_trace,
    "sys.addaudithook": Guard.on_audit_hook,
    "object.__setattr__": Guard.on_setattr,
    "compile": Guard.on_compile,
    "code.__new__": Guard.on_compile,
    "open": Guard.on_open,
    **{name: Guard.on_path for name in _PATH_EVENTS},
}


def make_plugin(guard: Guard) -> object:
    """The harness's pytest plugin: conftest filter, snapshot, outcomes and the report window."""
    import pytest
    from _pytest import junitxml

    guard.junitxml_file = _norm(os.path.abspath(junitxml.__file__))

    class SealbenchGuard:
        @pytest.hookimpl(tryfirst=True)
        def pytest_load_initial_conftests(self, early_config: pytest.Config) -> None:
            # The last moment before a conftest, and so any code under test, can run.
            guard.filter_conftests(early_config.pluginmanager)
            guard.take_snapshot()
            guard.armed = True

        def pytest_plugin_registered(self, plugin: object, plugin_name: str | None) -> None:
            # A plugin whose code is code under test (a -p name found in the workspace, a
            # test module's pytest_plugins), or one registered while code under test runs.
            source = plugin if isinstance(plugin, types.ModuleType) else sys.modules.get(type(plugin).__module__)
            file = getattr(source, "__file__", None)
            if isinstance(file, str) and guard.classify_file(file) == CANDIDATE:
                guard.flag("runner_hook", f"plugin {plugin_name} from {file}")
                return
            stack: types.FrameType | None = sys._getframe(1)
            while guard.armed and stack is not None:
                if guard.caller_is_candidate(stack):
                    guard.flag("runner_hook", f"plugin {plugin_name} registered from {guard.where(stack)}")
                    return
                stack = stack.f_back

        def pytest_collection_finish(self, session: pytest.Session) -> None:
            guard.collected = [item.nodeid for item in session.items]

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
            nodeid = report.nodeid
            if nodeid not in guard.junit_names:
                names = junitxml.mangle_test_address(nodeid)
                guard.junit_names[nodeid] = ".".join(names[:-1]) + "::" + names[-1]
            before = guard.outcomes.get(nodeid)
            if report.failed:
                guard.outcomes[nodeid] = "failed"
            elif report.skipped and before != "failed":
                guard.outcomes[nodeid] = "skipped"
            elif report.when == "call" and before is None:
                guard.outcomes[nodeid] = "passed"

        @pytest.hookimpl(tryfirst=True)
        def pytest_collectreport(self, report: pytest.CollectReport) -> None:
            if report.failed:
                guard.outcomes[f"collect:{report.nodeid}"] = "failed"

        def pytest_runtest_logfinish(self, nodeid: str) -> None:
            if sys.gettrace() is not None or sys.getprofile() is not None:
                guard.flag("trace_function", "a trace or profile function was set during a test")

        @pytest.hookimpl(wrapper=True)
        def pytest_sessionfinish(self) -> Iterator[None]:
            guard.report_window = True
            try:
                yield
            finally:
                guard.report_window = False
                guard.report_sha256 = _file_sha256(guard.report)

    return SealbenchGuard()


def rooted_pythonpath(args: list[str], rootdir: str) -> list[str]:
    """The pack's arguments with ``-o pythonpath=...`` made relative to the workspace root.

    pytest reads a ``paths`` option relative to its ini file, which is the harness's and
    lives outside the grading copy; a pack means its own root.
    """
    out: list[str] = []
    override = False
    for arg in args:
        for prefix in ("-o", "--override-ini="):
            if not override and arg.startswith(prefix + "pythonpath="):
                value = arg[len(prefix) + len("pythonpath="):]
                arg = prefix + "pythonpath=" + _rooted(value, rootdir)
        if override and arg.startswith("pythonpath="):
            arg = "pythonpath=" + _rooted(arg[len("pythonpath="):], rootdir)
        override = arg in ("-o", "--override-ini")
        out.append(arg)
    return out


def _rooted(value: str, rootdir: str) -> str:
    return " ".join(shlex.quote(os.path.join(rootdir, p)) for p in shlex.split(value))


def _outcome_classes() -> list[type[BaseException]]:
    import unittest

    from _pytest import outcomes

    return [outcomes.Skipped, outcomes.XFailed, outcomes.Exit, unittest.SkipTest]


def main(argv: list[str]) -> NoReturn:
    """``pytest_guard.py PRIVATE -- PYTEST_ARGS...``: run pytest under the watch and exit."""
    if len(argv) < 3 or argv[2] != "--":
        print("usage: pytest_guard.py PRIVATE_DIR -- PYTEST_ARGS...", file=sys.stderr)
        os._exit(4)
    private, pack_args = argv[1], argv[3:]
    with open(os.path.join(private, CONFIG_NAME), encoding="utf-8") as handle:
        config = json.load(handle)
    record_fd = os.open(os.path.join(private, RECORD_NAME),
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    guard = Guard(private, config, record_fd)
    guard.write({"kind": "start", "guard_version": GUARD_VERSION})
    # The harness owns pytest's configuration: nothing from the environment either.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        os.environ.pop(name, None)
    import inspect
    import traceback

    guard.helpers = frozenset(_norm(m.__file__ or "") for m in (inspect, traceback))
    guard.threading_file = _norm(threading.__file__ or "")
    guard.wrap_exits()
    sys.addaudithook(guard.audit)
    import pytest

    guard.watch_outcomes(_outcome_classes())
    plugin = make_plugin(guard)
    args = [*rooted_pythonpath(pack_args, guard.rootdir), "-c", os.path.join(private, INI_NAME), "--rootdir", guard.rootdir,
            "--confcutdir", guard.rootdir, "-p", "no:cacheprovider", f"--junitxml={guard.report}"]
    try:
        status = int(pytest.main(args, plugins=[plugin]))
    except BaseException as e:  # pytest itself let something through: never a pass
        guard.flag("guard_error", f"pytest.main raised {type(e).__name__}: {e}")
        status = 3
    guard.finish(status)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    guard.real_exit(status)


if __name__ == "__main__":
    main(sys.argv)
