"""Everything a run reports, derived from its journal by pure functions.

Scorecards, per-task traces and events.json are functions of the journal's events alone,
so ``verify`` can re-derive them later and compare byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .digest import canonical_json, is_real_digest, sha256_bytes
from .formats import ForgingFlags, Outcome, Rate, Scorecard, SeedEvent
from .scorecard import REQUIRED_SCORE_KEYS


@dataclass(frozen=True)
class Derived:
    """The files derived from one journal, as bytes keyed by their run-relative path."""

    scorecards: list[Scorecard]
    files: dict[str, bytes]


def trace_bytes(events: Sequence[dict[str, Any]]) -> bytes:
    """The bytes of ``traces/<task_id>.json``: the task's events in journal order."""
    return canonical_json(list(events)) + b"\n"


def group_by_task(events: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each task's events, in journal order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for ev in events:
        tid = ev.get("task_id")
        if tid is not None:
            out.setdefault(tid, []).append(ev)
    return out


def scorecard_for(task_events: Sequence[dict[str, Any]]) -> Scorecard | None:
    """The scorecard of one finished task, or None while it has not finished."""
    started = next((e for e in task_events if e["kind"] == "task_started"), None)
    finished = next((e for e in reversed(task_events) if e["kind"] == "task_finished"), None)
    if started is None or finished is None:
        return None
    s, f = started["payload"], finished["payload"]
    trace_sha = sha256_bytes(trace_bytes(task_events))
    card: dict[str, Any] = {
        "task_id": finished["task_id"],
        "passed": f["outcome"] == Outcome.PASS.value,
        "attempts_used": f["attempts_used"],
        "max_attempts": s["max_attempts"],
        "elapsed_ms": f["elapsed_ms"],
        "wall_clock_s": s["wall_clock_s"],
        "prompt_template_id": s["prompt_template_id"],
        "hidden_tests_sha256": s["hidden_tests_sha256"],
        "tool_trace_sha256": trace_sha,
        "scorecard_complete": False,
        "outcome": f["outcome"],
        "first_attempt_passed": f["first_attempt_passed"],
        "patch_sha256": f["patch_sha256"],
    }
    flags = forging_flags(task_events)
    if flags is not None:
        card["forging_flags"] = flags
    # Complete only when every control is present and within its published cap.
    card["scorecard_complete"] = (
        all(card.get(k) is not None for k in REQUIRED_SCORE_KEYS)
        and is_real_digest(card["hidden_tests_sha256"])
        and card["attempts_used"] <= card["max_attempts"]
        and card["outcome"] != Outcome.HARNESS_ERROR.value
    )
    return Scorecard.model_validate(card)


def forging_flags(task_events: Sequence[dict[str, Any]]) -> ForgingFlags | None:
    """What the task's graded events flagged, or None when nothing was (the usual case: the
    scorecard then has no such field, and scorecards derived before it keep their bytes)."""
    flags: set[str] = set()
    attempts: list[int] = []
    not_counted: list[int] = []
    for ev in task_events:
        if ev["kind"] != "graded" or not ev["payload"].get("forging_flags"):
            continue
        flags.update(ev["payload"]["forging_flags"])
        attempts.append(ev["attempt"])
        if ev["payload"].get("flagged_pass") == "not_counted":
            not_counted.append(ev["attempt"])
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
    """The seed-004 events.json entry of one scorecard."""
    return SeedEvent(
        task_id=card.task_id,
        task_pass=card.outcome is Outcome.PASS,
        abstain=card.outcome is Outcome.ABSTAIN,
        wall_seconds=round(card.elapsed_ms / 1000, 3),
        outcome=card.outcome,
        attempts_used=card.attempts_used,
    )


def derive_iter(events: Iterable[dict[str, Any]], task_ids: Sequence[str]) -> Iterator[tuple[str, bytes]]:
    """Stream the derived files: each trace as soon as its task finishes, then
    scorecards.jsonl and events.json.

    Only the events of tasks still running are held, so a run's memory does not grow with
    its length. Events of tasks outside ``task_ids`` are ignored.
    """
    wanted = set(task_ids)
    pending: dict[str, list[dict[str, Any]]] = {}
    cards: dict[str, Scorecard] = {}
    for ev in events:
        tid = ev.get("task_id")
        if tid is None or tid not in wanted:
            continue
        pending.setdefault(tid, []).append(ev)
        if ev["kind"] == "task_finished":
            task_events = pending.pop(tid)
            yield f"traces/{tid}.json", trace_bytes(task_events)
            card = scorecard_for(task_events)
            if card is not None:
                cards[tid] = card
    for tid in task_ids:
        if tid in pending:
            yield f"traces/{tid}.json", trace_bytes(pending.pop(tid))
    ordered = [cards[t] for t in task_ids if t in cards]
    yield "scorecards.jsonl", b"".join(canonical_json(c.model_dump(mode="json")) + b"\n" for c in ordered)
    seed = [seed_event(c).model_dump(mode="json") for c in ordered]
    for entry in seed:
        entry.pop("excluded_after_lock", None)
    yield "events.json", (json.dumps(seed, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def derive(events: Iterable[dict[str, Any]], task_ids: Sequence[str]) -> Derived:
    """Derive scorecards.jsonl, events.json and traces/ from a journal's events.

    Tasks of the denominator that have not finished get no scorecard and no event, so
    scoring refuses the run (denominator drift) until it is resumed.
    """
    files = dict(derive_iter(events, task_ids))
    cards = [Scorecard.model_validate_json(line) for line in files["scorecards.jsonl"].splitlines() if line]
    return Derived(scorecards=cards, files=files)


def probe_summary(events: Iterable[dict[str, Any]], task_ids: Sequence[str]) -> dict[str, Any]:
    """narration_probe.json from the probe journal: per task, whether the patch was empty."""
    per_task: dict[str, dict[str, Any]] = {}
    for ev in events:
        if ev["kind"] == "patch_captured":
            per_task[ev["task_id"]] = {"patch_empty": ev["payload"]["empty"],
                                       "patch_sha256": ev["payload"]["patch_sha256"]}
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


def isolation_of(headers: Iterable[Mapping[str, Any]]) -> str:
    """How the agent under test was isolated, from a journal's run_started and run_resumed payloads.

    A sandbox kind (``bubblewrap``) when the agent ran in it; ``none`` when the run used
    ``--sandbox none`` (nothing isolated: the agent and the oracles ran on the host);
    ``in-process`` when a built-in or Python agent ran inside the harness's own process (the
    oracles sandboxed); ``not recorded`` when the journal does not say. A run resumed under
    another isolation gets each, joined by ``+``.
    """
    kinds: list[str] = []
    for header in headers:
        sandbox, agent = header.get("sandbox"), header.get("agent")
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
