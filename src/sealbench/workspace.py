"""Workspaces: materialise a task as a one-commit git repository, capture the agent's patch,
and rebuild a pristine grading copy with the patch applied and the hidden tests overlaid.

git never runs with configuration the agent can reach: the agent's ``.git`` is a copy for
its convenience, while patches are captured through a private git directory outside the
sandbox, with system and global configuration disabled (a workspace ``.git/config`` could
otherwise run commands on the host through hooks or ``core.fsmonitor``).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .agentfs import TreeCaps, TreeRejected, is_link_at, remove_tree, reset_dir, snapshot
from .errors import HarnessError
from .gitrepo import init_one_commit

META_DIR = ".sealbench"  # prompt file and the agent's trace dir; never part of a patch
_FIXED_DATE = "2000-01-01T00:00:00Z"


def _git_env(ceiling: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(ceiling),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CEILING_DIRECTORIES": str(ceiling),
        "GIT_AUTHOR_NAME": "sealbench",
        "GIT_AUTHOR_EMAIL": "sealbench@localhost",
        "GIT_COMMITTER_NAME": "sealbench",
        "GIT_COMMITTER_EMAIL": "sealbench@localhost",
        "GIT_AUTHOR_DATE": _FIXED_DATE,
        "GIT_COMMITTER_DATE": _FIXED_DATE,
    }


def _git_cmd(args: Sequence[str]) -> list[str]:
    return ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
            "-c", "core.autocrlf=false", "-c", "core.quotePath=false", *args]


def git(args: Sequence[str], cwd: Path, *, ceiling: Path, check: bool = True,
        timeout_s: float | None = None, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """Run git with a clean configuration, ``stdin`` on its standard input.

    Raises:
        HarnessError: git is missing, or failed while ``check`` is set.
        subprocess.TimeoutExpired: ``timeout_s`` passed (git is killed).
    """
    try:
        proc = subprocess.run(_git_cmd(args), cwd=cwd, env=_git_env(ceiling), capture_output=True, check=False,
                              input=stdin, timeout=None if timeout_s is None else max(0.05, timeout_s))
    except OSError as e:
        raise HarnessError(f"cannot run git ({e.strerror}); install git") from None
    if check and proc.returncode != 0:
        raise HarnessError(f"git {args[0]} failed in {cwd}: {proc.stderr.decode(errors='replace').strip()}")
    return proc


def git_capped(args: Sequence[str], cwd: Path, *, ceiling: Path, cap: int, timeout_s: float) -> bytes:
    """Run git and return its output, read in chunks and refused past ``cap`` bytes.

    Raises:
        TreeRejected: the output is larger than ``cap`` (git is killed).
        subprocess.TimeoutExpired: ``timeout_s`` passed (git is killed).
        HarnessError: git is missing or failed.
    """
    deadline = time.monotonic() + max(0.05, timeout_s)
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(_git_cmd(args), cwd=cwd, env=_git_env(ceiling), stdout=subprocess.PIPE,
                                    stderr=err, stdin=subprocess.DEVNULL)
        except OSError as e:
            raise HarnessError(f"cannot run git ({e.strerror}); install git") from None
        assert proc.stdout is not None
        chunks: list[bytes] = []
        size = 0
        try:
            fd = proc.stdout.fileno()
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(proc.args, timeout_s)
                waiter = select.poll()  # not select: a descriptor past 1023 is no error here
                waiter.register(fd, select.POLLIN)
                if not waiter.poll(left * 1000):
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                size += len(chunk)
                if size > cap:
                    raise TreeRejected(f"the patch is larger than {cap} bytes")
                chunks.append(chunk)
            code = proc.wait(max(0.05, deadline - time.monotonic()))
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        if code != 0:
            err.seek(0)
            raise HarnessError(f"git {args[0]} failed in {cwd}: {err.read(4096).decode(errors='replace').strip()}")
    return b"".join(chunks)


def copy_tree(src: Path, dst: Path, *, into: bool = False,
              ignore: Callable[[str, list[str]], Iterable[str]] | None = None) -> None:
    """Copy a tree keeping symlinks as symlinks; a missing ``src`` gives an empty ``dst``.
    ``into``: ``dst`` is an empty directory already (made by the host, never by an agent);
    ``ignore``: as ``shutil.copytree``'s."""
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=into, ignore=ignore)
    elif not into:
        dst.mkdir(parents=True)


