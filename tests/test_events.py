"""The journal's vocabulary: typed events that read every journal ever written and write the
bytes the journal always held."""

from __future__ import annotations

import ast
import json
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLE, make_contract, needs_bwrap
from sealbench import events
from sealbench.bundle import sums_bytes, verify_bundle
from sealbench.cli import main
from sealbench.digest import canonical_json
from sealbench.errors import VerificationFailed
from sealbench.journal import event_hash
from sealbench.outcomes import SHOWN_OUTCOMES, AttemptResult, Outcome, TaskState
from sealbench.pack import seal_pack

PACKAGE = Path(events.__file__).parent
FIXTURES = Path(__file__).parent / "fixtures"


def _strings(path: Path) -> list[tuple[int, str]]:
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


# Words that are also event kinds but name something else where they are spelled: an outcome
# (outcomes.Outcome.HARNESS_ERROR), the budget's feedback policy and the prompt's {feedback}.
HOMONYMS = {events.HARNESS_ERROR, events.FEEDBACK}


def test_no_event_kind_or_payload_key_is_spelled_outside_the_events_module() -> None:
    spelled = (events.KINDS - HOMONYMS) | {events.PAYLOAD}
    found = [f"{path.relative_to(PACKAGE)}:{lineno}: {text!r}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "events.py"
             for lineno, text in _strings(path) if text in spelled]
    assert found == []


# The closed words of outcomes.py. Where one is spelled by hand it names something else: each
# such place, with what it names.
OUTCOME_WORDS = {str(w) for vocabulary in (Outcome, AttemptResult, TaskState) for w in vocabulary}
OUTCOME_HOMONYMS = {
    ("derive.py", "probe_pass"): "a field of narration_probe.json, whose bytes are derived",
    ("events.py", "harness_error"): "the event kind, beside the outcome of the same name",
    ("function_oracle.py", "pass"): "the sealed oracle's own summary line, read in the sandbox",
    ("function_oracle.py", "fail"): "the sealed oracle's own summary line, read in the sandbox",
    ("demo.py", "abstain"): "the field of an events.json entry",
    ("show.py", "interrupted"): "the key of an attempt's attempt_interrupted line in show --json",
    ("refusal_catalogue.py", "pass"): "the verb that starts a way out (\"pass --force\")",
    ("task_pages.py", "interrupted"): "the key of an attempt's attempt_interrupted line in a task page",
}


def test_no_outcome_word_is_spelled_outside_the_outcomes_module() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{lineno}: {text!r}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "outcomes.py"
             for lineno, text in _strings(path)
             if text in OUTCOME_WORDS and (str(path.relative_to(PACKAGE)), text) not in OUTCOME_HOMONYMS]
    assert found == []


def test_each_outcome_word_means_one_thing_wherever_two_vocabularies_share_it() -> None:
    # An attempt's result that is also a task's outcome is the same word, so a result ends a task as itself.
    shared = {str(w) for w in AttemptResult} & {str(w) for w in Outcome}
    assert shared == {"pass", "fail", "abstain", "timeout"}
    assert not {str(w) for w in TaskState} & ({str(w) for w in Outcome} | {str(w) for w in AttemptResult})
    assert (*(str(o) for o in Outcome), "unfinished") == SHOWN_OUTCOMES
    assert all(type(o) is str for o in SHOWN_OUTCOMES)  # argparse names its choices by repr


def _journals() -> list[Path]:
    return sorted(FIXTURES.rglob("journal.jsonl"))


