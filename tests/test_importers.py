"""Importers turn public task sets into sealed packs, refuse damaged input by record, and
produce oracles that pass the reference and fail the stub."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sealbench.importers as importers
from conftest import needs_bwrap
from sealbench import pytest_oracle
from sealbench.errors import PackError, UsageError
from sealbench.formats import Provenance
from sealbench.grading import junit_verdict
from sealbench.importers import (
    ImportOptions,
    PackDraft,
    TaskDraft,
    get_importer,
    import_pack,
    importer_kinds,
    make_record,
    register_importer,
    text_file,
)
from sealbench.importers.mbpp import interface
from sealbench.importers.oracle import junit_test_name
from sealbench.importers.sources import task_id_for
from sealbench.pack import Pack, Task, check_pack, load_pack, visible_test_leaks
from sealbench.validate import validate_pack
from sealbench.workspace import copy_tree, overlay

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
HUMANEVAL = next(
    (p for p in (ROOT / ".cache" / "data" / "HumanEval.jsonl.gz", SHARED_DATA / "humaneval" / "HumanEval.jsonl.gz")
     if p.is_file()),
    None,
)
HUMANEVALPLUS = SHARED_DATA / "humanevalplus" / "HumanEvalPlus-OriginFmt.jsonl.gz"
MBPP = SHARED_DATA / "mbpp" / "mbpp.jsonl"
MBPP_SANITIZED = SHARED_DATA / "mbpp" / "sanitized-mbpp.json"
MBPPPLUS = SHARED_DATA / "mbppplus" / "MbppPlus-OriginFmt.jsonl.gz"

needs_humaneval = pytest.mark.skipif(
    HUMANEVAL is None, reason="HumanEval.jsonl.gz not in .cache/data (run `make data`) nor in ../shared/data"
)
needs_shared = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason="../shared/data (the public task sets beside the project) is absent"
)


# ---------------------------------------------------------------- helpers


def leftovers(parent: Path) -> list[str]:
    """Anything an import left in ``parent`` (temporary siblings included)."""
    return sorted(p.name for p in parent.iterdir()) if parent.exists() else []


def run_oracle(task: Task, tmp: Path, *, reference: bool, solution_py: str | None = None) -> tuple[bool, str]:
    """Grade like the runner does, minus the sandbox: workspace (+ solution) + hidden, then
    oracle_cmd (the harness's pytest for sealbench-pytest) with the venv's python first on
    PATH; pass = exit 0 and the JUnit verdict (and no forging flag)."""
    grade = Path(tempfile.mkdtemp(prefix=f"grade-{task.task_id}-", dir=tmp)) / "g"
    copy_tree(task.pack_workspace, grade)
    if reference:
        overlay(task.solution, grade)
    if solution_py is not None:
        (grade / "solution.py").write_text(solution_py, encoding="utf-8")
    overlay(task.hidden, grade)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp), "LANG": "C.UTF-8",
           "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    argv = list(task.record.oracle_cmd)
    guarded = None
    if pytest_oracle.is_guarded(argv):
        changed = {p.relative_to(task.solution).as_posix() for p in task.solution.rglob("*")} if reference else set()
        owned = {p.relative_to(task.pack_workspace).as_posix() for p in task.pack_workspace.rglob("*")} - changed
        guarded = pytest_oracle.prepare(grade.parent / "private", argv, owned | set(task.hidden_paths()))
        argv, env = list(guarded.argv), {**env, **guarded.env}
    proc = subprocess.run(argv, cwd=grade, env=env, capture_output=True,
                          timeout=task.record.wall_clock_s, check=False)
    green = proc.returncode == 0
    if guarded is not None:
        verdict = pytest_oracle.read_verdict(guarded, task.record.required_tests, proc.returncode)
        green = green and bool(verdict.junit["ok"]) and not verdict.flags
    elif task.record.junit_xml:
        green = green and bool(junit_verdict(grade, task.record.junit_xml, task.record.required_tests)["ok"])
    shutil.rmtree(grade.parent)
    return green, (proc.stdout + proc.stderr).decode("utf-8", "replace")[-2000:]


def assert_discriminates(pack: Pack, tmp: Path, task_ids: list[str]) -> None:
    for tid in task_ids:
        task = pack.tasks[tid]
        ok, out = run_oracle(task, tmp, reference=True)
        assert ok, f"{tid}: the reference fails its own oracle:\n{out}"
        ok, out = run_oracle(task, tmp, reference=False)
        assert not ok, f"{tid}: the untouched stub passes the oracle:\n{out}"


def write_jsonl_gz(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in records)))
    return path


def humaneval_records(n: int) -> list[dict[str, Any]]:
    assert HUMANEVAL is not None
    with gzip.open(HUMANEVAL, "rt", encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f, strict=False)]


def select_records(path: Path, ids: set[int]) -> list[dict[str, Any]]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    text = raw.decode("utf-8")
    rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x]
    return [r for r in rows if r["task_id"] in ids]


# ---------------------------------------------------------------- registry and options


def test_public_surface_is_pinned() -> None:
    assert importers.__all__ == sorted(importers.__all__)
    assert set(importers.__all__) == {
        "FileEntry", "Files", "ImportOptions", "Importer", "PackDraft", "TaskDraft", "get_importer",
        "import_pack", "importer_kinds", "make_record", "register_importer", "text_file",
    }


def test_builtin_kinds_are_registered() -> None:
    assert importer_kinds() == ["exercism", "humaneval", "humanevalplus", "mbpp", "mbppplus", "swebench", "tasks"]


def test_unknown_kind_is_a_usage_error_listing_the_kinds() -> None:
    with pytest.raises(UsageError, match="unknown importer 'nope'; known: exercism, humaneval"):
        get_importer("nope")


def test_a_kind_cannot_be_registered_twice_by_accident() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_importer("humaneval", get_importer("humaneval"))
    with pytest.raises(ValueError, match="lowercase"):
        register_importer("Bad Kind", get_importer("humaneval"))


def _one_task_importer(source: Path, options: ImportOptions) -> PackDraft:
    prov = Provenance(source="toy", contamination="written for this test")
    record = make_record("toy", task_id="toy-1", template_id="toy-v1", oracle_cmd=["python", "check_toy.py"],
                         max_attempts=options.max_attempts, wall_clock_s=10.0, provenance=prov)
    task = TaskDraft(record=record, prompt="Make f return 2.\n", workspace={"toy.py": text_file("def f():\n    return 1\n")},
                     hidden={"check_toy.py": text_file("import toy\nassert toy.f() == 2\n")},
                     solution={"toy.py": text_file("def f():\n    return 2\n")}, origin="toy record 1")
    return PackDraft(name="toy", description="a toy", provenance=prov,
                     templates={"toy-v1": "{task_prompt}\n"}, tasks=[task])


def test_a_registered_third_party_importer_takes_the_builtin_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(importers.registry._IMPORTERS, "toy", _one_task_importer)
    pack = import_pack("toy", tmp_path / "unused", tmp_path / "packs" / "toy", max_attempts=3)
    assert pack.sealed_digest is not None
    assert pack.tasks["toy-1"].record.max_attempts == 3
    assert check_pack(pack.root).sealed_digest == pack.sealed_digest


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retries": 2}, "unknown import option(s) retries"),
        ({"max_attempts": 0}, "max_attempts must be a whole number of at least 1"),
        ({"max_attempts": True}, "max_attempts must be a whole number"),
        ({"limit": -1}, "limit must be a whole number"),
        ({"wall_clock_s": 0}, "wall_clock_s must be a number of seconds above 0"),
        ({"name": 3}, "name must be a string"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path: Path, options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        import_pack("humaneval", tmp_path / "x.jsonl", tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("options", "parsed"), [
    ({"max_attempts": 2, "limit": None, "wall_clock_s": 30}, {"max_attempts": 2, "wall_clock_s": 30.0}),
    ({"repo": "/r", "env_spec": Path("/e")}, {"repo": Path("/r"), "env_spec": Path("/e")}),
    ({"repos": {"a": "/a"}}, {"repos": (("a", Path("/a")),)}),
    ({"repos": [("a", Path("/a")), ["b", "/b"]]}, {"repos": (("a", Path("/a")), ("b", Path("/b")))}),
    ({"repos": [("a",)]}, "repos must map repository names to paths"),
    ({"repo": 3}, "repo must be a path, got 3"),
    ({"python": 3.11}, "python must be a string, got 3.11"),
    # the first wrong value in the order of the checks is the one named
    ({"name": 3, "limit": 0, "repo": 1}, "limit must be a whole number of at least 1, got 0"),
])
def test_import_options_are_normalised_or_the_first_wrong_one_named(
        options: dict[str, Any], parsed: dict[str, Any] | str) -> None:
    if isinstance(parsed, str):
        with pytest.raises(UsageError, match=re.escape(parsed)):
            ImportOptions.parse(options)
    else:
        got = ImportOptions.parse(options)
        assert {k: getattr(got, k) for k in parsed} == parsed


def test_repo_option_belongs_to_swebench_only(tmp_path: Path) -> None:
    source = tmp_path / "he.jsonl"
    source.write_text("{}\n")
    with pytest.raises(UsageError, match="--repo is for swebench imports"):
        import_pack("humaneval", source, tmp_path / "out", repo=tmp_path)


@pytest.mark.parametrize(
    ("original", "expected"),
    [("HumanEval/0", "HumanEval_0"), ("Mbpp/2", "Mbpp_2"), ("a..b", "a__b"), ("django__django-11099", "django__django-11099"),
     ("x y:z", "x_y_z")],
)
def test_source_ids_map_to_safe_task_ids(original: str, expected: str) -> None:
    assert task_id_for(original, "here") == expected


@pytest.mark.parametrize("original", ["", "a" * 129])
def test_ids_that_cannot_be_made_safe_are_refused(original: str) -> None:
    with pytest.raises(PackError, match="here: cannot make a task id"):
        task_id_for(original, "here")


@pytest.mark.parametrize(
    ("test_id", "junit"),
    [
        ("tests/test_a.py::test_b", "tests.test_a::test_b"),
        ("tests/test_a.py::TestX::test_y", "tests.test_a.TestX::test_y"),
        ("tests/test_a.py::test_p[a::b-1.py]", "tests.test_a::test_p[a::b-1.py]"),
        ("test_bare_name", "test_bare_name"),
    ],
)
def test_test_ids_are_named_as_pytest_junit_reports_name_them(test_id: str, junit: str) -> None:
    assert junit_test_name(test_id) == junit


# ---------------------------------------------------------------- HumanEval


@needs_humaneval
def test_full_humaneval_import_is_sealed_with_provenance_and_no_visible_tests(tmp_path: Path) -> None:
    assert HUMANEVAL is not None
    pack = import_pack("humaneval", HUMANEVAL, tmp_path / "humaneval")
    # HumanEval/87's test repeats its prompt's first example line for line: the seal's leak
    # control refuses it, so the import leaves it out and says so in pack.json.
    assert len(pack.tasks) == 163
    assert "HumanEval_87" not in pack.tasks
    assert "Left out before sealing" in pack.manifest.description
    assert "HumanEval_87 (line of hidden/test_sealbench_oracle.py appears in prompt.md" in pack.manifest.description
    assert "164 of 164 records" in pack.manifest.description and "the published file" in pack.manifest.description
    assert check_pack(pack.root).sealed_digest == pack.sealed_digest
    assert all(not visible_test_leaks(t) for t in pack.tasks.values())
    digest = "sha256:b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
    assert pack.manifest.provenance == Provenance(source="OpenAI HumanEval (openai/human-eval)", source_sha256=digest,
                                                  license="MIT", contamination="public set: contamination unknown")
    task = pack.tasks["HumanEval_0"]
    assert task.record.provenance is not None and task.record.provenance.record_id == "HumanEval/0"
    assert task.record.provenance.source_sha256 == digest
    assert (task.record.max_attempts, task.record.wall_clock_s, task.record.language) == (1, 30.0, "python")
    assert task.record.oracle_cmd == ["python", "-I", "-m", "sealbench.function_oracle", "sealbench_oracle.json"]
    # The verdict is the trusted oracle's exit status: no report the candidate could reach.
    assert (task.record.junit_xml, task.record.required_tests) == (None, [])
    assert {t.record.prompt_template_id for t in pack.tasks.values()} == {"function-v1"}
    assert sorted(p.name for p in (pack.root / "prompts").iterdir()) == ["function-v1.txt"]
    assert leftovers(tmp_path) == ["humaneval"]


@needs_humaneval
def test_humaneval_task_keeps_the_original_prompt_and_stubs_its_body(tmp_path: Path) -> None:
    assert HUMANEVAL is not None
    pack = import_pack("humaneval", HUMANEVAL, tmp_path / "he", limit=40)
    original = humaneval_records(33)[32]
    task = pack.tasks["HumanEval_32"]
    stub = (task.pack_workspace / "solution.py").read_text()
    assert stub == original["prompt"] + "    raise NotImplementedError\n"
    assert (task.solution / "solution.py").read_text() == original["prompt"] + original["canonical_solution"]
    assert original["prompt"].strip() in task.prompt
    assert "`poly`: keep it as given" in task.prompt
    hidden = (task.hidden / "test_sealbench_oracle.py").read_text()
    assert original["test"].strip() in hidden and "check(find_zero)" in hidden
    assert "import solution" not in hidden and "globals()" not in hidden
    spec = json.loads((task.hidden / "sealbench_oracle.json").read_text())
    # The prompt (with poly) is the oracle's trusted code: the candidate's poly is never used.
    assert spec["trusted"] == [{"label": "prompt (original)", "code": original["prompt"]}]
    assert (spec["module"], spec["functions"], spec["tests"]) == ("solution", ["find_zero"],
                                                                  ["test_sealbench_oracle.py"])
    assert sorted(os.listdir(task.hidden)) == ["sealbench_oracle.json", "test_sealbench_oracle.py"]
    assert sorted(os.listdir(task.dir)) == ["hidden", "prompt.md", "solution", "task.json", "workspace"]


@needs_humaneval
def test_humaneval_oracles_pass_the_reference_and_fail_the_stub(tmp_path: Path) -> None:
    assert HUMANEVAL is not None
    pack = import_pack("humaneval", HUMANEVAL, tmp_path / "he", limit=60)
    # 32, 38 and 50 test through helpers their prompt defines (poly, encode_cyclic,
    # encode_shift); 10 has a helper too; 0 is plain.
    assert_discriminates(pack, tmp_path, ["HumanEval_0", "HumanEval_10", "HumanEval_32", "HumanEval_38",
                                          "HumanEval_50"])


@needs_humaneval
def test_os_exit_zero_in_the_candidate_is_not_a_pass(tmp_path: Path) -> None:
    assert HUMANEVAL is not None
    pack = import_pack("humaneval", HUMANEVAL, tmp_path / "he", limit=1)
    task = pack.tasks["HumanEval_0"]
    for trick in ("import os\nos._exit(0)\n", "import sys\nsys.exit(0)\n"):
        ok, _ = run_oracle(task, tmp_path, reference=False, solution_py=trick)
        assert not ok, trick


@needs_humaneval
def test_an_edited_prompt_helper_is_not_used_by_the_oracle(tmp_path: Path) -> None:
    # HumanEval/32 checks find_zero through the prompt's poly; a candidate whose poly always
    # returns 0 passed every answer in the benchmark's own program.
    assert HUMANEVAL is not None
    pack = import_pack("humaneval", HUMANEVAL, tmp_path / "he", limit=33)
    task = pack.tasks["HumanEval_32"]
    cheat = "def poly(xs, x):\n    return 0\n\n\ndef find_zero(xs):\n    return 12345.0\n"
    ok, out = run_oracle(task, tmp_path, reference=False, solution_py=cheat)
    assert not ok, out


@needs_shared
def test_humanevalplus_sample_imports_and_discriminates(tmp_path: Path) -> None:
    pytest.importorskip("numpy", reason="HumanEval+ tests import numpy; the oracle's python needs it")
    pack = import_pack("humanevalplus", HUMANEVALPLUS, tmp_path / "hep", limit=12)
    assert len(pack.tasks) == 12
    assert pack.tasks["HumanEval_0"].record.wall_clock_s == 120.0
    assert "EvalPlus HumanEval+" in pack.manifest.description
    assert_discriminates(pack, tmp_path, ["HumanEval_0", "HumanEval_10"])


# ---------------------------------------------------------------- MBPP and MBPP+


@needs_shared
@pytest.mark.parametrize(("source", "name", "count"), [(MBPP, "mbpp", 974), (MBPP_SANITIZED, "mbpp-sanitized", 427)])
def test_both_mbpp_files_are_told_apart_by_content(tmp_path: Path, source: Path, name: str, count: int) -> None:
    pack = import_pack("mbpp", source, tmp_path / "p", limit=25)
    assert pack.manifest.name == name
    assert len(pack.tasks) == 25
    assert f"25 of {count} records" in pack.manifest.description
    assert check_pack(pack.root).sealed_digest == pack.sealed_digest


@needs_shared
def test_mbpp_prompt_gives_the_signature_never_the_asserts(tmp_path: Path) -> None:
    pack = import_pack("mbpp", MBPP, tmp_path / "p", limit=3)
    task = pack.tasks["Mbpp_1"]
    assert "def min_cost(cost, m, n):" in task.prompt
    assert "assert" not in task.prompt and "assert" not in (task.pack_workspace / "solution.py").read_text()
    assert (task.pack_workspace / "solution.py").read_text() == "def min_cost(cost, m, n):\n    raise NotImplementedError\n"
    assert "\r" not in (task.solution / "solution.py").read_text()


@needs_shared
def test_mbpp_records_whose_tests_need_more_than_a_function(tmp_path: Path) -> None:
    # 367 and 927: setup code builds trees of the reference's Node class; 601: tests build
    # Pair objects; 596: the asserts use sys, which only the reference imports; 126 redefines
    # the builtin sum.
    source = tmp_path / "mbpp-odd.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in select_records(MBPP, {126, 367, 596, 601, 927})))
    pack = import_pack("mbpp", source, tmp_path / "p")
    assert "class Node" in (pack.tasks["Mbpp_367"].pack_workspace / "solution.py").read_text()
    assert "`Node`, which the tests use" in pack.tasks["Mbpp_927"].prompt
    assert "class Pair" in (pack.tasks["Mbpp_601"].pack_workspace / "solution.py").read_text()
    assert "\nimport sys\n" in (pack.tasks["Mbpp_596"].hidden / "test_sealbench_oracle.py").read_text()
    assert "def sum(a, b):" in pack.tasks["Mbpp_126"].prompt
    assert "NOT the published file" in pack.manifest.description
    assert_discriminates(pack, tmp_path, sorted(pack.tasks))


def test_interface_reads_scopes_not_names() -> None:
    # MBPP+ 88: a helper's local variable has the name of the function the test calls.
    code = "import collections\ndef freq_count(xs):\n    return collections.Counter(xs)\n"
    test = "def ref_func(xs):\n    freq_count = 1\n    return freq_count\nassert freq_count([1]) == {1: 1}\n"
    assert interface(code, test, "here").functions == ["freq_count"]


def test_tests_calling_nothing_the_reference_defines_are_refused() -> None:
    with pytest.raises(PackError, match="here: the tests call no function the reference code defines"):
        interface("def f():\n    return 1\n", "assert g() == 1\n", "here")


@needs_shared
def test_mbppplus_sample_imports_and_discriminates(tmp_path: Path) -> None:
    pytest.importorskip("numpy", reason="MBPP+ tests import numpy; the oracle's python needs it")
    source = write_jsonl_gz(tmp_path / "mbppplus.jsonl.gz", select_records(MBPPPLUS, {2, 3, 82, 88, 596}))
    pack = import_pack("mbppplus", source, tmp_path / "p")
    assert sorted(pack.tasks) == ["Mbpp_2", "Mbpp_3", "Mbpp_596", "Mbpp_82", "Mbpp_88"]
    assert "NOT the published file" in pack.manifest.description
    assert pack.tasks["Mbpp_82"].record.wall_clock_s == 120.0
    assert_discriminates(pack, tmp_path, sorted(pack.tasks))


# ---------------------------------------------------------------- bad input


@needs_humaneval
def test_truncated_gzip_is_refused_and_nothing_is_left_behind(tmp_path: Path) -> None:
    assert HUMANEVAL is not None
    damaged = tmp_path / "src" / "HumanEval.jsonl.gz"
    damaged.parent.mkdir()
    damaged.write_bytes(HUMANEVAL.read_bytes()[:20000])
    with pytest.raises(PackError, match=r"HumanEval\.jsonl\.gz: damaged or truncated gzip data"):
        import_pack("humaneval", damaged, tmp_path / "out" / "pack")
    assert leftovers(tmp_path) == ["src"]


@needs_humaneval
@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda rs: rs[1].pop("test"), r"he\.jsonl\.gz: line 2 \(HumanEval/1\): missing field test"),
        (lambda rs: rs[2].update(task_id="HumanEval/0"),
         r"line 3 \(HumanEval/0\): duplicate task id 'HumanEval_0' \(already used by .*line 1 \(HumanEval/0\)\)"),
        (lambda rs: rs[1].update(entry_point=3), r"line 2 \(HumanEval/1\): field 'entry_point' should be a string"),
        (lambda rs: rs[2].update(test="\udc80"), r"line 3 \(HumanEval/2\): field 'test': not UTF-8 text"),
        (lambda rs: rs[1].update(entry_point="not_there"), r"line 2 \(HumanEval/1\): entry_point 'not_there' is not"),
    ],
)
def test_bad_records_are_refused_naming_file_and_record(
    tmp_path: Path, damage: Callable[[list[dict[str, Any]]], object], message: str
) -> None:
    records = humaneval_records(3)
    damage(records)
    source = write_jsonl_gz(tmp_path / "he.jsonl.gz", records)
    with pytest.raises(PackError, match=message):
        import_pack("humaneval", source, tmp_path / "out")
    assert leftovers(tmp_path) == ["he.jsonl.gz"]


@needs_humaneval
def test_non_utf8_line_and_invalid_json_are_refused_by_line(tmp_path: Path) -> None:
    lines = [json.dumps(r).encode() for r in humaneval_records(3)]
    source = tmp_path / "he.jsonl"
    source.write_bytes(lines[0] + b"\n" + lines[1].replace(b'"HumanEval/1"', b'"HumanEval/1\xff"') + b"\n")
    with pytest.raises(PackError, match=r"he\.jsonl: line 2: not UTF-8 text"):
        import_pack("humaneval", source, tmp_path / "out")
    source.write_bytes(lines[0] + b"\n\n" + lines[1][:-5] + b"\n")
    with pytest.raises(PackError, match=r"he\.jsonl: line 3: invalid JSON"):
        import_pack("humaneval", source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_non_utf8_json_array_is_refused_by_line(tmp_path: Path) -> None:
    source = tmp_path / "sanitized-mbpp.json"
    source.write_bytes(b'[\n  {"task_id": 2,\n   "prompt": "caf\xe9"}\n]\n')
    with pytest.raises(PackError, match=r"sanitized-mbpp\.json: line 3: not UTF-8 text"):
        import_pack("mbpp", source, tmp_path / "out")


def test_mbpp_record_missing_its_fields_is_named(tmp_path: Path) -> None:
    source = tmp_path / "mbpp.jsonl"
    good = {"task_id": 1, "text": "Return 1.", "code": "def one():\n    return 1\n", "test_setup_code": "",
            "test_list": ["assert one() == 1"], "challenge_test_list": []}
    source.write_text(json.dumps(good) + "\n" + json.dumps({"task_id": 2, "text": "x"}) + "\n")
    with pytest.raises(PackError, match=r"mbpp\.jsonl: line 2 \(task_id 2\): missing fields code, test_setup_code, test_list"):
        import_pack("mbpp", source, tmp_path / "out")


@needs_humaneval
def test_existing_output_is_never_overwritten(tmp_path: Path) -> None:
    assert HUMANEVAL is not None
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="exists; importing never overwrites a pack"):
        import_pack("humaneval", HUMANEVAL, out)
    assert leftovers(out) == ["keep.txt"]


def test_failure_while_writing_removes_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def bad_second_task(source: Path, options: ImportOptions) -> PackDraft:
        draft = _one_task_importer(source, options)
        first = next(iter(draft.tasks))
        evil = TaskDraft(record=first.record.model_copy(update={"task_id": "toy-2"}), prompt="p",
                         workspace={"../escape.py": text_file("x")}, hidden=first.hidden, solution={},
                         origin="toy record 2")

        def tasks() -> Iterator[TaskDraft]:
            yield first
            yield evil

        return PackDraft(name="toy", description="", provenance=draft.provenance, templates=draft.templates,
                         tasks=tasks())

    monkeypatch.setitem(importers.registry._IMPORTERS, "toy", bad_second_task)
    with pytest.raises(PackError, match=r"toy record 2: workspace path '\.\./escape\.py' is not a plain relative path"):
        import_pack("toy", tmp_path, tmp_path / "a" / "b" / "pack")
    assert leftovers(tmp_path) == []


def test_tasks_whose_hidden_tests_are_all_visible_refuse_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def leaky(source: Path, options: ImportOptions) -> PackDraft:
        draft = _one_task_importer(source, options)
        task = next(iter(draft.tasks))
        shown = TaskDraft(record=task.record, prompt="Make f pass: assert toy.f() == 2\n", workspace=task.workspace,
                          hidden=task.hidden, solution=task.solution, origin=task.origin)
        return PackDraft(name="toy", description="", provenance=draft.provenance, templates=draft.templates,
                         tasks=[shown])

    monkeypatch.setitem(importers.registry._IMPORTERS, "toy", leaky)
    with pytest.raises(PackError, match="toy record 1: every task's hidden tests are visible to the agent"):
        import_pack("toy", tmp_path, tmp_path / "pack")
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------- Exercism


def make_track(root: Path) -> Path:
    """A two-exercise Exercism-style Python track."""
    practice = root / "track" / "exercises" / "practice"
    exercises: dict[str, dict[str, str]] = {
        "two-fer": {
            ".docs/instructions.md": "# Two-fer\n\nReturn `One for X, one for me.`; X defaults to `you`.\n",
            ".meta/config.json": json.dumps({"authors": ["t"], "files": {
                "solution": ["two_fer.py"], "test": ["two_fer_test.py"], "example": [".meta/example.py"]}}),
            ".meta/example.py": "def two_fer(name='you'):\n    return f'One for {name}, one for me.'\n",
            "two_fer.py": "def two_fer(name):\n    pass\n",
            "two_fer_test.py": (
                "import unittest\n\nfrom two_fer import two_fer\n\n\n"
                "class TwoFerTest(unittest.TestCase):\n"
                "    def test_no_name_given(self):\n        self.assertEqual(two_fer(), 'One for you, one for me.')\n\n"
                "    def test_a_name_given(self):\n        self.assertEqual(two_fer('Alice'), 'One for Alice, one for me.')\n"
            ),
        },
        "leap": {
            ".docs/introduction.md": "# Introduction\n\nA leap year has an extra day.\n",
            ".docs/instructions.md": "# Instructions\n\nTell whether a year is a leap year.\n",
            ".docs/instructions.append.md": "# Python note\n\nUse the `calendar` rules, not the module.\n",
            ".meta/config.json": json.dumps({"files": {
                "solution": ["leap.py"], "test": ["leap_test.py"], "example": [".meta/example.py"]}}),
            ".meta/example.py": "def leap_year(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
            "leap.py": "def leap_year(year):\n    pass\n",
            "leap_test.py": (
                "from leap import leap_year\n\n\n"
                "def test_year_divisible_by_400_is_leap():\n    assert leap_year(2000) is True\n\n\n"
                "def test_year_divisible_by_100_only_is_common():\n    assert leap_year(1900) is False\n"
            ),
            "__pycache__/leap.cpython-311.pyc": "junk",
            ".exercism/metadata.json": "{}",
        },
    }
    for slug, files in exercises.items():
        for rel, text in files.items():
            path = practice / slug / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    (root / "track" / "LICENSE").write_text("MIT License\n\nCopyright (c) Exercism\n")
    return root / "track"


def test_exercism_track_imports_one_task_per_exercise(tmp_path: Path) -> None:
    pack = import_pack("exercism", make_track(tmp_path), tmp_path / "pack")
    assert sorted(pack.tasks) == ["leap", "two-fer"]
    leap = pack.tasks["leap"]
    assert sorted(p.name for p in leap.pack_workspace.iterdir()) == ["leap.py"]
    assert leap.hidden_paths() == ["leap_test.py"]
    assert (leap.solution / "leap.py").read_text().startswith("def leap_year(year):\n    return year % 4")
    assert leap.prompt.index("A leap year") < leap.prompt.index("Tell whether") < leap.prompt.index("Python note")
    assert "Write your solution in `leap.py`." in leap.prompt and "leap_test" not in leap.prompt
    assert leap.record.required_tests == ["leap_test::test_year_divisible_by_400_is_leap",
                                          "leap_test::test_year_divisible_by_100_only_is_common"]
    assert pack.tasks["two-fer"].record.required_tests == ["two_fer_test.TwoFerTest::test_no_name_given",
                                                          "two_fer_test.TwoFerTest::test_a_name_given"]
    assert leap.record.provenance is not None
    assert leap.record.provenance.license == "MIT License (see LICENSE of the track)"
    assert leap.record.provenance.record_id == "exercises/practice/leap"
    assert pack.manifest.name == "exercism-track"
    assert {t.record.prompt_template_id for t in pack.tasks.values()} == {"exercise-v1"}
    assert_discriminates(pack, tmp_path, ["leap", "two-fer"])


def test_exercise_without_its_config_is_refused_naming_the_file(tmp_path: Path) -> None:
    track = make_track(tmp_path)
    (track / "exercises" / "practice" / "leap" / ".meta" / "config.json").unlink()
    with pytest.raises(PackError, match=r"practice/leap/\.meta/config\.json: file not found"):
        import_pack("exercism", track, tmp_path / "pack")
    assert not (tmp_path / "pack").exists()


def test_directory_without_practice_exercises_is_not_a_track(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="no exercises/practice/ directory"):
        import_pack("exercism", tmp_path, tmp_path / "pack")


# ---------------------------------------------------------------- SWE-bench


def git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo.parent), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


OPS_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
OPS_FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
TEST_OPS = "from calc.ops import add, mul\n\n\ndef test_mul_of_small_numbers():\n    assert mul(2, 3) == 6\n"
TEST_OPS_NEW = TEST_OPS + "\n\ndef test_add_of_small_numbers():\n    assert add(2, 3) == 5\n"


@pytest.fixture
def swe_repo(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A real repository with a bug, its fix and its test, and two instances derived from it."""
    repo = tmp_path / "clone"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base1 = commit(repo, {"calc/__init__.py": "", "calc/ops.py": OPS_BUGGY, "tests/test_ops.py": TEST_OPS,
                          "README.md": "calc\n", ".gitattributes": "docs/ export-ignore\n",
                          "docs/guide.txt": "guide\n", "scripts/run.sh": "#!/bin/sh\necho run\n"}, "base")
    (repo / "scripts" / "run.sh").chmod(0o755)
    base1 = commit(repo, {}, "make run.sh executable") if git(repo, "status", "--porcelain") else base1
    fix1 = commit(repo, {"calc/ops.py": OPS_FIXED}, "fix add")
    tests1 = commit(repo, {"tests/test_ops.py": TEST_OPS_NEW}, "test add")
    base2 = commit(repo, {"calc/ops.py": OPS_FIXED.replace("a * b", "a * abs(b)")}, "break mul")
    fix2 = commit(repo, {"calc/ops.py": OPS_FIXED}, "fix mul")
    tests2 = commit(repo, {"tests/test_more.py": (
        "from calc.ops import mul\n\n\nclass TestMul:\n    def test_negative_factor(self):\n"
        "        assert mul(2, -3) == -6\n")}, "test mul")
    commit(repo, {"README.md": "calc, later\n"}, "later work")
    (repo / "calc" / "ops.py").write_text("# uncommitted edit\n")
    instances: list[dict[str, Any]] = [
        {"repo": "local/calc", "instance_id": "local__calc-1", "base_commit": base1,
         "patch": git(repo, "diff", base1, fix1), "test_patch": git(repo, "diff", fix1, tests1),
         "problem_statement": "add() subtracts its arguments.", "hints_text": "",
         "FAIL_TO_PASS": ["tests/test_ops.py::test_add_of_small_numbers"],
         "PASS_TO_PASS": ["tests/test_ops.py::test_mul_of_small_numbers"]},
        {"repo": "local/calc", "instance_id": "local__calc-2", "base_commit": base2,
         "patch": git(repo, "diff", base2, fix2), "test_patch": git(repo, "diff", fix2, tests2),
         "problem_statement": "mul() ignores the sign of its second argument.",
         "FAIL_TO_PASS": json.dumps(["tests/test_more.py::TestMul::test_negative_factor"]),
         "PASS_TO_PASS": json.dumps(["tests/test_ops.py::test_add_of_small_numbers",
                                     "tests/test_ops.py::test_mul_of_small_numbers"])},
    ]
    return repo, instances


def git_state(repo: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(repo)), p.stat().st_mtime_ns) for p in repo.rglob("*") if p.is_file())


