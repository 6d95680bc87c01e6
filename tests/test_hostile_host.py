"""The host never follows the agent: hostile agents in the real sandbox plant links, special
files, odd names, deep and large trees in their workspace and trace folder.

Each test is named after the exploit. The host-write tests check that the host target is
untouched and that the run's journal still verifies; the others check that the agent's tree
is the agent's failure (with a reason), never a harness error, a crash or a hang.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import make_contract, needs_bwrap, publishes
from sealbench.agentfs import (
    TreeCaps,
    TreeRejected,
    copy_tree_fd,
    open_dir,
    read_regular,
    remove_entry,
    remove_tree,
    reset_dir,
    scan,
)
from sealbench.journal import read_chain
from sealbench.runner import RunOptions, execute

TASK = "t_11_fix_off_by_one"
WRONG = "printf 'def last_n(items, n):\\n    return []\\n' > window.py"


def sh(script: str) -> str:
    return "sh -c " + shlex.quote(script)


def run(sealed_pack: Path, tmp_path: Path, command: str, *, options: RunOptions | None = None,
        publish: bool = True, **kw: Any) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]:
    contract_file = tmp_path / "contract.json"
    # One run per locked run_id: each run of a test locks its own.
    run_id = "hostile-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]
    make_contract(sealed_pack, contract_file, task_ids=(TASK,), command=command, run_id=run_id, **kw)
    run_dir = tmp_path / "run"
    options = options or RunOptions(progress=False)
    execute(contract_file, run_dir, options)
    events = read_chain(run_dir / "journal.jsonl").events  # raises if the chain was broken
    cards = [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]
    if publish and not of_kind(events, "harness_error"):
        publishes(contract_file, run_dir, tmp_path / "bundles", options)
    return run_dir, events, cards


def of_kind(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


# --- the host writes nothing through the agent's links --------------------------------


@needs_bwrap
@pytest.mark.parametrize("where", ["host_file", "run_journal", "site_packages_pth", "meta_dir_link"])
def test_prompt_symlink_planted_in_attempt_one_is_not_followed(sealed_pack: Path, tmp_path: Path,
                                                                where: str) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "site-packages").mkdir()
    targets = {
        "host_file": str(host / "created-by-agent.txt"),
        # ws/.sealbench/prompt.md -> ../../../../journal.jsonl is the run's own journal.
        "run_journal": "../../../../journal.jsonl",
        "site_packages_pth": str(host / "site-packages" / "evil.pth"),
    }
    if where == "meta_dir_link":
        plant = f'rm -rf .sealbench; ln -s {shlex.quote(str(host))} .sealbench'
    else:
        plant = f'rm -f .sealbench/prompt.md; ln -s {shlex.quote(targets[where])} .sealbench/prompt.md'
    # Attempt 1 plants the link and fails; attempt 2 proves it can still read its own prompt.
    script = (f'if [ "{{attempt}}" = 1 ]; then {plant}; {WRONG}; '
              'else cp "$SEALBENCH_PROMPT_FILE" second_prompt.md; ' + WRONG + "; fi")
    run_dir, events, cards = run(sealed_pack, tmp_path, sh(script), max_attempts=2)
    assert sorted(p.name for p in host.rglob("*")) == ["site-packages"], "the host wrote through the agent's link"
    assert of_kind(events, "run_finished"), "the run's journal lost its end"
    assert cards[0]["attempts_used"] == 2 and cards[0]["outcome"] == "fail"
    patch = (run_dir / "patches" / f"{TASK}.patch").read_text()
    assert "attempt 2 of 2" in patch  # the second prompt reached the agent


@needs_bwrap
def test_prompt_file_is_read_only_inside_the_sandbox(sealed_pack: Path, tmp_path: Path) -> None:
    script = ('if echo forged > "$SEALBENCH_PROMPT_FILE" 2>/dev/null; then echo writable > verdict.txt; '
              'else echo read-only > verdict.txt; fi')
    run_dir, _, _ = run(sealed_pack, tmp_path, sh(script), max_attempts=1)
    assert "+read-only" in (run_dir / "patches" / f"{TASK}.patch").read_text()


# --- the agent's trace folder cannot veto or stall the run ----------------------------


@needs_bwrap
@pytest.mark.parametrize("plant", [
    "rm -rf .sealbench/trace; ln -s /proc .sealbench/trace",
    "rm -rf .sealbench/trace; ln -s /usr .sealbench/trace",
    "mkfifo .sealbench/trace/fifo; ln -s /etc/passwd .sealbench/trace/link",
    "touch \"$(printf '.sealbench/trace/bad\\377name')\"",
], ids=["trace_link_to_proc", "trace_link_to_large_host_dir", "trace_fifo_and_link", "trace_name_not_utf8"])
def test_trace_folder_exploit_is_not_a_harness_error(sealed_pack: Path, tmp_path: Path, plant: str) -> None:
    t0 = time.monotonic()
    _, events, cards = run(sealed_pack, tmp_path, sh(f"{plant}; {WRONG}"), max_attempts=1)
    assert time.monotonic() - t0 < 30
    assert cards[0]["outcome"] == "fail"
    assert not of_kind(events, "harness_error")


# --- what the workspace holds is the agent's failure, with a reason --------------------


@needs_bwrap
@pytest.mark.parametrize(("plant", "reason"), [
    ("touch \"$(printf 'bad\\377name.py')\"", "not valid UTF-8"),
    ("d=.; i=0; while [ $i -lt 80 ]; do d=$d/dd; i=$((i+1)); done; mkdir -p $d", "deeper than 64"),
    ("python -c 'import os; [(os.mkdir(\"aaaaaaaaaa\"), os.chdir(\"aaaaaaaaaa\")) for _ in range(420)]'",
     "deeper than 64"),
], ids=["workspace_name_not_utf8", "workspace_deep_chain", "workspace_chain_past_path_max"])
def test_workspace_exploit_is_the_agents_failure(sealed_pack: Path, tmp_path: Path, plant: str, reason: str) -> None:
    _, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; {plant}"), max_attempts=1)
    assert cards[0]["outcome"] == "fail"
    assert not of_kind(events, "harness_error")
    assert reason in of_kind(events, "patch_captured")[0]["payload"]["rejected"]


@needs_bwrap
@pytest.mark.parametrize(("plant", "reason"), [
    ("mkdir -p " + "/".join(["d"] * 70), "deeper than 64"),
    ("mkfifo pipe", "fifo"),
    # Each file within the sandbox's cap on one file, 1.25 GB in all past the 1 GiB of a workspace.
    ("for i in 1 2 3 4 5; do truncate -s 250M huge$i.bin; done", "bytes of files"),
], ids=["directory_chain_70_deep", "fifo", "huge_sparse_files"])
def test_exploit_a_workspace_the_capture_refuses_leaves_the_run_publishable(sealed_pack: Path, tmp_path: Path,
                                                                          plant: str, reason: str) -> None:
    # The refused workspace is the agent's fail, never graded; score, bundle and verify then
    # called that story tampering ("says fail, but the attempt was never graded"), so one
    # mkdir -p by any agent kept an honest run from being published.
    run_dir, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; {plant}"), max_attempts=1, publish=False)
    assert cards[0]["outcome"] == "fail" and not of_kind(events, "graded")
    assert reason in of_kind(events, "patch_captured")[0]["payload"]["rejected"]
    assert not of_kind(events, "harness_error")
    bundle = publishes(tmp_path / "contract.json", run_dir, tmp_path / "bundles")
    published = [json.loads(line) for line in (bundle / "scorecards.jsonl").read_text().splitlines()]
    assert [c["outcome"] for c in published] == ["fail"]


@needs_bwrap
def test_workspace_fifo_is_neither_read_nor_a_harness_error(sealed_pack: Path, tmp_path: Path) -> None:
    _, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; mkfifo pipe; mknod dev c 1 3 2>/dev/null; true"),
                           max_attempts=1)
    assert cards[0]["outcome"] == "fail"
    assert not of_kind(events, "harness_error")


@needs_bwrap
@pytest.mark.parametrize(("sandbox", "plant"), [
    # No quota without a sandbox: the cap is checked when the workspace is read.
    ("none", "for i in 1 2 3; do head -c 700000 /dev/urandom > junk$i; done"),
    # Under the quota: a file named four times, or a sparse one, takes little room in the
    # sandbox and would take its full size at every name on the host's disk.
    ("bubblewrap", "head -c 700000 /dev/urandom > junk1; for i in 2 3 4; do ln junk1 junk$i; done"),
    ("bubblewrap", "truncate -s 200M junk1"),
], ids=["no_sandbox", "hard_links_under_the_quota", "sparse_file_under_the_quota"])
def test_workspace_over_its_byte_cap_is_refused_without_storing_it(sealed_pack: Path, tmp_path: Path,
                                                                   sandbox: str, plant: str) -> None:
    opts = RunOptions(progress=False, sandbox=sandbox, keep_work=True, tree_caps=TreeCaps(max_bytes=1 << 20))
    run_dir, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; {plant}"), options=opts, max_attempts=1)
    assert cards[0]["outcome"] == "fail"
    rejected = of_kind(events, "patch_captured")[0]["payload"]["rejected"]
    assert "more than 1048576 bytes" in rejected
    assert sum(p.stat().st_size for p in (run_dir / "blobs").iterdir()) < 1 << 20
    if sandbox == "bubblewrap":
        # Stopped by the copy back, before the host's disk held more than the cap.
        assert rejected.startswith("the working directory"), rejected
        ws = run_dir / "work" / TASK / "ws"
        assert sum(p.lstat().st_size for p in ws.rglob("*") if p.is_file() and not p.is_symlink()) <= 1 << 20


@needs_bwrap
@pytest.mark.parametrize("then", ["mkdir sub; echo x > sub/file", "echo x > sub"], ids=["directory", "file"])
def test_link_left_by_attempt_one_is_replaced_not_followed_by_the_copy_back(sealed_pack: Path, tmp_path: Path,
                                                                             then: str) -> None:
    # Attempt 1 leaves sub -> a host folder; attempt 2 makes sub a folder or a file. The host's
    # copy of the workspace holds the link from attempt 1, and the copy back must replace it.
    host = tmp_path / "host"
    host.mkdir()
    script = (f'if [ "{{attempt}}" = 1 ]; then ln -s {shlex.quote(str(host))} sub; '
              f'else rm -f sub; {then}; fi; {WRONG}')
    _, events, cards = run(sealed_pack, tmp_path, sh(script), max_attempts=2)
    assert list(host.iterdir()) == [], "the copy back wrote through the agent's link"
    assert cards[0]["attempts_used"] == 2 and not of_kind(events, "harness_error")


@needs_bwrap
def test_set_user_id_bit_planted_in_the_workspace_does_not_reach_the_host(sealed_pack: Path, tmp_path: Path) -> None:
    opts = RunOptions(progress=False, keep_work=True)
    run_dir, _, _ = run(sealed_pack, tmp_path, sh(f"{WRONG}; cp /bin/true tool; chmod 6755 tool"), options=opts,
                        max_attempts=1)
    mode = (run_dir / "work" / TASK / "ws" / "tool").stat().st_mode
    assert mode & 0o7777 == 0o755, oct(mode)


@needs_bwrap
def test_patch_over_its_cap_is_refused(sealed_pack: Path, tmp_path: Path) -> None:
    opts = RunOptions(progress=False, tree_caps=TreeCaps(max_patch_bytes=100_000))
    _, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; head -c 300000 /dev/urandom > big.bin"),
                           options=opts, max_attempts=1)
    assert cards[0]["outcome"] == "fail"
    assert "patch is larger than 100000 bytes" in of_kind(events, "patch_captured")[0]["payload"]["rejected"]


@needs_bwrap
def test_workspace_over_its_entry_cap_is_refused(sealed_pack: Path, tmp_path: Path) -> None:
    opts = RunOptions(progress=False, tree_caps=TreeCaps(max_entries=500))
    _, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; mkdir many; cd many; touch $(seq 1 800)"),
                           options=opts, max_attempts=1)
    assert cards[0]["outcome"] == "fail"
    assert "more than 500 entries" in of_kind(events, "patch_captured")[0]["payload"]["rejected"]


# --- the safe readers themselves ------------------------------------------------------


def test_scan_never_follows_a_root_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "secret").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(TreeRejected, match="not a directory"):
        scan(tmp_path / "link", TreeCaps())


def test_copy_back_keeps_holes_and_rewrites_only_what_changed(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    with open(src / "sparse", "wb") as f:  # 64 MiB apart: would take 64 MiB copied as zeros
        f.write(b"head")
        f.seek(64 << 20)
        f.write(b"tail")
    (src / "same.txt").write_text("unchanged")
    (src / "edited.txt").write_text("one")
    (dst / "gone.txt").write_text("left by an earlier attempt")
    (dst / "same.txt").write_text("unchanged")
    kept = (dst / "same.txt").stat().st_ino
    (dst / "edited.txt").symlink_to(tmp_path / "outside")
    s_fd, d_fd = open_dir(src), open_dir(dst)
    try:
        copy_tree_fd(s_fd, d_fd, TreeCaps(), what="the working directory")
    finally:
        os.close(s_fd)
        os.close(d_fd)
    assert sorted(p.name for p in dst.iterdir()) == ["edited.txt", "same.txt", "sparse"]
    assert (dst / "same.txt").stat().st_ino == kept
    assert not (dst / "edited.txt").is_symlink() and (dst / "edited.txt").read_text() == "one"
    assert not (tmp_path / "outside").exists()
    assert (dst / "sparse").stat().st_size == (64 << 20) + 4
    assert (dst / "sparse").stat().st_blocks * 512 < 1 << 20


def test_read_regular_refuses_links_on_any_component(tmp_path: Path) -> None:
    grade = tmp_path / "grade"
    (grade / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "report.xml").write_text("<x/>")
    (grade / "dirlink").symlink_to(tmp_path / "outside")
    (grade / "filelink.xml").symlink_to(tmp_path / "outside" / "report.xml")
    os.mkfifo(grade / "fifo.xml")
    (grade / "sub" / "ok.xml").write_text("<ok/>")
    assert read_regular(grade, "dirlink/report.xml", 1000) is None
    assert read_regular(grade, "filelink.xml", 1000) is None
    assert read_regular(grade, "fifo.xml", 1000) is None  # opened non-blocking, then refused
    assert read_regular(grade, "sub/ok.xml", 3) is None  # over the cap
    assert read_regular(grade, "sub/ok.xml", 1000) == b"<ok/>"


def test_remove_entry_never_deletes_through_a_link(tmp_path: Path) -> None:
    grade = tmp_path / "grade"
    grade.mkdir()
    (tmp_path / "outside").mkdir()
    victim = tmp_path / "outside" / "report.xml"
    victim.write_text("host file")
    (grade / "dirlink").symlink_to(tmp_path / "outside")
    (grade / "report.xml").symlink_to(victim)
    remove_entry(grade, "dirlink/report.xml")
    remove_entry(grade, "report.xml")
    assert victim.read_text() == "host file"
    assert not (grade / "report.xml").is_symlink()


def test_reset_dir_replaces_a_planted_link_without_touching_its_target(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    target = tmp_path / "host"
    target.mkdir()
    (target / "keep").write_text("x")
    (ws / ".sealbench").symlink_to(target)
    reset_dir(ws, ".sealbench", ("trace",))
    assert (ws / ".sealbench" / "trace").is_dir() and not (ws / ".sealbench").is_symlink()
    assert (target / "keep").read_text() == "x"


# --- the covert channel between attempts ---------------------------------------------


def _measured_gap(sealed_pack: Path, tmp_path: Path, slow_grading: bool, gap: float | None) -> float:
    sleep = "import time\\ntime.sleep(1.5)\\n" if slow_grading else ""
    script = (f'if [ "{{attempt}}" = 1 ]; then printf "{sleep}def last_n(items, n):\\n    return []\\n" > window.py; '
              "python -c 'import time; print(time.time())' > t1; "
              "else python -c 'import time; print(time.time() - float(open(\"t1\").read()))' > gap.txt; fi")
    kw: dict[str, Any] = {"attempt_gap_s": gap} if gap is not None else {}
    sub = tmp_path / f"{slow_grading}-{gap}"
    sub.mkdir()
    run_dir, _, _ = run(sealed_pack, sub, sh(script), max_attempts=2, **kw)
    patch = (run_dir / "patches" / f"{TASK}.patch").read_text()
    return float(patch.split("+++ b/gap.txt")[1].split("\n+", 1)[1].split("\n")[0])


@needs_bwrap
def test_grading_time_does_not_reach_the_next_attempt_with_an_attempt_gap(sealed_pack: Path, tmp_path: Path) -> None:
    # Without the gap, a candidate that makes grading slow is seen by the next attempt.
    fast, slow = (_measured_gap(sealed_pack, tmp_path, s, None) for s in (False, True))
    assert slow - fast > 1.0
    gap = 3.0
    for seen in (_measured_gap(sealed_pack, tmp_path, s, gap) for s in (False, True)):
        # The next attempt learns at most how many whole gaps passed (more than one only when
        # the machine is so loaded that grading itself took longer than a gap).
        whole = max(1, round(seen / gap))
        assert whole * gap <= seen < whole * gap + 0.6, seen


# --- trees the host removes: no recursion, whatever the depth -------------------------

# A chain of directories far deeper than the interpreter's recursion limit, made with
# descriptors (no chdir, no long path): what shutil.rmtree and a recursive walk die on.
DEEP_CHAIN = ("import os\n"
              "fd = os.open('{where}', os.O_RDONLY)\n"
              "for _ in range(1500):\n"
              "    os.mkdir('d', dir_fd=fd); nfd = os.open('d', os.O_RDONLY, dir_fd=fd); os.close(fd); fd = nfd\n")


def python_agent(tmp_path: Path, code: str) -> tuple[str, list[str]]:
    """A command agent written in Python, mounted read-only into the sandbox."""
    folder = tmp_path / "agent"
    folder.mkdir(exist_ok=True)
    (folder / "agent.py").write_text(code)
    return f"python {folder / 'agent.py'} {{attempt}}", [str(folder)]


WRONG_PY = "open('window.py', 'w').write('def last_n(items, n):\\n    return []\\n')\n"


@needs_bwrap
@pytest.mark.parametrize("where", ["workspace", "meta_folder", "grading_copy"])
def test_directory_chain_deeper_than_the_recursion_limit_does_not_break_the_run(
        sealed_pack: Path, tmp_path: Path, where: str) -> None:
    if where == "workspace":
        code = WRONG_PY + DEEP_CHAIN.format(where=".")
    elif where == "meta_folder":
        # Left in .sealbench/ by attempt 1: the host rebuilds that folder before attempt 2.
        code = WRONG_PY + DEEP_CHAIN.format(where=".sealbench")
    else:
        # The candidate builds it in the grading copy while the oracle imports it.
        candidate = DEEP_CHAIN.format(where=".") + "def last_n(items, n):\n    return []\n"
        code = f"open('window.py', 'w').write({candidate!r})\n"
    command, mounts = python_agent(tmp_path, code)
    try:
        run_dir, events, cards = run(sealed_pack, tmp_path, command, max_attempts=2, mounts=mounts)
        assert not of_kind(events, "harness_error")
        assert of_kind(events, "run_finished")
        assert cards[0]["outcome"] == "fail" and cards[0]["attempts_used"] == 2
        assert not (run_dir / "work").exists()
    finally:
        # Whatever happened, no chain is left for pytest's own (recursive) clean-up to die on.
        remove_tree(tmp_path / "run")


# --- git reads nothing of the agent's but its files --------------------------------------


def seal_with_workspace_file(raw_pack: Path, rel: str, data: bytes) -> Path:
    """The sample pack with one more file in the task's workspace, sealed."""
    from sealbench.pack import seal_pack

    (raw_pack / "tasks" / TASK / "workspace" / rel).write_bytes(data)
    seal_pack(raw_pack)
    return raw_pack


