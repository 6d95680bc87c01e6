"""sealbench show: why each task ended as it did, from a run directory or a bundle.

Runs are real (the sample pack, agents in the bubblewrap sandbox); the bundles are the
committed fixtures, copied before any is edited.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import make_contract, needs_bwrap
from sealbench import cli as cli_module
from sealbench import show
from sealbench.report import write_report
from sealbench.runner import RunOptions, execute

FIXTURE = Path(__file__).parent / "fixtures" / "bundles" / "made-by-5b8050d" / "demo-two-attempts"
CSV = "csv-split-001"
TASK = "t_11_fix_off_by_one"

# An agent that changes nothing, says why on stderr, and exits 3.
GIVES_UP = "sh -c 'echo starting; echo \"cannot reach the model: connection refused\" >&2; exit 3'"
# An agent whose stderr tries to take over the reader's terminal: clear it, retitle it,
# and hide a line by moving the cursor back over it.
ESCAPES = ("sh -c 'printf \"\\033]0;pwned\\007\\033[2J\\033[1A\\rall tests passed\\n\" >&2; "
           "echo \"<script>alert(1)</script>\" >&2; echo x >> README.md; exit 0'")


def _run(pack: Path, tmp_path: Path, command: str, name: str, **kw: object) -> Path:
    contract = tmp_path / f"{name}.json"
    make_contract(pack, contract, task_ids=[TASK], command=command, run_id=f"show-{name}", **kw)
    run_dir = tmp_path / name
    execute(contract, run_dir, RunOptions(progress=False))
    return run_dir


@needs_bwrap
def test_an_agent_that_gives_up_is_named_with_its_exit_code_and_last_stderr_line(
        sealed_pack: Path, tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    run_dir = _run(sealed_pack, tmp_path, GIVES_UP, "gives-up")
    code, out, _ = cli("show", run_dir)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith(TASK))
    # An agent that exits non-zero is graded even with nothing changed: a fail, whose cause is
    # that nothing changed, then how the agent ended.
    assert " fail " in row and "the agent changed nothing; the agent ended with exit code 3" in row
    assert "exit code 3" in row and "cannot reach the model: connection refused" in row
    code, out, _ = cli("show", run_dir, TASK)
    assert code == 0
    assert "stdout: 9 bytes:" in out and "| starting" in out
    assert "| cannot reach the model: connection refused" in out
    assert "patch: empty (nothing changed)" in out
    # score prints the summary run printed, pointing here.
    code, out, _ = cli("score", tmp_path / "gives-up.json", run_dir)
    assert code == 0 and f"why 1 task(s) did not pass (sealbench show {run_dir} TASK tells a task's story):" in out
    assert "exit code 3; its last output: cannot reach the model: connection refused" in out
    assert "0 of 1 task_pass" in out and "Wilson 95% interval" in out


@needs_bwrap
def test_agent_output_with_terminal_escapes_is_shown_inert(
        sealed_pack: Path, tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    run_dir = _run(sealed_pack, tmp_path, ESCAPES, "escapes")
    for argv in (("show", run_dir), ("show", run_dir, TASK)):
        code, out, _ = cli(*argv)
        assert code == 0
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[1A\\x0dall tests passed" in out
    # The report's page of the task: escaped for HTML and inert as well.
    _, html_path = write_report(run_dir, tmp_path / "report")
    page = (html_path.parent / "tasks" / f"{TASK}.html").read_text(encoding="utf-8")
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x1b" not in page and "\\x1b]0;pwned" in page


def test_fixture_bundle_shows_each_attempt_its_patch_and_the_failing_tests(
        cli: Callable[..., tuple[int, str, str]]) -> None:
    code, out, _ = cli("show", FIXTURE)
    assert code == 0
    assert "5 of 5 tasks" in out and "the bundle verifies" in out
    assert out.count("passed on attempt 2") == 5
    code, out, _ = cli("show", FIXTURE, CSV)
    assert code == 0
    assert "attempt 1: fail" in out and "attempt 2: pass" in out
    assert "csvsplit.py | +1 -4" in out
    assert ("why: the hidden tests failed: 2 failed (test_oracle_csv.py::test_quoted_comma_stays_inside_its_field, "
            "test_oracle_csv.py::test_doubled_quote_is_one_quote)") in out
    assert "JUnit: 4 ran, 2 failed" in out
    assert "test_quoted_comma_stays_inside_its_field" in out
    code, only, _ = cli("show", FIXTURE, CSV, "--attempt", "2")
    assert code == 0 and "attempt 2: pass" in only and "attempt 1:" not in only


def test_json_carries_every_attempt_and_the_outputs_as_text(cli: Callable[..., tuple[int, str, str]]) -> None:
    code, out, _ = cli("show", FIXTURE, "--json")
    assert code == 0
    table = json.loads(out)
    assert [t["outcome"] for t in table["tasks"]] == ["pass"] * 5
    code, out, _ = cli("show", FIXTURE, CSV, "--json")
    doc = json.loads(out)["task"]
    first = doc["attempts"][0]
    assert first["result"] == "fail" and first["grading"]["task_pass"] is False
    oracle_out = first["outputs"]["graded.oracle.stdout"]
    assert oracle_out["matches_digest"] is True and "2 failed, 2 passed" in oracle_out["text"]
    assert first["outputs"]["patch_captured.patch_sha256"]["text"].startswith("diff --git a/csvsplit.py")


def test_outcome_filter_and_unknown_names_are_refused_with_what_exists(
        cli: Callable[..., tuple[int, str, str]]) -> None:
    code, out, _ = cli("show", FIXTURE, "--outcome", "fail")
    assert code == 0 and "0 of 5 tasks with outcome fail" in out
    code, _, err = cli("show", FIXTURE, "no-such-task")
    assert code == 3 and "no task 'no-such-task'" in err and "lists them" in err
    code, _, err = cli("show", FIXTURE, CSV, "--attempt", "7")
    assert code == 3 and "no attempt 7 (attempts made: 1, 2)" in err
    code, _, err = cli("show", FIXTURE.parent)
    assert code == 3 and "no journal.jsonl" in err


def test_a_bundle_whose_blob_was_edited_is_not_shown(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURE, bundle)
    blob = next(p for p in sorted((bundle / "blobs").iterdir()) if b"2 failed" in p.read_bytes())
    blob.write_bytes(blob.read_bytes().replace(b"2 failed", b"0 failed"))
    code, _, err = cli("show", bundle, CSV)
    assert code == 4 and "verification failed" in err


def test_a_blob_replaced_by_a_link_in_a_run_directory_is_not_followed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir)
    (run_dir / "SHA256SUMS").unlink()
    (run_dir / "SHA256SUMS.sig").unlink()
    secret = tmp_path / "secret"
    secret.write_text("host secret\n")
    shown = show.read_run(run_dir)
    graded = shown.tasks[CSV].attempts[1].graded
    assert graded is not None and graded.oracle is not None and graded.oracle.stdout is not None
    target = run_dir / "blobs" / graded.oracle.stdout.removeprefix("sha256:")
    target.unlink()
    os.symlink(secret, target)
    text = "\n".join(show.task_lines(shown, CSV, 1))
    assert "host secret" not in text
    assert "is missing from blobs/" in text


def test_a_blob_whose_bytes_differ_from_its_digest_is_flagged(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir)
    (run_dir / "SHA256SUMS").unlink()
    shown = show.read_run(run_dir)
    graded = shown.tasks[CSV].attempts[1].graded
    assert graded is not None and graded.oracle is not None and graded.oracle.stdout is not None
    target = run_dir / "blobs" / graded.oracle.stdout.removeprefix("sha256:")
    target.write_bytes(target.read_bytes() + b"appended\n")
    assert "do not match their digest" in "\n".join(show.task_lines(shown, CSV, 1))


@pytest.mark.parametrize(("text", "shown"), [
    ("plain\ttext\n", "plain\ttext\n"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("bell\x07", "bell\\x07"),
    ("win\r\nline", "win\nline"),
    ("over\rwrite", "over\\x0dwrite"),
    ("csi \x9b2J", "csi \\x9b2J"),
    ("bidi \u202etxt.exe", "bidi \\u202etxt.exe"),
    ("left-to-right mark \u200e", "left-to-right mark \\u200e"),
    ("right-to-left mark \u200fcba", "right-to-left mark \\u200fcba"),
    ("arabic letter mark \u061c1", "arabic letter mark \\u061c1"),
    ("isolate \u2067x\u2069", "isolate \\u2067x\\u2069"),
    ("zero width joiner \u200d kept", "zero width joiner \u200d kept"),
])
def test_inert_escapes_every_control_character_but_newline_and_tab(text: str, shown: str) -> None:
    assert show.inert(text) == shown


def test_diffstat_counts_lines_per_file() -> None:
    patch = ("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n-x\n+y\n+z\n"
             "diff --git a/b c.py b/b c.py\nnew file mode 100644\n--- /dev/null\n+++ b/b c.py\n@@ -0,0 +1 @@\n+w\n")
    assert show.diffstat(patch) == [("a.py", 2, 1), ("b c.py", 1, 0)]


def test_the_outcome_choices_of_the_parser_are_those_show_knows() -> None:
    assert cli_module._show_outcomes() == show.SHOWN_OUTCOMES


@needs_bwrap
@pytest.mark.parametrize(("name", "command", "kw", "outcome", "words"), [
    ("missing-program", "./no-such-agent-program --go", {}, "harness_error",
     ["the agent's command could not start in the sandbox", "execvp ./no-such-agent-program: No such file or directory",
      "recorded as a harness error"]),
    ("forbidden", "sh -c 'echo \"def test_x(): pass\" > conftest.py; echo \"    return items[-n:]\" >> window.py'",
     {"max_attempts": 1}, "fail", ["the patch touched forbidden paths: conftest.py"]),
    ("too-slow", "sleep 30", {"max_attempts": 1, "wall_clock_s": 2}, "timeout",
     ["the task's wall-clock cap ran out while the agent ran"]),
])
def test_each_cause_is_named_in_the_task_table(sealed_pack: Path, tmp_path: Path,
                                               cli: Callable[..., tuple[int, str, str]], name: str, command: str,
                                               kw: dict[str, object], outcome: str, words: list[str]) -> None:
    run_dir = _run(sealed_pack, tmp_path, command, name, **kw)
    code, out, _ = cli("show", run_dir)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith(TASK))
    assert f" {outcome} " in row, row
    for w in words:
        assert w in row, row
