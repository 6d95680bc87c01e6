"""``sealbench show``: why each task ended as it did, read from a run directory or a bundle.

Everything shown comes from the journal and the blobs it names: the attempts, the agent's
exit and output, the patch, the grading, the feedback and the outcome. A bundle is verified
before anything of it is shown (as :func:`sealbench.report.write_report` does); a run
directory's journal must chain. Text written by the agent or by code under test is shown
inert: control characters (terminal escape sequences included) are printed as escapes, never
sent to the terminal.

This module only renders: each task's story (:mod:`sealbench.stories`) and the blobs its
events name (:mod:`sealbench.blobs`) are read elsewhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from . import conversation as cv
from . import events as ev
from .blobs import FULL_CAP, Blob, Blobs
from .errors import ScoreRefusal, VerificationFailed
from .outcomes import SHOWN_OUTCOMES, Outcome, TaskState
from .safe_text import inert as inert
from .stories import AttemptStory, TaskStory, stories
from .usage import ENDPOINT_FAILED, NEVER_STARTED, unfinished, upstream_failed, usage_of

SHOWN_CHARS = 4000
"""Characters of one output (stdout, stderr, a patch) shown unless ``--full``: the end of it,
where the error usually is."""
RUN_DIRECTORY_CHECKED = "a run directory: its journal chains (sealbench verify checks a bundle whole)"
"""What reading a run directory checked (a bundle's reading verifies it whole)."""


def _last_line(blob: Blob | None, limit: int = 160) -> str | None:
    return None if blob is None else last_text_line(blob.text(), limit)


def last_text_line(text: str, limit: int = 160) -> str | None:
    """The last non-blank line of ``text``, made inert and cut at ``limit`` characters."""
    lines = [ln.strip() for ln in inert(text).splitlines() if ln.strip()]
    if not lines:
        return None
    last = lines[-1]
    return last if len(last) <= limit else last[: limit - 3] + "..."


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def failed_tests(output: Blob | None) -> list[str]:
    """Test ids pytest's short summary names as failed (``FAILED x::y - ...``), in its order."""
    if output is None:
        return []
    return [inert(m) for m in dict.fromkeys(_FAILED.findall(output.data.decode("utf-8", "replace")))]


def agent_words(a: ev.AgentFinished, blobs: Blobs | None) -> str:
    """How the agent's attempt ended, in words; with ``blobs``, its last line of output too."""
    if a.error:
        return f"the agent failed to run: {inert(a.error)}"
    if a.timed_out:
        return "the agent was stopped at the task's wall-clock cap"
    code = "killed" if a.exit_code is None else f"exit code {a.exit_code}"
    if a.signal:
        code += f" (signal {a.signal})"
    tail = None if blobs is None else (_last_line(blobs.read(a.stderr, 64 * 1024))
                                       or _last_line(blobs.read(a.stdout, 64 * 1024)))
    return f"the agent ended with {code}" + (f"; its last output: {tail}" if tail else "")


def grading_words(g: ev.Graded, blobs: Blobs | None) -> str:
    """Why a grading did not pass, in words; with ``blobs``, the tests pytest named as failed."""
    if g.forbidden:
        return "the patch touched forbidden paths: " + ", ".join(inert(p) for p in g.forbidden[:5])
    if g.patch_applies_clean is False:
        why = last_text_line(g.apply_message or "")
        return "the patch did not apply to a pristine copy" + (f": {why}" if why else "")
    if g.oracle_timed_out:
        return "the hidden tests ran out of the task's time"
    if g.flagged_pass == "not_counted":
        return "the hidden tests passed while the test process was seen forging: " + ", ".join(g.forging_flags or [])
    junit = g.junit or {}
    if junit and not junit.get("ok", False):
        return _junit_words(junit, g.oracle, blobs)
    if g.oracle is not None and (g.oracle.exit_code not in (0, None) or g.oracle.signal):
        return _oracle_end_words(g.oracle, blobs)
    return "the hidden tests did not pass"


def _junit_words(junit: Mapping[str, Any], oracle: ev.ProcessFacts | None, blobs: Blobs | None) -> str:
    """A JUnit report that says the tests failed: its reason, the tests pytest named, and how
    the oracle ended when it named none and did not exit as pytest does."""
    names = failed_tests(blobs.read(oracle.stdout, FULL_CAP) if oracle is not None and blobs else None)
    words = (f"the hidden tests failed: {inert(str(junit.get('why') or 'the JUnit report says so'))}"
             + (f" ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})" if names else ""))
    if not names and oracle is not None and oracle.exit_code not in (0, 1):
        # No test named: the test process itself ended badly (a crash, a kill); say how.
        words += f"; the oracle {_process_end(oracle)}" + _crash_words(oracle, blobs)
    return words


def _oracle_end_words(oracle: ev.ProcessFacts, blobs: Blobs | None) -> str:
    tail = None if blobs is None else (_last_line(blobs.read(oracle.stdout, 64 * 1024))
                                       or _last_line(blobs.read(oracle.stderr, 64 * 1024)))
    return f"the hidden tests failed (the oracle {_process_end(oracle)})" + (f": {tail}" if tail else "")


def _process_end(p: ev.ProcessFacts) -> str:
    if p.exit_code is None:
        return f"was killed by signal {p.signal}" if p.signal else "was killed"
    return f"exited with code {p.exit_code}" + (f" (signal {p.signal})" if p.signal else "")


_FATAL = re.compile(r"^(?:Fatal Python error: .*|Segmentation fault.*|.*Error: .*)$", re.MULTILINE)


def _crash_words(p: ev.ProcessFacts, blobs: Blobs | None) -> str:
    """The line of a crashed process's stderr that says what happened (a fatal error, else its last line)."""
    if blobs is None:
        return ""
    err = blobs.read(p.stderr, 64 * 1024)
    if err is None:
        return ""
    fatal = _FATAL.search(err.data.decode("utf-8", "replace"))
    line = last_text_line(fatal.group(), 160) if fatal else _last_line(err)
    return f": {line}" if line else ""


_NOT_STARTED = "sandbox failed to start "


def not_started(a: AttemptStory) -> bool:
    """Whether the attempt's agent command never started: the sandbox could not exec it (no
    such program, not executable), so no agent_finished was journaled, only a harness error; or
    it exited 126 or 127 having done nothing (:data:`~sealbench.usage.NEVER_STARTED`)."""
    return any(e.error.startswith(NEVER_STARTED) for e in a.errors if e.error) or (
        a.agent is None and any(_NOT_STARTED in (e.error or "") for e in a.errors))


def _start_detail(error: str) -> str:
    """What the sandbox said when the command did not start (``bwrap: execvp x: No such file or
    directory``), without the harness's own wording around it."""
    _, found, detail = error.partition(_NOT_STARTED)
    if not found:
        return error
    _, colon, said = detail.partition(": ")
    return said if colon else error


def _tries(task: TaskStory) -> str:
    cap = task.started.max_attempts if task.started is not None else None
    used = len(task.attempts)
    return f"after {used} of {cap} attempts" if cap else f"after {used} attempts"


def _harness_failed(task: TaskStory, last: AttemptStory | None) -> str:
    error = (task.finished.error if task.finished is not None else None) or next(
        (e.error for e in [*task.errors, *(x for a in task.attempts.values() for x in a.errors)] if e.error), None)
    if last is not None and not_started(last):
        return (f"the agent's command could not start in the sandbox: {inert(_start_detail(error or ''))} "
                "(recorded as a harness error, which refuses the rate: check the contract's agent command)")
    if error is not None and error.startswith(ENDPOINT_FAILED):
        return (f"the declared model endpoint failed, not the agent: {inert(error)} (recorded as a harness "
                "error, which refuses the rate: check the endpoint, then rerun under a new run_id)")
    return f"the harness failed, not the agent: {inert(error or 'no message recorded')}"


def _infra_failed(task: TaskStory, last: AttemptStory | None) -> str:
    cap = task.started.max_attempts if task.started is not None else None
    reason = last.interrupted.reason if last is not None and last.interrupted is not None else None
    of = f" of {cap}" if cap else ""
    said = f"attempt {last.number}{of} was interrupted ({inert(reason or 'no reason recorded')})" \
        if last is not None else inert((task.finished.error if task.finished is not None else None) or "")
    return (f"not decided by the agent: {said}, and no attempt or time remained; the attempt stays used "
            "(an infrastructure error, which refuses the rate: rerun under a new run_id)")


def _unfinished(task: TaskStory, last: AttemptStory | None) -> str:
    if last is not None and last.interrupted is not None:
        return f"not finished: attempt {last.number} was interrupted ({inert(last.interrupted.reason or '')})"
    return "not finished: the run stopped before this task ended (continue it with run --resume)"


def _timed_out(task: TaskStory, last: AttemptStory) -> str:
    if last.graded is not None and last.graded.oracle_timed_out:
        return "the task's wall-clock cap ran out during grading"
    if last.agent is not None and last.agent.timed_out:
        return "the task's wall-clock cap ran out while the agent ran"
    wall = task.started.wall_clock_s if task.started is not None else None
    return f"the task's wall-clock cap{f' of {wall:g} s' if wall else ''} ran out"


def _endpoint_words(last: AttemptStory) -> list[str]:
    """The model endpoint's failures during the attempt, which are the infrastructure's."""
    failing = [c for c in last.calls if upstream_failed(c)]
    if not failing:
        return []
    what = failing[-1].error or f"HTTP {failing[-1].status}"
    return [f"the model endpoint failed {len(failing)} of the attempt's {len(last.calls)} call(s) "
            f"(last: {inert(what)}): the infrastructure's failure, not the agent's"]


def _unchanged_words(last: AttemptStory, blobs: Blobs | None) -> list[str]:
    words = agent_words(last.agent, blobs) if last.agent is not None else None
    if words is not None and words.startswith("the agent ended with exit code 0"):
        return ["the agent exited 0 without changing anything" + words.removeprefix("the agent ended with exit code 0")]
    return ["the agent changed nothing", *([words] if words else [])]


def _result_words(outcome: str, last: AttemptStory, blobs: Blobs | None) -> list[str]:
    """What the attempt left decided its result: a refused workspace first, then no change,
    then the grade (with the agent's own failure beside it), else the agent's end."""
    if last.patch is not None and last.patch.rejected:
        return [f"the workspace was refused: {inert(last.patch.rejected)}"]
    if last.agent is not None and last.agent.workdir_rejected:
        return [f"the workspace was refused: {inert(last.agent.workdir_rejected)}"]
    if outcome == Outcome.ABSTAIN or (last.patch is not None and last.patch.empty):
        return _unchanged_words(last, blobs)
    if last.graded is not None:
        agent = last.agent
        failed = agent is not None and (agent.exit_code not in (0, None) or bool(agent.error))
        return [grading_words(last.graded, blobs), *([agent_words(agent, blobs)] if agent is not None and failed else [])]
    return [agent_words(last.agent, blobs)] if last.agent is not None else []


_NOT_THE_AGENTS: Final[dict[str, Callable[[TaskStory, AttemptStory | None], str]]] = {
    Outcome.HARNESS_ERROR: _harness_failed,
    Outcome.INFRA_ERROR: _infra_failed,
    TaskState.UNFINISHED: _unfinished,
}
"""Outcomes the agent did not decide, each told from the task's events alone."""


def cause(task: TaskStory, blobs: Blobs | None) -> str:
    """Why the task ended as it did, in plain words (one line). With ``blobs`` the words quote
    stored output (the agent's last line, the failed tests pytest named); without, only the
    journal's facts."""
    outcome = task.outcome
    last = task.last_attempt()
    if outcome == Outcome.PASS:
        return f"passed on attempt {last.number if last else '?'}"
    if outcome in _NOT_THE_AGENTS:
        return _NOT_THE_AGENTS[outcome](task, last)
    if last is None:
        return f"{outcome} without an attempt"
    if outcome == Outcome.TIMEOUT:
        return _timed_out(task, last)
    return "; ".join([*_endpoint_words(last), *_result_words(outcome, last, blobs)]) + f" ({_tries(task)})"


# --------------------------------------------------------------------------- transcripts

MESSAGES_CAP = 2000
"""Messages of one transcript file read as a conversation at most (the rest are counted)."""


@dataclass(frozen=True)
class Message:
    """One message of a conversation transcript: who said it, and what, as text."""

    role: str
    text: str


@dataclass(frozen=True)
class TranscriptFile:
    """One file of an attempt's trace folder, as shown: the journal's entry, its stored bytes
    when kept, and its messages when it is a conversation in a known chat format."""

    entry: ev.TraceFile
    blob: Blob | None
    messages: list[Message] | None
    more_messages: int = 0

    @property
    def why_not_shown(self) -> str | None:
        e = self.entry
        if e.blob is None:
            return f"not kept: {inert(e.not_kept or 'no reason recorded')}"
        if self.blob is None:
            return f"{e.blob} is missing from blobs/"
        return None


def _part_text(part: Any) -> str:
    """A content part (OpenAI's or Anthropic's) as text: its text, or its kind and fields."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return json.dumps(part, ensure_ascii=False)
    if isinstance(part.get("text"), str):
        return str(part["text"])
    kind = part.get("type", "part")
    if kind == "tool_result":
        return f"[tool result] {_content_text(part.get('content'))}"
    if kind == "tool_use":
        return f"[tool use] {part.get('name')} {json.dumps(part.get('input'), ensure_ascii=False)}"
    return f"[{kind}] " + json.dumps({k: v for k, v in part.items() if k != "type"}, ensure_ascii=False)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "\n".join(_part_text(p) for p in content)
    return _part_text(content)


def _message(item: Any) -> Message | None:
    if not isinstance(item, dict) or not isinstance(item.get("role"), str) or "content" not in item:
        return None
    text = _content_text(item["content"])
    for call in item.get("tool_calls") or []:  # OpenAI's assistant tool calls
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        text += f"\n[tool call] {fn.get('name')}({fn.get('arguments', '')})"
    return Message(item["role"], text)


def chat_messages(data: bytes) -> tuple[list[Message], int] | None:
    """The messages of a transcript in a known chat format, and how many past the cap; None
    when it is not one: a JSON list of ``{role, content}`` messages (OpenAI chat, Anthropic
    messages), an object holding one under ``messages`` (mini-swe-agent's trajectory, an
    Anthropic request), or JSON Lines of such messages. Content may be a string or a list of
    parts (text, tool use, tool result)."""
    text = data.decode("utf-8", "replace")
    items: Any
    try:
        items = json.loads(text)
    except ValueError:
        try:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:
            return None
    if isinstance(items, dict):
        items = items.get("messages")
    if not isinstance(items, list) or not items:
        return None
    messages: list[Message] = []
    for item in items:
        m = _message(item)
        if m is None:
            return None  # one item that is not a message: not a conversation, shown raw
        if len(messages) < MESSAGES_CAP:
            messages.append(m)
    return messages, max(0, len(items) - MESSAGES_CAP)


def transcript_files(a: ev.AgentFinished, blobs: Blobs) -> list[TranscriptFile]:
    """The attempt's trace folder files as listed on its agent_finished event, read from blobs/."""
    out = []
    for entry in a.transcript_files or []:
        blob = blobs.read(entry.blob) if entry.blob is not None else None
        parsed = chat_messages(blob.data) if blob is not None and not blob.truncated else None
        out.append(TranscriptFile(entry, blob, parsed[0] if parsed else None, parsed[1] if parsed else 0))
    return out


def entry_words(f: TranscriptFile) -> str:
    """One trace folder entry in words: its path, kind, size, and whether it is shown."""
    e = f.entry
    kind = {"l": "a link", "s": "a special file", "x": "an executable file"}.get(e.type or "", "a file")
    size = f", {e.bytes} bytes" if e.bytes is not None else ""
    what = f"a conversation of {len(f.messages) + f.more_messages} message(s)" if f.messages is not None else None
    why = f.why_not_shown
    if why is None and f.blob is not None and f.blob.matches is False:
        why = "WARNING: these bytes do not match their digest"
    return f"{inert(e.path or '?')}: {kind}{size}" + (f", {what}" if what else "") + (f" ({why})" if why else "")


def _transcript_lines(a: ev.AgentFinished, blobs: Blobs, full: bool) -> list[str]:
    if a.transcript_rejected:
        return [f"    transcript: not read ({inert(a.transcript_rejected)})"]
    if not a.transcript:
        return []
    files = transcript_files(a, blobs)
    if not files:
        return [f"    transcript: tree {a.transcript}"]
    out = [f"    transcript: tree {a.transcript}, {len(files)} entr{'y' if len(files) == 1 else 'ies'}"
           + (f" (and {a.transcript_files_omitted} more, not listed)" if a.transcript_files_omitted else "") + ":"]
    for f in files:
        out.append(f"      {entry_words(f)}")
        if f.messages is not None:
            shown = f.messages if full else f.messages[-20:]
            if len(shown) < len(f.messages):
                out.append(f"        ... {len(f.messages) - len(shown)} earlier message(s) (--full shows them)")
            for m in shown:
                body = inert(m.text)
                if not full and len(body) > 1000:
                    body = body[:1000] + f" ... ({len(body) - 1000} more characters)"
                lines = body.rstrip("\n").split("\n") or [""]
                out.append(f"        [{inert(m.role)}] {lines[0]}")
                out += [f"        {' ' * (len(inert(m.role)) + 2)} {ln}" for ln in lines[1:]]
        elif f.blob is not None and f.why_not_shown is None:
            text = f.blob.text()
            if not full and len(text) > SHOWN_CHARS:
                out.append(f"        the last {SHOWN_CHARS} characters (--full for all):")
                text = text[-SHOWN_CHARS:]
            out += [f"        | {ln}" for ln in text.rstrip("\n").split("\n")]
    return out


def _transcript_json(a: ev.AgentFinished, blobs: Blobs, full: bool) -> list[dict[str, Any]]:
    out = []
    for f in transcript_files(a, blobs):
        doc: dict[str, Any] = {**f.entry.model_dump(mode="json", exclude_unset=True),
                               "format": None if f.blob is None else "chat" if f.messages is not None else "raw"}
        if f.messages is not None:
            doc["messages"] = [{"role": m.role, "text": m.text} for m in f.messages]
            doc["messages_not_read"] = f.more_messages
        elif f.blob is not None:
            doc["text"] = _blob_json(blobs, f.entry.blob, full)
        if f.blob is not None:
            doc["matches_digest"] = f.blob.matches
        out.append(doc)
    return out


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Shown:
    """A run directory or bundle, read and checked: its tasks' stories and its blobs."""

    where: Path
    run_id: str | None
    tasks: dict[str, TaskStory]
    blobs: Blobs
    checked: str


def read_run(where: Path) -> Shown:
    """Read a run directory or bundle for :func:`table_lines` and :func:`task_lines`.

    Raises:
        ScoreRefusal: no journal.jsonl or scoring_contract.json there.
        VerificationFailed: a bundle that does not verify; a journal whose chain is broken.
        MadeByNewerRelease: a bundle made by a newer release of sealbench.
    """
    from .bundle import SUMS, verify_bundle
    from .contract import load_contract
    from .errors import ContractError
    from .journal import read_chain

    journal = where / "journal.jsonl"
    if not journal.is_file():
        raise ScoreRefusal(f"{where}: no journal.jsonl; give a run directory (run --out) or a bundle (runs/<run_id>/)")
    try:
        contract = load_contract(where / "scoring_contract.json")
    except ContractError as e:
        raise ScoreRefusal(f"{where}: {e}") from None
    if (where / SUMS).is_file():
        verify_bundle(where)
        checked = "the bundle verifies (sums, chain, derived files); without a checked signature: internal consistency only"
    else:
        checked = RUN_DIRECTORY_CHECKED
    chain = read_chain(journal)
    if chain.problems:
        raise VerificationFailed(chain.problems)
    return Shown(where, contract.run_id, stories(chain.lines, contract.task_ids), Blobs(where), checked)



def shown_run(where: Path, run_id: str | None, tasks: dict[str, TaskStory]) -> Shown:
    """A run directory whose stories were told while its journal was read and verified anyway
    (:class:`~sealbench.stories.StoryBook`)."""
    return Shown(where, run_id, tasks, Blobs(where), RUN_DIRECTORY_CHECKED)


# --------------------------------------------------------------------------- rendering


def _seconds(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f}s"


def table_lines(shown: Shown, outcomes: Sequence[str] = ()) -> list[str]:
    """One line per task (filtered by ``outcomes`` when given): outcome, attempts, time, why."""
    rows = [t for t in shown.tasks.values() if not outcomes or t.outcome in outcomes]
    width = max([len(t.task_id) for t in rows] + [7])
    out = [f"{shown.run_id or shown.where}: {len(rows)} of {len(shown.tasks)} tasks"
           + (f" with outcome {', '.join(outcomes)}" if outcomes else "") + f" ({shown.checked})"]
    out.append(f"{'task_id':{width}}  {'outcome':13} {'attempts':8} {'elapsed':>8}  why")
    for t in rows:
        cap = t.started.max_attempts if t.started is not None else None
        attempts = f"{len(t.attempts)}/{cap if cap else '?'}"
        elapsed = t.finished.elapsed_ms if t.finished is not None else None
        out.append(f"{inert(t.task_id):{width}}  {t.outcome:13} {attempts:8} {_seconds(elapsed):>8}  "
                   f"{cause(t, shown.blobs)}")
    return out


SUMMARY_LINES = 20
"""Tasks that did not pass named one per line in a run's summary; the rest are counted, with the
``sealbench show`` command that lists them."""


def _failed_to_work(a: AttemptStory) -> bool:
    """The attempt's agent did nothing useful: its command did not start, or it ended non-zero
    (or failed to run) with an empty patch."""
    if not_started(a):
        return True
    ag, p = a.agent, a.patch
    return (ag is not None and (ag.exit_code not in (0, None) or bool(ag.error)) and not ag.timed_out
            and p is not None and bool(p.empty) and not p.rejected)


def broken_agent(shown: Shown) -> str | None:
    """One sentence when the agent never worked: on every attempt of every task, its command
    could not start in the sandbox, or it exited non-zero with an empty patch. It names the exit
    codes and the last line of its stderr, since the cause is then the agent's setup, not the tasks."""
    attempts = [a for t in shown.tasks.values() for a in t.attempts.values()]
    tasks = sum(1 for t in shown.tasks.values() if t.attempts)
    endpoint = [a for a in attempts if any(ENDPOINT_FAILED in (e.error or "") for e in a.errors)]
    if endpoint:
        # The task lines say the endpoint failed: the first line must not blame the agent.
        return (f"the model endpoint failed while {len(endpoint)} of the {len(attempts)} attempt(s) of {tasks} "
                "task(s) ran: those are not the agent's failures, and no rate is emitted; check the endpoint, "
                "then run a new contract under a new run_id")
    if not attempts or not all(_failed_to_work(a) for a in attempts):
        return None
    first = attempts[0]
    if all(not_started(a) for a in attempts):
        error = next((e.error for e in first.errors if e.error), "")
        return (f"the agent's command could not start in the sandbox on any of the {len(attempts)} attempt(s) of "
                f"{tasks} task(s): {inert(_start_detail(error or ''))}; check the contract's agent command")
    tail = _stderr_tail(attempts, shown.blobs)
    return (f"the agent exited non-zero with an empty patch on every one of its {len(attempts)} attempt(s) of "
            f"{tasks} task(s) ({_exit_codes(attempts)})"
            + (f"; its stderr ends: {tail}" if tail else "; its stderr is empty")
            + "; check the agent's command and setup")


def _exit_codes(attempts: Sequence[AttemptStory]) -> str:
    """"exit code 2", "exit codes 1, 2" or "no exit code": how the attempts' agents ended."""
    codes = sorted({a.agent.exit_code for a in attempts if a.agent is not None and a.agent.exit_code is not None})
    return (f"exit code {codes[0]}" if len(codes) == 1 else
            f"exit codes {', '.join(map(str, codes))}" if codes else "no exit code")


def _stderr_tail(attempts: Sequence[AttemptStory], blobs: Blobs) -> str | None:
    """The last agent's last line of stderr, else its error, inert; None when it left neither."""
    last = next((a.agent for a in reversed(attempts) if a.agent is not None), None)
    if last is None:
        return None
    return _last_line(blobs.read(last.stderr, 64 * 1024)) or (inert(last.error) if last.error else None)


def why_lines(shown: Shown, limit: int = SUMMARY_LINES) -> list[str]:
    """A run summary's why: one line per task that did not pass (the first ``limit``), its
    outcome and :func:`cause`; the rest counted by outcome, with the ``show`` command that lists
    them; first, :func:`broken_agent`'s sentence when it applies. No line when every task passed."""
    import shlex

    missed = [t for t in shown.tasks.values() if t.outcome != Outcome.PASS]
    if not missed:
        return []
    where = shlex.quote(str(shown.where))
    out = [f"why {len(missed)} task(s) did not pass (sealbench show {where} TASK tells a task's story):"]
    broken = broken_agent(shown)
    if broken is not None:
        out.append(f"  {broken}")
    rows = missed[:limit]
    width = max(len(t.task_id) for t in rows)
    out += [f"  {inert(t.task_id):{width}}  {t.outcome:13} {cause(t, shown.blobs)}" for t in rows]
    rest = missed[limit:]
    if rest:
        counts = {o: n for o in SHOWN_OUTCOMES if (n := sum(1 for t in rest if t.outcome == o))}
        out.append(f"  and {len(rest)} more ({', '.join(f'{o} {n}' for o, n in counts.items())}): "
                   f"sealbench show {where} " + " ".join(f"--outcome {o}" for o in counts))
    return out


def _output(label: str, blob_digest: str | None, size: int | None, blobs: Blobs, full: bool,
            indent: str = "    ") -> list[str]:
    if blob_digest is None:
        return [f"{indent}{label}: (nothing)" if size in (None, 0) else f"{indent}{label}: {size} bytes, not stored"]
    blob = blobs.read(blob_digest, FULL_CAP)
    if blob is None:
        return [f"{indent}{label}: {blob_digest} is missing from blobs/"]
    if not blob.data:
        return [f"{indent}{label}: (nothing)"]
    text = blob.text()
    head = f"{indent}{label}: {size if size is not None else len(blob.data)} bytes"
    if blob.matches is False:
        head += " (WARNING: these bytes do not match their digest)"
    if not text.strip():
        return [head + ", blank"]
    if not full and len(text) > SHOWN_CHARS:
        head += f", the last {SHOWN_CHARS} characters shown (--full for all)"
        text = text[-SHOWN_CHARS:]
    elif blob.truncated:
        head += f", the first {FULL_CAP} bytes shown"
    return [head + ":", *(f"{indent}  | {ln}" for ln in text.rstrip("\n").split("\n"))]


def diffstat(patch: str) -> list[tuple[str, int, int]]:
    """``(path, lines added, lines removed)`` per file of a unified diff, in its order."""
    out: list[tuple[str, int, int]] = []
    path: str | None = None
    added = removed = 0
    in_hunk = False
    for ln in patch.split("\n"):
        if ln.startswith("diff --git "):
            if path is not None:
                out.append((path, added, removed))
            parts = ln[len("diff --git "):].split(" b/", 1)
            path, added, removed, in_hunk = (parts[1] if len(parts) == 2 else parts[0]), 0, 0, False
        elif ln.startswith("@@"):
            in_hunk = True
        elif in_hunk and ln.startswith("+"):
            added += 1
        elif in_hunk and ln.startswith("-"):
            removed += 1
    if path is not None:
        out.append((path, added, removed))
    return out


def _patch_lines(p: ev.PatchCaptured, blobs: Blobs, full: bool) -> list[str]:
    if p.rejected:
        return [f"    patch: refused ({inert(p.rejected)})"]
    if p.empty:
        return ["    patch: empty (nothing changed)"]
    out = [f"    patch: {p.changed_count} path(s) changed, {p.patch_sha256}"]
    blob = blobs.read(p.patch_sha256)
    if blob is not None:
        text = blob.text()
        out += [f"      {inert(path)} | +{plus} -{minus}" for path, plus, minus in diffstat(text)]
        shown = text if full or len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS]
        out += [f"      | {ln}" for ln in shown.rstrip("\n").split("\n")]
        if shown is not text:
            out.append(f"      | ... ({len(text) - SHOWN_CHARS} more characters; --full shows them)")
    return out