@needs_bwrap
def test_gitattributes_encoding_in_workspace_is_not_a_harness_error(sealed_pack: Path, tmp_path: Path) -> None:
    # git add converts from the declared encoding; an unknown one made it fail: a harness error.
    _, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; echo '* working-tree-encoding=no-such' > .gitattributes"),
                           max_attempts=1)
    assert not of_kind(events, "harness_error")
    assert cards[0]["outcome"] == "fail"


@needs_bwrap
def test_gitattributes_in_workspace_cannot_rewrite_a_forbidden_file_in_the_patch(raw_pack: Path, tmp_path: Path) -> None:
    # setup.cfg is forbidden and the agent leaves it untouched; a text attribute made git add
    # normalise its line endings, so the graded patch changed it and no check saw the change.
    pack = seal_with_workspace_file(raw_pack, "setup.cfg", b"[tool:pytest]\r\naddopts = -q\r\n")
    run_dir, events, cards = run(pack, tmp_path, sh(f"{WRONG}; printf 'setup.cfg text\\n* ident\\n' > .gitattributes; "
                                                     "printf '# $Id: kept $\\r\\n' >> window.py"),
                                 max_attempts=1)
    patch = (run_dir / "patches" / f"{TASK}.patch").read_bytes()
    assert b"diff --git a/setup.cfg" not in patch
    assert b"+# $Id: kept $\r\n" in patch  # the workspace's bytes, not git's conversion of them
    assert of_kind(events, "graded")[0]["payload"]["forbidden"] == []
    assert cards[0]["outcome"] == "fail"


