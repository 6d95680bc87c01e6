"""Replay: run a bundle's agent again with the gateway answering from the bundle's record.

``sealbench run CONTRACT --replay BUNDLE --out DIR`` runs the same locked contract again, and
the gateway forwards nothing: each model call of attempt A of task T is answered with the
reply recorded for call N of that attempt, matched by order, after its request body is
compared with the recorded one (by digest). Nothing leaves the machine and nothing is paid,
and no key is read. A stranger can thus re-execute a published run: a deterministic agent
reproduces the same patches and scorecards.

A request that differs from the recorded one (or a call the record does not have, or one whose
recorded reply was cut at the blob cap) is a divergence: refused with HTTP 409 and journaled
on its ``model_call`` with the first field that differs (``messages.1.content``). A refusal
of the gateway's own (a cap, an undeclared model) is decided as in the original run.

The bundle must verify and hold this very contract (same digest). The replay's ``run_started``
names the run it replays (``replay_of``: run_id and nonce); it is a reproduction, not a
measurement: the runs index does not count it as a run of the run_id, and ``compare``
refuses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from . import events as ev
from .errors import RunRefusal
from .formats import ScoringContract

DIVERGED: Final = 409


@dataclass(frozen=True)
class Recorded:
    """One call as the bundle recorded it."""

    status: int | None
    streamed: bool
    request: bytes | None
    response: bytes | None
    truncated: bool
    error: str | None


@dataclass(frozen=True)
class Record:
    """Every recorded call of a run, by (task, attempt, index), and which run it was."""

    run_id: str
    run_nonce: str | None
    calls: dict[tuple[str, int, int], Recorded]

    def replay_of(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "run_nonce": self.run_nonce}


def load_record(bundle: Path, contract: ScoringContract) -> Record:
    """The recorded calls of ``bundle``, which must verify and hold ``contract``.

    Raises:
        RunRefusal: not a bundle, another contract, or a run without model calls.
        VerificationFailed, MadeByNewerRelease: the bundle does not verify.
    """
    from .blobs import Blobs
    from .bundle import SUMS, verify_bundle
    from .journal import read_chain

    if not (bundle / SUMS).is_file():
        raise RunRefusal(f"--replay {bundle}: not a bundle (no {SUMS}); replay a bundle made by `sealbench bundle`")
    report = verify_bundle(bundle)
    if report.contract.contract_sha256 != contract.contract_sha256:
        raise RunRefusal(f"--replay {bundle}: the bundle holds another contract ({report.contract.contract_sha256}); "
                         f"replay it with its own scoring_contract.json ({contract.contract_sha256} here)")
    blobs = Blobs(bundle)
    calls: dict[tuple[str, int, int], Recorded] = {}
    for line in read_chain(bundle / "journal.jsonl").lines:
        call = line.event
        if not isinstance(call, ev.ModelCall) or call.task_id is None or call.attempt is None or call.index is None:
            continue
        request = blobs.read(call.request) if call.request else None
        response = blobs.read(call.response) if call.response else None
        calls[(call.task_id, call.attempt, call.index)] = Recorded(
            status=call.status, streamed=bool(call.streamed),
            request=request.data if request is not None else None,
            response=response.data if response is not None else None,
            truncated=bool(call.response_truncated) or (response is not None and response.truncated),
            error=call.error)
    if not calls:
        raise RunRefusal(f"--replay {bundle}: the run made no model calls; there is nothing to replay")
    return Record(run_id=report.run_id, run_nonce=report.run_nonce, calls=calls)


def first_difference(recorded: Any, sent: Any, path: str = "") -> str | None:
    """The first field (``messages.1.content``) where two JSON values differ, in the recorded
    value's key order; None when they are equal."""
    where = path or "the body"
    if isinstance(recorded, dict) and isinstance(sent, dict):
        for key in [*recorded, *(k for k in sent if k not in recorded)]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in recorded or key not in sent:
                return sub
            found = first_difference(recorded[key], sent[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(sent, list):
        for i, (a, b) in enumerate(zip(recorded, sent, strict=False)):
            found = first_difference(a, b, f"{path}.{i}" if path else str(i))
            if found is not None:
                return found
        if len(recorded) != len(sent):
            return f"{path}.{min(len(recorded), len(sent))}" if path else str(min(len(recorded), len(sent)))
        return None
    if type(recorded) is not type(sent) or recorded != sent:
        return where
    return None


def divergence(rec: Recorded | None, index: int, request: bytes) -> str | None:
    """Why call ``index`` cannot be answered from ``rec`` (None when it can)."""
    if rec is None:
        return f"the record has no call {index} for this attempt"
    if rec.request is None:
        return f"call {index} was recorded without its request body"
    if rec.request != request:
        try:
            field = first_difference(json.loads(rec.request), json.loads(request))
        except ValueError:
            field = None
        return f"the request differs from the recorded call {index} at {field or 'its bytes'}"
    if rec.truncated:
        return f"the recorded reply of call {index} was cut at the blob cap, so it cannot be replayed"
    return None
