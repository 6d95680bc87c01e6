"""The function-level oracle: a verdict the candidate cannot write.

Function-completion sets (HumanEval, MBPP and their "plus" versions) check a candidate's
functions with a test that, in the benchmark's own program, runs in the candidate's process.
There the candidate can write any report, end the process early with status 0, jump the
interpreter past the asserts, or return an object whose ``__eq__`` is always true. Here the
test runs in a trusted process the candidate cannot reach, and the candidate's functions run
in a worker process that answers calls with plain data only.

Run in the grading copy, as the sandbox's pid 1 (the runner asks for that)::

    python -I -m sealbench.function_oracle sealbench_oracle.json

``-I``: neither the working directory (the candidate's files) nor the environment reaches
``sys.path``, and no user site is read. The spec (:data:`SPEC_FILE`, JSON) names the
candidate module, the functions the tests call, the trusted code (the prompt's helpers, such
as HumanEval/32's ``poly``, or MBPP's given classes) and the test files.

The trusted parent
------------------
1. Resets SIGINT to its default and makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``):
   without capabilities, nothing of the same uid can then ptrace it or open its
   ``/proc/PID/mem``, ``fd`` or ``environ`` (this kernel has no Yama to do it otherwise).
2. Starts the worker (fork and exec of a fresh interpreter, in its own session, stdin from
   /dev/null, its stdout sent to its stderr, two private pipes as the only channel), which
   boots and waits: it imports nothing of the candidate's until step 3 is done.
3. Reads the spec, the trusted code and every test file (no symlinks followed, sizes
   capped), compiles them, and removes the files from the grading copy, all before any
   candidate code runs: what the candidate later writes there is never read, and the expected
   outputs are not on disk for it to read. Then it tells the worker to import the candidate
   module.
4. Runs the trusted code, binds a proxy for every function the tests call and for every other
   public callable the candidate module defines (never over a trusted name or a builtin the
   task does not declare), then runs the test text verbatim in that namespace.
5. After the last check it kills every other process it may signal (``kill(-1, SIGKILL)`` as
   the pid namespace's init; outside a sandbox, the worker's process group), reaps them,
   compares its own resource limits with those it started with, prints a one-line summary
   and exits 0. Anything else exits non-zero: 1 when the candidate failed, 2 when the oracle
   could not check the task (a defect of the pack, found by ``pack validate``).

What crosses the pipes
----------------------
Arguments and results are plain data: None, bool, int, float (inf and nan kept, exact),
complex, str, bytes, list, tuple, dict, set and frozenset, and the standard containers whose
equality is their data's (``collections.Counter``, ``OrderedDict``, ``deque``, a
``defaultdict`` whose default is a builtin type; MBPP 88 returns a Counter, MBPP 653 a
defaultdict), checked recursively with exact types (a subclass of int or str is not plain
data), at most :data:`MAX_DEPTH` deep, :data:`MAX_VALUES` values and :data:`MAX_FRAME` bytes a
message, encoded as JSON scalars and tagged JSON arrays (:func:`encode`) and decoded with
``json`` alone: never pickle, marshal or eval in the parent, which builds every value itself.
Arguments may also be builtin types (MBPP 533 passes ``int``) and instances of a class the
trusted code defines (MBPP's ``Node``, ``Pair``): those cross as the class name and their
attributes, and the worker rebuilds them from the candidate module's class of that name. A
result that is not plain data fails the whole check. An exception the candidate raises
crosses as the builtin exception types of its class's MRO and its message, and is raised in
the parent as the first of them that can be built from a message, so a test expecting
``ValueError`` keeps its meaning; SystemExit, KeyboardInterrupt and GeneratorExit become
:class:`CandidateExit`, which ``except Exception`` does not catch. Tolerances (the
plus sets' ``np.allclose``) are untouched: the test compares exact copies of the values.

What a hostile candidate can still do, and why each ends in "fail"
------------------------------------------------------------------
* Write a JUnit report, print "PASSED", call ``os._exit(0)``, register an atexit hook, set a
  trace function, walk frames or the garbage collector: all inside the worker, whose exit
  status, output and frames mean nothing. The verdict is the parent's exit status; the
  candidate's stdout goes to stderr and neither is read for the verdict.
* End the worker (at import or in a call) or garble a reply: the parent sees end of file or a
  malformed frame and fails the check, whatever the test's own ``except`` clauses do (a
  poisoned check can never exit 0).
* Return an object with a forged ``__eq__``, a subclass of int or str, a generator, a
  numpy value: not plain data, the check fails. The parent never holds a candidate object.
* Kill, stop or interrupt the parent: as pid 1 of the sandbox's pid namespace it receives no
  signal from inside the namespace for which it has no handler (it installs none; SIGINT is
  reset to the default), SIGKILL and SIGSTOP included. Outside a sandbox a killed parent
  exits by a signal, which is not status 0.
* Trace the parent or read its memory: it is non-dumpable and the sandbox drops every
  capability. With bubblewrap's own reaper as pid 1 the candidate could rewrite that reaper
  through ``/proc/1/mem`` and make it exit 0 for a failed check; the runner therefore starts
  this oracle as pid 1 itself (``--as-pid-1``), so there is no such process to rewrite.
* Lower the parent's resource limits with ``prlimit``: the worker installs a seccomp filter
  before importing the candidate that refuses ``prlimit64`` on any other process, ``ptrace``
  and ``process_vm_readv``/``writev`` (x86_64 and aarch64); independently, the parent compares
  its limits after every call and at the end, and any change fails the check. A lowered
  limit can only make the parent's own work fail.
* Change or add files in the grading copy: the parent read everything it needs before the
  worker started, and imports nothing from the grading copy.
* Run forever, flood the pipe, fork: the sandbox's wall clock, output and process caps apply;
  a timeout is not a pass.

What remains: the candidate sees the arguments of every call (it must), can time its answers
(the covert channel between attempts is the runner's concern), and can make the parent slow
(``setpriority``, ``sched_setaffinity``), which ends in a timeout. Outside a sandbox (``--sandbox
none``) none of the isolation above exists, and the grade says so (the run records the sandbox).
"""

