"""Reports: one run directory or bundle as ``report.md`` and a self-contained ``report.html``.

Everything a report prints is derived from the run's journal: the scorecards through
:func:`sealbench.derive.derive_iter`, the rate through :func:`sealbench.score.score` over
:func:`sealbench.scoring_io.events_from`. Files the directory also holds (``rate.json``,
``scorecards.jsonl``, ``traces/``) must agree with that derivation, or the report is
refused with every disagreement listed: a report never shows a number its journal does
not support.

The voice is the scoring contract's: counts on a locked run_id ("2 of 4 task_pass on this
locked run_id") with the Wilson 95% interval beside them, never a bare percentage. When
scoring refuses (harness errors, unfinished tasks, an edited contract), the report says
"no rate emitted" and prints counts and tasks, but no rate, interval or curve.

How it is made: :func:`load_run` reads and checks the inputs (the only I/O besides
:func:`write_report`); :func:`build_sections` turns a :class:`RunView` into one neutral
document (:mod:`sealbench.document`), printed both as Markdown and as HTML so the two files
carry the same facts; :func:`render_figures` draws the plots (:mod:`sealbench.plots`,
imported only then, so importing this module or the CLI stays cheap).

What it holds grows with the number of tasks, a few facts each (:class:`CardFacts`, a why),
never with the run's events: a bundle's journal is read once, by verify, and each task's story
told from that read (:class:`Reading`) is written as its page as soon as the task finishes,
then dropped; the task table's rows are made as report.md and report.html are written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import statistics
import tempfile
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, overload

from pydantic import ValidationError

from . import events as ev
from .agentfs import open_folder, read_regular_at
from .blobs import Blobs
from .contract import load_contract
from .derive import derive_iter
from .document import (
    Block,
    Bullets,
    Fields,
    Figure,
    Para,
    Section,
    Span,
    Table,
    html_pieces,
    markdown_pieces,
    spans,
)
from .document import render_html as _doc_html
from .document import render_markdown as _doc_markdown
from .errors import ContractError, Refusal, ScoreRefusal, VerificationFailed
from .files import fsync_dir, read_model, write_atomic_pieces
from .formats import (
    AccessClass,
    Budget,
    ForgingFlags,
    ModelUsage,
    Provenance,
    Rate,
    Scorecard,
    ScoringContract,
)
from .journal import ChainScan, scan_chain
from .outcomes import Outcome, TaskState
from .score import NOTE, score
from .scoring_io import events_from
from .scratch import sweep
from .show import cause
from .stats import Interval, wilson_interval
from .stories import TaskStory, Teller, stories
from .task_pages import TASKS_DIR, page_name, render_task_page
from .usage import cost_words, total

if TYPE_CHECKING:
    from .bundle import VerifyReport
    from .progress import Steps

__all__ = [
    "FIGURE_FILES",
    "UNFINISHED",
    "CardFacts",
    "CurvePoint",
    "ProbeResult",
    "RunView",
    "attempt_curve",
    "build_sections",
    "default_out_dir",
    "load_run",
    "outcome_counts",
    "render_figures",
    "render_html",
    "render_markdown",
    "write_report",
]

FIGURE_FILES: dict[str, str] = {
    "outcomes": "report-outcomes.svg",
    "attempts": "report-attempts.svg",
    "elapsed": "report-elapsed.svg",
}
"""The figure files written beside report.md, by figure name."""

FILES_DIR = "files"
"""Where the report keeps its copies of the run's traces/ and patches/ (links stay inside it)."""

RUN_DIR_CHECKED = (
    "a run directory, not a bundle: its derived files were checked against its journal; "
    "sealbench bundle and sealbench verify check the rest"
)
"""What a report of a run directory says was checked."""

UNFINISHED: Final = TaskState.UNFINISHED.value
"""The row for tasks of the denominator that have no task_finished event."""

_NOT_PASS_AT_K = (
    "attempt k+1 runs only after attempt k failed, after the agent saw what the feedback policy allows; "
    "attempts are dependent, so this is not pass@k (k independent samples)"
)


# --------------------------------------------------------------------------- facts


class CurvePoint(NamedTuple):
    """Tasks passed by attempt ``k`` (cumulative), out of ``n``, with its Wilson 95% interval."""

    k: int
    passed: int
    n: int
    interval: Interval


@dataclass(frozen=True)
class ProbeResult:
    """What ``narration_probe.json`` says: a control, never part of the numerator."""

    sentence: str
    failed: tuple[str, ...]
    ran: int
    n: int


@dataclass(frozen=True, slots=True)
class CardFacts:
    """What the report reads of one task's scorecard, under the scorecard's own names: a
    tenth of the scorecard's memory, so a report of 100,000 tasks holds every task's."""

    task_id: str
    outcome: Outcome
    attempts_used: int
    max_attempts: int
    first_attempt_passed: bool
    elapsed_ms: int
    scorecard_complete: bool
    patched: bool
    """Whether the task finished with a non-empty patch (``patch_sha256`` set)."""
    model_usage: ModelUsage | None
    forging_flags: ForgingFlags | None

    @classmethod
    def of(cls, card: Scorecard) -> CardFacts:
        return cls(card.task_id, card.outcome, card.attempts_used, card.max_attempts, card.first_attempt_passed,
                   card.elapsed_ms, card.scorecard_complete, card.patch_sha256 is not None, card.model_usage,
                   card.forging_flags)


@dataclass(frozen=True)
class RunView:
    """Everything a report prints about one run, already checked against its journal."""

    contract: ScoringContract
    cards: tuple[CardFacts, ...]
    """What the report reads of each finished task's scorecard, in denominator order, derived
    from the journal."""
    rate: Rate | None
    refusal: str | None
    """Why scoring emitted no rate; None when ``rate`` is set."""
    sandboxes: tuple[dict[str, Any], ...]
    """Sandbox facts of the run's start and of every resume, in journal order."""
    agent: dict[str, Any]
    """The journal's record of how the agent was driven (kind, command, sandboxed)."""
    harness: dict[str, str]
    """sealbench version, Python and platform the run started on."""
    probe: ProbeResult | None
    provenance: Provenance | None
    """Pack provenance recorded in the journal, if any (none is today: see :func:`contamination`)."""
    traces: frozenset[str]
    """Task ids whose ``traces/<id>.json`` is present."""
    patches: frozenset[str]
    """Task ids whose ``patches/<id>.patch`` is present."""
    files_href: str = ""
    """URL prefix from the report's folder to the run's folder; '' when they are the same (kept
    for library users: the report itself links only to copies inside its own folder)."""
    whys: Mapping[str, str] = field(default_factory=dict)
    """Each task's why, from its story (:func:`sealbench.show.cause` of the journal's facts
    alone): the task table's column; a task with a why has a page."""
    checked: str = RUN_DIR_CHECKED
    """What was verified before the report was made (a bundle is verified whole)."""

    @property
    def n(self) -> int:
        """The frozen denominator."""
        return len(self.contract.task_ids)


