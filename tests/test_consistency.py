"""Verify checks what a journal means, not only its hashes.

A forger holding a run can rewrite a task's outcome and recompute the whole hash chain, every
derived file and SHA256SUMS with sealbench's own functions. Each such forgery below is refused
by `verify` (exit 4), `report` (exit 3) and `bundle`, naming the task and the contradiction;
only a forger who invents the whole story down to the oracle's exit is left, and that is
what a signature is for (the last test). The pure rules are checked on journals written the
way the runner writes them, and by Hypothesis over many such stories.
"""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SAMPLE, make_contract, needs_bwrap
from sealbench.bundle import make_bundle, parse_contract, sums_bytes, verify_bundle
from sealbench.consistency import journal_contradictions
from sealbench.derive import rederive
from sealbench.errors import VerificationFailed
from sealbench.formats import AccessClass, AgentSpec, Budget, Controls, PackRef, ScoringContract
from sealbench.journal import event_hash, read_chain
from sealbench.pack import seal_pack
from sealbench.runner import RunOptions, execute
from sealbench.signing import keygen

GOOD, BAD = "t_11_fix_off_by_one", "t_03_rename_helper"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"
# Attempt 1 of every task writes a wrong window.py; attempt 2 fixes t_11 and repeats the wrong
# file for t_03, so t_11 passes on its second attempt and t_03 fails twice, both graded.
AGENT = "sh -c " + shlex.quote(
    'if [ "$SEALBENCH_ATTEMPT" = 2 ] && [ "$SEALBENCH_TASK_ID" = t_11_fix_off_by_one ]; '
    f"then printf {shlex.quote(FIX)} > window.py; else echo 'def last_n(i, n): return []' > window.py; fi")


# --- forging with sealbench's own functions ---------------------------------------------------


