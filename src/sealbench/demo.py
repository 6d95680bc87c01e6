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
from .errors import Refusal
from .files import model_json, write_atomic
from .formats import AgentSpec
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
