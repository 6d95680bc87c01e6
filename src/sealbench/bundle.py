"""Run bundles: a directory a stranger can check and re-derive.

:func:`make_bundle` turns a finished run directory into ``OUT_ROOT/<run_id>/``::

    scoring_contract.json    the locked contract, its exact bytes
    journal.jsonl            the run's journal, its exact bytes: the source of truth
    probe/journal.jsonl      the narration probe's journal, when the probe ran
    blobs/<hex>              every output and patch the journals reference, named by its sha256
    scorecards.jsonl         \\
    events.json               | derived from journal.jsonl (derive.derive), the scoring contract's shape
    traces/<task_id>.json    /
    patches/<task_id>.patch  each task's final patch: the blob its task_finished event names
    rate.json                score() of the contract over the derived events
    narration_probe.json     derived from probe/journal.jsonl (derive.probe_summary)
    commands.txt             the argv each journal recorded, and each oracle_cmd if recorded
    README.md                five lines: slice, access class, terms date, probe result, and
                             "not a vendor ranking."
    SHA256SUMS               every file above, in the format ``sha256sum -c`` reads
    SHA256SUMS.sig           optional: Ed25519 signature of SHA256SUMS (see :mod:`.signing`)

Nothing derived is copied: every derived file is recomputed from the journals by the pure
functions of :mod:`.derive` (the runner and ``score`` use the same), under the rules of the
derivation version the run recorded, and the run directory's own copies must agree.
:func:`verify_bundle` recomputes them again and compares byte for byte, with the sums, the
signature, the journal chains, the contract's lock and the pins between them, checks that
each task's events tell a story the runner could have written (:mod:`.consistency`), and
reports every discrepancy at once. Unsigned, a bundle proves internal consistency only:
whoever holds a run can rewrite a whole story and recompute every hash.

:func:`bundle_files` and :func:`check_bundle` are the pure cores (values in, values out);
:func:`make_bundle` and :func:`verify_bundle` are the shells that read and write files.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from pydantic import ValidationError

from . import events as ev
from .consistency import Contradictions, journal_contradictions
from .contract import require_locked
from .derive import (
    COMMANDS,
    CONTRACT,
    JOURNAL,
    NOT_RECORDED,
    PROBE_JOURNAL,
    PROBE_SUMMARY,
    RATE,
    README,
    CommandNotes,
    FinishedTwice,
    Made,
    Rules,
    blob_problems,
    blob_refs,
    isolation_of,
    isolation_sentence,
    newer_release,
    note_blob_refs,
    note_patch,
    patch_names,
    rederive,
    rules_for,
    typed_lines,
)
from .derive import where_of as _where
from .digest import DIGEST_RE, sha256_bytes, strict_json
from .errors import (
    ContractError,
    IncompleteScorecard,
    MadeByNewerRelease,
    NotABundle,
    PackError,
    Refusal,
    ScoreRefusal,
    UsageError,
    VerificationFailed,
)
from .files import describe_validation_error, fsync_dir, nearest_folders
from .formats import Rate, Scorecard, ScoringContract, SeedEvent, check_id
from .journal import TOO_LONG, ChainReport, ChainScan, iter_lines, read_chain, scan_chain
from .lock import LOCK_NAME, hold_reader
from .progress import JOURNAL_STEP, Steps
from .score import Tally, score
from .scorecard import validate_scorecard
from .scratch import PARTIAL_BUNDLE, sweep, tag
from .signing import check_private_key, fingerprint, read_key, sign, signature_valid

SUMS = "SHA256SUMS"
SIGNATURE = "SHA256SUMS.sig"
PUBLIC = "PUBLIC.json"
"""Present in a public bundle only (``bundle --public``): the blobs it withholds."""
SEALED_SUFFIX = ".sealed"
"""A public bundle's sealed part is the directory ``<bundle>.sealed`` beside it."""
_ORACLE_OUTPUT = frozenset({"oracle.stdout", "oracle.stderr"})
SIGNED_BY = "SHA256SUMS signed by key"
UNSIGNED_CAVEAT = (
    "without a checked signature this proves internal consistency only: whoever holds a run can rewrite "
    "it and recompute every hash and sum, so ask for a bundle signed with a key you trust and check it "
    "with --pubkey"
)

# Where the runner's journal events name a blob (a file in blobs/ named by its sha256): the
# fields each event model types as a blob (events.Blob). Only these: an agent's free-form
# "action" may hold digest-like strings, and it must not be able to make a bundle demand
# blobs that were never stored.
BLOB_FIELDS = ev.BLOB_FIELDS
_HEX_RE = re.compile(r"^[0-9a-f]{64}$")
_SUMS_LINE_RE = re.compile(r"^([0-9a-f]{64})  (\S(?:.*\S)?)$")


# --------------------------------------------------------------------------- pure helpers


def sums_bytes(files: Mapping[str, bytes]) -> bytes:
    """``SHA256SUMS`` over ``files`` (minus the sums and the signature), sorted by path."""
    lines = [
        f"{hashlib.sha256(data).hexdigest()}  {rel}\n"
        for rel, data in sorted(files.items())
        if rel not in (SUMS, SIGNATURE)
    ]
    return "".join(lines).encode("utf-8")


def withheld_blobs(events: Iterable[Any], probe_events: Iterable[Any] | None = None) -> list[str]:
    """The blobs a public bundle withholds: what the hidden tests printed (each graded event's
    oracle stdout and stderr, which quote failing asserts and test source), unless another field
    of either journal names the same bytes. Sorted hex names."""
    oracle: set[str] = set()
    other: set[str] = set()
    for source, lines in ((JOURNAL, events), (PROBE_JOURNAL, probe_events or ())):
        for line in typed_lines(lines, source):
            note_oracle_outputs(line, oracle, other)
    return sorted(oracle - other)


def note_oracle_outputs(line: ev.Line, oracle: set[str], other: set[str],
                        fields: Iterable[tuple[str, str]] | None = None) -> None:
    """The blobs one line names, as :func:`withheld_blobs` sorts them: what the hidden tests
    printed into ``oracle``, any other into ``other`` (``fields`` as :func:`note_blob_refs`)."""
    for name, value in ev.blob_fields(line.event) if fields is None else fields:
        if DIGEST_RE.match(value):
            hexname = value.removeprefix("sha256:")
            graded = isinstance(line.event, ev.Graded) and name in _ORACLE_OUTPUT
            (oracle if graded else other).add(hexname)


def public_bytes(withheld: Sequence[str]) -> bytes:
    """``PUBLIC.json``: which blobs a public bundle withholds (the journal names each by digest)."""
    return (json.dumps({"public_version": 1, "withheld": list(withheld),
                        "what": "the hidden tests' output (graded oracle stdout and stderr), kept as digests; "
                                "the bodies are in the sealed part beside the bundle"}, indent=2) + "\n").encode()


def make_public(files: Mapping[str, bytes], events: Sequence[Any],
                probe_events: Sequence[Any] | None) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """A bundle's files made public, and its sealed part (``blobs/<hex>`` of each withheld blob)."""
    withheld = withheld_blobs(events, probe_events)
    public = {rel: data for rel, data in files.items() if rel.removeprefix("blobs/") not in withheld}
    sealed = {f"blobs/{h}": files[f"blobs/{h}"] for h in withheld if f"blobs/{h}" in files}
    public[PUBLIC] = public_bytes(withheld)
    public[SUMS] = sums_bytes(public)
    return public, sealed


def run_pins(contract: ScoringContract, events: Sequence[Any], source: str, *, probe: bool) -> list[str]:
    """Everything wrong with how a journal's start (and resume) events pin the contract."""
    pins = RunPins(contract, source, probe=probe)
    for line in typed_lines(events, source):
        pins.feed(line)
    return pins.problems()


