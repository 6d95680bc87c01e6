"""The reference page of refusals lists every refusal the code raises, and is current."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sealbench import refusal_catalogue as rc

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "refusals.md"


def test_the_committed_page_is_what_the_code_says() -> None:
    assert PAGE.read_text(encoding="utf-8") == rc.page(), \
        "docs/reference/refusals.md is stale: run `make refusals`"


def test_every_refusal_raised_has_an_entry_on_the_page() -> None:
    text = PAGE.read_text(encoding="utf-8")
    found = rc.raises()
    assert rc.unlisted(found) == []
    listed = rc.entries()
    assert len(found) > 300 and len(listed) > 300
    for entry in listed:
        assert rc._md(entry.message) in text, f"{entry.module}.{entry.function}: {entry.message!r} is not on the page"
    # Each error class of a refusal kind says its way out, in errors.py and on the page.
    for cls in rc.error_classes().values():
        assert cls.way_out and rc._md(cls.way_out) in text


def _package_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "sealbench"
    shutil.copytree(rc.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "examples"))
    return copy


def test_a_new_raise_makes_the_page_stale(tmp_path: Path) -> None:
    copy = _package_copy(tmp_path)
    contract = copy / "contract.py"
    contract.write_text(contract.read_text(encoding="utf-8") + (
        "\n\ndef _new_refusal(path: str) -> None:\n"
        "    raise ContractError(f\"{path}: a refusal nobody listed; run `sealbench contract new`\")\n"),
        encoding="utf-8")
    new = rc.page(copy)
    assert new != rc.page()  # the committed page, once current, is now stale
    assert "{path}: a refusal nobody listed; run `sealbench contract new`" in new
    entry = next(e for e in rc.entries(copy) if e.function == "_new_refusal")
    assert (entry.error, entry.exit_code, entry.own_way_out) == ("ContractError", 3, "run `sealbench contract new`")


def test_a_message_that_cannot_be_read_must_be_described(tmp_path: Path) -> None:
    copy = _package_copy(tmp_path)
    runner = copy / "runner.py"
    runner.write_text(runner.read_text(encoding="utf-8") + (
        "\n\ndef _built_elsewhere(parts: list[str]) -> None:\n"
        "    why = ''\n"
        "    for part in parts:\n"
        "        why += part\n"
        "    raise RunRefusal(why)\n"), encoding="utf-8")
    assert [(r.module, r.function) for r in rc.unlisted(rc.raises(copy))] == [("sealbench.runner", "_built_elsewhere")]
    with pytest.raises(ValueError, match="_built_elsewhere"):
        rc.page(copy)


@pytest.mark.parametrize(("message", "way_out"), [
    ("contract x is not locked; lock it before the run with `sealbench contract lock X --run-id NAME`",
     "lock it before the run with `sealbench contract lock X --run-id NAME`"),
    ("storage failure: full (free space (or fix the storage) and run the command again)",
     "free space (or fix the storage) and run the command again"),
    ("the bundle is not there: `sealbench runs list` lists what is", "`sealbench runs list` lists what is"),
    ("task t1 is not in the denominator", None),
    ("run x failed: the journal is torn", None),
])
def test_a_message_names_its_own_way_out_only_when_it_says_one(message: str, way_out: str | None) -> None:
    assert rc.own_way_out(message) == way_out


def test_f_strings_read_with_placeholders() -> None:
    entries = rc.entries()
    texts = {e.message for e in entries if e.module == "sealbench.agents"}
    assert "agent command template does not parse: {e}" in texts


def test_check_fails_on_a_stale_page_and_passes_on_a_current_one(tmp_path: Path) -> None:
    page = tmp_path / "refusals.md"
    run = [sys.executable, "-m", "sealbench.refusal_catalogue", str(page)]
    assert subprocess.run([*run, "--check"], capture_output=True).returncode == 1
    written = subprocess.run(run, capture_output=True, text=True, check=True)
    assert "raises" in written.stdout
    assert subprocess.run([*run, "--check"], capture_output=True).returncode == 0
    page.write_text(page.read_text(encoding="utf-8").replace("ContractError", "ContractErr", 1), encoding="utf-8")
    stale = subprocess.run([*run, "--check"], capture_output=True, text=True)
    assert stale.returncode == 1 and "stale" in stale.stderr