def _grading_lines(g: ev.Graded, blobs: Blobs, full: bool) -> list[str]:
    verdict = Outcome.PASS.value if g.task_pass else Outcome.FAIL.value
    out = [f"    grading: {verdict}: applies cleanly {_yes(g.patch_applies_clean)}, no forbidden path "
           f"{_yes(g.no_forbidden_path)}, hidden tests green {_yes(g.tests_green)}"]
    if not g.task_pass:
        out.append(f"      why: {grading_words(g, blobs)}")
    if g.junit:
        j = g.junit
        out.append(f"      JUnit: {j.get('ran', '?')} ran, {j.get('failed', '?')} failed"
                   + (f", required tests not passed: {', '.join(map(str, j['missing_required'][:10]))}"
                      if j.get("missing_required") else ""))
    if g.oracle is not None:
        o = g.oracle
        out.append(f"      oracle: exit code {o.exit_code}" + (", timed out" if o.timed_out else "")
                   + (f", {_seconds(o.elapsed_ms)}" if o.elapsed_ms is not None else ""))
        out += _output("oracle stdout", o.stdout, o.stdout_bytes, blobs, full, "      ")
        out += _output("oracle stderr", o.stderr, o.stderr_bytes, blobs, full, "      ")
    return out


def _attempt_lines(a: AttemptStory, blobs: Blobs, full: bool) -> list[str]:
    out = [f"  attempt {a.number}: {a.result}"
           + (f" in {_seconds(a.finished.elapsed_ms)}" if a.finished is not None else "")
           + (f", {a.started.budget_s:g} s of the task's time left at its start"
              if a.started is not None and a.started.budget_s is not None else "")]
    ag = a.agent
    if ag is not None:
        out.append(f"    agent: {agent_words(ag, blobs).removeprefix('the agent ')}"
                   + (f", ran {_seconds(ag.elapsed_ms)}" if ag.elapsed_ms is not None else ""))
        out += _output("stdout", ag.stdout, ag.stdout_bytes, blobs, full)
        out += _output("stderr", ag.stderr, ag.stderr_bytes, blobs, full)
        out += _transcript_lines(ag, blobs, full)
    if a.calls:
        out += conversation_lines(a, blobs, full)
    for lost in unfinished([*a.calls, *a.started_calls]):
        out.append(f"      #{lost.index} {inert(lost.endpoint or '?')} {inert(lost.model or '?')}: sent, and the "
                   f"runner stopped before it ended (counted against the caps, its use unknown)")
    if a.patch is not None:
        out += _patch_lines(a.patch, blobs, full)
    if a.graded is not None:
        out += _grading_lines(a.graded, blobs, full)
    f = a.feedback
    if f is not None:
        out.append(f"    feedback for the next attempt: policy {f.policy}")
        if f.visible_tests is not None:
            vt = f.visible_tests
            out += _output(f"visible tests (exit code {vt.exit_code}) stdout", vt.stdout, vt.stdout_bytes, blobs, full,
                           "      ")
    if a.interrupted is not None:
        i = a.interrupted
        out.append(f"    interrupted: {inert(i.reason or '')}"
                   + (f"; {i.charged_s:g} s charged ({inert(i.charged_basis or '')})" if i.charged_s is not None else ""))
    for e in a.errors:
        out.append(f"    harness error: {inert(e.error or '')}")
    return out