def changed_paths(base: dict[str, str], now: dict[str, str]) -> list[str]:
    """Paths added, removed or changed between two snapshots, sorted."""
    return sorted(p for p in base.keys() | now.keys() if base.get(p) != now.get(p))


_SKIP_TOP = frozenset({".git", META_DIR})
_NO_CONVERSION = "* !text !eol !crlf !ident !filter !working-tree-encoding\n"


class TaskWorkspace:
    """One task's agent workspace, the host-private folder beside it, and the private git
    directory its patches come from.

    ``agent_dir`` is the agent's (writable in its sandbox); ``private`` is the host's: what the agent
    must read (the prompt, feedback) is written there and bound read-only into the sandbox,
    never into ``agent_dir``, where a link the agent planted would redirect the host's write.
    """

    def __init__(self, task_root: Path, pack_workspace: Path, caps: TreeCaps | None = None) -> None:
        self.root = task_root
        self.agent_dir = task_root / "ws"
        self.private = task_root / "in"
        self.base_git = task_root / "base.git"
        self.pack_workspace = pack_workspace
        self.caps = caps or TreeCaps()
        self.base: dict[str, str] = {}
        self._base_git_made = False

    @property
    def trace_dir(self) -> Path:
        return self.agent_dir / META_DIR / "trace"

    def materialise(self) -> None:
        """Fresh copy of the pack's workspace as a one-commit repository (no history to mine).

        Raises:
            HarnessError: copying or git failed.
        """
        remove_tree(self.root)
        self._base_git_made = False  # removed with the root: made again on the next capture
        self.root.mkdir(parents=True)
        self.private.mkdir()
        try:
            copy_tree(self.pack_workspace, self.agent_dir)
        except OSError as e:
            raise HarnessError(f"cannot copy workspace {self.pack_workspace}: {e}") from None
        init_one_commit(self.agent_dir, self.agent_dir / ".git")
        try:
            self.base = snapshot(self.agent_dir, self.caps, _SKIP_TOP)
        except TreeRejected as e:
            raise HarnessError(f"the pack's workspace {self.pack_workspace}: {e.reason}") from None
        (self.agent_dir / META_DIR / "trace").mkdir(parents=True)

    def reset_private(self) -> None:
        """Rebuild the host-private folder before writing into it again: without a sandbox the
        agent can reach it (it is the workspace's sibling) and replace it by a link.

        Raises:
            TreeRejected: the task's folder itself was replaced (possible only without a sandbox).
        """
        reset_dir(self.root, self.private.name)

    def reset_meta(self) -> None:
        """Rebuild ``.sealbench/`` (with an empty ``trace/``) before an attempt, whatever the
        previous attempt left there.

        Raises:
            TreeRejected: the workspace itself was replaced (possible only without a sandbox).
        """
        reset_dir(self.agent_dir, META_DIR, ("trace",))

    def changes(self) -> list[str]:
        """Paths the agent changed relative to the base commit.

        Raises:
            TreeRejected: the workspace breaks a cap or holds a name that is not UTF-8.
        """
        return changed_paths(self.base, snapshot(self.agent_dir, self.caps, _SKIP_TOP))

    def capture_patch(self, timeout_s: float = 600.0) -> bytes:
        """A binary-safe diff of the agent's workspace against the base commit.

        git reads the agent's tree (it never follows links); its output is read in chunks and
        cut off at the patch cap.

        Raises:
            TreeRejected: the patch is larger than the cap.
            subprocess.TimeoutExpired: git took longer than ``timeout_s`` (the task's time).
            HarnessError: git failed.
        """
        if not self._base_git_made:
            # Made from the pack's copy, only when there is something to capture: most
            # attempts of a weak agent change nothing, and this is the hot path. Known made
            # by this object, never by what is on disk: without a sandbox the agent can plant
            # a base.git (a link to a host repository, whose index git add would rewrite).
            remove_tree(self.base_git)
            self.base_git.mkdir()
            init_one_commit(self.pack_workspace, self.base_git)
            self._base_git_made = True
            (self.base_git / "info").mkdir()
            (self.base_git / "info" / "exclude").write_text(f"/{META_DIR}/\n")
            # Highest precedence: the workspace's .gitattributes cannot make git add convert
            # what it records (an unknown encoding failed it; text and ident rewrote files the
            # agent left untouched). The base commit holds the pack's bytes unconverted too.
            (self.base_git / "info" / "attributes").write_text(_NO_CONVERSION)
        deadline = time.monotonic() + max(0.05, timeout_s)
        wt = ["--git-dir", str(self.base_git), "--work-tree", str(self.agent_dir)]
        git([*wt, "add", "-A", "--", "."], self.root, ceiling=self.root, timeout_s=deadline - time.monotonic())
        # .sealbench (folder, file or link) is never part of a patch, and info/exclude alone can be
        # negated by the agent's .gitignore. Excluded from the diff, not from the add (git add
        # fails when an exclude pathspec names a path that a .gitignore ignores), and not by a
        # `git rm --cached` between the two: one git process fewer on every captured attempt.
        return git_capped(
            [*wt, "diff", "--cached", "--binary", "--full-index", "--no-renames", "--no-ext-diff",
             "--no-textconv", "--no-color", "HEAD", "--", ".", f":(top,exclude){META_DIR}"],
            self.root, ceiling=self.root, cap=self.caps.max_patch_bytes, timeout_s=deadline - time.monotonic(),
        )


