"""Pack loading refuses every malformed or unsafe input, naming the file and the key."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import needs_bwrap
from sealbench.digest import tree_digest
from sealbench.errors import PackError, VerificationFailed
from sealbench.pack import check_pack, load_pack, seal_pack, visible_test_leaks

TASK = "t_11_fix_off_by_one"


def edit_record(pack: Path, change: Callable[[dict[str, Any]], None], task: str = TASK) -> Path:
    path = pack / "tasks" / task / "task.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("max_attempts"), "max_attempts: missing required key"),
        (lambda r: r.pop("oracle_cmd"), "oracle_cmd: missing required key"),
        (lambda r: r.pop("hidden_tests_sha256"), "hidden_tests_sha256: missing required key"),
        (lambda r: r.update(retries_hidden=3), "retries_hidden: unknown key"),
        (lambda r: r.update(max_attempts=True), "max_attempts: Input should be a valid integer"),
        (lambda r: r.update(max_attempts=0), "max_attempts: Input should be greater than or equal to 1"),
        (lambda r: r.update(max_attempts="2"), "max_attempts: Input should be a valid integer"),
        (lambda r: r.update(wall_clock_s=0), "wall_clock_s: Input should be greater than 0"),
        (lambda r: r.update(wall_clock_s=False), "wall_clock_s"),
        (lambda r: r.update(oracle_cmd=[]), "oracle_cmd: List should have at least 1 item"),
        (lambda r: r.update(oracle_cmd="pytest -q"), "oracle_cmd: Input should be a valid array"),
        (lambda r: r.update(oracle_cmd=["python", 3]), "oracle_cmd.1: Input should be a valid string"),
        (lambda r: r.update(oracle_cmd=[""]), "oracle_cmd.0"),
        (lambda r: r.update(task_id=""), "task_id"),
        (lambda r: r.update(task_id="a" * 129), "task_id"),
        (lambda r: r.update(task_id="../escape"), "task_id"),
        (lambda r: r.update(task_id="a/b"), "task_id"),
        (lambda r: r.update(task_id="x..y"), "task_id"),
        (lambda r: r.update(task_id="other-task"), "differs from its folder"),
        (lambda r: r.update(prompt_template_id="missing-v9"), "no template 'missing-v9'"),
        (lambda r: r.update(required_tests=["t"], oracle_cmd=["python", "check.py"]), "required_tests: needs junit_xml"),
        (lambda r: r.update(junit_xml="r.xml"), "junit_xml: must be null for a sealbench-pytest oracle"),
        (lambda r: r.update(oracle_cmd=["sealbench-pytest", "-c", "pytest.ini", "t.py"]),
         "oracle_cmd: '-c': the harness owns this pytest option"),
        (lambda r: r.update(oracle_cmd=["sealbench-pytest", "--rootdir=src", "t.py"]),
         "oracle_cmd: '--rootdir=src': the harness owns"),
        (lambda r: r.update(oracle_cmd=["sealbench-pytest", "--junitxml=out.xml", "t.py"]), "the harness owns"),
        (lambda r: r.update(visible_test_cmd=["sealbench-pytest", "tests"]), "visible_test_cmd: sealbench-pytest is for"),
        (lambda r: r.update(junit_xml="../out.xml", oracle_cmd=["python", "check.py"]), "junit_xml: must be a relative path"),
    ],
)
def test_bad_task_record_is_refused_naming_file_and_key(
    raw_pack: Path, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    path = edit_record(raw_pack, change)
    with pytest.raises(PackError) as info:
        load_pack(raw_pack)
    assert message in str(info.value)
    assert str(path) in str(info.value) or "tasks" in str(info.value)


def test_seed_record_with_placeholder_loads(raw_pack: Path) -> None:
    pack = load_pack(raw_pack)
    assert pack.tasks[TASK].record.hidden_tests_sha256 == "pending-local-hash"
    assert len(pack.tasks) == 5


def test_invalid_json_is_refused_with_line(raw_pack: Path) -> None:
    (raw_pack / "tasks" / TASK / "task.json").write_text('{"task_id": ')
    with pytest.raises(PackError, match="invalid JSON"):
        load_pack(raw_pack)


def test_duplicate_ids_differing_only_in_case_are_refused(raw_pack: Path) -> None:
    src = raw_pack / "tasks" / TASK
    dst = raw_pack / "tasks" / TASK.upper()
    os.rename(src, dst)
    edit_record(raw_pack, lambda r: r.update(task_id=TASK.upper()), TASK.upper())
    import shutil

    shutil.copytree(dst, src)
    edit_record(raw_pack, lambda r: r.update(task_id=TASK), TASK)
    with pytest.raises(PackError, match="duplicate task id"):
        load_pack(raw_pack)


def test_symlink_leaving_the_pack_is_refused(raw_pack: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("x")
    (raw_pack / "tasks" / TASK / "workspace" / "leak.txt").symlink_to(outside)
    with pytest.raises(PackError, match="symlink leaves the pack"):
        seal_pack(raw_pack)


def test_symlinked_task_folder_leaving_the_pack_is_refused(raw_pack: Path, tmp_path: Path) -> None:
    import shutil

    shutil.move(str(raw_pack / "tasks" / TASK), tmp_path / TASK)
    (raw_pack / "tasks" / TASK).symlink_to(tmp_path / TASK)
    with pytest.raises(PackError, match="symlink leaves the pack"):
        load_pack(raw_pack)


def test_symlinked_workspace_leaving_the_pack_is_refused(raw_pack: Path, tmp_path: Path) -> None:
    import shutil

    shutil.move(str(raw_pack / "tasks" / TASK / "workspace"), tmp_path / "workspace")
    (raw_pack / "tasks" / TASK / "workspace").symlink_to(tmp_path / "workspace")
    with pytest.raises(PackError, match="workspace: symlink leaves the pack"):
        load_pack(raw_pack)


def test_symlinked_tasks_folder_leaving_the_pack_is_refused(raw_pack: Path, tmp_path: Path) -> None:
    import shutil

    shutil.move(str(raw_pack / "tasks"), tmp_path / "tasks")
    (raw_pack / "tasks").symlink_to(tmp_path / "tasks")
    with pytest.raises(PackError, match="symlink leaves the pack"):
        load_pack(raw_pack)


def test_tree_entries_name_every_entry_by_its_path_kind_and_digest(tmp_path: Path) -> None:
    from sealbench.digest import UnsafeTree, sha256_bytes, tree_entries

    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    (root / "z.txt").write_bytes(b"z")
    (root / "a" / "b" / "deep.py").write_bytes(b"deep")
    (root / "a" / "run.sh").write_bytes(b"#!/bin/sh\n")
    (root / "a" / "run.sh").chmod(0o755)
    (root / "a" / "to-z").symlink_to("../z.txt")
    (root / "linked-dir").symlink_to("a/b")
    assert tree_entries(root) == [
        ["a/b/deep.py", "f", sha256_bytes(b"deep")],
        ["a/run.sh", "x", sha256_bytes(b"#!/bin/sh\n")],
        ["a/to-z", "l", sha256_bytes(b"../z.txt")],
        ["linked-dir", "l", sha256_bytes(b"a/b")],
        ["z.txt", "f", sha256_bytes(b"z")],
    ]
    assert tree_entries(tmp_path / "missing") == []
    (root / "a" / "b" / "out").symlink_to(tmp_path)
    with pytest.raises(UnsafeTree, match="symlink leaves the pack"):
        tree_entries(root)
    (root / "a" / "b" / "out").unlink()
    os.mkfifo(root / "a" / "fifo")
    with pytest.raises(UnsafeTree, match="not a regular file"):
        tree_entries(root)


def test_missing_prompt_is_refused(raw_pack: Path) -> None:
    (raw_pack / "tasks" / TASK / "prompt.md").unlink()
    with pytest.raises(PackError, match=r"prompt\.md: file not found"):
        load_pack(raw_pack)


def test_non_utf8_prompt_is_refused(raw_pack: Path) -> None:
    (raw_pack / "tasks" / TASK / "prompt.md").write_bytes(b"caf\xe9")
    with pytest.raises(PackError, match="not UTF-8"):
        load_pack(raw_pack)


def test_seal_fills_placeholder_and_check_passes(raw_pack: Path) -> None:
    pack = seal_pack(raw_pack)
    task = pack.tasks[TASK]
    assert task.record.hidden_tests_sha256 == tree_digest(task.hidden, pack.root)
    assert pack.sealed_digest is not None and pack.sealed_digest.startswith("sha256:")
    assert check_pack(raw_pack).sealed_digest == pack.sealed_digest


def test_seal_refuses_real_digest_that_does_not_match(raw_pack: Path) -> None:
    edit_record(raw_pack, lambda r: r.update(hidden_tests_sha256="sha256:" + "0" * 64))
    with pytest.raises(PackError, match="hidden_tests_sha256: recorded sha256:0000"):
        seal_pack(raw_pack)


def test_seal_refuses_a_task_without_hidden_tests(raw_pack: Path) -> None:
    for child in (raw_pack / "tasks" / TASK / "hidden").iterdir():
        child.unlink()
    with pytest.raises(PackError, match=rf"1 task\(s\) without hidden tests \({TASK}\): nothing would decide"):
        seal_pack(raw_pack)
    (raw_pack / "tasks" / TASK / "hidden").rmdir()
    with pytest.raises(PackError, match="without hidden tests"):
        seal_pack(raw_pack)


def test_seal_update_takes_an_edited_hidden_test_and_says_what_changed(raw_pack: Path, cli: Any) -> None:
    seal_pack(raw_pack)
    hidden = next((raw_pack / "tasks" / TASK / "hidden").iterdir())
    hidden.write_text(hidden.read_text() + "\n# one more line\n")
    (raw_pack / "tasks" / TASK / "prompt.md").write_text("A clearer prompt.\n")
    code, _, err = cli("pack", "seal", raw_pack)
    assert code == 3 and "the hidden tests changed since the seal" in err and "pack seal --update" in err
    code, out, _ = cli("pack", "seal", raw_pack, "--update")
    assert code == 0, out
    assert f"  {TASK}: task.json, prompt.md, hidden/ changed" in out
    pack = check_pack(raw_pack)
    assert pack.tasks[TASK].record.hidden_tests_sha256 == tree_digest(pack.tasks[TASK].hidden, pack.root)
    code, out, _ = cli("pack", "seal", raw_pack, "--update")
    assert code == 0 and "nothing changed since the last seal" in out


@needs_bwrap
def test_seal_update_of_a_validated_pack_has_a_way_out_that_validates_again(raw_pack: Path, cli: Any) -> None:
    # `pack seal --update` on a validated pack once refused and said "edit a copy", and the copy
    # carried the same validity record: a loop. The way out drops the old evidence explicitly.
    for other in (raw_pack / "tasks").iterdir():
        if other.name != TASK:
            shutil.rmtree(other)
    seal_pack(raw_pack)
    code, out, err = cli("pack", "validate", raw_pack, "--repeat", "1", "--no-progress")
    assert code == 0, out + err
    validated = load_pack(raw_pack).manifest.validity
    assert validated is not None
    hidden = next((raw_pack / "tasks" / TASK / "hidden").iterdir())
    hidden.write_text(hidden.read_text() + "\n# one more line\n")

    code, _, err = cli("pack", "seal", raw_pack, "--update")
    assert code == 3 and "the pack was validated" in err
    assert f"sealbench pack seal --update --drop-validity {raw_pack}" in err
    assert load_pack(raw_pack).manifest.validity == validated, "a refusal writes nothing"

    code, out, _ = cli("pack", "seal", raw_pack, "--update", "--drop-validity")
    assert code == 0 and f"next: `sealbench pack validate {raw_pack}`" in out
    assert load_pack(raw_pack).manifest.validity is None

    code, out, err = cli("pack", "validate", raw_pack, "--repeat", "1", "--no-progress")
    assert code == 0, out + err
    pack = check_pack(raw_pack)
    assert pack.manifest.validity is not None and pack.manifest.validity.pack_sha256 == pack.sealed_digest
    assert pack.sealed_digest != validated.pack_sha256


def test_seal_update_that_changes_nothing_keeps_the_validity(raw_pack: Path) -> None:
    from sealbench.files import model_json
    from sealbench.formats import Validity

    pack = seal_pack(raw_pack)
    assert pack.sealed_digest is not None
    validity = Validity(pack_sha256=pack.sealed_digest, repeat=1, sandbox="bubblewrap", tasks={})
    (raw_pack / "pack.json").write_text(model_json(pack.manifest.model_copy(update={"validity": validity})))
    assert seal_pack(raw_pack, update=True).manifest.validity == validity


def test_drop_validity_goes_with_update(sealed_pack: Path, cli: Any) -> None:
    code, _, err = cli("pack", "seal", sealed_pack, "--drop-validity")
    assert code == 2 and "--drop-validity goes with --update" in err


def test_check_refuses_unsealed_pack(raw_pack: Path) -> None:
    with pytest.raises(PackError, match="not sealed"):
        check_pack(raw_pack)


def test_pack_digest_ignores_mtimes_and_permissions_but_not_exec_bit(sealed_pack: Path) -> None:
    before = check_pack(sealed_pack).sealed_digest
    f = sealed_pack / "tasks" / TASK / "workspace" / "window.py"
    os.utime(f, (1, 1))
    os.chmod(f, 0o600)
    assert check_pack(sealed_pack).sealed_digest == before
    os.chmod(f, 0o755)
    with pytest.raises(VerificationFailed, match="workspace differs from the seal"):
        check_pack(sealed_pack)


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ("hidden/test_oracle_window.py", "hidden tests differ from hidden_tests_sha256"),
        ("workspace/window.py", "workspace differs from the seal"),
        ("prompt.md", "prompt differs from the seal"),
        ("solution/window.py", "solution differs from the seal"),
    ],
)
def test_check_reports_every_tampered_part(sealed_pack: Path, part: str, expected: str) -> None:
    with (sealed_pack / "tasks" / TASK / part).open("a") as f:
        f.write("\n# edited\n")
    with pytest.raises(VerificationFailed) as info:
        check_pack(sealed_pack)
    assert any(expected in p for p in info.value.problems)


def test_check_reports_all_problems_not_only_the_first(sealed_pack: Path) -> None:
    for tid in ("csv-split-001", TASK):
        for f in (sealed_pack / "tasks" / tid / "workspace").iterdir():
            f.write_text("changed\n")
    with pytest.raises(VerificationFailed) as info:
        check_pack(sealed_pack)
    assert len([p for p in info.value.problems if "workspace differs" in p]) == 2


def test_refuse_hidden_test_line_visible_in_prompt(raw_pack: Path) -> None:
    prompt = raw_pack / "tasks" / TASK / "prompt.md"
    prompt.write_text(prompt.read_text() + "\nFor example: assert last_n([1, 2, 3, 4, 5], 2) == [4, 5]\n")
    with pytest.raises(PackError, match="hidden tests are visible to the agent"):
        seal_pack(raw_pack)


def test_refuse_hidden_test_name_visible_in_workspace(raw_pack: Path) -> None:
    (raw_pack / "tasks" / TASK / "workspace" / "NOTES.md").write_text("see test_oracle_window.py\n")
    with pytest.raises(PackError, match=r"hidden test name 'test_oracle_window\.py' appears in workspace/NOTES\.md"):
        seal_pack(raw_pack)


def test_refuse_hidden_test_copied_into_workspace_at_check(sealed_pack: Path) -> None:
    hidden = sealed_pack / "tasks" / TASK / "hidden" / "test_oracle_window.py"
    (sealed_pack / "tasks" / TASK / "workspace" / "copy.py").write_text(hidden.read_text())
    with pytest.raises(PackError, match="visible to the agent"):
        check_pack(sealed_pack)


def test_sample_pack_has_no_leaks(raw_pack: Path) -> None:
    pack = load_pack(raw_pack)
    assert {tid: visible_test_leaks(t) for tid, t in pack.tasks.items() if visible_test_leaks(t)} == {}


def _record(**fields: Any) -> Any:
    from sealbench.formats import TaskRecord

    return TaskRecord.model_validate({"task_id": "t", "prompt_template_id": "p", "oracle_cmd": ["pytest", "-q"],
                                      "hidden_tests_sha256": "sha256:" + "0" * 64, "max_attempts": 1,
                                      "wall_clock_s": 60, "language": "python", **fields})


GUARDED = ["sealbench-pytest", "-q", "tests"]


@pytest.mark.parametrize(("fields", "problem"), [
    ({}, None),
    ({"oracle_cmd": GUARDED}, None),
    ({"oracle_cmd": GUARDED, "junit_xml": "report.xml"},
     "junit_xml: must be null for a sealbench-pytest oracle (the harness writes its JUnit report outside the "
     "workspace)"),
    ({"required_tests": ["t::a"]}, "required_tests: needs junit_xml (or a sealbench-pytest oracle) to be checked"),
    ({"required_tests": ["t::a"], "junit_xml": "r.xml"}, None),
    ({"decided_by": "required", "junit_xml": "r.xml"},
     "decided_by: 'required' needs required_tests, the tests that decide"),
    ({"decided_by": "required", "required_tests": ["t::a"], "oracle_cmd": GUARDED}, None),
    ({"visible_test_cmd": GUARDED},
     "visible_test_cmd: sealbench-pytest is for oracles; the visible tests are the agent's own (use python -m "
     "pytest ...)"),
    ({"junit_xml": "/tmp/r.xml"}, "junit_xml: must be a relative path inside the workspace"),
    ({"junit_xml": "a/../../r.xml"}, "junit_xml: must be a relative path inside the workspace"),
    ({"deleted_test_files": ["tests/test_a.py"]},
     "deleted_test_files: 'tests/test_a.py': must be a plain relative path inside the workspace, in a task whose "
     "test_files is 'reset'"),
    ({"deleted_test_files": ["tests/test_a.py"], "test_files": "reset"}, None),
    ({"deleted_test_files": ["tests/./a.py"], "test_files": "reset"},
     "deleted_test_files: 'tests/./a.py': must be a plain relative path inside the workspace, in a task whose "
     "test_files is 'reset'"),
    # Reported in order: the oracle's problem before the paths'.
    ({"required_tests": ["t::a"], "junit_xml": None, "deleted_test_files": ["x"]},
     "required_tests: needs junit_xml (or a sealbench-pytest oracle) to be checked"),
], ids=["plain", "guarded", "guarded-with-junit", "required-without-report", "required-with-report",
        "decided-without-required", "decided-by-the-guard", "visible-tests-guarded", "junit-absolute",
        "junit-escapes", "deleted-without-reset", "deleted-with-reset", "deleted-not-plain", "first-problem-only"])
def test_a_task_record_is_refused_for_its_first_problem(fields: dict[str, Any], problem: str | None) -> None:
    from sealbench.pack import _record_problem

    assert _record_problem(_record(**fields)) == problem