def attempt_curve(cards: Iterable[Scorecard | CardFacts], n: int, max_attempts: int) -> list[CurvePoint]:
    """Cumulative passes by attempt k = 1..max_attempts over the whole denominator ``n``.

    Tasks without a scorecard count as not passed: the denominator never shrinks.

    Raises:
        ValueError: ``n`` or ``max_attempts`` below 1, or more passes than ``n``.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    passed_at = [c.attempts_used for c in cards if c.outcome is Outcome.PASS]
    points = []
    for k in range(1, max_attempts + 1):
        passed = sum(1 for a in passed_at if a <= k)
        points.append(CurvePoint(k, passed, n, wilson_interval(passed, n)))
    return points


def outcome_counts(view: RunView) -> dict[str, int]:
    """Every outcome with its count, zeros included, plus infrastructure errors and unfinished
    tasks when there are any."""
    counts = {o.value: 0 for o in Outcome if o is not Outcome.INFRA_ERROR}
    for c in view.cards:
        counts[c.outcome.value] = counts.get(c.outcome.value, 0) + 1
    missing = view.n - len(view.cards)
    if missing:
        counts[UNFINISHED] = missing
    return counts


def contamination(view: RunView) -> str | None:
    """The declared contamination statement, or None when contamination is unknown.

    A contract that claims fresh tasks (:mod:`sealbench.freshness`) states its claim. Else only a provenance the run itself records can lift "contamination unknown": the pack is
    not part of a run directory or bundle, and the contract carries no provenance.
    """
    from .freshness import statement

    fresh = statement(view.contract)
    if fresh is not None:
        # Locked in the contract, each task's date journaled from its record and checked by verify.
        return f"{fresh}, as the contract locks and the journal's task records confirm"
    prov = view.provenance
    # "public set: contamination unknown" says unknown too: only a statement without it lifts it.
    if prov is None or not prov.contamination.strip() or "unknown" in prov.contamination.lower():
        return None
    return f"{prov.contamination} (declared by the pack's provenance: {prov.source})"


# --------------------------------------------------------------------------- loading


def _sandbox_facts(header: ev.RunHeader) -> dict[str, Any]:
    # A resumed run may have continued under another sandbox: every start and resume counts.
    facts = header.sandbox
    return dict(facts) if isinstance(facts, dict) else {}


def _provenance(header: ev.RunHeader) -> Provenance | None:
    raw = header.provenance
    if raw is None:
        return None
    try:
        return Provenance.model_validate(raw)
    except ValidationError:
        return None  # a declaration that does not parse declares nothing: contamination stays unknown


def _load_probe(path: Path, task_ids: Sequence[str]) -> ProbeResult | None:
    if not path.is_file():
        return None
    where = path.name
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise VerificationFailed([f"{where}: not valid JSON ({e})"]) from None
    if not isinstance(raw, dict):
        raise VerificationFailed([f"{where}: expected a JSON object"])
    sentence, failed, ran, n = raw.get("sentence"), raw.get("failed"), raw.get("ran"), raw.get("n")
    problems = []
    if not isinstance(sentence, str):
        problems.append(f"{where}: sentence is missing or not a string")
    if not isinstance(failed, list) or not all(isinstance(t, str) for t in failed):
        problems.append(f"{where}: failed is missing or not a list of task ids")
    elif sorted(set(failed) - set(task_ids)):
        problems.append(f"{where}: failed tasks outside the locked slice: {sorted(set(failed) - set(task_ids))}")
    if not isinstance(ran, int) or not isinstance(n, int):
        problems.append(f"{where}: ran and n must be integers")
    elif n != len(task_ids):
        problems.append(f"{where}: covers {n} task(s); the contract's denominator has {len(task_ids)}")
    if problems:
        raise VerificationFailed(problems)
    assert isinstance(sentence, str) and isinstance(failed, list) and isinstance(ran, int) and isinstance(n, int)
    return ProbeResult(sentence=sentence, failed=tuple(failed), ran=ran, n=n)


def _rate_problems(run_dir: Path, rate: Rate | None, refusal: str | None) -> list[str]:
    path = run_dir / "rate.json"
    if not path.is_file():
        return []
    recorded = read_model(path, Rate, ScoreRefusal)
    if rate is None:
        return [f"rate.json records a rate, but the journal supports none ({refusal})"]
    if recorded == rate:
        return []
    mine, theirs = rate.model_dump(mode="json"), recorded.model_dump(mode="json")
    keys = sorted(k for k in mine if mine[k] != theirs.get(k))
    return [f"rate.json differs from the rate derived from the journal in: {', '.join(keys)}"]


def _checked_cards(run_dir: Path, contract: ScoringContract) -> tuple[list[CardFacts], Rate | None, str | None]:
    """The scorecards and the rate a run directory's journal derives, with every file the
    directory also holds (rate.json, scorecards.jsonl, traces/) checked against them.

    Raises:
        ScoreRefusal: an unreadable rate.json.
        VerificationFailed: a broken journal chain, a journal made under another contract, or
            a file disagreeing with the journal.
    """
    rate: Rate | None = None
    refusal: str | None = None
    try:
        rate = score(contract, events_from(run_dir, contract))
    except VerificationFailed:
        raise
    except Refusal as e:
        refusal = str(e)
    # events_from has verified the chain and its contract; read it again for the derived files.
    lines = (line for _, line in scan_chain(run_dir / "journal.jsonl", ChainScan()) if line is not None)
    cards: list[Scorecard] = []
    differ: list[str] = []
    # Each derived file is held against the directory's as it is made, then dropped.
    for rel, data in derive_iter(lines, contract.task_ids, contract.model_endpoints or (), cards):
        if rel == "events.json":
            continue  # never read: the rate above was scored from the journal itself
        path = run_dir / rel
        if path.is_file() and path.read_bytes() != data:
            differ.append(f"{rel} differs from what the journal derives")
    problems = _rate_problems(run_dir, rate, refusal) + sorted(differ)
    if problems:
        raise VerificationFailed(problems)
    return [CardFacts.of(c) for c in cards], rate, refusal


class Told(NamedTuple):
    """What the report reads of a journal beyond its derived files (:class:`Reading`)."""

    header: ev.RunHeader
    """The first line's header (an empty one when the first line is not a header)."""
    sandboxes: tuple[dict[str, Any], ...]
    """Sandbox facts of the run's start and of every resume, in journal order."""
    whys: dict[str, str]
    """Each task's why (:func:`sealbench.show.cause` of its story, the journal's facts alone)."""