def forbidden_hits(changed: Iterable[str], patterns: Sequence[str], hidden_paths: Sequence[str], *,
                   reset: bool = False) -> list[str]:
    """Changed paths that the contract forbids.

    A pattern with a ``/`` matches the whole relative path; one without matches the file name
    in any directory. A change to any directory on the way to a hidden test (a symlink there
    would redirect the overlay) is always forbidden, and so is a change to a hidden test's own
    path unless ``reset`` (a task whose hidden files replace the workspace's versions at
    grading: a change to them is discarded, not a failure).
    """
    hits = []
    for path in changed:
        name = path.rsplit("/", 1)[-1]
        if any(fnmatch.fnmatchcase(path if "/" in pat else name, pat) for pat in patterns) or any(
            (h == path and not reset) or h.startswith(path + "/") for h in hidden_paths
        ):
            hits.append(path)
    return hits


# What Python imports from a directory on sys.path: a module file, or a package's __init__.
_IMPORTABLE = (".py", ".pyc", ".pyw", ".so", ".pyd")
# The test runner's own packages: `python -m pytest` imports them from the working directory first.
_RUNNER_PACKAGES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig"})
# Standard-library names no oracle imports, and that agents give their own scratch files
# (`test.py`): forbidding them would fail honest work and stop no forgery.
_NEVER_IMPORTED = frozenset({"__main__", "test", "this", "antigravity", "idlelib", "turtledemo"})


@functools.lru_cache(maxsize=4096)
def _importable_elsewhere(module: str) -> bool:
    """Whether an oracle's Python imports ``module`` from outside the workspace: the standard
    library, the test runner's packages or a package installed beside sealbench. A module built
    into the interpreter or frozen is not: nothing on ``sys.path`` can stand in for it."""
    import importlib.machinery
    import site

    if module in sys.builtin_module_names or importlib.machinery.FrozenImporter.find_spec(module) is not None:
        return False
    if module in sys.stdlib_module_names or module in _RUNNER_PACKAGES:
        return True
    # Looked up in the installed packages only, never on this process's own sys.path (under
    # pytest, that holds the tests' folder, and a conftest there).
    installed = [*site.getsitepackages(), site.getusersitepackages()]
    try:
        return importlib.machinery.PathFinder.find_spec(module, installed) is not None
    except (ImportError, ValueError):
        return False


