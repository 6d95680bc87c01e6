"""The model conversation in ``sealbench show`` and on the report's task page.

A real run first: ``gateway_agent.py`` in the bubblewrap sandbox holds three tool-using
conversations through the gateway (OpenAI chat streamed, Responses, Anthropic streamed) with
the scripted model server, and makes one request the gateway refuses; ``show`` and ``report``
then tell them. Then hostile bodies (script tags, ``</details>``, ``javascript:`` URLs, event
handlers, bidirectional and control characters in messages, tool calls, model and endpoint
names) are rendered for the terminal and, in headless Chromium with the network shut, as a page:
nothing runs, nothing loads, every byte reads as text.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chromium import CHROMIUM, load_page
from conftest import LOCK_TIME, needs_bwrap
from sealbench import events as ev
from sealbench import model_api
from sealbench.blobs import Blobs
from sealbench.contract import lock_contract, new_contract
from sealbench.digest import sha256_bytes
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec, ModelEndpoint
from sealbench.journal import read_chain
from sealbench.model_stub import StubReply, StubServer, StubToolCall, StubUsage, start
from sealbench.pack import load_pack
from sealbench.report import write_report
from sealbench.runner import RunOptions, execute
from sealbench.show import Shown, call_words, task_lines
from sealbench.stories import StoryBook
from sealbench.task_pages import render_task_page

REPO = Path(__file__).resolve().parents[1]
TASK = "t_11_fix_off_by_one"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"
AGENT = Path(__file__).resolve().parent / "gateway_agent.py"
KEY_ENV = "SEALBENCH_TEST_MODEL_KEY"
SYSTEM = "You are a careful engineer. Change as little as you can."
CONTEXT = "\n".join(f"context line {n}: the slice must keep the last n items" for n in range(1, 31))

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed "
                                    "(Debian: apt-get install chromium; `make setup` installs it)")


def _read(path: str) -> StubToolCall:
    return StubToolCall(name="read_file", arguments={"path": path})


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubServer]:
    key = "sk-test-" + secrets.token_hex(20)
    monkeypatch.setenv(KEY_ENV, key)
    usage = StubUsage(input_tokens=400, output_tokens=40, cached_tokens=300)
    server = start([
        StubReply(model="stub-model", text="Reading the file first.", tool_calls=[_read("window.py")], usage=usage),
        StubReply(model="stub-model", tool_calls=[StubToolCall(name="write_file", arguments={
            "path": "window.py", "content": FIX})], usage=usage),
        StubReply(model="stub-model", text="Fixed: last_n keeps the last n items, and none for n <= 0.", usage=usage),
        StubReply(model="resp-model", tool_calls=[_read("window.py")], usage=usage),
        StubReply(model="resp-model", text="It reads as fixed.", usage=usage),
        StubReply(model="claude-stub", text="Let me look.", tool_calls=[_read("window.py")], usage=usage),
        StubReply(model="claude-stub", text="Done.", usage=usage),
    ], key=key)
    yield server
    server.close()


def _run(sealed_pack: Path, tmp_path: Path, stub: StubServer) -> Path:
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    shutil.copy(AGENT, agent_dir / "agent.py")
    ask = {"system": SYSTEM, "content": "Fix window.py: last_n(items, 0) must return [].\n" + CONTEXT}
    plan = {"1": [{"do": "converse", "style": "chat", "endpoint": "openai", "model": "stub-model", "stream": True, **ask},
                  {"do": "converse", "style": "responses", "endpoint": "responses", "model": "resp-model", **ask},
                  {"do": "converse", "style": "anthropic", "endpoint": "anthropic", "model": "claude-stub",
                   "stream": True, **ask},
                  {"do": "chat", "model": "not-declared"}]}
    (agent_dir / "plan.json").write_text(json.dumps(plan))
    contract_file = tmp_path / "contract.json"
    pack = load_pack(sealed_pack)
    contract, _ = new_contract(pack, contract_file, [TASK], host="test machine", max_attempts=1,
                               agent=AgentSpec(label="gateway test agent", command=f"python {agent_dir}/agent.py",
                                               mounts=[str(agent_dir)]), oracle_validity="unavailable")
    endpoints = [
        ModelEndpoint(name="openai", style="openai-chat", base_url=stub.url + "/v1", models=["stub-model"],
                      key_env=KEY_ENV),
        ModelEndpoint(name="responses", style="openai-responses", base_url=stub.url + "/v1", models=["resp-model"],
                      key_env=KEY_ENV),
        ModelEndpoint(name="anthropic", style="anthropic-messages", base_url=stub.url, models=["claude-stub"],
                      key_env=KEY_ENV),
    ]
    contract = contract.model_copy(update={"model_endpoints": endpoints})
    write_atomic(contract_file, model_json(lock_contract(contract, "conversation", LOCK_TIME, pack)))
    run_dir = tmp_path / "run"
    execute(contract_file, run_dir, RunOptions(progress=False))
    return run_dir


def _block(out: str, start: str, end: str) -> str:
    """The lines of ``out`` from the one holding ``start`` to the one before ``end``."""
    return out[out.index(start):out.index(end, out.index(start))]


@needs_bwrap
def test_show_and_report_tell_a_real_agent_s_model_conversation(
        sealed_pack: Path, tmp_path: Path, stub: StubServer, cli: Callable[..., tuple[int, str, str]]) -> None:
    run_dir = _run(sealed_pack, tmp_path, stub)
    calls = [e["payload"] for e in read_chain(run_dir / "journal.jsonl").events if e["kind"] == "model_call"]
    assert [(c["model"], c["status"]) for c in calls] == [("stub-model", 200)] * 3 + [("resp-model", 200)] * 2 + [
        ("claude-stub", 200)] * 2 + [("not-declared", 403)]
    code, out, _ = cli("show", run_dir, TASK)
    assert code == 0 and f"{TASK}: pass" in out
    assert ("model calls: 8 (1 refused, 0 failed upstream); tokens 2800 in, 280 out, 2100 cached; "
            "the conversation:") in out
    first = _block(out, "#0 openai stub-model: 200", "#1 ")
    assert "400/40/300 tokens, streamed" in first
    assert "request (openai-chat), tools offered: write_file, read_file:" in first
    assert f"[system] {SYSTEM}" in first and "[user] Fix window.py: last_n(items, 0) must return []." in first
    assert "... 19 more lines; --full shows all" in first  # the long prompt, folded
    assert "reply (openai-chat stream, stub-model), stopped: tool_calls:" in first
    assert "[assistant] Reading the file first." in first and "[tool call] read_file (call_1_0)" in first
    second = _block(out, "#1 openai stub-model", "#2 ")
    # Only what the request added: the tool's result, not the prompt again.
    assert ("request (openai-chat), tools offered: write_file, read_file: call #0's 2 message(s) and its reply, "
            "then:") in second
    assert '[tool call_1_0] """Sliding windows over lists."""' in second and "context line" not in second
    assert "[tool call] write_file (call_2_0)" in second and "content:\n" in second
    assert "return items[-n:] if n > 0 else []" in second  # the arguments' code, as code
    assert "[assistant] Fixed: last_n keeps the last n items" in _block(out, "#2 ", "#3 ")
    responses = _block(out, "#3 responses resp-model", "#5 ")
    assert "request (openai-responses), tools offered: write_file, read_file:" in responses
    assert "reply (openai-responses, resp-model), stopped: completed:" in responses
    assert "[tool call] read_file (call_4_0)" in responses and "[tool call_4_0] def last_n" in responses
    assert responses.count("[tool call] read_file (call_4_0)") == 1  # the reply sent back is not shown twice
    anthropic = _block(out, "#5 anthropic claude-stub", "#7 ")
    assert "request (anthropic-messages)" in anthropic and "reply (anthropic-messages stream, claude-stub)" in anthropic
    assert "[tool call] read_file (toolu_6_0)" in anthropic and "[tool toolu_6_0] def last_n" in anthropic
    assert "[assistant] Done." in anthropic and anthropic.count("Let me look.") == 1
    refused = out[out.index("#7 openai not-declared"):]
    assert "403" in refused and "refused by the gateway: model 'not-declared' is not declared" in refused
    assert "[user] fix it" in refused and "reply" not in refused.split("\n  ")[0]
    # --full unfolds; --json carries the conversation for scripts.
    code, full, _ = cli("show", run_dir, TASK, "--full")
    assert code == 0 and "more lines; --full shows all" not in full and "context line 30:" in full
    code, raw, _ = cli("show", run_dir, TASK, "--json")
    conversation = json.loads(raw)["task"]["attempts"][0]["conversation"]
    assert [x["index"] for x in conversation] == list(range(8))
    assert [m["role"] for m in conversation[0]["added"]] == ["system", "user"]
    assert conversation[1]["added"][0]["role"] == "tool" and conversation[1]["added"][0]["tool_call_id"] == "call_1_0"
    assert conversation[1]["reply"]["tool_calls"][0]["name"] == "write_file"
    # The report's task page: the same conversation, in a real browser, with nothing loaded or run.
    _, html_path = write_report(run_dir, tmp_path / "report")
    page_path = html_path.parent / "tasks" / f"{TASK}.html"
    html = page_path.read_text(encoding="utf-8")
    assert "<h3>Model conversation</h3>" in html and html.count('<div class="call') == 8
    assert '<div class="call failed">' in html  # the refused call
    if CHROMIUM is None:
        return
    page = load_page(page_path, tmp_path / "chromium", actions=(
        "document.querySelector('section.conversation').getBoundingClientRect().top + window.scrollY",
        "document.querySelectorAll('section.conversation details').length"))
    _clean(page)
    top, folded = page.results
    assert folded >= 3  # the long prompt of each conversation's first call
    assert "Reading the file first." in page.text and "tool call read_file call_1_0" in page.text
    assert "tokens 2800 in, 280 out, 2100 cached" in page.text
    if os.environ.get("SEALBENCH_UPDATE_SCREENSHOT") == "1":
        _crop(page.screenshot, REPO / "docs" / "report-conversation.png", int(top) - 10, 1500)


def _crop(png: bytes, dest: Path, top: int, height: int) -> None:
    import matplotlib.image as mpimg

    mpimg.imsave(dest, mpimg.imread(io.BytesIO(png), format="png")[max(0, top):top + height])


def _clean(page: Any) -> None:
    assert page.errors == [] and page.warnings == [], (page.errors, page.warnings, page.stderr[-2000:])
    assert re.findall(r":CONSOLE[:(]", page.stderr) == []
    assert [u for u in page.requests if not u.startswith(("file:", "data:"))] == []


# --- hostile bodies ---------------------------------------------------------------------------------

SCRIPT = "<script>window.__pwned = 1</script>"
TAGS = (f"{SCRIPT}</pre></details></div><img src=x onerror=\"window.__pwned = 2\">"
        "<a href=\"javascript:window.__pwned = 3\">click</a><iframe src=\"https://example.com/\"></iframe>"
        "<link rel=stylesheet href=\"https://example.com/x.css\"><meta http-equiv=\"refresh\" content=\"0;url=https://"
        "example.com/\"><style>body{display:none}</style><svg onload=\"window.__pwned = 4\"></svg>")
BIDI = "\u202eevil\u202c \u2066isolated\u2069 \x1b[2J\x1b]0;title\x07 \x00nul \r\x08"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
LONG = "\n".join([f"line {n} </details></summary>{SCRIPT}" for n in range(40)])


def _hostile(tmp_path: Path) -> tuple[Shown, str]:
    """A task whose one attempt made hostile model calls, journaled as the gateway would."""
    (tmp_path / "blobs").mkdir(parents=True)

    def blob(data: bytes) -> str:
        digest = sha256_bytes(data)
        (tmp_path / "blobs" / digest.removeprefix("sha256:")).write_bytes(data)
        return digest

    request = {"model": "m", "tools": [{"type": "function", "function": {"name": TAGS}}], "messages": [
        {"role": "system", "content": f"system {BIDI} {TAGS}"},
        {"role": f"\"><script>window.__pwned = 5</script>{BIDI}", "content": "a role of its own"},
        {"role": "user", "content": [{"type": "text", "text": f"user {TAGS} {BIDI}"},
                                     {"type": "image_url", "image_url": {"url": "javascript:window.__pwned = 6"}}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"id{BIDI}", "type": "function", "function": {
            "name": f"tool{TAGS}{BIDI}", "arguments": json.dumps({"path": f"{TAGS}{BIDI}", "content": LONG})}}]},
        {"role": "tool", "tool_call_id": f"id{BIDI}", "content": f"result {TAGS}{BIDI}\n{LONG}"}]}
    calls = [model_api.ToolCall(f"c{BIDI}", f"reply-tool{TAGS}", {"cmd": TAGS + BIDI})]
    streamed = b"".join(model_api.reply_stream("openai-chat", f"model{TAGS}", [f"reply {TAGS}", BIDI], model_api.Usage(
        1, 2, 0), "r", calls))
    anthropic = json.dumps(model_api.reply_body("anthropic-messages", f"m{BIDI}", f"{TAGS}{BIDI}", model_api.NO_USAGE,
                                                "r", calls)).encode()
    unknown = f"<html>{TAGS}{BIDI}</html>".encode()
    names: dict[str, Any] = {"endpoint": f"end{TAGS}{BIDI}", "model": f"model{TAGS}{BIDI}"}
    events: list[ev.Event] = [
        ev.TaskStarted(task_id=TASK, max_attempts=1, wall_clock_s=60),
        ev.AttemptStarted(task_id=TASK, attempt=1),
        ev.ModelCall(task_id=TASK, attempt=1, index=0, status=200, latency_ms=3, streamed=True, request=blob(
            json.dumps(request).encode()), request_bytes=10, response=blob(streamed), response_bytes=len(streamed),
            **names),
        ev.ModelCall(task_id=TASK, attempt=1, index=1, status=200, request=blob(json.dumps(
            {**request, "system": TAGS, "messages": request["messages"][:1]}).encode()), request_bytes=10,
            response=blob(anthropic), response_bytes=len(anthropic), **names),
        ev.ModelCall(task_id=TASK, attempt=1, index=2, status=502, request=blob(unknown), request_bytes=len(unknown),
                     response=blob(unknown), response_bytes=len(unknown), error=f"upstream said {TAGS}{BIDI}", **names),
        ev.ModelCall(task_id=TASK, attempt=1, index=3, status=403, refused=f"refused {TAGS}{BIDI}", **names),
    ]
    book = StoryBook([TASK])
    for e in events:
        book.add(ev.Line(seq=0, time="", mono_ms=None, boot_id=None, event=e, raw={}))
    return Shown(tmp_path, "hostile", book.tasks, Blobs(tmp_path), "a hostile fixture"), streamed.decode()


def test_hostile_model_calls_print_inert_in_the_terminal(tmp_path: Path) -> None:
    shown, _ = _hostile(tmp_path)
    for full in (False, True):
        out = "\n".join(task_lines(shown, TASK, full=full))
        assert CONTROL.search(out.replace("\n", "").replace("\t", "")) is None
        assert "\\u202eevil\\u202c" in out and "\\x1b[2J" in out
        assert "reply (openai-chat stream" in out and "[tool call] reply-tool<script>" in out
        assert "format not recognised" in out and "refused by the gateway: refused <script>" in out


@needs_chromium
def test_hostile_model_calls_on_the_task_page_run_nothing_and_load_nothing(tmp_path: Path) -> None:
    shown, _ = _hostile(tmp_path / "run")
    html = render_task_page("hostile", shown.tasks[TASK], shown.blobs, "footer")
    assert "<script>" not in html and "onerror=" not in html.replace("onerror=&#34;", "")
    assert CONTROL.search(html.replace("\n", "")) is None
    page_path = tmp_path / "page.html"
    page_path.write_text(html, encoding="utf-8")
    page = load_page(page_path, tmp_path / "chromium", actions=(
        "typeof window.__pwned",
        "document.scripts.length",
        "Array.from(document.querySelectorAll('*')).filter(e => Array.from(e.attributes)"
        ".some(a => a.name.startsWith('on'))).length",
        "document.querySelectorAll('a[href^=\"javascript\"], iframe, img, link, svg, object, embed').length",
        "document.querySelectorAll('style').length + ' ' + document.querySelectorAll('meta[http-equiv]').length",
        "Array.from(document.querySelectorAll('details pre')).some(p => p.textContent.includes("
        "'line 39 </details></summary><script>'))",
        "document.querySelectorAll('section.conversation div.call').length",
        "Array.from(document.querySelectorAll('div.chat')).map(d => d.className)",
    ))
    _clean(page)
    pwned, scripts, handlers, loads, styles, folded_whole, calls, classes = page.results
    assert (pwned, scripts, handlers, loads) == ("undefined", 0, 0, 0)
    assert styles == "1 1"  # the page's own style sheet and its Content-Security-Policy, nothing more
    assert folded_whole and calls == 4
    assert set(classes) <= {f"chat role-{r}" for r in ("system", "user", "assistant", "tool", "other")}
    assert "role-other" in " ".join(classes)
    assert "\\u202eevil\\u202c" in page.text and "\u202e" not in page.text and "\x1b" not in page.text
    assert SCRIPT in page.text  # shown as the text it is


def test_a_call_s_line_names_its_refusal_cap_upstream_error_and_replay() -> None:
    base: dict[str, Any] = {"task_id": TASK, "attempt": 1, "index": 4, "endpoint": "openai", "model": "m"}
    capped = ev.ModelCall(**base, status=429, latency_ms=0, refused="the task's budget cap is reached",
                          cap="max_model_calls")
    assert call_words(capped) == ("#4 openai m: 429 in 0 ms, no usage reported (refused by the gateway at the "
                                  "max_model_calls cap: the task's budget cap is reached)")
    failed = ev.ModelCall(**base, status=502, error="the model endpoint failed: ConnectionResetError")
    assert call_words(failed) == "#4 openai m: 502, no usage reported (the model endpoint failed: ConnectionResetError)"
    replayed = ev.ModelCall(**base, status=200, input_tokens=3, output_tokens=4, cached_tokens=0, streamed=True,
                            replayed=True)
    assert call_words(replayed) == "#4 openai m: 200, 3/4/0 tokens, streamed, replayed"