class RunPins:
    """:func:`run_pins` one line at a time, for a journal read as a stream."""

    def __init__(self, contract: ScoringContract, source: str, *, probe: bool) -> None:
        self._contract, self._source, self._probe = contract, source, probe
        self._pack = contract.pack.sha256 if contract.pack else None
        self._seen = False
        self._problems: list[str] = []

    def feed(self, line: ev.Line) -> None:
        contract, source, problems = self._contract, self._source, self._problems
        if not self._seen:
            self._seen = True
            if not isinstance(line.event, ev.RunStarted):
                problems.append(f"{source}: the first event is {line.kind!r}, not {ev.RUN_STARTED}")
        p = line.event
        if not isinstance(p, ev.RunHeader):
            return
        where = _where(source, line)
        if p.contract_sha256 != contract.contract_sha256:
            problems.append(
                f"{where}: pins contract {p.contract_sha256}, not {CONTRACT}'s {contract.contract_sha256}"
            )
        if p.pack_sha256 != self._pack:
            problems.append(f"{where}: pins pack {p.pack_sha256}, not {CONTRACT}'s {self._pack}")
        if p.run_id != contract.run_id:
            problems.append(f"{where}: run_id {p.run_id!r}, not {CONTRACT}'s {contract.run_id!r}")
        if p.probe is not self._probe:
            problems.append(f"{where}: probe is {p.probe!r} in the {'probe' if self._probe else 'run'} journal")

    def problems(self) -> list[str]:
        """Everything found, once every line was fed."""
        return self._problems if self._seen else [f"{self._source}: no events"]


def never_started_error(events: Sequence[Any]) -> str | None:
    """The first harness error of ``events`` saying the agent never started, if any."""
    from .safe_text import inert
    from .usage import NEVER_STARTED

    for line in typed_lines(events, JOURNAL):
        error = line.event.error if isinstance(line.event, ev.HarnessFailed) else None
        if isinstance(error, str) and error.startswith(NEVER_STARTED):
            return str(inert(error))
    return None


def probe_declared(contract: ScoringContract) -> bool:
    """Whether the contract declares the narration probe control."""
    return contract.controls is not None and contract.controls.narration_probe is not None


def probe_gap(contract: ScoringContract, summary: Mapping[str, Any] | None) -> str | None:
    """Why a declared narration probe is missing or unfinished, or None when it is not."""
    if not probe_declared(contract):
        return None
    if summary is None:
        return "the contract declares the narration probe (controls.narration_probe) but it has not run"
    if summary.get("ran") != summary.get("n"):
        return f"the narration probe ran on {summary.get('ran')} of {summary.get('n')} task(s) only"
    return None


def parse_contract(data: bytes, source: str = CONTRACT) -> ScoringContract:
    """Parse a contract file's bytes.

    Raises:
        ContractError: invalid JSON, unknown or mistyped keys, or a run_id or task id that
            is not a safe file name.
    """
    try:
        contract = ScoringContract.model_validate_json(data)
    except ValidationError as e:
        raise ContractError(f"{source}: {describe_validation_error(e)}") from None
    # Bundles name a directory after the run_id and files after task ids.
    for key, value in [("run_id", contract.run_id), *(("task_ids", t) for t in contract.task_ids)]:
        try:
            if value is not None:
                check_id(value)
        except ValueError as e:
            raise ContractError(f"{source}: {key}: {e}") from None
    return contract


def bundle_files(
    contract_bytes: bytes,
    journal_bytes: bytes,
    events: Sequence[Any],
    probe: tuple[bytes, Sequence[Any]] | None,
    blobs: Mapping[str, bytes],
) -> dict[str, bytes]:
    """Every file of a bundle, SHA256SUMS included, from a run's contract, journals and blobs.

    ``events`` are ``journal_bytes``' events as read by :func:`journal.read_chain` (the caller
    checks the chain); ``probe`` is the probe journal's bytes and events, if it ran.

    Raises:
        ContractError: the contract is unreadable, unlocked or edited after lock.
        VerificationFailed: the journals pin another contract or pack, contradict themselves
            (see :mod:`.consistency`), or a referenced blob is missing or does not match its name.
        ScoreRefusal: what ``score`` refuses, and a declared narration probe that has not run
            (or not on every task).
        IncompleteScorecard: a scorecard fails the scorecard rules (validate_scorecard).
    """
    contract = parse_contract(contract_bytes)
    require_locked(contract)
    probe_events = probe[1] if probe is not None else None
    problems = run_pins(contract, events, JOURNAL, probe=False) + journal_contradictions(events, contract)
    if probe_events is not None:
        problems += run_pins(contract, probe_events, PROBE_JOURNAL, probe=True)
        problems += journal_contradictions(probe_events, contract, source=PROBE_JOURNAL, probe=True)
    if problems:
        raise VerificationFailed(problems)
    r = rederive(contract, events, probe_events, blobs)
    if r.problems:
        raise VerificationFailed(r.problems)
    if r.refusal is not None:
        setup = never_started_error(events)
        if setup is not None:  # the refusal says which path, and the way out, not only "harness errors"
            raise ScoreRefusal(f"{r.refusal}; {setup}") from None
        raise r.refusal
    for card in r.scorecards:
        try:
            validate_scorecard(card)
        except IncompleteScorecard as e:
            raise IncompleteScorecard(f"scorecard of {card.task_id}: {e}") from None
    gap = probe_gap(contract, r.probe)
    if gap is not None:
        raise ScoreRefusal(f"{gap}: run `sealbench probe CONTRACT --out RUN_DIR` first; no bundle written")
    files = {CONTRACT: contract_bytes, JOURNAL: journal_bytes, **r.files}
    if probe is not None:
        files[PROBE_JOURNAL] = probe[0]
    for hexname in r.blob_refs:
        files[f"blobs/{hexname}"] = blobs[hexname]
    files[SUMS] = sums_bytes(files)
    return files


# --------------------------------------------------------------------------- verify core


def _json_or_none(data: bytes) -> Any:
    try:
        return strict_json(data)
    except ValueError:
        return None


def _label(entry: Any) -> str:
    if isinstance(entry, dict):
        for key in (ev.TASK_ID, ev.KIND):
            if isinstance(entry.get(key), str):
                seq = f" seq {entry['seq']}" if "seq" in entry else ""
                return f" ({entry[key]}{seq})"
    return ""


def _keys_differ(expected: Any, actual: Any) -> str:
    if isinstance(expected, dict) and isinstance(actual, dict):
        keys = sorted(k for k in set(expected) | set(actual) if expected.get(k, ...) != actual.get(k, ...))
        return f"{', '.join(map(str, keys))} differ"
    return "differs"


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_difference(rel: str, expected: bytes, actual: bytes, source: str = JOURNAL) -> str:
    """One line saying where ``actual`` first departs from the ``expected`` derivation."""
    what = f"what {source} derives"
    if rel.endswith(".jsonl"):
        exp_lines, act_lines = expected.splitlines(), actual.splitlines()
        for i, (e, a) in enumerate(zip(exp_lines, act_lines, strict=False), start=1):
            if e != a:
                ej, aj = _json_or_none(e), _json_or_none(a)
                return f"{rel} line {i}{_label(ej)}: {_keys_differ(ej, aj)} from {what}"
        return f"{rel}: {len(act_lines)} line(s) where {source} derives {len(exp_lines)}"
    ej, aj = _json_or_none(expected), _json_or_none(actual)
    if isinstance(ej, list) and isinstance(aj, list):
        for i, (e, a) in enumerate(zip(ej, aj, strict=False)):
            if e != a:
                return f"{rel}: entry {i}{_label(e)}: {_keys_differ(e, a)} from {what}"
        if len(ej) != len(aj):
            return f"{rel}: {len(aj)} entries where {source} derives {len(ej)}"
    if isinstance(ej, dict) and isinstance(aj, dict) and ej != aj:
        return f"{rel}: {_keys_differ(ej, aj)} from {what}"
    try:
        exp_text, act_text = expected.decode("utf-8"), actual.decode("utf-8")
    except UnicodeDecodeError:
        return f"{rel}: content (sha256 {sha256_bytes(actual)}) differs from {what} ({sha256_bytes(expected)})"
    exp_lines_t, act_lines_t = exp_text.splitlines(), act_text.splitlines()
    for i, (e_line, a_line) in enumerate(zip(exp_lines_t, act_lines_t, strict=False), start=1):
        if e_line != a_line:
            return f"{rel} line {i}: {_shorten(a_line)!r} where {source} derives {_shorten(e_line)!r}"
    return f"{rel}: {len(act_lines_t)} line(s) where {source} derives {len(exp_lines_t)} (or a byte differs at an end)"


