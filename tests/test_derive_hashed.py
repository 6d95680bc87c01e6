"""verify hashes scorecards.jsonl, events.json and commands.txt as they are made instead of
holding them (derive.derive_hashed, CommandNotes.pieces), and score keeps a compact record per
task (score.Tally): each must make exactly the bytes and the verdicts of the whole-file way,
whatever order the tasks finish in."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealbench import events
from sealbench.bundle import text_lines, verify_bundle
from sealbench.derive import (
    CommandNotes,
    FinishedTwice,
    Made,
    commands_bytes,
    derive_hashed,
    derive_iter,
    indented,
)
from sealbench.digest import sha256_bytes
from sealbench.errors import ScoreRefusal
from sealbench.formats import SeedEvent
from sealbench.journal import ChainScan, Journal, scan_chain
from sealbench.score import Tally, _Entry, _in_order, score

FIXTURES = Path(__file__).parent / "fixtures" / "bundles"
HIDDEN = sha256_bytes(b"hidden tests")


def typed(path: Path) -> list[events.Line]:
    return [line for _, line in scan_chain(path, ChainScan(), canonical=True) if line is not None]


PATCH = b"--- a/mod.py\n+++ b/mod.py\n@@ -1 +1 @@\n-VALUE = 0\n+VALUE = 1\n"


def task_lines(tid: str, passed: bool, cmd: Any = ("python", "check.py")) -> list[events.Event]:
    """A task's seven lines, as the runner writes them."""
    outcome = "pass" if passed else "fail"
    return [
        events.TaskStarted(task_id=tid, max_attempts=1, wall_clock_s=60, prompt_template_id="t",
                           hidden_tests_sha256=HIDDEN, oracle_cmd=list(cmd) if cmd is not None else None),
        events.AttemptStarted(task_id=tid, attempt=1, budget_s=60),
        events.AgentFinished(task_id=tid, attempt=1, exit_code=0, timed_out=False, elapsed_ms=5),
        events.PatchCaptured(task_id=tid, attempt=1, patch_sha256=sha256_bytes(PATCH), empty=False,
                             changed=["mod.py"], changed_count=1),
        events.Graded(task_id=tid, attempt=1, patch_applies_clean=True, forbidden=[], no_forbidden_path=True,
                      tests_green=passed, oracle=events.ProcessFacts(exit_code=0 if passed else 1, timed_out=False),
                      oracle_timed_out=False, task_pass=passed),
        events.AttemptFinished(task_id=tid, attempt=1, result=outcome, elapsed_ms=10),
        events.TaskFinished(task_id=tid, outcome=outcome, attempts_used=1, elapsed_ms=12,
                            first_attempt_passed=passed, patch_sha256=sha256_bytes(PATCH)),
    ]


LAST = len(task_lines("t", True)) - 1


def journal_of(path: Path, order: list[tuple[str, int]], cmds: dict[str, Any] | None = None) -> Path:
    """A journal whose tasks' lines come in ``order`` ((task, index of its line) pairs)."""
    made: dict[str, list[events.Event]] = {}
    journal = Journal.create(path, fsync=False)
    for tid, i in order:
        lines = made.setdefault(tid, task_lines(tid, hash(tid) % 3 == 0, (cmds or {}).get(tid, ("python", "c.py"))))
        journal.append(lines[i])
    journal.close()
    return path


def interleaved(ids: list[str], seed: int, *, unfinished: frozenset[str] = frozenset()) -> list[tuple[str, int]]:
    """Each task's lines in order, the tasks' lines shuffled among each other."""
    rng = random.Random(seed)
    left = {tid: 0 for tid in ids}
    order = []
    while left:
        tid = rng.choice(sorted(left))
        order.append((tid, left[tid]))
        left[tid] += 1
        if left[tid] == (LAST if tid in unfinished else LAST + 1):
            del left[tid]
    return order


