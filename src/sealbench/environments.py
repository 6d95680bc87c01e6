"""Sealed Python environments for repository tasks: specified in the pack, built with uv, mounted read-only.

A repository task's record may name the environment its tests run in
(:class:`sealbench.formats.EnvironmentSpec`): the Python version, the pinned requirements
(resolved at import from the repository's lock file, with their hashes), and the
repository's import roots. The spec is part of the task record, so the seal covers it: a
changed spec is a changed pack digest.

``sealbench env build PACK`` builds each environment the pack's tasks name, once per spec:

* where: ``<cache>/<32 hex digits of the spec's digest>/`` (the cache is
  ``$SEALBENCH_ENV_CACHE``, else ``$XDG_CACHE_HOME/sealbench/envs``, else
  ``~/.cache/sealbench/envs``), so tasks with the same spec share one environment and a
  second build of it is a cache hit;
* what: only pinned packages of the package index, as wheels. Every requirement line must
  be ``name==version`` (an environment marker allowed), with ``--hash=`` options on every
  line or on none (:func:`pinned_requirement`); a URL or path (``name @ file:///...``),
  ``-e``, any option (``--index-url``, ``-r``, ...), extras, a range or a wildcard is
  refused before anything runs, and so is a ``python`` that is not a version number (uv
  would run a path as an interpreter). The spec is the whole environment: its lines are
  installed without their dependencies (``--no-deps``), and never built from source
  (``--no-build``): a package with only a source distribution is refused by name, since a
  build runs the package's own code;
* how: ``uv venv`` on an interpreter of this machine (never one uv would download: what the
  sandbox runs must already be on this machine), then ``uv pip install`` of the requirements
  (``--require-hashes`` when the lines carry hashes), files copied out of uv's cache rather
  than linked to it, then compiled to checked-hash ``.pyc`` files (the sandbox cannot write
  them, and a grade would otherwise compile pytest each time). Once a package is installed
  the environment's interpreter is only ever started on the host with ``-S``: a wheel's
  ``.pth`` file runs at an interpreter's start, and runs only in the sandbox. This runs
  outside the sandbox, with network: it reads the package index;
* record: ``built.json``, written last (a directory without one is an unfinished build,
  removed and built again), with the spec's digest, the environment's tree digest (every
  file, link and mode of it, and the interpreter binary it runs), the interpreter's version
  and prefix, the installed packages, and the build's duration.

In the sandbox the environment is bound read-only at its host path (with its interpreter's
prefix when that is not under ``/usr``), its ``bin/`` comes first on ``PATH`` (so ``python``
is its interpreter, the one the harness's pytest runs on too), and :data:`REPO_MOUNT` is a
symlink to the command's own working directory: the workspace for the agent, the grading copy
for the oracle. The agent's commands get the import roots under it on ``PYTHONPATH``; the
oracle gets them from its sealed ``-o pythonpath=...`` (pytest adds them once the harness's
guard watches), and never ``PYTHONPATH``. The code the tests import is therefore the code
being graded. A spec whose ``install`` is ``"editable"`` also has each grading copy installed
by the repository's own build backend (pinned among the requirements), in the sandbox before
the oracle (:mod:`sealbench.repo_install`): its metadata joins the import roots on the
oracle's ``sys.path``, so ``importlib.metadata`` knows it as an editable install would.

``run``, ``pack validate`` and ``probe`` check every environment their tasks name before
anything runs (:func:`require`): a missing one is refused (build it), and one whose tree no
longer has the digest it was built with is refused as changed (remove its directory and build
it again). The journal pins each environment's tree digest, and a resume refuses one that
changed since.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .digest import digest_json, sha256_bytes, sha256_file
from .errors import EnvironmentRefused, HarnessError

if TYPE_CHECKING:
    from .formats import EnvironmentSpec
    from .pack import Pack

REPO_MOUNT: Final = "/sealbench/repo"
"""Where the repository under test is inside the sandbox: a link to the command's workdir."""
BUILT_FILE: Final = "built.json"
BUILT_FORMAT: Final = "sealbench-env-built/1"
_TAIL: Final = 1500
_SYSTEM_PREFIXES: Final = (Path("/usr"), Path("/bin"), Path("/lib"), Path("/lib64"))
_PYTHON_REQUEST: Final = re.compile(r"[0-9]+(\.[0-9]+){0,2}")
_HASH_OPTION: Final = re.compile(r"--hash=(sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})")
_NO_WHEEL: Final = re.compile(r"Wheels are required for `([^`]+)`|attempted to build `([^`]+)`")