Edit = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def rechain(journal: Path, edit: Edit) -> list[dict[str, Any]]:
    """Rewrite a journal's events and recompute every seq, prev and hash."""
    events = edit(read_chain(journal).events)
    prev = None
    lines = []
    for seq, ev in enumerate(events):
        ev.update(seq=seq, prev=prev)
        ev["hash"] = event_hash(ev)
        prev = ev["hash"]
        lines.append(json.dumps(ev, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
    journal.write_bytes(b"".join(lines))
    assert not read_chain(journal).problems, "the forged chain itself is sound"
    return events


def forge(bundle: Path, edit: Edit) -> Path:
    """Rewrite the journal, re-chain it, re-derive every derived file and re-sum: everything a
    forger without the signing key can do."""
    events = rechain(bundle / "journal.jsonl", edit)
    contract = parse_contract((bundle / "scoring_contract.json").read_bytes())
    blobs = {p.name: p.read_bytes() for p in (bundle / "blobs").iterdir()}
    derived = rederive(contract, events, None, blobs)
    for rel in [p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()]:
        if rel.startswith(("traces/", "patches/")) and rel not in derived.files:
            (bundle / rel).unlink()
    for rel, data in derived.files.items():
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        (bundle / rel).write_bytes(data)
    (bundle / "SHA256SUMS.sig").unlink(missing_ok=True)
    files = {p.relative_to(bundle).as_posix(): p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    (bundle / "SHA256SUMS").write_bytes(sums_bytes(files))
    return bundle


def of(events: list[dict[str, Any]], kind: str, task: str, attempt: int | None = None) -> dict[str, Any]:
    return next(e for e in events if e["kind"] == kind and e["task_id"] == task
                and (attempt is None or e["attempt"] == attempt))


def payload(kind: str, task: str, attempt: int | None = None, **changes: Any) -> Edit:
    def edit(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        of(events, kind, task, attempt)["payload"].update(changes)
        return events
    return edit


def chain(*edits: Edit) -> Edit:
    def edit(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in edits:
            events = e(events)
        return events
    return edit


def oracle_green(task: str, attempt: int) -> Edit:
    def edit(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        of(events, "graded", task, attempt)["payload"]["oracle"].update(exit_code=0)
        return events
    return edit


# Each rung adds what the contradiction named by the rung before it asks for.
OUTCOME = payload("task_finished", BAD, outcome="pass")
RESULT = chain(OUTCOME, payload("attempt_finished", BAD, 2, result="pass"))
GRADED = chain(RESULT, payload("graded", BAD, 2, task_pass=True))
GREEN = chain(GRADED, payload("graded", BAD, 2, tests_green=True))
ORACLE = chain(GREEN, oracle_green(BAD, 2))
WHOLE_STORY = chain(ORACLE, payload("graded", BAD, 2, junit={"failed": 0, "missing_required": [], "ok": True,
                                                            "ran": 4, "why": None}))
# A pass the contract does not count (the test process was flagged; by default such a pass does
# not count), then the same with its flagged_pass rewritten too.
NOT_COUNTED = chain(WHOLE_STORY, payload("graded", BAD, 2, forging_flags=["gc_walk"], flagged_pass="not_counted"))
COUNTED = chain(WHOLE_STORY, payload("graded", BAD, 2, forging_flags=["gc_walk"], flagged_pass="counted"))


@dataclass(frozen=True)
class Made:
    run_dir: Path
    bundle: Path
    key: Path
    pub: Path


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    work = tmp_path_factory.mktemp("consistency")
    pack = work / "pack"
    shutil.copytree(SAMPLE, pack)
    seal_pack(pack)
    contract = work / "c.json"
    make_contract(pack, contract, task_ids=(GOOD, BAD), command=AGENT, run_id="forged", max_attempts=2,
                  narration_probe=False)
    run_dir = work / "run"
    execute(contract, run_dir, RunOptions(progress=False))
    key, pub = keygen(work / "signer")
    return Made(run_dir, make_bundle(run_dir, work / "out", sign_key=key), key, pub)


def copy(made: Made, tmp_path: Path) -> Path:
    return Path(shutil.copytree(made.bundle, tmp_path / "bundle"))


pytestmark = needs_bwrap


def test_the_real_run_tells_the_story_the_forgeries_rewrite(made: Made) -> None:
    cards = {c.task_id: c for c in verify_bundle(made.bundle, pubkey=made.pub).scorecards}
    assert (cards[GOOD].outcome.value, cards[GOOD].attempts_used, cards[GOOD].first_attempt_passed) == ("pass", 2, False)
    assert (cards[BAD].outcome.value, cards[BAD].attempts_used) == ("fail", 2)
    events = read_chain(made.bundle / "journal.jsonl").events
    assert of(events, "graded", BAD, 2)["payload"]["oracle"]["exit_code"] not in (0, None)


@pytest.mark.parametrize(("edit", "named"), [
    (OUTCOME, f"journal.jsonl task {BAD}: task_finished (seq {{}}) says outcome 'pass', but its last attempt (2) "
              f"ended 'fail'"),
    (RESULT, f"journal.jsonl task {BAD}: attempt_finished 2 says 'pass', but its grading (graded 2"),
    (GRADED, f"journal.jsonl task {BAD}: graded 2 (seq {{}}) says task_pass, but tests_green is False"),
    (GREEN, f"journal.jsonl task {BAD}: graded 2 (seq {{}}) says tests_green, but the oracle exited"),
    (ORACLE, f"journal.jsonl task {BAD}: graded 2 (seq {{}}) says tests_green, but its JUnit verdict is not ok"),
    (NOT_COUNTED, f"journal.jsonl task {BAD}: graded 2 (seq {{}}) says task_pass, but flagged_pass is 'not_counted'"),
    (COUNTED, f"journal.jsonl task {BAD}: graded 2 (seq {{}}) is flagged ['gc_walk'] and green, but says "
              f"flagged_pass 'counted'; under this contract the runner writes 'not_counted'"),
], ids=["outcome", "attempt-result", "grading", "tests-green", "junit-not-ok", "flagged-not-counted",
        "flagged-counted-against-the-contract"])
def test_consistently_rewritten_outcome_is_refused_by_verify_naming_the_task(
        made: Made, tmp_path: Path, cli: Any, edit: Edit, named: str) -> None:
    bundle = forge(copy(made, tmp_path), edit)
    code, _out, err = cli("verify", bundle)
    assert code == 4, err
    events = read_chain(bundle / "journal.jsonl").events
    kind = "task_finished" if edit is OUTCOME else "graded"
    seq = of(events, kind, BAD, None if kind == "task_finished" else 2)["seq"]
    assert named.format(seq) in err, err
    # Nothing else gives it away: sums, chain and every derived file agree with the forgery.
    assert "SHA256SUMS" not in err and "chain" not in err and "derives" not in err


def test_exploit_score_of_a_run_directory_whose_outcomes_were_rewritten_refuses_it(
        made: Made, tmp_path: Path, cli: Any) -> None:
    # The journal alone rewritten and re-chained, the derived files left as they were: score
    # reads a run directory's journal, and printed "2 of 2 task_pass" under a table of fails.
    run = Path(shutil.copytree(made.run_dir, tmp_path / "run"))
    rechain(run / "journal.jsonl", OUTCOME)
    contract = made.bundle / "scoring_contract.json"
    code, out, err = cli("score", contract, run)
    assert code == 4, (out, err)
    assert f"task {BAD}: task_finished" in err and "says outcome 'pass'" in err
    assert "task_pass" not in out


def test_exploit_a_task_s_hidden_test_digest_rewritten_is_refused_by_verify_with_the_pack(
        made: Made, tmp_path: Path, cli: Any) -> None:
    bundle = forge(copy(made, tmp_path), payload("task_started", BAD, hidden_tests_sha256="sha256:" + "0" * 64))
    code, _out, err = cli("verify", bundle)
    assert code == 0, "without the pack, nothing pins a task's hidden tests but the journal"
    pack = made.run_dir.parent / "pack"
    code, _out, err = cli("verify", bundle, "--pack", pack)
    assert code == 4, err
    assert f"task {BAD}: task_started (seq " in err and f"but the pack {pack} seals sha256:" in err


@pytest.mark.parametrize(("edit", "named"), [
    (payload("task_finished", GOOD, elapsed_ms=1), f"journal.jsonl task {GOOD}: task_finished (seq {{}}) says "
                                                   f"elapsed_ms 1, but attempt "),
    (payload("agent_finished", GOOD, 2, elapsed_ms=300_000),
     f"journal.jsonl task {GOOD}: agent_finished 2 (seq {{}}) says the agent ran 300000 ms and did not time out, "
     f"but the task's wall-clock cap is 180 s"),
], ids=["task-time-cut", "agent-past-the-cap"])
def test_exploit_a_time_rewritten_is_refused_by_verify(made: Made, tmp_path: Path, cli: Any, edit: Edit,
                                                       named: str) -> None:
    bundle = forge(copy(made, tmp_path), edit)
    code, _out, err = cli("verify", bundle)
    assert code == 4, err
    events = read_chain(bundle / "journal.jsonl").events
    kind = "task_finished" if "task_finished" in named else "agent_finished"
    seq = of(events, kind, GOOD, None if kind == "task_finished" else 2)["seq"]
    assert named.format(seq) in err, err


def test_report_of_a_consistently_rewritten_bundle_is_refused_with_exit_3(
        made: Made, tmp_path: Path, cli: Any) -> None:
    bundle = forge(copy(made, tmp_path), OUTCOME)
    code, _out, err = cli("report", bundle)
    assert code == 3, err
    assert "does not verify" in err and f"task {BAD}: task_finished" in err and "says outcome 'pass'" in err
    assert not (tmp_path / "bundle-report").exists()


def test_a_whole_invented_story_verifies_unsigned_and_only_the_signature_refuses_it(
        made: Made, tmp_path: Path, cli: Any) -> None:
    bundle = forge(copy(made, tmp_path), WHOLE_STORY)
    code, out, err = cli("verify", bundle)
    assert code == 0, err
    assert "2 of 2 task_pass" in out
    assert "internal consistency only" in out, "an unsigned bundle must say what it proves"
    code, _out, err = cli("verify", bundle, "--pubkey", made.pub)
    assert code == 4 and "SHA256SUMS.sig: missing" in err


def test_a_signed_bundle_checked_with_its_key_does_not_add_the_caveat(made: Made, cli: Any) -> None:
    code, out, err = cli("verify", made.bundle, "--pubkey", made.pub)
    assert code == 0, err
    assert "SHA256SUMS signed by key" in out and "internal consistency only" not in out
    code, out, _ = cli("verify", made.bundle)
    assert "SHA256SUMS.sig present, not checked" in out and "internal consistency only" in out


def _extra_attempt(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # A third attempt of BAD (max_attempts 2), spliced in before its task_finished.
    at = events.index(of(events, "task_finished", BAD))
    copies = [dict(e, attempt=3, payload=dict(e["payload"])) for e in events
              if e["task_id"] == BAD and e["attempt"] == 2]
    return [*events[:at], *copies, *events[at:]]


def _after_finish(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    extra = dict(of(events, "attempt_started", GOOD, 1), attempt=3)
    return [*events, extra]


def _stranger(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*events, dict(of(events, "task_started", GOOD), task_id="t_99_not_locked")]


def _agent_before_start(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    started, agent = of(events, "attempt_started", BAD, 1), of(events, "agent_finished", BAD, 1)
    i, j = events.index(started), events.index(agent)
    events[i], events[j] = agent, started
    return events


@pytest.mark.parametrize(("edit", "named"), [
    (payload("task_finished", BAD, attempts_used=1), "says attempts_used 1, but 2 attempt(s) started"),
    (payload("task_finished", GOOD, first_attempt_passed=True), "says first_attempt_passed True, but attempt 1 "
                                                                "ended 'fail'"),
    (payload("task_finished", BAD, patch_sha256=None), "names patch None, but the last patch captured"),
    (payload("task_started", BAD, max_attempts=5), "says max_attempts 5, where the contract's budget allows 2"),
    (_extra_attempt, "attempt 3 exceeds max_attempts 2"),
    (_after_finish, "comes after the task's task_finished"),
    (_stranger, "task t_99_not_locked: task_started (seq"),
    (_agent_before_start, "agent_finished 1 (seq"),
], ids=["attempts-used", "first-attempt", "patch", "cap-raised", "extra-attempt", "after-finish", "stranger",
        "out-of-order"])
def test_events_out_of_order_or_beside_the_point_are_named(
        made: Made, tmp_path: Path, edit: Edit, named: str) -> None:
    bundle = forge(copy(made, tmp_path), edit)
    with pytest.raises(VerificationFailed) as info:
        verify_bundle(bundle)
    assert any(named in p for p in info.value.problems), info.value.problems


def test_bundle_refuses_a_run_directory_whose_journal_contradicts_itself(made: Made, tmp_path: Path) -> None:
    run = Path(shutil.copytree(made.run_dir, tmp_path / "run"))
    rechain(run / "journal.jsonl", OUTCOME)
    with pytest.raises(VerificationFailed, match=f"task {BAD}: task_finished .* says outcome 'pass'") as info:
        make_bundle(run, tmp_path / "out")
    assert not any("derives" in p for p in info.value.problems), "refused for what it means, before staleness"
    assert not (tmp_path / "out" / "forged").exists()


# --- the rules, on journals written the way the runner writes them ----------------------------


def contract(max_attempts: int = 3) -> ScoringContract:
    return ScoringContract(
        run_id="pure", locked_at="2026-10-12T09:30:00Z", task_ids=["a", "b"],
        controls=Controls(narration_probe=None, oracle_validity="unavailable"),
        access_class=AccessClass(host="here"), agent=AgentSpec(label="x", command="true"),
        budget=Budget(max_attempts=max_attempts, wall_clock_s=60), pack=PackRef(path="p", sha256="sha256:" + "0" * 64))


class Story:
    """Builds a journal event by event, as the runner would write it."""

    def __init__(self, nonce: str | None = "n") -> None:
        self.events: list[dict[str, Any]] = []
        self.add("run_started", payload={"run_nonce": nonce} if nonce else {})

    def add(self, kind: str, task: str | None = None, attempt: int | None = None, **payload: Any) -> Story:
        body = payload.pop("payload", payload)
        self.events.append({"seq": len(self.events), "kind": kind, "task_id": task, "attempt": attempt,
                            "payload": body})
        return self

    def attempt(self, task: str, n: int, result: str) -> Story:
        timed_out, empty = result == "timeout", result == "abstain"
        self.add("attempt_started", task, n)
        self.add("agent_finished", task, n, exit_code=None if timed_out else 0, timed_out=timed_out)
        self.add("patch_captured", task, n, patch_sha256=None if empty else f"sha256:{n:064x}", empty=empty)
        if result in ("pass", "fail"):
            green = result == "pass"
            self.add("graded", task, n, task_pass=green, tests_green=green, patch_applies_clean=True,
                     no_forbidden_path=True, forbidden=[], oracle_timed_out=False,
                     oracle={"exit_code": 0 if green else 1, "timed_out": False})
        return self.add("attempt_finished", task, n, result=result)

    def task(self, task: str, results: list[str], outcome: str | None = None, cap: int = 3) -> Story:
        self.add("task_started", task, max_attempts=cap, wall_clock_s=60.0)
        for n, result in enumerate(results, start=1):
            self.attempt(task, n, result)
        last = results[-1] if results else None
        final = outcome or (last if last not in (None, "fail") or len(results) == cap else "timeout")
        patches = [e for e in self.events if e["kind"] == "patch_captured" and e["task_id"] == task]
        return self.add("task_finished", task, outcome=final, attempts_used=len(results),
                        first_attempt_passed=bool(results) and results[0] == "pass",
                        patch_sha256=patches[-1]["payload"]["patch_sha256"] if patches else None)


@st.composite
def stories(draw: st.DrawFn) -> tuple[int, list[str]]:
    cap = draw(st.integers(1, 4))
    used = draw(st.integers(1, cap))
    last = draw(st.sampled_from(["pass", "fail", "timeout", "abstain"]))
    return cap, ["fail"] * (used - 1) + [last]


@settings(max_examples=300, deadline=None)
@given(stories(), st.sampled_from(["pass", "fail", "abstain", "timeout", "harness_error"]))
def test_a_runner_story_is_consistent_and_any_other_outcome_is_named(
        story: tuple[int, list[str]], other: str) -> None:
    cap, results = story
    honest = Story().task("a", results, cap=cap).task("b", ["pass"], cap=cap)
    assert journal_contradictions(honest.events, contract(cap)) == []
    finished = next(e for e in honest.events if e["kind"] == "task_finished" and e["task_id"] == "a")
    if finished["payload"]["outcome"] == other:
        return
    finished["payload"]["outcome"] = other
    problems = journal_contradictions(honest.events, contract(cap))
    assert problems and all(p.startswith("journal.jsonl task a: task_finished") for p in problems), problems


def test_an_interrupted_attempt_counts_and_resume_continues_it() -> None:
    s = Story().add("task_started", "a", max_attempts=2, wall_clock_s=60.0).add("attempt_started", "a", 1)
    s.add("agent_finished", "a", 1, exit_code=0, timed_out=False)
    s.add("run_resumed", payload={"run_nonce": "n"}).add("attempt_interrupted", "a", 1, charged_s=1.0)
    s.attempt("a", 2, "pass").add("task_finished", "a", outcome="pass", attempts_used=2, first_attempt_passed=False,
                                  patch_sha256="sha256:" + f"{2:064x}")
    s.task("b", ["fail", "fail"], cap=2)
    assert journal_contradictions(s.events, contract(2)) == []


def test_a_crash_on_the_last_attempt_ends_as_fail_or_timeout_after_resume() -> None:
    for outcome in ("fail", "timeout"):
        s = Story().add("task_started", "a", max_attempts=1, wall_clock_s=60.0).add("attempt_started", "a", 1)
        s.add("run_resumed", payload={"run_nonce": "n"}).add("attempt_interrupted", "a", 1, charged_s=60.0)
        s.add("task_finished", "a", outcome=outcome, attempts_used=1, first_attempt_passed=False, patch_sha256=None)
        s.task("b", ["pass"], cap=1)
        assert journal_contradictions(s.events, contract(1)) == [], outcome


@pytest.mark.parametrize(("version", "outcome", "consistent"), [
    (4, "fail", True), (4, "timeout", True), (4, "infra_error", False),
    (5, "infra_error", True), (5, "fail", False), (5, "timeout", False),
])
def test_a_crash_on_the_last_attempt_ends_as_its_version_says(version: int, outcome: str, consistent: bool) -> None:
    # From derivation version 5 an interrupted last attempt is not the agent's end: infra_error.
    # Journals of earlier versions keep their fail or timeout, and may not claim infra_error.
    s = Story()
    s.events[0]["payload"]["derivation_version"] = version
    s.add("task_started", "a", max_attempts=1, wall_clock_s=60.0).add("attempt_started", "a", 1)
    s.add("run_resumed", payload={"run_nonce": "n"}).add("attempt_interrupted", "a", 1, charged_s=60.0)
    s.add("task_finished", "a", outcome=outcome, attempts_used=1, first_attempt_passed=False, patch_sha256=None)
    s.task("b", ["pass"], cap=1)
    problems = journal_contradictions(s.events, contract(1))
    assert problems == [] if consistent else any(f"says outcome {outcome!r}" in p for p in problems), problems


def test_a_version_5_task_whose_last_attempt_ended_is_never_an_infrastructure_error() -> None:
    s = Story()
    s.events[0]["payload"]["derivation_version"] = 5
    s.task("a", ["fail"], outcome="infra_error", cap=1).task("b", ["pass"], cap=1)
    problems = journal_contradictions(s.events, contract(1))
    assert any("says outcome 'infra_error', but its last attempt (1) ended 'fail'" in p for p in problems), problems


@pytest.mark.parametrize(("build", "named"), [
    (lambda s: s.add("attempt_started", "a", 1).add("run_resumed", payload={"run_nonce": "other"}),
     "run_resumed (seq 3): run_nonce 'other' differs from the run_started event's 'n'"),
    (lambda s: s.add("run_started", payload={"run_nonce": "n"}), "a second run_started"),
    (lambda s: s.attempt("a", 1, "fail").add("attempt_interrupted", "a", 1), "for an attempt that had ended"),
    (lambda s: s.attempt("a", 1, "pass").add("feedback", "a", 1), "feedback 1 (seq 7): feedback follows a failed"),
    (lambda s: s.attempt("a", 1, "fail").add("harness_error", "a", 1).add(
        "task_finished", "a", outcome="fail", attempts_used=1, first_attempt_passed=False,
        patch_sha256="sha256:" + f"{1:064x}"), "a harness error stays a harness error"),
    (lambda s: s.add("attempt_started", "a", 2), "attempt_started 2 (seq 2) where attempt 1 was next"),
    (lambda s: s.add("attempt_started", "a", 1).add("attempt_started", "a", 2),
     "attempt_started 2 (seq 3) while attempt 1 was still open"),
    (lambda s: s.add("attempt_started", "a", 1).add("agent_finished", "a", 1, exit_code=0, timed_out=True).add(
        "patch_captured", "a", 1, empty=False).add("attempt_finished", "a", 1, result="fail"),
     "the result of a timed-out attempt is timeout"),
    (lambda s: s.add("attempt_started", "a", 1).add("agent_finished", "a", 1, exit_code=0, timed_out=False).add(
        "patch_captured", "a", 1, empty=True, patch_sha256=None).add(
        "graded", "a", 1, task_pass=True, tests_green=True, patch_applies_clean=True, no_forbidden_path=True,
        oracle={"exit_code": 0, "timed_out": False}).add("attempt_finished", "a", 1, result="pass"),
     "an abstain, which is never graded"),
    (lambda s: s.add("attempt_started", "a", 1).add("agent_finished", "a", 1, exit_code=1, timed_out=False).add(
        "patch_captured", "a", 1, empty=True).add("attempt_finished", "a", 1, result="abstain"),
     "says abstain, but the agent exited 1"),
    (lambda s: s.add("attempt_started", "a", 1).add("agent_finished", "a", 1, exit_code=0, timed_out=False).add(
        "attempt_finished", "a", 1, result="timeout"), "attempt_finished 1 (seq 4) before the attempt's patch_captured"),
    (lambda s: s.add("heartbeat", "a", 4), "heartbeat 4 (seq 2) names attempt 4, which never started"),
    (lambda s: s.add("attempt_started", "a", 1).add("agent_finished", "a", 1, exit_code=0, timed_out=False).add(
        "patch_captured", "a", 1, empty=False, rejected="the workspace holds a fifo").add(
        "graded", "a", 1, task_pass=True, tests_green=True, patch_applies_clean=True, no_forbidden_path=True,
        oracle={"exit_code": 0, "timed_out": False}).add("attempt_finished", "a", 1, result="pass"),
     "the result of a refused workspace is fail"),
    (lambda s: s.add("attempt_started", "a", 1).add("agent_finished", "a", 1, exit_code=1, timed_out=False).add(
        "patch_captured", "a", 1, empty=False).add("attempt_finished", "a", 1, result="fail"),
     "says fail, but the attempt was never graded and its workspace was not refused"),
], ids=["nonce", "second-start", "interrupt-after-end", "feedback-after-pass", "harness-error", "numbering",
        "overlap", "timeout", "abstain-graded", "abstain-exit", "order", "unknown-kind", "refused-passed",
        "fail-ungraded"])
def test_each_rule_names_the_task_and_the_events(build: Callable[[Story], Story], named: str) -> None:
    s = build(Story().add("task_started", "a", max_attempts=3, wall_clock_s=60.0))
    problems = journal_contradictions(s.events, contract())
    assert any(named in p for p in problems), problems


@pytest.mark.parametrize("probe", [False, True], ids=["run", "probe"])
def test_a_workspace_the_capture_refused_is_a_fail_never_graded(probe: bool) -> None:
    # What the runner writes for a workspace too deep, holding a fifo, or over a cap: the
    # narration probe too writes fail, not probe_fail, for it.
    s = Story().add("task_started", "a", max_attempts=1, wall_clock_s=60.0).add("attempt_started", "a", 1)
    s.add("agent_finished", "a", 1, exit_code=0, timed_out=False)
    s.add("patch_captured", "a", 1, empty=True, patch_sha256=None, rejected="the workspace holds a fifo at 'p'")
    s.add("attempt_finished", "a", 1, result="fail")
    s.add("task_finished", "a", outcome="fail", attempts_used=1, first_attempt_passed=False, patch_sha256=None)
    s.task("b", ["probe_fail" if probe else "pass"], outcome="fail" if probe else "pass", cap=1)
    assert journal_contradictions(s.events, contract(1), probe=probe) == []


def test_a_journal_without_nonces_is_not_faulted_and_an_unknown_field_is_named() -> None:
    def story(**heartbeat: Any) -> Story:
        s = Story(nonce=None).add("task_started", "a", max_attempts=3, wall_clock_s=60.0)
        s.add("attempt_started", "a", 1).add("heartbeat", "a", 1, **heartbeat)
        s.add("run_resumed", payload={}).add("attempt_interrupted", "a", 1, charged_s=2.0)
        s.attempt("a", 2, "abstain").add("task_finished", "a", outcome="abstain", attempts_used=2,
                                         first_attempt_passed=False, patch_sha256=None)
        return s.task("b", ["timeout"])

    assert journal_contradictions(story().events, contract()) == []
    # Unknown kinds and fields are refused on read (sealbench.events), here as everywhere.
    assert journal_contradictions(story(at_ms=500).events, contract()) == [
        "journal.jsonl seq 3: payload field 'at_ms' is not one a heartbeat event has (unknown field)"]


def test_hostile_journal_values_never_raise() -> None:
    events: list[Any] = [None, 3, {"kind": "run_started"}, {"kind": "task_finished", "task_id": 7},
                         {"kind": "attempt_started", "task_id": "a", "attempt": True, "payload": []},
                         {"kind": "task_finished", "task_id": "a", "payload": {"outcome": ["pass"]}},
                         {"kind": "graded", "task_id": "b", "attempt": "1", "payload": None}]
    assert journal_contradictions(events, contract())


def test_a_real_run_with_visible_test_feedback_tells_a_consistent_story(raw_pack: Path, tmp_path: Path) -> None:
    record = json.loads((raw_pack / "tasks" / GOOD / "task.json").read_text())
    record["visible_test_cmd"] = ["python", "-c", "print('1 visible test failed')"]
    (raw_pack / "tasks" / GOOD / "task.json").write_text(json.dumps(record))
    seal_pack(raw_pack)
    c = tmp_path / "c.json"
    make_contract(raw_pack, c, task_ids=(GOOD,), command=AGENT, run_id="feedback", max_attempts=2,
                  feedback="visible_tests", narration_probe=False)
    execute(c, tmp_path / "run", RunOptions(progress=False))
    events = read_chain(tmp_path / "run" / "journal.jsonl").events
    assert [(e["kind"], e["attempt"]) for e in events if e["kind"] == "feedback"] == [("feedback", 1)]
    assert verify_bundle(make_bundle(tmp_path / "run", tmp_path / "out")).rate.task_pass_count == 1


# ---------------------------------------------------------------- the pure rules, as tables


@pytest.mark.parametrize(("probe", "refused", "allowed"), [
    (False, False, {"pass", "fail", "timeout", "abstain"}),
    (False, True, {"pass", "fail", "timeout", "abstain"}),  # the result checks then say fail
    (True, False, {"probe_pass", "probe_fail", "timeout"}),
    (True, True, {"probe_pass", "probe_fail", "timeout", "fail"}),  # a refused workspace fails the probe too
], ids=["run", "run-refused", "probe", "probe-refused"])
def test_the_results_the_runner_may_write_depend_on_the_probe_and_the_capture(
        probe: bool, refused: bool, allowed: set[str]) -> None:
    from sealbench.consistency import _allowed_results

    assert set(_allowed_results(probe, refused)) == allowed


@pytest.mark.parametrize(("task_pass", "oracle_timed_out", "result", "why"), [
    (True, False, "pass", "task_pass"),
    (True, True, "pass", "task_pass"),  # a pass is a pass, whatever the oracle's clock said
    (False, True, "timeout", "the oracle timed out"),
    (False, False, "fail", "task_pass is false"),
], ids=["pass", "pass-despite-timeout", "oracle-timeout", "fail"])
def test_a_graded_attempt_s_result_is_its_grading_s(task_pass: bool, oracle_timed_out: bool, result: str,
                                                    why: str) -> None:
    from sealbench.consistency import _graded_result

    assert _graded_result(task_pass, oracle_timed_out) == (result, why)