def test_swebench_instances_become_repository_tasks(tmp_path: Path, swe_repo: tuple[Path, list[dict[str, Any]]]) -> None:
    repo, instances = swe_repo
    source = tmp_path / "instances.json"
    source.write_text(json.dumps(instances))
    before = git_state(repo)
    pack = import_pack("swebench", source, tmp_path / "pack", repo=repo)
    assert git_state(repo) == before
    assert sorted(pack.tasks) == ["local__calc-1", "local__calc-2"]
    one = pack.tasks["local__calc-1"]
    ws = sorted(str(p.relative_to(one.pack_workspace)) for p in one.pack_workspace.rglob("*") if p.is_file())
    # The base tree as committed (export-ignore'd docs included, no .git, no later commits,
    # no uncommitted edits), the test file the test_patch changes in its pre-patch form.
    assert ws == [".gitattributes", "README.md", "calc/__init__.py", "calc/ops.py", "docs/guide.txt",
                  "scripts/run.sh", "tests/test_ops.py"]
    assert one.record.test_files == "reset"
    assert one.record.environment is not None and one.record.environment.import_roots == ["."]
    assert (one.pack_workspace / "calc" / "ops.py").read_text() == OPS_BUGGY
    assert (one.pack_workspace / "README.md").read_text() == "calc\n"
    assert os.access(one.pack_workspace / "scripts" / "run.sh", os.X_OK)
    assert (one.hidden / "tests" / "test_ops.py").read_text() == TEST_OPS_NEW
    assert (one.solution / "calc" / "ops.py").read_text() == OPS_FIXED
    assert one.prompt == "add() subtracts its arguments.\n"
    assert one.record.required_tests == ["tests.test_ops::test_add_of_small_numbers",
                                         "tests.test_ops::test_mul_of_small_numbers"]
    # SWE-bench's test command: pytest on the files the test patch touches.
    assert one.record.oracle_cmd == ["sealbench-pytest", "-q", "-o", "pythonpath=.", "tests/test_ops.py"]
    two = pack.tasks["local__calc-2"]
    assert two.hidden_paths() == ["tests/test_more.py"]
    assert (two.pack_workspace / "tests" / "test_ops.py").read_text() == TEST_OPS_NEW
    assert two.record.required_tests[0] == "tests.test_more.TestMul::test_negative_factor"
    assert two.record.provenance is not None and two.record.provenance.record_id == "local__calc-2"
    assert check_pack(pack.root).sealed_digest == pack.sealed_digest
    assert_discriminates(pack, tmp_path, ["local__calc-1", "local__calc-2"])