# --------------------------------------------------------------------------- the model conversation

BODY_CAP = 16 * 2**20
"""Bytes of one model call's body read to tell the conversation (the gateway's request cap)."""
FOLD_LINES = 12
"""Lines of one message or tool call shown unless ``--full``."""
FOLD_WIDTH = 600
"""Characters of one line shown unless ``--full``."""
CALLS_SHOWN = 100
"""Model calls of an attempt shown unless ``--full`` (its last)."""


def _stored(blobs: Blobs, digest: str | None) -> cv.Stored | None:
    blob = blobs.read(digest, BODY_CAP) if digest is not None else None
    return None if blob is None else cv.Stored(blob.data, blob.truncated, blob.matches)


def attempt_conversation(a: AttemptStory, blobs: Blobs) -> cv.Conversation:
    """The attempt's model calls as a conversation (:mod:`sealbench.conversation`), each call's
    bodies read from ``blobs/`` as it comes."""
    return cv.build(cv.CallBodies(c, _stored(blobs, c.request), _stored(blobs, c.response)) for c in a.calls)


def call_words(c: ev.ModelCall) -> str:
    """One model call's facts in a line: endpoint, model, status, latency, tokens, and why it
    was refused or failed."""
    tokens = ("no usage reported" if c.input_tokens is None and c.output_tokens is None
              else f"{c.input_tokens}/{c.output_tokens}/{c.cached_tokens} tokens")
    why = c.refused or c.error or c.diverged or ""
    return (f"#{c.index} {inert(c.endpoint or '?')} {inert(c.model or '?')}: "
            f"{c.status if c.status is not None else 'no reply'}"
            + (f" in {c.latency_ms} ms" if c.latency_ms is not None else "") + f", {tokens}"
            + (", streamed" if c.streamed else "") + (", replayed" if c.replayed else "")
            + (f" (refused by the gateway{f' at the {c.cap} cap' if c.cap else ''}: {inert(why)})" if c.refused
               else f" ({inert(why)})" if why else ""))


