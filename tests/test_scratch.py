"""Nothing left behind: what a killed command left (named after its pid) is swept by the next.

Black-box: real ``sealbench`` processes are killed with SIGKILL while their scratch exists,
then the same command runs again, to completion, and nothing of the killed one remains.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SAMPLE, make_contract, needs_bwrap
from sealbench.runner import RunOptions, execute
from sealbench.scratch import TEMP_FILE, pid_alive, sweep, sweep_temp_files


def sealbench_exe() -> str:
    exe = Path(sys.executable).parent / "sealbench"
    return str(exe) if exe.exists() else ""


needs_exe = pytest.mark.skipif(not sealbench_exe(), reason="console script not installed (run through make test)")


def spawn(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sealbench_exe(), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_removes_only_what_dead_processes_left(tmp_path: Path) -> None:
    gone = dead_pid()
    assert not pid_alive(gone)
    dead = tmp_path / f".pack.json.tmp-{gone}-abc123"
    mine = tmp_path / f".pack.json.tmp-{os.getpid()}-abc123"
    other = tmp_path / ".pack.json.tmp-not-a-pid"
    for path in (dead, mine, other):
        path.write_text("half")
    link = tmp_path / f".x.tmp-{gone}-link"
    link.symlink_to(tmp_path / "elsewhere")
    assert sorted(sweep_temp_files(tmp_path)) == sorted([dead, link])
    assert mine.exists() and other.exists() and not link.is_symlink()
    assert sweep(tmp_path / "missing", TEMP_FILE) == []


def unsealed_pack(root: Path, n: int) -> Path:
    """n tasks with placeholder digests: sealing rewrites every task.json (atomically, fsynced)."""
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "t.txt").write_text("{task_prompt}\n{feedback}\n")
    (root / "pack.json").write_text(json.dumps({"pack_version": 1, "name": "leftovers"}))
    for i in range(n):
        d = root / "tasks" / f"task-{i:04d}"
        (d / "workspace").mkdir(parents=True)
        (d / "hidden").mkdir()
        (d / "workspace" / "mod.py").write_text(f"VALUE = {i}\n")
        (d / "hidden" / "check.py").write_text(f"import mod\nassert mod.VALUE == {i + 1}\n")
        (d / "prompt.md").write_text(f"Make VALUE {i + 1}.\n")
        (d / "task.json").write_text(json.dumps({
            "task_id": f"task-{i:04d}", "prompt_template_id": "t", "oracle_cmd": ["python", "check.py"],
            "hidden_tests_sha256": "pending-local-hash", "max_attempts": 1, "wall_clock_s": 10,
            "language": "python"}))
    return root


def half_written(root: Path) -> list[Path]:
    """Files and bundles being written (hidden names with .tmp or .partial), whoever left them."""
    return [p for p in root.rglob(".*") if ".tmp" in p.name or ".partial" in p.name]


@needs_exe
def test_killed_seal_leaves_half_written_files_that_the_next_seal_removes(tmp_path: Path) -> None:
    template = unsealed_pack(tmp_path / "template", 300)
    rng = random.Random(1130)
    for attempt in range(30):
        pack = tmp_path / f"pack{attempt}"
        shutil.copytree(template, pack)
        proc = spawn("pack", "seal", str(pack))
        time.sleep(rng.uniform(0.2, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if half_written(pack):
            break
    else:
        pytest.skip("no kill landed while a task.json was half-written")
    done = subprocess.run([sealbench_exe(), "pack", "seal", str(pack)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert half_written(pack) == []
    assert subprocess.run([sealbench_exe(), "pack", "check", str(pack)], capture_output=True).returncode == 0


@needs_bwrap
@needs_exe
def test_killed_bundle_leaves_a_partial_directory_that_the_next_bundle_removes(sealed_pack: Path,
                                                                                tmp_path: Path) -> None:
    ids = tuple(sorted(p.name for p in (sealed_pack / "tasks").iterdir()))
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=ids, command="builtin:reference", run_id="leftover",
                  narration_probe=False)
    run_dir = tmp_path / "run"
    execute(contract, run_dir, RunOptions(progress=False))
    out = tmp_path / "bundles"
    out.mkdir()
    for _ in range(20):
        proc = spawn("bundle", str(run_dir), "--out", str(out))
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if any(".partial" in name for name in os.listdir(out)):
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait()
        if half_written(out):
            break
        shutil.rmtree(out / "leftover", ignore_errors=True)  # finished before the kill: try again
    else:
        pytest.skip("no kill landed while the bundle was being assembled")
    done = subprocess.run([sealbench_exe(), "bundle", str(run_dir), "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["leftover"]
    assert subprocess.run([sealbench_exe(), "verify", str(out / "leftover")], capture_output=True).returncode == 0


@needs_bwrap
@needs_exe
def test_killed_validate_leaves_scratch_that_the_next_validate_removes(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(SAMPLE, pack)
    for task in (pack / "tasks").iterdir():
        if task.name != "t_11_fix_off_by_one":
            shutil.rmtree(task)
    assert subprocess.run([sealbench_exe(), "pack", "seal", str(pack)], capture_output=True).returncode == 0
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch_root)}
    proc = spawn("pack", "validate", str(pack), "--repeat", "1", "--no-progress", env=env)
    deadline = time.monotonic() + 120
    while not any(name.startswith("sealbench-validate-") for name in os.listdir(scratch_root)):
        assert proc.poll() is None and time.monotonic() < deadline, "validate never made its scratch"
        time.sleep(0.01)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = sorted(os.listdir(scratch_root))
    assert any(name.startswith(f"sealbench-validate-{proc.pid}-") for name in left), left
    done = subprocess.run([sealbench_exe(), "pack", "validate", str(pack), "--repeat", "1", "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(scratch_root)) == []
    assert half_written(pack) == []


MAKES_RAY_SCRATCH = """
import sys
from sealbench.scratch import temp_dir
d = temp_dir("ray-node")  # as a Ray node's runner makes its pack and workspaces folder
(d / "run" / "work").mkdir(parents=True)
(d / "run" / "work" / "f").write_text("x")
print(d, flush=True)
sys.stdin.read()
"""


def test_a_killed_ray_runner_s_scratch_is_swept_by_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray runner killed and replaced left its folder behind (38 of them after one run): the
    sweep did not know its kind. Every kind temp_dir makes is one the sweep knows."""
    import tempfile

    from sealbench.scratch import temp_dir

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", MAKES_RAY_SCRATCH], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    killed = procs[0]
    try:
        folders = [Path(p.stdout.readline().strip()) for p in procs if p.stdout is not None]
        assert all(f.is_dir() and f.parent == tmp_path for f in folders), folders
        killed.kill()
        killed.wait()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        mine = temp_dir("ray-node")
        assert not folders[0].exists(), "a dead runner's folder is swept"
        assert folders[1].is_dir() and mine.is_dir(), "a live one's is not"
        with pytest.raises(ValueError, match="not one the sweep knows"):
            temp_dir("something-new")
    finally:
        for p in procs:
            p.kill()
            p.wait()
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()
