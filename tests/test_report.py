"""Reports: the locked facts in seed 004's voice, never a percentage, offline in a real browser.

The runs are real: the sample pack through ``execute`` in the sandbox, with a scripted agent
that passes one task at once, one on its second attempt, abstains on one and fails one; the
narration probe runs on the same contract. Module-scoped, so the slow part runs once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from chromium import CHROMIUM, load_page
from conftest import SAMPLE, SEED_IDS, make_contract
from sealbench.bundle import make_bundle, verify_bundle
from sealbench.contract import load_contract
from sealbench.document import SORT_SCRIPT, SORT_SCRIPT_SOURCE
from sealbench.errors import RunRefusal, VerificationFailed
from sealbench.files import model_json
from sealbench.pack import seal_pack
from sealbench.report import (
    FIGURE_FILES,
    RUN_DIR_CHECKED,
    build_sections,
    load_run,
    render_figures,
    render_html,
    render_markdown,
    write_report,
)
from sealbench.runner import RunOptions, execute
from sealbench.score import score
from sealbench.scoring_io import events_from
from sealbench.stats import wilson_interval

REPO = Path(__file__).resolve().parents[1]
# What the scripted agent does per task: the seed's four ids, each ending a different way.
PLAN = {
    "t_03_rename_helper": "pass at once",
    "t_11_fix_off_by_one": "pass on attempt 2",
    "t_18_add_missing_test": "abstain",
    "t_22_reject_network_call": "fail",
}


@dataclass(frozen=True)
class Reported:
    """A run directory and the report written for it."""

    run_dir: Path
    md: str
    html: str
    md_path: Path
    html_path: Path


def _scripted_agent(pack: Path) -> Any:
    def agent(record: dict[str, Any], workspace: Path, attempt: int) -> dict[str, Any]:
        plan = PLAN[record["task_id"]]
        if plan == "abstain":
            return {"did": "nothing"}
        if plan == "pass at once" or (plan == "pass on attempt 2" and attempt >= 2):
            shutil.copytree(pack / "tasks" / record["task_id"] / "solution", workspace, dirs_exist_ok=True)
            return {"did": "copied the reference solution"}
        (workspace / "NOTES.md").write_text(f"attempt {attempt}: a guess, not a fix\n", encoding="utf-8")
        return {"did": "wrote notes"}

    return agent


def _report(run_dir: Path, out_dir: Path | None = None) -> Reported:
    md_path, html_path = write_report(run_dir, out_dir)
    return Reported(run_dir, md_path.read_text(encoding="utf-8"), html_path.read_text(encoding="utf-8"),
                    md_path, html_path)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Reported:
    """Seed 004's slice run in the sandbox, probed, then reported into a separate folder."""
    root = tmp_path_factory.mktemp("mixed")
    pack = root / "pack"
    shutil.copytree(SAMPLE, pack)
    seal_pack(pack)
    contract = root / "scoring_contract.json"
    make_contract(pack, contract, task_ids=SEED_IDS, command="python:scripted test agent", run_id="run-report",
                  model_access="operator-supplied free model access", terms_read_on="2026-10-12")
    run_dir = root / "runs" / "run-report"
    agent = _scripted_agent(pack)
    try:
        execute(contract, run_dir, RunOptions(progress=False), python_agent=agent)
    except RunRefusal as e:
        pytest.skip(f"no sandbox on this machine ({e}); `make setup` installs bubblewrap")
    execute(contract, run_dir, RunOptions(progress=False), python_agent=agent, probe=True)
    return _report(run_dir, root / "report")


@pytest.fixture(scope="module")
def unisolated(tmp_path_factory: pytest.TempPathFactory) -> Reported:
    """A one-task run with sandbox 'none' and no probe, reported into its own directory."""
    root = tmp_path_factory.mktemp("unisolated")
    pack = root / "pack"
    shutil.copytree(SAMPLE, pack)
    seal_pack(pack)
    contract = root / "scoring_contract.json"
    make_contract(pack, contract, task_ids=["t_03_rename_helper"], command="builtin:noop", run_id="run-none")
    run_dir = root / "run"
    execute(contract, run_dir, RunOptions(sandbox="none", progress=False))
    return _report(run_dir)