def assert_same_files(lines: list[events.Line], ids: list[str]) -> None:
    whole_seeds: list[dict[str, Any]] = []
    whole = dict(derive_iter(lines, ids, (), None, whole_seeds))
    seen: list[dict[str, Any]] = []
    hashed = dict(derive_hashed(lines, ids, (), seen.append))
    assert set(hashed) == set(whole)
    for rel, data in hashed.items():
        if isinstance(data, Made):
            assert data == Made(hashlib.sha256(whole[rel]).hexdigest(), len(whole[rel])), rel
        else:
            assert data == whole[rel], rel
    assert seen == whole_seeds


@pytest.mark.parametrize("bundle", sorted(p for p in FIXTURES.glob("made-by-*/*") if p.is_dir()), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_hashed_files_are_the_whole_files_of_every_fixture_bundle(bundle: Path) -> None:
    ids = json.loads((bundle / "scoring_contract.json").read_text())["task_ids"]
    assert_same_files(typed(bundle / "journal.jsonl"), ids)


@pytest.mark.parametrize("seed", range(6))
def test_hashed_files_are_the_whole_files_whatever_order_tasks_finish_in(tmp_path: Path, seed: int) -> None:
    ids = [f"task-{i}" for i in range(12)]
    unfinished = frozenset({ids[seed % 12]}) if seed % 2 else frozenset()
    # A task outside the contract's ids is ignored by both.
    path = journal_of(tmp_path / "journal.jsonl", interleaved([*ids, "stranger"], seed, unfinished=unfinished))
    assert_same_files(typed(path), ids)


def test_no_task_finished_gives_the_files_of_none(tmp_path: Path) -> None:
    ids = ["a", "b"]
    path = journal_of(tmp_path / "journal.jsonl", [("a", 0), ("b", 0)])
    assert_same_files(typed(path), ids)
    assert_same_files([], ids)


def test_a_task_that_finishes_again_after_its_line_was_hashed_is_named(tmp_path: Path) -> None:
    path = journal_of(tmp_path / "journal.jsonl", [("a", i) for i in range(LAST + 1)] + [("a", LAST - 1), ("a", LAST)])
    with pytest.raises(FinishedTwice):
        dict(derive_hashed(typed(path), ["a"], ()))


def test_commands_in_pieces_are_commands_whole(tmp_path: Path) -> None:
    ids = ["plain", "quoted", "none", "empty", "never"]
    cmds = {"plain": ("python", "c.py"), "quoted": ("sh", "-c", "echo 'a b' $X"), "none": None, "empty": ()}
    path = journal_of(tmp_path / "journal.jsonl", [(t, i) for t in ids[:4] for i in range(LAST + 1)], cmds)
    lines = typed(path)
    notes = CommandNotes(ids)
    for line in lines:
        notes.feed("journal.jsonl", line)
    text = b"".join(notes.pieces(ids))
    assert text == commands_bytes(lines, None, ids) == notes.text(ids)
    assert text.decode() == (
        "# Commands recorded in this bundle's journals, verbatim (argv, shell-quoted).\n"
        "# oracle_cmd of plain, run in its grading copy (journal.jsonl seq 0 (task_started)):\n"
        "python c.py\n"
        "# oracle_cmd of quoted, run in its grading copy (journal.jsonl seq 7 (task_started)):\n"
        "sh -c 'echo '\"'\"'a b'\"'\"' $X'\n"
        "# oracle_cmd of none: not recorded in journal.jsonl\n"
        "# oracle_cmd of empty: not recorded in journal.jsonl\n"
        "# oracle_cmd of never: not recorded in journal.jsonl\n")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["a", "é", "\n", "\r", "\r\n", "\x85", "\u2028", "\x0b", "\x1c", "  "]),
                max_size=30).map("".join))
def test_sums_lines_are_cut_as_splitlines_cuts_them(text: str) -> None:
    assert list(text_lines(text.encode())) == text.splitlines()


def test_the_compact_record_keeps_every_field_of_a_seed_event() -> None:
    assert _Entry._fields == tuple(SeedEvent.model_fields)


