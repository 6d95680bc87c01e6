"""Bundles a stranger can verify: every tamper is caught and named, signatures bind the sums,
and seed 004's own checker agrees with the bundled rate.

One real run (reference agent, two tasks, narration probe) is bundled once per module; each
tamper test works on its own copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLE, make_contract, needs_bwrap
from sealbench.bundle import make_bundle, sums_bytes, verify_bundle
from sealbench.contract import contract_digest
from sealbench.derive import LIBRARY_CALL_NOTE, NOT_A_RANKING, commands_bytes
from sealbench.errors import ContractError, NotABundle, ScoreRefusal, UsageError, VerificationFailed
from sealbench.formats import ScoringContract
from sealbench.journal import event_hash, read_chain
from sealbench.pack import seal_pack
from sealbench.render import print_run_summary
from sealbench.runner import RunOptions, execute
from sealbench.signing import keygen

TASKS = ("t_03_rename_helper", "t_11_fix_off_by_one")
RUN_ID = "bundle-ref"
ARGV = ["sealbench", "run", "ref.contract.json", "--out", "runs/bundle-ref"]
SEED_004 = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "004_624fc2b3ddf08dd6.txt"


pytestmark = needs_bwrap


@dataclass(frozen=True)
class Made:
    work: Path
    pack: Path
    run_dir: Path
    bundle: Path
    key: Path
    pub: Path
    noop_run: Path
    noop_bundle: Path


def run(pack: Path, work: Path, run_id: str, command: str, *, probe: bool, argv: list[str] | None = None,
        **kw: Any) -> Path:
    contract = work / f"{run_id}.contract.json"
    make_contract(pack, contract, task_ids=TASKS, command=command, run_id=run_id, **kw)
    run_dir = work / "runs" / run_id
    execute(contract, run_dir, RunOptions(progress=False), command_line=argv)
    if probe:
        execute(contract, run_dir, RunOptions(progress=False), probe=True)
    return run_dir


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    work = tmp_path_factory.mktemp("bundles")
    pack = work / "pack"
    shutil.copytree(SAMPLE, pack)
    seal_pack(pack)
    run_dir = run(pack, work, RUN_ID, "builtin:reference", probe=True, argv=ARGV, terms_read_on="2026-10-01")
    key, pub = keygen(work / "signer")
    bundle = make_bundle(run_dir, work / "out", sign_key=key)
    noop_run = run(pack, work, "bundle-noop", "builtin:noop", probe=False, narration_probe=False)
    noop_bundle = make_bundle(noop_run, work / "out")
    return Made(work, pack, run_dir, bundle, key, pub, noop_run, noop_bundle)


# --- helpers ----------------------------------------------------------------------------


def files_of(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def copy(bundle: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(bundle, tmp_path / name))


def resum(bundle: Path) -> None:
    """Recompute SHA256SUMS the way a forger would (the signature cannot follow)."""
    lines = [f"{hashlib.sha256((bundle / rel).read_bytes()).hexdigest()}  {rel}\n"
             for rel in files_of(bundle) if rel not in ("SHA256SUMS", "SHA256SUMS.sig")]
    (bundle / "SHA256SUMS").write_text("".join(lines))


def problems_of(bundle: Path, **kw: Any) -> list[str]:
    with pytest.raises(VerificationFailed) as info:
        verify_bundle(bundle, **kw)
    return info.value.problems


def named(problems: list[str], *needles: str) -> bool:
    return all(any(n in p for p in problems) for n in needles)


def flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    if not data:
        path.write_bytes(b"x")
        return
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def journal_lines(bundle: Path) -> list[bytes]:
    return (bundle / "journal.jsonl").read_bytes().splitlines(keepends=True)


# --- what a bundle holds -----------------------------------------------------------------


def test_bundle_holds_every_promised_file(made: Made) -> None:
    files = set(files_of(made.bundle))
    assert made.bundle == made.work / "out" / RUN_ID
    for rel in ("scoring_contract.json", "journal.jsonl", "probe/journal.jsonl", "events.json", "scorecards.jsonl",
                "rate.json", "narration_probe.json", "commands.txt", "README.md", "SHA256SUMS", "SHA256SUMS.sig"):
        assert rel in files
    for tid in TASKS:
        assert f"traces/{tid}.json" in files and f"patches/{tid}.patch" in files
    assert any(rel.startswith("blobs/") for rel in files)
    assert not [p for p in made.bundle.parent.iterdir() if p.name.startswith(".")], "no temporary dir is left"


def test_sources_are_exact_bytes_and_derived_files_equal_the_run_dirs(made: Made) -> None:
    for rel in ("scoring_contract.json", "journal.jsonl", "probe/journal.jsonl", "scorecards.jsonl", "events.json",
                "narration_probe.json", *(f"traces/{t}.json" for t in TASKS), *(f"patches/{t}.patch" for t in TASKS)):
        assert (made.bundle / rel).read_bytes() == (made.run_dir / rel).read_bytes(), rel


def test_every_blob_the_journals_reference_is_bundled(made: Made) -> None:
    pattern = re.compile(r'"(?:stdout|stderr|patch_sha256)":"sha256:([0-9a-f]{64})"')
    referenced = {h for journal in ("journal.jsonl", "probe/journal.jsonl")
                  for h in pattern.findall((made.bundle / journal).read_text())}
    bundled = {p.name for p in (made.bundle / "blobs").iterdir()}
    assert bundled == referenced and bundled
    for name in bundled:
        assert hashlib.sha256((made.bundle / "blobs" / name).read_bytes()).hexdigest() == name


def test_rate_json_the_cli_writes_beside_a_run_agrees_with_the_bundled_one(made: Made, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(made.noop_run, tmp_path / "run"))
    assert print_run_summary(made.work / "bundle-noop.contract.json", run_dir) == 0
    bundle = make_bundle(run_dir, tmp_path / "out")
    assert (bundle / "rate.json").read_bytes() == (run_dir / "rate.json").read_bytes()


def test_readme_has_exactly_five_lines_ending_not_a_vendor_ranking(made: Made) -> None:
    lines = (made.bundle / "README.md").read_text().splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("Purpose: ") and RUN_ID in lines[0] and "2 task(s)" in lines[0]
    assert lines[1].startswith("Access class: host operator-supplied free server option")
    assert lines[2] == "Host terms: read on 2026-10-01."
    assert lines[3] == "Probe result: narration probe emitted no patch on 0 of 2 task(s) of this slice."
    assert lines[4] == NOT_A_RANKING


def test_commands_are_the_recorded_argv_and_nothing_invented(made: Made) -> None:
    text = (made.bundle / "commands.txt").read_text()
    assert shlex.join(ARGV) in text.splitlines()
    assert LIBRARY_CALL_NOTE in text.splitlines(), "the probe was a library call: argv null"
    assert "not recorded in journal.jsonl" not in text
    assert "sealbench-pytest -q test_oracle_window.py" in text.splitlines()


def test_commands_print_an_oracle_cmd_when_the_journal_records_one() -> None:
    events = [{"kind": "run_started", "seq": 0, "time": "t", "payload": {"argv": ["sealbench", "run", "a b"]}},
              {"kind": "task_started", "seq": 1, "task_id": "t1", "payload": {"oracle_cmd": ["python", "-m", "pytest"]}}]
    lines = commands_bytes(events, None, ["t1", "t2"]).decode().splitlines()
    assert "sealbench run 'a b'" in lines
    assert "python -m pytest" in lines
    assert "# oracle_cmd of t2: not recorded in journal.jsonl" in lines


def test_sha256sum_reads_the_sums(made: Made) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum (coreutils) is not installed")
    done = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=made.bundle, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": OK") == len(files_of(made.bundle)) - 2


def test_a_stranger_checks_the_signature_with_openssl(made: Made) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    done = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(made.pub), "-rawin",
                           "-in", "SHA256SUMS", "-sigfile", "SHA256SUMS.sig"], cwd=made.bundle,
                          capture_output=True, text=True, check=False)
    if "rawin" in done.stderr and done.returncode != 0:
        pytest.skip("this openssl has no -rawin (OpenSSL 3 needed)")
    assert done.returncode == 0, done.stdout + done.stderr


def test_untouched_bundle_verifies_with_key_and_pack(made: Made) -> None:
    report = verify_bundle(made.bundle, pubkey=made.pub, pack=made.pack)
    assert report.run_id == RUN_ID
    assert report.rate.sentence == "2 of 2 task_pass on this locked run_id"
    assert report.signature.startswith("SHA256SUMS signed by key sha256:")
    assert "matches its seal" in report.pack
    assert report.files_checked == len(files_of(made.bundle)) - 2
    assert all(c.scorecard_complete for c in report.scorecards)


def test_verify_without_key_says_the_signature_was_not_checked(made: Made) -> None:
    assert "not checked" in verify_bundle(made.bundle).signature


# --- tampering ---------------------------------------------------------------------------

FIXED_FILES = ["scoring_contract.json", "journal.jsonl", "probe/journal.jsonl", "events.json", "scorecards.jsonl",
               "rate.json", "narration_probe.json", "commands.txt", "README.md", "SHA256SUMS", "SHA256SUMS.sig"]
TAMPER_TARGETS = [*FIXED_FILES, *(f"traces/{t}.json" for t in TASKS), *(f"patches/{t}.patch" for t in TASKS),
                  "blobs/*"]


def expand(bundle: Path, target: str) -> list[str]:
    return [rel for rel in files_of(bundle) if rel.startswith("blobs/")] if target == "blobs/*" else [target]


def test_tamper_targets_cover_every_file(made: Made) -> None:
    covered = {rel for target in TAMPER_TARGETS for rel in expand(made.bundle, target)}
    assert covered == set(files_of(made.bundle))


@pytest.mark.parametrize("target", TAMPER_TARGETS)
def test_one_changed_byte_in_any_file_is_caught(made: Made, tmp_path: Path, target: str) -> None:
    for i, rel in enumerate(expand(made.bundle, target)):
        bundle = copy(made.bundle, tmp_path, f"sums-kept-{i}")
        flip_one_byte(bundle / rel)
        assert named(problems_of(bundle, pubkey=made.pub), rel), rel
        if rel in ("SHA256SUMS", "SHA256SUMS.sig"):
            continue
        # A forger who also recomputes the sums is still caught: by the signature, and without
        # the key by re-derivation, the chain, the lock or the blob's own name.
        forged = copy(made.bundle, tmp_path, f"sums-forged-{i}")
        flip_one_byte(forged / rel)
        resum(forged)
        assert named(problems_of(forged, pubkey=made.pub), "SHA256SUMS.sig"), rel
        assert named(problems_of(forged), rel), rel


def test_deleted_trace_is_caught(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    (bundle / "traces" / f"{TASKS[0]}.json").unlink()
    problems = problems_of(bundle)
    assert named(problems, f"traces/{TASKS[0]}.json: listed in SHA256SUMS",
                 f"traces/{TASKS[0]}.json: missing; journal.jsonl derives it")


def test_reordered_journal_lines_are_caught(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    lines = journal_lines(bundle)
    lines[3], lines[4] = lines[4], lines[3]
    (bundle / "journal.jsonl").write_bytes(b"".join(lines))
    resum(bundle)
    problems = problems_of(bundle)
    assert named(problems, "journal.jsonl line 4: seq 4 where 3 was expected", "journal.jsonl line 5: seq 3")


def test_dropped_task_events_with_recomputed_sums_are_caught(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    kept = [line for line in journal_lines(bundle) if json.loads(line)["task_id"] != TASKS[1]]
    (bundle / "journal.jsonl").write_bytes(b"".join(kept))
    resum(bundle)
    problems = problems_of(bundle)
    assert named(problems, "chain broken", f"denominator drift, missing ['{TASKS[1]}']",
                 f"traces/{TASKS[1]}.json: not part of this bundle", "scorecards.jsonl")


def test_dropped_task_is_caught_even_in_a_rechained_journal(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    events = [json.loads(line) for line in journal_lines(bundle) if json.loads(line)["task_id"] != TASKS[1]]
    prev = None
    for seq, ev in enumerate(events):
        ev.update(seq=seq, prev=prev)
        ev["hash"] = event_hash(ev)
        prev = ev["hash"]
    (bundle / "journal.jsonl").write_bytes(b"".join(
        json.dumps(ev, sort_keys=True, separators=(",", ":")).encode() + b"\n" for ev in events))
    (bundle / "traces" / f"{TASKS[1]}.json").unlink()
    resum(bundle)
    assert not read_chain(bundle / "journal.jsonl").problems, "the forged chain itself is consistent"
    problems = problems_of(bundle)
    assert named(problems, f"rate.json: score refuses the journal's events: denominator drift, missing ['{TASKS[1]}']")


def test_rechained_journal_edit_that_changes_nothing_derived_is_caught_by_the_sums(made: Made, tmp_path: Path) -> None:
    """Only SHA256SUMS (and the signature over it) can tell: the chain is consistent again and no
    derived file depends on what changed."""
    bundle = copy(made.bundle, tmp_path)
    lines = journal_lines(bundle)
    last = json.loads(lines[-1])
    assert last["kind"] == "run_finished"
    last["time"] = "2026-10-12T23:59:59.000000Z"
    last["hash"] = event_hash(last)
    lines[-1] = json.dumps(last, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    (bundle / "journal.jsonl").write_bytes(b"".join(lines))
    assert not read_chain(bundle / "journal.jsonl").problems, "the forged chain itself is consistent"
    problems = problems_of(bundle)
    assert len(problems) == 1 and re.fullmatch(r"journal\.jsonl: content differs from its sha256 in SHA256SUMS line \d+",
                                                problems[0]), problems


def test_scorecard_swapped_between_two_bundles_is_caught(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    mine = (bundle / "scorecards.jsonl").read_text().splitlines()
    theirs = (made.noop_bundle / "scorecards.jsonl").read_text().splitlines()
    assert json.loads(mine[0])["task_id"] == json.loads(theirs[0])["task_id"] == TASKS[0]
    mine[0] = theirs[0]
    (bundle / "scorecards.jsonl").write_text("\n".join(mine) + "\n")
    resum(bundle)
    problems = problems_of(bundle)
    assert named(problems, f"scorecards.jsonl line 1 ({TASKS[0]}): ", "passed", "from what journal.jsonl derives")


def test_contract_edited_after_lock_is_caught(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    raw = json.loads((bundle / "scoring_contract.json").read_text())
    raw["budget"]["max_attempts"] = 5
    (bundle / "scoring_contract.json").write_text(json.dumps(raw, indent=2) + "\n")
    resum(bundle)
    assert named(problems_of(bundle), "scoring_contract.json: contract edited after lock")


def test_contract_relocked_after_edit_no_longer_matches_the_journal(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    raw = json.loads((bundle / "scoring_contract.json").read_text())
    raw["budget"]["max_attempts"] = 5
    relocked = ScoringContract.model_validate(raw)
    raw["contract_sha256"] = contract_digest(relocked)
    (bundle / "scoring_contract.json").write_text(json.dumps(raw, indent=2) + "\n")
    resum(bundle)
    problems = problems_of(bundle)
    # Each journal's own pin: "probe/journal.jsonl seq 0 ..." also contains the run journal's words.
    assert any(p.startswith("journal.jsonl seq 0 (run_started): pins contract") for p in problems), problems
    assert named(problems, "probe/journal.jsonl seq 0 (run_started): pins contract",
                 "rate.json: budget, contract_sha256 differ")


def test_verify_reports_every_problem_at_once(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    (bundle / "traces" / f"{TASKS[1]}.json").unlink()
    rate = json.loads((bundle / "rate.json").read_text())
    rate["task_pass_count"] = 1
    (bundle / "rate.json").write_text(json.dumps(rate, indent=2) + "\n")
    (bundle / "notes.txt").write_text("trust me\n")
    (bundle / "README.md").write_text("a vendor ranking.\n")
    problems = problems_of(bundle, pubkey=made.pub)
    assert named(problems, f"traces/{TASKS[1]}.json", "rate.json: task_pass_count differ", "notes.txt: not listed",
                 "notes.txt: not part of this bundle", "README.md line 1", "SHA256SUMS")
    assert len(problems) >= 6


def test_incomplete_scorecard_is_named_by_seed_000s_rule(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    lines = (bundle / "scorecards.jsonl").read_text().splitlines()
    card = json.loads(lines[1])
    card["scorecard_complete"] = False
    lines[1] = json.dumps(card, sort_keys=True, separators=(",", ":"))
    (bundle / "scorecards.jsonl").write_text("\n".join(lines) + "\n")
    resum(bundle)
    assert named(problems_of(bundle), f"scorecards.jsonl line 2 ({TASKS[1]}): scorecard_complete is false")


def test_pack_that_differs_from_its_seal_is_named(made: Made, tmp_path: Path) -> None:
    pack = Path(shutil.copytree(made.pack, tmp_path / "pack"))
    hidden = next((pack / "tasks" / TASKS[0] / "hidden").rglob("*.py"))
    hidden.write_text(hidden.read_text() + "\n# edited\n")
    assert named(problems_of(made.bundle, pack=pack), f"pack {pack}: task {TASKS[0]}: hidden")


# --- signing -----------------------------------------------------------------------------


def test_wrong_key_is_refused(made: Made, tmp_path: Path) -> None:
    _, other = keygen(tmp_path / "other")
    assert named(problems_of(made.bundle, pubkey=other), "SHA256SUMS.sig: not a signature of SHA256SUMS by key")


def test_recomputed_sums_without_a_matching_signature_are_caught(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.bundle, tmp_path)
    (bundle / "README.md").write_text((bundle / "README.md").read_text().replace("Host terms: read on", "Terms: read"))
    resum(bundle)
    problems = problems_of(bundle, pubkey=made.pub)
    assert named(problems, "SHA256SUMS.sig: not a signature of SHA256SUMS", "README.md line 3")
    assert not named(problems, "content differs from its sha256"), "the forged sums themselves match"


def test_unsigned_bundle_fails_a_key_check(made: Made) -> None:
    assert named(problems_of(made.noop_bundle, pubkey=made.pub), "SHA256SUMS.sig: missing")


def test_keygen_never_overwrites(made: Made) -> None:
    with pytest.raises(UsageError, match="exists"):
        keygen(made.work / "signer")


def test_a_public_key_is_not_a_signing_key(made: Made, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="private key"):
        make_bundle(made.run_dir, tmp_path / "out", sign_key=made.pub)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


# --- what make_bundle refuses -----------------------------------------------------------


def test_existing_target_is_refused(made: Made) -> None:
    with pytest.raises(UsageError, match="exists"):
        make_bundle(made.run_dir, made.work / "out")


def test_declared_probe_that_has_not_run_is_refused(made: Made, tmp_path: Path) -> None:
    run_dir = run(made.pack, tmp_path, "no-probe", "builtin:noop", probe=False)
    with pytest.raises(ScoreRefusal, match=r"declares the narration probe .* has not run"):
        make_bundle(run_dir, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == [], "nothing half-written is left"


def test_what_score_refuses_is_refused(made: Made, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(made.run_dir, tmp_path / "run"))
    lines = (run_dir / "journal.jsonl").read_bytes().splitlines(keepends=True)
    last_finish = max(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "task_finished")
    (run_dir / "journal.jsonl").write_bytes(b"".join(lines[:last_finish]))
    for rel in ("scorecards.jsonl", "events.json", "narration_probe.json"):
        (run_dir / rel).unlink()
    with pytest.raises(ScoreRefusal, match="denominator drift"):
        make_bundle(run_dir, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_contract_edited_in_the_run_dir_is_refused(made: Made, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(made.run_dir, tmp_path / "run"))
    raw = json.loads((run_dir / "scoring_contract.json").read_text())
    raw["seed"] = 7
    (run_dir / "scoring_contract.json").write_text(json.dumps(raw))
    with pytest.raises(ContractError, match="contract edited after lock"):
        make_bundle(run_dir, tmp_path / "out")


def test_edited_derived_file_in_the_run_dir_is_not_bundled(made: Made, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(made.run_dir, tmp_path / "run"))
    events = json.loads((run_dir / "events.json").read_text())
    events[0]["task_pass"] = False
    (run_dir / "events.json").write_text(json.dumps(events, indent=2) + "\n")
    with pytest.raises(VerificationFailed) as info:
        make_bundle(run_dir, tmp_path / "out")
    assert named(info.value.problems, "events.json: entry 0 (t_03_rename_helper): task_pass differ")
    assert list((tmp_path / "out").iterdir()) == []


def test_missing_blob_is_refused(made: Made, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(made.run_dir, tmp_path / "run"))
    patch = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])["patch_sha256"]
    for store in (run_dir / "blobs", run_dir / "probe" / "blobs"):
        (store / patch.removeprefix("sha256:")).unlink(missing_ok=True)
    with pytest.raises(VerificationFailed, match=r"missing; journal\.jsonl seq"):
        make_bundle(run_dir, tmp_path / "out")


def test_a_failure_while_writing_leaves_no_half_bundle(made: Made, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> bytes:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("sealbench.bundle.sign", broken)
    with pytest.raises(OSError, match="No space"):
        make_bundle(made.run_dir, tmp_path / "out", sign_key=made.key)
    assert list((tmp_path / "out").iterdir()) == []


# --- seed 004's own checker ------------------------------------------------------------------


def extract_seed_checker(text: str) -> str:
    """refuse_unlocked_rate.py exactly as seed 004 prints it (the project keeps no copy)."""
    start = text.index('#!/usr/bin/env python3\n"""Emit a pass rate only for a locked scoring contract."""')
    end_marker = 'sys.exit("usage: lock|score")\n'
    return text[start:text.index(end_marker, start) + len(end_marker)]


def test_seed_004_checker_agrees_with_the_bundled_rate(made: Made, tmp_path: Path) -> None:
    if not SEED_004.is_file():
        pytest.skip(f"{SEED_004.parent} is absent: seed 004's checker is extracted from it at test time")
    (tmp_path / "refuse_unlocked_rate.py").write_text(extract_seed_checker(SEED_004.read_text(encoding="utf-8")))
    for name in ("scoring_contract.json", "events.json"):
        shutil.copy(made.bundle / name, tmp_path / name)
    python = shutil.which("python3") or sys.executable
    done = subprocess.run([python, "refuse_unlocked_rate.py", "score", "scoring_contract.json", "events.json"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    seed_rate = json.loads(done.stdout)
    rate = json.loads((made.bundle / "rate.json").read_text())
    assert (seed_rate["n"], seed_rate["task_pass_count"]) == (rate["n"], rate["task_pass_count"]) == (2, 2)
    assert seed_rate["run_id"] == rate["run_id"] == RUN_ID


def test_verify_of_a_run_directory_says_bundle_it_first_and_records_nothing(made: Made, tmp_path: Path) -> None:
    # Given a run directory, verify once answered "tampering found" (exit 4) and recorded the
    # directory in the runs index as a bundle that does not verify, for good.
    index = tmp_path / "index"
    env = {**os.environ, "SEALBENCH_DATA_DIR": str(index)}
    done = subprocess.run([str(Path(sys.executable).parent / "sealbench"), "verify", str(made.run_dir)],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 3, done.stderr
    assert "is a run directory, not a bundle" in done.stderr
    assert f"sealbench bundle {made.run_dir} --out OUT" in done.stderr
    assert "verification failed" not in done.stderr
    assert not (index / "runs.sqlite3").exists(), "nothing is written to the runs index"
    with pytest.raises(NotABundle):
        verify_bundle(made.run_dir)


def test_a_bundle_stripped_of_its_sums_is_still_tampering_not_a_run_directory(made: Made, tmp_path: Path) -> None:
    bundle = copy(made.noop_bundle, tmp_path)
    (bundle / "SHA256SUMS").unlink()
    assert named(problems_of(bundle), "SHA256SUMS")
# --- a public bundle: the hidden tests' output withheld, sealed beside it --------------------

HIDDEN_LINE = b"assert last_n([1, 2, 3, 4, 5], 2) == [4, 5]"  # a line of t_11's hidden test
WRONG_WINDOW = "sh -c " + shlex.quote("printf 'def last_n(items, n):\\n    return []\\n' > window.py")


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """t_11 failed by a wrong answer: pytest's output quotes the hidden test's source."""
    work = tmp_path_factory.mktemp("public")
    pack = work / "pack"
    shutil.copytree(SAMPLE, pack)
    seal_pack(pack)
    contract = work / "c.json"
    make_contract(pack, contract, task_ids=("t_11_fix_off_by_one",), command=WRONG_WINDOW, run_id="public-run",
                  max_attempts=1)
    run_dir = work / "runs" / "public-run"
    execute(contract, run_dir, RunOptions(progress=False))
    execute(contract, run_dir, RunOptions(progress=False), probe=True)
    return run_dir


def _holds(root: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


@needs_bwrap
def test_exploit_a_published_bundle_discloses_the_hidden_tests_through_their_output(failed_run: Path,
                                                                                   tmp_path: Path) -> None:
    # The oracle's output quotes failing assert lines and test source: a bundle published
    # while the pack is in use hands the next agents its hidden tests.
    plain = make_bundle(failed_run, tmp_path / "plain")
    assert _holds(plain, HIDDEN_LINE), "the test would prove nothing: the plain bundle quotes no hidden line"
    public = make_bundle(failed_run, tmp_path / "public", public=True)
    assert _holds(public, HIDDEN_LINE) == []
    sealed = public.with_name(public.name + ".sealed")
    assert _holds(sealed, HIDDEN_LINE), "the withheld output is kept in the sealed part"
    report = verify_bundle(public)
    assert report.withheld and report.withheld > 0 and report.sealed_checked
    assert (report.rate.n, report.rate.task_pass_count) == (1, 0)
    assert any("withheld" in line and "matches the sealed part" in line for line in report.lines())
    # Published alone, it still verifies: the withheld outputs are digests the journal names.
    alone = tmp_path / "alone" / public.name
    shutil.copytree(public, alone)
    report = verify_bundle(alone)
    assert report.withheld == len(list((sealed / "blobs").iterdir())) and not report.sealed_checked


@needs_bwrap
@pytest.mark.parametrize("edit", ["sealed-body-edited", "withheld-body-published", "public-list-cut"])
def test_a_public_bundle_or_its_sealed_part_edited_is_refused(failed_run: Path, tmp_path: Path, edit: str) -> None:
    public = make_bundle(failed_run, tmp_path / "out", public=True)
    sealed = public.with_name(public.name + ".sealed")
    withheld = sorted((sealed / "blobs").iterdir())
    if edit == "sealed-body-edited":
        withheld[0].write_bytes(withheld[0].read_bytes() + b"forged")
        named = "sealed part blobs/"
    else:
        if edit == "withheld-body-published":
            shutil.copy(withheld[0], public / "blobs" / withheld[0].name)
            named = "not part of this bundle"
        else:
            doc = json.loads((public / "PUBLIC.json").read_text())
            doc["withheld"] = doc["withheld"][1:]
            (public / "PUBLIC.json").write_text(json.dumps(doc, indent=2) + "\n")
            named = "PUBLIC.json: differs"
        files = {p.relative_to(public).as_posix(): p.read_bytes() for p in public.rglob("*") if p.is_file()}
        (public / "SHA256SUMS").write_bytes(sums_bytes(files))
    with pytest.raises(VerificationFailed) as info:
        verify_bundle(public)
    assert any(named in p for p in info.value.problems), info.value.problems
