"""Transcripts kept: whatever the agent leaves in SEALBENCH_TRACE_DIR is stored as blobs in the run
and in the bundle, covered by the task's trace digest, checked by verify, and shown by `show`
and the report's task page (a conversation when it is in a known chat format).

The agents run in the real bubblewrap sandbox; the trace folder is theirs, so hostile.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from chromium import CHROMIUM, load_page
from conftest import make_contract, needs_bwrap
from sealbench import attempt, show
from sealbench.agentfs import TraceCaps
from sealbench.bundle import make_bundle, verify_bundle
from sealbench.errors import VerificationFailed
from sealbench.report import write_report
from sealbench.runner import RunOptions, execute

Cli = Callable[..., tuple[int, str, str]]
TASK = "t_11_fix_off_by_one"
FIX = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"

# Writes a conversation (OpenAI chat style, with a tool call), a JSON Lines log of Anthropic-style
# messages, a plain log with a terminal escape, and a link to a host file outside the sandbox;
# then fixes the task.
AGENT = """
import json, os
t = os.environ["SEALBENCH_TRACE_DIR"]
os.makedirs(os.path.join(t, "logs"), exist_ok=True)
call = {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": '{"path": "window.py"}'}}
json.dump([{"role": "system", "content": "You repair Python code."},
           {"role": "user", "content": "Fix last_n in window.py"},
           {"role": "assistant", "content": None, "tool_calls": [call]},
           {"role": "tool", "tool_call_id": "c1", "content": "written"},
           {"role": "assistant", "content": "Rewrote last_n with a negative slice."}],
          open(os.path.join(t, "messages.json"), "w"))
with open(os.path.join(t, "logs", "turns.jsonl"), "w") as f:
    f.write(json.dumps({"role": "user", "content": [{"type": "text", "text": "hello from jsonl"}]}) + "\\n")
    f.write(json.dumps({"role": "assistant", "content": [{"type": "tool_use", "name": "bash",
                        "input": {"cmd": "ls"}}]}) + "\\n")
open(os.path.join(t, "agent.log"), "w").write("step 1\\n\\x1b[31mred step 2\\n")
os.symlink(SECRET, os.path.join(t, "secret"))
open("window.py", "w").write(FIX)
"""


def _run(pack: Path, tmp_path: Path, secret: Path, name: str = "tr") -> tuple[Path, Path]:
    script = tmp_path / f"{name}.py"
    script.write_text(f"SECRET = {str(secret)!r}\nFIX = {FIX!r}\n" + AGENT, encoding="utf-8")
    contract = tmp_path / f"{name}.json"
    make_contract(pack, contract, task_ids=[TASK], command=f"python3 {script}", mounts=[str(script)],
                  run_id=f"transcript-{name}", narration_probe=False)
    run_dir = tmp_path / name
    execute(contract, run_dir, RunOptions(progress=False))
    return contract, run_dir


def _agent_finished(run_dir: Path) -> dict[str, object]:
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == "agent_finished":
            return dict(event["payload"])
    raise AssertionError("no agent_finished")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "host-secret.txt"
    path.write_text("HOST SECRET 7f3a\n")
    return path


@needs_bwrap
def test_transcript_files_are_blobs_in_the_run_and_in_the_bundle_and_verify_checks_them(
        sealed_pack: Path, tmp_path: Path, secret: Path) -> None:
    _, run_dir = _run(sealed_pack, tmp_path, secret)
    payload = _agent_finished(run_dir)
    files = {f["path"]: f for f in payload["transcript_files"]}  # type: ignore[attr-defined]
    assert sorted(files) == ["agent.log", "logs/turns.jsonl", "messages.json", "secret"]
    kept = files["messages.json"]
    assert kept["type"] == "f" and kept["blob"] == kept["sha256"]
    assert (run_dir / "blobs" / kept["blob"].removeprefix("sha256:")).read_bytes().startswith(b'[{"role"')
    # The trace (the task's journal lines) lists them: the task's trace digest covers them.
    trace = json.loads((run_dir / "traces" / f"{TASK}.json").read_text())
    assert any(line["payload"].get("transcript_files") for line in trace)
    bundle = make_bundle(run_dir, tmp_path / "bundles")
    assert (bundle / "blobs" / kept["blob"].removeprefix("sha256:")).is_file()
    verify_bundle(bundle)
    # A transcript blob edited in the bundle fails verify, named.
    blob = bundle / "blobs" / kept["blob"].removeprefix("sha256:")
    blob.write_bytes(blob.read_bytes().replace(b"negative slice", b"positive slice"))
    with pytest.raises(VerificationFailed) as failed:
        verify_bundle(bundle)
    assert any(kept["blob"].removeprefix("sha256:") in p and "does not match" in p for p in failed.value.problems)


@needs_bwrap
def test_trace_link_to_a_host_file_is_listed_never_followed(sealed_pack: Path, tmp_path: Path, secret: Path) -> None:
    _, run_dir = _run(sealed_pack, tmp_path, secret, "link")
    entry = next(f for f in _agent_finished(run_dir)["transcript_files"] if f["path"] == "secret")  # type: ignore[attr-defined]
    assert entry["type"] == "l" and "blob" not in entry and entry["not_kept"] == "a symbolic link (never followed)"
    for blob in (run_dir / "blobs").iterdir():
        assert b"HOST SECRET" not in blob.read_bytes()


@needs_bwrap
def test_trace_files_past_the_caps_are_listed_without_their_bytes(
        sealed_pack: Path, tmp_path: Path, secret: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attempt, "TRACE_CAPS", TraceCaps(files=1, file_bytes=400, total_bytes=1000, listed=3))
    _, run_dir = _run(sealed_pack, tmp_path, secret, "capped")
    payload = _agent_finished(run_dir)
    files = payload["transcript_files"]
    assert [f["path"] for f in files] == ["agent.log", "logs/turns.jsonl", "messages.json"]  # type: ignore[attr-defined]
    assert payload["transcript_files_omitted"] == 1
    assert "blob" in files[0] and files[0]["bytes"] == len("step 1\n\x1b[31mred step 2\n")  # type: ignore[index]
    assert files[1]["not_kept"] == "past the 1 files kept"  # type: ignore[index]
    assert files[2]["not_kept"].startswith("larger than the 400 bytes kept of one file")  # type: ignore[index]


@needs_bwrap
def test_show_renders_a_chat_transcript_as_a_conversation_and_json_lists_the_files(
        sealed_pack: Path, tmp_path: Path, secret: Path, cli: Cli) -> None:
    _, run_dir = _run(sealed_pack, tmp_path, secret, "shown")
    code, out, _ = cli("show", run_dir, TASK)
    assert code == 0
    assert "messages.json: a file" in out and "a conversation of 5 message(s)" in out
    assert "[system] You repair Python code." in out
    assert "[tool call] write_file(" in out and "[tool] written" in out
    assert "[user] hello from jsonl" in out and '[tool use] bash {"cmd": "ls"}' in out
    assert "| \\x1b[31mred step 2" in out and "\x1b" not in out  # a raw log, inert
    assert "secret: a link (not kept: a symbolic link (never followed))" in out
    code, out, _ = cli("show", run_dir, TASK, "--json")
    files = {f["path"]: f for f in json.loads(out)["task"]["attempts"][0]["transcript"]}
    assert files["messages.json"]["format"] == "chat"
    assert files["messages.json"]["messages"][-1] == {"role": "assistant",
                                                      "text": "Rewrote last_n with a negative slice."}
    assert files["agent.log"]["format"] == "raw" and "red step 2" in files["agent.log"]["text"]["text"]
    assert files["secret"]["format"] is None


@pytest.mark.parametrize(("data", "roles"), [
    (b'[{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "text", "text": "b"}]}]',
     ["user", "assistant"]),
    (b'{"info": {}, "messages": [{"role": "system", "content": "s"}], "trajectory_format": "mini-swe-agent-1"}',
     ["system"]),
    (b'{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}\n', ["user", "assistant"]),
    (b'[{"role": "user"}]', None),
    (b'[1, 2]', None),
    (b"plain text log", None),
    (b"[]", None),
])
def test_known_chat_formats_are_read_as_conversations(data: bytes, roles: list[str] | None) -> None:
    parsed = show.chat_messages(data)
    assert (None if parsed is None else [m.role for m in parsed[0]]) == roles


needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")


@needs_bwrap
@needs_chromium
def test_a_transcript_s_messages_show_on_the_task_page_in_headless_chromium(
        sealed_pack: Path, tmp_path: Path, secret: Path) -> None:
    _, run_dir = _run(sealed_pack, tmp_path, secret, "page")
    _, html = write_report(run_dir, tmp_path / "report")
    sent = tmp_path / "sent"
    shutil.copytree(html.parent, sent)
    page = load_page(sent / "tasks" / f"{TASK}.html", tmp_path / "chromium")
    assert page.errors == [] and page.warnings == [], (page.errors, page.warnings)
    assert [u for u in page.requests if not u.startswith(("file:", "data:"))] == []
    assert "Transcript" in page.text
    assert "You repair Python code." in page.text and "Rewrote last_n with a negative slice." in page.text
    assert "hello from jsonl" in page.text


# --- the agent's own word on how it ended ---------------------------------------------------

ENDING_AGENT = """
import json, os, sys
t = os.environ["SEALBENCH_TRACE_DIR"]
os.makedirs(t, exist_ok=True)
if sys.argv[1] != "none":
    open(os.path.join(t, "sealbench-ending.json"), "w").write(sys.argv[1])
open("window.py", "w").write(FIX if sys.argv[2] == "fix" else "")
"""


def _ending_run(pack: Path, tmp_path: Path, record: str, fix: bool, name: str) -> tuple[dict[str, object], dict]:
    script = tmp_path / f"{name}.py"
    script.write_text(f"FIX = {FIX!r}\n" + ENDING_AGENT, encoding="utf-8")
    contract = tmp_path / f"{name}.json"
    import shlex
    make_contract(pack, contract, task_ids=[TASK], mounts=[str(script)], run_id=f"ending-{name}",
                  command=shlex.join(["python3", str(script), record, "fix" if fix else "break"]),
                  narration_probe=False)
    run_dir = tmp_path / name
    execute(contract, run_dir, RunOptions(progress=False))
    card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
    return _agent_finished(run_dir), card


@needs_bwrap
def test_the_agent_s_own_ending_is_in_the_scorecard_beside_the_verdict_that_alone_decides(
        sealed_pack: Path, tmp_path: Path) -> None:
    said = json.dumps({"exit_code": 7, "ending": "Submitted", "said": []})
    finished, card = _ending_run(sealed_pack, tmp_path, said, fix=False, name="says-done")
    # The agent says it submitted; the hidden tests say it failed, and they decide. The exit
    # code on the scorecard is the one the harness saw, not the one the agent wrote down.
    assert finished["agent_ending"] == {"exit_code": 7, "ending": "Submitted", "said": []}
    assert card["outcome"] == "fail" and card["agent_ending"] == {"exit_code": 0, "ending": "Submitted", "said": []}
    gave_up = json.dumps({"exit_code": 1, "ending": None, "said": ["edit did not apply"]})
    _, card = _ending_run(sealed_pack, tmp_path, gave_up, fix=True, name="says-failed")
    assert card["outcome"] == "pass" and card["agent_ending"]["said"] == ["edit did not apply"]


@needs_bwrap
@pytest.mark.parametrize("record", ["none", "not json", '{"exit_code": "0", "ending": null, "said": []}',
                                    '{"exit_code": 0, "ending": null}', '["Submitted"]',
                                    '{"exit_code": 0, "ending": null, "said": [1]}',
                                    '{"exit_code": 0, "ending": null, "said": ["\\udcff"]}', "[" * 60_000],
                         ids=["none", "not-json", "string-code", "no-said", "a-list", "said-a-number",
                              "exploit-lone-surrogate", "exploit-nested-past-the-recursion-limit"])
def test_an_agent_that_says_nothing_or_garbles_its_ending_gets_no_ending_and_keeps_old_bytes(
        sealed_pack: Path, tmp_path: Path, record: str) -> None:
    finished, card = _ending_run(sealed_pack, tmp_path, record, fix=True, name="quiet")
    assert "agent_ending" not in finished and "agent_ending" not in card
    assert card["outcome"] == "pass"


def test_exploit_agent_writes_an_ending_the_journal_cannot_hold_or_python_cannot_parse() -> None:
    # A lone surrogate passes json.loads but not the journal's UTF-8; deep nesting raises
    # RecursionError: either would have crashed the run or made the agent's failure the harness's.
    assert attempt.agent_ending(b'{"exit_code": 0, "ending": null, "said": ["\\udcff"]}') is None
    assert attempt.agent_ending(b'{"exit_code": 0, "ending": "\\ud800", "said": []}') is None
    assert attempt.agent_ending(b"[" * 60_000) is None
    assert attempt.agent_ending(b'{"exit_code": 99999999999999999999, "ending": null, "said": []}') is None


def test_a_journal_event_that_cannot_be_written_is_a_harness_error_and_writes_nothing(tmp_path: Path) -> None:
    from sealbench import events as ev
    from sealbench.errors import HarnessError
    from sealbench.journal import Journal

    path = tmp_path / "journal.jsonl"
    journal = Journal.create(path)
    journal.append(ev.RunStarted(run_id="r"))
    size = path.stat().st_size
    with pytest.raises(HarnessError, match="could not be written as JSON"):
        journal.append(ev.AgentFinished(task_id="t", attempt=1, error="\udcff"))
    assert path.stat().st_size == size


def test_an_ending_record_is_read_strictly_and_cut_to_size() -> None:
    long = json.dumps({"exit_code": None, "ending": "x" * 2000, "said": ["y" * 900] * 50}).encode()
    ending = attempt.agent_ending(long)
    assert ending is not None and len(ending.ending or "") == 500 and len(ending.said) == 20
    assert attempt.agent_ending(b" " * (65 << 10)) is None
    assert attempt.agent_ending(b'{"exit_code": true, "ending": null, "said": []}') is None
