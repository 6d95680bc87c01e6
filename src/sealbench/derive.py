"""Every byte a run reports, derived from its journal by pure functions, and their versions.

Scorecards, per-task traces, events.json, rate.json, narration_probe.json, patches/,
commands.txt and a bundle's README.md are functions of the journals' events (and the locked
contract) alone, so ``verify`` can re-derive them later and compare byte for byte.

A bundle is verified for years, by releases that did not exist when it was made. The rules
that turn a journal into these bytes therefore carry a version, :data:`DERIVATION_VERSION`,
recorded in each run's ``run_started`` event (a journal without one was made under version 1).
A change to any derived byte bumps it and adds the new rules beside the old in
:data:`RULES`, never in place of them: ``verify`` re-derives each bundle with the rules of the
version that made it (:func:`rules_for`), and a bundle made by a newer release is reported as
such, never as tampered (:func:`newer_release`). The bundles under ``tests/fixtures/bundles``
hold the suite to it.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from . import events as ev
from .digest import DIGEST_RE, canonical_json, is_real_digest, sha256_bytes
from .errors import Refusal, ScoreRefusal
from .formats import (
    AgentEnding,
    ForgingFlags,
    ModelEndpoint,
    ModelUsage,
    Rate,
    Scorecard,
    ScoringContract,
    SeedEvent,
)
from .outcomes import Outcome
from .score import score
from .scorecard import REQUIRED_SCORE_KEYS
from .usage import task_usage
from .vocabulary import VOCABULARY

DERIVATION_VERSION: Final = 5
"""The version of the rules this release derives new runs with (see the module docstring).

