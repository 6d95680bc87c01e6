"""``sealbench demo``: the whole flow on the embedded sample pack, refusals included."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

from .bundle import make_bundle, verify_bundle
from .compare import compare
from .contract import load_contract, lock_contract, new_contract
from .errors import Refusal, UsageError
from .files import model_json, write_atomic
from .formats import AgentSpec
from .model_stub import StubReply
from .pack import check_pack, seal_pack
from .render import print_run_summary
from .report import write_report
from .runner import RunOptions, execute
from .score import parse_events, score

EXAMPLES = Path(__file__).parent / "examples"


def _say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _contract(pack_dir: Path, out: Path, run_id: str, label: str, command: str, mounts: list[str],
              max_attempts: int | None = None) -> Path:
    pack = check_pack(pack_dir)
    contract, _ = new_contract(pack, out, host="this machine (demo)", model_access="none: scripted agents",
                               agent=AgentSpec(label=label, command=command, mounts=mounts),
                               max_attempts=max_attempts, oracle_validity="unavailable")
    write_atomic(out, model_json(contract))
    locked = lock_contract(contract, run_id, datetime.now(UTC), pack)
    write_atomic(out, model_json(locked))
    print(f"locked {run_id}: {label} ({command}), max_attempts {locked.budget.max_attempts if locked.budget else '?'}")
    return out


def run_demo(root: Path, sandbox: str = "auto") -> int:
    """Seal the sample pack, run three agents under locked contracts, show the refusals."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    pack_dir = root / "pack"
    shutil.copytree(EXAMPLES / "sample_pack", pack_dir)
    agents_dir = root / "agents"
    shutil.copytree(EXAMPLES / "agents", agents_dir)
    _say("seal the sample pack (fills the placeholder hidden_tests_sha256)")
    pack = seal_pack(pack_dir)
    print(f"sealed {len(pack.tasks)} tasks: {pack.sealed_digest}")

    agent_script = (agents_dir / "two_attempts.py").resolve()
    runs = [
        ("demo-reference", "reference solution", "builtin:reference", [], None),
        ("demo-noop", "changes nothing", "builtin:noop", [], None),
        ("demo-two-attempts", "scripted repairer v1", f"python {agent_script}", [str(agents_dir.resolve())], None),
        ("demo-two-attempts-cap1", "scripted repairer v1", f"python {agent_script}", [str(agents_dir.resolve())], 1),
    ]
    code = 0
    # The demo's runs are recorded in an index of its own, so running the demo again starts afresh.
    index = root / "runs-index"
    for run_id, label, command, mounts, cap in runs:
        _say(f"{run_id}: lock a contract, run, score")
        cfile = _contract(pack_dir, root / f"{run_id}.contract.json", run_id, label, command, mounts, cap)
        execute(cfile, root / "runs" / run_id, RunOptions(sandbox=sandbox, progress=False, runs_index=index))
        rc = print_run_summary(cfile, root / "runs" / run_id)
        code = code or rc

    _say("probe: the narration probe on the same ids (summary only; the scripted agent edits, so it fails)")
    for run_id, *_ in runs[:3]:
        execute(root / f"{run_id}.contract.json", root / "runs" / run_id,
                RunOptions(sandbox=sandbox, progress=False, jobs=4), probe=True)
        summary = json.loads((root / "runs" / run_id / "narration_probe.json").read_text())
        print(f"  {run_id}: {summary['sentence']}")

    _say("bundle and verify each run, report one")
    bundles = []
    for run_id, *_ in runs[:3]:
        bundle = make_bundle(root / "runs" / run_id, root / "bundles")
        verify_bundle(bundle)
        bundles.append(bundle)
        print(f"  {bundle}: verifies")
    _md, html = write_report(bundles[2], root / "reports" / "demo-two-attempts")
    print(f"  report: {html}")

    _say("compare: same slice, same budget; five tasks cannot separate agents, so it says tie")
    # The built-in agents ran in-process and the scripted one in bubblewrap: allowed, with its caveat.
    for line in compare(bundles, allow_mixed_isolation=True).lines():
        print(f"  {line}")

    _say("refusals: what sealbench will not print")
    contract = load_contract(root / "demo-two-attempts.contract.json")
    good = [{"task_id": t, "task_pass": True, "abstain": False} for t in contract.task_ids]
    cases = {
        "an unlocked contract": (contract.model_copy(update={"locked_at": None, "run_id": None}), good),
        "a contract edited after lock": (contract.model_copy(update={"seed": 7}), good),
        "a dropped task (denominator drift)": (contract, good[1:]),
        "a silent rerun": (contract, [*good, good[0]]),
        "a post-lock exclusion": (contract, [{**good[0], "excluded_after_lock": True}, *good[1:]]),
        "an abstain that passes": (contract, [{**good[0], "abstain": True}, *good[1:]]),
    }
    for what, (c, events) in cases.items():
        try:
            score(c, parse_events(events))
            print(f"  {what}: NOT refused (this is a bug)")
            code = 1
        except Refusal as e:
            print(f"  {what}: refused: {e}")
    try:
        execute(root / "demo-noop.contract.json", root / "runs" / "demo-noop-again",
                RunOptions(sandbox=sandbox, progress=False, runs_index=index))
        print("  a second run of a locked run_id: NOT refused (this is a bug)")
        code = 1
    except Refusal as e:
        print(f"  a second run of a locked run_id (best of two): refused: {e}")
    print(f"\ndemo files are in {root}/", file=sys.stderr)
    return code


