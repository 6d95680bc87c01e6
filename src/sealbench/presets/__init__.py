"""Agent presets: real agents installed by exact version, pinned in the contract, run in the sandbox.

A preset is a small TOML file in this folder (``<name>.toml``, format :class:`Preset`): where
the agent installs from and which version is pinned, the argv that runs it non-interactively,
the environment that keeps its configuration, history and caches out of the workspace and its
update checks, telemetry and price-list fetches off, the API style it speaks, where it writes
its transcript and how it says it ended.

``sealbench agents install NAME`` installs the agent into ``agents_dir()/NAME/VERSION/`` (a
virtual environment ``venv/`` for PyPI agents, an npm prefix ``npm/`` for node agents) beside a
copy of :mod:`.launch` and ``installed.json``, written last (an install without it is
unfinished and is redone), under a lock per version (``NAME/.VERSION.lock``): two installs of one
version at once end with one install. It installs in place, not in a folder renamed into place:
a virtual environment's scripts name its own path, and would break if moved. ``contract new --agent preset:NAME --model MODEL`` writes the
command, the mount of that folder (read-only in the sandbox) and an endpoint skeleton, and
locks the preset and version in ``agent.preset``; ``run`` reads the version actually installed
there and refuses, before any journal line, when it differs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import Field, ValidationError

from ..errors import ContractError, RunRefusal, UsageError
from ..formats import AgentPreset, AgentSpec, ApiStyle, Id, Model, ModelEndpoint, NonEmptyStr, ScoringContract
from ..model_stub import StubReply

HERE = Path(__file__).resolve().parent
ENV = "SEALBENCH_AGENTS_DIR"
LAUNCHER = "sealbench-launch.py"
INSTALLED = "installed.json"
PRIVATE_HOME = "/tmp/home"
"""The sandbox's HOME: a tmpfs of the attempt's own, outside the workspace, gone after it."""
# Every agent's configuration, caches and state land in the attempt's private home.
BASE_ENV = {
    "XDG_CONFIG_HOME": f"{PRIVATE_HOME}/.config",
    "XDG_CACHE_HOME": f"{PRIVATE_HOME}/.cache",
    "XDG_DATA_HOME": f"{PRIVATE_HOME}/.local/share",
    "XDG_STATE_HOME": f"{PRIVATE_HOME}/.local/state",
    "NO_COLOR": "1",
    "DO_NOT_TRACK": "1",
}
DEFAULT_BASE_URLS = {"openai-chat": "https://api.openai.com/v1", "openai-responses": "https://api.openai.com/v1",
                     "anthropic-messages": "https://api.anthropic.com"}
DEFAULT_KEY_ENVS = {"openai-chat": "OPENAI_API_KEY", "openai-responses": "OPENAI_API_KEY",
                    "anthropic-messages": "ANTHROPIC_API_KEY"}
ENDPOINT_NAMES = {"openai-chat": "openai", "openai-responses": "openai", "anthropic-messages": "anthropic"}


class PresetInstall(Model):
    """Where a preset's agent installs from."""

    registry: Literal["pypi", "npm"] = Field(description="pypi: a virtual environment; npm: an npm prefix.")
    package: NonEmptyStr = Field(description="The package's name in its registry.")
    version: NonEmptyStr = Field(description="The exact version pinned by default.")


class PresetRun(Model):
    """How a preset's agent runs in the sandbox."""

    argv: list[NonEmptyStr] = Field(min_length=1, description="The agent's argv: {bin} its install's bin folder, "
                                    "{model} the model, @prompt the prompt's text, @trace/ the trace folder, "
                                    "@{NAME} within an argument the variable's value in the sandbox (the "
                                    "gateway's URL), and the contract's placeholders ({prompt_file} ...).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment set for the agent ({model}: "
                                "the model).")
    transcript: NonEmptyStr = Field(description="The file the agent writes its transcript to, in the trace folder.")
    ending_json: str | None = Field(None, description="FILE:KEY.KEY: where in its transcript the agent "
                                    "says how it ended (in a JSON Lines file, its last line).")
    ending_text: list[str] = Field(default_factory=list, description="TEXT=LABEL: output that says how the "
                                   "agent ended (an edit that did not apply).")
    transcript_from_stdout: bool = Field(False, description="The agent prints its transcript on standard "
                                         "output: the launcher also writes that output to `transcript`.")
    make_dirs: list[NonEmptyStr] = Field(default_factory=list, description="Folders made before the agent "
                                         "starts (under the private home, for an agent that needs its "
                                         "configuration folder to exist).")