class Reading:
    """A journal read line by line (:meth:`feed`) for the report: its first header, every
    start's and resume's sandbox, and each task's story, handed to ``on_story`` as soon as
    the task finishes and then dropped (:class:`sealbench.stories.Teller`).

    :meth:`feed` never raises: it is fed from inside verify's read of the journal, whose
    refusal must be the one a forged bundle gets, and whose findings must not include a
    page the report failed to write (a full disk, say). The first failure stops the reading
    and is raised by :meth:`finish`, once the journal has been judged.
    """

    def __init__(self, task_ids: Sequence[str], on_story: Callable[[TaskStory], None] | None = None) -> None:
        self._ids = task_ids
        self._on_story = on_story
        self._first: ev.Event | None = None
        self._headers: list[ev.RunHeader] = []
        self._whys: dict[str, str] = {}
        self._words: dict[str, str] = {}  # one string per distinct why: most tasks share a few
        self._teller = Teller(task_ids)
        self._failure: Exception | None = None

    def feed(self, line: ev.Line) -> None:
        if self._failure is not None:
            return
        try:
            if self._first is None:
                self._first = line.event
            if isinstance(line.event, ev.RunHeader):
                self._headers.append(line.event)
            story = self._teller.add(line)
            if story is not None:
                self._told(story)
        except Exception as e:  # kept, and raised by finish() once the journal is judged
            self._failure = e

    def _told(self, story: TaskStory) -> None:
        why = cause(story, None)
        self._whys[story.task_id] = self._words.setdefault(why, why)
        if self._on_story is not None:
            self._on_story(story)

    def finish(self, journal: Path) -> Told:
        """The stories not told yet, and what was read. A task with a line after it finished
        is told again, whole, from a second read of ``journal`` for it alone.

        Raises:
            Exception: the first failure :meth:`feed` kept (a page that could not be written).
        """
        if self._failure is not None:
            raise self._failure
        for story in self._teller.rest():
            self._told(story)
        late = self._teller.late
        if late:
            again = (line for _, line in scan_chain(journal, ChainScan())
                     if line is not None and line.event.task_id in late)
            for story in stories(again, [t for t in self._ids if t in late]).values():
                self._told(story)
        header = self._first if isinstance(self._first, ev.RunHeader) else ev.RunStarted()
        return Told(header, tuple(_sandbox_facts(h) for h in self._headers), self._whys)


def read_journal(journal: Path, task_ids: Sequence[str], on_story: Callable[[TaskStory], None] | None = None) -> Told:
    """:class:`Reading` of one read of ``journal``."""
    reading = Reading(task_ids, on_story)
    for _, line in scan_chain(journal, ChainScan()):
        if line is not None:
            reading.feed(line)
    return reading.finish(journal)


class Verified(NamedTuple):
    """A bundle that verified, and what the report read of its journal on the way."""

    report: VerifyReport
    told: Told


def load_run(run_dir: Path, out_dir: Path | None = None, *, verified: Verified | None = None,
             on_story: Callable[[TaskStory], None] | None = None) -> RunView:
    """Read a run directory or bundle and check what it holds against its journal.

    ``out_dir`` is where the report will be written; links are made relative to it.
    ``verified`` is the bundle's verification, when it was verified (:func:`verify_first`):
    what verify proved is not checked again, the rate and scorecards are the bundle's, and
    the journal was read on the way. Else ``on_story`` is given each task's story as the
    journal is read (the report writes its page); only the stories of tasks still running
    are held.

    Raises:
        ContractError: no readable scoring_contract.json.
        ScoreRefusal: no journal.jsonl; an unreadable rate.json.
        VerificationFailed: a broken journal chain, a journal made under another contract,
            or rate.json, scorecards.jsonl, traces/ or narration_probe.json disagreeing with it.
    """
    contract = load_contract(run_dir / "scoring_contract.json")
    journal = run_dir / "journal.jsonl"
    if not journal.is_file():
        raise ScoreRefusal(f"{run_dir}: no journal.jsonl; not a run directory or bundle")
    rate: Rate | None
    tids = contract.task_ids
    if verified is not None:
        cards, rate, refusal = [CardFacts.of(c) for c in verified.report.scorecards], verified.report.rate, None
    else:
        cards, rate, refusal = _checked_cards(run_dir, contract)
    probe = _load_probe(run_dir / "narration_probe.json", tids)
    told = verified.told if verified is not None else read_journal(journal, tids, on_story)
    agent = told.header.agent
    rel_root = os.path.relpath(run_dir.resolve(), (out_dir if out_dir is not None else run_dir).resolve())
    return RunView(
        contract=contract,
        cards=tuple(cards),
        rate=rate,
        refusal=refusal,
        sandboxes=told.sandboxes,
        agent=dict(agent) if isinstance(agent, dict) else {},
        harness={k: str(v) for k, v in (("sealbench_version", told.header.sealbench_version),
                                          ("python", told.header.python), ("platform", told.header.platform))
                 if v is not None},
        probe=probe,
        provenance=_provenance(told.header),
        traces=frozenset(t for t in tids if (run_dir / "traces" / f"{t}.json").is_file()),
        patches=frozenset(t for t in tids if (run_dir / "patches" / f"{t}.patch").is_file()),
        files_href="" if rel_root == "." else urllib.parse.quote(Path(rel_root).as_posix()) + "/",
        whys=told.whys,
    )