def test_swebench_reads_json_lines_too(tmp_path: Path, swe_repo: tuple[Path, list[dict[str, Any]]]) -> None:
    repo, instances = swe_repo
    source = tmp_path / "instances.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in instances))
    pack = import_pack("swebench", source, tmp_path / "pack", repo=repo, limit=1, max_attempts=2)
    assert sorted(pack.tasks) == ["local__calc-1"]
    assert pack.tasks["local__calc-1"].record.max_attempts == 2
    assert "1 of 2 records" in pack.manifest.description


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda i: i.update(base_commit="0" * 40), r"instances\.json: record 1 \(local__calc-1\): base_commit 0+ is not a commit of the clone"),
        (lambda i: i.update(test_patch=i["test_patch"].replace(" def test_mul_of_small", " def test_mul_of_tiny")),
         r"record 1 \(local__calc-1\): test_patch does not apply to base_commit"),
        (lambda i: i.update(patch="diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n"),
         r"record 1 \(local__calc-1\): patch does not apply"),
        (lambda i: i.update(FAIL_TO_PASS="[not json"), r"record 1 \(local__calc-1\): field 'FAIL_TO_PASS': invalid JSON-encoded list"),
        (lambda i: i.update(FAIL_TO_PASS=[]), r"record 1 \(local__calc-1\): FAIL_TO_PASS is empty"),
        (lambda i: i.pop("test_patch"), r"record 1 \(local__calc-1\): missing field test_patch"),
    ],
)
def test_bad_swebench_instances_are_refused_naming_the_instance(
    tmp_path: Path, swe_repo: tuple[Path, list[dict[str, Any]]], damage: Callable[[dict[str, Any]], object],
    message: str,
) -> None:
    repo, instances = swe_repo
    damage(instances[0])
    source = tmp_path / "instances.json"
    source.write_text(json.dumps(instances))
    with pytest.raises(PackError, match=message):
        import_pack("swebench", source, tmp_path / "pack", repo=repo)
    assert not (tmp_path / "pack").exists()
    assert not [p for p in tmp_path.iterdir() if ".importing-" in p.name]