DEMO_FIXED: Final = "t_11_fix_off_by_one"
DEMO_MISSED: Final = "t_03_rename_helper"


class PresetDemo(Model):
    """Canned model replies for ``sealbench demo --agent NAME``, in the agent's own edit format,
    over two tasks of the sample pack. ``{workspace}`` in a reply's text or a tool call's
    arguments is the task's workspace (for agents whose tools take absolute paths)."""

    fix: list[StubReply] = Field(min_length=1, description=f"Replies that make the agent fix {DEMO_FIXED}.")
    miss: list[StubReply] = Field(min_length=1, description=f"Replies for {DEMO_MISSED} that do not fix it.")


class Preset(Model):
    """``presets/<name>.toml``: one agent, installed, pinned and run non-interactively."""

    preset_version: Literal[1] = Field(1, description="Format version of the preset file.")
    name: Id = Field(description="The preset's name; equals the file's stem.")
    description: NonEmptyStr = Field(description="One line for `agents list`.")
    api_style: ApiStyle = Field(description="The API the agent speaks to its model.")
    traps: list[str] = Field(default_factory=list, description="What would spoil a measurement, and how "
                             "the preset handles it.")
    install: PresetInstall
    run: PresetRun
    demo: PresetDemo | None = Field(None, description="Canned replies for `sealbench demo --agent NAME`.")


def preset_names() -> list[str]:
    """Every preset shipped with sealbench, sorted."""
    return sorted(p.stem for p in HERE.glob("*.toml"))


def load_preset(name: str) -> Preset:
    """Read ``presets/<name>.toml``.

    Raises:
        UsageError: no such preset (naming those there are).
        ContractError: the file does not parse or has unknown keys.
    """
    path = HERE / f"{name}.toml"
    if name not in preset_names():
        raise UsageError(f"no agent preset {name!r}; presets: {', '.join(preset_names())}")
    try:
        preset = Preset.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except (tomllib.TOMLDecodeError, ValidationError) as e:
        raise ContractError(f"{path.name}: not a preset: {e}") from None
    if preset.name != name:
        raise ContractError(f"{path.name}: names itself {preset.name!r}")
    return preset


def agents_dir(override: Path | None = None) -> Path:
    """Where agents are installed: ``override``, ``$SEALBENCH_AGENTS_DIR``,
    ``$XDG_CACHE_HOME/sealbench/agents`` or ``~/.cache/sealbench/agents``."""
    if override is not None:
        return override
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "sealbench" / "agents"


def install_root(name: str, version: str, base: Path | None = None) -> Path:
    """The folder of one installed version (mounted read-only into the sandbox)."""
    if "/" in version or version in ("", ".", ".."):
        raise UsageError(f"version {version!r} is not a version")
    return agents_dir(base) / name / version


def bin_dir(root: Path, registry: str) -> Path:
    return root / ("venv/bin" if registry == "pypi" else "npm/bin")