def pinned_requirement(line: str) -> str:
    """``line`` as ``env build`` writes it, when it pins one package of the index to one version.

    Accepted: ``name==version``, an environment marker after ``;``, then ``--hash=ALGO:HEX``
    options. The line written is rebuilt from what was parsed, so nothing unparsed reaches uv.

    Raises:
        ValueError: why the line is refused (a URL or path, ``-e``, an option, extras, no
            exact version, a control character, anything that does not parse).
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in line):
        raise ValueError("it holds a control character (a line break would start a line of its own)")
    tokens = line.split()
    hashes: list[str] = []
    while tokens and tokens[-1].startswith("--hash="):
        if not _HASH_OPTION.fullmatch(tokens[-1]):
            raise ValueError(f"{tokens[-1][:80]!r} is not a sha256, sha384 or sha512 digest in hex")
        hashes.insert(0, tokens.pop())
    text = " ".join(tokens)
    if not text:
        raise ValueError("it names no package")
    if text.startswith("-"):
        raise ValueError(f"{tokens[0]!r} is an option or an editable install, not a pinned package of the index")
    if any(t.startswith("-") for t in tokens) or "#" in text:
        raise ValueError("it holds an option or a comment after the requirement")
    try:
        req = Requirement(text)
    except InvalidRequirement as e:
        raise ValueError(f"it is not a requirement ({str(e).splitlines()[0]})") from None
    if req.url is not None:
        raise ValueError("it names a URL or a path: only packages of the index are installed")
    if req.extras:
        raise ValueError("it asks for extras, which would bring unpinned packages")
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version or "+" in specs[0].version:
        raise ValueError("it does not pin one version (name==version)")
    try:
        Version(specs[0].version)
    except InvalidVersion:
        raise ValueError(f"{specs[0].version!r} is not a version") from None
    written = str(req)
    if re.search(r"[\s\"']-|\\", written):
        raise ValueError("its marker holds what a requirements file would read as an option or a continuation")
    return " ".join([written, *hashes])


def spec_problems(spec: EnvironmentSpec) -> list[str]:
    """Why ``env build`` refuses ``spec`` (empty: it does not): each refused line, by number."""
    problems: list[str] = []
    if not _PYTHON_REQUEST.fullmatch(spec.python):
        problems.append(f"python {spec.python[:80]!r} is not a version number (e.g. 3.11): uv would take a path or "
                        "a name for an interpreter to run")
    hashed = 0
    for n, line in enumerate(spec.requirements, 1):
        try:
            pinned_requirement(line)
        except ValueError as e:
            problems.append(f"requirement {n} {line[:200]!r}: {e}")
        hashed += "--hash=" in line
    if 0 < hashed < len(spec.requirements):
        problems.append(f"{hashed} of {len(spec.requirements)} requirement lines carry hashes: all or none must")
    return problems


def refuse_unpinned_spec(spec: EnvironmentSpec) -> None:
    """Refuse a spec ``env build`` would not install exactly as pinned (:func:`spec_problems`).

    Raises:
        EnvironmentRefused: naming the environment and every refused line.
    """
    problems = spec_problems(spec)
    if problems:
        raise EnvironmentRefused(
            f"environment {label(spec)} is refused; nothing was installed or run:\n  " + "\n  ".join(problems) +
            "\nenv build installs only pinned packages of the package index (name==version, as wheels). "
            "Re-import the pack, or pin the requirements in its spec (--env-spec at import).")


def cache_root() -> Path:
    """Where built environments live (module docstring)."""
    explicit = os.environ.get("SEALBENCH_ENV_CACHE")
    if explicit:
        return Path(explicit).absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).absolute() if xdg else Path.home() / ".cache"
    return base / "sealbench" / "envs"


def spec_digest(spec: EnvironmentSpec) -> str:
    """The spec's identity: the digest of its canonical JSON."""
    return digest_json(spec.model_dump(mode="json"))


def env_dir(spec: EnvironmentSpec, cache: Path | None = None) -> Path:
    """The directory ``spec`` is built in."""
    return (cache or cache_root()) / spec_digest(spec).removeprefix("sha256:")[:32]


def label(spec: EnvironmentSpec) -> str:
    """How messages name an environment: its name and the start of its digest."""
    return f"{spec.name} ({spec_digest(spec).removeprefix('sha256:')[:12]})"