@needs_bwrap
@pytest.mark.parametrize("plant", [
    "git init -q sub && echo x > sub/a.py",
    "mkdir .GIT && echo x > .GIT/config",
    "mkdir -p pkg/GIT~1 && echo x > pkg/GIT~1/HEAD",
    "mkdir -p 'pkg/.git. ' && echo x > 'pkg/.git. /HEAD'",
    "ln -s window.py .gitmodules",
], ids=["nested_repository", "dotgit_upper_case", "dotgit_short_name", "dotgit_trailing_dot_space",
        "gitmodules_symlink"])
def test_name_git_refuses_is_the_agents_failure_not_a_harness_error(sealed_pack: Path, tmp_path: Path,
                                                                    plant: str) -> None:
    # git add failed on each of these ("adding files failed"): a harness error for any agent
    # that so much as ran git init in a subfolder.
    _, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; {plant}"), max_attempts=1)
    assert not of_kind(events, "harness_error")
    assert cards[0]["outcome"] == "fail"
    assert "git will not record" in of_kind(events, "patch_captured")[0]["payload"]["rejected"]


@needs_bwrap
def test_gitdir_file_planted_in_a_subfolder_does_not_make_the_host_read_a_host_repository(
        sealed_pack: Path, tmp_path: Path) -> None:
    # sub/.git naming a repository on the host made git add read that repository's HEAD on the
    # host and record it in the patch ("Subproject commit <host HEAD>").
    host_repo = tmp_path / "host-repo"
    host_repo.mkdir()
    from sealbench.gitrepo import init_one_commit

    (host_repo / "secret.txt").write_text("host")
    head = init_one_commit(host_repo, host_repo / ".git")
    plant = f"mkdir sub && echo x > sub/a.py && echo 'gitdir: {host_repo / '.git'}' > sub/.git"
    run_dir, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; {plant}"), max_attempts=1)
    assert not any(head.encode() in p.read_bytes() for p in (run_dir / "blobs").iterdir())
    assert "git will not record" in of_kind(events, "patch_captured")[0]["payload"]["rejected"]
    assert cards[0]["outcome"] == "fail"


