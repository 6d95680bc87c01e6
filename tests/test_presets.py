"""Agent presets: the shipped files, the install cache, the locked version and its refusal,
the contract's new field, and the launcher that records how the agent says it ended.

Fast: no agent is installed from a registry here (a fake install has the layout and the
package metadata a real one has). The real agents run in tests/test_agents_e2e.py (make
test-agents).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import LOCK_TIME, needs_bwrap
from sealbench.contract import contract_digest, load_contract, lock_contract, new_contract
from sealbench.errors import RunRefusal, UsageError
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentPreset, AgentSpec
from sealbench.pack import load_pack
from sealbench.presets import (
    HERE,
    INSTALLED,
    LAUNCHER,
    PRIVATE_HOME,
    agents_dir,
    install_root,
    installed_version,
    list_installed,
    load_preset,
    preset_names,
    read_installed,
)
from sealbench.presets.launch import Options, parse_options
from sealbench.runner import RunOptions, execute

TASK = "t_11_fix_off_by_one"


def fake_install(base: Path, name: str, version: str, *, package_version: str | None = None,
                 finished: bool = True) -> Path:
    """The layout ``agents install`` leaves, with the package's own metadata saying
    ``package_version`` (default: ``version``) and a stand-in for the agent's executable."""
    preset = load_preset(name)
    root = install_root(name, version, base)
    if preset.install.registry == "pypi":
        dist = root / "venv/lib/python3.11/site-packages" / f"{preset.install.package.replace('-', '_')}-x.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {preset.install.package}\n"
                                       f"Version: {package_version or version}\n\nbody\n")
        (root / "venv/bin").mkdir(parents=True)
    else:
        pkg = root / "npm/lib/node_modules" / preset.install.package
        pkg.mkdir(parents=True)
        (pkg / "package.json").write_text(json.dumps({"name": preset.install.package,
                                                      "version": package_version or version}))
    (root / LAUNCHER).write_bytes((HERE / "launch.py").read_bytes())
    if finished:
        (root / INSTALLED).write_text(json.dumps({"name": name, "version": version, "registry":
                                                  preset.install.registry, "package": preset.install.package,
                                                  "seconds": 1.0, "bytes": 10}))
    return root


# --- the shipped presets --------------------------------------------------------------------


def test_every_shipped_preset_loads_pins_an_exact_version_and_keeps_its_state_out_of_the_workspace() -> None:
    assert {"mini-swe-agent", "aider", "codex", "claude-code"} <= set(preset_names())
    for name in preset_names():
        preset = load_preset(name)
        assert preset.name == name
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", preset.install.version), preset.install.version
        argv = " ".join(preset.run.argv)
        # The transcript goes to the trace folder, never the workspace.
        assert f"@trace/{preset.run.transcript}" in argv or preset.run.transcript_from_stdout
        # Every path the preset names for the agent's own state is in the attempt's private home.
        for value in [*preset.run.env.values(), *preset.run.argv]:
            if value.startswith("/"):
                assert value.startswith(PRIVATE_HOME + "/"), (name, value)
        assert preset.run.ending_json or preset.run.ending_text, f"{name}: how does it say it ended?"


def test_unknown_preset_is_refused_naming_those_there_are() -> None:
    with pytest.raises(UsageError, match="mini-swe-agent"):
        load_preset("no-such-agent")


def test_presets_ship_as_package_data() -> None:
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"presets/*.toml"' in text


# --- the install cache ----------------------------------------------------------------------


def test_install_cache_is_outside_the_project_and_overridable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SEALBENCH_AGENTS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert agents_dir() == tmp_path / "xdg" / "sealbench" / "agents"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert agents_dir() == Path.home() / ".cache" / "sealbench" / "agents"
    monkeypatch.setenv("SEALBENCH_AGENTS_DIR", str(tmp_path / "mine"))
    assert install_root("aider", "0.86.2") == tmp_path / "mine" / "aider" / "0.86.2"
    with pytest.raises(UsageError):
        install_root("aider", "../../etc")


def test_install_cache_layout_lists_finished_installs_only(tmp_path: Path) -> None:
    done = fake_install(tmp_path, "mini-swe-agent", "2.4.6")
    fake_install(tmp_path, "aider", "0.86.2", finished=False)
    assert [(i.name, i.version, i.root) for i in list_installed(tmp_path)] == [("mini-swe-agent", "2.4.6", done)]
    assert read_installed(install_root("aider", "0.86.2", tmp_path)) is None
    assert installed_version(done, "pypi", "mini_swe_agent") == "2.4.6"  # names compare normalised
    assert installed_version(done, "pypi", "aider-chat") is None