def _fold(text: str, indent: str, full: bool) -> list[str]:
    lines = inert(text).rstrip("\n").split("\n")
    shown = lines if full or len(lines) <= FOLD_LINES else lines[:FOLD_LINES]
    out = [f"{indent}{ln}" if full or len(ln) <= FOLD_WIDTH
           else f"{indent}{ln[:FOLD_WIDTH]} ... ({len(ln) - FOLD_WIDTH} more characters; --full shows all)"
           for ln in shown]
    if len(shown) < len(lines):
        out.append(f"{indent}... {len(lines) - len(shown)} more lines; --full shows all")
    return out


def _said(role: str, text: str, indent: str, full: bool) -> list[str]:
    """``[role] first line`` and the rest below it, folded."""
    body = _fold(text, indent + "  ", full) if text.strip() else []
    if not body:
        return [f"{indent}[{inert(role)}]"]
    return [f"{indent}[{inert(role)}] {body[0].strip()}", *body[1:]]


def _tool_call_lines(call: cv.ToolCall, indent: str, full: bool) -> list[str]:
    head = f"{indent}[tool call] {inert(call.name)}" + (f" ({inert(call.id)})" if call.id else "")
    return [head, *_fold(cv.arguments_text(call.arguments), indent + "    ", full)]


def _message_lines(m: cv.ChatMessage, indent: str, full: bool) -> list[str]:
    role = m.role + (f" {m.tool_call_id}" if m.tool_call_id else "") + (", an error" if m.is_error else "")
    out = _said("reasoning", m.reasoning, indent, full) if m.reasoning else []
    if m.text or not m.tool_calls:
        out += _said(role, m.text, indent, full)
    for call in m.tool_calls:
        out += _tool_call_lines(call, indent, full)
    return out


