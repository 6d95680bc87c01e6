"""The pytest a repository-level oracle runs: started, configured and watched by the harness.

The runner starts this file inside the sandbox, in the grading copy, as::

    python -P -s pytest_guard.py <private dir> -- <the pack's pytest arguments>

It imports nothing of sealbench (the sandbox holds the interpreter, its site-packages and
this one file). The order of what it does is the defence:

1. ``-P`` keeps the working directory off ``sys.path`` while the interpreter starts and
   ``-s`` keeps the user site off it: the workspace's ``pytest.py``, ``_pytest/``,
   ``sitecustomize.py``, ``usercustomize.py``, ``*.pth`` and entry points are never seen.
2. Before pytest is imported (from the interpreter's site-packages): the harness's
   configuration is read from the private directory and deleted (it holds the key that
   authenticates the record), the record is opened, the watch is installed (an audit hook,
   and wrappers of ``os._exit``, ``atexit.register``, ``threading.settrace``
   and the skip/xfail/exit exceptions).
3. pytest runs with the harness's own ini file (``-c``: the workspace's pytest.ini, tox.ini,
   setup.cfg and pyproject.toml are not read), plugin autoload off, no cache, the JUnit
   report written into the private directory, and this module's plugin. A ``conftest.py``
   is imported only when it is the pack's own, unchanged by the patch; any other is ignored
   and the record says so.
4. At the end: processes the tests left are killed, the end checks run, the end record is
   written and authenticated, and the process leaves with ``os._exit`` and pytest's status,
   so no exit hook or finaliser of the code under test runs after the verdict.

The code under test runs in this process (the tests import it), so it can reach almost
everything here: forging from inside is not prevented, the known means are flagged
(:data:`FLAGS`). The watch is built so that silencing it is itself one of them: its state
is held only by the audit hook and the closure that ends the session (neither reachable
from any module, class or object the tests can name); the plugin and the wrappers talk to it
with ``sys.audit("sealbench...")`` messages it accepts only from their own code; every flag
is written to the record the moment it is raised; the end record carries every flag, the
report's digest and each test's outcome as the harness saw it; and a last line
authenticates the whole record with a key only the runner and the watch hold. Changing the
harness's own objects (this module's globals, the watch's class, the wrappers, the plugin)
is found at the end and flagged. A record line the tests forge is at worst a flag raised
against themselves; a record cut short or edited no longer authenticates.

"Code under test" here is every frame whose file is not the pack's own (the hidden tests and
the workspace files the patch left unchanged) and not the interpreter's or pytest's: files
the patch added or changed, files written at run time, code compiled from strings, and
bytecode unmarshalled from bytes that are not a library's (whatever file name it carries).
"""

from __future__ import annotations

import _imp
import atexit
import contextlib
import hashlib
import hmac
import importlib.machinery
import importlib.util
import io
import json
import marshal
import os
import shlex
import signal
import sys
import sysconfig
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any, Final, NamedTuple, NoReturn

GUARD_VERSION: Final = 1
CONFIG_NAME: Final = "sealbench-guard.json"
INI_NAME: Final = "sealbench-pytest.ini"
REPORT_NAME: Final = "sealbench-junit.xml"
RECORD_NAME: Final = "sealbench-record.jsonl"
SETUP_FAILED: Final = 71
"""The guard's status when it failed before pytest ran (pytest's own are 0 to 5)."""
CRASH_MARK: Final = "sealbench-pytest: the guard failed before any test ran"

FLAGS: Final[dict[str, str]] = {
    "audit_hook": "an audit hook added by code under test",
    "disguised_code": "code compiled by code under test under a file name of the interpreter, pytest or the pack, "
                      "or bytecode not compiled from the file it names (a .pyc the code under test wrote, "
                      "bytes it unmarshalled)",
    "exit_hook": "os._exit or atexit.register called by code under test (sys.exit only raises SystemExit, which "
                 "pytest records as an error of the test that raised it; one that ends the process before the "
                 "end of the session is session_cut_short)",
    "frame_walk": "frames reached by code under test (sys._getframe, sys._current_frames, "
                  "a traceback's or generator's frame)",
    "gc_walk": "objects reached through the garbage collector by code under test "
               "(gc.get_objects, gc.get_referrers, gc.get_referents)",
    "guard_error": "the harness's watch itself failed (a bug, or something broke it)",
    "memory_access": "raw memory or native code reached by code under test (ctypes, /proc/self/mem)",
    "module_shadowed": "a module of the standard library, pytest or an installed package loaded from "
                       "code under test (a workspace unittest.py, numpy/ ...)",
    "outcome_from_code_under_test": "a skip, xfail or exit raised from code under test",
    "record_tampered": "the harness's record is missing, cut, edited, or not authenticated",
    "report_mismatch": "the JUnit report disagrees with the outcomes the harness saw",
    "report_write": "a write to the harness's private files other than pytest's own JUnit writer, "
                    "or the report changed after pytest wrote it",
    "runner_hook": "a pytest plugin or hook registered from code under test",
    "runner_patched": "an object of pytest, pluggy, the harness or the standard modules they use "
                      "changed during the session, or a function's code replaced",
    "session_cut_short": "the test process exited 0 before the harness's end of session",
    "tests_not_run": "the session ended with status 0 while collected tests had not run",
    "trace_function": "a trace or profile function set (sys.settrace, sys.setprofile, threading.settrace)",
}
"""Every forging flag, with what raises it. The runner raises record_tampered,
report_mismatch, session_cut_short and report_write (a changed report) itself too."""

_MAX_RECORD_LINES: Final = 500
_DETAIL_CHARS: Final = 300
_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_MESSAGE: Final = "sealbench."
# Modules whose objects a forger patches to change a verdict; compared at the end of the session.
_WATCHED_PREFIXES: Final = ("pytest", "_pytest", "pluggy", "iniconfig", "xml.etree")
_WATCHED_MODULES: Final = ("builtins", "os", "posix", "io", "atexit", "gc", "json", "hmac", "hashlib",
                           "threading", "unittest.case")
