"""``compare --html DIR``: one page for two or more runs of one slice (``DIR/compare.html``):
the verdict of each pair (discordant counts, exact McNemar p, the tie rule's verdict, and for a
tie about how many discordant tasks would be needed), the tasks where the runs disagree, and
every task's outcome in every run, each linked to that run's page of the task
(``DIR/runs/<run_id>/tasks/<task_id>.html``, as ``report`` writes them). The folder stands alone:
relative links only, and a Content-Security-Policy that forbids every load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .blobs import Blobs
from .compare import CompareReport
from .document import CSP, CSS
from .files import write_atomic
from .journal import read_chain
from .outcomes import Outcome
from .stories import stories
from .task_pages import environment, page_name, safe_name, write_task_pages

RUNS_DIR = "runs"


@dataclass(frozen=True)
class _Cell:
    outcome: str
    href: str


@dataclass(frozen=True)
class _Row:
    task_id: str
    cells: tuple[_Cell, ...]
    discordant: bool


def write_compare_page(bundles: Sequence[Path], report: CompareReport, out: Path) -> Path:
    """Write ``out/compare.html`` and each run's task pages beside it; returns the page's path.

    ``bundles`` are the verified bundles ``report`` compared, in the same order.

    Raises:
        ValueError: a run_id or task id that is not a safe file name (their formats refuse these).
    """
    import markupsafe

    outcomes: list[dict[str, str]] = []
    for bundle, run_id in zip(bundles, report.run_ids, strict=True):
        folder = out / RUNS_DIR / safe_name(run_id, "run_id")
        told = stories(read_chain(bundle / "journal.jsonl").lines, report.task_ids)
        write_task_pages(folder, run_id, told, Blobs(bundle), "not a vendor ranking.",
                         back=("../../../compare.html", "the paired comparison"))
        outcomes.append({tid: story.outcome for tid, story in told.items()})
    rows = []
    for tid in report.task_ids:
        cells = tuple(_Cell(o[tid], f"{RUNS_DIR}/{run_id}/{page_name(tid)}")
                      for o, run_id in zip(outcomes, report.run_ids, strict=True))
        passed = {c.outcome == Outcome.PASS for c in cells}
        rows.append(_Row(tid, cells, len(passed) > 1))
    rule = report.tie_rule
    page = environment().get_template("compare.html.j2").render(
        csp=markupsafe.Markup(CSP), css=markupsafe.Markup(CSS + _CSS), run_ids=report.run_ids,
        task_ids=report.task_ids, rule=f"{rule.test} at alpha {rule.alpha:g}"
        + (", Holm-adjusted across the pairs" if len(report.run_ids) > 2 else ""),
        caveats=report.caveats, pairs=report.pairs, adjusted=len(report.run_ids) > 2,
        discordant=[r for r in rows if r.discordant], every=rows,
    )
    path = out / "compare.html"
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(path, page, durable=False)
    return path


_CSS = """
tr.discordant td { background: #fff6e0; }
.lead { font-size: 1.05rem; }
"""