def _is_utf8(data: bytes) -> bool:
    """Whether ``data`` is UTF-8 text, decoded in pieces of :data:`CHUNK` bytes (none held whole)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for at in range(0, len(data), CHUNK):
            decoder.decode(view[at:at + CHUNK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def text_lines(data: bytes) -> Iterator[str]:
    """The lines of UTF-8 ``data`` as ``data.decode().splitlines()`` cuts them, made one at a
    time (a SHA256SUMS of 200,000 lines is not held twice more as a list)."""
    at, end = 0, len(data)
    while at < end:
        cut = data.find(b"\n", at)
        piece = data[at:cut if cut >= 0 else end].decode("utf-8")
        at = cut + 1 if cut >= 0 else end
        # A newline is never inside a UTF-8 sequence, and splitlines cuts at "\n" among others:
        # a piece ending in another line break ("\r" aside, which pairs with the "\n") leaves
        # an empty line before the "\n".
        yield from piece.splitlines() or [""]
        if cut >= 0 and piece and piece[-1] != "\r" and len((piece[-1] + "x").splitlines()) == 2:
            yield ""


def check_sums(tree: BundleTree) -> list[str]:
    """Every discrepancy between SHA256SUMS and the files: edited, missing and unlisted."""
    data = tree.whole.get(SUMS)
    if data is None:
        return [f"{SUMS}: missing"]
    problems: list[str] = []
    if not _is_utf8(data):
        return [f"{SUMS}: not UTF-8 text", *[f"{rel}: not listed in {SUMS}" for rel in sorted(tree.digests) if rel != SUMS]]
    if data and not data.endswith(b"\n"):
        problems.append(f"{SUMS}: the last line has no newline")
    listed: dict[str, int] = {}
    last: str | None = None
    in_order = True
    for lineno, line in enumerate(text_lines(data), start=1):
        m = _SUMS_LINE_RE.match(line)
        if m is None:
            problems.append(f"{SUMS} line {lineno}: not in sha256sum's '<64 hex>  <path>' form")
            continue
        hexdigest, rel = m.groups()
        if rel in (SUMS, SIGNATURE):
            problems.append(f"{SUMS} line {lineno}: lists {rel}, which it cannot cover")
            continue
        if rel in listed:
            problems.append(f"{SUMS} line {lineno}: {rel} listed twice (first on line {listed[rel]})")
            continue
        listed[rel] = lineno
        in_order = in_order and (last is None or last <= rel)
        last = rel
        digest = tree.digests.get(rel)
        if digest is None:
            problems.append(f"{rel}: listed in {SUMS} line {lineno} but missing from the bundle")
        elif digest != hexdigest:
            problems.append(f"{rel}: content differs from its sha256 in {SUMS} line {lineno}")
    if not in_order:
        problems.append(f"{SUMS}: paths are not in sorted order")
    for rel in sorted(tree.digests):
        if rel not in listed and rel not in (SUMS, SIGNATURE):
            problems.append(f"{rel}: not listed in {SUMS}")
    return problems


@dataclass(frozen=True)
class PackFinding:
    """What checking the pack (``verify --pack``) found, gathered by the shell."""

    path: str
    digest: str | None
    problems: tuple[str, ...] = ()
    hidden: Mapping[str, str] = field(default_factory=dict)
    """Each task's hidden-test digest as the sealed pack records it."""


@dataclass(frozen=True)
class VerifyReport:
    """A bundle that verified: what was checked and the values it holds."""

    bundle: Path
    run_id: str
    files_checked: int
    signature: str
    pack: str
    contract: ScoringContract
    rate: Rate
    scorecards: Sequence[Scorecard]
    """Each task's scorecard, in scorecards.jsonl's order (made from its line when asked for)."""
    probe_sentence: str | None
    started_at: str
    isolation: str = NOT_RECORDED
    """How the agent was isolated (:func:`derive.isolation_of`)."""
    run_nonce: str | None = None
    """The random nonce of the run's first event; None in journals made before nonces."""
    replay_of: dict[str, Any] | None = None
    """The run this one replayed (``run --replay``), or None for a measured run."""
    withheld: int | None = None
    """Oracle outputs a public bundle withholds (``bundle --public``); None when not public."""
    sealed_checked: bool = False
    """Whether the withheld outputs were checked against the sealed part."""

    @property
    def signed(self) -> bool:
        """Whether a signature by the key given to verify was checked."""
        return self.signature.startswith(SIGNED_BY)

    def lines(self) -> list[str]:
        """The report as sentences for a terminal."""
        signature = self.signature if self.signed else f"{self.signature}; {UNSIGNED_CAVEAT}"
        return [
            f"ok: bundle {self.bundle} of run {self.run_id} verifies: {self.files_checked} file(s) "
            f"match SHA256SUMS, everything derived re-derives byte for byte, and each task's events "
            f"agree with its outcome",
            f"  {self.rate.sentence}; contract {self.rate.contract_sha256}",
            f"  signature: {signature}",
            f"  isolation: {isolation_sentence(self.isolation)}",
            f"  pack: {self.pack}",
            f"  narration probe: {self.probe_sentence or 'not run (the contract declares none)'}",
            *([f"  a replay of run {self.replay_of.get('run_id')} (nonce {self.replay_of.get('run_nonce')}): "
               "every model reply came from that run's record; a reproduction, not a measurement"]
              if self.replay_of else []),
            *([f"  public: {self.withheld} output(s) of the hidden tests withheld, kept as digests; "
               + ("each matches the sealed part" if self.sealed_checked else "their bodies were not checked "
                  "(the sealed part is not at hand)")] if self.withheld is not None else []),
        ]


@dataclass(frozen=True)
class BundleFacts:
    """What a bundle that checks out holds, for :class:`VerifyReport` and comparisons."""

    contract: ScoringContract
    rate: Rate
    scorecards: Sequence[Scorecard]
    probe_sentence: str | None
    started_at: str
    signature: str
    pack: str
    isolation: str
    run_nonce: str | None
    replay_of: dict[str, Any] | None = None
    withheld: int | None = None
    """Oracle outputs a public bundle withholds; None for a bundle that is not public."""
    sealed_checked: bool = False


def _check_signature(whole: Mapping[str, bytes], public_pem: bytes | None) -> tuple[list[str], str]:
    sig = whole.get(SIGNATURE)
    if public_pem is None:
        return [], (f"{SIGNATURE} present, not checked (pass --pubkey)" if sig is not None else "not signed")
    key = fingerprint(public_pem)
    if sig is None:
        return [f"{SIGNATURE}: missing; the bundle is not signed, so key {key} cannot vouch for it"], ""
    if SUMS not in whole or not signature_valid(public_pem, whole[SUMS], sig):
        return [f"{SIGNATURE}: not a signature of {SUMS} by key {key}"], ""
    return [], f"{SIGNED_BY} {key}"


def _scorecard_problems(lines: Iterable[bytes]) -> list[str]:
    """What the scorecard rules say of each line of a bundle's scorecards.jsonl."""
    problems: list[str] = []
    for lineno, line in enumerate(lines, start=1):
        card = _json_or_none(line) if line is not TOO_LONG else None
        if not isinstance(card, dict):
            problems.append(f"scorecards.jsonl line {lineno}: not a JSON object")
            continue
        try:
            validate_scorecard(card)
        except IncompleteScorecard as e:
            problems.append(f"scorecards.jsonl line {lineno}{_label(card)}: {e}")
        except TypeError:
            problems.append(f"scorecards.jsonl line {lineno}{_label(card)}: attempts_used or max_attempts is not a number")
    return problems


def _chain_problems(chain: ChainScan | ChainReport | None, source: str) -> list[str]:
    if chain is None:
        return []
    # scan_chain names the file journal.jsonl; the probe's lives at probe/journal.jsonl.
    problems = [source + p.removeprefix(JOURNAL) if p.startswith(JOURNAL) else f"{source}: {p}" for p in chain.problems]
    if chain.torn_tail:
        problems.append(f"{source}: the last line is torn (an unfinished write; resuming the run repairs it)")
    return problems


