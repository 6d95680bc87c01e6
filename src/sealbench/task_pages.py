"""The report's page per task (``tasks/<task_id>.html``): what ``sealbench show TASK`` prints,
as HTML, from Jinja2 templates with autoescaping on.

Each page stands alone inside the report's folder: outputs and the diff are printed in it,
links are relative (back to ``../report.html``), and the same Content-Security-Policy as the
summary page forbids every load. Text from the agent or the code under test is made inert
(:func:`sealbench.show.inert`) and then escaped, so it can neither run nor restyle the page.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import conversation as cv
from . import events as ev
from .blobs import Blobs
from .document import CSP, CSS
from .files import write_atomic
from .show import (
    Message,
    TranscriptFile,
    agent_words,
    attempt_conversation,
    call_words,
    cause,
    diffstat,
    entry_words,
    failed_tests,
    grading_words,
    inert,
    request_words,
    transcript_files,
)
from .stories import AttemptStory, TaskStory
from .usage import usage_of

PAGE_MESSAGES = 500
"""Messages of one conversation transcript printed on a page (its last)."""
PAGE_CHARS = 64_000
"""Characters of one output printed on a page (its end), and of a diff (its start)."""
PAGE_CALLS = 300
"""Model calls of one attempt shown as its conversation on a page (its last)."""
FOLD_LINES = 20
"""Lines of a message or tool call shown open on a page; a longer one is folded into ``<details>``."""
FOLD_CHARS = 2000
"""Characters of a message or tool call shown open on a page (likewise)."""
TASKS_DIR = "tasks"
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")


def safe_name(name: str, what: str = "task id") -> str:
    """``name`` when it is a safe path segment (task ids and run_ids are: their formats refuse
    others); anything else is refused here too, never written.

    Raises:
        ValueError: not a safe file name.
    """
    if not _SAFE_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"{what} {name!r} is not a safe file name")
    return name


def page_name(task_id: str) -> str:
    """The page of a task, relative to the report's folder (see :func:`safe_name`)."""
    return f"{TASKS_DIR}/{safe_name(task_id)}.html"


@dataclass(frozen=True)
class _Output:
    label: str
    summary: str
    text: str
    open: bool


@dataclass(frozen=True)
class _DiffLine:
    cls: str
    text: str


def _output(label: str, digest: str | None, size: int | None, blobs: Blobs, *, open_: bool = False) -> _Output:
    if digest is None:
        return _Output(label, "nothing" if size in (None, 0) else f"{size} bytes, not stored", "", False)
    blob = blobs.read(digest)
    if blob is None:
        return _Output(label, f"{digest} is missing from this run's blobs/", "", False)
    if not blob.data:
        return _Output(label, "nothing", "", False)
    text = blob.text()
    summary = f"{size if size is not None else len(blob.data)} bytes"
    if blob.matches is False:
        summary += " (these bytes do not match their digest)"
    if len(text) > PAGE_CHARS:
        summary += f", the last {PAGE_CHARS} characters"
        text = text[-PAGE_CHARS:]
    return _Output(label, summary, text, open_ and bool(text.strip()))


def _process_outputs(prefix: str, facts: ev.ProcessFacts | None, blobs: Blobs, *, open_: bool) -> list[_Output]:
    if facts is None:
        return []
    return [_output(f"{prefix}stdout", facts.stdout, facts.stdout_bytes, blobs, open_=open_),
            _output(f"{prefix}stderr", facts.stderr, facts.stderr_bytes, blobs, open_=open_)]


@dataclass(frozen=True)
class _Transcript:
    words: str
    messages: list[Message] | None
    more: int
    raw: _Output | None


def _transcript_view(f: TranscriptFile) -> _Transcript:
    """One trace folder file on the page: a conversation (each message capped), or its text."""
    words = entry_words(f)
    if f.messages is not None:
        shown = f.messages[-PAGE_MESSAGES:]
        cut = [Message(m.role, m.text if len(m.text) <= PAGE_CHARS else m.text[:PAGE_CHARS] + " ...") for m in shown]
        return _Transcript(words, cut, len(f.messages) - len(shown) + f.more_messages, None)
    if f.blob is None or f.why_not_shown is not None:
        return _Transcript(words, None, 0, None)
    text = f.blob.text()
    summary = f"{len(f.blob.data)} bytes" + (f", the last {PAGE_CHARS} characters" if len(text) > PAGE_CHARS else "")
    return _Transcript(words, None, 0, _Output(inert(f.entry.path or "?"), summary, text[-PAGE_CHARS:], False))


@dataclass(frozen=True)
class _Text:
    """A body on the page: open, or folded into ``<details>`` under its first line."""

    text: str
    folded: bool
    summary: str


