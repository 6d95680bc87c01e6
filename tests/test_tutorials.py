"""Every shell block of the tutorials (docs/tutorials/) is run by a test, so a tutorial that
drifts from the code fails. The line right after a block's closing fence says which test:

- ``<!-- run by tests/test_NAME.py -->``: that test runs the block (it must name the page);
- ``<!-- not run: REASON -->``: the block needs what a test cannot have (a real key, the
  reader's own data), and says why;
- nothing: this file runs the block, in a new folder holding the checkout's ``.venv/bin/sealbench``
  and ``src/``, as the reader would after ``make setup``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
RUN_BY = re.compile(r"<!-- run by (tests/test_\w+\.py) -->")
NOT_RUN = re.compile(r"<!-- not run: (\S.*\S) -->")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence
    text: str
    note: str  # the line after the closing fence

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The ```sh blocks of one page, each with the line that follows it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            note = lines[end + 1].strip() if end + 1 < len(lines) else ""
            out.append(Block(page, i + 1, "\n".join(lines[i + 1:end]) + "\n", note))
            i = end
        i += 1
    return out


ALL = [b for page in sorted(TUTORIALS.glob("*.md")) for b in blocks(page)]
UNMARKED = [b for b in ALL if not RUN_BY.fullmatch(b.note) and not NOT_RUN.fullmatch(b.note)]


def test_the_tutorials_have_shell_blocks_and_each_says_what_runs_it() -> None:
    assert len(ALL) >= 4
    assert any(RUN_BY.fullmatch(b.note) for b in ALL)
    bad = [f"{b}: {b.note!r}" for b in ALL if b.note.startswith("<!--")
           and not RUN_BY.fullmatch(b.note) and not NOT_RUN.fullmatch(b.note)]
    assert bad == [], "a note after a block must be `<!-- run by tests/test_NAME.py -->` or `<!-- not run: REASON -->`"


def test_each_test_named_as_running_a_block_exists_and_reads_that_page() -> None:
    wrong = []
    for b in ALL:
        m = RUN_BY.fullmatch(b.note)
        if m is None:
            continue
        test = ROOT / m.group(1)
        page = b.page.relative_to(ROOT).as_posix()
        if not test.is_file() or b.page.name not in test.read_text(encoding="utf-8"):
            wrong.append(f"{b}: {m.group(1)} does not exist or never names {page}")
    assert wrong == []


@needs_bwrap
@pytest.mark.parametrize("block", UNMARKED, ids=str)
def test_an_unmarked_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "sealbench").symlink_to(Path(sys.executable).parent / "sealbench")
    (tmp_path / "src").symlink_to(ROOT / "src")
    script = tmp_path / "block.sh"
    script.write_text("set -euo pipefail\nset -x\n" + block.text, encoding="utf-8")
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
