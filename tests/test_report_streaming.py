"""The report reads a large run without holding it (issue: a 100,000-task bundle reported within
the verify's memory): each task's story is told as soon as it finishes (stories.Teller, report
.Reading), the task table's rows are made as they are written, and report.md and report.html
are written in pieces. Each must give exactly what the whole-run way gave."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sealbench import events
from sealbench.document import _ending_in_one_newline, _joined
from sealbench.journal import ChainScan, Journal, scan_chain
from sealbench.report import read_journal
from sealbench.show import cause
from sealbench.stories import TaskStory, Teller, stories
from test_derive_hashed import interleaved, task_lines


def typed(path: Path) -> list[events.Line]:
    return [line for _, line in scan_chain(path, ChainScan()) if line is not None]


def journal(path: Path, ids: list[str], seed: int, *, unfinished: frozenset[str] = frozenset(),
            after: dict[str, list[events.Event]] | None = None) -> Path:
    """Tasks interleaved as a parallel run writes them; ``after`` adds lines to a task once
    every task has finished (a line the runner never writes after task_finished)."""
    made: dict[str, list[events.Event]] = {}
    j = Journal.create(path, fsync=False)
    j.append(events.RunStarted(run_id="r", argv=None, probe=False))
    for tid, i in interleaved(ids, seed, unfinished=unfinished):
        j.append(made.setdefault(tid, task_lines(tid, hash(tid) % 2 == 0))[i])
    for extra in (after or {}).values():
        for e in extra:
            j.append(e)
    j.close()
    return path


def told_by_teller(lines: list[events.Line], ids: list[str]) -> tuple[list[TaskStory], set[str]]:
    teller = Teller(ids)
    out = [s for line in lines if (s := teller.add(line)) is not None]
    return out + list(teller.rest()), teller.late


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 8), cut=st.integers(0, 8))
def test_the_teller_tells_every_story_once_as_whole_as_the_book(seed: int, n: int, cut: int) -> None:
    ids = [f"t{i}" for i in range(n)]
    unfinished = frozenset(ids[:cut % (n + 1)])
    with tempfile.TemporaryDirectory() as tmp:
        lines = typed(journal(Path(tmp) / "j.jsonl", ids, seed, unfinished=unfinished))
    whole = stories(lines, ids)
    told, late = told_by_teller(lines, ids)
    assert not late
    assert sorted(s.task_id for s in told) == sorted(whole)
    assert {s.task_id: s for s in told} == whole
    # The unfinished are told last, in the denominator's order.
    assert [s.task_id for s in told if s.finished is None] == [t for t in ids if t in unfinished]


def test_a_line_after_its_task_finished_is_told_again_from_a_second_read(tmp_path: Path) -> None:
    ids = ["a", "b", "c"]
    late_error = events.HarnessFailed(task_id="b", attempt=1, error="a late harness error")
    path = journal(tmp_path / "j.jsonl", ids, 7, after={"b": [late_error]})
    lines = typed(path)
    told, late = told_by_teller(lines, ids)
    assert late == {"b"}
    whole = stories(lines, ids)
    assert whole["b"].attempts[1].errors and not {s.task_id: s for s in told}["b"].attempts[1].errors

    pages: dict[str, list[TaskStory]] = {}
    read = read_journal(path, ids, lambda s: pages.setdefault(s.task_id, []).append(s))
    # b's page is written twice, the second time whole; every why is the whole story's.
    assert [len(pages[t]) for t in ids] == [1, 2, 1]
    assert pages["b"][-1] == whole["b"]
    assert read.whys == {t: cause(whole[t], None) for t in ids}
    assert isinstance(read.header, events.RunStarted) and read.header.run_id == "r"


def test_tasks_outside_the_denominator_are_told_after_it(tmp_path: Path) -> None:
    path = journal(tmp_path / "j.jsonl", ["a", "x", "b"], 3, unfinished=frozenset({"x", "b"}))
    told, _ = told_by_teller(typed(path), ["a", "b", "c"])
    assert [s.task_id for s in told] == ["a", "b", "c", "x"]
    assert told[2] == TaskStory("c")  # a task with no event has an (unfinished) story of its own


pieces = st.lists(st.sampled_from(["", "\n", "\n\n", "a", "a\n", "\na", "b\n\n", "x\ny\n"]), max_size=12)


@given(pieces)
def test_pieces_end_in_one_newline_exactly_as_the_joined_text_does(parts: list[str]) -> None:
    assert "".join(_ending_in_one_newline(parts)) == "".join(parts).rstrip("\n") + "\n"


@given(pieces, st.sampled_from(["\n", "", ", "]))
def test_joined_pieces_are_the_join(parts: list[str], sep: str) -> None:
    assert "".join(_joined(parts, sep)) == sep.join(parts)
    assert "".join(_joined(iter(parts), sep)) == sep.join(parts)


def test_a_shuffled_journal_is_read_alike(tmp_path: Path) -> None:
    ids = [f"t{i}" for i in range(20)]
    rng = random.Random(5)
    for seed in (rng.randrange(10_000) for _ in range(5)):
        path = journal(tmp_path / f"{seed}.jsonl", ids, seed)
        whole = stories(typed(path), ids)
        assert read_journal(path, ids).whys == {t: cause(whole[t], None) for t in ids}