@needs_bwrap
@pytest.mark.parametrize("plant", ["mkfifo .gitignore", "mkdir sub && mkfifo sub/.gitattributes"],
                         ids=["gitignore_fifo", "gitattributes_fifo"])
def test_fifo_git_would_read_does_not_hold_the_runner_until_the_deadline(sealed_pack: Path, tmp_path: Path,
                                                                        plant: str) -> None:
    # git add opens every .gitignore and .gitattributes: a fifo there blocked it until the
    # task's wall clock ran out, and the attempt became a timeout.
    t0 = time.monotonic()
    _, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; {plant}"), max_attempts=1, wall_clock_s=120)
    assert time.monotonic() - t0 < 60
    assert cards[0]["outcome"] == "fail"
    assert "fifo" in of_kind(events, "patch_captured")[0]["payload"]["rejected"]


@needs_bwrap
@pytest.mark.parametrize("plant", [
    "printf '!/.sealbench/\\n' > .gitignore; echo 'import os' > .sealbench/conftest.py",
    "rm -rf .sealbench; echo 'import os' > .sealbench",
    "printf '.sealbench\\n' > .gitignore",
], ids=["gitignore_negation", "meta_folder_replaced_by_a_file", "gitignore_ignores_it"])
def test_meta_folder_cannot_be_smuggled_into_the_patch(sealed_pack: Path, tmp_path: Path, plant: str) -> None:
    # The snapshot (and so the forbidden-path check) skips .sealbench/, and git skipped it only
    # through info/exclude, which a .gitignore overrides: .sealbench/conftest.py reached the
    # grading copy with no forbidden path recorded.
    run_dir, events, _ = run(sealed_pack, tmp_path, sh(f"{WRONG}; {plant}"), max_attempts=1)
    assert not of_kind(events, "harness_error")
    patch = (run_dir / "patches" / f"{TASK}.patch").read_bytes()
    assert b"diff --git a/.sealbench" not in patch
    assert b"diff --git a/window.py" in patch


