"""Python runs only bytecode the harness trusts: compiled from the file it names, by a library's
installer or in memory.

Python loads a module's ``__pycache__/<name>.<tag>.pyc`` instead of its source when the pyc's
header matches the source (a timestamp and size the agent can copy, or a hash an *unchecked*
pyc never checks), and a ``.pyc`` with no source beside it as a module of its own; either runs
under whatever file name it was compiled with. So every Python command of a task runs with:

* ``-X pycache_prefix=MIRROR`` (and ``PYTHONPYCACHEPREFIX`` for the interpreters it starts):
  Python then looks for cached bytecode in ``MIRROR`` only, never in a ``__pycache__`` of the
  workspace or grading copy. ``MIRROR`` is a host folder bound read-only into the sandbox,
  made of links to the ``.pyc`` files the libraries' installers compiled (the standard
  library, the installed packages, a task environment's), so nothing is compiled again;
* ``--check-hash-based-pycs always``: a hash-based pyc is checked against its source even
  when it says not to be.

Bytecode in a patch (a ``__pycache__`` folder, a ``.pyc`` or ``.pyo`` file) is a forbidden
path, and a grading copy is made without the pack's. Bytecode the code under test makes at
run time is the guard's concern (:mod:`sealbench.pytest_guard`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import re
import shutil
import sysconfig
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from . import scratch

if TYPE_CHECKING:
    from .environments import BuiltEnv

PREFIX_ENV: Final = "PYTHONPYCACHEPREFIX"
CHECK_HASH: Final = ("--check-hash-based-pycs", "always")
_SUFFIXES: Final = (".pyc", ".pyo")
# Folders no oracle imports from, left out of the mirror (a module there compiles from source).
_SKIP: Final = frozenset({"__pycache__", "test", "tests", "idlelib", "turtledemo", "site-packages", "dist-packages"})
_PYTHON: Final = re.compile(r"python(\d+(\.\d+)?)?")
_lock = threading.Lock()


def is_bytecode(rel: str) -> bool:
    """Whether a relative path is bytecode or in a ``__pycache__`` folder."""
    parts = rel.split("/")
    return "__pycache__" in parts or parts[-1].endswith(_SUFFIXES)


def ignore_bytecode(_folder: str, names: Iterable[str]) -> set[str]:
    """``shutil.copytree``'s ``ignore``: the bytecode among ``names``."""
    return {n for n in names if n == "__pycache__" or n.endswith(_SUFFIXES)}


def python_argv(argv: Sequence[str], prefix: Path) -> list[str]:
    """``argv`` with the harness's bytecode options after the interpreter, when it starts one
    by name (``python``, ``python3``, ``python3.11``); otherwise as it is (the environment's
    ``PYTHONPYCACHEPREFIX`` still applies)."""
    if not argv or not _PYTHON.fullmatch(os.path.basename(argv[0])):
        return list(argv)
    return [argv[0], "-X", f"pycache_prefix={prefix}", *CHECK_HASH, *argv[1:]]


def interpreter_roots() -> tuple[Path, ...]:
    """Where this interpreter imports libraries from: the standard library, the installed
    packages, and sealbench itself (the function-level oracle runs from it)."""
    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    found.add(str(Path(__file__).resolve().parent))
    return tuple(sorted(Path(p) for p in found))


def environment_roots(env: BuiltEnv) -> tuple[Path, ...]:
    """Where a task environment's interpreter imports libraries from."""
    version = ".".join(env.python_version.split(".")[:2])
    return (env.root / "lib" / f"python{version}" / "site-packages", env.base_prefix / "lib" / f"python{version}")


@dataclass(frozen=True)
class Mirror:
    """A bytecode mirror: the ``prefix`` Python is given, and the folders a sandbox binds
    read-only for it (the prefix and the cached mirror of each root it links to)."""

    prefix: Path
    mounts: tuple[Path, ...]


def mirror(roots: Iterable[Path]) -> Mirror:
    """The read-only bytecode mirror of ``roots`` (see the module docstring): a folder made once
    per process and set of roots (removed at exit) that links each root to its mirror in the
    cache, made once per machine and state of the root."""
    return _mirror(tuple(sorted({Path(os.path.abspath(r)) for r in roots})))


def cache_root() -> Path:
    """Where the roots' mirrors are kept: ``$XDG_CACHE_HOME/sealbench/pycache``, else
    ``~/.cache/sealbench/pycache``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).absolute() if xdg else Path.home() / ".cache") / "sealbench" / "pycache"


@functools.cache
def _mirror(roots: tuple[Path, ...]) -> Mirror:
    with _lock:
        dest = scratch.temp_dir("pycache")
        atexit.register(shutil.rmtree, dest, True)
        mounts = [dest]
        # A root that holds another (a venv's lib/pythonX.Y and its site-packages) is left out:
        # its mirror would have to hold the other's link.
        for root in (r for r in roots if not any(r in o.parents for o in roots)):
            if not root.is_dir():
                continue
            at = Path(str(dest) + str(root))
            at.parent.mkdir(parents=True, exist_ok=True)
            mounts.append(_root_mirror(root))
            at.symlink_to(mounts[-1])
        return Mirror(dest, tuple(mounts))


def _root_mirror(root: Path) -> Path:
    """The cached mirror of one root, made when that root changed (a package added, removed or
    upgraded changes its folder's time); a stale link only means a module compiles from source."""
    key = [str(root)]
    with contextlib.suppress(OSError):
        key += [f"{e.name}:{e.stat(follow_symlinks=False).st_mtime_ns}" for e in os.scandir(root)]
        key.append(str(root.stat().st_mtime_ns))
    done = cache_root() / hashlib.sha256("\0".join(sorted(key)).encode()).hexdigest()[:32]
    if done.is_dir():
        return done
    try:
        done.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{done.name}-", dir=done.parent))
    except OSError:  # no cache to write: this process's own
        tmp = scratch.temp_dir("pycache-root")
        atexit.register(shutil.rmtree, tmp, True)
        _link(root, root, tmp)
        return tmp
    _link(root, root, tmp)
    try:
        tmp.rename(done)
    except OSError:  # made meanwhile by another process
        shutil.rmtree(tmp, ignore_errors=True)
    return done


def _link(root: Path, folder: Path, dest: Path) -> None:
    """Link ``folder``'s compiled modules (``folder`` is ``root`` or below it) where
    ``pycache_prefix`` looks for them, ``dest`` standing for ``root``: a folder without
    subfolders is one link to its ``__pycache__``."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    subs = [e for e in entries if e.is_dir(follow_symlinks=False) and e.name not in _SKIP]
    cache = folder / "__pycache__"
    out = dest / folder.relative_to(root)
    if cache.is_dir() and not cache.is_symlink():
        if not subs and out != dest:
            out.parent.mkdir(parents=True, exist_ok=True)
            if not out.exists():
                out.symlink_to(cache)
            return
        out.mkdir(parents=True, exist_ok=True)
        for name in os.listdir(cache):
            if name.endswith(".pyc") and not (out / name).exists():
                (out / name).symlink_to(cache / name)
    for sub in subs:
        _link(root, Path(sub.path), dest)

