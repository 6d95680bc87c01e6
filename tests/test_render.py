"""The run summary on a terminal says "no sandbox" when the agent ran without one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import make_contract, needs_bwrap

TASK = "t_03_rename_helper"


@needs_bwrap
def test_run_summary_says_no_sandbox_only_when_there_was_none(cli: Any, sealed_pack: Path, tmp_path: Path) -> None:
    for run_id, sandbox in (("unisolated", "none"), ("isolated", "bubblewrap")):
        contract = tmp_path / f"{run_id}.json"
        make_contract(sealed_pack, contract, task_ids=(TASK,), command="sh -c 'echo no change'", run_id=run_id)
        code, out, err = cli("run", contract, "--out", tmp_path / run_id, "--sandbox", sandbox, "--no-progress")
        assert code == 0, err
        said = "isolation: no sandbox (--sandbox none): the agent and the oracles ran unisolated"
        assert (said in out) == (sandbox == "none"), out
