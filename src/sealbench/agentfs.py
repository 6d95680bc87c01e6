"""Reading and resetting trees the agent controls, without ever following the agent.

A workspace (and the trace folder inside it) is written by hostile code: it may hold symlinks
to anywhere on the host, fifos and devices, names that are not UTF-8, directory chains deeper
than the path limit and more bytes than the host can hold. Everything here works on directory
file descriptors opened with ``O_NOFOLLOW`` on every component, reads only regular files
(checked again with ``fstat`` on the open descriptor), and stops at caps on entries, bytes,
depth and time. What the tree causes is reported as :class:`TreeRejected` (the agent's
failure, with a reason), never as a harness error.

Exceptions::

    TreeRejected    the tree breaks a cap or a rule; the attempt that left it fails
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .digest import digest_json, sha256_bytes

TREE_FORMAT = "sealbench.tree/1"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclass(frozen=True)
class TreeCaps:
    """Caps on what one attempt may leave in its workspace.

    ``max_bytes`` counts the sizes of regular files (in whole pages, :func:`on_tmpfs`, where a
    tree is copied: into a quota'd tmpfs or back out of one); ``max_depth`` the directories below the
    root; ``max_seconds`` bounds the time spent reading the tree. ``max_patch_bytes`` bounds
    the patch captured from it.

    Raises:
        ValueError: a cap is not positive.
    """

    max_entries: int = 250_000
    max_bytes: int = 1 << 30
    max_depth: int = 64
    max_seconds: float = 120.0
    max_patch_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not value > 0:
                raise ValueError(f"TreeCaps.{name} must be positive, got {value!r}")


class TreeRejected(Exception):
    """The agent's tree breaks a rule or a cap; ``reason`` says which, in plain words."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _name(raw: str, rel_dir: str, strict: bool) -> str:
    """The entry's name as text; a name that is not UTF-8 is refused (strict) or escaped."""
    try:
        raw.encode("utf-8")
        return raw
    except UnicodeEncodeError:
        shown = os.fsencode(raw).decode("utf-8", "backslashreplace")
        if strict:
            where = f"{rel_dir}/{shown}" if rel_dir else shown
            raise TreeRejected(f"file name is not valid UTF-8: {where!r}") from None
        return shown


_GITMODULES_SHORT = re.compile(r"(gitmod|gi7eba)~[0-9]")


def _git_refuses(name: str, is_link: bool) -> bool:
    """True for a name git will not record (its verify_path with core.protectNTFS, the default):
    ``.git`` or ``git~1`` in any case, followed only by dots and spaces or by ``:``, also after
    a backslash; and for a symlink, ``.gitmodules`` and its short names. A ``.git`` below the
    top also makes git take its folder for a nested repository, whose files it never records."""
    for part in name.split("\\"):
        stem = part.split(":", 1)[0].lower().rstrip(". ")
        if stem in (".git", "git~1"):
            return True
        if is_link and (stem == ".gitmodules" or _GITMODULES_SHORT.fullmatch(stem)):
            return True
    return False


def _file_digest(dir_fd: int, name: str, budget: _Budget) -> str | None:
    """Digest of a regular file opened without following links; None if it is not one any more."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.ENOENT, errno.EACCES, errno.EPERM):
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        h = hashlib.sha256()
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            budget.spend(len(chunk))
            h.update(chunk)
        return "sha256:" + h.hexdigest()
    finally:
        os.close(fd)


PAGE = os.sysconf("SC_PAGE_SIZE")


def on_tmpfs(size: int) -> int:
    """The bytes a regular file of ``size`` bytes takes on a tmpfs: whole pages."""
    return -(-size // PAGE) * PAGE


class _Budget:
    def __init__(self, caps: TreeCaps, what: str) -> None:
        self.caps = caps
        self.what = what
        self.entries = 0
        self.bytes = 0
        self.deadline = time.monotonic() + caps.max_seconds

    def entry(self) -> None:
        self.entries += 1
        if self.entries > self.caps.max_entries:
            raise TreeRejected(f"{self.what} holds more than {self.caps.max_entries} entries")
        if self.entries % 256 == 0:
            self.clock()

    def spend(self, n: int) -> None:
        self.bytes += n
        if self.bytes > self.caps.max_bytes:
            raise TreeRejected(f"{self.what} holds more than {self.caps.max_bytes} bytes of files")
        self.clock()

    def clock(self) -> None:
        if time.monotonic() > self.deadline:
            raise TreeRejected(f"reading {self.what} took more than {self.caps.max_seconds:g} s")


def _open_root(root: Path, what: str, below: tuple[str, ...] = ()) -> int:
    """Open ``root``, then each folder of ``below`` in turn, as directories; neither the root
    nor any folder below it may be a symlink (O_NOFOLLOW alone guards only a path's last
    component, so the agent's part of a path is opened one component at a time).

    Raises:
        FileNotFoundError: a component is missing.
        TreeRejected: a component is a symlink or not a directory.
    """
    try:
        fd = os.open(root, _DIR_FLAGS)
        for part in below:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)
            fd = nxt
        return fd
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise TreeRejected(f"{what} was replaced by something that is not a directory") from None
        raise


def _open_subdir(dir_fd: int, name: str, rel: str, depth: int, budget: _Budget) -> int | None:
    """A descriptor of the directory ``name`` under ``dir_fd``, never through a link; None when
    it is no longer a directory there (replaced, removed, unreadable).

    Raises:
        TreeRejected: it lies deeper than the caps allow.
    """
    if depth + 1 > budget.caps.max_depth:
        raise TreeRejected(f"{budget.what} nests directories deeper than {budget.caps.max_depth}: {rel}")
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.EACCES):
            return None
        raise


def _walk(dir_fd: int, rel_dir: str, depth: int, budget: _Budget, strict: bool,
          skip: frozenset[str]) -> Iterator[tuple[str, str, str]]:
    """Yield (relative path, kind, digest) below ``dir_fd``; kind is f, x, l or s."""
    with os.scandir(dir_fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if depth == 0 and entry.name in skip:
            continue
        budget.entry()
        name = _name(entry.name, rel_dir, strict)
        rel = f"{rel_dir}/{name}" if rel_dir else name
        st = entry.stat(follow_symlinks=False)
        mode = st.st_mode
        if strict and _git_refuses(name, stat.S_ISLNK(mode)):
            # git add fails on these (or drops a nested repository's files): refused here, with
            # a reason, before git ever runs.
            raise TreeRejected(f"{budget.what} holds {rel!r}, a name git will not record "
                               "(a nested repository or a look-alike of .git); remove it")
        if stat.S_ISLNK(mode):
            target = os.readlink(entry.name, dir_fd=dir_fd)
            text = _name(target, rel, strict)
            yield rel, "l", sha256_bytes(text.encode("utf-8"))
        elif stat.S_ISDIR(mode):
            sub = _open_subdir(dir_fd, entry.name, rel, depth, budget)
            if sub is None:
                yield rel, "s", ""
                continue
            try:
                yield from _walk(sub, rel, depth + 1, budget, strict, skip)
            finally:
                os.close(sub)
        elif stat.S_ISREG(mode):
            digest = _file_digest(dir_fd, entry.name, budget)
            if digest is None:
                yield rel, "s", ""
            else:
                yield rel, "x" if mode & 0o111 else "f", digest
        elif strict and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
            # git opens every .gitignore and .gitattributes it meets: a fifo there blocks it until
            # the deadline, a device feeds it without end.
            raise TreeRejected(f"{budget.what} holds a fifo or device at {rel!r}; remove it")
        else:
            yield rel, "s", ""


def scan(root: Path, caps: TreeCaps, *, what: str = "the workspace", strict: bool = True,
         skip_top: frozenset[str] = frozenset(), below: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """Every entry under ``root/below...`` as (relative path, kind, digest), sorted by path.

    ``root`` is the host's; ``below`` names folders inside it that the agent could have
    replaced by links, opened one at a time without following any.

    kind is ``f`` (file), ``x`` (executable file), ``l`` (symlink; digest over its target
    text, never followed) or ``s`` (anything else: fifo, socket, device; no digest).
    ``strict`` (a workspace, which git reads next) refuses names and link targets that are
    not UTF-8, names git will not record, fifos and devices; otherwise (a trace) names are
    shown escaped and special files listed. A missing root is an empty tree.

    Raises:
        TreeRejected: a cap is exceeded, the root is not a directory, or (strict) a name or
            an entry is refused.
        OSError: the host could not read its own directory (a harness failure).
    """
    try:
        fd = _open_root(root, what, below)
    except FileNotFoundError:
        return []
    budget = _Budget(caps, what)
    try:
        try:
            return list(_walk(fd, "", 0, budget, strict, skip_top))
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:
                raise TreeRejected(f"{what} holds a name longer than the system allows") from None
            raise
    finally:
        os.close(fd)


def snapshot(root: Path, caps: TreeCaps, skip_top: frozenset[str]) -> dict[str, str]:
    """Map each relative path under ``root`` to ``kind:digest`` (see :func:`scan`)."""
    return {rel: f"{kind}:{digest}" for rel, kind, digest in scan(root, caps, skip_top=skip_top)}


def trace_digest(root: Path, caps: TreeCaps, below: tuple[str, ...] = ()) -> str:
    """Digest of an agent's trace folder ``root/below...`` (see :func:`scan`), in the format
    of :func:`sealbench.digest.tree_digest`.

    Special files are listed with kind ``s`` and links are never followed, so any trace can be
    digested; a trace over the caps raises :class:`TreeRejected`.
    """
    entries = [[rel, kind, digest] for rel, kind, digest in
               scan(root, caps, what="the trace folder", strict=False, below=below)]
    return digest_json([TREE_FORMAT, entries])


@dataclass(frozen=True)
class TraceCaps:
    """What of an agent's trace folder is kept: at most ``files`` files of at most ``file_bytes``
    each and ``total_bytes`` together (in path order), and ``listed`` entries listed at most.

    Raises:
        ValueError: a cap is not positive.
    """

    files: int = 100
    file_bytes: int = 8 << 20
    total_bytes: int = 16 << 20
    listed: int = 1000

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not value > 0:
                raise ValueError(f"TraceCaps.{name} must be positive, got {value!r}")


@dataclass(frozen=True)
class TraceEntry:
    """One entry of a trace folder: as :func:`scan` lists it, with the file's bytes when kept."""

    path: str
    kind: str
    digest: str
    size: int | None = None
    data: bytes | None = None
    not_kept: str | None = None


@dataclass(frozen=True)
class Trace:
    """An agent's trace folder as read: its tree digest (:func:`trace_digest`'s), the first
    :attr:`TraceCaps.listed` entries, and how many more there were."""

    digest: str
    entries: list[TraceEntry]
    omitted: int


def read_trace(root: Path, caps: TreeCaps, keep: TraceCaps, below: tuple[str, ...] = ()) -> Trace:
    """The trace folder ``root/below...``: its digest and its files' bytes, within ``keep``.

    Every file is opened component by component without following a link
    (:func:`read_regular`); a file whose bytes changed since its digest was taken, a link, a
    special file and a file past a cap are listed without their bytes, with why.

    Raises:
        TreeRejected: the folder is over ``caps`` (see :func:`trace_digest`).
    """
    scanned = scan(root, caps, what="the trace folder", strict=False, below=below)
    digest = digest_json([TREE_FORMAT, [[rel, kind, d] for rel, kind, d in scanned]])
    entries: list[TraceEntry] = []
    kept = total = 0
    prefix = "/".join(below)
    for rel, kind, d in scanned[: keep.listed]:
        if kind == "l":
            entries.append(TraceEntry(rel, kind, d, not_kept="a symbolic link (never followed)"))
            continue
        if kind == "s":
            entries.append(TraceEntry(rel, kind, "", not_kept="not a regular file"))
            continue
        data = read_regular(root, f"{prefix}/{rel}" if prefix else rel, keep.file_bytes)
        if data is None or sha256_bytes(data) != d:
            size = None if data is None else len(data)
            why = (f"larger than the {keep.file_bytes} bytes kept of one file, or no longer a regular file there"
                   if data is None else "it changed while it was read")
            entries.append(TraceEntry(rel, kind, d, size, not_kept=why))
        elif kept >= keep.files or total + len(data) > keep.total_bytes:
            entries.append(TraceEntry(rel, kind, d, len(data), not_kept=(
                f"past the {keep.files} files kept" if kept >= keep.files
                else f"past the {keep.total_bytes} bytes kept of one trace folder")))
        else:
            kept += 1
            total += len(data)
            entries.append(TraceEntry(rel, kind, d, len(data), data))
    return Trace(digest, entries, max(0, len(scanned) - keep.listed))


def reset_dir(parent: Path, name: str, subdirs: tuple[str, ...] = ()) -> None:
    """Remove whatever the agent left at ``parent/name`` and make it a fresh empty directory.

    ``parent`` is opened with ``O_NOFOLLOW``; the entry is removed without following links
    (a symlink is unlinked, a directory removed with descriptor-relative calls), then created
    anew with ``subdirs`` inside.

    Raises:
        TreeRejected: ``parent`` itself was replaced by a symlink or a non-directory.
    """
    pfd = _open_root(parent, "the workspace")
    try:
        try:
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                _rmtree_at(pfd, name)
            else:
                os.unlink(name, dir_fd=pfd)
        os.mkdir(name, 0o755, dir_fd=pfd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
        try:
            for sub in subdirs:
                os.mkdir(sub, 0o755, dir_fd=fd)
        finally:
            os.close(fd)
    finally:
        os.close(pfd)


_MOVED = ".sealbench-removing-"


def _rmtree_at(dir_fd: int, name: str) -> None:
    """Remove the directory ``name`` under ``dir_fd`` and everything in it, never following links.

    Without recursion and with at most two directories open: every directory found below the
    top one is first moved up into it, so a chain deeper than the interpreter's recursion
    limit or the path limit is removed like a flat tree.
    """
    top = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        todo: list[str | None] = [None]  # None is the top directory itself
        moved = 0
        while todo:
            sub = todo.pop()
            try:
                fd = top if sub is None else os.open(sub, _DIR_FLAGS, dir_fd=top)
            except FileNotFoundError:
                continue
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        if not entry.is_dir(follow_symlinks=False):
                            with contextlib.suppress(FileNotFoundError):
                                os.unlink(entry.name, dir_fd=fd)
                        elif sub is None:
                            todo.append(entry.name)
                        else:
                            while _exists_at(top, f"{_MOVED}{moved}"):
                                moved += 1
                            os.rename(entry.name, f"{_MOVED}{moved}", src_dir_fd=fd, dst_dir_fd=top)
                            todo.append(f"{_MOVED}{moved}")
            finally:
                if fd != top:
                    os.close(fd)
            if sub is not None:
                os.rmdir(sub, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=dir_fd)


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def remove_tree(path: Path) -> None:
    """Remove ``path`` (a directory tree, a file or a link) without following links and
    without recursion; nothing there is nothing to do.

    For trees the agent or the code under test wrote: ``shutil.rmtree`` recurses once per
    level and dies with RecursionError on a chain a few thousand directories deep.

    Raises:
        OSError: something could not be removed.
    """
    try:
        pfd = os.open(path.parent, _DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        try:
            st = os.stat(path.name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            _rmtree_at(pfd, path.name)
        else:
            os.unlink(path.name, dir_fd=pfd)
    finally:
        os.close(pfd)


def read_regular(root: Path, rel: str, max_bytes: int) -> bytes | None:
    """The bytes of ``root/rel`` if every component is a real directory and the last a regular
    file of at most ``max_bytes``; None otherwise (missing, a link, a fifo, too large)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts:
        return None
    fd = open_folder(root, "/".join(parts[:-1]))
    if fd is None:
        return None
    try:
        return read_regular_at(fd, parts[-1], max_bytes)
    finally:
        os.close(fd)


def open_folder(root: Path, rel: str) -> int | None:
    """A descriptor of the directory ``root/rel`` ("" for ``root``), every component opened
    without following a link; None when one is missing, a link or not a directory. The
    caller closes it."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return None
    try:
        for part in parts:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        return None
    return fd


def read_regular_at(dir_fd: int, name: str, max_bytes: int) -> bytes | None:
    """The bytes of the entry ``name`` of the directory ``dir_fd`` if it is a regular file of
    at most ``max_bytes`` (never followed if it is a link); None otherwise."""
    try:
        ffd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(ffd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        data = b""
        while len(data) <= max_bytes:
            chunk = os.read(ffd, _CHUNK)
            if not chunk:
                return data
            data += chunk
        return None
    finally:
        os.close(ffd)


def _open_parent(root: Path, rel: str) -> tuple[int, str] | None:
    """A descriptor of ``root/rel``'s directory and its last name, every directory on the way
    opened without following a link; None when ``rel`` is not a plain relative path or a
    directory on the way is missing, a link or not a directory. The caller closes the fd."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        return None
    return fd, parts[-1]


def is_link_at(root: Path, rel: str) -> bool:
    """Whether ``root/rel`` is a symbolic link, every directory on the way a real one (a link on
    the way is never followed: then False)."""
    opened = _open_parent(root, rel)
    if opened is None:
        return False
    fd, name = opened
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
    finally:
        os.close(fd)


def exists_at(root: Path, rel: str) -> bool:
    """Whether ``root/rel`` exists (a link counts, unfollowed), every directory on the way a real
    one (a link on the way is never followed: then False)."""
    opened = _open_parent(root, rel)
    if opened is None:
        return False
    fd, name = opened
    try:
        return _exists_at(fd, name)
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_entry(root: Path, rel: str) -> None:
    """Remove ``root/rel`` (file, link or directory) without following a link on the way.

    An intermediate component that is a link or not a directory means nothing is there to
    remove: the entry cannot exist at ``rel`` for anything that resolves paths safely.
    """
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                return
            os.close(fd)
            fd = nxt
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            _rmtree_at(fd, parts[-1])
        else:
            os.unlink(parts[-1], dir_fd=fd)
    finally:
        os.close(fd)


# --- copying a tree into and out of a size-capped working directory ------------------------

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _same_bytes(a: int, b: int) -> bool:
    while True:
        x, y = os.read(a, _CHUNK), os.read(b, _CHUNK)
        if x != y:
            return False
        if not x:
            return True


def _copy_file(src_fd: int, name: str, dst_fd: int, old: os.stat_result | None, budget: _Budget) -> None:
    """Copy the regular file ``name`` (opened without following links, checked again with
    fstat) over the destination's entry ``old``, which is kept if it already holds the same
    bytes and permissions; one that is no longer a regular file is skipped."""
    try:
        rfd = os.open(name, _FILE_FLAGS, dir_fd=src_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.ENOENT):
            return
        raise
    try:
        st = os.fstat(rfd)
        if not stat.S_ISREG(st.st_mode):
            return
        # Charged before anything is written (nothing else writes the source any more): a sparse
        # file, or a hard link named a thousand times, costs every byte it would put on the
        # host's disk, and nothing past the cap is written. In whole pages, as a tmpfs quota
        # counts it: 135,000 links to one 4,097-byte file passed a cap of bytes (553 MB) and
        # then overflowed the grading copy's 1 GiB quota (two pages each).
        budget.spend(on_tmpfs(st.st_size))
        # Permission bits only: a set-user-ID bit the agent set must not reach the host.
        mode = st.st_mode & 0o777
        if old is not None and stat.S_ISREG(old.st_mode) and old.st_size == st.st_size \
                and stat.S_IMODE(old.st_mode) == mode:
            # Unchanged (most files of most attempts): compared, not rewritten.
            same = os.open(name, _FILE_FLAGS, dir_fd=dst_fd)
            try:
                if _same_bytes(rfd, same):
                    return
            finally:
                os.close(same)
            os.lseek(rfd, 0, os.SEEK_SET)
        if old is not None:
            _remove_at(dst_fd, name, old)
        wfd = os.open(name, _NEW_FILE, mode, dir_fd=dst_fd)
        try:
            os.fchmod(wfd, mode)
            _copy_data(rfd, wfd, st.st_size)
        finally:
            os.close(wfd)
    finally:
        os.close(rfd)


def _copy_data(rfd: int, wfd: int, size: int) -> None:
    """Copy ``size`` bytes, keeping holes as holes: the copy takes the room of the original,
    so a tree that fitted its quota fits it again when copied back in for the next attempt."""
    pos = 0
    while pos < size:
        try:
            data = os.lseek(rfd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # only a hole is left
                break
            raise
        end = min(os.lseek(rfd, data, os.SEEK_HOLE), size)
        os.lseek(wfd, data, os.SEEK_SET)
        while data < end:
            sent = os.sendfile(wfd, rfd, data, min(_CHUNK, end - data))
            if not sent:
                break
            data += sent
        pos = end
    os.ftruncate(wfd, size)


def _remove_at(dir_fd: int, name: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        _rmtree_at(dir_fd, name)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _copy_entries(src_fd: int, dst_fd: int, rel_dir: str, depth: int, budget: _Budget) -> None:
    """Make the tree below ``dst_fd`` that below ``src_fd``: directories, regular files (bytes
    and permission bits), symlinks as symlinks (never followed), fifos and sockets as new nodes
    of their kind; anything else (a device) is left out. What the destination already holds
    the same is kept; the rest of it is removed."""
    with os.scandir(src_fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    with os.scandir(dst_fd) as it:
        olds = {e.name: e.stat(follow_symlinks=False) for e in it}
    wanted = {e.name for e in entries}
    for name, st in olds.items():
        if name not in wanted:
            _remove_at(dst_fd, name, st)
    for entry in entries:
        budget.entry()
        shown = os.fsencode(entry.name).decode("utf-8", "backslashreplace")
        rel = f"{rel_dir}/{shown}" if rel_dir else shown
        mode = entry.stat(follow_symlinks=False).st_mode
        old = olds.get(entry.name)
        if stat.S_ISDIR(mode):
            sub = _open_subdir(src_fd, entry.name, rel, depth, budget)
            if sub is None:
                continue
            try:
                if old is not None and not stat.S_ISDIR(old.st_mode):
                    _remove_at(dst_fd, entry.name, old)
                    old = None
                if old is None:
                    os.mkdir(entry.name, 0o755, dir_fd=dst_fd)
                out = os.open(entry.name, _DIR_FLAGS, dir_fd=dst_fd)
                try:
                    _copy_entries(sub, out, rel, depth + 1, budget)
                    os.fchmod(out, (mode & 0o777) | 0o700)
                finally:
                    os.close(out)
            finally:
                os.close(sub)
        elif stat.S_ISREG(mode):
            _copy_file(src_fd, entry.name, dst_fd, old, budget)
        elif stat.S_ISLNK(mode):
            target = os.readlink(entry.name, dir_fd=src_fd)
            budget.spend(len(os.fsencode(target)))
            if old is not None:
                if stat.S_ISLNK(old.st_mode) and os.readlink(entry.name, dir_fd=dst_fd) == target:
                    continue
                _remove_at(dst_fd, entry.name, old)
            os.symlink(target, entry.name, dir_fd=dst_fd)
        elif stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            # Kept as what they are (never opened), so that the reader of the copy refuses or
            # lists them exactly as it would have in the original.
            if old is not None:
                if stat.S_IFMT(old.st_mode) == stat.S_IFMT(mode):
                    continue
                _remove_at(dst_fd, entry.name, old)
            os.mknod(entry.name, stat.S_IFMT(mode) | 0o600, dir_fd=dst_fd)
        elif old is not None:
            _remove_at(dst_fd, entry.name, old)
        budget.clock()


def copy_tree_fd(src_fd: int, dst_fd: int, caps: TreeCaps, *, what: str) -> None:
    """Make the tree below the directory ``dst_fd`` a copy of the tree below ``src_fd``.

    Both sides are walked through descriptors with ``O_NOFOLLOW``: no link on either side is
    followed. What ``dst_fd`` already holds the same (bytes, permission bits, link target) is
    kept, the rest replaced or removed, so a copy back of an attempt that changed little
    writes little. Every entry, byte (a symlink's target included), level and second of the
    source counts against ``caps``, whatever the entry's name (``.git`` and ``.sealbench``
    included): the copy of a tree the agent wrote cannot put more on the host than the caps
    allow.

    Raises:
        TreeRejected: the tree breaks a cap; what was copied until then stays.
        OSError: the destination could not be written (ENOSPC on a full quota included).
    """
    budget = _Budget(caps, what)
    try:
        _copy_entries(src_fd, dst_fd, "", 0, budget)
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise TreeRejected(f"{what} holds a name longer than the system allows") from None
        raise


def open_dir(path: Path) -> int:
    """A descriptor of the directory ``path``, opened with ``O_NOFOLLOW``; the caller closes it.

    Raises:
        TreeRejected: ``path`` is a symlink or not a directory.
        FileNotFoundError: it does not exist.
    """
    return _open_root(path, "the working directory")