@needs_bwrap
def test_meta_folder_link_does_not_make_the_host_read_a_host_trace_folder(sealed_pack: Path, tmp_path: Path) -> None:
    # O_NOFOLLOW guards only the last component: with .sealbench a link to a host folder that
    # holds a trace/ folder, the host walked and digested that host folder as the agent's trace.
    from sealbench.agentfs import trace_digest

    host = tmp_path / "host"
    (host / "trace").mkdir(parents=True)
    (host / "trace" / "secret.txt").write_text("host data")
    plant = f"rm -rf .sealbench; ln -s {shlex.quote(str(host))} .sealbench"
    _, events, cards = run(sealed_pack, tmp_path, sh(f"{WRONG}; {plant}"), max_attempts=1)
    finished = of_kind(events, "agent_finished")[0]["payload"]
    assert finished["transcript"] != trace_digest(host / "trace", TreeCaps())
    assert "not a directory" in finished["transcript_rejected"]
    assert cards[0]["outcome"] == "fail" and not of_kind(events, "harness_error")


# Attempt 1 leaves a candidate whose import takes 1.5 s (grading is slow) and notes the time it
# stopped; attempt 2 notes, relative to that, the times of what the host made for it. With the
# gap, nothing of attempt 2 may be older than the gap's end: the time of anything made between
# the end of grading and the end of the gap is the grading time, to the nanosecond.
TIMES_PY = r'''
import os, sys, time
if sys.argv[1] == "1":
    open("window.py", "w").write(
        "import os, time\n"
        "time.sleep(1.5)\n"
        "if os.path.isdir('.sealbench'):  # the visible tests run in the workspace\n"
        "    open('seen_by_visible_tests', 'w').write(repr(time.time()))\n"
        "print('visible tests ran at', repr(time.time()))\n"
        "def last_n(items, n):\n    return []\n")
    open("t1", "w").write(repr(time.time()))
else:
    t1 = float(open("t1").read())
    prompt = os.environ["SEALBENCH_PROMPT_FILE"]
    seen = {"prompt file": os.stat(prompt).st_mtime, "prompt folder": os.stat(os.path.dirname(prompt)).st_mtime,
            ".sealbench": os.stat(".sealbench").st_mtime, "/tmp": os.stat("/tmp").st_mtime,
            "now": time.time()}
    if os.path.exists("seen_by_visible_tests"):
        seen["visible tests run"] = float(open("seen_by_visible_tests").read())
    for line in open(prompt):
        if "visible tests ran at" in line:
            seen["visible tests output"] = float(line.split()[-1])
    open("times.txt", "w").write("\n".join(f"{k}={v - t1}" for k, v in seen.items()))
'''


def _times_seen_by_attempt_two(pack: Path, tmp_path: Path, **kw: Any) -> dict[str, float]:
    command, mounts = python_agent(tmp_path, TIMES_PY)
    run_dir, _, _ = run(pack, tmp_path, command, max_attempts=2, mounts=mounts, attempt_gap_s=GAP, **kw)
    patch = (run_dir / "patches" / f"{TASK}.patch").read_text()
    body = patch.split("+++ b/times.txt")[1].split("diff --git")[0]
    return {k[1:]: float(v) for k, v in (line.split("=") for line in body.splitlines() if line.startswith("+"))}


GAP = 8.0


@needs_bwrap
def test_grading_time_does_not_reach_the_next_attempt_through_file_times(sealed_pack: Path, tmp_path: Path) -> None:
    # The prompt was written and .sealbench rebuilt (and the sandbox set up) before the gap
    # was waited out: their mtimes told attempt 2 exactly when grading had ended.
    seen = _times_seen_by_attempt_two(sealed_pack, tmp_path)
    assert seen["now"] >= GAP
    assert all(v >= GAP for v in seen.values()), seen


@needs_bwrap
def test_grading_time_does_not_reach_the_next_attempt_through_the_visible_tests(raw_pack: Path,
                                                                               tmp_path: Path) -> None:
    # The visible tests ran the candidate right after grading, before the gap: it could write
    # the time into the workspace or into the output shown in the next prompt.
    from sealbench.pack import seal_pack

    task_file = raw_pack / "tasks" / TASK / "task.json"
    record = json.loads(task_file.read_text())
    record["visible_test_cmd"] = ["python", "-c", "import window"]
    task_file.write_text(json.dumps(record))
    seal_pack(raw_pack)
    seen = _times_seen_by_attempt_two(raw_pack, tmp_path, feedback="visible_tests")
    assert {"visible tests run", "visible tests output"} <= seen.keys()
    assert all(v >= GAP for v in seen.values()), seen


# --- without a sandbox: the host-private folders beside the workspace --------------------