def _import_dirs(hidden_paths: Sequence[str], oracle_cmd: Sequence[str]) -> set[str]:
    """Directories an oracle may put on ``sys.path`` ahead of the standard library: the working
    directory, each hidden file's directory and every directory above it (pytest's prepend
    mode inserts the first one without an ``__init__.py``, which the patch can add), and what
    the command sets with pytest's ``-o pythonpath=...``."""
    dirs = {""}
    for h in hidden_paths:
        parts = h.split("/")[:-1]
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    for arg in oracle_cmd:
        if arg.startswith("pythonpath="):
            dirs.update(d.strip("/") for d in arg.removeprefix("pythonpath=").split() if d not in (".", "./"))
    return dirs


def module_shadows(changed: Iterable[str], pristine: Path, agent_ws: Path, hidden_paths: Sequence[str],
                   oracle_cmd: Sequence[str] = ()) -> list[str]:
    """Changed paths that add a module named like one the oracle imports from elsewhere (see
    :func:`_importable_elsewhere`), where the oracle imports from (:func:`_import_dirs`): there a
    candidate's ``pathlib.py`` (or ``pytest.pyc``, or a link named ``pathlib`` to a package) is
    imported instead of the real one, and can end the oracle with exit 0 before any test runs.

    A file or package the pristine workspace already holds is the task's own, and not counted.
    ``agent_ws`` is the agent's workspace, where a changed path can be seen to be a link.
    """
    dirs = _import_dirs(hidden_paths, oracle_cmd)
    hits = []
    for path in changed:
        parts = path.split("/")
        for i, part in enumerate(parts):
            if "/".join(parts[:i]) not in dirs:
                continue
            rest = parts[i + 1:]
            if not rest and part.endswith(_IMPORTABLE):
                module = part.split(".", 1)[0]
            elif not rest and is_link_at(agent_ws, path):
                module = part  # a link to a package, imported under its own name
            elif len(rest) == 1 and rest[0].endswith(_IMPORTABLE) and rest[0].split(".", 1)[0] == "__init__":
                module = part
            else:
                continue
            if module not in _NEVER_IMPORTED and _importable_elsewhere(module) and not os.path.lexists(pristine / path):
                hits.append(path)
                break
    return hits


def apply_patch(grade_dir: Path, patch: bytes, timeout_s: float | None = None) -> tuple[bool, str]:
    """Apply a patch in a pristine copy; returns (applied cleanly, git's message).

    git refuses to write through a symlink ("beyond a symbolic link"), so the patch cannot
    reach outside the copy.

    Raises:
        subprocess.TimeoutExpired: applying took longer than ``timeout_s``.
    """
    if not patch:
        return True, ""
    # On git's stdin, not in a file: beside the grading copy, without a sandbox, the agent could
    # have planted a link where the file would go.
    proc = git(["apply", "--binary", "--whitespace=nowarn", "-"], grade_dir, ceiling=grade_dir.parent,
               check=False, timeout_s=timeout_s, stdin=patch)
    return proc.returncode == 0, proc.stderr.decode("utf-8", "replace").strip()


def overlay(src: Path, dest_root: Path) -> None:
    """Copy the hidden tests over the grading copy, never writing through a symlink.

    Raises:
        HarnessError: a directory on the way is a symlink or not a directory.
    """
    for dirpath, dirs, files in os.walk(src):
        # The pack's bytecode stays out of the grading copy (see sealbench.bytecode).
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        files = [f for f in files if not f.endswith((".pyc", ".pyo"))]
        rel_dir = Path(dirpath).relative_to(src)
        target_dir = dest_root
        for part in rel_dir.parts:
            target_dir = target_dir / part
            if target_dir.is_symlink() or (target_dir.exists() and not target_dir.is_dir()):
                raise HarnessError(f"refusing to overlay hidden tests through {target_dir}")
            target_dir.mkdir(exist_ok=True)
        for name in files:
            dest = target_dir / name
            if dest.is_symlink() or dest.exists():
                if dest.is_dir() and not dest.is_symlink():
                    shutil.rmtree(dest)
                else:
                    dest.unlink()
            shutil.copy2(Path(dirpath) / name, dest, follow_symlinks=False)