# --------------------------------------------------------------------------- the document


def _interval(iv: Interval | tuple[float, float]) -> Span:
    return Span(f"[{iv[0]:.3f}, {iv[1]:.3f}]", code=True)


def _seconds(value: float) -> str:
    return f"{value:g} s" if value == int(value) else f"{value:.2f} s"


def _sandbox_kinds(view: RunView) -> list[str]:
    return list(dict.fromkeys(str(s.get("kind", "not recorded")) for s in view.sandboxes)) or ["not recorded"]


def _banners(view: RunView) -> list[Block]:
    out: list[Block] = []
    unisolated = next((s for s in view.sandboxes if s.get("kind") == "none"), None)
    if unisolated is not None:
        out.append(Para(spans(
            "this run used sandbox kind ", Span("none", code=True), ": the agent and the oracles ran "
            "unisolated, so the network and the hidden tests were within the agent's reach. Recorded: "
            f"{unisolated.get('network', 'network not recorded')}; "
            f"{unisolated.get('filesystem', 'filesystem not recorded')}."), tone="alert", label="no sandbox"))
    elif "not recorded" in _sandbox_kinds(view):
        out.append(Para(spans("the journal does not record which sandbox this run used."),
                        tone="alert", label="sandbox not recorded"))
    if view.refusal is not None:
        out.append(Para(spans(view.refusal), tone="alert", label="no rate emitted"))
    controls = view.contract.controls
    if controls is not None and controls.oracle_validity == "unavailable":
        out.append(Para(spans(
            "the contract was locked without evidence that each oracle passes the reference solution, "
            "fails an empty change and agrees with itself on repeats."),
            tone="warn", label="oracle validity: unavailable"))
    if contamination(view) is None:
        out.append(Para(spans(
            "nothing in this run declares where the tasks come from or rules out their overlap with "
            "model training data."), tone="warn", label="contamination unknown"))
    return out


def _code(value: str | None, missing: str = "not recorded") -> tuple[Span, ...]:
    return spans(Span(value, code=True)) if value else spans(missing)


def _run_fields(view: RunView) -> Fields:
    c = view.contract
    return Fields("Run", (
        ("run_id", _code(c.run_id, "not locked")),
        ("locked_at", _code(c.locked_at, "not locked")),
        ("contract sha256", _code(c.contract_sha256, "none")),
        ("pack digest", _code(c.pack.sha256 if c.pack else None, "none")),
        ("denominator", spans(f"{view.n} locked task id{'' if view.n == 1 else 's'}")),
        ("checked", spans(view.checked)),
    ), wide=True)


def _caps_fields(b: Budget | None) -> Fields:
    return Fields("Caps", (
        ("max_attempts", spans(str(b.max_attempts) if b else "not set")),
        ("wall_clock_s", spans(f"{b.wall_clock_s:g} per task, oracle included" if b else "not set")),
        ("feedback policy", _code(b.feedback if b else None, "not set")),
    ))


def _access_fields(a: AccessClass | None) -> Fields:
    return Fields("Access class", (
        ("host", _code(a.host if a else None)),
        ("model_access", _code(a.model_access if a else None)),
        ("quota_assumed", spans(str(a.quota_assumed).lower() if a else "not recorded")),
        ("permanence_assumed", spans(str(a.permanence_assumed).lower() if a else "not recorded")),
        ("terms_read_on", _code(a.terms_read_on if a else None)),
    ))


def _controls_fields(view: RunView) -> Fields:
    controls = view.contract.controls
    probe_text = ("the contract declares no narration probe" if controls is None or controls.narration_probe is None
                  else view.probe.sentence if view.probe else "narration probe not run")
    return Fields("Controls", (
        ("narration probe", spans(probe_text)),
        ("oracle validity", spans(controls.oracle_validity if controls else "not declared")),
        ("contamination", spans(contamination(view) or "contamination unknown")),
    ))


def _ran_as(agent: Mapping[str, Any] | None, unsafe: bool) -> tuple[Span, ...]:
    """How the agent ran: its kind and command, and where (sandboxed or not, isolated or not)."""
    if not agent:
        return spans("not recorded")
    if agent.get("sandboxed"):
        where = "as a subprocess without isolation" if unsafe else "inside the sandbox"
    else:
        where = "in-process, outside the sandbox" + ("" if unsafe else " (only the oracle ran sandboxed)")
    return spans(str(agent.get("kind", "?")), " ", Span(str(agent.get("command", "")), code=True), f", {where}")


def _agent_fields(view: RunView) -> Fields:
    spec = view.contract.agent
    kinds = _sandbox_kinds(view)
    unsafe = "none" in kinds or "not recorded" in kinds
    sandbox_text = ("no sandbox: " if "none" in kinds else "") + ", then ".join(kinds)
    network = view.sandboxes[0].get("network") if view.sandboxes else None
    return Fields("Agent and sandbox", (
        ("agent", _code(spec.label if spec else None)),
        ("command", _code(spec.command if spec else None)),
        ("ran as", _ran_as(view.agent, unsafe)),
        ("sandbox", spans(Span(sandbox_text, strong=unsafe, mark="alert" if unsafe else None),
                          *((f"; network: {network}",) if network else ()))),
        ("harness", spans(", ".join(f"{k} {v}" for k, v in view.harness.items()) or "not recorded")),
    ), wide=True)


def _header(view: RunView) -> Section:
    c = view.contract
    return Section("How this run was measured", (_run_fields(view), _caps_fields(c.budget),
                                                 _access_fields(c.access_class), _controls_fields(view),
                                                 _agent_fields(view)))