@pytest.mark.parametrize("site", ["prompt_folder", "private_git_dir", "patch_file"])
def test_link_planted_beside_the_workspace_without_a_sandbox_is_not_followed(sealed_pack: Path, tmp_path: Path,
                                                                             site: str) -> None:
    # With --sandbox none the agent can reach the task's folder (the workspace's parent): the
    # host wrote the next prompt into a link planted at in/, git wrote its index and objects into
    # a repository linked at base.git, and the patch for git apply through a link at grade-1.patch.
    host = tmp_path / "host"
    host.mkdir()
    victim = host / "victim.txt"
    victim.write_text("host file")
    from sealbench.gitrepo import init_one_commit

    init_one_commit(host, host / ".git")
    before = {p.relative_to(host): p.read_bytes() for p in host.rglob("*") if p.is_file()}
    plant = {
        "prompt_folder": f"rm -rf ../in; ln -s {shlex.quote(str(host))} ../in",
        "private_git_dir": f"ln -s {shlex.quote(str(host / '.git'))} ../base.git",
        "patch_file": f"ln -s {shlex.quote(str(victim))} ../grade-1.patch",
    }[site]
    script = f'if [ "{{attempt}}" = 1 ]; then {plant}; fi; {WRONG}'
    _, events, cards = run(sealed_pack, tmp_path, sh(script), max_attempts=2,
                           options=RunOptions(progress=False, sandbox="none"))
    after = {p.relative_to(host): p.read_bytes() for p in host.rglob("*") if p.is_file()}
    assert after == before, "the host wrote through the agent's link"
    assert not of_kind(events, "harness_error")
    assert cards[0]["outcome"] == "fail" and cards[0]["attempts_used"] == 2


# --- what is still open ----------------------------------------------------------------


@needs_bwrap
def test_workspace_write_past_its_byte_cap_fails_inside_the_sandbox(sealed_pack: Path, tmp_path: Path) -> None:
    # Files of 3 MiB each, far below the 256 MiB per-file limit (RLIMIT_FSIZE), whose sum passes
    # the 16 MiB cap: only a quota on the whole workspace stops them, and it must stop them
    # inside the sandbox, where the agent sees ENOSPC, not on the host's disk.
    opts = RunOptions(progress=False, tree_caps=TreeCaps(max_bytes=16 << 20))
    script = (f"{WRONG}; v=wrote; i=0; while [ $i -lt 12 ]; do i=$((i+1)); "
              "if ! e=$(head -c 3M /dev/zero 2>&1 > junk$i); then v=\"refused at file $i: $e\"; break; fi; "
              "done; rm -f junk*; echo \"$v\" > verdict.txt")
    run_dir, events, cards = run(sealed_pack, tmp_path, sh(script), options=opts, max_attempts=1)
    patch = (run_dir / "patches" / f"{TASK}.patch").read_text()
    # Five files (15 MiB) fit beside the workspace; the sixth passes the cap.
    assert "+refused at file 6" in patch and "No space left on device" in patch, patch
    # The attempt goes on to be graded normally: the agent's failure, not the harness's.
    assert of_kind(events, "graded")[0]["payload"]["patch_applies_clean"] is True
    assert cards[0]["outcome"] == "fail"
    assert not of_kind(events, "harness_error")


RIGHT = "printf 'def last_n(items, n):\\n    return items[-n:] if n > 0 else []\\n' > window.py"


def test_exploit_hard_links_that_fit_a_cap_of_bytes_overflow_the_grading_copy(sealed_pack: Path, tmp_path: Path) -> None:
    # 3,000 names of one 4,097-byte file: 12.3 MB of bytes under a 16 MiB cap, but two pages
    # each (24.6 MB) in every copy. Counted in bytes, the copy back took them and the grading
    # copy's quota overflowed: the run stopped on a "storage failure" with the host disk empty.
    opts = RunOptions(progress=False, tree_caps=TreeCaps(max_bytes=16 << 20))
    script = (f"{RIGHT}; mkdir d; head -c 4097 /dev/zero > d/f0; i=1; "
              "while [ $i -lt 3000 ]; do ln d/f0 d/f$i; i=$((i+1)); done")
    _run_dir, events, cards = run(sealed_pack, tmp_path, sh(script), options=opts, max_attempts=1)
    captured = of_kind(events, "patch_captured")[0]["payload"]
    assert "holds more than 16777216 bytes of files" in captured["rejected"], captured
    assert cards[0]["outcome"] == "fail"
    assert not of_kind(events, "harness_error") and not of_kind(events, "run_interrupted")


def test_exploit_an_attempt_that_breaks_the_entry_cap_leaves_no_harness_error_to_the_next(
        sealed_pack: Path, tmp_path: Path) -> None:
    # Attempt 1 leaves more entries than the cap (and removes the trace folder): its copy back
    # stops at the cap, and the next attempt's copy in counted those entries plus the trace
    # folder the harness rebuilds, one past the cap: a harness error, and no rate. The next
    # attempt starts from the pack's workspace instead, and here it fixes the task.
    opts = RunOptions(progress=False, tree_caps=TreeCaps(max_entries=300))
    script = (f'if [ "$SEALBENCH_ATTEMPT" = 1 ]; then rm -rf .sealbench/trace; mkdir z; i=0; '
              f"while [ $i -lt 400 ]; do : > z/$i; i=$((i+1)); done; "
              f"else test ! -e z && {RIGHT}; fi")
    _run_dir, events, cards = run(sealed_pack, tmp_path, sh(script), options=opts, max_attempts=2)
    captured = of_kind(events, "patch_captured")[0]["payload"]
    assert "holds more than 300 entries" in captured["rejected"], captured
    assert not of_kind(events, "harness_error")
    assert cards[0]["outcome"] == "pass" and cards[0]["attempts_used"] == 2


FILLS_THE_GRADING_COPY = """
import errno, os

def _fill():
    try:
        for i in range(12):  # 3 MiB each, 36 MiB in all, past the 16 MiB cap
            with open(f"junk{i}", "wb") as f:
                f.write(bytes(3 << 20))
    except OSError as e:
        if not CATCH:
            raise
        return e.errno
    finally:
        for i in range(12):
            if os.path.exists(f"junk{i}"):
                os.remove(f"junk{i}")
    return None

SEEN = _fill()

def last_n(items, n):
    # Right only when the quota stopped the writes inside the sandbox.
    return (items[-n:] if n > 0 else []) if SEEN == errno.ENOSPC else []
"""