@dataclass
class _Pass:
    """What one pass over a journal gathered, line by line, for the checks that need it whole."""

    source: str
    scan: ChainScan = field(default_factory=ChainScan)
    pins: list[str] = field(default_factory=list)
    pack_pins: list[str] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)
    refs: dict[str, str] = field(default_factory=dict)
    bad_refs: list[str] = field(default_factory=list)
    oracle: set[str] = field(default_factory=set)
    other: set[str] = field(default_factory=set)
    last_patch: dict[str, str] = field(default_factory=dict)
    headers: list[ev.RunHeader] = field(default_factory=list)
    first: ev.Line | None = None
    dates: dict[str, str | None] = field(default_factory=dict)
    """Each started task's commit date as the journal recorded it (a fresh-tasks contract's)."""
    fresh: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Pins, the pack's pins, contradictions and the fresh-tasks claim, as :func:`check_bundle` lists them."""
        return self.pins + self.pack_pins + self.contradictions + self.fresh


def _journal_pass(path: Path, source: str, contract: ScoringContract, notes: CommandNotes, *,
                  probe: bool, pack: PackFinding | None,
                  on_line: Callable[[ev.Line], None] | None = None) -> tuple[_Pass, Iterator[ev.Line]]:
    """One pass over a journal, read line by line (:func:`journal.scan_chain`): the lines it
    yields, every check that reads them one at a time fed on the way (and ``on_line``, a
    reader riding along). The pass's findings are complete once the lines are exhausted."""
    found = _Pass(source)
    pins = RunPins(contract, source, probe=probe)
    meaning = Contradictions(contract, source=source, probe=probe)
    hidden = pack.hidden if pack is not None and pack.hidden else None

    def lines() -> Iterator[ev.Line]:
        for _, line in scan_chain(path, found.scan, line_cap=LINE_CAP, canonical=not probe):
            if line is None:
                continue
            if found.first is None:
                found.first = line
            pins.feed(line)
            if hidden is not None:
                found.pack_pins += _pack_pins(hidden, pack.path if pack is not None else "", (line,), source)
            meaning.feed(line)
            fields = list(ev.blob_fields(line.event))
            if fields:
                note_blob_refs(line, source, found.refs, found.bad_refs, fields)
                note_oracle_outputs(line, found.oracle, found.other, fields)
            if not probe:
                note_patch(found.last_patch, line)
            notes.feed(source, line)
            if isinstance(line.event, ev.RunHeader):
                found.headers.append(line.event)
            elif isinstance(line.event, ev.TaskStarted) and line.event.task_id is not None:
                found.dates[line.event.task_id] = line.event.committed_at
            if on_line is not None:
                on_line(line)
            yield line
        found.pins = pins.problems()
        found.contradictions = meaning.problems
        found.fresh = _fresh_problems(contract, found.dates, source)

    return found, lines()


def _fresh_problems(contract: ScoringContract, journaled: dict[str, str | None], source: str) -> list[str]:
    """The contract's fresh-tasks claim against the task dates its journal recorded (see
    :mod:`sealbench.freshness`); nothing for a contract that claims nothing and a journal
    that records no date."""
    from .freshness import problems

    return [f"{source}: {p}" for p in problems(contract, journaled, list(journaled))]


def _first_derivation_version(path: Path) -> int:
    """:func:`derive.derivation_version` of a journal, read only as far as its run_started."""
    for _, line in scan_chain(path, ChainScan(), line_cap=LINE_CAP):
        if line is not None and isinstance(line.event, ev.RunStarted):
            return line.event.derivation()
    return 1


class _Comparison:
    """Each derived file held against the bundle's, by sha256; the bytes of one that differs
    are read (up to :data:`DESCRIBE_CAP`) only to say where."""

    def __init__(self, tree: BundleTree) -> None:
        self.tree = tree
        self.names: set[str] = set()
        self.problems: list[str] = []

    def check(self, rel: str, expected: bytes, source: str = JOURNAL) -> None:
        self.names.add(rel)
        actual = self.tree.digests.get(rel)
        if actual is None:
            self.problems.append(f"{rel}: missing; {source} derives it")
        elif actual != hashlib.sha256(expected).hexdigest():
            self.problems.append(self.difference(rel, expected, source))

    def check_pieces(self, rel: str, pieces: Callable[[], Iterable[bytes]], source: str = JOURNAL) -> None:
        """:meth:`check` of the bytes ``pieces()`` makes, hashed a piece at a time (made again
        whole only when they differ, to say where)."""
        h = hashlib.sha256()
        for piece in pieces():
            h.update(piece)
        if self.tree.digests.get(rel) == h.hexdigest():
            self.names.add(rel)
        else:
            self.check(rel, b"".join(pieces()), source)

    def difference(self, rel: str, expected: bytes | None, source: str) -> str:
        actual = self.tree.read(rel, DESCRIBE_CAP)
        if actual is None or expected is None:
            return (f"{rel}: content (sha256:{self.tree.digests[rel]}) differs from what {source} derives"
                    + (f" ({sha256_bytes(expected)})" if expected is not None else ""))
        return describe_difference(rel, expected, actual, source)


def check_bundle(
    tree: BundleTree,
    *,
    public_pem: bytes | None = None,
    pack: PackFinding | None = None,
    sealed: Mapping[str, str] | None = None,
    on_line: Callable[[ev.Line], None] | None = None,
    steps: Steps | None = None,
) -> tuple[list[str], BundleFacts | None]:
    """Every discrepancy in a bundle's files, and its facts when there is none.

    ``tree`` is the bundle as :func:`read_tree` found it; its journals are read here, line by
    line, once each; ``sealed``, a public bundle's sealed part (``blobs/<hex>`` to the sha256
    of its bytes) when it is at hand; ``on_line`` is given each parsed line of the main
    journal as it is read (what it makes of them is trusted only once no problem is found);
    ``steps`` counts the contract's tasks as the journal finishes them.

    Raises:
        UsageError: ``public_pem`` is not a PEM Ed25519 public key.
    """
    problems = check_sums(tree)
    sig_problems, signature = _check_signature(tree.whole, public_pem)
    problems += sig_problems
    has_journal, has_probe = JOURNAL in tree.digests, PROBE_JOURNAL in tree.digests
    problems += _scorecard_problems(tree.lines("scorecards.jsonl"))
    contract, contract_problems = _read_contract(tree.whole)
    problems += contract_problems
    if not has_journal:
        problems.append(f"{JOURNAL}: missing")
    pack_note = "not checked (pass --pack)"
    if pack is not None:
        problems += [f"pack {pack.path}: {p}" for p in pack.problems]
        pack_note = f"{pack.path} matches its seal and the contract ({pack.digest})"
    if contract is None or not has_journal:
        problems += _chains_only(tree, has_journal, has_probe)
        problems.append("nothing derived can be checked without a readable contract and journal")
        return problems, None
    if pack is not None and pack.digest is not None and contract.pack is not None and pack.digest != contract.pack.sha256:
        problems.append(f"pack {pack.path}: digest {pack.digest} differs from {CONTRACT}'s {contract.pack.sha256}")
    if steps is not None:
        steps.step(JOURNAL_STEP, len(contract.task_ids))
        on_line = _counting(steps, on_line)
    found, r = _rederive_streaming(tree, contract, pack, has_probe, on_line)
    main, probe = found
    problems += _chain_problems(main.scan, JOURNAL) + _chain_problems(probe.scan if probe else None, PROBE_JOURNAL)
    # The chain shows the journal was not edited, unless every hash was recomputed: what the
    # events mean must agree too (see consistency's module docstring).
    problems += main.problems() + (probe.problems() if probe is not None else [])
    withheld = r.withheld
    problems += _public_problems(tree.whole, withheld, sealed)
    problems += r.problems
    if r.refusal is not None:
        problems.append(f"{RATE}: score refuses the journal's events: {r.refusal}")
    gap = probe_gap(contract, r.probe)
    if gap is not None:
        problems.append(f"{PROBE_JOURNAL}: {gap}")
    problems += r.compared.problems
    problems += _unexplained(tree, r, has_probe)
    if problems or r.rate is None or main.first is None:
        return problems, None
    return [], BundleFacts(contract=contract, rate=r.rate, scorecards=r.scorecards,
                           probe_sentence=r.probe.get("sentence") if r.probe else None,
                           started_at=str(main.first.raw.get("time")), signature=signature, pack=pack_note,
                           isolation=isolation_of(main.headers), **_opening(main),
                           withheld=len(withheld) if PUBLIC in tree.whole else None,
                           sealed_checked=sealed is not None)