@dataclass(frozen=True)
class _Call:
    name: str
    id: str | None
    arguments: _Text


@dataclass(frozen=True)
class _Said:
    role: str
    cls: str
    text: _Text | None
    reasoning: _Text | None
    calls: list[_Call]


@dataclass(frozen=True)
class _Exchange:
    head: str
    failed: bool
    notes: list[str]
    request: str | None
    request_preview: str | None
    added: list[_Said]
    reply: str | None
    reply_preview: str | None
    answer: _Said | None
    alerts: list[str]


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def _text(text: str) -> _Text:
    if len(text) > PAGE_CHARS:
        text = text[:PAGE_CHARS] + f" ... ({len(text) - PAGE_CHARS} more characters; sealbench show --full prints all)"
    lines = text.count("\n") + 1
    if lines <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return _Text(text, False, "")
    first = text.split("\n", 1)[0]
    first = first if len(first) <= 120 else first[:117] + "..."
    return _Text(text, True, f"{first} ({lines} lines, {len(text)} characters)")


def _said(role: str, text: str, calls: tuple[cv.ToolCall, ...] = (), reasoning: str = "") -> _Said:
    # The role names a class from a fixed set: text from the agent never picks the page's styles.
    return _Said(role, role if role in _ROLES else "other", _text(text) if text or not calls else None,
                 _text(reasoning) if reasoning else None,
                 [_Call(c.name, c.id, _text(cv.arguments_text(c.arguments))) for c in calls])


def _message(m: cv.ChatMessage) -> _Said:
    role = m.role + (f" (result of {m.tool_call_id})" if m.tool_call_id else "") + (", an error" if m.is_error else "")
    view = _said(role, m.text, m.tool_calls, m.reasoning)
    return _Said(view.role, m.role if m.role in _ROLES else "other", view.text, view.reasoning, view.calls)


def _exchange(x: cv.Exchange) -> _Exchange:
    c = x.call
    request = None
    if x.request_note is not None:
        request = f"request: {x.request_note.why}"
    elif x.request_format is not None:
        request = request_words(x)
    reply, answer, alerts = None, None, []
    if x.reply_note is not None:
        reply = f"reply: {x.reply_note.why}"
    elif x.reply is not None:
        r = x.reply
        reply = f"reply ({r.format}" + (f", {r.model}" if r.model else "") + ")" + (f", stopped: {r.stop}" if r.stop else "")
        alerts = [*([f"error: {r.error}"] if r.error else []), *([f"the model refused: {r.refusal}"] if r.refusal else [])]
        if r.text or r.tool_calls or r.reasoning or not alerts:
            answer = _said("assistant", r.text, r.tool_calls, r.reasoning)
    failed = bool(c.refused or c.error or (c.status is not None and c.status >= 400))
    return _Exchange(call_words(c), failed, list(x.notes), request,
                     x.request_note.preview if x.request_note is not None else None,
                     [_message(m) for m in x.added], reply,
                     x.reply_note.preview if x.reply_note is not None else None, answer, alerts)


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---", "diff --git", "index ", "new file", "deleted file", "similarity", "rename ")):
        return "meta"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"


def _attempt(a: AttemptStory, blobs: Blobs) -> dict[str, Any]:
    view: dict[str, Any] = {
        "number": a.number, "result": a.result, "started": a.started, "agent": a.agent, "patch": a.patch,
        "grading": a.graded, "feedback": a.feedback, "finished": a.finished, "interrupted": a.interrupted,
        "errors": a.errors, "agent_words": "", "agent_outputs": [], "diffstat": [], "diff": None,
        "diff_cut": False, "diff_shown": 0, "diff_total": 0, "failed_tests": [], "grading_words": "",
        "oracle_outputs": [], "feedback_outputs": [], "transcript": [], "conversation": [], "calls_more": 0,
        "calls_words": "",
    }
    if a.calls:
        exchanges = attempt_conversation(a, blobs).exchanges
        view["conversation"] = [_exchange(x) for x in exchanges[-PAGE_CALLS:]]
        view["calls_more"] = max(0, len(exchanges) - PAGE_CALLS)
        u = usage_of(a.calls)
        view["calls_words"] = (f"{u.calls} call(s) ({u.refused} refused by the gateway, {u.failed} failed upstream); "
                               f"tokens {u.input_tokens} in, {u.output_tokens} out, {u.cached_tokens} cached")
    if a.agent is not None:
        failed = a.agent.exit_code not in (0, None) or bool(a.agent.error)
        view["agent_words"] = agent_words(a.agent, blobs)
        view["agent_outputs"] = _process_outputs("", a.agent, blobs, open_=failed)
        view["transcript"] = [_transcript_view(f) for f in transcript_files(a.agent, blobs)]
    if a.patch is not None and not a.patch.empty and not a.patch.rejected:
        blob = blobs.read(a.patch.patch_sha256)
        if blob is not None:
            text = blob.text()
            view["diffstat"] = diffstat(text)
            shown = text[:PAGE_CHARS]
            view.update(diff=[_DiffLine(_diff_class(ln), ln) for ln in shown.rstrip("\n").split("\n")],
                        diff_cut=len(shown) < len(text), diff_shown=len(shown), diff_total=len(text))
    if a.graded is not None:
        g = a.graded
        view["grading_words"] = grading_words(g, blobs)
        view["oracle_outputs"] = _process_outputs("oracle ", g.oracle, blobs, open_=not g.task_pass)
        if g.oracle is not None:
            view["failed_tests"] = failed_tests(blobs.read(g.oracle.stdout))
    if a.feedback is not None and a.feedback.visible_tests is not None:
        view["feedback_outputs"] = _process_outputs("visible tests ", a.feedback.visible_tests, blobs, open_=False)
    return view