@needs_bwrap
@pytest.mark.parametrize("catch", [True, False], ids=["caught", "uncaught"])
def test_code_under_test_writing_past_the_cap_gets_enospc_in_the_grading_copy(sealed_pack: Path, tmp_path: Path,
                                                                                catch: bool) -> None:
    candidate = f"CATCH = {catch}\n" + FILLS_THE_GRADING_COPY
    command, mounts = python_agent(tmp_path, f"open('window.py', 'w').write({candidate!r})\n")
    opts = RunOptions(progress=False, tree_caps=TreeCaps(max_bytes=16 << 20))
    _, events, cards = run(sealed_pack, tmp_path, command, options=opts, max_attempts=1, mounts=mounts)
    assert not of_kind(events, "harness_error")
    graded = of_kind(events, "graded")[0]["payload"]
    assert graded["patch_applies_clean"] is True
    # Caught, ENOSPC was seen inside and the hidden tests ran on (a pass proves both); uncaught,
    # the candidate fails its own import: the agent's failure.
    assert cards[0]["outcome"] == ("pass" if catch else "fail"), graded


FILLS_THE_REPORT_FOLDER = """
import subprocess, sys

# The guarded pytest's private folder (its report and record) is the code under test's to
# write too; a shell writes there, out of the reach of the guard's audit hook.
private = sys.argv[1]
codes = [subprocess.run(["sh", "-c", f"head -c 8M /dev/zero > {private}/junk{i}"], stderr=subprocess.DEVNULL).returncode
         for i in range(12)]  # 96 MiB, past the folder's 64 MiB
subprocess.run(["sh", "-c", f"rm -f {private}/junk*"])

def last_n(items, n):
    # Right only when a write into the folder failed inside the sandbox.
    return (items[-n:] if n > 0 else []) if any(codes) else []
"""


@needs_bwrap
def test_code_under_test_writing_past_the_cap_gets_enospc_in_the_report_folder(sealed_pack: Path,
                                                                               tmp_path: Path) -> None:
    command, mounts = python_agent(tmp_path, f"open('window.py', 'w').write({FILLS_THE_REPORT_FOLDER!r})\n")
    _, events, _ = run(sealed_pack, tmp_path, command, max_attempts=1, mounts=mounts)
    assert not of_kind(events, "harness_error")
    graded = of_kind(events, "graded")[0]["payload"]
    # The hidden tests pass only if the candidate saw a write refused inside the sandbox (and
    # pytest could still write its report once the candidate had removed its files).
    assert graded["tests_green"] is True, graded


@needs_bwrap
def test_run_without_the_workspace_quota_says_so_in_its_journal(sealed_pack: Path, tmp_path: Path) -> None:
    # The opt-out binds the workspace from the host (its files watchable while the agent runs):
    # the write past the cap then lands on the host's disk, and the journal records the choice.
    opts = RunOptions(progress=False, workspace_quota=False, tree_caps=TreeCaps(max_bytes=4 << 20))
    script = f"{WRONG}; if head -c 6M /dev/zero > junk; then echo wrote > verdict.txt; fi; rm -f junk"
    run_dir, events, _ = run(sealed_pack, tmp_path, sh(script), options=opts, max_attempts=1)
    assert "+wrote" in (run_dir / "patches" / f"{TASK}.patch").read_text()
    assert of_kind(events, "run_started")[0]["payload"]["workspace_quota"] is False


@needs_bwrap
def test_jobs_whose_quotas_could_fill_the_hosts_memory_are_refused(sealed_pack: Path, tmp_path: Path) -> None:
    # tmpfs pages are memory: hostile agents filling the quotas of too many tasks at once would
    # take the host down. Refused before anything of the run is written.
    from sealbench.errors import RunRefusal

    with pytest.raises(RunRefusal, match=r"use --jobs \d+ or fewer"):
        run(sealed_pack, tmp_path, sh(WRONG), options=RunOptions(progress=False, jobs=100_000), max_attempts=1)
    assert not (tmp_path / "run").exists()


@needs_bwrap
def test_a_contract_sizes_its_sandboxes_and_the_agent_meets_those_sizes(sealed_pack: Path, tmp_path: Path) -> None:
    # contract new --workspace-mib 4 --tmp-mib 2: locked, and what the agent's writes meet.
    script = (f"{WRONG}; head -c 6M /dev/zero > junk 2>/dev/null; full=$?; rm -f junk; "
              "[ $full -ne 0 ] && echo workspace-full >> verdict.txt; "
              "head -c 3M /dev/zero > /tmp/big 2>/dev/null || echo tmp-full >> verdict.txt; rm -f /tmp/big; "
              "head -c 1M /dev/zero > /tmp/small && echo tmp-fits >> verdict.txt")
    run_dir, _events, cards = run(sealed_pack, tmp_path, sh(script), max_attempts=1,
                                 sandbox_caps={"workspace_bytes": 4 << 20, "tmp_bytes": 2 << 20})
    patch = (run_dir / "patches" / f"{TASK}.patch").read_text()
    assert "+workspace-full\n+tmp-full\n+tmp-fits" in patch, patch
    budget = json.loads((tmp_path / "contract.json").read_text())["budget"]
    assert (budget["workspace_bytes"], budget["tmp_bytes"]) == (4 << 20, 2 << 20)
    assert cards[0]["outcome"] == "fail"


@needs_bwrap
def test_small_sandboxes_let_more_jobs_run_than_the_defaults_do(sealed_pack: Path, tmp_path: Path) -> None:
    # What lets hundreds of model-bound agents run at once: the memory check counts the
    # contract's sizes (workspace, the harness's folder no larger than it, /tmp and /dev/shm).
    from sealbench.errors import RunRefusal
    from sealbench.sandbox import Limits
    from sealbench.sizing import MEMORY_SHARE, _memory_total, memory_per_job, sized

    total = _memory_total()
    if total is None:
        pytest.skip("this machine does not say how much memory it has")
    jobs = int(total * MEMORY_SHARE) // memory_per_job(Limits(), TreeCaps()) + 1
    caps = {"workspace_bytes": 4 << 20, "tmp_bytes": 2 << 20}
    small = make_contract(sealed_pack, tmp_path / "small.json", task_ids=(TASK,), command=sh(WRONG),
                          run_id="sized-small", sandbox_caps=caps)
    assert jobs * memory_per_job(*sized(small.budget, Limits(), TreeCaps())) <= total * MEMORY_SHARE
    execute(tmp_path / "small.json", tmp_path / "small", RunOptions(progress=False, jobs=jobs))
    assert (tmp_path / "small" / "scorecards.jsonl").is_file()
    with pytest.raises(RunRefusal, match=r"--workspace-mib"):
        run(sealed_pack, tmp_path, sh(WRONG), options=RunOptions(progress=False, jobs=jobs), max_attempts=1)