def _chains_only(tree: BundleTree, has_journal: bool, has_probe: bool) -> list[str]:
    """The journals' hash chains alone: what can be checked without a contract."""
    problems: list[str] = []
    for source, present in ((JOURNAL, has_journal), (PROBE_JOURNAL, has_probe)):
        if present:
            scan = ChainScan()
            for _ in scan_chain(tree.root / source, scan, line_cap=LINE_CAP):
                pass
            problems += _chain_problems(scan, source)
    return problems


def _unexplained(tree: BundleTree, r: _Streamed, has_probe: bool) -> list[str]:
    """The bundle's files that nothing derives or references."""
    # rate.json and narration_probe.json belong even when they cannot be derived: the refusal
    # or derivation problem already names them.
    expected_names = {CONTRACT, JOURNAL, SUMS, SIGNATURE, RATE, *r.compared.names,
                      *(f"blobs/{h}" for h in r.blob_refs if h not in r.withheld)}
    if PUBLIC in tree.whole:
        expected_names.add(PUBLIC)
    if has_probe:
        expected_names |= {PROBE_JOURNAL, PROBE_SUMMARY}
    return [f"{rel}: not part of this bundle (nothing derives or references it)"
            for rel in sorted(set(tree.digests) - expected_names)]


def _opening(main: _Pass) -> dict[str, Any]:
    """The run's nonce and replay origin, as its first line (when it is its header) says."""
    headers = main.headers
    opened = bool(headers) and main.first is not None and main.first.event is headers[0]
    return {"run_nonce": headers[0].run_nonce if opened else None,
            "replay_of": headers[0].replay_of if opened else None}


def _read_contract(whole: Mapping[str, bytes]) -> tuple[ScoringContract | None, list[str]]:
    """The bundle's contract (parsed even when it is not locked, which is a problem) and what is
    wrong with it."""
    problems: list[str] = []
    contract: ScoringContract | None = None
    if CONTRACT not in whole:
        problems.append(f"{CONTRACT}: missing")
    else:
        try:
            contract = parse_contract(whole[CONTRACT])
            require_locked(contract)
        except ContractError as e:
            problems.append(f"{CONTRACT}: {e}" if not str(e).startswith(CONTRACT) else str(e))
    return contract, problems


class CardLines(Sequence[Scorecard]):
    """A bundle's scorecards, kept as scorecards.jsonl's bytes (or the path of a file holding
    them, read again when asked for) and read one at a time: a run of many tasks is not held
    as models."""

    def __init__(self, data: bytes | Path) -> None:
        self._data = data

    def _lines(self) -> Iterator[bytes]:
        if isinstance(self._data, bytes):
            yield from self._data.splitlines()
            return
        # The bundle's own file, by its sha256 the one derived; never followed if it became a link.
        fd = os.open(self._data, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            for raw in f:
                yield raw.rstrip(b"\n")

    def __len__(self) -> int:
        return sum(1 for _ in self._lines())

    def __iter__(self) -> Iterator[Scorecard]:
        for line in self._lines():
            yield Scorecard.model_validate_json(line)

    @overload
    def __getitem__(self, index: int) -> Scorecard: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Scorecard]: ...

    def __getitem__(self, index: int | slice) -> Scorecard | Sequence[Scorecard]:
        cards = list(self)
        return cards[index]


@dataclass
class _Streamed:
    """What re-deriving a bundle's files while its journals streamed by found (see :class:`Rederived`)."""

    compared: _Comparison
    scorecards: CardLines
    rate: Rate | None
    refusal: Refusal | None
    probe: dict[str, Any] | None
    blob_refs: dict[str, str]
    problems: list[str]
    withheld: list[str]
    """The blobs a public bundle withholds (:func:`withheld_blobs`); none when it is not public."""


def _derive_main(tree: BundleTree, contract: ScoringContract, rules: Rules, lines: Iterator[ev.Line],
                 compared: _Comparison, derive_problems: list[str]) -> tuple[CardLines, Rate | None, Refusal | None]:
    """The main journal's derived files held against the bundle's as they are made, and its rate
    from the seed events; a failure to derive goes to ``derive_problems``.

    scorecards.jsonl and events.json are hashed as their tasks finish (:func:`derive.derive_hashed`),
    never held. When either differs from the bundle's, or a task finished twice, they are made
    again whole from a second read of the journal, to say where they differ."""
    held = _Comparison(tree)
    tally = Tally()
    made: dict[str, Made] = {}
    try:
        for rel, data in rules.derive_hashed(lines, list(contract.task_ids), contract.model_endpoints or (),
                                             lambda entry: tally.add(SeedEvent.model_validate(entry))):
            if isinstance(data, Made):
                made[rel] = data
            else:
                held.check(rel, data)
    except FinishedTwice:
        return _derive_whole(tree, contract, rules, compared, derive_problems)
    except Exception as e:
        derive_problems.append(f"{JOURNAL}: scorecards, events.json and traces cannot be derived "
                               f"({type(e).__name__}: {e})")
        return CardLines(b""), None, None
    if any(tree.digests.get(rel) != m.sha256 for rel, m in made.items()):
        return _derive_whole(tree, contract, rules, compared, derive_problems)
    held.names |= set(made)
    compared.names |= held.names
    compared.problems += held.problems
    # scorecards.jsonl is the bundle's own file, by its sha256 the one derived.
    rate, refusal = _rate(contract, rules, tally, compared)
    return CardLines(tree.root / "scorecards.jsonl"), rate, refusal


def _derive_whole(tree: BundleTree, contract: ScoringContract, rules: Rules, compared: _Comparison,
                  derive_problems: list[str]) -> tuple[CardLines, Rate | None, Refusal | None]:
    """:func:`_derive_main` with every derived file made whole, from a read of the journal of
    its own (its chain and meaning are checked by the first)."""
    lines = (line for _, line in scan_chain(tree.root / JOURNAL, ChainScan(), line_cap=LINE_CAP, canonical=True)
             if line is not None)
    held = _Comparison(tree)
    seeds: list[dict[str, Any]] = []
    cards = CardLines(b"")
    try:
        for rel, data in rules.derive_iter(lines, list(contract.task_ids), contract.model_endpoints or (), None, seeds):
            held.check(rel, data)
            if rel == "scorecards.jsonl":
                cards = CardLines(data)
    except Exception as e:
        derive_problems.append(f"{JOURNAL}: scorecards, events.json and traces cannot be derived "
                               f"({type(e).__name__}: {e})")
        return CardLines(b""), None, None
    compared.names |= held.names
    compared.problems += held.problems
    # The seed events as events.json holds them: what seed_event made of each scorecard.
    rate, refusal = _rate(contract, rules, Tally(SeedEvent.model_validate(entry) for entry in seeds), compared)
    return cards, rate, refusal


def _rate(contract: ScoringContract, rules: Rules, tally: Tally,
          compared: _Comparison) -> tuple[Rate | None, Refusal | None]:
    """The rate of the seed events (held against rate.json), or why score refuses them."""
    try:
        rate = score(contract, tally)
    except Refusal as e:
        return None, e
    except ValueError as e:
        # score() lets the statistics' ValueError through for an empty denominator.
        return None, ScoreRefusal(f"no rate for this denominator ({e})")
    compared.check(RATE, rules.rate_bytes(rate))
    return rate, None