def exchange_lines(x: cv.Exchange, full: bool, indent: str = "      ") -> list[str]:
    """One model call: its facts, the messages its request added, its reply, each body folded
    unless ``full``; every text from the agent or the model made inert."""
    out = [f"{indent}{call_words(x.call)}"]
    inner = indent + "  "
    out += [f"{inner}note: {inert(n)}" for n in x.notes]
    if x.request_note is not None:
        out += [f"{inner}request: {x.request_note.why}; it begins:", *_fold(x.request_note.preview, inner + "  | ", full)]
    elif x.request_format is not None:
        out.append(f"{inner}{inert(request_words(x))}")
        for m in x.added:
            out += _message_lines(m, inner + "  ", full)
    if x.reply_note is not None:
        out += [f"{inner}reply: {x.reply_note.why}; it begins:", *_fold(x.reply_note.preview, inner + "  | ", full)]
    elif x.reply is not None:
        r = x.reply
        out.append(f"{inner}reply ({r.format}" + (f", {inert(r.model)}" if r.model else "") + ")"
                   + (f", stopped: {inert(r.stop)}" if r.stop else "") + ":")
        if r.error:
            out.append(f"{inner}  [error] {inert(r.error)}")
        if r.refusal:
            out += _said("refusal", r.refusal, inner + "  ", full)
        if r.reasoning:
            out += _said("reasoning", r.reasoning, inner + "  ", full)
        if r.text or not (r.tool_calls or r.error or r.refusal):
            out += _said("assistant", r.text, inner + "  ", full)
        for call in r.tool_calls:
            out += _tool_call_lines(call, inner + "  ", full)
    return out