# --- the JUnit report the code under test can write ------------------------------------

NESTED_REPORT = r'''
import atexit

def _forge():
    # pytest has written its report by now; this replaces it within the 16 MiB cap.
    levels = (16 * 2**20 - 64) // 7
    with open("report.xml", "w") as f:
        f.write("<a>" * levels + "</a>" * levels)

atexit.register(_forge)

def last_n(items, n):
    return []
'''


@needs_bwrap
def test_deeply_nested_junit_report_does_not_blow_up_the_runners_memory(raw_pack: Path, tmp_path: Path) -> None:
    # A report of 2.4 million nested elements within the size cap cost the runner about 700 MB
    # while it built the tree (a few such gradings at once can exhaust the host).
    import subprocess
    import sys

    from sealbench.pack import seal_pack

    task_file = raw_pack / "tasks" / TASK / "task.json"
    record = json.loads(task_file.read_text())
    # A plain (unguarded) pytest oracle that reads its report from the grading copy, as packs
    # sealed before the harness-owned pytest do.
    record["oracle_cmd"] = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=report.xml",
                            record["oracle_cmd"][-1]]
    record["junit_xml"] = "report.xml"
    task_file.write_text(json.dumps(record))
    seal_pack(raw_pack)
    command, mounts = python_agent(tmp_path, f"open('window.py', 'w').write({NESTED_REPORT!r})\n")
    contract_file = tmp_path / "contract.json"
    make_contract(raw_pack, contract_file, task_ids=(TASK,), command=command, run_id="hostile-nested-junit",
                  max_attempts=1, mounts=mounts)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "sealbench"), "run", str(contract_file), "--out", str(run_dir),
                             "--no-progress", "--jobs", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    events = read_chain(run_dir / "journal.jsonl").events
    verdict = of_kind(events, "graded")[0]["payload"]["junit"]
    # ru_maxrss (KiB) is the largest of the runner and the processes it waited for, the oracle
    # whose candidate writes the report among them (about 290 MiB on a fresh install); the tree
    # the runner built from that report took it to 733 MiB.
    assert usage.ru_maxrss < 450 * 1024, f"peak {usage.ru_maxrss // 1024} MiB"
    assert verdict["ok"] is False and "deeper" in verdict["why"]


def test_jobs_without_workspace_quotas_are_charged_only_their_tmp_mounts(sealed_pack: Path, tmp_path: Path) -> None:
    # --no-workspace-quota mounts no workspace tmpfs: refusing its --jobs for 1 GiB quotas it
    # does not have refused a 64-sleeper run at --jobs 16 on a 24 GiB machine.
    from sealbench.grading import PRIVATE_CAPS
    from sealbench.sandbox import Limits
    from sealbench.sizing import memory_per_job

    limits, caps = Limits(), TreeCaps()
    assert memory_per_job(limits, caps) == caps.max_bytes + PRIVATE_CAPS.max_bytes + 2 * limits.tmp_bytes
    assert memory_per_job(limits, caps, quota=False) == 2 * limits.tmp_bytes
    total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    fits_without = int(total * 0.75) // (2 * limits.tmp_bytes)
    if fits_without * memory_per_job(limits, caps) <= total * 0.75:
        pytest.skip("this machine fits as many quota'd tasks as unquota'd ones")
    opts = RunOptions(progress=False, jobs=fits_without, workspace_quota=False)
    _, _, cards = run(sealed_pack, tmp_path, sh(WRONG), options=opts, max_attempts=1)
    assert cards[0]["outcome"] == "fail"


def test_contract_new_locks_the_sandbox_sizes_given_and_none_otherwise(sealed_pack: Path, tmp_path: Path,
                                                                       cli: Any) -> None:
    from sealbench.grading import PRIVATE_CAPS, private_caps

    base = ["contract", "new", sealed_pack, "--agent", "builtin:noop", "--agent-label", "noop", "--task", TASK]
    code, _, err = cli(*base, "-o", tmp_path / "sized.json", "--workspace-mib", "8", "--tmp-mib", "16")
    assert code == 0, err
    budget = json.loads((tmp_path / "sized.json").read_text())["budget"]
    assert (budget["workspace_bytes"], budget["tmp_bytes"]) == (8 << 20, 16 << 20)
    code, _, err = cli(*base, "-o", tmp_path / "plain.json")
    assert code == 0 and not {"workspace_bytes", "tmp_bytes"} & set(json.loads((tmp_path / "plain.json").read_text())["budget"])
    code, _, err = cli(*base, "-o", tmp_path / "tiny.json", "--workspace-mib", "0")
    assert code == 3 and "workspace_bytes" in err
    # A size the task's own workspace does not fit would make every attempt a harness error.
    import shutil

    from sealbench.pack import seal_pack

    big = tmp_path / "big-pack"
    shutil.copytree(sealed_pack, big)
    (big / "tasks" / TASK / "workspace" / "data.bin").write_bytes(b"\0" * (2 << 20))
    seal_pack(big)
    code, _, err = cli("contract", "new", big, "--agent", "builtin:noop", "--agent-label", "noop", "--task", TASK,
                       "-o", tmp_path / "small.json", "--workspace-mib", "1")
    assert code == 3 and f"task {TASK}'s workspace holds 2.0 MiB, more than the workspace size of 1.0 MiB" in err
    assert not (tmp_path / "small.json").exists()
    # The harness's folder in grading is no larger than the workspace, and 64 MiB by default.
    assert private_caps(TreeCaps(max_bytes=8 << 20)).max_bytes == 8 << 20
    assert private_caps(TreeCaps()).max_bytes == PRIVATE_CAPS.max_bytes == 64 << 20