def _rederive_streaming(tree: BundleTree, contract: ScoringContract, pack: PackFinding | None,
                        has_probe: bool, on_line: Callable[[ev.Line], None] | None = None,
                        ) -> tuple[tuple[_Pass, _Pass | None], _Streamed]:
    """:func:`rederive`, with each derived file held against the bundle's as it is made and the
    journals read once each, line by line: what :func:`rederive` finds, in the same words."""
    task_ids = list(contract.task_ids)
    compared = _Comparison(tree)
    notes = CommandNotes(task_ids)
    main, lines = _journal_pass(tree.root / JOURNAL, JOURNAL, contract, notes, probe=False, pack=pack,
                                on_line=on_line)
    cards = CardLines(b"")
    rate: Rate | None = None
    refusal: Refusal | None = None
    derive_problems: list[str] = []
    version = _first_derivation_version(tree.root / JOURNAL)
    try:
        rules = rules_for(version)
    except KeyError:
        rules = None
        derive_problems.append(f"{JOURNAL}: run_started's derivation_version {version!r} is not one this release derives")
    if rules is not None:
        cards, rate, refusal = _derive_main(tree, contract, rules, lines, compared, derive_problems)
    for _ in lines:  # whatever the derivation left unread still passes every check
        pass
    probe: _Pass | None = None
    summary: dict[str, Any] | None = None
    probe_problems: list[str] = []
    if has_probe:
        probe, probe_lines = _journal_pass(tree.root / PROBE_JOURNAL, PROBE_JOURNAL, contract, notes, probe=True,
                                           pack=pack)
        if rules is not None:
            try:
                summary = rules.probe_summary(probe_lines, task_ids)
            except Exception as e:
                probe_problems.append(f"{PROBE_JOURNAL}: {PROBE_SUMMARY} cannot be derived ({type(e).__name__}: {e})")
        for _ in probe_lines:
            pass
    problems = main.bad_refs + (probe.bad_refs if probe is not None else [])
    all_refs = {**(probe.refs if probe is not None else {}), **main.refs}
    passes = [main] if probe is None else [main, probe]
    withheld = sorted(set().union(*(p.oracle for p in passes)) - set().union(*(p.other for p in passes))) \
        if PUBLIC in tree.whole else []
    blobs = {rel.removeprefix("blobs/"): digest for rel, digest in tree.digests.items()
             if rel.startswith("blobs/") and _HEX_RE.match(rel.removeprefix("blobs/"))}
    problems += blob_problems(all_refs, blobs, withheld)
    problems += derive_problems
    if rules is None:
        return (main, probe), _Streamed(compared=compared, scorecards=CardLines(b""), rate=None, refusal=None, probe=None,
                                        blob_refs=all_refs, problems=problems, withheld=withheld)
    good = {h for h in all_refs if blobs.get(h) == h}
    _compare_patches(tree, compared, patch_names(main.last_patch, task_ids, good))
    problems += probe_problems
    if summary is not None:
        compared.check(PROBE_SUMMARY, rules.probe_bytes(summary), PROBE_JOURNAL)
    compared.check_pieces(COMMANDS, lambda: notes.pieces(task_ids))
    compared.check(README, rules.readme_bytes(contract, summary))
    return (main, probe), _Streamed(compared=compared, scorecards=cards, rate=rate, refusal=refusal, probe=summary,
                                    blob_refs=all_refs, problems=problems, withheld=withheld)


def _compare_patches(tree: BundleTree, compared: _Comparison, patches: Mapping[str, str]) -> None:
    """Each task's patch file against the blob the journal names for it."""
    for rel, hexname in patches.items():
        # A patch is its blob: the same bytes, so the same sha256.
        compared.names.add(rel)
        actual = tree.digests.get(rel)
        if actual is None:
            compared.problems.append(f"{rel}: missing; {JOURNAL} derives it")
        elif actual != hexname:
            compared.problems.append(compared.difference(rel, tree.read(f"blobs/{hexname}", DESCRIBE_CAP), JOURNAL))


def _public_problems(whole: Mapping[str, bytes], withheld: Sequence[str],
                     sealed: Mapping[str, str] | None) -> list[str]:
    """What is wrong with a public bundle's PUBLIC.json and, when at hand, its sealed part
    (``blobs/<hex>`` to the sha256 of its bytes)."""
    problems: list[str] = []
    if PUBLIC in whole and whole[PUBLIC] != public_bytes(withheld):
        problems.append(f"{PUBLIC}: differs from what the journals withhold ({len(withheld)} oracle output(s))")
    if sealed is None:
        return problems
    if PUBLIC not in whole:
        return [*problems, f"the sealed part belongs to no public bundle (this bundle has no {PUBLIC})"]
    for rel, digest in sorted(sealed.items()):
        hexname = rel.removeprefix("blobs/")
        if hexname not in withheld:
            problems.append(f"sealed part {rel}: not an oracle output this bundle withholds")
        elif digest != hexname:
            problems.append(f"sealed part {rel}: content does not match its name (sha256 sha256:{digest})")
    problems += [f"sealed part blobs/{h}: missing; the journal names it as an oracle output" for h in withheld
                 if f"blobs/{h}" not in sealed]
    return problems


# --------------------------------------------------------------------------- shells


CHUNK = 1 << 20
"""verify reads every file it hashes in pieces of this many bytes: none is held whole, however
large (a sparse file of gigabytes put in place of a blob costs time, not memory)."""
WHOLE_CAP = 256 << 20
"""The largest file verify reads whole: only SHA256SUMS (its signature is over its bytes whole),
the contract, the signature and PUBLIC.json are. A run of a million tasks has a SHA256SUMS of
about 200 MB; sealbench writes none larger."""
_WHOLE = frozenset({SUMS, SIGNATURE, CONTRACT, PUBLIC})
LINE_CAP = 16 << 20
"""The longest line of a journal or scorecards.jsonl that verify reads; a longer one is named, unread."""
DESCRIBE_CAP = 16 << 20
"""The most bytes of a derived file that differs verify reads to say where it departs; beyond,
it names the two sha256s."""
_EMPTY = hashlib.sha256(b"").hexdigest()


def sha256_hex_of(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in pieces of :data:`CHUNK` bytes without following a link."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        while chunk := os.read(fd, CHUNK):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


@dataclass
class BundleTree:
    """A bundle's regular files as verify found them: the sha256 of each (hashed in pieces of
    :data:`CHUNK` bytes), and the bytes of the few it reads whole (:data:`WHOLE_CAP`). A file
    SHA256SUMS does not list is never read: it stands as empty, and is named as not listed."""

    root: Path
    digests: dict[str, str] = field(default_factory=dict)
    """Each regular file's bundle-relative path to the hex sha256 of its bytes."""
    whole: dict[str, bytes] = field(default_factory=dict)
    unread: set[str] = field(default_factory=set)

    def read(self, rel: str, cap: int) -> bytes | None:
        """The bytes of ``rel`` when there are at most ``cap`` of them (a file never read: none),
        else None."""
        if rel in self.whole:
            return self.whole[rel]
        if rel in self.unread:
            return b""
        try:
            fd = os.open(self.root / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                data = f.read(cap + 1)
        except OSError:
            return None
        return data if len(data) <= cap else None

    def lines(self, rel: str) -> Iterator[bytes]:
        """The lines of ``rel`` as ``bytes.splitlines`` cuts them, read one at a time (a line of
        more than :data:`LINE_CAP` bytes comes as :data:`journal.TOO_LONG`); none for a file
        absent or never read."""
        if rel not in self.digests or rel in self.unread or rel in self.whole:
            yield from (self.whole.get(rel) or b"").splitlines()
            return
        for _, raw, complete in iter_lines(self.root / rel, LINE_CAP):
            if raw is TOO_LONG:
                yield raw
            else:
                yield from (raw + b"\n" if complete else raw).splitlines()


def read_tree(root: Path, steps: Steps | None = None) -> tuple[BundleTree, list[str]]:
    """Every regular file under ``root``, hashed; anything else is a problem. ``steps``
    counts the files SHA256SUMS lists as they are hashed.

    Only the files SHA256SUMS lists are read (and SHA256SUMS and its signature): any other is
    named as not listed whatever it holds, so a sparse file of many gigabytes planted beside
    them costs nothing. A listed file is read in pieces of :data:`CHUNK` bytes, whatever its
    size; only SHA256SUMS, the contract, the signature and PUBLIC.json are held whole, up to
    :data:`WHOLE_CAP` (a larger one is a problem, unread).
    """
    tree = BundleTree(root)
    problems: list[str] = []
    sums = root / SUMS
    listed: set[str] | None = None  # without a readable SHA256SUMS, every file is read
    if not sums.is_symlink() and sums.is_file() and sums.stat().st_size <= WHOLE_CAP:
        data = tree.whole[SUMS] = sums.read_bytes()  # read once: the walk below keeps it
        tree.digests[SUMS] = hashlib.sha256(data).hexdigest()
        if _is_utf8(data):
            listed = {m.group(2) for line in text_lines(data) if (m := _SUMS_LINE_RE.match(line)) is not None}
    if steps is not None:
        steps.step(f"hashing {len(listed)} files" if listed is not None else "hashing files",
                   len(listed) if listed is not None else None)
    # Plain strings and the directory entries' own types: a bundle holds a file or two per task.
    pending = [(os.fspath(root), "")]
    while pending:
        directory, prefix = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if entry.is_symlink():
                    problems.append(f"{rel}: a symlink; a bundle holds regular files only")
                elif entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, rel + "/"))
                elif rel in tree.digests:
                    continue  # SHA256SUMS, read above
                elif not entry.is_file(follow_symlinks=False):
                    problems.append(f"{rel}: not a regular file")
                elif listed is not None and rel not in listed and rel not in (SUMS, SIGNATURE):
                    tree.unread.add(rel)  # named as not listed by check_sums; never read
                    tree.digests[rel] = _EMPTY
                    if rel in _WHOLE:
                        tree.whole[rel] = b""
                elif rel in _WHOLE and (size := entry.stat(follow_symlinks=False).st_size) > WHOLE_CAP:
                    tree.whole[rel], tree.digests[rel] = b"", _EMPTY
                    problems.append(f"{rel}: {size} bytes, more than verify reads of a file it reads whole "
                                    f"({WHOLE_CAP >> 20} MiB; sealbench writes none that large)")
                elif rel in _WHOLE:
                    data = tree.whole[rel] = Path(entry.path).read_bytes()
                    tree.digests[rel] = hashlib.sha256(data).hexdigest()
                else:
                    tree.digests[rel] = sha256_hex_of(entry.path)
                    if steps is not None:
                        steps.advance()
    return tree, problems