def _evidence(view: RunView) -> Section:
    b = view.contract.budget
    if view.rate is None or b is None:
        return Section("Evidence", (Para(spans(
            Span("no rate emitted", strong=True), f": {view.refusal or 'the contract sets no budget'}. "
            "The counts below say what happened; they are not a rate."), tone="lead"),))
    r = view.rate
    first = sum(1 for c in view.cards if c.first_attempt_passed)
    rows = (
        (spans(f"within the cap of {b.max_attempts} attempt(s)"), spans(f"{r.task_pass_count} of {view.n} task_pass"),
         (_interval((r.wilson_95.low, r.wilson_95.high)),)),
        (spans("on the first attempt"), spans(f"{first} of {view.n} task_pass"),
         (_interval(wilson_interval(first, view.n)),)),
    )
    return Section("Evidence", (
        Para(spans(Span(f"{r.sentence}.", strong=True), " Wilson 95% interval ",
                   _interval((r.wilson_95.low, r.wilson_95.high)),
                   f", within the cap of {b.max_attempts} attempt(s), feedback policy ", Span(b.feedback, code=True),
                   f"; {contamination(view) or 'contamination unknown'}."), tone="lead"),
        Table(("", "tasks", "Wilson 95% interval"), rows),
        Para(spans(f"{NOTE[0].upper()}{NOTE[1:]}. Timeouts and abstains stay in the denominator. "
                   "Not a vendor ranking."), tone="note"),
    ))


def _attempts(view: RunView) -> Section | None:
    b = view.contract.budget
    if view.rate is None or b is None:
        return None
    title = f"Pass by attempt: sequential attempts with feedback policy {b.feedback}, not pass@k"
    rows = tuple(
        (spans(str(p.k)), spans(f"{p.passed} of {p.n} task_pass"), (_interval(p.interval),))
        for p in attempt_curve(view.cards, view.n, b.max_attempts)
    )
    return Section(title, (
        Para(spans(f"Cumulative task_pass by attempt k over all {view.n} locked tasks: {_NOT_PASS_AT_K}.")),
        Table(("attempt k", "task_pass by attempt k", "Wilson 95% interval"), rows),
        Figure("attempts", f"Cumulative task_pass by attempt k, out of {view.n}, with Wilson 95% intervals",
               f"Cumulative task_pass by attempt k, in tasks out of {view.n}; bars: Wilson 95% interval"),
    ))


def _outcomes(view: RunView) -> Section:
    counts = outcome_counts(view)
    rows = tuple((spans(Span(k, mark=k)), spans(f"{v} of {view.n}")) for k, v in counts.items())
    blocks: list[Block] = [Table(("outcome", "tasks"), rows)]
    if UNFINISHED in counts:
        blocks.append(Para(spans(f"{counts[UNFINISHED]} task(s) of the denominator have no task_finished event: "
                                 "the run has not finished (resume it)."), tone="warn", label=UNFINISHED))
    blocks.append(Figure("outcomes", "Tasks by outcome, out of the locked denominator",
                         "Outcome breakdown: every task of the denominator, timeouts and abstains included"))
    return Section("Outcomes", tuple(blocks))


def _elapsed_rows(view: RunView) -> list[tuple[str, list[float]]]:
    rows = [(o.value, [c.elapsed_ms / 1000 for c in view.cards if c.outcome is o]) for o in Outcome]
    return [(name, secs) for name, secs in rows if secs]


def _elapsed(view: RunView) -> Section:
    b = view.contract.budget
    secs = [c.elapsed_ms / 1000 for c in view.cards]
    cap = f"; wall-clock cap {_seconds(b.wall_clock_s)} per task" if b else ""
    if not secs:
        return Section("Elapsed time", (Para(spans(f"No task finished{cap}.")),))
    return Section("Elapsed time", (
        Para(spans(f"Elapsed per task over {len(secs)} finished task(s): min {_seconds(min(secs))}, "
                   f"median {_seconds(statistics.median(secs))}, max {_seconds(max(secs))}{cap}.")),
        Figure("elapsed", "Per-task elapsed seconds by outcome, with the wall-clock cap",
               "Per-task elapsed time, one dot per task"),
    ))


def _usage_cells(u: ModelUsage | None) -> tuple[tuple[Span, ...], ...]:
    if u is None:
        return spans("0"), spans("-"), spans("-")
    return spans(str(u.calls)), spans(f"{u.input_tokens} / {u.output_tokens}"), spans(cost_words(u.cost, u.currency))


def _model_use(view: RunView) -> Section | None:
    """Totals of the run's model calls, and the cost of each pass; None when no agent called a model."""
    used = [c.model_usage for c in view.cards if c.model_usage is not None]
    if not used:
        return None
    summed = total(used)
    passes = sum(1 for c in view.cards if c.outcome is Outcome.PASS)
    per_pass = (cost_words(summed.cost / passes, summed.currency) if summed.cost is not None and passes
                else "unknown" if summed.cost is None else "no pass")
    rows = (
        ("model calls", spans(f"{summed.calls} ({summed.refused} refused by the gateway, {summed.failed} failed "
                              f"upstream, {summed.unreported} answered without usage)")),
        ("tokens", spans(f"{summed.input_tokens} input ({summed.cached_tokens} cached), {summed.output_tokens} output, "
                         "as the upstream reported them")),
        ("cost", spans(cost_words(summed.cost, summed.currency) + " by the contract's locked prices"
                       + ("" if summed.cost is not None else ": a model without a price, or a reply without usage"))),
        ("cost per pass", spans(per_pass + f" ({passes} pass(es))")),
    )
    return Section("Model use", (Fields("Every task's model calls, through the gateway", rows, wide=True),))


def _passed_last(card: CardFacts | None) -> int:
    """Sort key of the task table: what needs a look (unfinished, failed) before what passed."""
    return 1 if card is not None and card.outcome is Outcome.PASS else 0


