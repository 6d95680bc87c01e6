"""The copy ``benchmarks/safeguards_cost.py`` times against must still be cut from the code as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_safeguards_cost_cuts_apply_to_the_code_as_it_is(tmp_path: Path) -> None:
    """Each cut's old text occurs exactly once in its file and the cut file compiles: a refactor
    that moves a safeguard makes this fail, never a benchmark that times a copy still holding it."""
    code = ("import sys; from pathlib import Path; from safeguards_cost import cut_copy, CUTS; "
            "src = cut_copy(Path(sys.argv[1])); "
            "print(len(CUTS), sum(1 for c in CUTS if c.new in (src / 'sealbench' / c.file).read_text()))")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=BENCHMARKS, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    total, applied = proc.stdout.split()
    assert int(total) >= 7 and applied == total