def request_words(x: cv.Exchange) -> str:
    """What a call's request holds, in words: its format, the tools it offers, and which earlier
    call it continues (whose messages are not repeated)."""
    tools = ", ".join(x.tools[:20]) + (f" and {len(x.tools) - 20} more" if len(x.tools) > 20 else "")
    words = f"request ({x.request_format})" + (f", tools offered: {tools}" if x.tools else "")
    if x.repeated:
        before = f"call #{x.continues}'s {x.repeated} message(s)" + (" and its reply" if x.reply_repeated else "")
        return words + (f": {before}, then:" if x.added else f": {before} again, nothing added")
    return words + (":" if x.added else ": no message")


def conversation_lines(a: AttemptStory, blobs: Blobs, full: bool) -> list[str]:
    """The attempt's model calls: their sums, then each call as :func:`exchange_lines` (the last
    :data:`CALLS_SHOWN` unless ``full``)."""
    u = usage_of(a.calls)
    out = [f"    model calls: {u.calls} ({u.refused} refused, {u.failed} failed upstream); tokens "
           f"{u.input_tokens} in, {u.output_tokens} out, {u.cached_tokens} cached; the conversation:"]
    exchanges = attempt_conversation(a, blobs).exchanges
    shown = exchanges if full else exchanges[-CALLS_SHOWN:]
    if len(shown) < len(exchanges):
        out.append(f"      ... {len(exchanges) - len(shown)} earlier call(s); --full shows all")
    for x in shown:
        out += exchange_lines(x, full)
    return out