from __future__ import annotations

import builtins
import errno
import json
import keyword
import os
import resource
import signal
import struct
import sys
from collections import Counter, OrderedDict, defaultdict, deque

# No typing at run time: this module starts twice in every grade, and typing costs ~8 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from typing import Any, NoReturn

    _Objects = Callable[[str, dict[str, Any]], Any]

MODULE = "sealbench.function_oracle"
SPEC_FILE = "sealbench_oracle.json"
SPEC_FORMAT = 1
MAX_DEPTH = 200
"""Deepest nesting of containers (and trusted objects) that crosses the pipes."""
MAX_FRAME = 512 * 2**20
"""Largest message, in bytes, either way (MBPP+ 255's reference returns 80,000 tuples of 77
floats: about 120 MB)."""
MAX_VALUES = 16_000_000
"""Most values (scalars and containers) in one message."""
MAX_FILE = 128 * 2**20
"""Largest spec, trusted code or test file the oracle reads."""
SUMMARY_KEY = "sealbench_function_oracle"
"""Key of the JSON summary line the oracle prints on stdout."""

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_ORACLE_ERROR = 2

_HEADER = struct.Struct(">Q")
_PR_SET_DUMPABLE = 4
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2
# (audit arch, syscall numbers, whether the x32 ABI must be refused) per machine.
_SECCOMP_ARCH: dict[str, tuple[int, dict[str, int], bool]] = {
    "x86_64": (0xC000003E, {"prlimit64": 302, "ptrace": 101, "process_vm_readv": 310,
                            "process_vm_writev": 311}, True),
    "aarch64": (0xC00000B7, {"prlimit64": 261, "ptrace": 117, "process_vm_readv": 270,
                             "process_vm_writev": 271}, False),
}
_KEPT_ENV = ("PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE")


def oracle_cmd(spec_file: str = SPEC_FILE) -> list[str]:
    """argv of the oracle; ``python`` is the runner's interpreter."""
    return ["python", "-I", "-m", MODULE, spec_file]