def _first_json(tree: BundleTree, rel: str) -> Any:
    """The first line of a journal, parsed; None when there is none or it is not JSON."""
    first = next(iter(tree.lines(rel)), None) if rel in tree.digests else None
    if not first or first is TOO_LONG:
        return None
    try:
        return strict_json(first)
    except ValueError:
        return None


def is_run_directory(directory: Path) -> bool:
    """A run directory as ``run`` leaves it: a journal and its writer lock, and no sums.

    A bundle never has a writer lock of its own and always has ``SHA256SUMS``; a directory with
    neither sums nor lock is a damaged bundle, which ``verify`` reports as such.
    """
    return ((directory / JOURNAL).is_file() and (directory / LOCK_NAME).exists()
            and not (directory / SUMS).exists())


def verify_bundle(bundle: Path, *, pubkey: Path | None = None, pack: Path | None = None,
                  sealed: Path | None = None, on_line: Callable[[ev.Line], None] | None = None,
                  steps: Steps | None = None) -> VerifyReport:
    """Check a bundle end to end and report every discrepancy at once.

    Checks SHA256SUMS (every listed file, and no unlisted one), the signature when ``pubkey``
    is given, both journals' hash chains, the contract's lock and sha256, that the journals
    pin that contract and its pack, the pack against its seal when ``pack`` is given, every
    scorecard against the scorecard rules, and re-derives scorecards.jsonl, events.json,
    traces/, patches/, rate.json, narration_probe.json, commands.txt and README.md from the
    journals, byte for byte, and checks that each task's events agree with its outcome
    (:func:`consistency.journal_contradictions`). Without ``pubkey`` this proves internal
    consistency only. A public bundle's withheld oracle outputs are checked against its sealed
    part (``sealed``, by default ``<bundle>.sealed`` beside it) when that is present.

    Every file is read as a stream (see :func:`read_tree` and :func:`journal.scan_chain`): what
    verify holds grows with the number of tasks, never with the size of a file. ``on_line``
    rides along the one read of the main journal (the report tells each task's story from it).
    ``steps`` shows how far the hashing of the files and the read of the journal are.

    Raises:
        UsageError: ``bundle`` is not a directory, or ``pubkey`` is not a readable Ed25519
            public key.
        NotABundle: ``bundle`` is a run directory (exit 3; bundle it first).
        MadeByNewerRelease: the bundle's journal names a format or derivation version newer
            than this release knows (exit 4, never reported as tampering).
        VerificationFailed: anything is wrong; ``problems`` lists every discrepancy.
    """
    if not bundle.is_dir():
        raise UsageError(f"{bundle}: not a bundle folder: {nearest_folders(bundle, SUMS)}")
    if is_run_directory(bundle):
        raise NotABundle(f"{bundle} is a run directory, not a bundle: bundle it first with "
                         f"`sealbench bundle {bundle} --out OUT`, then verify OUT/<run_id>")
    public_pem = read_key(pubkey) if pubkey is not None else None
    if public_pem is not None:
        fingerprint(public_pem, str(pubkey))
    tree, problems = read_tree(bundle, steps)
    newer = newer_release(_first_json(tree, JOURNAL))
    if newer is not None:
        raise MadeByNewerRelease([f"{bundle}: {newer}"])
    finding = _check_pack(pack) if pack is not None else None
    sealed_dir = sealed if sealed is not None else bundle.with_name(bundle.name + SEALED_SUFFIX)
    sealed_files: dict[str, str] | None = None
    if sealed is not None or sealed_dir.is_dir():
        sealed_files, sealed_problems = _read_sealed(sealed_dir)
        problems += sealed_problems
    found, facts = check_bundle(tree, public_pem=public_pem, pack=finding, sealed=sealed_files, on_line=on_line,
                                steps=steps)
    problems += found
    if problems or facts is None:
        raise VerificationFailed(problems or ["the bundle does not verify"])
    return VerifyReport(
        bundle=bundle, run_id=str(facts.contract.run_id),
        files_checked=sum(1 for rel in tree.digests if rel not in (SUMS, SIGNATURE)),
        signature=facts.signature, pack=facts.pack, contract=facts.contract, rate=facts.rate,
        scorecards=facts.scorecards, probe_sentence=facts.probe_sentence, started_at=facts.started_at,
        isolation=facts.isolation, run_nonce=facts.run_nonce, replay_of=facts.replay_of,
        withheld=facts.withheld, sealed_checked=facts.sealed_checked,
    )


def _counting(steps: Steps, on_line: Callable[[ev.Line], None] | None) -> Callable[[ev.Line], None]:
    """``on_line``, counting each task_finished line on ``steps`` first."""

    def counted(line: ev.Line) -> None:
        if isinstance(line.event, ev.TaskFinished):
            steps.advance()
        if on_line is not None:
            on_line(line)

    return counted


def _read_sealed(root: Path) -> tuple[dict[str, str], list[str]]:
    """A sealed part's ``blobs/<hex>`` files, each hashed without following a link; anything else
    is a problem."""
    blobs = root / "blobs"
    if root.is_symlink() or not root.is_dir() or blobs.is_symlink() or not blobs.is_dir():
        return {}, [f"{root}: not a sealed part (a directory holding blobs/)"]
    files: dict[str, str] = {}
    problems: list[str] = []
    for entry in sorted(os.scandir(blobs), key=lambda e: e.name):
        rel = f"blobs/{entry.name}"
        if not _HEX_RE.match(entry.name) or not entry.is_file(follow_symlinks=False):
            problems.append(f"sealed part {rel}: not a blob (a regular file named by its sha256)")
        else:
            files[rel] = sha256_hex_of(entry.path)
    return files, problems


def _pack_pins(hidden: Mapping[str, str], pack_path: str, lines: Iterable[ev.Line], source: str) -> list[str]:
    """Each task_started line whose hidden-test digest is not the one the sealed pack in hand
    records (the contract pins the pack, the pack each task's hidden tests)."""
    problems = []
    for line in lines:
        event, tid = line.event, line.task_id
        sealed = hidden.get(tid) if tid is not None else None
        if isinstance(event, ev.TaskStarted) and sealed is not None and event.hidden_tests_sha256 != sealed:
            problems.append(f"{source} task {tid}: task_started (seq {line.raw.get('seq')}) says "
                            f"hidden_tests_sha256 {event.hidden_tests_sha256}, but the pack {pack_path} seals {sealed}")
    return problems


def _check_pack(pack: Path) -> PackFinding:
    from .pack import check_pack

    try:
        checked = check_pack(pack)
        return PackFinding(path=str(pack), digest=checked.sealed_digest,
                           hidden={tid: t.record.hidden_tests_sha256 for tid, t in checked.tasks.items()})
    except VerificationFailed as e:
        return PackFinding(path=str(pack), digest=None, problems=tuple(e.problems))
    except PackError as e:
        return PackFinding(path=str(pack), digest=None, problems=(str(e),))


