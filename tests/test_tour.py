"""The README's five-minute tour, extracted from README.md and run verbatim in a new folder:
if the tour drifts from the code, this fails. The first-run tutorial
(docs/tutorials/first-run.md) holds the same block, word for word."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]


TUTORIAL = ROOT / "docs" / "tutorials" / "first-run.md"


def tour_block(page: Path = ROOT / "README.md") -> str:
    text = page.read_text(encoding="utf-8")
    m = re.search(r"^## A five-minute tour\n\n```sh\n(.*?)^```$", text, re.S | re.M)
    assert m, f"{page.name} has no five-minute tour code block"
    return m.group(1)


def test_the_first_run_tutorial_holds_the_readme_tour_word_for_word() -> None:
    assert tour_block(TUTORIAL) == tour_block()


@needs_bwrap
def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    # The tour runs from a checkout, after `make setup`: the same .venv/bin/sealbench and
    # src/ the reader has, and nothing else.
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "sealbench").symlink_to(Path(sys.executable).parent / "sealbench")
    (tmp_path / "src").symlink_to(ROOT / "src")
    script = tmp_path / "tour.sh"
    script.write_text("set -euo pipefail\nset -x\n" + tour_block(), encoding="utf-8")
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "5 of 5 task_pass" in out  # the example agent passes every task on its second attempt
    # The sample pack's caps leave 3x the grading time pack validate measured here: no warning.
    assert "leaves less than 3x" not in out, out
    # The probe's lines never call a task a fail: it asks only for a summary.
    probe = proc.stderr.split("sealbench probe", 1)[1].split("sealbench score", 1)[0]
    assert "changed the workspace" in probe and ": fail (" not in probe
    assert "bundles/my-agent-2026-11-30" in out and "tie" in out
    assert (tmp_path / "bundles" / "my-agent-2026-11-30-report" / "report.html").is_file()