# Set by pytest itself while a test runs and put back after it, or by the threading machinery.
_MUTABLE: Final = frozenset({
    ("_pytest.assertion.util", "_reprcompare"),
    ("_pytest.assertion.util", "_assertion_pass"),
    ("_pytest.assertion.util", "_config"),
    ("threading", "_counter"),
    ("threading", "_main_thread"),
    ("threading", "_dangling"),
    ("threading", "_shutdown_locks_lock"),
})
_FRAME_ATTRS: Final = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_PATH_EVENTS: Final = {
    "os.remove": (0,), "os.rmdir": (0,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,),
    "os.utime": (0,), "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (1,), "os.mkdir": (0,),
    "shutil.rmtree": (0,), "shutil.move": (0, 1), "shutil.copyfile": (1,),
}
_MEMORY_EVENTS: Final = frozenset({"ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata", "ctypes.string_at",
                                   "ctypes.wstring_at", "ctypes.PyObj_FromPtr", "ctypes.addressof",
                                   "ctypes.dlopen"})

LIBRARY, OWNED, CANDIDATE = "library", "owned", "candidate"


def record_mac(key: bytes, record_prefix_sha256: bytes) -> str:
    """The record's last line: HMAC-SHA256 under the run's key of the sha256 of every byte
    before it. The runner recomputes it from the file; the tests never hold the key."""
    return hmac.new(key, record_prefix_sha256, hashlib.sha256).hexdigest()


def _norm(path: str) -> str:
    return os.path.normpath(path)


def _stat_key(path: str) -> tuple[int, int, int, int] | None:
    """What changes when a file is written, replaced or touched (ctime cannot be set back)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


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


def _is_outcome_helper(frame: types.FrameType) -> bool:
    """pytest.skip() and friends, TestCase.skipTest: the one who called them decided."""
    name = frame.f_code.co_filename
    return name.endswith("/_pytest/outcomes.py") or (
        name.endswith("/unittest/case.py") and frame.f_code.co_name == "skipTest")


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


def _cells(fn: object) -> tuple[object, ...]:
    """What a function's closure holds (an empty cell as a marker)."""
    out = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:
            out.append(_MISSING)
    return tuple(out)


def _members(obj: object) -> dict[str, object]:
    """What a forger would replace in a module or class: its attributes, the code and
    defaults of its functions, the members of the classes it defines."""
    out: dict[str, object] = {}
    name = getattr(obj, "__name__", "")
    for attr, value in list(vars(obj).items()):
        out[attr] = value
        if isinstance(value, types.FunctionType):
            out[f"{attr}.__code__"] = value.__code__
            out[f"{attr}.__defaults__"] = value.__defaults__
            out[f"{attr}.__closure__"] = _cells(value)
        elif isinstance(obj, types.ModuleType) and isinstance(value, type) and value.__module__ == name:
            for key, member in list(vars(value).items()):
                out[f"{attr}.{key}"] = member
                if isinstance(member, types.FunctionType):
                    out[f"{attr}.{key}.__code__"] = member.__code__
    return out


def _changed(before: dict[str, object], after: dict[str, object], module: str) -> list[str]:
    out = []
    for key in before.keys() | after.keys():
        if (module, key) in _MUTABLE:
            continue
        if key not in before and key.rsplit(".", 1)[-1].startswith("_pytest"):
            continue  # pytest's own markers on its classes (warnings shown once)
        if key not in before and (key == "__warningregistry__" or (
                module == "_pytest.junitxml" and key.startswith("Junit.") and isinstance(after[key], type))):
            # The warnings module's registry of a module that warned; pytest 5's py.xml makes
            # each report tag's class on first use (a forged one is a report_mismatch).
            continue
        if not _same(before.get(key, _MISSING), after.get(key, _MISSING)):
            out.append(f"{module}.{key}")
    return out


