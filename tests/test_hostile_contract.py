"""A bundle author's contract is text from outside the harness: shown inert everywhere.

The contract names the host, the agent's label and command, the endpoints' models and the
prices' currency; a bundle author writes them, and ``score``, ``show``, ``report`` and
``compare`` print them. ESC, BEL and the bidirectional overrides in them reached the terminal
and ``report.md`` raw.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import LOCK_TIME, SAMPLE, make_contract, needs_bwrap
from sealbench.contract import lock_contract
from sealbench.files import model_json, write_atomic
from sealbench.pack import load_pack, seal_pack
from sealbench.runner import RunOptions, execute
from sealbench.safe_text import inert
from sealbench.usage import cost_words

HOSTILE = "\x1b]0;owned\x07\x1b[2J\u202eexe.txt\u200f"
RAW = ("\x1b", "\x07", "\u202e", "\u200f")
TASK = "t_11_fix_off_by_one"


def hostile_run(root: Path, run_id: str) -> Path:
    """One task run under a contract whose every free-text field carries control characters."""
    pack = root / "pack"
    if not pack.exists():
        shutil.copytree(SAMPLE, pack)
        seal_pack(pack)
    contract_file = root / f"{run_id}.contract.json"
    draft = make_contract(pack, contract_file, task_ids=(TASK,), command="builtin:reference", run_id=None,
                          host=f"host {HOSTILE}", model_access=f"model {HOSTILE}", narration_probe=False)
    assert draft.agent is not None
    draft = draft.model_copy(update={"agent": draft.agent.model_copy(update={"label": f"label {HOSTILE}"})})
    write_atomic(contract_file, model_json(lock_contract(draft, run_id, LOCK_TIME, load_pack(pack))))
    execute(contract_file, root / "runs" / run_id, RunOptions(progress=False))
    return contract_file


@needs_bwrap
def test_exploit_a_hostile_contract_reaches_no_terminal_or_report_raw(
        tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    contracts = [hostile_run(tmp_path, run_id) for run_id in ("run-a", "run-b")]
    bundles = []
    for run_id in ("run-a", "run-b"):
        code, _, err = cli("bundle", tmp_path / "runs" / run_id, "--out", tmp_path / "bundles")
        assert code == 0, err
        bundles.append(tmp_path / "bundles" / run_id)
    shown: dict[str, str] = {}
    for name, argv in {"score": ("score", contracts[0], bundles[0]), "show": ("show", bundles[0]),
                       "show-task": ("show", bundles[0], TASK),
                       "report": ("report", bundles[0], "--out", tmp_path / "report"),
                       "compare": ("compare", bundles[0], bundles[1])}.items():
        _, out, err = cli(*argv)
        shown[name] = out + err
    shown["report.md"] = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    shown["report.html"] = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    for name, text in shown.items():
        assert not [c for c in RAW if c in text], (name, text[:3000])
    assert inert(HOSTILE) in shown["score"] and "\\x1b]0;owned\\x07" in shown["report.md"]


@pytest.mark.parametrize(("currency", "printed"), [
    ("USD", "1.0000 USD"),
    ("USD\x1b[31m", "1.0000 USD\\x1b[31m"),
    ("\u202eDSU", "1.0000 \\u202eDSU"),
])
def test_a_contracts_currency_is_printed_inert(currency: str, printed: str) -> None:
    assert cost_words(1.0, currency) == printed


