"""Workspaces: materialise a task as a one-commit git repository, capture the agent's patch,
and rebuild a pristine grading copy with the patch applied and the hidden tests overlaid.

git never runs with configuration the agent can reach: the agent's ``.git`` is a copy for
its convenience, while patches are captured through a private git directory outside the
sandbox, with system and global configuration disabled (a workspace ``.git/config`` could
otherwise run commands on the host through hooks or ``core.fsmonitor``).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from .digest import sha256_bytes, sha256_file
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


def git(args: Sequence[str], cwd: Path, *, ceiling: Path, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run git with a clean configuration.

    Raises:
        HarnessError: git is missing, or failed while ``check`` is set.
    """
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
           "-c", "core.autocrlf=false", "-c", "core.quotePath=false", *args]
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=_git_env(ceiling), capture_output=True, check=False)
    except OSError as e:
        raise HarnessError(f"cannot run git ({e.strerror}); install git") from None
    if check and proc.returncode != 0:
        raise HarnessError(f"git {args[0]} failed in {cwd}: {proc.stderr.decode(errors='replace').strip()}")
    return proc


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a tree keeping symlinks as symlinks; a missing ``src`` gives an empty ``dst``."""
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        dst.mkdir(parents=True)


def snapshot(root: Path, skip_top: Iterable[str] = (".git", META_DIR)) -> dict[str, str]:
    """Map each relative path under ``root`` to ``kind:digest``, never following symlinks.

    Agent-made workspaces may hold anything: links anywhere, fifos. None is followed or read
    except regular files.
    """
    skip = set(skip_top)
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        if here == root:
            dirnames[:] = [d for d in dirnames if d not in skip]
            filenames = [f for f in filenames if f not in skip]
        for name in [*filenames, *[d for d in dirnames if (here / d).is_symlink()]]:
            path = here / name
            rel = path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "l:" + sha256_bytes(os.readlink(path).encode("utf-8", "surrogateescape"))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("x:" if st.st_mode & 0o111 else "f:") + sha256_file(path)
            else:
                out[rel] = "s:"
    return out


def changed_paths(base: dict[str, str], now: dict[str, str]) -> list[str]:
    """Paths added, removed or changed between two snapshots, sorted."""
    return sorted(p for p in base.keys() | now.keys() if base.get(p) != now.get(p))


class TaskWorkspace:
    """One task's agent workspace and the private git directory its patches come from."""

    def __init__(self, task_root: Path, pack_workspace: Path) -> None:
        self.root = task_root
        self.ws = task_root / "ws"
        self.base_git = task_root / "base.git"
        self.pack_workspace = pack_workspace
        self.base: dict[str, str] = {}

    def materialise(self) -> None:
        """Fresh copy of the pack's workspace as a one-commit repository (no history to mine).

        Raises:
            HarnessError: copying or git failed.
        """
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        try:
            copy_tree(self.pack_workspace, self.ws)
        except OSError as e:
            raise HarnessError(f"cannot copy workspace {self.pack_workspace}: {e}") from None
        init_one_commit(self.ws, self.ws / ".git")
        self.base = snapshot(self.ws)
        (self.ws / META_DIR / "trace").mkdir(parents=True)

    def changes(self) -> list[str]:
        """Paths the agent changed relative to the base commit."""
        return changed_paths(self.base, snapshot(self.ws))

    def capture_patch(self) -> bytes:
        """A binary-safe diff of the agent's workspace against the base commit.

        Raises:
            HarnessError: git failed.
        """
        if not self.base_git.exists():
            # Made from the pack's copy, only when there is something to capture: most
            # attempts of a weak agent change nothing, and this is the hot path.
            init_one_commit(self.pack_workspace, self.base_git)
            (self.base_git / "info").mkdir()
            (self.base_git / "info" / "exclude").write_text(f"/{META_DIR}/\n")
        wt = ["--git-dir", str(self.base_git), "--work-tree", str(self.ws)]
        git([*wt, "add", "-A", "--", "."], self.root, ceiling=self.root)
        proc = git(
            [*wt, "diff", "--cached", "--binary", "--full-index", "--no-renames", "--no-ext-diff",
             "--no-textconv", "--no-color", "HEAD"],
            self.root,
            ceiling=self.root,
        )
        return proc.stdout


def forbidden_hits(changed: Iterable[str], patterns: Sequence[str], hidden_paths: Sequence[str]) -> list[str]:
    """Changed paths that the contract forbids.

    A pattern with a ``/`` matches the whole relative path; one without matches the file name
    in any directory. A change to a hidden test's path, or to any directory on the way to it
    (a symlink there would redirect the overlay), is always forbidden.
    """
    hits = []
    for path in changed:
        name = path.rsplit("/", 1)[-1]
        if any(fnmatch.fnmatchcase(path if "/" in pat else name, pat) for pat in patterns) or any(
            h == path or h.startswith(path + "/") for h in hidden_paths
        ):
            hits.append(path)
    return hits


def apply_patch(grade_dir: Path, patch: bytes) -> tuple[bool, str]:
    """Apply a patch in a pristine copy; returns (applied cleanly, git's message)."""
    if not patch:
        return True, ""
    patch_file = grade_dir.parent / (grade_dir.name + ".patch")
    patch_file.write_bytes(patch)
    try:
        proc = git(["apply", "--binary", "--whitespace=nowarn", str(patch_file)], grade_dir,
                   ceiling=grade_dir.parent, check=False)
    finally:
        patch_file.unlink(missing_ok=True)
    return proc.returncode == 0, proc.stderr.decode("utf-8", "replace").strip()


def overlay(src: Path, dest_root: Path) -> None:
    """Copy the hidden tests over the grading copy, never writing through a symlink.

    Raises:
        HarnessError: a directory on the way is a symlink or not a directory.
    """
    for dirpath, _dirs, files in os.walk(src):
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
