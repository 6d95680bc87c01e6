"""Slow: the four real task sets imported and validated end to end (make test-slow).

Every task that survives import must have a discriminating oracle: the reference passes and
the unchanged workspace fails, in the sandbox, and no trivial solution passes. Tasks left
out at import (hidden tests visible in the prompt) and tasks validation finds invalid are
named here, with the reason, so a change in either verdict is noticed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sealbench.importers import import_pack
from sealbench.validate import validate_pack

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# Their references return re.Match objects, whose truth the tests check: not plain data.
MATCH_OBJECTS = {f"Mbpp_{n}": "returned a re.Match, which is not plain data" for n in (737, 787, 794)}
SETS = [
    ("humaneval", "humaneval/HumanEval.jsonl.gz", 163, {"HumanEval_87"}, {}),
    ("humanevalplus", "humanevalplus/HumanEvalPlus-OriginFmt.jsonl.gz", 163, {"HumanEval_32"}, {}),
    ("mbpp", "mbpp/sanitized-mbpp.json", 427, set(),
     {"Mbpp_404": "passes a trivial solution (returns its first argument)", **MATCH_OBJECTS}),
    ("mbppplus", "mbppplus/MbppPlus-OriginFmt.jsonl.gz", 378, set(),
     {"Mbpp_255": "returned more than 16000000 values", **MATCH_OBJECTS}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "rel", "count", "left_out", "invalid"), SETS, ids=[s[0] for s in SETS])
def test_every_imported_oracle_discriminates(tmp_path: Path, kind: str, rel: str, count: int,
                                             left_out: set[str], invalid: dict[str, str]) -> None:
    source = DATA / rel
    if not source.is_file():
        pytest.skip(f"{source} is absent: the real task data lives in ../shared/data beside the project")
    pack = import_pack(kind, source, tmp_path / kind)
    assert len(pack.tasks) == count
    for tid in left_out:
        assert tid not in pack.tasks and tid in pack.manifest.description
    validity = validate_pack(tmp_path / kind, repeat=1, jobs=2, progress=False)
    found = {tid: ev.reason or "" for tid, ev in validity.tasks.items() if not ev.valid}
    assert set(found) == set(invalid), found
    for tid, reason in invalid.items():
        assert reason in found[tid], found[tid]
    # The empty change fails everywhere; the reference passes wherever its results are plain data.
    assert not any(any(ev.empty_change_passes) for ev in validity.tasks.values())
    assert all(all(ev.reference_passes) for tid, ev in validity.tasks.items() if "reference fails" not in found.get(tid, ""))