def _read_journal(path: Path, source: str) -> ChainReport:
    report = read_chain(path)
    problems = _chain_problems(report, source)
    if problems:
        raise VerificationFailed(problems)
    return report


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _stale(run_dir: Path, files: Mapping[str, bytes], derived: Iterable[str]) -> list[str]:
    problems = []
    for rel in sorted(derived):
        path = run_dir / rel
        if path.is_file() and path.read_bytes() != files[rel]:
            source = PROBE_JOURNAL if rel == PROBE_SUMMARY else JOURNAL
            problems.append(describe_difference(f"{run_dir / rel}", files[rel], path.read_bytes(), source))
    return problems


def make_bundle(run_dir: Path, out_root: Path, *, sign_key: Path | None = None, public: bool = False) -> Path:
    """Write the bundle of a finished run to ``out_root/<run_id>/`` and return its path.

    The bundle is built in a temporary sibling directory and renamed into place, so there
    is either a whole bundle or none; one a killed ``bundle`` left (named after its process)
    is removed by the next. The run directory is read under its reader lock: a run or probe
    writing it is refused, and none can start meanwhile. Derived files are recomputed from the journals (see the
    module docstring); the run directory's own copies of them must agree, or nothing is
    written. With ``sign_key`` (a PEM Ed25519 private key from :func:`signing.keygen`) the
    bundle gets SHA256SUMS.sig. With ``public`` the hidden tests' output is withheld
    (:func:`make_public`): the bundle holds PUBLIC.json instead, and its bodies go to the
    sealed part ``out_root/<run_id>.sealed/``, to keep until the pack is retired.

    Raises:
        UsageError: the target (or its sealed part) exists, or ``sign_key`` is not a usable key.
        ContractError: no contract in ``run_dir``, or it is unlocked or edited after lock.
        ScoreRefusal: no journal, what ``score`` refuses (harness errors, unfinished tasks,
            ...), a narration probe the contract declares that has not run on every task, or
            a run or probe writing ``run_dir`` now.
        IncompleteScorecard: a scorecard fails the scorecard rules (validate_scorecard).
        VerificationFailed: a broken journal chain, journals pinning another contract or
            pack, a missing or altered blob, or a derived file in ``run_dir`` that differs
            from what the journal derives.
    """
    with contextlib.ExitStack() as readers:
        for directory in (run_dir, run_dir / "probe"):
            reader = hold_reader(directory, "bundle")
            if reader is not None:
                readers.enter_context(reader)
        return _make_bundle(run_dir, out_root, sign_key, public)


def _bundled_contract(run_dir: Path, out_root: Path, sign_key: Path | None,
                      public: bool) -> tuple[bytes, ScoringContract, bytes | None]:
    """The run's locked contract (its bytes and itself) and the signing key, once nothing stands
    in the way of bundling the run into ``out_root``.

    Raises:
        ContractError: no contract, or one not locked.
        UsageError: the bundle (or its sealed part) exists; the key is not a private key.
        ScoreRefusal: no journal.
    """
    contract_path = run_dir / CONTRACT
    try:
        contract_bytes = contract_path.read_bytes()
    except FileNotFoundError:
        raise ContractError(f"{contract_path}: file not found") from None
    contract = parse_contract(contract_bytes, str(contract_path))
    require_locked(contract)
    assert contract.run_id is not None
    targets = [out_root / contract.run_id] + ([out_root / (contract.run_id + SEALED_SUFFIX)] if public else [])
    for path in targets:
        if path.exists() or path.is_symlink():
            raise UsageError(f"{path} exists; a bundle is never overwritten (choose another --out)")
    private_pem = read_key(sign_key) if sign_key is not None else None
    if private_pem is not None:
        check_private_key(private_pem, str(sign_key))
    if not (run_dir / JOURNAL).is_file():
        raise ScoreRefusal(f"{run_dir}: no {JOURNAL} in this run directory")
    return contract_bytes, contract, private_pem


def _fill_bundle(tmp: Path, run_dir: Path, contract_bytes: bytes, public: bool, private_pem: bytes | None,
                 sign_key: Path | None) -> dict[str, bytes]:
    """Every file of the run's bundle written durably under ``tmp``; the sealed part's files."""
    # The chains checked are those of the copies bundled, not of files that may still grow.
    journal_bytes = (run_dir / JOURNAL).read_bytes()
    _write(tmp / JOURNAL, journal_bytes)
    events = _read_journal(tmp / JOURNAL, JOURNAL).lines
    probe: tuple[bytes, list[ev.Line]] | None = None
    if (run_dir / PROBE_JOURNAL).is_file():
        probe_journal = (run_dir / PROBE_JOURNAL).read_bytes()
        _write(tmp / PROBE_JOURNAL, probe_journal)
        probe = (probe_journal, _read_journal(tmp / PROBE_JOURNAL, PROBE_JOURNAL).lines)
    files = bundle_files(contract_bytes, journal_bytes, events, probe, _run_blobs(run_dir, events, probe))
    sealed: dict[str, bytes] = {}
    if public:
        files, sealed = make_public(files, events, probe[1] if probe is not None else None)
    derived = [rel for rel in files if rel not in (CONTRACT, JOURNAL, PROBE_JOURNAL, SUMS, COMMANDS, README, PUBLIC)
               and not rel.startswith("blobs/")]
    stale = _stale(run_dir, files, derived)
    if stale:
        raise VerificationFailed([f"{p} (the journal wins; delete the stale file to bundle)" for p in stale])
    for rel, data in files.items():
        if rel not in (JOURNAL, PROBE_JOURNAL):
            _write(tmp / rel, data)
    if private_pem is not None:
        _write(tmp / SIGNATURE, sign(private_pem, files[SUMS], str(sign_key)))
    for sub in ("traces", "patches", "blobs"):
        (tmp / sub).mkdir(exist_ok=True)
    for sub in ("traces", "patches", "blobs", "probe", "."):
        if (tmp / sub).is_dir():
            fsync_dir(tmp / sub)
    # mkdtemp makes the directory 0700; a bundle is meant to be read by others.
    tmp.chmod(0o755)
    return sealed


def _make_bundle(run_dir: Path, out_root: Path, sign_key: Path | None, public: bool) -> Path:
    contract_bytes, contract, private_pem = _bundled_contract(run_dir, out_root, sign_key, public)
    assert contract.run_id is not None
    target = out_root / contract.run_id
    sealed_target = out_root / (contract.run_id + SEALED_SUFFIX)
    out_root.mkdir(parents=True, exist_ok=True)
    sweep(out_root, PARTIAL_BUNDLE)
    tmp = Path(tempfile.mkdtemp(prefix=f".{contract.run_id}.{tag('partial')}", dir=out_root))
    try:
        sealed = _fill_bundle(tmp, run_dir, contract_bytes, public, private_pem, sign_key)
        if target.exists() or target.is_symlink():
            raise UsageError(f"{target} exists; a bundle is never overwritten (choose another --out)")
        if public:
            # Written first: a public bundle in place always has its sealed part beside it.
            _write_sealed(out_root, sealed_target, sealed, contract.run_id)
        try:
            os.rename(tmp, target)
        except BaseException:
            if public:
                shutil.rmtree(sealed_target, ignore_errors=True)
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(out_root)
    return target


def _write_sealed(out_root: Path, target: Path, sealed: Mapping[str, bytes], run_id: str) -> None:
    """The sealed part, built beside ``target`` and renamed into place (private: mode 0700)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{run_id}{SEALED_SUFFIX}.{tag('partial')}", dir=out_root))
    try:
        (tmp / "blobs").mkdir()
        for rel, data in sealed.items():
            _write(tmp / rel, data)
        fsync_dir(tmp / "blobs")
        fsync_dir(tmp)
        if target.exists() or target.is_symlink():
            raise UsageError(f"{target} exists; a bundle is never overwritten (choose another --out)")
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _run_blobs(run_dir: Path, events: Sequence[Any], probe: tuple[bytes, Sequence[Any]] | None) -> dict[str, bytes]:
    """The referenced blobs found in the run's blob stores (the probe keeps its own)."""
    refs, _ = blob_refs(events)
    if probe is not None:
        refs.update(blob_refs(probe[1], PROBE_JOURNAL)[0])
    blobs: dict[str, bytes] = {}
    for hexname in refs:
        for store in (run_dir / "blobs", run_dir / "probe" / "blobs"):
            path = store / hexname
            if path.is_file():
                data = path.read_bytes()
                blobs[hexname] = data
                if hashlib.sha256(data).hexdigest() == hexname:
                    break
    return blobs