def _yes(v: bool | None) -> str:
    return "?" if v is None else "yes" if v else "no"


def task_lines(shown: Shown, task_id: str, attempt: int | None = None, *, full: bool = False) -> list[str]:
    """One task's story: caps, each attempt (or only ``attempt``), charges and the outcome.

    Raises:
        ScoreRefusal: no such task, or no such attempt.
    """
    task = shown.tasks.get(task_id)
    if task is None:
        raise ScoreRefusal(f"no task {task_id!r} in {shown.where}; `sealbench show {shown.where}` lists them")
    if attempt is not None and attempt not in task.attempts:
        raise ScoreRefusal(f"task {task_id} has no attempt {attempt} (attempts made: "
                           f"{', '.join(map(str, sorted(task.attempts))) or 'none'})")
    s = task.started
    out = [f"{inert(task_id)}: {task.outcome}: {cause(task, shown.blobs)}", f"  ({shown.checked})"]
    if s is not None:
        out.append(f"  caps: {s.max_attempts} attempt(s), {s.wall_clock_s:g} s of wall-clock time; prompt template "
                   f"{s.prompt_template_id}; oracle {' '.join(s.oracle_cmd or [])}"
                   + ("; the pytest oracle ran unguarded, as sealed" if s.oracle_guard == "none" else ""))
    for number in sorted(task.attempts):
        if attempt is None or number == attempt:
            out += _attempt_lines(task.attempts[number], shown.blobs, full)
    for c in task.charges:
        out.append(f"  time charged after a crash: {c.charged_s:g} s ({inert(c.basis or '')})")
    for e in task.errors:
        out.append(f"  harness error: {inert(e.error or '')}")
    fin = task.finished
    if fin is not None:
        out.append(f"  outcome: {fin.outcome} after {fin.attempts_used} attempt(s) in {_seconds(fin.elapsed_ms)}"
                   + ("; attempt 1 passed" if fin.first_attempt_passed else ""))
    return out