def _same(a: object, b: object) -> bool:
    """The same object; for a closure's contents (a tuple made afresh), the same objects."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
    return a is b


_MISSING: Final = object()


def _trusted_codes(*functions: object) -> set[types.CodeType]:
    """The code objects of ``functions`` and of every function nested in them."""
    out: set[types.CodeType] = set()
    todo = [getattr(getattr(f, "__func__", f), "__code__", None) for f in functions]
    while todo:
        code = todo.pop()
        if isinstance(code, types.CodeType) and code not in out:
            out.add(code)
            todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return out


class _Watch:
    """Classification of code and the handling of audit events and messages.

    Its instance is held only by the audit hook and the closure that ends the session.
    ``flag`` and ``write`` are the record's, given by :func:`_install`.
    """

    def __init__(self, private: str, config: dict[str, Any], flag: Callable[[str, str], None],
                 write: Callable[[dict[str, Any]], None]) -> None:
        self.private = _norm(private)
        self.rootdir = _norm(os.getcwd())
        self.report = os.path.join(self.private, REPORT_NAME)
        self.pid = os.getpid()
        self.flag = flag
        self.write = write
        self.owned = {_norm(os.path.join(self.rootdir, rel)) for rel in config.get("owned", [])}
        self.candidate_names: set[str] = set()  # names code under test compiled code under
        self.candidate_files: set[str] = set()  # files whose name bytecode from untrusted bytes took
        self.bytecode_cache: dict[tuple[str, object], frozenset[str]] = {}
        # What each pack file was before any code under test ran: one that changes is no longer the pack's.
        self.owned_stat = {path: _stat_key(path) for path in self.owned}
        self.protected_names = frozenset({REPORT_NAME, RECORD_NAME, CONFIG_NAME, INI_NAME})
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                 *(p for p in sysconfig.get_paths().values() if p),
                 *(p for p in sys.path if p and os.path.isabs(p))}
        self.library_roots = tuple(sorted({_norm(r) for r in roots} | {os.path.realpath(r) for r in roots}))
        # The interpreter's own path, before pytest puts any test directory on it.
        self.library_path = [p for p in sys.path if p and os.path.isabs(p)]
        self.guard_file = _norm(os.path.abspath(__file__))
        import inspect
        import traceback

        self.helpers = frozenset(_norm(m.__file__ or "") for m in (inspect, traceback))
        self.threading_file = _norm(threading.__file__ or "")
        import ast

        self.ast_file = _norm(ast.__file__ or "")
        self.types_file = _norm(types.__file__ or "")
        import importlib._bootstrap_external as bootstrap

        self.compile_bytecode = getattr(bootstrap, "_compile_bytecode").__code__  # noqa: B009 (private)
        self.ctypes_dir = _norm(os.path.join(os.path.dirname(os.__file__), "ctypes"))
        self.trusted: set[types.CodeType] = set()  # the wrappers' code, then the plugin's
        self.plugin: object | None = None
        self.manager: Any = None
        self.conftest_filter: object = None
        self.junitxml_code: types.CodeType | None = None
        self.report_window = False
        self.report_writes = 0
        self.report_sha256: str | None = None
        self.ignored: list[str] = []
        self.collected: list[str] = []
        self.items: list[tuple[str, Any, object]] = []
        self.outcomes: dict[str, str] = {}
        self.junit_names: dict[str, str] = {}
        self.plugins_at_start: set[int] = set()
        self.snapshot: dict[str, tuple[types.ModuleType, dict[str, object]]] = {}
        self.processes_killed = 0
        self.trace_seen = False

    # --- who is calling -----------------------------------------------------------------

    def classify_file(self, filename: str, module_globals: dict[str, Any] | None = None) -> str:
        """library, owned (the pack's files the patch left alone) or candidate."""
        if not filename.startswith("/"):
            if filename in self.candidate_names:
                return CANDIDATE
            if filename.startswith("<frozen "):
                return LIBRARY  # unmarshalled by the interpreter, never compiled here
            # Code compiled from a string by a library (a dataclass's __init__) runs in the
            # globals of the module it serves: only a module's own namespace names its file.
            file = module_globals.get("__file__") if module_globals is not None else None
            name = module_globals.get("__name__") if module_globals is not None else None
            module = sys.modules.get(name) if isinstance(name, str) else None
            if (not isinstance(file, str) or not file.startswith("/") or module is None
                    or getattr(module, "__dict__", None) is not module_globals):
                return CANDIDATE
            filename = file
        path = _norm(filename)
        if path in self.candidate_files:
            return CANDIDATE
        if path in self.owned:
            if self.owned_stat.get(path) == _stat_key(path):
                return OWNED
            # Rewritten since the session started (by a subprocess, or through a link the watch
            # did not see resolve here): no longer the pack's.
            self.owned.discard(path)
        if _under(path, self.rootdir):
            return CANDIDATE
        if path == self.guard_file or any(_under(path, root) for root in self.library_roots):
            return LIBRARY
        return CANDIDATE

    def classify(self, frame: types.FrameType | None) -> str:
        if frame is None:
            return LIBRARY
        return self.classify_file(frame.f_code.co_filename, frame.f_globals)

    def candidate(self, frame: types.FrameType | None) -> bool:
        return self.classify(frame) == CANDIDATE

    def candidate_waiting(self) -> bool:
        """Whether a frame of code under test is on any thread's stack."""
        for top in sys._current_frames().values():
            frame: types.FrameType | None = top
            while frame is not None:
                if self.candidate(frame):
                    return True
                frame = frame.f_back
        return False

    @staticmethod
    def effective(frame: types.FrameType | None, helper: Callable[[types.FrameType], bool]) -> types.FrameType | None:
        """The first frame from ``frame`` outwards that is not a ``helper``."""
        while frame is not None and helper(frame):
            frame = frame.f_back
        return frame

    @staticmethod
    def where(frame: types.FrameType | None) -> str:
        if frame is None:
            return "an unknown caller"
        return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"

    # --- audit events -------------------------------------------------------------------

    def handle(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        if event.startswith(_MESSAGE):
            self.on_message(event, args, caller)
        elif event in ("sys._getframe", "sys._current_frames", "object.__getattr__"):
            self.on_frames(event, args, caller)
        elif event.startswith("gc.get_"):
            if self.candidate(caller):
                self.flag("gc_walk", f"{event} from {self.where(caller)}")
        elif event in ("sys.settrace", "sys.setprofile", "sys.monitoring.register_callback"):
            self.on_trace(event, caller)
        elif event == "sys.addaudithook":
            if self.candidate(caller):
                self.flag("audit_hook", f"sys.addaudithook from {self.where(caller)}")
        elif event == "object.__setattr__":
            if len(args) > 1 and args[1] == "__code__" and self.candidate(caller):
                target = getattr(args[0], "__qualname__", repr(args[0]))
                self.flag("runner_patched", f"__code__ of {target} replaced from {self.where(caller)}")
        elif event in ("compile", "code.__new__"):
            self.on_compile(event, args, caller)
        elif event == "marshal.loads":
            self.on_unmarshal(args, caller)
        elif event == "marshal.load":
            # The harness's wrapper reports what it loaded; a caller around it is hiding it.
            if caller is not None and caller.f_code not in self.trusted and self.candidate(caller):
                self.flag("disguised_code", f"marshal.load around the harness's wrapper from {self.where(caller)}")
        elif event == "open":
            self.on_open(event, args, caller)
        elif event in _PATH_EVENTS:
            self.on_path(event, args, caller)
        elif event in _MEMORY_EVENTS:
            frame = self.effective(caller, lambda f: _under(_norm(f.f_code.co_filename), self.ctypes_dir))
            if self.candidate(frame):
                self.flag("memory_access", f"{event} from {self.where(frame)}")

    def on_frames(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        frame = self.effective(caller, lambda f: f.f_code.co_filename in self.helpers
                               or "/_pytest/_code/" in f.f_code.co_filename)
        if self.candidate(frame):
            what = args[1] if event == "object.__getattr__" else event
            self.flag("frame_walk", f"{what} from {self.where(frame)}")

    def on_trace(self, event: str, caller: types.FrameType | None) -> None:
        # threading.settrace() installs its function in each new thread from threading.py.
        frame = self.effective(caller, lambda f: f.f_code.co_filename == self.threading_file)
        if self.candidate(frame):
            self.flag("trace_function", f"{event} from {self.where(frame)}")
        for hook in (threading.gettrace(), threading.getprofile()):
            code = getattr(hook, "__code__", None)
            if hook is not None and (code is None or self.classify_file(code.co_filename) == CANDIDATE):
                self.flag("trace_function", f"threading's trace or profile function {hook!r}")

    def on_compile(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        filename = args[1] if len(args) > 1 else None
        if isinstance(filename, bytes):
            filename = filename.decode("utf-8", "surrogateescape")
        if not isinstance(filename, str):
            return
        if not filename.startswith("/"):
            # Code under test names its own code as it likes ("<frozen os>", "<string>"): from now
            # on code of that name is code under test, whatever globals it runs in. A library frame
            # compiling while code under test waits on it (a thread pool) may be doing its bidding.
            if filename not in self.candidate_names and (self.candidate(caller) or self.candidate_waiting()):
                self.candidate_names.add(filename)
            elif filename.startswith("<frozen ") and filename not in self.candidate_names:
                # Frozen modules are unmarshalled by the interpreter, never compiled: a library
                # frame compiling under such a name was handed the call (functools.singledispatch).
                self.candidate_names.add(filename)
                self.flag("disguised_code", f"{event} of {filename} from {self.where(caller)}")
            return
        if self.classify_file(filename) == CANDIDATE:
            return
        # A library frame may only be calling what code under test handed it (a thread pool,
        # functools.singledispatch): code named after a file must be compiled from that file.
        if self.candidate(caller) or not (self.compiled_from_file(event, args, filename, caller)
                                          or self.made_a_coroutine(event, args, filename, caller)):
            self.flag("disguised_code", f"{event} of {filename} from {self.where(caller)}")

    def made_a_coroutine(self, event: str, args: tuple[Any, ...], filename: str,
                         caller: types.FrameType | None) -> bool:
        """Whether this is ``types.coroutine`` marking a generator function's code as an iterable
        coroutine (asyncio does it to its own functions at import): the same bytecode under the
        same name, only the flag 0x100 added. The code it copies already exists under that name,
        so it was compiled from the file or flagged when it was made."""
        if event != "code.__new__" or caller is None or len(args) < 9:
            return False
        where = caller.f_code
        if where.co_name != "coroutine" or _norm(where.co_filename) != self.types_file:
            return False
        co = caller.f_locals.get("co")
        return (isinstance(co, types.CodeType) and co.co_filename == filename and co.co_code == args[0]
                and args[8] == co.co_flags | 0x100)

    def compiled_from_file(self, event: str, args: tuple[Any, ...], filename: str,
                           caller: types.FrameType | None) -> bool:
        """Whether a library's compile under the name of a file of a library or the pack compiles
        that file: its bytes (importlib), a tree pytest's assertion rewriting parsed from it, or
        only a tree (``ast.parse``). A code object built anew (``types.CodeType``,
        ``code.replace``) under such a name never is."""
        if event != "compile" or caller is None:
            return False
        where = caller.f_code
        if where.co_name == "parse" and _norm(where.co_filename) == self.ast_file:
            return True
        source = args[0]
        if isinstance(source, str):
            source = source.encode("utf-8", "surrogatepass")
        if isinstance(source, (bytes, bytearray, memoryview)):
            return "sha256:" + hashlib.sha256(source).hexdigest() == _file_sha256(os.path.realpath(filename))
        return where.co_filename.endswith("/_pytest/assertion/rewrite.py") and self.classify(caller) == LIBRARY

    def library_file(self, path: object) -> str | None:
        """``path`` resolved, when it is a library's file (the harness's mirror links to them),
        which the sandbox binds read-only."""
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
        if not isinstance(path, str) or not path.startswith("/"):
            return None
        real = os.path.realpath(path)
        return real if self.classify_file(real) == LIBRARY else None

    def trusted_bytecode(self, path: object, data: object) -> bool:
        """Whether ``data`` is the bytecode of a library's ``.pyc`` (after its header) or of a
        ``.pyc`` in a library's zip archive: compiled by its installer from the file it names.
        The bytes are compared, not just the name: the caller's locals are the code under test's
        to choose (``_compile_bytecode(forged, bytecode_path=...)``)."""
        real = self.library_file(path)
        if real is None or not isinstance(data, (bytes, bytearray, memoryview)):
            return False
        digest = hashlib.sha256(data).hexdigest()
        return digest in self.library_bytecode(real)

    def library_bytecode(self, real: str) -> frozenset[str]:
        """The sha256 of each piece of bytecode a library's file holds: a ``.pyc`` without its
        header, or each ``.pyc`` of a zip archive (cached per file and state)."""
        key = (real, _stat_key(real))
        found = self.bytecode_cache.get(key)
        if found is None:
            digests: set[str] = set()
            with contextlib.suppress(Exception), open(real, "rb") as f:  # unreadable: not trusted
                head = f.read(4)
                if head == importlib.util.MAGIC_NUMBER:
                    digests.add(hashlib.sha256(f.read()[12:]).hexdigest())
                elif head == b"PK\x03\x04":
                    import zipfile

                    with zipfile.ZipFile(real) as archive:
                        for info in archive.infolist():
                            if info.filename.endswith(".pyc") and info.file_size < (64 << 20):
                                digests.add(hashlib.sha256(archive.read(info)[16:]).hexdigest())
            found = self.bytecode_cache[key] = frozenset(digests)
        return found

    def read_from_library(self, file: object) -> bool:
        """Whether ``marshal.load`` read an open file of a library: a plain file object whose
        descriptor is that file (its ``name`` alone is anyone's to set)."""
        if type(file) not in (io.BufferedReader, io.FileIO):
            return False
        real = self.library_file(getattr(file, "name", None))
        try:
            st, at = os.fstat(file.fileno()), os.stat(real) if real else None  # type: ignore[attr-defined]
        except (OSError, ValueError):
            return False
        return at is not None and (st.st_dev, st.st_ino) == (at.st_dev, at.st_ino)

    def on_unmarshal(self, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        """Bytecode importlib (or zipimport) reads from a library's file is the library's; any
        other is code under test, whatever file name it carries."""
        source: object = None
        if caller is not None and self.classify(caller) == LIBRARY:
            local = caller.f_locals
            origin = local.get("bytecode_path") or getattr(local.get("self"), "archive", None)
            if self.trusted_bytecode(origin, args[0]):
                return
            source = local.get("source_path")  # importlib names the code after its source
        try:
            loaded = marshal.loads(args[0])
        except Exception:
            return
        self.on_loaded(loaded, caller, source)

    def on_loaded(self, loaded: object, caller: types.FrameType | None, source: object = None) -> None:
        """Make every file name the code objects in ``loaded`` carry a name of code under test."""
        names: set[str] = {source} if isinstance(source, str) else set()
        todo, seen = [loaded], 0
        while todo and seen < 100_000:
            item = todo.pop()
            seen += 1
            if isinstance(item, types.CodeType):
                names.add(item.co_filename)
                todo.extend(item.co_consts)
            elif isinstance(item, (tuple, list, set, frozenset)):
                todo.extend(item)
            elif isinstance(item, dict):
                todo.extend(item.values())
        for name in sorted(names):
            path = _norm(name) if name.startswith("/") else name
            if self.classify_file(path) != CANDIDATE:
                self.flag("disguised_code", f"bytecode not compiled from {path} runs under its name "
                                            f"(loaded from {self.where(caller)})")
            if name.startswith("/"):
                self.candidate_files.add(path)
                self.owned.discard(path)
            else:
                self.candidate_names.add(path)

    def on_open(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        path = args[0]
        if isinstance(path, str) and (path.startswith("/proc/") and path.endswith("/mem")):
            self.flag("memory_access", f"open {path} from {self.where(caller)}")
            raise PermissionError(f"sealbench: {path} is not for the tests")
        flags = args[2] if len(args) > 2 else 0
        if not isinstance(flags, int) or not flags & _WRITE_FLAGS:
            return
        if (self.report_window and isinstance(path, str) and _norm(path) == self.report and caller is not None
                and caller.f_code is self.junitxml_code and self.report_writes == 0):
            self.report_writes += 1
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
        if os.getpid() == self.pid:
            # A pack file rewritten at run time is no longer the pack's: by the name written
            # to, and by the file a link there leads to.
            for name in (path, _norm(os.path.realpath(path))):
                if _under(name, self.rootdir):
                    self.owned.discard(name)

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

    # --- messages from the plugin and the wrappers ----------------------------------------

    def on_message(self, event: str, args: tuple[Any, ...], caller: types.FrameType | None) -> None:
        kind = event[len(_MESSAGE):]
        if kind == "trust" and self.plugin is None:
            # Sent once by the harness, before any code under test can run.
            self.trusted |= _trusted_codes(*(getattr(type(args[0]), n) for n in vars(type(args[0]))
                                             if n.startswith("pytest_")))
            self.plugin = args[0]
            return
        if caller is None or caller.f_code not in self.trusted:
            self.flag("runner_hook", f"a {event} message from {self.where(caller)}")
            return
        handler = _MESSAGE_HANDLERS.get(kind)
        if handler is not None:
            handler(self, args)

    def on_bytecode(self, args: tuple[Any, ...]) -> None:
        if not self.read_from_library(args[2]):
            self.on_loaded(args[0], args[1])

    def on_rename(self, args: tuple[Any, ...]) -> None:
        # _imp._fix_co_filename renames code objects without an audit event: only importlib's
        # own _compile_bytecode may, naming bytecode it just unmarshalled after its source.
        code, path, frame = args
        if (getattr(code, "co_filename", path) != path and isinstance(path, str)
                and self.classify_file(_norm(path) if path.startswith("/") else path) != CANDIDATE
                and (frame is None or frame.f_code is not self.compile_bytecode)):
            self.flag("disguised_code", f"code renamed {path} from {self.where(frame)}")

    def on_hook_set(self, flag: str, args: tuple[Any, ...]) -> None:
        """An exit hook or a trace function set (``args``: what, and the frame that set it)."""
        frame = args[1]
        if os.getpid() == self.pid and self.candidate(frame):
            self.flag(flag, f"{args[0]} from {self.where(frame)}")

    def on_outcome(self, args: tuple[Any, ...]) -> None:
        frame = self.effective(args[1], _is_outcome_helper)
        kind_of = self.classify(frame)
        # pytest's own machinery (skip marks, unittest's skips) raises them too; any
        # other library raising one was handed the choice by code under test.
        if kind_of == CANDIDATE or (kind_of == LIBRARY and frame is not None
                                    and "/_pytest/" not in frame.f_code.co_filename):
            self.flag("outcome_from_code_under_test", f"{args[0]} raised from {self.where(frame)}")

    def on_conftest(self, args: tuple[Any, ...]) -> None:
        path, box = _norm(str(args[0])), args[1]
        allowed = path in self.owned
        if not allowed:
            rel = os.path.relpath(path, self.rootdir)
            if rel not in self.ignored:
                self.ignored.append(rel)
                self.write({"kind": "ignored", "path": rel})
        box.append(allowed)

    def on_collected(self, args: tuple[Any, ...]) -> None:
        self.collected = [str(n) for n in args[0]]
        self.items = [(str(item.nodeid), item, getattr(item, "obj", None)) for item in args[1]]

    def on_window(self, args: tuple[Any, ...]) -> None:
        self.report_window = bool(args[0])
        if not self.report_window:
            self.report_sha256 = _file_sha256(self.report)

    def arm(self, manager: Any, junitxml: types.ModuleType) -> None:
        """The last moment before a conftest, and so any code under test, can run."""
        self.manager = manager
        self.conftest_filter = vars(manager).get("_importconftest")
        self.junitxml_code = junitxml.LogXML.pytest_sessionfinish.__code__
        self.plugins_at_start = {id(p) for p in manager.get_plugins()}
        for name in list(sys.modules):
            module = sys.modules.get(name)
            if module is not None and (name in _WATCHED_MODULES or any(
                    name == p or name.startswith(p + ".") for p in _WATCHED_PREFIXES)):
                self.snapshot[name] = (module, _members(module))

    def on_registered(self, plugin: object, name: str | None, stack: types.FrameType | None) -> None:
        # A plugin whose code is code under test (a -p name found in the workspace, a test
        # module's pytest_plugins), or one registered while code under test runs.
        source = plugin if isinstance(plugin, types.ModuleType) else sys.modules.get(type(plugin).__module__)
        file = getattr(source, "__file__", None)
        if isinstance(file, str) and self.classify_file(file) == CANDIDATE:
            self.flag("runner_hook", f"plugin {name} from {file}")
            return
        while self.manager is not None and stack is not None:
            if self.candidate(stack):
                self.flag("runner_hook", f"plugin {name} registered from {self.where(stack)}")
                return
            stack = stack.f_back

    def on_test(self, nodeid: str, junit_name: str, outcome: str) -> None:
        self.junit_names.setdefault(nodeid, junit_name)
        before = self.outcomes.get(nodeid)
        if outcome == "failed":
            self.outcomes[nodeid] = "failed"
        elif outcome == "skipped" and before != "failed":
            self.outcomes[nodeid] = "skipped"
        elif outcome == "passed" and before is None:
            self.outcomes[nodeid] = "passed"
        if not self.trace_seen and (sys.gettrace() is not None or sys.getprofile() is not None):
            self.trace_seen = True
            self.flag("trace_function", "a trace or profile function was set during a test")

    # --- the end ----------------------------------------------------------------------------

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
        changed: list[str] = []
        for name, (module, before) in self.snapshot.items():
            if sys.modules.get(name) is not module:
                changed.append(f"sys.modules[{name!r}]")
            else:
                changed.extend(_changed(before, _members(module), name))
        if changed:
            self.flag("runner_patched", "changed: " + ", ".join(sorted(changed)[:12]))
        replaced = self.replaced_pack_code()
        if replaced:
            self.flag("runner_patched", "the pack's code replaced by code under test: " + ", ".join(replaced[:12]))
        if self.manager is not None:
            for plugin in self.manager.get_plugins():
                if id(plugin) not in self.plugins_at_start and not isinstance(plugin, types.ModuleType):
                    # A class registered as a plugin (pytest's own LegacyTmpdirPlugin) is judged by
                    # the module that defines it, an instance by its class's.
                    cls = plugin if isinstance(plugin, type) else type(plugin)
                    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
                    if not isinstance(file, str) or self.classify_file(file) == CANDIDATE:
                        self.flag("runner_hook", f"plugin {cls.__qualname__} registered during the session")
        if status == 0:
            missing = [n for n in self.collected if n not in self.outcomes]
            if missing:
                self.flag("tests_not_run", f"{len(missing)} collected test(s) never ran, e.g. {missing[0]}")
        if self.report_sha256 is not None and _file_sha256(self.report) != self.report_sha256:
            self.flag("report_write", "the JUnit report changed after pytest wrote it")

    def replaced_pack_code(self) -> list[str]:
        """Test functions, and functions of the pack's own modules, that are no longer the
        pack's code: swapped for code under test's (through an item, a module or a class)."""
        out: list[str] = []

        def foreign(fn: object) -> bool:
            # Code from a file of the code under test; code compiled from a string (a
            # NamedTuple's __new__, a dataclass's __init__) is the library's making.
            code = getattr(fn, "__code__", None)
            return (isinstance(code, types.CodeType) and code.co_filename.startswith("/")
                    and self.classify_file(code.co_filename) == CANDIDATE)

        for nodeid, item, obj in self.items:
            # A unittest item hands out a new bound method each time: compare what it binds.
            now = getattr(item, "obj", None)
            now, obj = getattr(now, "__func__", now), getattr(obj, "__func__", obj)
            if now is not obj or foreign(now):
                out.append(nodeid)
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if not isinstance(file, str) or self.classify_file(file) != OWNED:
                continue
            for attr, value in list(vars(module).items()):
                if getattr(value, "__module__", None) != name:
                    continue
                members = vars(value).items() if isinstance(value, type) else [("", value)]
                for member, fn in members:
                    if foreign(getattr(fn, "__func__", fn)):
                        out.append(f"{name}.{attr}" + (f".{member}" if member else ""))
        return sorted(set(out))

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

    def end_record(self, status: int) -> dict[str, Any]:
        return {
            "kind": "end",
            "status": status,
            "report_sha256": _file_sha256(self.report),
            "tests": {self.junit_names.get(n, n): o for n, o in self.outcomes.items()},
            "ignored": self.ignored,
            "processes_killed": self.processes_killed,
        }


# The messages a trusted caller sends, each with its handler. Read-only: the tests run in this
# process, and a handler swapped in a mutable table would escape the end's integrity check
# (which compares this module's globals and the watch's class by identity).
_MESSAGE_HANDLERS: Final[types.MappingProxyType[str, Callable[[_Watch, tuple[Any, ...]], None]]] = types.MappingProxyType({
    "bytecode": _Watch.on_bytecode,
    "rename": _Watch.on_rename,
    "exit": lambda watch, args: watch.on_hook_set("exit_hook", args),
    "trace": lambda watch, args: watch.on_hook_set("trace_function", args),
    "outcome": _Watch.on_outcome,
    "armed": lambda watch, args: watch.arm(args[0], args[1]),
    "conftest": _Watch.on_conftest,
    "registered": lambda watch, args: watch.on_registered(args[0], args[1], args[2]),
    "collected": _Watch.on_collected,
    "test": lambda watch, args: watch.on_test(str(args[0]), str(args[1]), str(args[2])),
    "window": _Watch.on_window,
})


class _Ending(NamedTuple):
    """What the harness's main keeps of the watch: the three ways to talk to it directly."""

    trust: Callable[[object], None]
    error: Callable[[str], None]
    finish: Callable[[int], NoReturn]


def _install(private: str, config: dict[str, Any], fd: int, key: bytes) -> _Ending:
    """Install the watch; returns how to trust the plugin, report an error and end the session.

    Everything the end depends on is captured here, in closures nothing else refers to:
    replacing a module attribute, a global of this file or a method of the watch later
    changes what the watch does during the session (and is flagged at the end), never how
    the end is written.
    """
    write_fd, getpid, real_exit, dumps, sha256 = os.write, os.getpid, os._exit, json.dumps, hashlib.sha256
    mac, lock, missing, cells, changed_, members, same = (record_mac, threading.RLock(), _MISSING, _cells,
                                                           _changed, _members, _same)
    getattr_ = getattr
    running = sha256()
    flags: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    lines = [0]
    main_pid = getpid()

    def write(entry: dict[str, Any]) -> None:
        """Append one line to the record at once; a record that cannot be written ends the run."""
        data = (dumps(entry, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")
        with lock:
            try:
                if write_fd(fd, data) != len(data):
                    raise OSError("short write")
            except OSError:
                real_exit(70)
            running.update(data)
            lines[0] += 1

    def flag(name: str, detail: str) -> None:
        """Raise ``name`` once per distinct detail, written before anything else happens."""
        key_ = (name, detail[:_DETAIL_CHARS])
        with lock:
            if key_ in seen or getpid() != main_pid:
                return
            seen.add(key_)
            flags.append(key_)
            if lines[0] < _MAX_RECORD_LINES:
                write({"kind": "flag", "flag": key_[0], "detail": key_[1]})

    write({"kind": "start", "guard_version": GUARD_VERSION})
    watch = _Watch(private, config, flag, write)
    handle = _Watch.handle
    busy = threading.local()
    getframe, audit_message = sys._getframe, sys.audit

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if getattr(busy, "on", False):
            return
        # The two events every import and every introspection raise: most are nothing to see.
        if event == "object.__getattr__" and (len(args) < 2 or args[1] not in _FRAME_ATTRS):
            return
        if event == "open" and not ((len(args) > 2 and isinstance(args[2], int) and args[2] & _WRITE_FLAGS)
                                    or (isinstance(args[0], str) and args[0].endswith("/mem"))):
            return
        busy.on = True
        try:
            # The frame that made the audited call (C functions have no frame of their own).
            handle(watch, event, args, getframe(1))
        except PermissionError:
            raise
        except Exception as e:  # a bug here must be seen, never crash the tests silently
            flag("guard_error", f"{event}: {type(e).__name__}: {e}")
        finally:
            busy.on = False

    installed = _install_wrappers(audit_message)
    watch.trusted |= _trusted_codes(*(fn for _, _, fn in installed.values()))
    module_globals = globals()
    baseline = {"guard": (module_globals, dict(module_globals)), "_Watch": (vars(_Watch), dict(vars(_Watch)))}
    closures = {name: _cells(fn) for name, (_, _, fn) in installed.items()}
    sys.addaudithook(audit)

    def integrity() -> list[str]:
        """What changed in the harness's own objects since the watch was installed."""
        out = []
        for name, (live, before) in baseline.items():
            for key_ in before.keys() | live.keys():
                if before.get(key_, missing) is not live.get(key_, missing):
                    out.append(f"{name}.{key_}")
        for name, (owner, attr, fn) in installed.items():
            if getattr_(owner, attr, None) is not fn:
                out.append(f"{name} unwrapped")
            elif not same(cells(fn), closures[name]):
                out.append(f"{name}'s closure")
        plugin, manager = watch.plugin, watch.manager
        if manager is not None and plugin is not None and not manager.is_registered(plugin):
            out.append("the harness's plugin unregistered")
        if manager is not None and vars(manager).get("_importconftest") is not watch.conftest_filter:
            out.append("the harness's conftest filter")
        if plugin is not None and changed_(plugin_members, members(type(plugin)), "plugin"):
            out.append("the harness's plugin changed")
        if sys.audit is not audit_message:
            out.append("sys.audit")
        return out

    plugin_members: dict[str, object] = {}

    def finish(status: int) -> NoReturn:
        busy.on = True  # the watch's own file work is not watched (it would refuse itself)
        try:
            changed = integrity()
            if changed:
                flag("runner_patched", "the harness's own objects changed: " + ", ".join(changed[:12]))
            watch.kill_leftovers()
            watch.end_checks(status)
            entry = watch.end_record(status)
        except Exception as e:
            flag("guard_error", f"end of session: {type(e).__name__}: {e}")
            entry = {"kind": "end", "status": status}
        entry["flags"] = [[name, detail] for name, detail in flags]
        write(entry)
        with lock:
            line = (dumps({"kind": "mac", "mac": mac(key, running.digest())}, sort_keys=True) + "\n").encode("ascii")
            write_fd(fd, line)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        real_exit(status)

    def trust(plugin: object) -> None:
        audit_message(_MESSAGE + "trust", plugin)
        plugin_members.update(members(type(plugin)))

    def error(detail: str) -> None:
        flag("guard_error", detail)

    return _Ending(trust=trust, error=error, finish=finish)


def _install_wrappers(message: Callable[..., None]) -> dict[str, tuple[object, str, object]]:
    """Wrap the exits and the outcome exceptions so that they report to the watch; what was
    installed where, for the integrity check at the end."""
    real_exit, real_register = os._exit, atexit.register
    real_settrace, real_setprofile = threading.settrace, threading.setprofile
    real_load = marshal.load
    real_fix, real_create = getattr(_imp, "_fix_co_filename"), _imp.create_builtin  # noqa: B009 (private)
    getframe = sys._getframe

    def _exit(status: int) -> NoReturn:
        message(_MESSAGE + "exit", f"os._exit({status!r})", getframe(1))
        real_exit(status)

    def register(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        message(_MESSAGE + "exit", "atexit.register", getframe(1))
        return real_register(func, *args, **kwargs)

    def settrace(func: Any) -> None:
        message(_MESSAGE + "trace", "threading.settrace", getframe(1))
        real_settrace(func)

    def setprofile(func: Any) -> None:
        message(_MESSAGE + "trace", "threading.setprofile", getframe(1))
        real_setprofile(func)

    def load(file: Any, /, *args: Any, **kwargs: Any) -> Any:
        loaded = real_load(file, *args, **kwargs)
        message(_MESSAGE + "bytecode", loaded, getframe(1), file)
        return loaded

    def fix_co_filename(code: types.CodeType, path: str, /) -> None:
        message(_MESSAGE + "rename", code, path, getframe(1))
        real_fix(code, path)

    def create_builtin(spec: Any, /) -> types.ModuleType:
        # A fresh _imp (the one sys.modules held removed, imported again) has fresh functions.
        module = real_create(spec)
        if getattr(module, "__name__", None) == "_imp":
            module._fix_co_filename, module.create_builtin = fix_co_filename, create_builtin  # type: ignore[attr-defined]
        return module

    installed: dict[str, tuple[object, str, object]] = {}
    for owner, attr, fn in ((os, "_exit", _exit), (atexit, "register", register),
                            (threading, "settrace", settrace), (threading, "setprofile", setprofile),
                            (marshal, "load", load), (_imp, "_fix_co_filename", fix_co_filename),
                            (_imp, "create_builtin", create_builtin)):
        setattr(owner, attr, fn)
        installed[f"{getattr(owner, '__name__', owner)}.{attr}"] = (owner, attr, fn)
    import unittest

    from _pytest import outcomes

    for cls in (outcomes.Skipped, outcomes.XFailed, outcomes.Exit, unittest.SkipTest):
        init = _watched_init(cls.__init__, message, getframe)
        cls.__init__ = init  # type: ignore[method-assign]
        installed[f"{cls.__qualname__}.__init__"] = (cls, "__init__", init)
    return installed


def _watched_init(original: Callable[..., None], message: Callable[..., None],
                  getframe: Callable[[int], types.FrameType]) -> Callable[..., None]:
    def init(exc: BaseException, *args: Any, **kwargs: Any) -> None:
        original(exc, *args, **kwargs)
        message(_MESSAGE + "outcome", type(exc).__name__, getframe(1))

    return init


def make_plugin(pythonpath: list[str] | None = None) -> object:
    """The harness's pytest plugin: it reports to the watch with messages, and holds nothing
    of the watch's.

    It runs on every pytest from 5.4 on (pluggy 0.13 on): it declares only hook arguments
    every version has, and wraps with a new-style wrapper where pluggy has them.
    ``pythonpath``: directories to put on ``sys.path`` as pytest 7's ``pythonpath`` option
    does, for a pytest without that option (:func:`pythonpath_for_old_pytest`)."""
    import pytest
    from _pytest import junitxml

    message, getframe = sys.audit, sys._getframe
    added = list(pythonpath or ())

    class SealbenchGuard:
        @pytest.hookimpl(tryfirst=True)
        def pytest_load_initial_conftests(self, early_config: pytest.Config) -> None:
            for path in reversed(added):  # where, and when, pytest 7's python_path plugin puts them
                sys.path.insert(0, path)
            manager = early_config.pluginmanager
            original = manager._importconftest

            def importconftest(conftestpath: Any, *args: Any, **kwargs: Any) -> types.ModuleType:
                box: list[bool] = []
                message(_MESSAGE + "conftest", str(conftestpath), box)
                if not box or not box[0]:
                    return types.ModuleType("sealbench_ignored_conftest")
                module: types.ModuleType = original(conftestpath, *args, **kwargs)
                return module

            manager._importconftest = importconftest  # type: ignore[method-assign]
            message(_MESSAGE + "armed", manager, junitxml)

        # plugin_name came with pytest 8.1; manager is in every version.
        def pytest_plugin_registered(self, plugin: object, manager: Any) -> None:
            message(_MESSAGE + "registered", plugin, manager.get_name(plugin), getframe(1))

        def pytest_collection_finish(self, session: pytest.Session) -> None:
            message(_MESSAGE + "collected", [item.nodeid for item in session.items], list(session.items))

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
            names = junitxml.mangle_test_address(report.nodeid)
            outcome = "failed" if report.failed else "skipped" if report.skipped else (
                "passed" if report.when == "call" else "setup")
            message(_MESSAGE + "test", report.nodeid, ".".join(names[:-1]) + "::" + names[-1], outcome)

        @pytest.hookimpl(tryfirst=True)
        def pytest_collectreport(self, report: pytest.CollectReport) -> None:
            if report.failed:
                message(_MESSAGE + "test", f"collect:{report.nodeid}", f"collect:{report.nodeid}", "failed")

        def pytest_sessionfinish(self) -> Iterator[None]:
            message(_MESSAGE + "window", True)
            try:
                yield  # an old-style wrapper is sent pluggy's outcome here, never raised into
            finally:
                message(_MESSAGE + "window", False)

    wrapper = SealbenchGuard.__dict__["pytest_sessionfinish"]
    try:
        marked = pytest.hookimpl(wrapper=True)(wrapper)
    except TypeError:  # pluggy before 1.1: only old-style wrappers
        marked = pytest.hookimpl(hookwrapper=True)(wrapper)
    SealbenchGuard.pytest_sessionfinish = marked  # type: ignore[method-assign]
    return SealbenchGuard()


def handles_pythonpath() -> bool:
    """Whether the installed pytest has the ``pythonpath`` ini option (pytest 7.0 on)."""
    return importlib.util.find_spec("_pytest.python_path") is not None


def pythonpath_for_old_pytest(args: list[str]) -> tuple[list[str], list[str]]:
    """The pack's arguments without their ``-o pythonpath=...`` options, and the directories
    those named: for a pytest that does not know the option, the guard puts them on
    ``sys.path`` itself, as pytest 7 would (relative ones to the working directory)."""
    out: list[str] = []
    paths: list[str] = []
    i = 0
    while i < len(args):
        arg, value = args[i], None
        for prefix in ("-opythonpath=", "--override-ini=pythonpath="):
            if arg.startswith(prefix):
                value = arg[len(prefix):]
        if arg in ("-o", "--override-ini") and i + 1 < len(args) and args[i + 1].startswith("pythonpath="):
            value, i = args[i + 1][len("pythonpath="):], i + 1
        if value is None:
            out.append(arg)
        else:
            paths = [os.path.abspath(p) for p in shlex.split(value)]  # the last one given wins, as in pytest
        i += 1
    return out, paths


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


def _take_config(private: str) -> dict[str, Any]:
    """Read the harness's configuration and delete it: the key must not outlive the start."""
    path = os.path.join(private, CONFIG_NAME)
    with open(path, encoding="utf-8") as handle:
        config: dict[str, Any] = json.load(handle)
    os.unlink(path)
    return config


def versions() -> str:
    """The interpreter's, pytest's and pluggy's versions, read without importing them."""
    from importlib import metadata

    found = [f"Python {sys.version.split()[0]}"]
    for name in ("pytest", "pluggy"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except Exception:  # not installed, or its metadata unreadable: said as such
            found.append(f"no {name}")
    return ", ".join(found)


def crash_line(error: BaseException) -> str:
    """The one line that says how the guard failed: the exception, where in this file, versions."""
    import traceback

    here = [f for f in traceback.extract_tb(error.__traceback__) if _norm(f.filename) == _norm(__file__)]
    where = f" (pytest_guard.py line {here[-1].lineno}, in {here[-1].name})" if here else ""
    text = " ".join(str(error).split())[:_DETAIL_CHARS]
    return f"{CRASH_MARK}: {type(error).__name__}: {text}{where}; {versions()}"


def _setup_failed(error: BaseException) -> NoReturn:
    """Before pytest.main no code under test has run: what failed is the harness or the
    environment. Its traceback, then one line that says so, and a status pytest never uses."""
    import traceback

    with contextlib.suppress(Exception):
        traceback.print_exception(error, file=sys.stderr)
        print(crash_line(error), file=sys.stderr, flush=True)
    os._exit(SETUP_FAILED)


def main(argv: list[str]) -> NoReturn:
    """``pytest_guard.py PRIVATE -- PYTEST_ARGS...``: run pytest under the watch and exit."""
    if len(argv) < 3 or argv[2] != "--":
        print("usage: pytest_guard.py PRIVATE_DIR -- PYTEST_ARGS...", file=sys.stderr)
        os._exit(4)
    private, pack_args = argv[1], argv[3:]
    try:
        config = _take_config(private)
        key = bytes.fromhex(config.pop("key"))
        fd = os.open(os.path.join(private, RECORD_NAME),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        # The harness owns pytest's configuration: nothing from the environment either.
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
            os.environ.pop(name, None)
        rootdir = _norm(os.getcwd())
        import pytest

        ending = _install(private, config, fd, key)
        del key, config
        pack_args = rooted_pythonpath(pack_args, rootdir)
        pythonpath: list[str] = []
        if not handles_pythonpath():
            pack_args, pythonpath = pythonpath_for_old_pytest(pack_args)
        plugin = make_plugin(pythonpath)
        ending.trust(plugin)
    except BaseException as e:
        _setup_failed(e)
    args = [*pack_args, "-c", os.path.join(private, INI_NAME), "--rootdir", rootdir,
            "--confcutdir", rootdir, "-p", "no:cacheprovider", f"--junitxml={os.path.join(private, REPORT_NAME)}"]
    try:
        status = int(pytest.main(args, plugins=[plugin]))
    except BaseException as e:  # pytest itself let something through: never a pass
        ending.error(f"pytest.main raised {type(e).__name__}: {e}")
        status = 3
    ending.finish(status)


if __name__ == "__main__":
    main(sys.argv)
