"""Write a one-commit git repository directly, without running git.

Materialising a workspace is on the hot path of every task; ``git init && git add && git
commit`` costs tens of milliseconds (hook templates, three processes). The objects, the ref
and a version-2 index are simple, documented formats (gitformat-index(5), git-hash-object),
so they are written here. The result passes ``git fsck --strict`` and ``git status`` is clean.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

AUTHOR = b"sealbench <sealbench@localhost> 946684800 +0000"


@dataclass(frozen=True)
class _Entry:
    path: str
    mode: int
    sha: bytes
    st: os.stat_result


def _write_object(objects: Path, kind: bytes, data: bytes) -> bytes:
    raw = kind + b" " + str(len(data)).encode() + b"\0" + data
    sha = hashlib.sha1(raw, usedforsecurity=False).digest()
    hexsha = sha.hex()
    target = objects / hexsha[:2] / hexsha[2:]
    if not target.exists():
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(zlib.compress(raw, 1))
    return sha


def _collect(worktree: Path, objects: Path) -> list[_Entry]:
    entries: list[_Entry] = []
    for dirpath, dirnames, filenames in os.walk(worktree):
        here = Path(dirpath)
        if here == worktree:
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in [*filenames, *[d for d in dirnames if (here / d).is_symlink()]]:
            path = here / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                mode, data = 0o120000, os.readlink(path).encode("utf-8", "surrogateescape")
            elif stat.S_ISREG(st.st_mode):
                mode = 0o100755 if st.st_mode & 0o111 else 0o100644
                data = path.read_bytes()
            else:
                continue
            rel = path.relative_to(worktree).as_posix()
            entries.append(_Entry(rel, mode, _write_object(objects, b"blob", data), st))
    # The index orders entries by their full path bytes.
    entries.sort(key=lambda e: e.path.encode("utf-8", "surrogateescape"))
    return entries


def _write_trees(entries: list[_Entry], objects: Path) -> bytes:
    tree: dict[str, object] = {}
    for e in entries:
        node = tree
        parts = e.path.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[parts[-1]] = e

    def write(node: dict[str, object]) -> bytes:
        items = []
        for name, child in node.items():
            if isinstance(child, dict):
                items.append((name + "/", b"40000 " + name.encode() + b"\0" + write(child)))
            else:
                assert isinstance(child, _Entry)
                items.append((name, f"{child.mode:o} ".encode() + name.encode("utf-8", "surrogateescape")
                              + b"\0" + child.sha))
        # Trees sort directories as if their names ended in "/".
        items.sort(key=lambda it: it[0].encode("utf-8", "surrogateescape"))
        return _write_object(objects, b"tree", b"".join(data for _, data in items))

    return write(tree)


def _index(entries: list[_Entry]) -> bytes:
    body = [b"DIRC", struct.pack(">II", 2, len(entries))]
    for e in entries:
        st = e.st
        name = e.path.encode("utf-8", "surrogateescape")
        fixed = struct.pack(
            ">IIIIIIIIII20sH",
            int(st.st_ctime) & 0xFFFFFFFF, st.st_ctime_ns % 1_000_000_000,
            int(st.st_mtime) & 0xFFFFFFFF, st.st_mtime_ns % 1_000_000_000,
            st.st_dev & 0xFFFFFFFF, st.st_ino & 0xFFFFFFFF, e.mode,
            st.st_uid & 0xFFFFFFFF, st.st_gid & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF,
            e.sha, min(len(name), 0xFFF),
        )
        entry = fixed + name
        entry += b"\0" * (8 - len(entry) % 8)
        body.append(entry)
    data = b"".join(body)
    return data + hashlib.sha1(data, usedforsecurity=False).digest()


def init_one_commit(worktree: Path, git_dir: Path, message: str = "task workspace") -> str:
    """Make ``git_dir`` a repository whose single commit on ``main`` holds ``worktree``'s files.

    Returns the commit id (hex).
    """
    objects = git_dir / "objects"
    # Only what git needs: every directory is an inode to allocate, on the hot path of every task.
    for sub in (objects, git_dir / "refs" / "heads"):
        sub.mkdir(parents=True, exist_ok=True)
    entries = _collect(worktree, objects)
    tree = _write_trees(entries, objects)
    commit = _write_object(
        objects, b"commit",
        b"tree " + tree.hex().encode() + b"\nauthor " + AUTHOR + b"\ncommitter " + AUTHOR + b"\n\n"
        + message.encode() + b"\n",
    )
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    (git_dir / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = false\n"
    )
    (git_dir / "refs" / "heads" / "main").write_text(commit.hex() + "\n")
    (git_dir / "index").write_bytes(_index(entries))
    return commit.hex()