class _TaskRows(Sequence[tuple[tuple[Span, ...], ...]]):
    """The task table's rows, each made as it is read: a report of 100,000 tasks never holds
    their spans, only what each row is made from."""

    def __init__(self, view: RunView) -> None:
        self._view = view
        self._cards = {c.task_id: c for c in view.cards}
        self._models = any(c.model_usage is not None for c in view.cards)
        self._order = sorted(view.contract.task_ids, key=lambda t: _passed_last(self._cards.get(t)))

    @property
    def models(self) -> bool:
        """Whether the table has the model use columns."""
        return self._models

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[tuple[tuple[Span, ...], ...]]:
        for tid in self._order:
            yield self._row(tid)

    @overload
    def __getitem__(self, index: int) -> tuple[tuple[Span, ...], ...]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[tuple[Span, ...], ...]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._row(t) for t in self._order[index]]
        return self._row(self._order[index])

    def _row(self, tid: str) -> tuple[tuple[Span, ...], ...]:
        view, c, models = self._view, self._cards.get(tid), self._models
        trace = (Span("trace", href=f"{FILES_DIR}/traces/{tid}.json") if tid in view.traces
                 else Span("none"))
        if tid in view.patches:
            patch = Span("patch", href=f"{FILES_DIR}/patches/{tid}.patch")
        else:
            patch = Span("empty" if c is not None and not c.patched else "none")
        why_words = view.whys.get(tid)
        # From the journal's facts alone (no stored output): the summary reads the same from a
        # run directory and from a bundle-shaped copy without blobs/.
        why = spans(why_words if why_words is not None else "-")
        task = spans(Span(tid, code=True, href=page_name(tid)) if why_words is not None else Span(tid, code=True))
        if c is None:
            return (task, spans(Span(UNFINISHED, mark=UNFINISHED)), spans("-"), spans("-"), spans("-"), spans("no"),
                    *((spans("-"),) * 3 if models else ()), why, (trace,), (patch,))
        outcome = spans(Span(c.outcome.value, mark=c.outcome.value))
        if c.forging_flags is not None:
            outcome = (*outcome, Span(" (flagged)"))
        return (
            task,
            outcome,
            spans(f"{c.attempts_used} of {c.max_attempts}"),
            spans(Outcome.PASS.value if c.first_attempt_passed else "no"),
            spans(f"{c.elapsed_ms / 1000:.2f} s"),
            spans("yes" if c.scorecard_complete else "no"),
            *(_usage_cells(c.model_usage) if models else ()),
            why,
            (trace,),
            (patch,),
        )


def _tasks(view: RunView) -> Section:
    rows = _TaskRows(view)
    header = ("task", "outcome", "attempts", "first attempt", "elapsed", "scorecard complete",
              *(("model calls", "tokens in / out", "cost") if rows.models else ()), "why", "trace", "patch")
    note = Para(spans("Each task's page (its link) tells its story: every attempt's exit, output, patch and "
                      "grading. The trace and patch files are copies inside this report's folder."), tone="note")
    return Section("Tasks", (note, Table(header, rows, sortable=True)))


def _flags(view: RunView) -> Section | None:
    """The tasks whose test process was seen using a known forging means; None when none was."""
    flagged = [c for c in view.cards if c.forging_flags is not None]
    if not flagged:
        return None
    policy = "counted" if view.contract.flagged_pass == "counted" else "not counted"
    lead = Para(spans(Span(f"{len(flagged)} task(s) raised forging flags while graded.", strong=True),
                      f" Under this contract a flagged pass is {policy}. Code under test runs inside the "
                      "test process of repository tests, so these means are detected, not prevented."),
                tone="warn", label="forging flags")
    rows = tuple(spans(Span(c.task_id, code=True), ": ", c.forging_flags.why)
                 for c in flagged if c.forging_flags is not None)
    return Section("Forging flags", (lead, Bullets(rows)))


def _probe(view: RunView) -> Section:
    controls = view.contract.controls
    if controls is None or controls.narration_probe is None:
        return Section("Narration probe", (Para(spans("The contract declares no narration probe control.")),))
    declared = Para(spans("Control: ", Span(controls.narration_probe, code=True),
                          ". Reported beside the rate; it never enters the numerator."), tone="note")
    if view.probe is None:
        return Section("Narration probe", (Para(spans("narration probe not run."), tone="warn",
                                                label="narration probe not run"), declared))
    p = view.probe
    blocks: list[Block] = [Para(spans(Span(f"{p.sentence}.", strong=True)), tone="lead"), declared]
    if p.failed:
        blocks.append(Para(spans(f"Asked only to summarise, the agent changed the workspace (a non-empty patch) on "
                                 f"{len(p.failed)} task(s):")))
        blocks.append(Bullets(tuple(spans(Span(t, code=True)) for t in p.failed)))
    return Section("Narration probe", tuple(blocks))


def report_title(view: RunView) -> str:
    """The report's title line."""
    return f"sealbench report: run {view.contract.run_id or 'not locked'}"


def report_footer(view: RunView) -> str:
    """The closing line of both files (and of every task page)."""
    return _footer(view.contract)


def _footer(contract: ScoringContract) -> str:
    return (f"Derived from journal.jsonl of run {contract.run_id or 'not locked'} under contract "
            f"{contract.contract_sha256 or 'none'}; {NOTE}; not a vendor ranking.")


def build_sections(view: RunView) -> list[Section]:
    """The whole report as neutral blocks, in reading order (pure)."""
    # The answer first (the rate, its interval, the outcomes, the tasks that did not pass), then
    # how it was reached, and the controls and digests that pin it last.
    sections = [Section("", tuple(_banners(view))), _evidence(view), _outcomes(view), _tasks(view)]
    flags = _flags(view)
    if flags is not None:
        sections.append(flags)
    attempts = _attempts(view)
    if attempts is not None:
        sections.append(attempts)
    sections.append(_elapsed(view))
    model_use = _model_use(view)
    if model_use is not None:
        sections.append(model_use)
    sections += [_probe(view), _header(view)]
    return sections


def figure_names(sections: Iterable[Section]) -> list[str]:
    """Names of the figures the sections show, in order."""
    return [blk.name for s in sections for blk in s.blocks if isinstance(blk, Figure)]


def render_figures(view: RunView, names: Iterable[str]) -> dict[str, bytes]:
    """Draw the named figures as SVG bytes (byte-identical for the same run).

    Raises:
        KeyError: an unknown figure name.
    """
    from . import plots

    b = view.contract.budget
    out: dict[str, bytes] = {}
    for name in names:
        if name == "attempts":
            assert b is not None
            points = [plots.AttemptPoint(p.k, p.passed, p.n, p.interval.low, p.interval.high)
                      for p in attempt_curve(view.cards, view.n, b.max_attempts)]
            out[name] = plots.attempts_svg(points, b.feedback)
        elif name == "outcomes":
            out[name] = plots.outcomes_svg(outcome_counts(view), view.n)
        elif name == "elapsed":
            out[name] = plots.elapsed_svg(_elapsed_rows(view), b.wall_clock_s if b else None)
        else:
            raise KeyError(f"unknown figure {name!r}")
    return out