@pytest.mark.parametrize("journal", _journals(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_line_of_every_committed_journal_reads_and_writes_back_its_bytes(journal: Path) -> None:
    for lineno, raw in enumerate(journal.read_bytes().splitlines(), start=1):
        line = json.loads(raw)
        event = events.parse(line, f"line {lineno}")
        assert canonical_json(event.payload()) == canonical_json(line[events.PAYLOAD])
        rebuilt = {**line, events.KIND: event.kind, events.TASK_ID: event.task_id, events.ATTEMPT: event.attempt,
                   events.PAYLOAD: event.payload()}
        assert canonical_json(rebuilt) == raw and event_hash(rebuilt) == line["hash"]


def test_the_blob_fields_are_those_the_bundles_have_always_copied() -> None:
    assert dict(events.BLOB_FIELDS) == {
        # Each kept file of the agent's trace folder (derivation version 3 on).
        events.AGENT_FINISHED: (("stdout",), ("stderr",), ("transcript_files[]", "blob")),
        # The sandboxed install of a repository task's grading copy (a new field, absent from
        # older journals, so their bundles copy what they always did).
        events.GRADED: (("oracle", "stdout"), ("oracle", "stderr"), ("repo_install", "stdout"),
                        ("repo_install", "stderr")),
        events.FEEDBACK: (("visible_tests", "stdout"), ("visible_tests", "stderr")),
        events.PATCH_CAPTURED: (("patch_sha256",),),
        events.TASK_FINISHED: (("patch_sha256",),),
        # The model gateway's calls (new kind): their bodies travel with the bundle.
        events.MODEL_CALL: (("request",), ("response",)),
        # A call journaled before it is forwarded (derivation version 5 on): its request.
        events.MODEL_CALL_STARTED: (("request",),),
    }


def test_an_agents_free_form_action_is_never_a_blob() -> None:
    digest = "sha256:" + "a" * 64
    event = events.AgentFinished(task_id="t", attempt=1, action={"stdout": digest}, stdout=digest)
    assert list(events.blob_fields(event)) == [("stdout", digest)]


def test_a_payload_holds_only_the_fields_the_writer_set_with_the_values_it_gave() -> None:
    event = events.TaskFinished(task_id="t", outcome="pass", attempts_used=1, elapsed_ms=3,
                                first_attempt_passed=True, patch_sha256=None)
    assert event.payload() == {"outcome": "pass", "attempts_used": 1, "elapsed_ms": 3,
                               "first_attempt_passed": True, "patch_sha256": None}
    assert type(events.TaskStarted(wall_clock_s=5).payload()["wall_clock_s"]) is int


@pytest.mark.parametrize(("raw", "named"), [
    ({"kind": "flaky", "payload": {}}, "kind 'flaky' is not an event kind this release knows"),
    ({"kind": "heartbeat", "payload": {"at_ms": 3}}, "payload field 'at_ms' is not one a heartbeat event has"),
    ({"kind": "graded", "payload": {"oracle": {"exit_code": 0, "core": True}}},
     "payload field 'oracle.core' is not one a graded event has"),
    ({"kind": "task_finished", "payload": {"task_id": "b"}}, "payload field 'task_id' is not one a task_finished"),
    ({"kind": "attempt_started", "attempt": True, "payload": {}}, "attempt: Input should be a valid integer"),
    ({"kind": "run_started", "payload": []}, "payload is not a JSON object"),
], ids=["kind", "field", "nested-field", "envelope-key-in-payload", "bool-attempt", "payload-type"])
def test_what_is_not_an_event_is_refused_naming_its_line(raw: dict[str, object], named: str) -> None:
    with pytest.raises(events.EventError) as caught:
        events.parse(raw, "journal.jsonl line 7")
    assert str(caught.value).startswith("journal.jsonl line 7: ") and named in str(caught.value)


# --- a real run, in the real sandbox, through the CLI -----------------------------------------

GOOD, BAD = "t_11_fix_off_by_one", "t_03_rename_helper"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"
# Attempt 1 of every task writes a wrong window.py; attempt 2 fixes t_11 and repeats the wrong
# file for t_03: a fail, visible-test feedback, a pass and a task that fails twice, all graded.
AGENT = "sh -c " + shlex.quote(
    'if [ "$SEALBENCH_ATTEMPT" = 2 ] && [ "$SEALBENCH_TASK_ID" = t_11_fix_off_by_one ]; '
    f"then printf {shlex.quote(FIX)} > window.py; else echo 'def last_n(i, n): return []' > window.py; fi")


@dataclass(frozen=True)
class Made:
    contract: Path
    run_dir: Path
    bundle: Path


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    work = tmp_path_factory.mktemp("events")
    pack = Path(shutil.copytree(SAMPLE, work / "pack"))
    for tid in (GOOD, BAD):
        record = json.loads((pack / "tasks" / tid / "task.json").read_text())
        record["visible_test_cmd"] = ["python", "-c", "print('1 visible test failed')"]
        (pack / "tasks" / tid / "task.json").write_text(json.dumps(record))
    seal_pack(pack)
    contract = work / "c.json"
    make_contract(pack, contract, task_ids=(GOOD, BAD), command=AGENT, run_id="typed-events", max_attempts=2,
                  feedback="visible_tests")
    run_dir = work / "run"
    for command in ("run", "probe"):
        assert main([command, str(contract), "--out", str(run_dir), "--no-progress"]) == 0
    assert main(["bundle", str(run_dir), "--out", str(work / "out")]) == 0
    return Made(contract, run_dir, work / "out" / "typed-events")


@needs_bwrap
def test_every_line_a_real_run_writes_round_trips_through_the_models_to_its_bytes(made: Made) -> None:
    kinds: set[str] = set()
    for journal in (made.run_dir / "journal.jsonl", made.run_dir / "probe" / "journal.jsonl"):
        for lineno, raw in enumerate(journal.read_bytes().splitlines(), start=1):
            line = json.loads(raw)
            event = events.parse(line, f"{journal.name} line {lineno}")
            kinds.add(event.kind)
            rebuilt = {**line, events.KIND: event.kind, events.TASK_ID: event.task_id,
                       events.ATTEMPT: event.attempt, events.PAYLOAD: event.payload()}
            assert canonical_json(rebuilt) == raw, f"{journal} line {lineno}"
            assert event_hash(rebuilt) == line["hash"]
    assert {events.RUN_STARTED, events.TASK_STARTED, events.ATTEMPT_STARTED, events.AGENT_FINISHED,
            events.PATCH_CAPTURED, events.GRADED, events.FEEDBACK, events.ATTEMPT_FINISHED,
            events.TASK_FINISHED, events.RUN_FINISHED} <= kinds


def _forge(journal: Path, edit: Callable[[list[dict[str, Any]]], None]) -> int:
    """Edit a journal's events and recompute every seq, prev and hash (anyone can); returns
    the line number of the first line the edit touched or added."""
    lines = [json.loads(raw) for raw in journal.read_bytes().splitlines()]
    before = json.loads(json.dumps(lines))
    edit(lines)
    prev = None
    for seq, line in enumerate(lines):
        line.update(seq=seq, prev=prev)
        line["hash"] = event_hash(line)
        prev = line["hash"]
    journal.write_bytes(b"".join(canonical_json(e) + b"\n" for e in lines))
    changed = [n for n, e in enumerate(lines, start=1) if n > len(before) or {**e, "prev": None, "hash": None,
               "seq": None} != {**before[n - 1], "prev": None, "hash": None, "seq": None}]
    return changed[0]


def _refused_everywhere(made: Made, tmp_path: Path, edit: Callable[[list[dict[str, Any]]], None],
                        named: str) -> None:
    """verify names the forged line (exit 4) and a resume of the forged run refuses it (exit 4)."""
    bundle = Path(shutil.copytree(made.bundle, tmp_path / "bundle"))
    lineno = _forge(bundle / "journal.jsonl", edit)
    files = {p.relative_to(bundle).as_posix(): p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    (bundle / "SHA256SUMS").write_bytes(sums_bytes(files))
    with pytest.raises(VerificationFailed) as caught:
        verify_bundle(bundle)
    assert any(p.startswith(f"journal.jsonl line {lineno}: ") and named in p for p in caught.value.problems), \
        caught.value.problems
    run_dir = Path(shutil.copytree(made.run_dir, tmp_path / "run"))
    assert _forge(run_dir / "journal.jsonl", edit) == lineno
    journal = (run_dir / "journal.jsonl").read_bytes()
    code = main(["run", str(made.contract), "--resume", str(run_dir), "--no-progress"])
    assert code == 4
    assert (run_dir / "journal.jsonl").read_bytes() == journal, "a refused resume writes nothing"


@needs_bwrap
def test_forged_line_of_an_unknown_kind_is_named_by_verify_and_refused_by_resume(
        made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        # A kind this release never wrote, slipped in before a task's end (a "retry granted").
        at = next(n for n, e in enumerate(lines) if e["kind"] == "task_finished")
        lines.insert(at, {**lines[at], "kind": "flaky", "payload": {"retry_granted": True}})

    _refused_everywhere(made, tmp_path, edit, "kind 'flaky' is not an event kind this release knows")
    assert "kind 'flaky' is not an event kind this release knows" in capsys.readouterr().err


@needs_bwrap
def test_forged_payload_field_unknown_to_its_kind_is_named_by_verify_and_refused_by_resume(
        made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        finished = next(e for e in lines if e["kind"] == "task_finished" and e["task_id"] == BAD)
        finished["payload"]["counted_as_pass"] = True

    named = "payload field 'counted_as_pass' is not one a task_finished event has (unknown field)"
    _refused_everywhere(made, tmp_path, edit, named)
    assert named in capsys.readouterr().err


def test_the_schema_command_prints_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "journal-events"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert set(schema["discriminator"]["mapping"]) == events.KINDS