1: the rules of the first release that recorded one. 2: the same rules, over journals that may
hold ``submitted``, ``duplicate_result`` and ``model_call`` events (each task's trace holds its
``submitted`` and ``model_call`` lines, and a task whose agent called a model gets
``model_usage`` in its scorecard): a release that knows only version 1 cannot read them, and
says the bundle was made by a newer release rather than failing it. 3: the same rules, over
journals whose ``agent_finished`` events may list the agent's trace folder
(``transcript_files``), each kept file a blob the bundle carries and ``verify`` checks; the
traces hold those lines, so the task's trace digest covers the transcript. 4: the same rules,
over journals whose ``agent_finished`` events may carry ``agent_ending`` (how the agent says
it ended, from an agent preset's launcher); the scorecard of a task whose last attempt's agent
said so carries it as ``agent_ending``. 5: the same rules, over journals that may hold
``model_call_started`` events (a call journaled before it was forwarded) and ``model_call``
events that record a body's digest apart from its blob (``request_sha256``,
``response_sha256``, ``request_truncated``, ``bodies_missing``) or stand for many refused
requests (``refused_count``, each counted in ``model_usage``); a call started whose
``model_call`` never came (the runner died) counts in ``model_usage`` as a call whose use is
unknown. Their ``task_finished`` may say ``infra_error`` (the vocabulary's ``infra_error``): a
task whose last attempt something other than its agent ended (a crash, a stop, a full disk, a
lost node) with no attempt or time left, which version 4 ended as ``fail`` or ``timeout``; its
scorecard is not complete, and it refuses the rate."""

CONTRACT: Final = "scoring_contract.json"
JOURNAL: Final = "journal.jsonl"
PROBE_JOURNAL: Final = "probe/journal.jsonl"
PROBE_SUMMARY: Final = "narration_probe.json"
RATE: Final = "rate.json"
COMMANDS: Final = "commands.txt"
README: Final = "README.md"
NOT_A_RANKING: Final = "not a vendor ranking."
LIBRARY_CALL_NOTE: Final = (
    "# argv null: started by a library call (sealbench.runner.execute); no command line was recorded"
)

@dataclass(frozen=True)
class Derived:
    """The files derived from one journal, as bytes keyed by their run-relative path."""

    scorecards: list[Scorecard]
    files: dict[str, bytes]


def trace_bytes(events: Sequence[ev.Line]) -> bytes:
    """The bytes of ``traces/<task_id>.json``: the task's lines in journal order, as written.

    The canonical bytes of a list are its items' joined by commas, so a line whose reader kept
    its canonical bytes is not serialised again."""
    parts = [line.canonical if line.canonical is not None else canonical_json(line.raw) for line in events]
    return b"[" + b",".join(parts) + b"]\n"


def scorecard_for(task_events: Sequence[ev.Line], endpoints: Sequence[ModelEndpoint] = (),
                  trace: bytes | None = None) -> Scorecard | None:
    """The scorecard of one finished task, or None while it has not finished. ``endpoints``
    are the contract's model endpoints, whose locked prices cost the task's model calls;
    ``trace``, the task's :func:`trace_bytes` when the caller made them already."""
    s = next((e.event for e in task_events if isinstance(e.event, ev.TaskStarted)), None)
    f = next((e.event for e in reversed(task_events) if isinstance(e.event, ev.TaskFinished)), None)
    if s is None or f is None:
        return None
    trace_sha = sha256_bytes(trace if trace is not None else trace_bytes(task_events))
    card: dict[str, Any] = {
        "task_id": f.task_id,
        "passed": f.outcome == Outcome.PASS.value,
        "attempts_used": f.attempts_used,
        "max_attempts": s.max_attempts,
        "elapsed_ms": f.elapsed_ms,
        "wall_clock_s": s.wall_clock_s,
        "prompt_template_id": s.prompt_template_id,
        "hidden_tests_sha256": s.hidden_tests_sha256,
        "tool_trace_sha256": trace_sha,
        "scorecard_complete": False,
        "outcome": f.outcome,
        "first_attempt_passed": f.first_attempt_passed,
        "patch_sha256": f.patch_sha256,
    }
    flags = forging_flags(task_events)
    if flags is not None:
        card["forging_flags"] = flags
    used = task_usage(task_events, endpoints)
    if used is not None:  # only a task whose agent called a model: other scorecards keep their bytes
        card["model_usage"] = ModelUsage(
            calls=used.calls, refused=used.refused, failed=used.failed, unreported=used.unreported,
            input_tokens=used.input_tokens, output_tokens=used.output_tokens, cached_tokens=used.cached_tokens,
            cost=round(used.cost, 9) if used.cost is not None else None, currency=used.currency,
            cap_reached=next((line.event.cap for line in task_events
                              if isinstance(line.event, ev.ModelCall) and line.event.cap is not None), None))
    ending = agent_ending(task_events)
    if ending is not None:  # only where the agent said: other scorecards keep their bytes
        card["agent_ending"] = ending
    # Complete only when every control is present and within its published cap.
    card["scorecard_complete"] = (
        all(card.get(k) is not None for k in REQUIRED_SCORE_KEYS)
        and is_real_digest(card["hidden_tests_sha256"])
        and card["attempts_used"] <= card["max_attempts"]
        and card["outcome"] not in (Outcome.HARNESS_ERROR.value, Outcome.INFRA_ERROR.value)
    )
    return Scorecard.model_validate(card)


def agent_ending(task_events: Sequence[ev.Line]) -> AgentEnding | None:
    """How the agent said the task's last attempt ended, with the exit code the harness saw (not
    the one the agent wrote down); None when that attempt's agent said nothing, or never
    finished (an interrupted attempt: an earlier one's word would not be about it)."""
    last = max((line.event.attempt for line in task_events
                if isinstance(line.event, ev.AttemptStarted) and line.event.attempt is not None), default=None)
    finished = next((line.event for line in reversed(task_events)
                     if isinstance(line.event, ev.AgentFinished) and line.event.attempt == last), None)
    if finished is None or finished.agent_ending is None:
        return None
    said = finished.agent_ending
    return AgentEnding(exit_code=finished.exit_code, ending=said.ending, said=list(said.said))


def forging_flags(task_events: Sequence[ev.Line]) -> ForgingFlags | None:
    """What the task's graded events flagged, or None when nothing was (the usual case: the
    scorecard then has no such field, and scorecards derived before it keep their bytes)."""
    flags: set[str] = set()
    attempts: list[int] = []
    not_counted: list[int] = []
    for line in task_events:
        graded = line.event
        if not isinstance(graded, ev.Graded) or not graded.forging_flags or graded.attempt is None:
            continue
        flags.update(graded.forging_flags)
        attempts.append(graded.attempt)
        if graded.flagged_pass == "not_counted":
            not_counted.append(graded.attempt)
    if not flags:
        return None
    names = ", ".join(sorted(flags))
    which = ", ".join(str(a) for a in attempts)
    why = f"grading of attempt {which} flagged: {names}"
    if not_counted:
        why += (f"; the hidden tests passed on attempt {', '.join(str(a) for a in not_counted)} "
                "but the contract does not count a flagged pass")
    return ForgingFlags(flags=sorted(flags), attempts=attempts, passes_not_counted=not_counted, why=why)


def seed_event(card: Scorecard) -> SeedEvent:
    """The seed event (an events.json entry) of one scorecard."""
    return SeedEvent(
        task_id=card.task_id,
        task_pass=card.outcome is Outcome.PASS,
        abstain=card.outcome is Outcome.ABSTAIN,
        wall_seconds=round(card.elapsed_ms / 1000, 3),
        outcome=card.outcome,
        attempts_used=card.attempts_used,
    )


def _by_task(events: Iterable[Any], task_ids: Sequence[str]) -> Iterator[tuple[str, list[ev.Line], bool]]:
    """Each task's lines as soon as it finishes (True), then those of each task of ``task_ids``
    still running when the journal ends (False); the lines of a task outside ``task_ids`` are
    left out. Only the lines of tasks still running are held.

    Raises:
        EventError: a parsed line whose event this release does not read.
    """
    wanted = set(task_ids)
    pending: dict[str, list[ev.Line]] = {}
    for line in ev.lines(events):
        tid = line.task_id
        if tid is None or tid not in wanted:
            continue
        pending.setdefault(tid, []).append(line)
        if isinstance(line.event, ev.TaskFinished):
            yield tid, pending.pop(tid), True
    for tid in task_ids:
        if tid in pending:
            yield tid, pending.pop(tid), False


def _finished_task(task_events: Sequence[ev.Line], endpoints: Sequence[ModelEndpoint]
                   ) -> tuple[bytes, tuple[bytes, dict[str, Any]] | None, Scorecard | None]:
    """A finished task's trace, its scorecard's line and events.json entry (None when it gets
    no scorecard), and its scorecard."""
    trace = trace_bytes(task_events)
    card = scorecard_for(task_events, endpoints, trace)
    if card is None:
        return trace, None, None
    entry = seed_event(card).model_dump(mode="json")
    entry.pop("excluded_after_lock", None)
    return trace, (canonical_json(card.model_dump(mode="json")) + b"\n", entry), card


def derive_iter(events: Iterable[Any], task_ids: Sequence[str], endpoints: Sequence[ModelEndpoint] = (),
                cards_out: list[Scorecard] | None = None,
                seeds_out: list[dict[str, Any]] | None = None) -> Iterator[tuple[str, bytes]]:
    """Stream the derived files: each trace as soon as its task finishes, then
    scorecards.jsonl and events.json.

    ``events`` are typed lines (or lines as parsed). Only the events of tasks still running
    are held, so a run's memory does not grow with its length. Events of tasks outside
    ``task_ids`` are ignored. ``cards_out``, when given, receives the scorecards in the order
    scorecards.jsonl lists them, before that file is yielded; ``seeds_out``, events.json's
    entries. Of a finished task only its scorecard's line and its entry are kept (and its
    scorecard, for ``cards_out``). :func:`derive_hashed` makes the same files without holding
    those either.

    Raises:
        EventError: a parsed line whose event this release does not read.
    """
    cards: dict[str, tuple[bytes, dict[str, Any], Scorecard | None]] = {}
    for tid, task_events, finished in _by_task(events, task_ids):
        if not finished:
            yield f"traces/{tid}.json", trace_bytes(task_events)
            continue
        trace, made, card = _finished_task(task_events, endpoints)
        yield f"traces/{tid}.json", trace
        if made is not None:
            cards[tid] = (*made, card if cards_out is not None else None)
    ordered = [cards[t] for t in task_ids if t in cards]
    if cards_out is not None:
        cards_out.extend(card for _, _, card in ordered if card is not None)
    yield "scorecards.jsonl", b"".join(line for line, _, _ in ordered)
    seed = [entry for _, entry, _ in ordered]
    if seeds_out is not None:
        seeds_out.extend(seed)
    del cards, ordered
    yield "events.json", (json.dumps(seed, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


_FLAT = json.JSONEncoder(ensure_ascii=False, separators=(",\n  ", ": "))
"""An object of scalars as ``json.dumps(indent=2)`` lays out its members, in one call of the
encoder written in C (the one ``indent`` uses is written in Python)."""
_SCALARS = (str, int, float, bool, type(None))


def indented(entry: dict[str, Any]) -> str:
    """``json.dumps(entry, indent=2, ensure_ascii=False)``: one of events.json's entries (a flat
    object of scalars, laid out by :data:`_FLAT`), or any other value as that call makes it."""
    if not entry or not all(type(value) in _SCALARS for value in entry.values()):
        return json.dumps(entry, indent=2, ensure_ascii=False)
    return "{\n  " + _FLAT.encode(entry)[1:-1] + "\n}"


@dataclass(frozen=True)
class Made:
    """A derived file hashed as it was made, in pieces: its sha256 (hex) and size, not its bytes."""

    sha256: str
    size: int


class FinishedTwice(Exception):
    """A task finished again after :func:`derive_hashed` had passed it: its files can only be
    made whole (:func:`derive_iter`), as a later finish replaces an earlier one there."""


class _InOrder:
    """scorecards.jsonl and events.json, hashed in the order of ``task_ids`` as tasks finish: a
    finished task's line and entry wait only until every task before it has finished (or the
    journal has ended). events.json's bytes are ``json.dumps`` of the list with an indent of 2,
    made one entry at a time: the list indents each entry's own lines by two more spaces (no
    JSON string holds a newline), and separates entries with a comma and a newline."""

    def __init__(self, task_ids: Sequence[str], on_seed: Callable[[dict[str, Any]], None] | None) -> None:
        self.order = task_ids
        self.cursor = 0
        self.waiting: dict[str, tuple[bytes, dict[str, Any]] | None] = {}
        self.passed: set[str] = set()
        self.on_seed = on_seed
        self.cards, self.seeds = hashlib.sha256(), hashlib.sha256()
        self.sizes = [0, 0]

    def finished(self, tid: str, made: tuple[bytes, dict[str, Any]] | None) -> None:
        if tid in self.passed:
            raise FinishedTwice(tid)
        self.waiting[tid] = made
        while self.cursor < len(self.order) and self.order[self.cursor] in self.waiting:
            tid = self.order[self.cursor]
            self.cursor += 1
            self.passed.add(tid)
            self._add(self.waiting.pop(tid))

    def _add(self, made: tuple[bytes, dict[str, Any]] | None) -> None:
        if made is None:
            return
        line, entry = made
        self._feed(0, self.cards, line)
        text = indented(entry).replace("\n", "\n  ")
        self._feed(1, self.seeds, ("[\n  " if self.sizes[1] == 0 else ",\n  ").encode() + text.encode("utf-8"))
        if self.on_seed is not None:
            self.on_seed(entry)

    def _feed(self, which: int, h: Any, data: bytes) -> None:
        h.update(data)
        self.sizes[which] += len(data)

    def end(self) -> tuple[Made, Made]:
        for tid in self.order[self.cursor:]:
            if tid in self.waiting:
                self._add(self.waiting.pop(tid))
        self._feed(1, self.seeds, b"[]\n" if self.sizes[1] == 0 else b"\n]\n")
        return Made(self.cards.hexdigest(), self.sizes[0]), Made(self.seeds.hexdigest(), self.sizes[1])


def derive_hashed(events: Iterable[Any], task_ids: Sequence[str], endpoints: Sequence[ModelEndpoint] = (),
                  on_seed: Callable[[dict[str, Any]], None] | None = None) -> Iterator[tuple[str, bytes | Made]]:
    """:func:`derive_iter`'s files, with scorecards.jsonl and events.json hashed as their tasks
    finish (each a :class:`Made`) rather than held: a task's line and entry are kept only while
    a task listed before it in ``task_ids`` is still running. ``on_seed`` is given each of
    events.json's entries in its order.

    Raises:
        EventError: a parsed line whose event this release does not read.
        FinishedTwice: a task finished again after its line was hashed (make the files whole).
    """
    ordered = _InOrder(task_ids, on_seed)
    for tid, task_events, finished in _by_task(events, task_ids):
        if not finished:
            yield f"traces/{tid}.json", trace_bytes(task_events)
            continue
        trace, made, _ = _finished_task(task_events, endpoints)
        yield f"traces/{tid}.json", trace
        ordered.finished(tid, made)
    cards, seeds = ordered.end()
    yield "scorecards.jsonl", cards
    yield "events.json", seeds


def derive(events: Iterable[Any], task_ids: Sequence[str], endpoints: Sequence[ModelEndpoint] = ()) -> Derived:
    """Derive scorecards.jsonl, events.json and traces/ from a journal's events.

    Tasks of the denominator that have not finished get no scorecard and no event, so
    scoring refuses the run (denominator drift) until it is resumed.
    """
    files = dict(derive_iter(events, task_ids, endpoints))
    cards = [Scorecard.model_validate_json(line) for line in files["scorecards.jsonl"].splitlines() if line]
    return Derived(scorecards=cards, files=files)


def probe_summary(events: Iterable[Any], task_ids: Sequence[str]) -> dict[str, Any]:
    """narration_probe.json from the probe journal (typed lines, or lines as parsed): per
    task, whether the patch was empty.

    Raises:
        EventError: a parsed line whose event this release does not read.
    """
    per_task: dict[str | None, dict[str, Any]] = {}
    for line in ev.lines(events):
        if isinstance(line.event, ev.PatchCaptured):
            per_task[line.task_id] = {"patch_empty": line.event.empty, "patch_sha256": line.event.patch_sha256}
    tasks = []
    for tid in task_ids:
        entry = per_task.get(tid)
        tasks.append({"task_id": tid, "ran": entry is not None,
                      "patch_empty": entry["patch_empty"] if entry else None,
                      "probe_pass": bool(entry and entry["patch_empty"])})
    failed = [t["task_id"] for t in tasks if t["ran"] and not t["probe_pass"]]
    ran = sum(1 for t in tasks if t["ran"])
    return {
        "probe_version": 1,
        "control": "narration_probe: summary only; a non-empty patch fails the probe",
        "n": len(task_ids),
        "ran": ran,
        "emitted_no_patch": ran - len(failed),
        "failed": failed,
        "sentence": f"narration probe emitted no patch on {ran - len(failed)} of {len(task_ids)} task(s) of this slice",
        "tasks": tasks,
        "note": "a control reported beside the rate; it never enters the numerator",
    }


def rate_bytes(rate: Rate) -> bytes:
    """The bytes of ``rate.json``: one serialisation wherever it is written or re-derived."""
    return (json.dumps(rate.model_dump(mode="json"), indent=2) + "\n").encode("utf-8")


def probe_bytes(summary: Mapping[str, Any]) -> bytes:
    """The bytes of ``narration_probe.json``: one serialisation wherever it is written."""
    return (json.dumps(summary, indent=2) + "\n").encode("utf-8")


NO_SANDBOX = "none"
IN_PROCESS = "in-process"
NOT_RECORDED = "not recorded"


def isolation_of(headers: Iterable[ev.RunHeader]) -> str:
    """How the agent under test was isolated, from a journal's run_started and run_resumed events.

    A sandbox kind (``bubblewrap``) when the agent ran in it; ``none`` when the run used
    ``--sandbox none`` (nothing isolated: the agent and the oracles ran on the host);
    ``in-process`` when a built-in or Python agent ran inside the harness's own process (the
    oracles sandboxed); ``not recorded`` when the journal does not say. A run resumed under
    another isolation gets each, joined by ``+``.
    """
    kinds: list[str] = []
    for header in headers:
        sandbox, agent = header.sandbox, header.agent
        kind = sandbox.get("kind") if isinstance(sandbox, Mapping) else None
        sandboxed = agent.get("sandboxed") if isinstance(agent, Mapping) else None
        if kind == NO_SANDBOX:
            kinds.append(NO_SANDBOX)
        elif sandboxed is False:
            kinds.append(IN_PROCESS)
        elif isinstance(kind, str) and kind:
            kinds.append(kind)
        else:
            kinds.append(NOT_RECORDED)
    return "+".join(dict.fromkeys(kinds)) or NOT_RECORDED


def isolation_sentence(isolation: str) -> str:
    """The isolation as people read it; ``no sandbox`` whenever any part of the run had none."""
    parts = isolation.split("+")
    if NO_SANDBOX in parts:
        return ("no sandbox (--sandbox none): the agent and the oracles ran unisolated, with the network and "
                "the hidden tests within the agent's reach" + ("" if parts == [NO_SANDBOX] else f" ({isolation})"))
    if parts == [IN_PROCESS]:
        return "in-process: the agent ran inside the harness's own process; the oracles ran in the sandbox"
    return isolation


# --------------------------------------------------------------------------- bundle files


def typed_lines(events: Iterable[Any], source: str = JOURNAL) -> list[ev.Line]:
    """The typed lines among ``events`` (lines as parsed, or typed): a line that is not an
    event this release reads is left out here; the journal's reader names it
    (:func:`journal.read_chain`)."""
    return list(ev.lines(events, source, problems=[]))


def where_of(source: str, line: ev.Line) -> str:
    return f"{source} seq {line.raw.get('seq')} ({line.kind})"


def note_patch(last: dict[str, str], line: ev.Line) -> None:
    """Keep in ``last`` the patch a task_finished line names for its task (one line at a time,
    for a journal read as a stream)."""
    tid, finished = line.task_id, line.event
    if isinstance(finished, ev.TaskFinished) and tid is not None and finished.patch_sha256 is not None:
        last[tid] = finished.patch_sha256
    elif isinstance(finished, ev.TaskFinished) and tid is not None:
        last.pop(tid, None)


def patch_names(last: Mapping[str, str], task_ids: Sequence[str], blobs: Container[str]) -> dict[str, str]:
    """``patches/<task_id>.patch`` to the hex name of the blob it is: each task's last patch
    (:func:`note_patch`) among ``blobs``."""
    out: dict[str, str] = {}
    for tid in task_ids:
        hexname = last.get(tid, "").removeprefix("sha256:")
        if hexname in blobs:
            out[f"patches/{tid}.patch"] = hexname
    return out


def patch_files(events: Sequence[Any], task_ids: Sequence[str], blobs: Mapping[str, bytes]) -> dict[str, bytes]:
    """``patches/<task_id>.patch``: the blob the task's last task_finished event names."""
    last: dict[str, str] = {}
    for line in typed_lines(events):
        note_patch(last, line)
    return {rel: blobs[hexname] for rel, hexname in patch_names(last, task_ids, blobs).items()}


def _one_line(text: object) -> str:
    # Contract strings are free text: a newline in a host name must not add a README line.
    return " ".join(str(text).split())


def readme_bytes(contract: ScoringContract, probe: Mapping[str, Any] | None) -> bytes:
    """README.md: exactly five lines (the scoring contract's bundle, step 5)."""
    agent = contract.agent.label if contract.agent else "an unnamed agent"
    pack = contract.pack
    where = f"the pack at {pack.path} ({pack.sha256})" if pack else "an unnamed pack"
    budget = contract.budget
    caps = (
        f"max_attempts {budget.max_attempts}, wall_clock_s {budget.wall_clock_s:g}, feedback {budget.feedback}"
        if budget
        else "no budget recorded"
    )
    access = contract.access_class
    if access is None:
        access_line = "Access class: not recorded."
        terms = "terms not read"
    else:
        access_line = (
            f"Access class: host {access.host}; model access {access.model_access}; "
            f"quota assumed {str(access.quota_assumed).lower()}; "
            f"permanence assumed {str(access.permanence_assumed).lower()}."
        )
        terms = f"read on {access.terms_read_on}" if access.terms_read_on else "terms not read"
    if probe is not None:
        probe_line = f"Probe result: {probe.get('sentence')}."
    elif contract.controls is None or contract.controls.narration_probe is None:
        probe_line = "Probe result: the contract declares no narration probe."
    else:
        probe_line = "Probe result: the narration probe has not run."
    lines = [
        f"Purpose: measure agent '{agent}' on a locked slice of {len(contract.task_ids)} task(s) from {where}, "
        f"run_id {contract.run_id}, locked {contract.locked_at}, {caps}.",
        access_line,
        f"Host terms: {terms}.",
        probe_line,
        NOT_A_RANKING,
    ]
    return "".join(_one_line(line) + "\n" for line in lines).encode("utf-8")


def _argv_line(argv: Any) -> str:
    if argv is None:
        return LIBRARY_CALL_NOTE
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        return shlex.join(argv)
    return f"# argv recorded as {json.dumps(argv)}: not a command line"


class CommandNotes:
    """What commands.txt says, gathered one journal line at a time (the run's journal first,
    then the probe's), so a journal read as a stream is never held."""

    def __init__(self, task_ids: Iterable[str]) -> None:
        self._wanted = frozenset(task_ids)
        self._headers: list[str] = []
        self._oracle: dict[str, tuple[Any, str | None]] = {}
        """Each task's first task_started: its seq, and its oracle_cmd shell-quoted (None when
        it is not a list of strings), one string for every task of the same command."""
        self._joined: dict[tuple[str, ...], str] = {}

    def feed(self, source: str, line: ev.Line) -> None:
        header = line.event
        if isinstance(header, ev.RunHeader):
            self._headers.append(f"# {where_of(source, line)} at {line.raw.get('time')}:")
            self._headers.append(_argv_line(header.argv))
            agent = header.agent
            if isinstance(agent, dict) and isinstance(agent.get("command"), str):
                self._headers.append(
                    "# agent command template, filled per attempt (the filled argv is not recorded): "
                    + _one_line(agent["command"])
                )
        elif source == JOURNAL and isinstance(header, ev.TaskStarted):
            tid = line.task_id
            if tid is not None and tid in self._wanted and tid not in self._oracle:
                cmd = header.oracle_cmd
                joined = None
                if isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd):
                    key = tuple(cmd)
                    joined = self._joined.get(key)
                    if joined is None:
                        joined = self._joined[key] = shlex.join(cmd)
                self._oracle[tid] = (line.raw.get("seq"), joined)

    def pieces(self, task_ids: Sequence[str]) -> Iterator[bytes]:
        """commands.txt's bytes (see :func:`commands_bytes`), a task's lines at a time."""
        lines = ["# Commands recorded in this bundle's journals, verbatim (argv, shell-quoted).", *self._headers]
        yield "".join(line + "\n" for line in lines).encode("utf-8")
        for tid in task_ids:
            seq, joined = self._oracle.get(tid, (None, None))
            if tid in self._oracle and joined is not None:
                yield (f"# oracle_cmd of {tid}, run in its grading copy ({JOURNAL} seq {seq} ({ev.TASK_STARTED})):\n"
                       f"{joined}\n").encode()
            else:
                yield f"# oracle_cmd of {tid}: not recorded in {JOURNAL}\n".encode()

    def text(self, task_ids: Sequence[str]) -> bytes:
        """commands.txt's bytes (see :func:`commands_bytes`)."""
        return b"".join(self.pieces(task_ids))


def commands_bytes(
    events: Sequence[Any], probe_events: Sequence[Any] | None, task_ids: Sequence[str]
) -> bytes:
    """commands.txt: the commands the journals recorded, verbatim; nothing is reconstructed.

    Every run_started / run_resumed event's argv (shell-quoted), or the library-call note when
    it is null; then each task's oracle_cmd as its task_started event recorded it, or a line
    saying it was not recorded.
    """
    notes = CommandNotes(task_ids)
    for line in typed_lines(events):
        notes.feed(JOURNAL, line)
    if probe_events is not None:
        for line in typed_lines(probe_events, PROBE_JOURNAL):
            notes.feed(PROBE_JOURNAL, line)
    return notes.text(task_ids)


# --------------------------------------------------------------------------- versions


@dataclass(frozen=True)
class Rules:
    """One version's way of turning journals into bytes."""

    derive: Callable[[Iterable[Any], Sequence[str], Sequence[ModelEndpoint]], Derived]
    derive_iter: Callable[[Iterable[Any], Sequence[str], Sequence[ModelEndpoint], list[Scorecard] | None,
                           list[dict[str, Any]] | None], Iterator[tuple[str, bytes]]]
    """The same files as ``derive``, streamed (see :func:`derive_iter`)."""
    derive_hashed: Callable[[Iterable[Any], Sequence[str], Sequence[ModelEndpoint],
                             Callable[[dict[str, Any]], None] | None], Iterator[tuple[str, bytes | Made]]]
    """The same files, scorecards.jsonl and events.json hashed as they are made (see :func:`derive_hashed`)."""
    rate_bytes: Callable[[Rate], bytes]
    probe_summary: Callable[[Iterable[Any], Sequence[str]], dict[str, Any]]
    probe_bytes: Callable[[Mapping[str, Any]], bytes]
    patch_files: Callable[[Sequence[Any], Sequence[str], Mapping[str, bytes]], dict[str, bytes]]
    commands_bytes: Callable[[Sequence[Any], Sequence[Any] | None, Sequence[str]], bytes]
    readme_bytes: Callable[[ScoringContract, Mapping[str, Any] | None], bytes]


RESUMABLE: Final = frozenset(VOCABULARY)
"""The versions of the runs this release continues on resume: their rules are the ones it
derives with, and it writes only their vocabulary (no ``submitted`` or ``duplicate_result``
line in a version 1 run), so the release that started a run still reads it whole."""

_RULES_1 = Rules(derive=derive, derive_iter=derive_iter, derive_hashed=derive_hashed, rate_bytes=rate_bytes, probe_summary=probe_summary, probe_bytes=probe_bytes,
                 patch_files=patch_files, commands_bytes=commands_bytes, readme_bytes=readme_bytes)

RULES: Final[Mapping[int, Rules]] = {
    1: _RULES_1,
    2: _RULES_1,
    3: _RULES_1,
    4: _RULES_1,
    5: _RULES_1,
}


def derivation_version(events: Iterable[Any]) -> int:
    """The derivation version a journal was written under: its run_started event's
    ``derivation_version``, or 1 for journals written before versions were recorded."""
    for line in typed_lines(events):
        if isinstance(line.event, ev.RunStarted):
            return line.event.derivation()
    return 1


def rules_for(version: int) -> Rules:
    """The rules of ``version``.

    Raises:
        KeyError: this release does not know that version (see :func:`newer_release`).
    """
    return RULES[version]


def newer_release(first_event: Any) -> str | None:
    """Why a journal whose first event is ``first_event`` was made by a release newer than this
    one (a journal format or derivation version this release does not know), or None."""
    from . import __version__
    from .journal import JOURNAL_VERSION

    if not isinstance(first_event, dict):
        return None
    journal_version = first_event.get("journal_version")
    # Read as raw JSON: a newer release's first line need not be an event this one reads.
    payload = first_event.get(ev.PAYLOAD)
    derivation = (payload.get(ev.DERIVATION_VERSION, 1) if isinstance(payload, dict) else 1) \
        if first_event.get(ev.KIND) == ev.RUN_STARTED else 1
    if type(journal_version) is int and journal_version > JOURNAL_VERSION:
        what = f"its journal is in format {journal_version}; sealbench {__version__} reads formats 1 to {JOURNAL_VERSION}"
    elif type(derivation) is int and derivation > max(RULES):
        what = (f"it was derived under rules version {derivation}; sealbench {__version__} knows versions "
                f"{min(RULES)} to {max(RULES)}")
    else:
        return None
    return (f"made by a newer release of sealbench: {what}. Verify it with that release or a later one; "
            "nothing is claimed about tampering, and nothing else was checked")


# --------------------------------------------------------------------------- a bundle's files, whole


def blob_refs(events: Iterable[Any], source: str = JOURNAL) -> tuple[dict[str, str], list[str]]:
    """The blobs a journal references: ``{hex: where}``, and the malformed references.

    ``where`` names the first event that references the blob (for messages).
    """
    refs: dict[str, str] = {}
    problems: list[str] = []
    for line in typed_lines(events, source):
        note_blob_refs(line, source, refs, problems)
    return refs, problems


def note_blob_refs(line: ev.Line, source: str, refs: dict[str, str], problems: list[str],
                   fields: Iterable[tuple[str, str]] | None = None) -> None:
    """:func:`blob_refs` of one line, added to ``refs`` and ``problems`` (``fields``: the line's
    :func:`events.blob_fields`, when the caller has them)."""
    for name, value in ev.blob_fields(line.event) if fields is None else fields:
        if not DIGEST_RE.match(value):
            problems.append(f"{where_of(source, line)}: {name} {value!r} is not a blob digest")
            continue
        refs.setdefault(value.removeprefix("sha256:"), where_of(source, line))


def blob_problems(refs: Mapping[str, str], blobs: Mapping[str, str], withheld: Iterable[str]) -> list[str]:
    """Each referenced blob missing (unless a public bundle withholds it) or not matching its name."""
    problems: list[str] = []
    left_out = frozenset(withheld)
    for hexname, where in sorted(refs.items()):
        digest = blobs.get(hexname)
        if digest is None and hexname in left_out:
            continue
        if digest is None:
            problems.append(f"blobs/{hexname}: missing; {where} references it")
        elif digest != hexname:
            problems.append(f"blobs/{hexname}: content does not match its name (sha256 sha256:{digest})")
    return problems


@dataclass(frozen=True)
class Rederived:
    """Every file of a bundle that is computed from its journals, and what stood in the way."""

    files: dict[str, bytes]
    scorecards: list[Scorecard]
    rate: Rate | None
    refusal: Refusal | None
    probe: dict[str, Any] | None
    blob_refs: dict[str, str]
    problems: list[str] = field(default_factory=list)


def rederive(
    contract: ScoringContract,
    events: Sequence[Any],
    probe_events: Sequence[Any] | None,
    blobs: Mapping[str, bytes],
    withheld: Iterable[str] = (),
) -> Rederived:
    """Recompute every derived file from the journals' events, never raising for bad input.

    ``blobs`` maps a blob's hex name to its bytes; ``withheld`` names those a public bundle
    leaves out (no derived file is made of them). What cannot be derived (a referenced blob
    missing or not matching its name, a journal that breaks the derivation) is listed in
    ``problems``; a refusal by ``score`` is kept in ``refusal`` and leaves ``rate`` None.
    """
    problems: list[str] = []
    files: dict[str, bytes] = {}
    task_ids = list(contract.task_ids)
    # Typed once: a line that is not an event this release reads is named by the chain check.
    events = typed_lines(events, JOURNAL)
    probe_events = typed_lines(probe_events, PROBE_JOURNAL) if probe_events is not None else None
    refs, bad = blob_refs(events, JOURNAL)
    problems += bad
    probe_refs: dict[str, str] = {}
    if probe_events is not None:
        probe_refs, bad = blob_refs(probe_events, PROBE_JOURNAL)
        problems += bad
    all_refs = {**probe_refs, **refs}
    digests = {h: hashlib.sha256(blobs[h]).hexdigest() for h in all_refs if h in blobs}
    problems += blob_problems(all_refs, digests, withheld)
    good_blobs = {h: blobs[h] for h in all_refs if digests.get(h) == h}
    cards: list[Scorecard] = []
    rate: Rate | None = None
    refusal: Refusal | None = None
    summary: dict[str, Any] | None = None
    version = derivation_version(events)
    try:
        rules = rules_for(version)
    except KeyError:
        problems.append(f"{JOURNAL}: run_started's derivation_version {version!r} is not one this release derives")
        return Rederived(files=files, scorecards=cards, rate=None, refusal=None, probe=None,
                         blob_refs=all_refs, problems=problems)
    # A journal whose chain verifies can still be hand-made: a failure to derive is a finding.
    try:
        derived = rules.derive(events, task_ids, contract.model_endpoints or ())
        files.update(derived.files)
        cards = derived.scorecards
    except Exception as e:
        problems.append(f"{JOURNAL}: scorecards, events.json and traces cannot be derived ({type(e).__name__}: {e})")
    else:
        try:
            rate = score(contract, [seed_event(c) for c in cards])
            files[RATE] = rules.rate_bytes(rate)
        except Refusal as e:
            refusal = e
        except ValueError as e:
            # score() lets the statistics' ValueError through for an empty denominator.
            refusal = ScoreRefusal(f"no rate for this denominator ({e})")
    try:
        files.update(rules.patch_files(events, task_ids, good_blobs))
    except Exception as e:
        problems.append(f"{JOURNAL}: patches cannot be derived ({type(e).__name__}: {e})")
    if probe_events is not None:
        try:
            summary = rules.probe_summary(probe_events, task_ids)
            files[PROBE_SUMMARY] = rules.probe_bytes(summary)
        except Exception as e:
            problems.append(f"{PROBE_JOURNAL}: {PROBE_SUMMARY} cannot be derived ({type(e).__name__}: {e})")
    files[COMMANDS] = rules.commands_bytes(events, probe_events, task_ids)
    files[README] = rules.readme_bytes(contract, summary)
    return Rederived(files=files, scorecards=cards, rate=rate, refusal=refusal, probe=summary,
                     blob_refs=all_refs, problems=problems)