def test_swebench_needs_a_clone(tmp_path: Path, swe_repo: tuple[Path, list[dict[str, Any]]]) -> None:
    _repo, instances = swe_repo
    source = tmp_path / "instances.json"
    source.write_text(json.dumps(instances))
    with pytest.raises(UsageError, match="swebench imports need --repo PATH"):
        import_pack("swebench", source, tmp_path / "pack")
    with pytest.raises(PackError, match="no clone of local/calc under"):
        import_pack("swebench", source, tmp_path / "pack", repo=tmp_path)
    with pytest.raises(PackError, match="not a git repository"):
        import_pack("swebench", source, tmp_path / "pack", repos=[("local/calc", tmp_path)])


# ---------------------------------------------------------------- full data sets (make test-slow)


# Their references return what cannot cross to the function-level oracle: re.Match objects
# (737, 787, 794), more than 16 million values (MBPP+ 255). pack validate names them.
NOT_PLAIN = {"Mbpp_737", "Mbpp_787", "Mbpp_794"}


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize(
    ("kind", "source", "tasks", "not_plain"),
    [("humaneval", SHARED_DATA / "humaneval" / "HumanEval.jsonl.gz", 163, set()),
     ("humanevalplus", HUMANEVALPLUS, 163, set()), ("mbpp", MBPP, 974, set()),
     ("mbpp", MBPP_SANITIZED, 427, NOT_PLAIN), ("mbppplus", MBPPPLUS, 378, NOT_PLAIN | {"Mbpp_255"})],
)
def test_every_full_data_set_imports_and_every_oracle_discriminates(
    tmp_path: Path, kind: str, source: Path, tasks: int, not_plain: set[str]
) -> None:
    pytest.importorskip("numpy", reason="the plus sets' tests import numpy")
    pack = import_pack(kind, source, tmp_path / "pack")
    assert len(pack.tasks) == tasks
    assert check_pack(pack.root).sealed_digest == pack.sealed_digest
    assert_discriminates(load_pack(pack.root), tmp_path, sorted(set(pack.tasks) - not_plain))