def test_agents_list_shows_presets_pins_and_what_is_installed(
        cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEALBENCH_AGENTS_DIR", str(tmp_path))
    fake_install(tmp_path, "mini-swe-agent", "2.4.5")
    code, out, _ = cli("agents", "list")
    assert code == 0
    mini = next(line for line in out.splitlines() if "mini-swe-agent " in line)
    assert "mini-swe-agent==2.4.6" in mini and "installed: 2.4.5" in mini
    assert "not installed" in next(line for line in out.splitlines() if line.strip().startswith("aider "))


# --- the contract ---------------------------------------------------------------------------


def test_contract_without_a_preset_has_no_preset_key_and_keeps_its_digest(sealed_pack: Path, tmp_path: Path) -> None:
    agent = AgentSpec(label="a", command="python agent.py")
    contract, _ = new_contract(load_pack(sealed_pack), tmp_path / "c.json", [TASK], host="h", agent=agent)
    assert "preset" not in json.loads(model_json(contract))["agent"]
    # The digest of a contract written before the field, by hand: the same bytes, the same digest.
    body = contract.model_dump(mode="json", exclude={"contract_sha256", "flagged_pass"})
    assert "preset" not in body["agent"]
    with_preset = contract.model_copy(update={"agent": agent.model_copy(update={"preset": AgentPreset(
        name="aider", registry="pypi", package="aider-chat", version="0.86.2")})})
    assert contract_digest(with_preset) != contract_digest(contract)
    assert json.loads(model_json(with_preset))["agent"]["preset"]["version"] == "0.86.2"


def test_contract_new_with_a_preset_writes_command_mounts_lock_and_endpoint_skeleton(
        cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch, sealed_pack: Path,
        tmp_path: Path) -> None:
    monkeypatch.setenv("SEALBENCH_AGENTS_DIR", str(tmp_path / "agents"))
    out = tmp_path / "c.json"
    code, _, err = cli("contract", "new", sealed_pack, "-o", out, "--agent", "preset:aider", "--model", "gpt-x",
                       "--host", "h")
    assert code == 3 and "sealbench agents install aider --version 0.86.2" in err
    root = fake_install(tmp_path / "agents", "aider", "0.86.2")
    code, stdout, err = cli("contract", "new", sealed_pack, "-o", out, "--agent", "preset:aider", "--model", "gpt-x",
                            "--host", "h", "--model-key-env", "MY_KEY")
    assert code == 0, err
    assert "check model_endpoints" in stdout
    contract = load_contract(out)
    assert contract.agent is not None and contract.agent.preset is not None
    assert (contract.agent.preset.name, contract.agent.preset.version) == ("aider", "0.86.2")
    assert contract.agent.mounts == [str(root)]
    assert f"{root}/{LAUNCHER}" in contract.agent.command and "openai/gpt-x" in contract.agent.command
    assert "{prompt_file}" in contract.agent.command
    assert [(e.style, e.models, e.key_env) for e in contract.model_endpoints or []] == [
        ("openai-chat", ["gpt-x"], "MY_KEY")]
    code, _, err = cli("contract", "new", sealed_pack, "-o", out, "--force", "--agent", "preset:aider", "--host", "h")
    assert code == 2 and "--model" in err


# --- the locked version ---------------------------------------------------------------------


@needs_bwrap
def test_exploit_installed_version_changed_after_lock_is_refused_before_any_journal_line(
        monkeypatch: pytest.MonkeyPatch, sealed_pack: Path, tmp_path: Path) -> None:
    """Someone upgrades the agent in place after the lock: the run would measure another agent."""
    from sealbench.presets import agent_for, endpoint_for

    monkeypatch.setenv("SEALBENCH_AGENTS_DIR", str(tmp_path / "agents"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    root = fake_install(tmp_path / "agents", "mini-swe-agent", "2.4.6")
    agent, preset = agent_for("mini-swe-agent", "gpt-x")
    pack = load_pack(sealed_pack)
    contract_file = tmp_path / "c.json"
    contract, _ = new_contract(pack, contract_file, [TASK], host="h", agent=agent, oracle_validity="unavailable")
    contract = contract.model_copy(update={"model_endpoints": [endpoint_for(preset, "gpt-x")]})
    write_atomic(contract_file, model_json(lock_contract(contract, "pinned", LOCK_TIME, pack)))
    meta = next(root.glob("venv/lib/*/site-packages/*.dist-info/METADATA"))
    meta.write_text(meta.read_text().replace("Version: 2.4.6", "Version: 2.5.0"))
    run_dir = tmp_path / "run"
    with pytest.raises(RunRefusal, match=r"version 2\.5\.0, the contract locks 2\.4\.6"):
        execute(contract_file, run_dir, RunOptions(progress=False))
    assert not (run_dir / "journal.jsonl").exists()
    # The install removed altogether: refused too, saying how to install it.
    import shutil

    shutil.rmtree(root)
    with pytest.raises(RunRefusal, match=re.escape("sealbench agents install mini-swe-agent --version 2.4.6")):
        execute(contract_file, run_dir, RunOptions(progress=False))
    assert not (run_dir / "journal.jsonl").exists()


# --- the launcher ---------------------------------------------------------------------------


def _launch(tmp_path: Path, script: str, *flags: str, args: tuple[str, ...] = ("@prompt", "@trace/out.json"),
            env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    trace = tmp_path / "trace"
    prompt = tmp_path / "prompt.md"
    prompt.write_text("fix the thing")
    agent = tmp_path / "agent.py"
    agent.write_text(script)
    proc = subprocess.run([sys.executable, str(HERE / "launch.py"), *flags, "--", sys.executable, str(agent),
                           *args], capture_output=True, text=True, timeout=60,
                          env={"SEALBENCH_TRACE_DIR": str(trace), "SEALBENCH_PROMPT_FILE": str(prompt),
                               "PATH": "/usr/bin:/bin", **(env or {})})
    return proc, trace


def test_agent_that_prints_its_transcript_gets_it_in_the_trace_folder_and_its_last_event_read(
        tmp_path: Path) -> None:
    # Codex CLI and Claude Code: JSON Lines on stdout, a URL from the environment in an
    # argument, a configuration folder that must exist before they start.
    home = tmp_path / "home" / ".codex"
    script = ("import json, os, sys\nassert os.path.isdir(sys.argv[2]), sys.argv[2]\n"
              "print(json.dumps({'type': 'turn.started', 'url': sys.argv[1]}))\n"
              "print(json.dumps({'type': 'turn.failed'}))\n")
    proc, trace = _launch(tmp_path, script, "--ending-json", "events.jsonl:type", "--mkdir", str(home),
                          "--tee", "events.jsonl", args=('base_url="@{GATEWAY_URL}/v1" @{UNSET}.', str(home)),
                          env={"GATEWAY_URL": "http://127.0.0.1:7700/openai"})
    assert proc.returncode == 0, proc.stderr
    assert (trace / "events.jsonl").read_text() == proc.stdout  # passed through and written, byte for byte
    first = json.loads(proc.stdout.splitlines()[0])
    assert first["url"] == 'base_url="http://127.0.0.1:7700/openai/v1" .'
    assert json.loads((trace / "sealbench-ending.json").read_text()) == {
        "exit_code": 0, "ending": "turn.failed", "said": []}


def test_agent_that_exits_0_at_its_step_limit_is_recorded_as_it_says(tmp_path: Path) -> None:
    script = ("import json, sys\nassert sys.argv[1] == 'fix the thing'\n"
              "json.dump({'info': {'exit_status': 'LimitsExceeded'}}, open(sys.argv[2], 'w'))\nprint('bye')\n")
    proc, trace = _launch(tmp_path, script, "--ending-json", "out.json:info.exit_status")
    assert proc.returncode == 0 and "bye" in proc.stdout
    assert json.loads((trace / "sealbench-ending.json").read_text()) == {
        "exit_code": 0, "ending": "LimitsExceeded", "said": []}
    assert "the agent reports: status LimitsExceeded (exit 0)" in proc.stderr


def test_agent_whose_edit_did_not_apply_but_exits_0_is_recorded_as_it_says(tmp_path: Path) -> None:
    script = "import sys\nprint('# 1 SEARCH/REPLACE block failed to match!', file=sys.stderr)\nsys.exit(3)\n"
    proc, trace = _launch(tmp_path, script, "--ending-text", "failed to match=edit did not apply",
                          "--ending-text", "never printed=other")
    assert proc.returncode == 3  # the agent's own exit code passes through
    assert json.loads((trace / "sealbench-ending.json").read_text())["said"] == ["edit did not apply"]


# --- installs that stop or race ------------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize("stopped", ["before-installed-json", "before-the-launcher"])
def test_exploit_install_killed_midway_is_refused_before_any_journal_line(
        monkeypatch: pytest.MonkeyPatch, sealed_pack: Path, tmp_path: Path, stopped: str) -> None:
    """An install killed after pip wrote the package's metadata: the version reads right, but
    every attempt would fail on the missing launcher and spend the run_id."""
    from sealbench.presets import agent_for, endpoint_for

    monkeypatch.setenv("SEALBENCH_AGENTS_DIR", str(tmp_path / "agents"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    root = fake_install(tmp_path / "agents", "mini-swe-agent", "2.4.6")
    agent, preset = agent_for("mini-swe-agent", "gpt-x")
    pack = load_pack(sealed_pack)
    contract_file = tmp_path / "c.json"
    contract, _ = new_contract(pack, contract_file, [TASK], host="h", agent=agent, oracle_validity="unavailable")
    contract = contract.model_copy(update={"model_endpoints": [endpoint_for(preset, "gpt-x")]})
    write_atomic(contract_file, model_json(lock_contract(contract, "pinned", LOCK_TIME, pack)))
    (root / (INSTALLED if stopped == "before-installed-json" else LAUNCHER)).unlink()
    run_dir = tmp_path / "run"
    with pytest.raises(RunRefusal, match=re.escape("is unfinished") + ".*" +
                       re.escape("sealbench agents install mini-swe-agent --version 2.4.6")):
        execute(contract_file, run_dir, RunOptions(progress=False))
    assert not (run_dir / "journal.jsonl").exists()


def _tiny_wheel(folder: Path, package: str, version: str) -> Path:
    """A wheel of ``package`` with only its metadata: pip installs it offline in a moment."""
    import base64
    import hashlib
    import zipfile

    dist = f"{package.replace('-', '_')}-{version}"
    files = {f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(text.encode())}\n" for name, text in files.items()) + f"{dist}.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            z.writestr(name, text)
    return wheel


def test_two_installs_of_one_version_at_once_end_with_one_install(tmp_path: Path) -> None:
    """Two `agents install` of one preset at once both failed ("Directory not empty") and left
    no install; the second now waits for the first, saying for whom, and finds its install."""
    wheels = tmp_path / "wheels"
    _tiny_wheel(wheels, "mini-swe-agent", "0.0.1")
    env = {**__import__("os").environ, "SEALBENCH_AGENTS_DIR": str(tmp_path / "agents"), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(wheels)}
    argv = [sys.executable, "-c", "import sys; from sealbench.cli import main; sys.exit(main())",
            "agents", "install", "mini-swe-agent", "--version", "0.0.1"]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert any("waiting for pid" in err for _out, err in results), results
    root = install_root("mini-swe-agent", "0.0.1", tmp_path / "agents")
    done = read_installed(root)
    assert done is not None and done.version == "0.0.1" and (root / LAUNCHER).is_file()
    assert installed_version(root, "pypi", "mini-swe-agent") == "0.0.1"
    assert [(i.name, i.version) for i in list_installed(tmp_path / "agents")] == [("mini-swe-agent", "0.0.1")]


def test_an_install_killed_midway_is_redone_by_the_next(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _tiny_wheel(wheels, "mini-swe-agent", "0.0.1")
    env = {**__import__("os").environ, "SEALBENCH_AGENTS_DIR": str(tmp_path / "agents"), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(wheels)}
    argv = [sys.executable, "-c", "import sys; from sealbench.cli import main; sys.exit(main())",
            "agents", "install", "mini-swe-agent", "--version", "0.0.1"]
    root = install_root("mini-swe-agent", "0.0.1", tmp_path / "agents")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    import os
    import signal
    import time

    deadline = time.monotonic() + 120
    while not (root / "venv/bin/python").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the installer and its venv / pip children
    proc.wait()
    assert read_installed(root) is None
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert read_installed(root) is not None and (root / LAUNCHER).is_file()


@pytest.mark.parametrize(("opts", "options"), [
    ([], Options()),
    (["--ending-json", "out.json:info.exit_status", "--tee", "log.jsonl"],
     Options(ending_json="out.json:info.exit_status", tee="log.jsonl")),
    (["--mkdir", "/a", "--mkdir", "/b"], Options(dirs=("/a", "/b"))),
    (["--ending-text", "Done=done", "--ending-text", "gave up"], Options(texts=(("Done", "done"), ("gave up", "gave up")))),
    (["--tee", "a", "--tee", "b"], Options(tee="b")),
    (["--unknown", "x", "--tee", "t"], Options(tee="t")),
])
def test_the_launcher_s_options_are_flag_value_pairs(opts: list[str], options: Options) -> None:
    assert parse_options(opts) == options