@dataclass(frozen=True)
class BuiltEnv:
    """A built environment as ``built.json`` records it."""

    spec_sha256: str
    root: Path
    tree_sha256: str
    python_version: str
    base_prefix: Path
    packages: tuple[str, ...]
    build_s: float
    size_bytes: int

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def readonly(self) -> tuple[Path, ...]:
        """What the sandbox binds read-only for it: the environment, and its interpreter's
        prefix unless the sandbox binds that already."""
        prefix = self.base_prefix
        if any(prefix == p or p in prefix.parents for p in _SYSTEM_PREFIXES):
            return (self.root,)
        return (self.root, prefix)

    def record(self) -> dict[str, Any]:
        return {"format": BUILT_FORMAT, "spec_sha256": self.spec_sha256, "tree_sha256": self.tree_sha256,
                "python_version": self.python_version, "base_prefix": str(self.base_prefix),
                "packages": list(self.packages), "build_s": round(self.build_s, 3), "size_bytes": self.size_bytes}


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result, Path]]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames.sort()
        for name in sorted([*filenames, *[d for d in dirnames if (here / d).is_symlink()]]):
            path = here / name
            yield path.relative_to(root).as_posix(), path.lstat(), path


def tree_sha256(root: Path) -> tuple[str, int]:
    """The digest of an environment's tree, and its size in bytes.

    Every entry but ``built.json``: its path, kind and content (a link's text, not its
    target), plus the interpreter ``bin/python`` resolves to, by content: the same files
    over another Python binary are another environment.

    Raises:
        HarnessError: the tree holds something other than files, directories and links, or
            its interpreter cannot be read.
    """
    entries: list[list[str]] = []
    size = 0
    for rel, st, path in _walk(root):
        if rel == BUILT_FILE:
            continue
        if stat.S_ISLNK(st.st_mode):
            entries.append([rel, "l", sha256_bytes(os.readlink(path).encode("utf-8", "surrogateescape"))])
        elif stat.S_ISREG(st.st_mode):
            entries.append([rel, "x" if st.st_mode & 0o111 else "f", sha256_file(path)])
            size += st.st_size
        else:
            raise HarnessError(f"{path}: not a regular file, directory or link in an environment")
    try:
        interpreter = (root / "bin" / "python").resolve(strict=True)
        entries.append(["<interpreter>", str(interpreter), sha256_file(interpreter)])
    except OSError as e:
        raise HarnessError(f"{root}: its interpreter cannot be read ({e.strerror or e})") from None
    return digest_json(["sealbench-env-tree/1", entries]), size