@needs_bwrap
def test_an_exercise_with_its_test_under_tests_validates(tmp_path: Path) -> None:
    """Exercism's reverse-words keeps its test in tests/, which has no __init__.py: pytest puts
    tests/ on sys.path, not the exercise, so the stub did not import (ModuleNotFoundError)."""
    exercise = tmp_path / "track" / "exercises" / "practice" / "reverse-words"
    for rel, text in {
        ".docs/instructions.md": "# Reverse words\n\nReverse the order of the words in a sentence.\n",
        ".meta/config.json": json.dumps({"files": {"solution": ["reverse_words.py"],
                                                   "test": ["tests/reverse_words_test.py"],
                                                   "example": [".meta/example.py"]}}),
        ".meta/example.py": "def reverse_words(text):\n    return ' '.join(reversed(text.split(' ')))\n",
        "reverse_words.py": "def reverse_words(text):\n    pass\n",
        "tests/reverse_words_test.py": (
            "import unittest\n\nfrom reverse_words import reverse_words\n\n\n"
            "class ReverseWordsTest(unittest.TestCase):\n"
            "    def test_two_words(self):\n        self.assertEqual(reverse_words('a b'), 'b a')\n"),
    }.items():
        (exercise / rel).parent.mkdir(parents=True, exist_ok=True)
        (exercise / rel).write_text(text)
    pack = import_pack("exercism", tmp_path / "track", tmp_path / "pack")
    (evidence,) = validate_pack(pack.root, repeat=1, progress=False).tasks.values()
    assert evidence.valid, evidence
    assert pack.tasks["reverse-words"].record.oracle_cmd == [
        "sealbench-pytest", "-q", "-o", "pythonpath=.", "tests/reverse_words_test.py"]


