"""A first number from a handful of files: `init`, a tasks file expanded by `pack seal`, and
`eval`, which runs the measured flow as the commands it stands for. Every run here is real:
the CLI in a subprocess, bubblewrap, pytest oracles."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import needs_bwrap
from sealbench.errors import PackError
from sealbench.importers.tasks_file import read_tasks_file
from sealbench.pack import check_pack

ROOT = Path(__file__).resolve().parents[1]
SEALBENCH = str(Path(sys.executable).parent / "sealbench")
Cli = Callable[..., tuple[int, str, str]]


def sealbench(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SEALBENCH, *argv], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, check=False)


def tutorial_block() -> str:
    """The block of the own-pack tutorial (docs/tutorials/own-pack.md)."""
    text = (ROOT / "docs" / "tutorials" / "own-pack.md").read_text(encoding="utf-8")
    m = re.search(r"^## A first number from three files\n\n```sh\n(.*?)^```$", text, re.S | re.M)
    assert m, "docs/tutorials/own-pack.md has no 'A first number from three files' block"
    return m.group(1)


@needs_bwrap
def test_the_toy_job_is_three_files_and_three_commands_to_a_verified_bundle(tmp_path: Path) -> None:
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "sealbench").symlink_to(SEALBENCH)
    block = tutorial_block()
    commands = [line for line in block.splitlines() if line.startswith("$S ")]
    assert len(commands) == 3
    script = tmp_path / "first.sh"
    script.write_text("set -euo pipefail\n" + block, encoding="utf-8")
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "toy").iterdir() if p.is_file()) == [
        "README.md", "agent.py", "pack.json", "tasks.toml"]  # pack.json is the seal's, derived
    out = proc.stdout
    assert "$ sealbench contract lock runs/toy-1.contract.json --run-id toy-1" in out
    assert out.index("contract lock") < out.index("$ sealbench run ")
    assert "1 of 1 task_pass on this locked run_id" in out
    assert "narration probe emitted no patch on 1 of 1 task(s)" in out
    assert "ok: bundle bundles/toy-1 of run toy-1 verifies" in out
    # eval runs each next step itself: the steps' own `next:` lines would only repeat it.
    assert "next: `sealbench contract lock" not in out and "next: `sealbench bundle" not in out
    # A run_id is used once.
    again = sealbench(tmp_path, "eval", "toy", "--agent", "python3 toy/agent.py {prompt_file}", "--run-id", "toy-1")
    assert again.returncode == 2 and "a run_id is used once" in again.stderr


@needs_bwrap
def test_eval_stops_at_the_first_refusal_and_says_where(tmp_path: Path) -> None:
    assert sealbench(tmp_path, "init", "toy").returncode == 0
    toml = tmp_path / "toy" / "tasks.toml"
    toml.write_text(toml.read_text().replace('solution = { "calc.py" = "def add(a, b):\\n    return a + b\\n" }',
                                             'solution = { "calc.py" = "def add(a, b):\\n    return 0\\n" }'))
    done = sealbench(tmp_path, "eval", "toy", "--agent", "python3 toy/agent.py {prompt_file}", "--run-id", "bad-1")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "eval stopped at `sealbench pack` (exit 3)" in done.stdout
    assert "$ sealbench contract new" not in done.stdout
    assert not (tmp_path / "runs" / "bad-1").exists()


def test_init_refuses_a_folder_that_holds_something(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "mine.txt").write_text("x")
    code, _, err = cli("init", tmp_path / "toy")
    assert code == 2 and "exists and is not an empty folder" in err


def test_seal_expands_a_tasks_file_and_keeps_the_hidden_test_rule(tmp_path: Path, cli: Cli) -> None:
    pack = tmp_path / "toy"
    assert cli("init", pack)[0] == 0
    code, out, err = cli("pack", "seal", pack)
    assert code == 0, err
    sealed = check_pack(pack)
    assert list(sealed.tasks) == ["fix-add"]
    assert (pack / "tasks" / "fix-add" / "hidden" / "test_calc.py").is_file()
    assert sealed.tasks["fix-add"].record.oracle_cmd == ["sealbench-pytest", "-q", "test_calc.py"]
    # An edited hidden test is refused at the next seal, as in a pack written out by hand.
    toml = pack / "tasks.toml"
    toml.write_text(toml.read_text().replace("add(2, 3) == 5", "add(2, 4) == 6"))
    code, _, err = cli("pack", "seal", pack)
    assert code == 3 and "the hidden tests changed since the seal" in err
    code, out, _ = cli("pack", "seal", pack, "--update")
    assert code == 0 and "fix-add: task.json, hidden/ changed" in out
    # A task the file no longer names leaves the layout.
    toml.write_text(toml.read_text().replace('id = "fix-add"', 'id = "fix-sum"'))
    assert cli("pack", "seal", pack)[0] == 0
    assert sorted(p.name for p in (pack / "tasks").iterdir()) == ["fix-sum"]


def test_a_tasks_file_names_the_task_and_field_it_refuses(tmp_path: Path) -> None:
    path = tmp_path / "tasks.toml"
    path.write_text('name = "toy"\n[[tasks]]\nid = "one"\nprompt = "p"\nworkspace = {}\nhidden = {}\n')
    with pytest.raises(PackError, match=r"task 'one': .*hidden"):
        read_tasks_file(path)
    path.write_text('name = "toy"\n[[tasks]]\nid = "one"\nprompt = "p"\nworkspace = {}\nhidden = {}\nextra = 1\n')
    with pytest.raises(PackError, match="extra"):
        read_tasks_file(path)


def test_tasks_jsonl_is_one_task_a_line_and_imports_too(tmp_path: Path, cli: Cli) -> None:
    folder = tmp_path / "lines"
    folder.mkdir()
    task = {"id": "one", "prompt": "Make f return 1.", "workspace": {"f.py": "def f():\n    return 0\n"},
            "hidden": {"test_f.py": "from f import f\n\ndef test_f():\n    assert f() == 1\n"},
            "solution": {"f.py": "def f():\n    return 1\n"}}
    (folder / "tasks.jsonl").write_text(json.dumps(task) + "\n\n" + json.dumps({**task, "id": "two"}) + "\n")
    code, _, err = cli("import", "tasks", folder / "tasks.jsonl", "-o", tmp_path / "imported")
    assert code == 0, err
    assert sorted(check_pack(tmp_path / "imported").tasks) == ["one", "two"]
    assert cli("pack", "seal", folder)[0] == 0
    assert check_pack(folder).manifest.name == "lines"