class _VisibleText(HTMLParser):
    """The text a reader sees: no tags, no style sheet, no attribute values."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("style", "script")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("style", "script")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = _VisibleText()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def slogans(text: str) -> list[str]:
    """Percentages and slogan words; the confidence level of 'Wilson 95% interval' is allowed."""
    text = text.replace("Wilson 95% interval", "Wilson interval")
    found = re.findall(r"[^\n]{0,30}%[^\n]{0,30}", text)
    found += re.findall(r"(?i)\b(?:accuracy|success rate|solved|pass rate)\b", text)
    return found


# --- the facts ---------------------------------------------------------------------------


def test_report_states_the_locked_facts_in_both_files(mixed: Reported) -> None:
    contract = load_contract(mixed.run_dir / "scoring_contract.json")
    assert contract.budget is not None and contract.pack is not None and contract.contract_sha256
    low, high = wilson_interval(2, 4)
    first_low, first_high = wilson_interval(1, 4)
    facts = [
        "2 of 4 task_pass on this locked run_id",
        f"[{low:.3f}, {high:.3f}]",
        "1 of 4 task_pass",
        f"[{first_low:.3f}, {first_high:.3f}]",
        "run-report", str(contract.locked_at), contract.contract_sha256, contract.pack.sha256,
        "max_attempts", "wall_clock_s", "180 per task", "feedback policy",
        "operator-supplied free server option", "operator-supplied free model access", "2026-10-12",
        "quota_assumed", "permanence_assumed", "terms_read_on",
        "test agent", "python:scripted test agent", "bubblewrap",
        "oracle validity: unavailable",
        # The sample pack declares its provenance; the run pins it, so the report prints it.
        "written for sealbench; not published before it (declared by the pack's provenance",
        "sequential attempts with feedback policy none, not pass@k",
        "narration probe emitted no patch on 1 of 4 task(s) of this slice",
        "not a vendor ranking",
    ]
    text = visible_text(mixed.html)
    for fact in facts:
        assert fact in mixed.md, fact
        assert fact in text, fact


def test_outcomes_pass_by_attempt_and_tasks_follow_the_journal(mixed: Reported) -> None:
    text = visible_text(mixed.html)
    for row in ("pass 2 of 4", "fail 1 of 4", "abstain 1 of 4", "timeout 0 of 4", "harness_error 0 of 4"):
        assert row in text, row
    assert "| pass | 2 of 4 |" in mixed.md and "| harness_error | 0 of 4 |" in mixed.md
    # Cumulative: one task passed on attempt 1, a second on attempt 2.
    assert "| 1 | 1 of 4 task_pass |" in mixed.md and "| 2 | 2 of 4 task_pass |" in mixed.md
    assert "| [`t_11_fix_off_by_one`](tasks/t_11_fix_off_by_one.html) | pass | 2 of 2 | no |" in mixed.md
    assert "| [`t_03_rename_helper`](tasks/t_03_rename_helper.html) | pass | 1 of 2 | pass |" in mixed.md
    assert "| [`t_18_add_missing_test`](tasks/t_18_add_missing_test.html) | abstain | 1 of 2 | no |" in mixed.md


def test_probe_names_the_tasks_whose_patch_was_not_empty(mixed: Reported) -> None:
    failed = [t for t, plan in PLAN.items() if plan != "abstain"]
    probe = json.loads((mixed.run_dir / "narration_probe.json").read_text())
    assert probe["failed"] == failed
    section = mixed.md.split("## Narration probe", 1)[1]
    for tid in failed:
        assert f"- `{tid}`" in section


def test_report_never_prints_a_percentage_or_a_slogan(mixed: Reported, unisolated: Reported) -> None:
    for rep in (mixed, unisolated):
        assert slogans(rep.md) == []
        assert slogans(visible_text(rep.html)) == []
        assert "Wilson 95% interval" in rep.md


def test_slogan_check_catches_a_bare_percentage() -> None:
    assert slogans("50% accuracy") and slogans("pass rate 0.5") and slogans("Wilson 95% interval, 50 %")
    assert slogans("2 of 4 task_pass, Wilson 95% interval [0.150, 0.850]") == []


def test_links_to_traces_and_patches_are_relative_and_resolve(mixed: Reported) -> None:
    hrefs = re.findall(r'href="([^"]+)"', mixed.html)
    md_links = [h for h in re.findall(r"\]\(([^)]+)\)", mixed.md) if not h.endswith(".svg")]
    assert sorted(hrefs) == sorted(md_links)
    for tid in SEED_IDS:
        assert any(h.endswith(f"traces/{tid}.json") for h in hrefs), tid
    # Abstaining leaves no patch to link; the three others do.
    assert sorted(h.rsplit("/", 1)[1] for h in hrefs if "/patches/" in h) == sorted(
        f"{t}.patch" for t, plan in PLAN.items() if plan != "abstain")
    for href in hrefs:
        assert not re.match(r"^(?:[a-z]+:|/)", href), href
        assert (mixed.html_path.parent / href).resolve().is_file(), href


def test_each_task_has_a_page_and_the_report_folder_works_sent_on_its_own(mixed: Reported, tmp_path: Path) -> None:
    sent = tmp_path / "sent"
    shutil.copytree(mixed.html_path.parent, sent)  # without the run directory beside it
    for href in re.findall(r'href="([^"]+)"', mixed.html):
        assert (sent / href).resolve().is_file(), href
    for tid in SEED_IDS:
        assert f'href="tasks/{tid}.html"' in mixed.html
        page = (sent / "tasks" / f"{tid}.html").read_text(encoding="utf-8")
        assert "default-src 'none'" in page and "<script" not in page.lower() and "<link" not in page.lower()
        hrefs = re.findall(r'(?:href|src)="([^"]+)"', page)
        assert "../report.html" in hrefs
        for href in hrefs:
            assert not re.match(r"^(?:[a-z]+:|/)", href), href
            assert (sent / "tasks" / href).resolve().is_file(), href
    failed = visible_text((sent / "tasks" / "t_22_reject_network_call.html").read_text(encoding="utf-8"))
    assert "Attempt 1: fail" in failed and "Attempt 2: fail" in failed and "oracle stdout" in failed
    assert "NOTES.md" in failed  # the diff stat and the diff
    second = (sent / "tasks" / "t_11_fix_off_by_one.html").read_text(encoding="utf-8")
    assert '<span class="add">+' in second and "Attempt 2: <span" in second


def test_figures_are_written_beside_report_md(mixed: Reported) -> None:
    for name in FIGURE_FILES.values():
        svg = (mixed.md_path.parent / name).read_text(encoding="utf-8")
        assert f"]({name})" in mixed.md and svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_figures_are_byte_identical_across_renders(mixed: Reported) -> None:
    view = load_run(mixed.run_dir)
    assert render_figures(view, FIGURE_FILES) == render_figures(view, FIGURE_FILES)


def test_html_is_self_contained(mixed: Reported) -> None:
    html = mixed.html
    # One script, the table sorter, inline and allowed by its hash alone: nothing is loaded.
    assert re.findall(r"<script[^>]*>(.*?)</script>", html, re.S | re.I) == [SORT_SCRIPT]
    assert html.lower().count("<script") == 1 and "<script>" in html
    assert f"script-src {SORT_SCRIPT_SOURCE}\"" in html
    assert "<link" not in html.lower() and "@import" not in html
    assert re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I) == []
    assert re.findall(r"url\(", html) == []
    assert len(re.findall(r'<img src="data:image/svg\+xml;base64,', html)) == len(FIGURE_FILES)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


# --- the warnings --------------------------------------------------------------------------


def test_no_sandbox_is_printed_prominently(unisolated: Reported, mixed: Reported) -> None:
    assert '<p class="banner alert"><strong>no sandbox</strong>' in unisolated.html
    assert "> **no sandbox**:" in unisolated.md
    assert "no sandbox" not in mixed.md.lower()


def test_a_run_without_probe_says_narration_probe_not_run(unisolated: Reported) -> None:
    assert "narration probe not run" in unisolated.md
    assert "narration probe not run" in visible_text(unisolated.html)


def test_hostile_values_are_escaped(mixed: Reported) -> None:
    view = load_run(mixed.run_dir)
    assert view.contract.agent is not None
    label = '<script>alert(1)</script> | <img src="https://example.com/x">'
    agent = view.contract.agent.model_copy(update={"label": label})
    hostile = dataclasses.replace(view, contract=view.contract.model_copy(update={"agent": agent}))
    sections = build_sections(hostile)
    page = render_html(hostile, sections, render_figures(hostile, FIGURE_FILES))
    assert "<script>alert" not in page and '<img src="https' not in page and "&lt;script&gt;" in page
    row = next(line for line in render_markdown(hostile, sections).splitlines() if line.startswith("| agent |"))
    assert len(re.split(r"(?<!\\)\|", row)) == 4, row


# --- what the directory holds ----------------------------------------------------------------


def test_bundle_layout_reports_the_same_facts(mixed: Reported, tmp_path: Path) -> None:
    # Without SHA256SUMS a bundle-shaped directory is reported as a run directory.
    bundle = tmp_path / "runs" / "run-report"
    shutil.copytree(mixed.run_dir, bundle, ignore=shutil.ignore_patterns("blobs", "probe"))
    contract = load_contract(bundle / "scoring_contract.json")
    (bundle / "rate.json").write_text(model_json(score(contract, events_from(bundle, contract))))
    for name in ("README.md", "commands.txt"):
        (bundle / name).write_text("not read by the report\n")
    out = _report(bundle, tmp_path / "report")
    assert out.md == mixed.md and out.html == mixed.html


def test_report_of_a_real_bundle_goes_beside_it_and_the_bundle_still_verifies(
        mixed: Reported, tmp_path: Path) -> None:
    bundle = make_bundle(mixed.run_dir, tmp_path / "runs")
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    out = _report(bundle)
    assert out.md_path.parent == tmp_path / "runs" / f"{bundle.name}-report"
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before
    verify_bundle(bundle)
    checked = "the bundle verifies (every sum, the journal chains, every derived file, each task's events); " \
              "not signed: without a checked signature this proves internal consistency only"
    assert checked in out.md and RUN_DIR_CHECKED in mixed.md
    assert out.md == mixed.md.replace("../runs/run-report/", "../run-report/").replace(RUN_DIR_CHECKED, checked)


def test_report_of_a_tampered_bundle_is_refused_naming_what_failed(mixed: Reported, tmp_path: Path,
                                                                   cli: Any) -> None:
    bundle = make_bundle(mixed.run_dir, tmp_path / "runs")
    rate = json.loads((bundle / "rate.json").read_text())
    rate["task_pass_count"] = 4
    (bundle / "rate.json").write_text(json.dumps(rate, indent=2) + "\n")
    code, _out, err = cli("report", bundle)
    assert code == 3, err
    assert f"no report: the bundle {bundle} does not verify" in err
    assert "rate.json: content differs from its sha256 in SHA256SUMS" in err and "task_pass_count differ" in err
    assert not (tmp_path / "runs" / f"{bundle.name}-report").exists()


def test_a_rate_json_the_journal_does_not_support_is_refused(mixed: Reported, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(mixed.run_dir, run)
    contract = load_contract(run / "scoring_contract.json")
    rate = score(contract, events_from(run, contract))
    (run / "rate.json").write_text(model_json(rate.model_copy(update={"task_pass_count": 3})))
    with pytest.raises(VerificationFailed, match=r"rate\.json differs .* task_pass_count"):
        write_report(run)
    assert not (tmp_path / "run-report").exists()


def test_an_edited_trace_is_refused(mixed: Reported, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(mixed.run_dir, run)
    (run / "traces" / "t_22_reject_network_call.json").write_text("[]\n")
    with pytest.raises(VerificationFailed, match=re.escape("traces/t_22_reject_network_call.json differs")):
        write_report(run)


def test_an_unfinished_run_reports_counts_but_no_rate(mixed: Reported, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(mixed.run_dir, run, ignore=shutil.ignore_patterns("scorecards.jsonl", "traces", "probe"))
    lines = (run / "journal.jsonl").read_text().splitlines(keepends=True)
    cut = max(i for i, line in enumerate(lines) if '"kind":"task_finished"' in line)
    (run / "journal.jsonl").write_text("".join(lines[:cut]))  # a prefix: the chain still verifies
    rep = _report(run)
    assert "**no rate emitted**" in rep.md and "denominator drift" in rep.md
    assert "| unfinished | 1 of 4 |" in rep.md
    assert "on this locked run_id" not in rep.md and "Pass by attempt" not in rep.md
    assert slogans(rep.md) == []


def test_importing_the_cli_and_report_does_not_import_matplotlib() -> None:
    code = "import sys, sealbench.cli, sealbench.report; assert 'matplotlib' not in sys.modules, 'eager'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# --- in a real browser ------------------------------------------------------------------------

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium is not installed (Debian: apt-get install chromium; `make setup` installs it)",
)


@needs_chromium
def test_report_html_renders_offline_in_headless_chromium(mixed: Reported, tmp_path: Path) -> None:
    page = load_page(mixed.html_path, tmp_path / "chromium")
    shot = tmp_path / "report-screenshot.png"
    shot.write_bytes(page.screenshot)
    assert page.errors == [] and page.warnings == [], page.stderr[-2000:]
    assert re.findall(r":CONSOLE[:(]", page.stderr) == []
    outside = [u for u in page.requests if not u.startswith(("file:", "data:"))]
    assert outside == []
    assert [(i["figure"], i["complete"], i["width"] > 300) for i in page.images] == [
        (name, True, True) for name in FIGURE_FILES]
    assert "2 of 4 task_pass on this locked run_id" in page.text and slogans(page.text) == []
    assert page.screenshot.startswith(b"\x89PNG\r\n\x1a\n") and len(page.screenshot) > 50_000
    if os.environ.get("SEALBENCH_UPDATE_SCREENSHOT") == "1":
        (REPO / "docs").mkdir(exist_ok=True)
        shutil.copyfile(shot, REPO / "docs" / "report-screenshot.png")


TOP_OF = ("(() => {{ const hit = Array.from(document.querySelectorAll('{sel}'))"
          ".find(e => e.textContent.includes('{text}')); "
          "return hit ? Math.round(hit.getBoundingClientRect().top + window.scrollY) : -1; }})()")
TASK_OUTCOMES = ("Array.from(document.querySelectorAll('table.sortable tbody tr'))"
                 ".map(r => r.cells[1].textContent.trim())")


@needs_chromium
def test_report_leads_with_the_answer_then_the_tasks_that_did_not_pass(mixed: Reported, tmp_path: Path) -> None:
    # The pass count was 700 to 1,200 px down the page, below the digests, and the task table
    # 2.7 to 3.6 screens down. Now the rate and the outcomes come first, the tasks that need a
    # look lead the table, and the digests close the page.
    page = load_page(mixed.html_path, tmp_path / "chromium", actions=(
        TOP_OF.format(sel="p", text="task_pass on this locked run_id"),
        TOP_OF.format(sel="table.sortable", text=""),
        TOP_OF.format(sel="dt, th, td", text="contract sha256"),
        TASK_OUTCOMES))
    rate_top, table_top, digest_top, outcomes = page.results
    assert 0 <= rate_top < 400, rate_top
    assert 0 <= table_top < 1800 and digest_top > table_top, (table_top, digest_top)
    assert outcomes.index("pass") > max(i for i, o in enumerate(outcomes) if o != "pass"), outcomes


VISIBLE_OUTCOMES = ("Array.from(document.querySelectorAll('table.sortable tbody tr'))"
                    ".filter(r => !r.hidden).map(r => r.cells[1].textContent.trim())")
FILTER = ("(() => { const s = document.querySelector('label select'); s.value = '{o}'; "
          "s.dispatchEvent(new Event('change')); return " + VISIBLE_OUTCOMES + "; })()")
SORT_BY_ELAPSED = ("(() => { const th = Array.from(document.querySelectorAll('table.sortable th'))"
                   ".find(h => h.textContent === 'elapsed'); th.click(); return Array.from("
                   "document.querySelectorAll('table.sortable tbody tr')).map(r => parseFloat(r.cells[4].textContent)); })()")


def _top_of(png: bytes, dest: Path, height: int) -> None:
    """Write the top ``height`` pixels of a screenshot (a task page is long)."""
    import io

    import matplotlib.image as mpimg

    mpimg.imsave(dest, mpimg.imread(io.BytesIO(png), format="png")[:height])


def _clean(page: Any) -> None:
    assert page.errors == [] and page.warnings == [], (page.errors, page.warnings, page.stderr[-2000:])
    assert re.findall(r":CONSOLE[:(]", page.stderr) == []
    assert [u for u in page.requests if not u.startswith(("file:", "data:"))] == []


@needs_chromium
def test_sent_report_filters_sorts_and_links_to_task_pages_in_headless_chromium(
        mixed: Reported, tmp_path: Path) -> None:
    sent = tmp_path / "sent"
    shutil.copytree(mixed.html_path.parent, sent)  # the report's folder on its own
    page = load_page(sent / "report.html", tmp_path / "chromium",
                     actions=(FILTER.replace("{o}", "fail"), FILTER.replace("{o}", "all"), SORT_BY_ELAPSED))
    _clean(page)  # the inline sorter runs under the page's policy: no violation is logged
    only_fail, every, elapsed = page.results
    assert only_fail == ["fail"]  # the passing rows (and the abstain) are hidden
    assert sorted(every) == ["abstain", "fail", "pass", "pass"]
    assert elapsed == sorted(elapsed)
    task = load_page(sent / "tasks" / "t_22_reject_network_call.html", tmp_path / "chromium-task")
    _clean(task)
    assert "Attempt 2: fail" in task.text and "NOTES.md" in task.text and "+attempt 2: a guess, not a fix" in task.text
    assert "oracle stdout" in task.text and "all tasks of run-report" in task.text
    assert re.search(r"test_oracle_\w+\.py::test_\w+", task.text), task.text[:2000]  # the failing test, by name
    if os.environ.get("SEALBENCH_UPDATE_SCREENSHOT") == "1":
        (REPO / "docs").mkdir(exist_ok=True)
        _top_of(task.screenshot, REPO / "docs" / "report-task-page.png", 1600)


@needs_chromium
def test_browser_check_sees_outside_requests_and_console_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><p>bad</p>'
                   '<img src="https://example.com/x.png"><script>console.error("boom")</script></body></html>')
    page = load_page(bad, tmp_path / "chromium")
    assert "https://example.com/x.png" in page.requests
    assert any("boom" in e for e in page.errors) and any("Failed to load resource" in e for e in page.errors)
    assert page.images[0]["width"] == 0