@pytest.mark.parametrize(("lines", "kept", "dropped"), [
    ([], [], False),
    (["a==1 --hash=sha256:aa", "b==2 --hash=sha256:bb"], ["a==1 --hash=sha256:aa", "b==2 --hash=sha256:bb"], False),
    (["a==1", "b==2"], ["a==1", "b==2"], False),
    (["a==1 --hash=sha256:aa", "b==2"], ["a==1", "b==2"], True),
], ids=["none", "all-hashed", "none-hashed", "some-hashed"])
def test_swebench_requirements_carry_hashes_on_every_line_or_on_none(lines: list[str], kept: list[str],
                                                                     dropped: bool) -> None:
    from sealbench.importers.swebench import _hashes_all_or_none

    requirements, source = _hashes_all_or_none(lines, "the lock")
    assert requirements == kept
    assert source == ("the lock, hashes dropped (some lines carry none)" if dropped else "the lock")


@pytest.mark.parametrize(("setup", "commit"), [
    (None, "base"), (7, "base"), ("", "base"), ("main", "base"),
    (" " + "a" * 40 + "\n", "a" * 40),
], ids=["absent", "not-a-string", "empty", "a-branch-name", "a-commit-id"])
def test_swebench_environment_comes_from_the_setup_commit_only_when_it_is_a_commit(setup: Any, commit: str) -> None:
    from sealbench.importers.swebench import _setup_commit

    assert _setup_commit(setup, "base") == commit
