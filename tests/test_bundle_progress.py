"""verify, score and report show how far they are on a terminal, and nothing anywhere else;
a run's bar is drawn on stderr too, never into the summary on stdout.

Each command runs as the console script in a process of its own, its stderr a real
pseudo-terminal (so that it sees a terminal as a user's shell would give it), its stdout a pipe.
"""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sealbench.progress import Steps

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "bundles" / "made-by-5b8050d" / "demo-reference"
SEALBENCH = Path(sys.executable).parent / "sealbench"
pytestmark = pytest.mark.skipif(not SEALBENCH.exists(), reason="console script not installed (run through make test)")

_ESCAPE = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def on_a_terminal(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    """The command's exit code, stdout, and what it drew on its terminal (escapes removed)."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "SEALBENCH_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "120", "TERM": "xterm"}
    with subprocess.Popen([str(SEALBENCH), *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=terminal, env=env, close_fds=True) as proc:
        os.close(terminal)
        drawn = b""
        while True:
            try:
                piece = os.read(controller, 65536)
            except OSError:  # the terminal's last holder is gone
                break
            if not piece:
                break
            drawn += piece
        os.close(controller)
        assert proc.stdout is not None
        out = proc.stdout.read().decode()
        code = proc.wait(timeout=120)
    return code, out, _ESCAPE.sub(b"", drawn).decode(errors="replace")


def test_verify_on_a_terminal_shows_its_steps_and_prints_the_same_words(tmp_path: Path) -> None:
    bundle = Path(shutil.copytree(FIXTURE, tmp_path / "demo-reference"))
    code, out, drawn = on_a_terminal(tmp_path, "verify", str(bundle))
    assert code == 0, drawn
    assert "verify: hashing" in drawn and "verify: reading the journal (tasks finished)" in drawn, drawn
    quiet = subprocess.run([str(SEALBENCH), "verify", str(bundle)], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "SEALBENCH_DATA_DIR": str(tmp_path / "data")})
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr  # no terminal: nothing drawn
    assert out.splitlines()[0] == quiet.stdout.splitlines()[0]
    code, out, drawn = on_a_terminal(tmp_path, "verify", str(bundle), "--no-progress")
    assert code == 0 and drawn == "", drawn


def test_report_on_a_terminal_shows_verify_s_steps_then_its_own(tmp_path: Path) -> None:
    bundle = Path(shutil.copytree(FIXTURE, tmp_path / "demo-reference"))
    code, out, drawn = on_a_terminal(tmp_path, "report", str(bundle), "--out", str(tmp_path / "report"))
    assert code == 0, drawn
    for step in ("report: hashing", "report: reading the journal", "report: copying traces and patches",
                 "report: figures, report.md and report.html"):
        assert step in drawn, drawn
    assert out.startswith("wrote "), out
    assert (tmp_path / "report" / "report.md").is_file()


def test_score_of_a_journal_on_a_terminal_counts_its_tasks_and_prints_the_same_json(tmp_path: Path) -> None:
    bundle = Path(shutil.copytree(FIXTURE, tmp_path / "demo-reference"))
    contract = str(bundle / "scoring_contract.json")
    code, out, drawn = on_a_terminal(tmp_path, "score", contract, str(bundle), "--json")
    assert code == 0, drawn
    assert "score: reading the journal (tasks finished)" in drawn, drawn
    quiet = subprocess.run([str(SEALBENCH), "score", contract, str(bundle), "--json"], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "SEALBENCH_DATA_DIR": str(tmp_path / "data")})
    assert quiet.returncode == 0 and quiet.stderr == "" and out == quiet.stdout, quiet.stderr


def test_a_refused_verify_on_a_terminal_leaves_its_problems_readable(tmp_path: Path) -> None:
    bundle = Path(shutil.copytree(FIXTURE, tmp_path / "demo-reference"))
    (bundle / "rate.json").write_text("{}\n")
    code, _out, drawn = on_a_terminal(tmp_path, "verify", str(bundle))
    assert code == 4, drawn
    assert "rate.json: content differs from its sha256 in SHA256SUMS" in drawn, drawn


def test_steps_count_every_unit_and_draw_nothing_when_off(capsys: pytest.CaptureFixture[str]) -> None:
    steps = Steps(False, "verify")
    steps.step("hashing 300 files", 300)
    for _ in range(300):
        steps.advance()
    assert (steps.what, steps.done, steps.total) == ("hashing 300 files", 300, 300)
    steps.step("reading the journal", None)
    assert (steps.done, steps.total) == (0, None)
    steps.close()
    assert capsys.readouterr() == ("", "")


def test_a_run_s_bar_is_drawn_on_stderr_never_into_its_summary_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    from sealbench.progress import Progress

    bar = Progress(2, 0, True, "run")
    bar.update("task-a", "pass")
    bar.update("task-b", "fail")
    bar.close()
    out, err = capsys.readouterr()
    assert out == "", out  # `sealbench run ... > summary.txt` on a terminal: the file holds the summary only
    assert "run" in err and "2/2" in err, err