def render_markdown(view: RunView, sections: Sequence[Section]) -> str:
    """report.md: the sections as Markdown, figures as the SVG files written beside it."""
    return _doc_markdown(report_title(view), sections, FIGURE_FILES, report_footer(view))


def render_html(view: RunView, sections: Sequence[Section], svgs: dict[str, bytes]) -> str:
    """report.html: the same sections as one self-contained page, figures inlined.

    Raises:
        KeyError: a figure of ``sections`` is missing from ``svgs``.
    """
    images = {name: ("image/svg+xml", data) for name, data in svgs.items()}
    return _doc_html(report_title(view), sections, images, report_footer(view))


# --------------------------------------------------------------------------- writing


def default_out_dir(bundle_or_run_dir: Path) -> Path:
    """``<dir>-report/`` beside the run: never inside it, since a bundle's SHA256SUMS lists every file."""
    resolved = Path(bundle_or_run_dir).resolve()
    return resolved.with_name(f"{resolved.name}-report")


def verify_first(bundle_or_run_dir: Path, on_story: Callable[[TaskStory], None] | None = None,
                 steps: Steps | None = None) -> Verified | None:
    """Verify a bundle (a directory with SHA256SUMS) before it is reported; None for a run
    directory. The journal is read once: each task's story is told (to ``on_story``) from
    the same read that verifies it, and trusted only when the whole bundle verifies.

    Returns:
        What the verification proved (:func:`checked_words` says it as the report's line),
        and what the report read of the journal.

    Raises:
        ScoreRefusal: the bundle does not verify; the message names every problem found.
    """
    from .bundle import SUMS, verify_bundle

    if not (bundle_or_run_dir / SUMS).is_file():
        return None
    try:
        task_ids = load_contract(bundle_or_run_dir / "scoring_contract.json").task_ids
    except ContractError:
        task_ids = []  # the bundle does not verify: refused below with every problem named
    reading = Reading(task_ids, on_story)
    try:
        report = verify_bundle(bundle_or_run_dir, on_line=reading.feed, steps=steps)
    except VerificationFailed as e:
        shown = "; ".join(e.problems[:5]) + (f"; and {len(e.problems) - 5} more" if len(e.problems) > 5 else "")
        raise ScoreRefusal(f"no report: the bundle {bundle_or_run_dir} does not verify ({len(e.problems)} "
                           f"problem(s)): {shown}; see `sealbench verify {bundle_or_run_dir}`") from None
    return Verified(report, reading.finish(bundle_or_run_dir / "journal.jsonl"))


def checked_words(report: VerifyReport) -> str:
    """The report's "checked" line for a bundle that verified."""
    from .bundle import SIGNATURE

    sig = ("not signed" if SIGNATURE not in report.signature else
           f"{SIGNATURE} present, not checked against a key here (sealbench verify BUNDLE --pubkey KEY checks it)")
    return (f"the bundle verifies (every sum, the journal chains, every derived file, each task's events); "
            f"{sig}: without a checked signature this proves internal consistency only")


def write_report(bundle_or_run_dir: Path, out_dir: Path | None = None, *,
                 steps: Steps | None = None) -> tuple[Path, Path]:
    """Write report.md (with its SVG figures beside it) and a self-contained report.html.

    Works on a bundle (``runs/<run_id>/``) and on a plain run directory alike. ``out_dir``
    defaults to :func:`default_out_dir`; links to traces and patches are relative to it.
    ``steps`` shows how far the report is (verify's steps, then the copies and the pages).

    Returns:
        The paths of report.md and report.html.

    Raises:
        ContractError: no readable scoring_contract.json.
        ScoreRefusal: no journal.jsonl, an unreadable rate.json, or a bundle that does not
            verify (see :func:`verify_first`).
        VerificationFailed: the directory's files disagree with its journal (see :func:`load_run`).
    """
    run_dir = Path(bundle_or_run_dir)
    chosen = out_dir is not None
    out = Path(out_dir) if out_dir is not None else default_out_dir(run_dir)
    try:
        contract = load_contract(run_dir / "scoring_contract.json")
        _refuse_misplaced(out, run_dir, chosen=chosen)
        _refuse_linked_folders(out, chosen=chosen)
    except (ContractError, ScoreRefusal):
        verify_first(run_dir)  # a bundle is refused for what verify finds, every problem named
        raise
    made = _make_folders(out)
    # Everything is written into a folder of this process's own inside the report's (swept
    # when a killed report leaves it), then moved into place, report.md last: a refused or
    # failed report leaves the folder as it found it (and removes the folders it made), each
    # file is written once, never through a link, and only the report's own files are replaced.
    stage: Path | None = None
    try:
        sweep(out, _STAGE)  # only a report's own: the folder may be the user's (--out ~)
        stage = Path(tempfile.mkdtemp(prefix=f".sealbench-report.tmp-{os.getpid()}-", dir=out))
        _stage_report(run_dir, contract, out, stage, steps)
        _refuse_linked_folders(out, chosen=chosen)  # again: the folder may have changed meanwhile
        _move_into(stage, out)
    except BaseException:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
            stage = None
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: nothing of anyone else's is removed
        raise
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
    return out / "report.md", out / "report.html"