def is_oracle_cmd(argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs this oracle (the runner then starts it as the sandbox's pid 1)."""
    return len(argv) == 5 and list(argv[1:4]) == ["-I", "-m", MODULE]


def spec_json(*, module: str, functions: Sequence[str], trusted: Sequence[tuple[str, str]],
              tests: Sequence[str]) -> str:
    """The text of a spec file: one line of canonical JSON.

    ``trusted`` are (label, code) pairs the parent runs before the tests (code the agent also
    sees, such as the prompt's helpers: kept as JSON strings, they are not test lines);
    ``tests`` are file names, beside the spec, run in order in one namespace.
    """
    value = {"function_oracle": SPEC_FORMAT, "module": module, "functions": list(functions),
             "trusted": [{"label": label, "code": code} for label, code in trusted], "tests": list(tests)}
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


# --- plain data -------------------------------------------------------------------------


class NotPlainData(ValueError):
    """A value that is not plain data (or is too deep), with what it is."""


_SCALARS = (type(None), bool, int, float, str)
_CONTAINERS: dict[str, type] = {"L": list, "T": tuple, "E": set, "Z": frozenset, "Q": deque}
_MAPPINGS: dict[str, type] = {"D": dict, "K": Counter, "R": OrderedDict}
# Builtin types may cross by name: as a defaultdict's default, and as arguments (MBPP 533
# passes ``int``).
_BUILTIN_TYPES: dict[str, type] = {t.__name__: t for t in (bool, bytes, complex, dict, float, frozenset, int, list,
                                                           object, set, str, tuple)}
# Larger ints cross as hex: int <-> decimal text is refused past 4300 digits.
_JSON_INT_BITS = 4000


def encode(value: Any, *, objects: Mapping[str, type] | None = None, max_values: int = MAX_VALUES) -> Any:
    """The JSON form of a plain value, exact types only.

    None, bool, int, float (Python's float text is exact, inf and nan included) and str are
    JSON scalars; every container is a JSON array whose first item is a tag: ``L`` list, ``T``
    tuple, ``E`` set, ``Z`` frozenset (items in a canonical order), ``Q`` deque, ``D`` dict,
    ``K`` Counter, ``R`` OrderedDict (keys and values alternating), ``F`` defaultdict (the name
    of its builtin default type or null, then keys and values), ``Y`` bytes (hex), ``C``
    complex, ``I`` a large int (hex); in arguments only, ``B`` a builtin type by name and ``O``
    an instance of a trusted class (its name, then attribute names and values alternating).
    ``objects`` maps names to the trusted classes whose instances may cross.

    Raises:
        NotPlainData: naming the first value that is not plain data, or a value nested
            deeper than :data:`MAX_DEPTH` or made of more than ``max_values`` values.
    """
    return _Encoder(objects, max_values).enc(value, 0)


class _Encoder:
    """One :func:`encode` call: the values counted so far and the trusted classes."""

    def __init__(self, objects: Mapping[str, type] | None, max_values: int) -> None:
        self.objects = objects
        self.max_values = max_values
        self.count = 0

    def enc(self, value: Any, depth: int) -> Any:
        self.count += 1
        if self.count > self.max_values:
            raise NotPlainData(f"more than {self.max_values} values")
        kind = type(value)
        if kind in _SCALARS:
            if kind is int and value.bit_length() > _JSON_INT_BITS:
                return ["I", hex(value)]
            return value
        if depth >= MAX_DEPTH:
            raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
        shape = _SHAPES.get(id(kind))
        if shape is None:
            return self.other(value, depth + 1)
        head, children = shape(value)
        # A loop, not a comprehension: one frame a level keeps MAX_DEPTH far from the recursion limit.
        items = []
        for child in children:
            items.append(self.enc(child, depth + 1))
        if id(kind) in _UNORDERED:
            # A canonical order: the worker's iteration order must not depend on the parent's hash seed.
            items.sort(key=lambda e: json.dumps(e, sort_keys=True))
        return [*head, *items]

    def other(self, value: Any, inner: int) -> Any:
        """A builtin type (in arguments only), an instance of a trusted class, or a refusal."""
        kind = type(value)
        if self.objects is None:
            raise NotPlainData(f"a {kind.__module__}.{kind.__qualname__}")
        if kind is type and _BUILTIN_TYPES.get(getattr(value, "__name__", "")) is value:
            return ["B", getattr(value, "__name__", "")]
        if self.objects.get(kind.__name__) is kind and hasattr(value, "__dict__"):
            attrs: list[Any] = ["O", kind.__name__]
            for k, v in vars(value).items():
                if type(k) is str:
                    attrs += [k, self.enc(v, inner)]
            return attrs
        raise NotPlainData(f"a {kind.__module__}.{kind.__qualname__}")


def _pairs(mapping: Mapping[Any, Any]) -> Iterator[Any]:
    """Keys and values alternating, in the mapping's order."""
    for k, v in mapping.items():
        yield k
        yield v


def _default_dict_shape(value: defaultdict[Any, Any]) -> tuple[list[Any], Iterator[Any]]:
    factory = value.default_factory
    name = None if factory is None else getattr(factory, "__name__", "")
    if factory is not None and _BUILTIN_TYPES.get(name or "") is not factory:
        raise NotPlainData("a defaultdict whose default is not a builtin type")
    return ["F", name], _pairs(value)


# The head and the children of each container, keyed by the type's id: the lookup is of the
# exact type, and runs no metaclass's __eq__ or __hash__ (the worker encodes what the
# candidate returned).
_SHAPES: dict[int, Callable[[Any], tuple[list[Any], Iterable[Any]]]] = {
    id(list): lambda v: (["L"], v), id(tuple): lambda v: (["T"], v), id(deque): lambda v: (["Q"], v),
    id(set): lambda v: (["E"], v), id(frozenset): lambda v: (["Z"], v),
    id(dict): lambda v: (["D"], _pairs(v)), id(Counter): lambda v: (["K"], _pairs(v)),
    id(OrderedDict): lambda v: (["R"], _pairs(v)), id(defaultdict): _default_dict_shape,
    id(bytes): lambda v: (["Y", v.hex()], ()), id(complex): lambda v: (["C", v.real, v.imag], ()),
}
_UNORDERED = frozenset({id(set), id(frozenset)})
_MALFORMED = object()
"""What a decoder of :data:`_DECODERS` returns for a node of the wrong shape for its tag."""


def decode(node: Any, *, objects: _Objects | None = None, depth: int = 0) -> Any:
    """The plain value a JSON node (as ``json.loads`` returns it) stands for; every tag and
    payload type is checked.

    ``objects`` rebuilds an instance from a class name and its attributes (in the worker
    only); without it an object node is refused.

    Raises:
        NotPlainData: a malformed node, an unknown tag, too deep, or an unhashable key.
    """
    kind = type(node)
    if kind in _SCALARS:
        return node
    if kind is not list or not node or type(node[0]) is not str:
        raise NotPlainData("a malformed value")
    if depth >= MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
    tag, inner = node[0], depth + 1
    try:
        # Containers and mappings here, not in a helper: a helper's frame at every level would
        # bring MAX_DEPTH closer to the recursion limit.
        if tag in _CONTAINERS:
            return _CONTAINERS[tag](decode(v, objects=objects, depth=inner) for v in node[1:])
        if tag in _MAPPINGS and len(node) % 2 == 1:
            items = {decode(node[i], objects=objects, depth=inner): decode(node[i + 1], objects=objects, depth=inner)
                     for i in range(1, len(node), 2)}
            return items if tag == "D" else _MAPPINGS[tag](items)
        how = _DECODERS.get(tag)
        value = _MALFORMED if how is None else how(node, objects, inner)
    except NotPlainData:
        raise
    except (ValueError, OverflowError):
        raise NotPlainData(f"a malformed {tag!r} value") from None
    except TypeError:
        raise NotPlainData("an unhashable set element or dict key") from None
    if value is _MALFORMED:
        raise NotPlainData(f"an unknown or malformed value tagged {tag!r}")
    return value


def _decode_default_dict(node: list[Any], objects: _Objects | None, inner: int) -> Any:
    if len(node) % 2 != 0 or not (node[1] is None or node[1] in _BUILTIN_TYPES):
        return _MALFORMED
    items = {decode(node[i], objects=objects, depth=inner): decode(node[i + 1], objects=objects, depth=inner)
             for i in range(2, len(node), 2)}
    return defaultdict(None if node[1] is None else _BUILTIN_TYPES[node[1]], items)


def _decode_builtin_type(node: list[Any], objects: _Objects | None, inner: int) -> Any:
    if objects is None or len(node) != 2 or node[1] not in _BUILTIN_TYPES:
        return _MALFORMED
    return _BUILTIN_TYPES[node[1]]


def _decode_bytes(node: list[Any], objects: _Objects | None, inner: int) -> Any:
    if len(node) != 2 or type(node[1]) is not str:
        return _MALFORMED
    return bytes.fromhex(node[1])


def _decode_complex(node: list[Any], objects: _Objects | None, inner: int) -> Any:
    if len(node) != 3 or not all(type(v) in (int, float) for v in node[1:]):
        return _MALFORMED
    return complex(node[1], node[2])


def _decode_large_int(node: list[Any], objects: _Objects | None, inner: int) -> Any:
    if len(node) != 2 or type(node[1]) is not str:
        return _MALFORMED
    return int(node[1], 16)


def _decode_object(node: list[Any], objects: _Objects | None, inner: int) -> Any:
    if objects is None or len(node) % 2 != 0 or type(node[1]) is not str:
        return _MALFORMED
    attrs = {}
    for i in range(2, len(node), 2):
        if type(node[i]) is not str:
            raise NotPlainData("a malformed object attribute")
        attrs[node[i]] = decode(node[i + 1], objects=objects, depth=inner)
    return objects(node[1], attrs)


# The tags decode() does not read itself.
_DECODERS: dict[str, Callable[[list[Any], _Objects | None, int], Any]] = {
    "F": _decode_default_dict, "B": _decode_builtin_type, "Y": _decode_bytes, "C": _decode_complex,
    "I": _decode_large_int, "O": _decode_object,
}


# --- frames ------------------------------------------------------------------------------


def _write_frame(fd: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_FRAME:
        raise NotPlainData(f"a message of {len(data)} bytes (at most {MAX_FRAME})")
    for chunk in (_HEADER.pack(len(data)), data):
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int) -> Any:
    """The next JSON message, or None at end of file.

    Raises:
        NotPlainData: a frame too large or not JSON.
    """
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise NotPlainData(f"a message of {size} bytes (at most {MAX_FRAME})")
    data = _read_exact(fd, size)
    if data is None:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise NotPlainData("a message that is not JSON") from None


# --- the trusted parent -----------------------------------------------------------------


class OracleError(Exception):
    """The oracle cannot check this task (its spec, its tests, or a value they pass)."""


class CandidateError(Exception):
    """The candidate raised an exception no builtin type of its MRO can stand for."""


class CandidateExit(BaseException):
    """The candidate raised SystemExit, KeyboardInterrupt or GeneratorExit.

    In the benchmark's own program that ends the run; here it fails the check, and
    ``except Exception`` in a test does not catch it.
    """


class CheckAborted(BaseException):
    """The candidate broke the protocol: the check has failed, whatever the test catches."""


class _Job:
    """What the parent read before the candidate ran: code objects, never file names."""

    def __init__(self, module: str, functions: list[str], trusted: list[tuple[str, Any]],
                 tests: list[tuple[str, Any]]) -> None:
        self.module = module
        self.functions = functions
        self.trusted = trusted
        self.tests = tests


def _read_file(root: str, name: str) -> str:
    if not name or name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
        raise OracleError(f"{name!r} is not a relative path inside the grading copy")
    try:
        fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise OracleError(f"cannot open {name}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000):
            raise OracleError(f"{name} is not a regular file")
        if st.st_size > MAX_FILE:
            raise OracleError(f"{name} is larger than {MAX_FILE} bytes")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_FILE + 1)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise OracleError(f"{name} is not UTF-8") from None


def _names(value: Any, what: str) -> list[str]:
    if type(value) is not list or not all(type(v) is str and v.isidentifier() and not keyword.iskeyword(v)
                                          for v in value):
        raise OracleError(f"the spec's {what!r} must be a list of Python names")
    return list(value)


_SOURCES: dict[str, str] = {}


def _compile(code: str, filename: str) -> Any:
    _SOURCES[filename] = code
    try:
        return compile(code, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        raise OracleError(f"{filename} does not compile: {e}") from None


def read_job(root: str, spec_name: str) -> _Job:
    """Read and compile everything the parent needs, then remove the files it read.

    Raises:
        OracleError: a missing, unsafe or malformed spec or file.
    """
    try:
        spec = json.loads(_read_file(root, spec_name))
    except ValueError:
        raise OracleError(f"{spec_name} is not JSON") from None
    expected = {"function_oracle", "module", "functions", "trusted", "tests"}
    if type(spec) is not dict or set(spec) != expected or spec["function_oracle"] != SPEC_FORMAT:
        raise OracleError(f"{spec_name} is not a function-oracle spec of format {SPEC_FORMAT} "
                          f"(keys {sorted(expected)})")
    module = spec["module"]
    if type(module) is not str or not all(p.isidentifier() for p in module.split(".")):
        raise OracleError(f"the spec's module {module!r} is not a module name")
    functions = _names(spec["functions"], "functions")
    trusted = []
    if type(spec["trusted"]) is not list:
        raise OracleError("the spec's 'trusted' must be a list")
    for i, item in enumerate(spec["trusted"]):
        if type(item) is not dict or set(item) != {"label", "code"} or not all(type(v) is str for v in item.values()):
            raise OracleError("each trusted item must be {'label': str, 'code': str}")
        trusted.append((item["label"], _compile(item["code"], f"<trusted {i}: {item['label']}>")))
    if type(spec["tests"]) is not list or not spec["tests"] or not all(type(t) is str for t in spec["tests"]):
        raise OracleError("the spec's 'tests' must be a non-empty list of file names")
    tests = [(name, _compile(_read_file(root, name), name)) for name in spec["tests"]]
    for name in [spec_name, *spec["tests"]]:
        try:
            os.unlink(os.path.join(root, name))
        except OSError as e:  # the check still holds; only the expected outputs stay readable
            print(f"sealbench function oracle: could not remove {name}: {e.strerror}", file=sys.stderr)
    return _Job(module, functions, trusted, tests)


_RLIMITS = tuple(sorted((name, getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")))


def _limits() -> list[tuple[int, int]]:
    return [resource.getrlimit(which) for _name, which in _RLIMITS]


def _libc() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.prctl.restype = ctypes.c_int
    return libc


def _no_dumps() -> None:
    """Make this process non-dumpable (Linux): no same-uid ptrace, /proc/PID/mem, fd, environ.

    Raises:
        OracleError: the kernel refused.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    if _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OracleError(f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(ctypes.get_errno())}")


class _Link:
    """The parent's end of the worker: calls out, plain data back, and the poison flag."""

    def __init__(self, pid: int, to_worker: int, from_worker: int) -> None:
        self.pid = pid
        self.to_worker = to_worker
        self.from_worker = from_worker
        self.failure: str | None = None
        self.calls = 0
        self.returned: dict[str, set[str]] = {}
        self.limits = _limits()
        self.trusted_classes: dict[str, type] = {}

    @classmethod
    def spawn(cls, root: str) -> _Link:
        """Start the worker's interpreter; it imports nothing of the candidate's until :meth:`start`."""
        to_read, to_write = os.pipe()
        from_read, from_write = os.pipe()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") or k in _KEPT_ENV}
        # -P -s with an environment this process built is -I that keeps PYTHONHASHSEED: the
        # candidate's results are as reproducible as in the benchmark's own program.
        # The harness's bytecode options (sealbench.bytecode) go on to the worker.
        import _imp

        flags = [] if sys.pycache_prefix is None else ["-X", f"pycache_prefix={sys.pycache_prefix}"]
        flags += ["--check-hash-based-pycs", _imp.check_hash_based_pycs]
        argv = [sys.executable, "-P", "-s", *flags, "-m", MODULE, "--worker", str(to_read), str(from_write), root]
        # posix_spawn rather than subprocess (whose import costs every grade ~3 ms): the worker
        # gets the two pipe ends, /dev/null on stdin, its stdout on our stderr, and nothing else.
        keep = {to_read, from_write}
        for fd in _open_fds():
            if fd > 2 and fd not in keep:
                _ignoring(OSError, os.set_inheritable, fd, False)  # listdir's own fd is gone
        for fd in keep:
            os.set_inheritable(fd, True)
        devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            pid = os.posix_spawn(sys.executable, argv, env, setsid=True,
                                 file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, 2, 1)])
        finally:
            for fd in (devnull, to_read, from_write):
                os.close(fd)
        return cls(pid, to_write, from_read)

    def abort(self, why: str) -> CheckAborted:
        if self.failure is None:
            self.failure = why
        return CheckAborted(why)

    def start(self, module: str) -> list[str]:
        """Let the worker import the candidate module; its public callables once it did.

        Raises:
            CheckAborted: the module did not import, or the worker broke the protocol.
        """
        try:
            _write_frame(self.to_worker, {"go": module})
            msg = _read_frame(self.from_worker)
        except (NotPlainData, OSError) as e:
            raise self.abort(f"the candidate's process sent a malformed greeting ({e})") from None
        if msg is None:
            raise self.abort("the candidate's process ended while its module was imported")
        if type(msg) is dict and set(msg) == {"import_error"} and type(msg["import_error"]) is str:
            raise self.abort(f"the candidate module does not import: {msg['import_error'][:2000]}")
        if type(msg) is not dict or set(msg) != {"hello"} or type(msg["hello"]) is not list:
            raise self.abort("the candidate's process sent a malformed greeting")
        names = [n for n in msg["hello"][:10000] if type(n) is str and n.isidentifier() and not n.startswith("_")
                 and not keyword.iskeyword(n)]
        return names

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.failure is not None:
            raise CheckAborted(self.failure)
        try:
            request = {"call": name,
                       "args": [encode(a, objects=self.trusted_classes) for a in args],
                       "kwargs": [[k, encode(v, objects=self.trusted_classes)] for k, v in kwargs.items()]}
        except NotPlainData as e:
            self.failure = f"the test passes {e} to {name}, which cannot cross to the candidate's process"
            raise OracleError(self.failure) from None
        try:
            _write_frame(self.to_worker, request)
            reply = _read_frame(self.from_worker)
            self.calls += 1
            if self.limits != _limits():
                raise self.abort("the oracle's own resource limits were changed during the check")
            outcome = self._interpret(name, reply)
        except (CheckAborted, OracleError):
            raise
        except BaseException as e:  # a broken pipe, a lowered limit: the oracle itself was disturbed
            raise self.abort(f"calling {name} failed in the oracle: {type(e).__name__}: {e}") from None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _interpret(self, name: str, reply: Any) -> Any:
        if reply is None:
            raise self.abort(f"the candidate's process ended during a call to {name}")
        if type(reply) is not dict or len(reply) not in (1, 2):
            raise self.abort(f"a malformed reply to a call to {name}")
        if set(reply) == {"value"}:
            try:
                value = decode(reply["value"])
            except NotPlainData as e:
                raise self.abort(f"{name} returned {e}, not plain data") from None
            self.returned.setdefault(name, set()).add(type(value).__name__)
            return value
        if set(reply) == {"raised", "message"} and type(reply["raised"]) is list and type(reply["message"]) is str:
            return _exception_for([n for n in reply["raised"] if type(n) is str], reply["message"][:2000])
        if set(reply) == {"not_plain"} and type(reply["not_plain"]) is str:
            raise self.abort(f"{name} returned {reply['not_plain'][:200]}, which is not plain data")
        if set(reply) == {"missing"}:
            raise self.abort(f"the candidate module has no function {name}")
        raise self.abort(f"a malformed reply to a call to {name}")

    def end(self) -> None:
        """Kill the worker and everything it started, and reap them."""
        for fd in (self.to_worker, self.from_worker):
            _ignoring(OSError, os.close, fd)
        if os.getpid() == 1:
            # The init of the sandbox's pid namespace: every other process in it goes.
            _ignoring(ProcessLookupError, os.kill, -1, signal.SIGKILL)
            while True:
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    break
                except InterruptedError:
                    continue
        else:
            _ignoring((ProcessLookupError, PermissionError), os.killpg, self.pid, signal.SIGKILL)
            _ignoring(ChildProcessError, os.waitpid, self.pid, 0)


def _ignoring(errors: type[BaseException] | tuple[type[BaseException], ...], call: Callable[..., Any],
              *args: Any) -> None:
    # contextlib.suppress would cost an import in each of the two interpreters of every grade.
    try:
        call(*args)
    except errors:
        return


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def _exception_for(names: list[str], message: str) -> BaseException:
    """The exception the parent raises for one the candidate raised (builtin types only)."""
    for name in names:
        cls = getattr(builtins, name, None)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            continue
        if not issubclass(cls, Exception):
            return CandidateExit(f"the candidate raised {name}: {message}")
        try:
            return cls(message)
        except Exception:  # needs more than a message (UnicodeDecodeError): try its base
            continue
    return CandidateError(f"{names[0] if names else 'an exception'}: {message}")


class _Proxy:
    """Stands for one of the candidate's functions in the test's namespace."""

    def __init__(self, link: _Link, name: str) -> None:
        self._link = link
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._link.call(self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<the candidate's {self.__name__}>"


def _namespace(job: _Job, link: _Link, names: list[str]) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for _label, code in job.trusted:
        exec(code, ns)
    trusted = set(ns)
    link.trusted_classes = {k: v for k, v in ns.items() if isinstance(v, type) and v.__name__ == k}
    for name in names:
        # A builtin or a trusted helper is never replaced by the candidate's (an `abs` that
        # always returns 0 would pass `assert abs(f(x) - y) < 1e-6`), unless the task declares it.
        if name not in trusted and not hasattr(builtins, name):
            ns[name] = _Proxy(link, name)
    for name in job.functions:
        ns[name] = _Proxy(link, name)
    return ns


def _summary(verdict: str, link: _Link | None, reason: str | None) -> None:
    line: dict[str, Any] = {SUMMARY_KEY: SPEC_FORMAT, "verdict": verdict}
    if link is not None:
        line["calls"] = link.calls
        line["returned"] = {k: sorted(v) for k, v in sorted(link.returned.items())}
    if reason is not None:
        line["reason"] = reason[:2000]
    print(json.dumps(line, sort_keys=True), flush=True)


def _print_traceback() -> None:
    # Imported only when needed (a passing grade never pays for them); the sources are
    # registered so that the traceback shows the test's lines although the files are gone.
    import linecache
    import traceback

    for filename, code in _SOURCES.items():
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    traceback.print_exc()


def parse_summary(stdout: bytes) -> dict[str, Any] | None:
    """The summary line the oracle printed (the last one in ``stdout``), or None."""
    for line in reversed(stdout.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get(SUMMARY_KEY) == SPEC_FORMAT:
            return value
    return None


def run_parent(spec_name: str) -> int:
    """Check the candidate in the working directory; the exit status is the verdict."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    root = os.getcwd()
    link = None
    try:
        _no_dumps()
        # The worker's interpreter starts while this one reads the task: it runs nothing of the
        # candidate's before start(), which comes once the hidden files are read and gone.
        link = _Link.spawn(root)
        job = read_job(root, spec_name)
    except OracleError as e:
        if link is not None:
            link.end()
        print(f"sealbench function oracle: {e}", file=sys.stderr)
        _summary("error", None, str(e))
        return EXIT_ORACLE_ERROR
    code, reason = EXIT_FAIL, None
    try:
        ns = _namespace(job, link, link.start(job.module))
        for _name, test in job.tests:
            exec(test, ns)
        code = EXIT_PASS
    except OracleError as e:
        code, reason = EXIT_ORACLE_ERROR, str(e)
        _print_traceback()
    except BaseException as e:  # an assert, an error of the test, anything the candidate caused
        reason = f"{type(e).__name__}: {e}"[:2000]
        _print_traceback()
    finally:
        link.end()
    if code == EXIT_PASS and link.failure is not None:
        # Caught by the test (a bare except), but the check is spoiled all the same.
        code, reason = EXIT_FAIL, link.failure
    if code == EXIT_PASS and link.limits != _limits():
        code, reason = EXIT_FAIL, "the oracle's own resource limits were changed during the check"
    if reason is not None:
        print(f"sealbench function oracle: {reason}", file=sys.stderr)
    _summary({EXIT_PASS: "pass", EXIT_FAIL: "fail"}.get(code, "error"), link, reason)
    return code


# --- the worker --------------------------------------------------------------------------


def _seccomp_program(machine: str) -> list[tuple[int, int, int, int]] | None:
    """A BPF program refusing prlimit64 on another process, ptrace and process_vm_*."""
    if machine not in _SECCOMP_ARCH:
        return None
    arch, nr, refuse_x32 = _SECCOMP_ARCH[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM
    # (code, jump-if-true label, jump-if-false label, k); labels resolved below.
    body: list[tuple[int, str | None, str | None, int]] = [(ld, None, None, 4), (jeq, None, "deny", arch),
                                                          (ld, None, None, 0)]
    if refuse_x32:
        body.append((jge, "deny", None, 0x40000000))
    body += [(jeq, "pid", None, nr["prlimit64"]), (jeq, "deny", None, nr["ptrace"]),
             (jeq, "deny", None, nr["process_vm_readv"]), (jeq, "deny", None, nr["process_vm_writev"]),
             (ret, None, None, allow)]
    labels = {"pid": len(body), "allow": len(body) + 2, "deny": len(body) + 3}
    # prlimit64(0, ...) is the caller itself (setrlimit); the low word of args[0] is at 16.
    body += [(ld, None, None, 16), (jeq, "allow", "deny", 0), (ret, None, None, allow), (ret, None, None, deny)]
    program = []
    for i, (code, jt, jf, k) in enumerate(body):
        program.append((code, labels[jt] - i - 1 if jt else 0, labels[jf] - i - 1 if jf else 0, k))
    return program


def confine_worker() -> bool:
    """Install the worker's seccomp filter; False where it cannot (another machine, no Linux)."""
    program = _seccomp_program(os.uname().machine) if sys.platform.startswith("linux") else None
    if program is None:
        return False
    import ctypes

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(program))(*[SockFilter(*ins) for ins in program])
    prog = SockFprog(len(program), filters)
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return bool(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) == 0)


def _builtin_mro(cls: type) -> list[str]:
    return [c.__name__ for c in cls.__mro__
            if issubclass(c, BaseException) and getattr(builtins, c.__name__, None) is c]


def _message(exc: BaseException) -> str:
    try:
        return str(exc)[:2000]
    except Exception:
        return "(a message that cannot be printed)"


def run_worker(read_fd: int, write_fd: int, root: str) -> NoReturn:
    """Wait for the parent's go, import the candidate module, answer calls until the parent
    goes; never returns."""
    import importlib

    confine_worker()
    go = _read_frame(read_fd)
    if type(go) is not dict or type(go.get("go")) is not str:
        os._exit(0)
    module_name = go["go"]
    sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except BaseException as e:
        _write_frame(write_fd, {"import_error": f"{type(e).__name__}: {_message(e)}"})
        os._exit(0)
    names = []
    for key, value in list(vars(module).items()):
        if not key.startswith("_") and callable(value) and getattr(value, "__module__", None) == module.__name__:
            names.append(key)
    _write_frame(write_fd, {"hello": names})

    def rebuild(name: str, attrs: dict[str, Any]) -> Any:
        cls = getattr(module, name, None)
        if not isinstance(cls, type):
            raise TypeError(f"the candidate module has no class {name}")
        factory: Any = cls
        obj = factory.__new__(factory)
        for key, value in attrs.items():
            setattr(obj, key, value)
        return obj

    while True:
        request = _read_frame(read_fd)
        if type(request) is not dict:
            os._exit(0)
        name = request.get("call")
        fn = getattr(module, name, None) if type(name) is str else None
        if not callable(fn):
            _write_frame(write_fd, {"missing": str(name)})
            continue
        try:
            args = [decode(a, objects=rebuild) for a in request["args"]]
            kwargs = {k: decode(v, objects=rebuild) for k, v in request["kwargs"]}
            result = fn(*args, **kwargs)
        except BaseException as e:
            _write_frame(write_fd, {"raised": _builtin_mro(type(e)), "message": _message(e)})
            continue
        try:
            _write_frame(write_fd, {"value": encode(result)})
        except (NotPlainData, MemoryError, RecursionError) as e:
            del result
            _write_frame(write_fd, {"not_plain": str(e) if isinstance(e, NotPlainData) else "too large to encode"})


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 4 and args[0] == "--worker":
        run_worker(int(args[1]), int(args[2]), args[3])
    if len(args) != 1 or args[0].startswith("-"):
        print(f"usage: python -I -m {MODULE} SPEC.json (run in the grading copy)", file=sys.stderr)
        return EXIT_ORACLE_ERROR
    return run_parent(args[0])


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The verdict is decided: no interpreter teardown (atexit hooks, finalizers) runs after it.
    os._exit(status)