DEMO_MODEL = "demo-model"
DEMO_KEY_ENV = "SEALBENCH_DEMO_MODEL_KEY"
# A line of each task's prompt: the scripted model tells the two tasks apart by it.
_PROMPT_MARKS = {"t_11_fix_off_by_one": "`last_n(items, n)` in `window.py`",
                 "t_03_rename_helper": "The helper `calc` in `billing.py`"}


def _for_task(replies: list[StubReply], task: str, workspace: Path) -> list[StubReply]:
    """The preset's canned replies for ``task``: served only to requests that carry its prompt,
    with ``{workspace}`` filled in."""
    mark = json.dumps(_PROMPT_MARKS[task])[1:-1]  # as it appears in a JSON request body
    out = []
    for reply in replies:
        calls = [c.model_copy(update={"arguments": json.loads(json.dumps(c.arguments).replace(
            "{workspace}", json.dumps(str(workspace))[1:-1]))}) for c in reply.tool_calls]
        out.append(reply.model_copy(update={"when": mark, "tool_calls": calls,
                                            "text": reply.text.replace("{workspace}", str(workspace))}))
    return out


def run_agent_demo(root: Path, name: str, sandbox: str = "auto") -> int:
    """``sealbench demo --agent NAME``: install the preset (cached), run it in the sandbox over
    two tasks of the sample pack, through the model gateway, against ``model-stub`` with the
    preset's canned replies (one task fixed, one not); then score, bundle, verify, report."""
    import os
    import secrets

    from .model_stub import start
    from .presets import DEMO_FIXED, DEMO_MISSED, agent_for, endpoint_for, install, load_preset

    root = root.resolve()  # {workspace} must be absolute: some agents' tools take no other path
    preset = load_preset(name)
    if preset.demo is None:
        raise UsageError(f"agent preset {name} has no canned replies for the demo ([demo] in its preset file)")
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    _say(f"install {name} {preset.install.version} ({preset.install.registry} {preset.install.package}; cached)")
    done = install(name)
    print(f"installed in {done.root} ({done.bytes / 1e6:.0f} MB)")
    pack_dir = root / "pack"
    shutil.copytree(EXAMPLES / "sample_pack", pack_dir)
    pack = seal_pack(pack_dir)
    run_id = f"demo-{name}"
    run_dir = root / "runs" / run_id
    work = run_dir / "work"
    script = [*_for_task(preset.demo.fix, DEMO_FIXED, work / DEMO_FIXED / "ws"),
              *_for_task(preset.demo.miss, DEMO_MISSED, work / DEMO_MISSED / "ws")]
    key = "sk-demo-" + secrets.token_hex(16)
    before = os.environ.get(DEMO_KEY_ENV)
    os.environ[DEMO_KEY_ENV] = key  # the gateway reads the key by this name; the sandbox never sees it
    stub = start(script, key=key)
    try:
        _say(f"{run_id}: {name} in the sandbox, through the gateway, against a scripted model "
             f"({stub.url}; it fixes {DEMO_FIXED}, not {DEMO_MISSED})")
        agent, _ = agent_for(name, DEMO_MODEL)
        cfile = root / f"{run_id}.contract.json"
        contract, _ = new_contract(pack, cfile, [DEMO_FIXED, DEMO_MISSED], host="this machine (demo)",
                                   model_access=f"scripted model-stub as {DEMO_MODEL}", agent=agent, max_attempts=1,
                                   oracle_validity="unavailable", narration_probe=False)
        suffix = "" if preset.api_style == "anthropic-messages" else "/v1"
        endpoint = endpoint_for(preset, DEMO_MODEL, base_url=stub.url + suffix, key_env=DEMO_KEY_ENV)
        contract = contract.model_copy(update={"model_endpoints": [endpoint]})
        write_atomic(cfile, model_json(lock_contract(contract, run_id, datetime.now(UTC), pack)))
        execute(cfile, run_dir, RunOptions(sandbox=sandbox, progress=False, keep_work=True,
                                           runs_index=root / "runs-index"))
    finally:
        stub.close()
        if before is None:
            os.environ.pop(DEMO_KEY_ENV, None)
        else:
            os.environ[DEMO_KEY_ENV] = before
    code = print_run_summary(cfile, run_dir)
    for line in (run_dir / "scorecards.jsonl").read_text(encoding="utf-8").splitlines():
        card = json.loads(line)
        said = card.get("agent_ending") or {}
        words = ", ".join(([f"status {said['ending']}"] if said.get("ending") else []) + said.get("said", [])) \
            or "nothing"
        print(f"  {card['task_id']}: the hidden tests say {card['outcome']}; the agent says {words} "
              f"(exit {said.get('exit_code')})")
    _say("bundle, verify, report")
    bundle = make_bundle(run_dir, root / "bundles")
    verify_bundle(bundle)
    print(f"  {bundle}: verifies")
    _md, html = write_report(bundle, root / "reports" / run_id)
    print(f"  report: {html}")
    print(f"\ndemo files are in {root}/ (`sealbench show {run_dir} {DEMO_FIXED}`: the agent's transcript)",
          file=sys.stderr)
    return code