def installed_version(root: Path, registry: str, package: str) -> str | None:
    """The version of ``package`` actually present under ``root`` (read from the package's own
    metadata, not from what sealbench wrote), or None when it is not there."""
    if registry == "npm":
        try:
            data = json.loads((root / "npm/lib/node_modules" / package / "package.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        version = data.get("version") if isinstance(data, dict) else None
        return version if isinstance(version, str) else None
    wanted = _normalise(package)
    for meta in sorted(root.glob("venv/lib/python*/site-packages/*.dist-info/METADATA")):
        name = version = None
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Name:"):
                name = line.partition(":")[2].strip()
            elif line.startswith("Version:"):
                version = line.partition(":")[2].strip()
            elif not line:
                break
        if name is not None and _normalise(name) == wanted:
            return version
    return None


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@dataclass(frozen=True)
class Installed:
    """One installed version of a preset, as ``installed.json`` records it."""

    name: str
    version: str
    root: Path
    seconds: float
    bytes: int


def read_installed(root: Path) -> Installed | None:
    """The install at ``root``, or None when it is absent or unfinished."""
    try:
        data = json.loads((root / INSTALLED).read_text(encoding="utf-8"))
        return Installed(str(data["name"]), str(data["version"]), root, float(data["seconds"]), int(data["bytes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def list_installed(base: Path | None = None) -> list[Installed]:
    """Every finished install in the cache, by name and version."""
    root = agents_dir(base)
    found = [read_installed(d) for d in sorted(root.glob("*/*")) if d.is_dir()]
    return [i for i in found if i is not None]


def _tree_bytes(root: Path) -> int:
    """The bytes of the files under ``root``, each hard-linked file once (Claude Code's
    installer links its native binary into place)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, f))
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def install(name: str, version: str | None = None, base: Path | None = None,
            python: str | None = None) -> Installed:
    """Install preset ``name`` at ``version`` (default: its pin) from its registry, unless a
    finished install of that version is there already.

    Raises:
        UsageError: unknown preset.
        RunRefusal: the install failed (the tool's last lines of output are in the message) or
            the package installed reports another version.
    """
    preset = load_preset(name)
    version = version or preset.install.version
    root = install_root(name, version, base)
    done = read_installed(root)
    if done is not None:
        return done
    fd = _install_lock(root)
    try:
        return read_installed(root) or _install_locked(name, version, root, preset, python)
    finally:
        os.close(fd)


def _install_lock(root: Path) -> int:
    """The lock of one version's install (beside its folder, so it outlives a redo), taken;
    while another process holds it, says who and waits."""
    import fcntl

    root.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(root.parent / f".{root.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            print(f"waiting for {holder}, which installs {root.parent.name} {root.name} now ...", file=sys.stderr,
                  flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _install_locked(name: str, version: str, root: Path, preset: Preset, python: str | None) -> Installed:
    if root.exists():
        shutil.rmtree(root)  # an unfinished install (its process was killed): start again
    root.mkdir(parents=True)
    started = time.monotonic()
    spec = preset.install
    if spec.registry == "pypi":
        steps = [[python or sys.executable, "-m", "venv", str(root / "venv")],
                 [str(root / "venv/bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "--no-input", f"{spec.package}=={version}"]]
    else:
        if shutil.which("npm") is None:
            raise RunRefusal(f"installing {name} needs npm (Node.js) on PATH; install Node.js 18 or newer")
        steps = [["npm", "install", "--global", "--prefix", str(root / "npm"), "--no-fund", "--no-audit",
                  "--loglevel", "error", f"{spec.package}@{version}"]]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True, check=False,
                              env={**os.environ, "npm_config_update_notifier": "false"})
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            shutil.rmtree(root, ignore_errors=True)
            raise RunRefusal(f"installing {name} {version} failed: {shlex.join(step)} exited "
                             f"{proc.returncode}:\n{tail}")
    got = installed_version(root, spec.registry, spec.package)
    if got != version:
        shutil.rmtree(root, ignore_errors=True)
        raise RunRefusal(f"installing {name}: asked for {spec.package} {version}, the install has {got}")
    shutil.copyfile(HERE / "launch.py", root / LAUNCHER)
    seconds = time.monotonic() - started
    record = {"name": name, "version": version, "registry": spec.registry, "package": spec.package,
              "seconds": round(seconds, 1), "bytes": _tree_bytes(root)}
    tmp = root / (INSTALLED + ".tmp")
    tmp.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(root / INSTALLED)
    result = read_installed(root)
    assert result is not None
    return result


def command_for(preset: Preset, root: Path, model: str, python: str = "python") -> str:
    """The contract's command template for ``preset`` installed at ``root``: ``env`` with the
    preset's environment, the launcher, then the agent's argv."""
    env = {k: v.replace("{model}", model) for k, v in {**BASE_ENV, **preset.run.env}.items()}
    ending: list[str] = []
    if preset.run.ending_json:
        ending += ["--ending-json", preset.run.ending_json]
    for text in preset.run.ending_text:
        ending += ["--ending-text", text]
    for folder in preset.run.make_dirs:
        ending += ["--mkdir", folder]
    if preset.run.transcript_from_stdout:
        ending += ["--tee", preset.run.transcript]
    argv = [a.replace("{bin}", str(bin_dir(root, preset.install.registry))).replace("{model}", model)
            for a in preset.run.argv]
    words = ["env", *(f"{k}={v}" for k, v in sorted(env.items())), python, str(root / LAUNCHER), *ending, "--",
             *argv]
    # The runner splits the template like a shell before it fills {prompt_file} and the like.
    return shlex.join(words)


def agent_for(name: str, model: str, *, version: str | None = None, label: str | None = None,
              base: Path | None = None) -> tuple[AgentSpec, Preset]:
    """The contract's agent for an installed preset.

    Raises:
        UsageError: unknown preset.
        ContractError: that version is not installed (says how to install it).
    """
    preset = load_preset(name)
    version = version or preset.install.version
    root = install_root(name, version, base)
    if read_installed(root) is None:
        raise ContractError(f"agent preset {name} {version} is not installed; run: sealbench agents install {name} "
                            f"--version {version}")
    spec = AgentSpec(label=label or f"{name} {version} ({model})", command=command_for(preset, root, model),
                     mounts=[str(root)],
                     preset=AgentPreset(name=name, registry=preset.install.registry, package=preset.install.package,
                                        version=version))
    return spec, preset


def endpoint_for(preset: Preset, model: str, base_url: str | None = None, key_env: str | None = None) -> ModelEndpoint:
    """The model endpoint skeleton ``contract new`` writes for a preset: the user checks it
    (base URL, key variable, prices) before the lock."""
    style = preset.api_style
    return ModelEndpoint(name=ENDPOINT_NAMES[style], style=style, base_url=base_url or DEFAULT_BASE_URLS[style],
                         models=[model], key_env=key_env or DEFAULT_KEY_ENVS[style])


def check_installed(contract: ScoringContract) -> None:
    """Refuse a contract whose locked preset version is not the one installed in its mount.

    Raises:
        RunRefusal: the install is gone, or holds another version (naming both).
    """
    agent = contract.agent
    if agent is None or agent.preset is None:
        return
    locked = agent.preset
    if not agent.mounts:
        raise RunRefusal(f"the contract locks agent preset {locked.name} {locked.version} but mounts no install")
    root = Path(agent.mounts[0])
    got = installed_version(root, locked.registry, locked.package)
    if got is None:
        raise RunRefusal(f"agent preset {locked.name} {locked.version} is not installed at {root}; run: "
                         f"sealbench agents install {locked.name} --version {locked.version}")
    done = read_installed(root)
    if done is None or not (root / LAUNCHER).is_file():
        # Every attempt would fail on the missing launcher and the run_id would be spent.
        raise RunRefusal(f"the install of agent preset {locked.name} {locked.version} at {root} is unfinished "
                         f"(stopped before its {LAUNCHER if done is not None else INSTALLED} was written); run: "
                         f"sealbench agents install {locked.name} --version {locked.version} (it redoes it)")
    if done is not None and done.version != locked.version:
        raise RunRefusal(f"{root / INSTALLED} records version {done.version}, the contract locks {locked.version}")
    if got != locked.version:
        raise RunRefusal(f"the installed {locked.package} is version {got}, the contract locks {locked.version}; "
                         f"reinstall it with: sealbench agents install {locked.name} --version {locked.version} "
                         f"(after removing {root}), or write and lock a new contract for {got}")