seed_events = st.builds(
    SeedEvent, task_id=st.sampled_from(["a", "b", "c", "d"]), task_pass=st.booleans(), abstain=st.booleans(),
    wall_seconds=st.none() | st.floats(0, 10), excluded_after_lock=st.booleans(),
    outcome=st.none() | st.sampled_from(["pass", "fail", "abstain", "timeout", "harness_error"]),
    attempts_used=st.none() | st.integers(1, 3))


@settings(max_examples=300, deadline=None)
@given(st.lists(seed_events, max_size=7), st.randoms())
def test_a_tally_reads_events_in_the_order_sorting_the_models_gave(evs: list[SeedEvent], rng: random.Random) -> None:
    # Every refusal is the first the checks meet in this order: it must not change.
    shuffled = list(evs)
    rng.shuffle(shuffled)
    then = [_Entry.of(e) for e in sorted(evs, key=lambda e: (e.task_id, e.model_dump_json()))]
    assert _in_order(Tally(shuffled).entries) == then


def test_a_tally_scores_as_the_models_do(seed_contract: tuple[Path, Any]) -> None:
    _, contract = seed_contract
    evs = [SeedEvent(task_id=t, task_pass=i % 2 == 0, outcome="pass" if i % 2 == 0 else "fail")
           for i, t in enumerate(contract.task_ids)]
    tally = Tally()
    for e in reversed(evs):
        tally.add(e)
    assert score(contract, tally) == score(contract, evs)
    with pytest.raises(ScoreRefusal, match="two events for task"):
        score(contract, Tally([*evs, evs[0]]))


def test_a_bundle_whose_tasks_finished_in_reverse_order_verifies(tmp_path: Path) -> None:
    """The first task of the contract finished last: every other task's line waits for it."""
    from sealbench.bundle import make_bundle
    from sealbench.contract import lock_contract
    from sealbench.files import model_json, write_atomic
    from sealbench.formats import AccessClass, AgentSpec, Budget, Controls, PackRef, ScoringContract

    ids = [f"task-{i}" for i in range(6)]
    contract = lock_contract(ScoringContract(
        task_ids=ids, controls=Controls(narration_probe=None, oracle_validity="unavailable"),
        access_class=AccessClass(host="test machine"), agent=AgentSpec(label="synthetic", command="true"),
        budget=Budget(max_attempts=1, wall_clock_s=60), forbidden_paths=["conftest.py"],
        pack=PackRef(path="pack", sha256=sha256_bytes(b"pack")),
    ), "reverse", datetime.now(UTC))
    run_dir = tmp_path / "run"
    (run_dir / "blobs").mkdir(parents=True)
    (run_dir / "blobs" / sha256_bytes(PATCH).removeprefix("sha256:")).write_bytes(PATCH)
    write_atomic(run_dir / "scoring_contract.json", model_json(contract))
    journal = Journal.create(run_dir / "journal.jsonl", fsync=False)
    journal.append(events.RunStarted(contract_sha256=contract.contract_sha256, run_id=contract.run_id,
                                     pack_sha256=sha256_bytes(b"pack"), argv=None, probe=False,
                                     sandbox={"kind": "bubblewrap"}))
    for tid in reversed(ids):
        for event in task_lines(tid, tid.endswith(("0", "3"))):
            journal.append(event)
    journal.append(events.RunFinished())
    journal.close()
    report = verify_bundle(make_bundle(run_dir, tmp_path / "out"))
    assert [c.task_id for c in report.scorecards] == ids
    assert report.rate.task_pass_count == 2


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(), scalars | st.lists(scalars, max_size=2) | st.dictionaries(st.text(), scalars, max_size=2),
                       max_size=6))
def test_an_entry_is_laid_out_as_json_dumps_with_an_indent_lays_it_out(entry: dict[str, Any]) -> None:
    assert indented(entry) == json.dumps(entry, indent=2, ensure_ascii=False)
