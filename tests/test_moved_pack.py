"""A pack that moved after the lock: `run --pack PATH` finds it, checks it against the locked
digest and records where it was in the journal; without the flag the refusal names the
contract's pack.path and the flag; a different pack at PATH is refused. Real runs, real CLI.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from conftest import make_contract, needs_bwrap
from sealbench.pack import seal_pack

Cli = Callable[..., tuple[int, str, str]]
TASK = "t_11_fix_off_by_one"


def _moved(sealed_pack: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A locked contract whose pack was then moved away: (contract, the pack's new folder)."""
    contract = tmp_path / "contract.json"
    make_contract(sealed_pack, contract, task_ids=[TASK], run_id="moved-1", narration_probe=False)
    moved = tmp_path / "elsewhere" / "pack"
    moved.parent.mkdir()
    shutil.move(str(sealed_pack), moved)
    return contract, moved


@needs_bwrap
def test_a_moved_pack_runs_with_pack_and_the_journal_records_where(
        sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    contract, moved = _moved(sealed_pack, tmp_path)
    code, _, err = cli("run", contract, "--out", tmp_path / "refused", "--no-progress")
    assert code == 3
    assert "the contract's pack.path" in err and "--pack PATH" in err
    assert not (tmp_path / "refused" / "journal.jsonl").exists()

    run_dir = tmp_path / "run"
    code, out, err = cli("run", contract, "--out", run_dir, "--no-progress", "--pack", moved)
    assert code == 0, (out, err)
    first = json.loads((run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert first["kind"] == "run_started" and first["payload"]["pack_path"] == str(moved.resolve())
    # The same pack, so nothing about the measurement changed: it bundles and verifies.
    code, _, err = cli("bundle", run_dir, "--out", tmp_path / "bundles")
    assert code == 0, err
    code, out, err = cli("verify", tmp_path / "bundles" / "moved-1", "--pack", moved)
    assert code == 0, (out, err)


@needs_bwrap
def test_a_pack_with_another_digest_at_pack_is_refused(sealed_pack: Path, tmp_path: Path, cli: Cli) -> None:
    contract, moved = _moved(sealed_pack, tmp_path)
    other = tmp_path / "other"
    shutil.copytree(moved, other)
    prompt = other / "tasks" / TASK / "prompt.md"
    prompt.write_text(prompt.read_text(encoding="utf-8") + "\nAlso, be quick.\n", encoding="utf-8")
    seal_pack(other, update=True)
    code, _, err = cli("run", contract, "--out", tmp_path / "run", "--no-progress", "--pack", other)
    assert code == 3 and "not the contract's" in err and f"--pack {other}" in err
    assert not (tmp_path / "run" / "journal.jsonl").exists()
    code, _, err = cli("run", contract, "--out", tmp_path / "run", "--no-progress", "--pack", tmp_path / "nowhere")
    assert code == 3 and "no pack there" in err