def _yes(value: bool | None) -> str:
    return "?" if value is None else "yes" if value else "no"


@functools.lru_cache(maxsize=1)
def environment() -> Any:
    """The Jinja2 environment of the report's templates (autoescaping, every value made inert)."""
    import jinja2
    import markupsafe

    return jinja2.Environment(
        loader=jinja2.PackageLoader("sealbench", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        # The templates are the package's own and never change while it runs: no stat of the
        # file each time a page (or an include) asks for one.
        auto_reload=False,
        # Every value printed is made inert before it is escaped: a control character from the
        # agent (a bidirectional override, an escape) cannot reorder or hide what the page says.
        finalize=lambda value: (inert(value) if isinstance(value, str) and not isinstance(value, markupsafe.Markup)
                                else value),
    )


def render_task_page(run_id: str, task: TaskStory, blobs: Blobs, footer: str, *,
                     back: tuple[str, str] = ("../report.html", "")) -> str:
    """One task's page (see the module docstring); ``back`` is the link up (href, label)."""
    import markupsafe

    template = environment().get_template("task.html.j2")
    page: str = template.render(
        csp=markupsafe.Markup(CSP), css=markupsafe.Markup(CSS + _PAGE_CSS), run_id=run_id, task=task, cause=cause(task, blobs),
        attempts=[_attempt(task.attempts[n], blobs) for n in sorted(task.attempts)], yes=_yes, footer=footer,
        back_href=back[0], back_label=back[1] or f"all tasks of {run_id}",
    )
    return page


def write_task_pages(out: Path, run_id: str, tasks: Mapping[str, TaskStory], blobs: Blobs, footer: str, *,
                     back: tuple[str, str] = ("../report.html", "")) -> list[Path]:
    """Write ``tasks/<task_id>.html`` under ``out`` for every task; returns the paths."""
    written = []
    for tid, task in tasks.items():
        path = out / page_name(tid)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, render_task_page(run_id, task, blobs, footer, back=back), durable=False)
        written.append(path)
    return written


_PAGE_CSS = """
.nav{margin:0 0 .5rem}
.lead{font-size:1.1rem}
dl.caps{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}
dl.caps dt{font-weight:600}
dl.caps dd{margin:0}
section.attempt{border-top:1px solid #ccc;margin-top:1.5rem}
pre{background:#f6f6f6;padding:.5rem;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
pre.diff span{display:block}
pre.diff .add{background:#e6ffed}
pre.diff .del{background:#ffeef0}
pre.diff .hunk{color:#6f42c1}
pre.diff .meta{color:#666}
td.add{color:#22863a}
td.del{color:#b31d28}
p.alert{color:#b31d28}
table.grading th{width:16rem;text-align:left;vertical-align:top}
table.grading td{overflow-wrap:anywhere}
p.note{color:#555}
div.chat{border-left:3px solid #ccc;padding-left:.6rem;margin:.3rem 0}
div.chat .role{font-weight:600;text-transform:lowercase}
div.chat.role-assistant{border-color:#6f42c1}
div.chat.role-user{border-color:#1f6f9f}
div.chat.role-system{border-color:#888}
div.chat.role-tool{border-color:#00734f}
div.chat.role-other{border-color:#b31d28}
div.call{border:1px solid #d1d9e0;border-radius:4px;padding:.3rem .6rem;margin:.6rem 0}
div.call.failed{border-color:#b31d28}
div.call h4{margin:.2rem 0;font-size:.95rem}
div.call p.note{margin:.2rem 0}
div.toolcall{margin:.2rem 0 .2rem .6rem}
div.toolcall .role{color:#6f42c1}
"""