def _blob_json(blobs: Blobs, digest: str | None, full: bool) -> dict[str, Any] | None:
    blob = blobs.read(digest)
    if blob is None:
        return None
    text = blob.data.decode("utf-8", "replace")
    cut = not full and len(text) > SHOWN_CHARS
    return {"digest": digest, "bytes_read": len(blob.data), "text": text[-SHOWN_CHARS:] if cut else text,
            "shown": "last characters" if cut else ("first bytes" if blob.truncated else "whole"),
            "matches_digest": blob.matches}


def task_json(shown: Shown, task: TaskStory, *, full: bool = False) -> dict[str, Any]:
    """One task's story for scripts: every event's payload as journaled, outputs as text (not
    made inert: a script decides how to print them)."""
    def dump(e: ev.Event | None) -> dict[str, Any] | None:
        return None if e is None else e.model_dump(mode="json", exclude_unset=True)

    attempts = []
    for n in sorted(task.attempts):
        a = task.attempts[n]
        texts: dict[str, Any] = {}
        for e in (a.agent, a.patch, a.graded, a.feedback):
            if e is not None:
                for name, digest in ev.blob_fields(e):
                    if not name.startswith("transcript_files."):  # under "transcript", with its entry
                        texts[f"{e.kind}.{name}"] = _blob_json(shown.blobs, digest, full)
        attempts.append({"attempt": n, "result": a.result, "started": dump(a.started), "agent": dump(a.agent),
                         "patch": dump(a.patch), "grading": dump(a.graded), "feedback": dump(a.feedback),
                         "finished": dump(a.finished), "interrupted": dump(a.interrupted),
                         "model_calls": [dump(c) for c in a.calls],
                         "conversation": cv.to_json(attempt_conversation(a, shown.blobs)) if a.calls else [],
                         "harness_errors": [dump(e) for e in a.errors], "outputs": texts,
                         "transcript": _transcript_json(a.agent, shown.blobs, full) if a.agent is not None else []})
    return {"task_id": task.task_id, "outcome": task.outcome, "cause": cause(task, shown.blobs),
            "started": dump(task.started), "attempts": attempts, "charges": [dump(c) for c in task.charges],
            "harness_errors": [dump(e) for e in task.errors], "finished": dump(task.finished)}


def to_json(shown: Shown, task_id: str | None = None, attempt: int | None = None, outcomes: Sequence[str] = (),
            *, full: bool = False) -> str:
    """``show --json``: the task table, or one task's story.

    Raises:
        ScoreRefusal: no such task or attempt.
    """
    if task_id is not None:
        task_lines(shown, task_id, attempt)  # the same refusals
        doc = task_json(shown, shown.tasks[task_id], full=full)
        if attempt is not None:
            doc["attempts"] = [a for a in doc["attempts"] if a["attempt"] == attempt]
        return json.dumps({"run_id": shown.run_id, "checked": shown.checked, "task": doc}, indent=2)
    rows = [{"task_id": t.task_id, "outcome": t.outcome, "attempts": len(t.attempts),
             "max_attempts": t.started.max_attempts if t.started is not None else None,
             "elapsed_ms": t.finished.elapsed_ms if t.finished is not None else None,
             "cause": cause(t, shown.blobs)}
            for t in shown.tasks.values() if not outcomes or t.outcome in outcomes]
    return json.dumps({"run_id": shown.run_id, "checked": shown.checked, "tasks": rows}, indent=2)