def _make_folders(out: Path) -> list[Path]:
    """Make ``out`` and its missing parents; returns the folders made, outermost first."""
    missing = [p for p in (out, *out.parents) if not p.exists() and not p.is_symlink()]
    out.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def _stage_report(run_dir: Path, contract: ScoringContract, out: Path, stage: Path,
                  steps: Steps | None = None) -> None:
    """Every file of the report written under ``stage``: the task pages (each as its task
    finishes, from verify's one read of a bundle's journal), the copies, the figures,
    report.html and report.md; links in them are relative to ``out``."""
    blobs, run_id, footer = Blobs(run_dir), str(contract.run_id), _footer(contract)
    (stage / TASKS_DIR).mkdir()

    def page(story: TaskStory) -> None:
        _write_new(stage / page_name(story.task_id), render_task_page(run_id, story, blobs, footer).encode("utf-8"))

    verified = verify_first(run_dir, page, steps)
    if verified is None and steps is not None:
        steps.step("reading the run", None)
    view = load_run(run_dir, out, verified=verified, on_story=page)
    if verified is not None:
        view = replace(view, checked=checked_words(verified.report))
    if steps is not None:
        steps.step("copying traces and patches", len(view.traces) + len(view.patches))
    _copy_files(run_dir, stage, view, steps)
    if steps is not None:
        steps.step("figures, report.md and report.html", None)
    sections = build_sections(view)
    svgs = render_figures(view, figure_names(sections))
    for name, data in svgs.items():
        _write_new(stage / FIGURE_FILES[name], data)
    images = {name: ("image/svg+xml", data) for name, data in svgs.items()}
    write_atomic_pieces(stage / "report.html", html_pieces(report_title(view), sections, images, report_footer(view)))
    write_atomic_pieces(stage / "report.md", markdown_pieces(report_title(view), sections, FIGURE_FILES,
                                                             report_footer(view)))


def _write_new(path: Path | str, data: bytes, dir_fd: int | None = None) -> None:
    """``data`` as the new file ``path`` (in ``dir_fd``) in a folder of this process's own,
    never through a link; a file there already (a task's page told again) is replaced."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        os.unlink(path, dir_fd=dir_fd)
        fd = os.open(path, flags, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


_STAGE: Final = re.compile(r"^\.sealbench-report\.tmp-(?P<pid>\d{1,10})-[A-Za-z0-9_]+$")
"""The folder a report is staged in, inside the report's own (swept when its process is gone)."""

_REPORT_FILES: Final = (TASKS_DIR, FILES_DIR, *FIGURE_FILES.values(), "report.html", "report.md")
"""What a report's folder holds, in the order a new report's files are moved in."""


def _move_into(stage: Path, out: Path) -> None:
    """Each of :data:`_REPORT_FILES` moved from ``stage`` into ``out``, report.md last. A
    folder ``out`` lacks is moved in whole; into one it has, each file is moved on its own,
    replacing only the file of its name: the folder may be the user's (``--out .``), and
    nothing in it but the report's own files is touched. Names are renamed, never followed.

    An earlier report.md is moved out first, so a move cut short leaves no report.md beside
    the new pages: never a report that looks whole and is not.

    Raises:
        FileNotFoundError: report.md or report.html is gone from ``stage``.
    """
    for name in ("report.md", "report.html"):
        if not (stage / name).is_file():
            raise FileNotFoundError(f"{stage / name}: made by this report, gone before it was moved in")
    old_md = out / "report.md"
    if old_md.exists() or old_md.is_symlink():
        old_md.rename(stage / "old-report.md")
    for name in _REPORT_FILES:
        _move(stage / name, out / name)
    fsync_dir(out)


def _move(new: Path, old: Path) -> None:
    if not new.exists():
        return
    if not new.is_dir() or not old.is_dir() or old.is_symlink():
        new.replace(old)  # a file, or a folder where there is none (a link there is refused before)
        return
    with os.scandir(new) as entries:
        for entry in entries:
            _move(Path(entry.path), old / entry.name)


def _refuse_misplaced(out: Path, run_dir: Path, *, chosen: bool) -> None:
    """Refuse a report folder that is not a folder (a file, a link to nothing), that is the
    run or bundle reported on or inside it, or that holds a bundle: a bundle's SHA256SUMS
    lists every file it holds, so a report written into one would unmake it.

    Raises:
        ScoreRefusal: naming the folder and the way out.
    """
    fix = "choose another folder with --out" if chosen else "remove it, or choose the folder with --out"
    if chosen and (out.is_symlink() or out.exists()) and not out.is_dir():
        raise ScoreRefusal(f"no report: {out} is not a folder (a file, or a link to none); {fix}")
    where, source = out.resolve(), run_dir.resolve()
    if where == source or source in where.parents:
        raise ScoreRefusal(f"no report: {out} is inside {run_dir}, the run it reports on; a report is written "
                           f"beside what it reports on, never into it: {fix}")
    from .bundle import SUMS

    if (where / SUMS).exists():
        raise ScoreRefusal(f"no report: {out} holds a bundle ({SUMS}), which a report's files would unmake; {fix}")


def _refuse_linked_folders(out: Path, *, chosen: bool) -> None:
    """Refuse to write through a link at the report's folder or a folder it writes into: the
    folder beside a bundle that came from elsewhere (in the same archive, say) can be a link
    aimed anywhere. A folder the user ``chosen`` with --out may itself be a link (theirs);
    what it holds is checked all the same.

    Raises:
        ScoreRefusal: naming the link or the file in the way.
    """
    inside = (out / TASKS_DIR, out / FILES_DIR, out / FILES_DIR / "traces", out / FILES_DIR / "patches")
    for folder in inside if chosen else (out, *inside):
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            fix = "remove it" if folder != out else "remove it, or choose the folder with --out"
            raise ScoreRefusal(f"no report: {folder} is {'a link' if folder.is_symlink() else 'not a folder'}; "
                               f"a report is written only into real folders: {fix}")


def _copy_files(run_dir: Path, out: Path, view: RunView, steps: Steps | None = None) -> None:
    """Copy the traces and patches the task table links to into ``out/files/`` (a folder of
    this process's own), so the report's folder can be sent on its own. Only regular files
    are copied, never through a link; each folder is opened once."""
    for sub, names in (("traces", (f"{t}.json" for t in sorted(view.traces))),
                       ("patches", (f"{t}.patch" for t in sorted(view.patches)))):
        src = open_folder(run_dir, sub)
        if src is None:
            continue
        dst: int | None = None
        try:
            for name in names:
                if steps is not None:
                    steps.advance()
                data = read_regular_at(src, name, _FILE_CAP)
                if data is None:
                    continue
                if dst is None:
                    (out / FILES_DIR / sub).mkdir(parents=True)
                    dst = os.open(out / FILES_DIR / sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                _write_new(name, data, dst)
        finally:
            os.close(src)
            if dst is not None:
                os.close(dst)


_FILE_CAP = 64 * 2**20