def load(spec: EnvironmentSpec, cache: Path | None = None) -> BuiltEnv | None:
    """The built environment of ``spec`` as recorded, or None when it is not (fully) built."""
    root = env_dir(spec, cache)
    try:
        data = json.loads((root / BUILT_FILE).read_text(encoding="utf-8"))
        if data.get("format") != BUILT_FORMAT or data.get("spec_sha256") != spec_digest(spec):
            return None
        return BuiltEnv(spec_sha256=data["spec_sha256"], root=root, tree_sha256=data["tree_sha256"],
                        python_version=data["python_version"], base_prefix=Path(data["base_prefix"]),
                        packages=tuple(data["packages"]), build_s=float(data["build_s"]),
                        size_bytes=int(data["size_bytes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def uv_binary() -> str:
    """The uv executable: the one installed with sealbench (the ``uv`` package), else PATH's.

    Raises:
        EnvironmentRefused: there is none.
    """
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found is None:
        raise EnvironmentRefused("building environments needs uv: pip install uv (it comes with sealbench)")
    return found


def _run(argv: list[str], what: str, env: Mapping[str, str], cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(env), cwd=cwd, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip())[-_TAIL:]
        raise EnvironmentRefused(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _no_python_message(spec: EnvironmentSpec, detail: str) -> str:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (f"environment {label(spec)} asks for Python {spec.python}, which this machine does not have "
            f"(uv found none among the interpreters installed here; sealbench itself runs on {here}). "
            f"Install Python {spec.python}, or override the spec's python at import (--env-spec). uv said: {detail}")


def _site_packages(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("lib*/python*/site-packages") if p.is_dir() and not p.is_symlink())


def installed_packages(root: Path) -> tuple[str, ...]:
    """``name==version`` of every distribution in the environment, read from its files: its
    interpreter is not started (a package's ``.pth`` file would run)."""
    from importlib.metadata import distributions

    found = {f"{d.metadata['Name']}=={d.version}" for d in distributions(path=[str(p) for p in _site_packages(root)])
             if d.metadata["Name"]}
    return tuple(sorted(found, key=str.lower))


def _no_wheel_message(spec: EnvironmentSpec, said: str) -> str | None:
    found = _NO_WHEEL.search(said)
    if found is None:
        return None
    name = found.group(1) or found.group(2)
    return (f"environment {label(spec)}: {name} has no wheel for this machine at the pinned version, only a source "
            f"distribution. env build installs wheels only: building one runs the package's own code on this "
            f"machine. Pin a version of {name} that has a wheel (--env-spec at import). uv said: "
            f"{said.strip().splitlines()[-1]}")


def build(spec: EnvironmentSpec, *, cache: Path | None = None) -> tuple[BuiltEnv, bool]:
    """Build ``spec``'s environment unless it is built; (the environment, whether it was cached).

    Concurrent builds of one spec wait for each other (a lock beside the directory). A cached
    environment whose tree changed is refused, not rebuilt over.

    Raises:
        EnvironmentRefused: the spec is not pinned (:func:`refuse_unpinned_spec`, before
            anything runs), uv is missing, no interpreter here satisfies the spec's Python,
            a requirement cannot be installed (uv's message) or has no wheel, or a cached
            build changed.
    """
    refuse_unpinned_spec(spec)
    root = env_dir(spec, cache)
    with _locked(root.with_name(root.name + ".lock")):
        built = load(spec, cache)
        if built is not None:
            return check(spec, built), True
        if root.exists() or root.is_symlink():
            shutil.rmtree(root)  # an unfinished build (no built.json)
        started = time.monotonic()
        uv = uv_binary()
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        env["UV_PYTHON_DOWNLOADS"] = "never"
        # uv reads configuration from its working directory upwards: the cache's, never the caller's
        # (which may be a pack).
        where = root.parent
        try:
            _run([uv, "venv", "--quiet", "--no-project", "--python-preference", "only-system", "--python",
                  spec.python, str(root)], f"uv venv for {label(spec)}", env, where)
        except EnvironmentRefused as e:
            shutil.rmtree(root, ignore_errors=True)
            said = str(e)
            if any(m in said for m in ("No interpreter found", "not found", "Invalid version request")):
                raise EnvironmentRefused(_no_python_message(spec, str(e).splitlines()[-1])) from None
            raise
        python = str(root / "bin" / "python")
        try:
            requirements = root / "sealbench-requirements.txt"
            lines = [pinned_requirement(line) for line in spec.requirements]
            requirements.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
            hashed = bool(lines) and all("--hash=" in line for line in lines)
            if lines:
                try:
                    _run([uv, "pip", "install", "--quiet", "--python", python, "--link-mode", "copy", "--no-deps",
                          "--no-build", *(["--require-hashes"] if hashed else []), "-r", str(requirements)],
                         f"installing the requirements of {label(spec)}", env, where)
                except EnvironmentRefused as e:
                    raise EnvironmentRefused(_no_wheel_message(spec, str(e)) or str(e)) from None
                # Compiled now: the sandbox binds it read-only, so every oracle would compile pytest
                # again (about 1 s a grade). Checked-hash .pyc files: the same bytes in every build.
                # -S: no site, so no installed .pth file runs here.
                _run([python, "-S", "-I", "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "checked-hash",
                      *map(str, _site_packages(root))], f"compiling the packages of {label(spec)}", env, where)
            facts = json.loads(_run([python, "-S", "-I", "-c",
                                     "import json, sys; print(json.dumps({'version': sys.version.split()[0], "
                                     "'prefix': sys.base_prefix}))"],
                                    f"starting the interpreter of {label(spec)}", env, where))
            digest, size = tree_sha256(root)
            built = BuiltEnv(spec_sha256=spec_digest(spec), root=root, tree_sha256=digest,
                             python_version=facts["version"], base_prefix=Path(facts["prefix"]),
                             packages=installed_packages(root), build_s=time.monotonic() - started, size_bytes=size)
            tmp = root / f".{BUILT_FILE}.tmp-{os.getpid()}"
            tmp.write_text(json.dumps(built.record(), indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, root / BUILT_FILE)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return built, False


def check(spec: EnvironmentSpec, built: BuiltEnv) -> BuiltEnv:
    """``built`` if its tree still has the digest it was built with.

    Raises:
        EnvironmentRefused: it changed (a package installed, removed or edited since).
    """
    digest, _ = tree_sha256(built.root)
    if digest != built.tree_sha256:
        raise EnvironmentRefused(
            f"environment {label(spec)} in {built.root} changed since it was built (its tree digest is "
            f"{digest[:19]}..., built as {built.tree_sha256[:19]}...): something installed, removed or edited files "
            f"in it. Remove that directory and run `sealbench env build` again.")
    return built


def specs_of(pack: Pack, task_ids: Iterable[str] | None = None) -> dict[str, tuple[EnvironmentSpec, list[str]]]:
    """The environments ``task_ids`` (default: every task) name, by spec digest, with their tasks."""
    found: dict[str, tuple[EnvironmentSpec, list[str]]] = {}
    for tid in (task_ids if task_ids is not None else sorted(pack.tasks)):
        spec = pack.tasks[tid].record.environment
        if spec is not None:
            found.setdefault(spec_digest(spec), (spec, []))[1].append(tid)
    return found


def require(pack: Pack, task_ids: Iterable[str] | None = None, *, pinned: Mapping[str, str] | None = None,
            cache: Path | None = None) -> dict[str, BuiltEnv]:
    """Every environment the tasks name, built and unchanged, by spec digest.

    ``pinned`` (spec digest to tree digest, from a journal being resumed) must match too.

    Raises:
        EnvironmentRefused: one is not built, changed since it was built, or differs from
            the one the journal pinned; the message names it, its tasks and what to do.
    """
    out: dict[str, BuiltEnv] = {}
    for digest, (spec, tids) in specs_of(pack, task_ids).items():
        built = load(spec, cache)
        tasks = ", ".join(tids[:3]) + (f" and {len(tids) - 3} more" if len(tids) > 3 else "")
        if built is None:
            raise EnvironmentRefused(
                f"environment {label(spec)} of task {tasks} is not built (looked in {env_dir(spec, cache)}); "
                f"run `sealbench env build {pack.root}` first")
        out[digest] = check(spec, built)
    if pinned is not None:
        refuse_unpinned(pack, out, pinned)
    return out


def refuse_unpinned(pack: Pack, built: Mapping[str, BuiltEnv], pinned: Mapping[str, str]) -> None:
    """Refuse environments (checked by :func:`require`) that differ from the ones a journal pinned.

    Raises:
        EnvironmentRefused: one was rebuilt with other files since the run started.
    """
    specs = specs_of(pack)
    for digest, env in built.items():
        if digest in pinned and pinned[digest] != env.tree_sha256:
            spec, tids = specs[digest]
            tasks = ", ".join(tids[:3]) + (f" and {len(tids) - 3} more" if len(tids) > 3 else "")
            raise EnvironmentRefused(
                f"environment {label(spec)} of task {tasks} is not the one this run started with (the journal "
                f"pins {pinned[digest][:19]}..., it is now {env.tree_sha256[:19]}...): it was rebuilt with other "
                f"files. Resume where the original environment is, or start a new run.")


def pins(built: Mapping[str, BuiltEnv]) -> dict[str, str]:
    """What the journal pins: spec digest to tree digest."""
    return {digest: env.tree_sha256 for digest, env in sorted(built.items())}


def build_all(pack: Pack, *, cache: Path | None = None,
              say: Callable[[str], None] = print) -> list[tuple[EnvironmentSpec, BuiltEnv, bool, float]]:
    """``sealbench env build``: build every environment the pack names; one line each.

    Raises:
        EnvironmentRefused: see :func:`build`.
    """
    done = []
    specs = specs_of(pack)
    if not specs:
        say(f"{pack.root}: no task names an environment; nothing to build")
    for spec, tids in specs.values():
        started = time.monotonic()
        built, cached = build(spec, cache=cache)
        took = time.monotonic() - started
        mib = built.size_bytes / 2**20
        how = "cached" if cached else f"built in {took:.1f} s"
        say(f"{label(spec)}: {how}, Python {built.python_version}, {len(built.packages)} packages, "
            f"{mib:.1f} MiB, for {len(tids)} task{'s' if len(tids) != 1 else ''}; {built.root}")
        done.append((spec, built, cached, took))
    return done
