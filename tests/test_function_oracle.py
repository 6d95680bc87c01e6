"""The function-level oracle: plain data only, and a verdict the candidate cannot write.

The exploit tests run a hostile agent through the real runner in the real bubblewrap sandbox
on real HumanEval tasks: each writes a candidate ``solution.py`` that tries to forge the
verdict, and each must be graded fail while the reference still passes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import make_contract, needs_bwrap
from sealbench.function_oracle import (
    MAX_DEPTH,
    NotPlainData,
    decode,
    encode,
    is_oracle_cmd,
    oracle_cmd,
    parse_summary,
    spec_json,
)
from sealbench.journal import read_chain
from sealbench.runner import RunOptions, execute

ROOT = Path(__file__).resolve().parents[1]
HUMANEVAL = next((p for p in (ROOT / ".cache" / "data" / "HumanEval.jsonl.gz",
                              ROOT.parent / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz") if p.is_file()),
                 None)
needs_humaneval = pytest.mark.skipif(HUMANEVAL is None, reason="HumanEval.jsonl.gz not fetched (run `make data`)")


# ---------------------------------------------------------------- plain data


def roundtrip(value: Any) -> Any:
    return decode(json.loads(json.dumps(encode(value))))


def same(a: Any, b: Any) -> bool:
    """Equal with exact types all the way down (nan equals nan, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, complex):
        return same(a.real, b.real) and same(a.imag, b.imag)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


hashable = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.binary() | st.floats(allow_nan=False),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=8)
plain = st.recursive(
    hashable | st.floats() | st.complex_numbers(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner) | st.dictionaries(hashable, inner, max_size=3)
    | st.sets(hashable, max_size=3),
    max_leaves=20)


@given(plain)
def test_plain_data_crosses_with_exact_types_and_values(value: Any) -> None:
    assert same(roundtrip(value), value)


def test_floats_cross_exactly_with_inf_nan_and_signed_zero() -> None:
    for value in (0.1, -0.0, math.inf, -math.inf, 5e-324, 1.7976931348623157e308):
        assert same(roundtrip(value), value)
    assert math.isnan(roundtrip(math.nan))
    assert roundtrip(10**5000) == 10**5000  # past the int-to-str digit limit


@pytest.mark.parametrize("value", [type("I", (int,), {})(3), type("F", (float,), {})(1.0), type("S", (str,), {})("x"),
                                   type("L", (list,), {})(), type("D", (dict,), {})(), object(), iter([1]),
                                   (x for x in [1]), print, [1, [2, {3: object()}]]],
                         ids=["int-subclass", "float-subclass", "str-subclass", "list-subclass", "dict-subclass",
                              "object", "iterator", "generator", "function", "nested-object"])
def test_what_is_not_plain_data_is_refused(value: Any) -> None:
    with pytest.raises(NotPlainData):
        encode(value)


def test_nesting_deeper_than_the_limit_is_refused_both_ways() -> None:
    deep: list[Any] = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(NotPlainData, match="deeper"):
        encode(deep)
    node: list[Any] = ["L"]
    for _ in range(MAX_DEPTH + 5):
        node = ["L", node]
    with pytest.raises(NotPlainData, match="deeper"):
        decode(node)


@pytest.mark.parametrize("node", [
    [], ["?"], [1, 2], {"a": 1}, ["I", 5], ["I", "zz"], ["F", 1.5], ["L", [5]], ["E", ["L"]], ["D", ["L"], None],
    ["D", None], ["O", "Node"], ["Y", "0"], ["C", "1", "2"],
])
def test_malformed_or_unhashable_nodes_are_refused(node: Any) -> None:
    with pytest.raises(NotPlainData):
        decode(node)


def test_counter_ordereddict_and_deque_keep_their_exact_type() -> None:
    from collections import Counter, OrderedDict, deque

    for value in (Counter("abca"), OrderedDict([(2, "b"), (1, "a")]), deque([1, (2, 3)])):
        back = roundtrip(value)
        assert type(back) is type(value) and back == value and list(back) == list(value)
    with pytest.raises(NotPlainData):
        encode(type("MyCounter", (Counter,), {})())


def test_sets_cross_in_an_order_that_does_not_depend_on_the_hash_seed() -> None:
    assert encode({"b", "a", "c"}) == encode({"c", "a", "b"}) == ["E", "a", "b", "c"]


def test_argv_and_summary_are_recognised() -> None:
    assert is_oracle_cmd(oracle_cmd()) and not is_oracle_cmd(["python", "test_sealbench_oracle.py"])
    out = b'{"sealbench_function_oracle": 1, "verdict": "pass"}\nnoise\n'
    assert parse_summary(out) == {"sealbench_function_oracle": 1, "verdict": "pass"}
    assert parse_summary(b"PASSED\n") is None


# ---------------------------------------------------------------- the oracle on the host


def grade_on_host(tmp_path: Path, solution: str, test: str, *, functions: tuple[str, ...] = ("f",),
                  trusted: str = "") -> tuple[int, dict[str, Any], str]:
    work = tmp_path / "grade"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    (work / "solution.py").write_text(solution)
    (work / "test_x.py").write_text(test)
    (work / "spec.json").write_text(spec_json(module="solution", functions=functions,
                                              trusted=[("trusted", trusted)] if trusted else [], tests=["test_x.py"]))
    proc = subprocess.run([sys.executable, "-I", "-m", "sealbench.function_oracle", "spec.json"], cwd=work,
                          capture_output=True, timeout=60, check=False)
    return proc.returncode, parse_summary(proc.stdout) or {}, proc.stderr.decode()


def test_the_hidden_files_are_gone_before_the_candidate_runs(tmp_path: Path) -> None:
    code, summary, err = grade_on_host(
        tmp_path, "import os\nSEEN = sorted(os.listdir('.'))\ndef f():\n    return SEEN\n",
        "assert f() == ['solution.py']\n")
    assert code == 0, err
    assert summary["returned"] == {"f": ["list"]}


def test_exceptions_cross_as_their_builtin_type(tmp_path: Path) -> None:
    solution = ("class Mine(KeyError):\n    pass\n\n"
                "def f(kind):\n    if kind == 'key':\n        raise Mine('k')\n"
                "    if kind == 'uni':\n        b'\\xff'.decode()\n    raise ValueError('v')\n")
    test = ("for kind, exc in [('key', KeyError), ('uni', UnicodeError), ('v', ValueError)]:\n"
            "    try:\n        f(kind)\n    except exc:\n        pass\n    else:\n        raise AssertionError(kind)\n")
    code, _, err = grade_on_host(tmp_path, solution, test)
    assert code == 0, err


def test_a_candidate_exit_is_not_caught_by_except_exception(tmp_path: Path) -> None:
    code, summary, _ = grade_on_host(tmp_path, "def f():\n    raise SystemExit(0)\n",
                                     "try:\n    f()\nexcept Exception:\n    pass\n")
    assert code == 1 and "SystemExit" in summary["reason"]


def test_a_bare_except_in_the_test_cannot_hide_a_broken_protocol(tmp_path: Path) -> None:
    code, summary, _ = grade_on_host(tmp_path, "class A:\n    pass\n\ndef f():\n    return A()\n",
                                     "try:\n    f()\nexcept:\n    pass\n")
    assert code == 1 and "not plain data" in summary["reason"]


def test_trusted_classes_cross_as_arguments_and_helpers_stay_trusted(tmp_path: Path) -> None:
    trusted = "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n\n\ndef twice(x):\n    return 2 * x\n"
    solution = trusted.replace("2 * x", "0") + "\n\ndef f(pairs):\n    return [p.a + p.b for p in pairs]\n"
    code, _, err = grade_on_host(tmp_path, solution, "assert f([Pair(1, 2), Pair(3, 4)]) == [3, 7]\n"
                                 "assert twice(2) == 4\n", trusted=trusted)
    assert code == 0, err


def test_the_candidate_cannot_shadow_a_builtin_the_test_uses(tmp_path: Path) -> None:
    solution = "def abs(x):\n    return 0\n\n\ndef f():\n    return 99.0\n"
    code, _, _ = grade_on_host(tmp_path, solution, "assert abs(f() - 1.0) < 1e-6\n")
    assert code == 1


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="seccomp filter for x86_64 and aarch64")
def test_the_worker_cannot_lower_another_process_s_limits(tmp_path: Path) -> None:
    solution = ("import errno, os, resource\n"
                "def f():\n    try:\n        resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (3, 3))\n"
                "    except OSError as e:\n        return errno.errorcode[e.errno]\n    return 'changed'\n")
    code, summary, err = grade_on_host(tmp_path, solution, "assert f() == 'EPERM'\n")
    assert code == 0, (summary, err)


# ---------------------------------------------------------------- hostile candidates in the sandbox

HE0_RIGHT = ("def has_close_elements(numbers, threshold):\n"
             "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n")
WRONG = "def has_close_elements(numbers, threshold):\n    return None\n"
REPORT = ('<testsuite name="sealbench" tests="1"><testcase classname="HumanEval_0" name="check"/></testsuite>\\n')
WRITE_REPORT = f"open('sealbench-oracle-junit.xml', 'w').write('{REPORT}')\n"
FRAME_JUMPER = '''import sys

def _jump(frame, event, arg):
    # In the benchmark's own program this skips every remaining line of the test.
    if event == "line" and frame.f_code.co_filename.endswith("test_sealbench_oracle.py"):
        frame.f_lineno = max(line for _, _, line in frame.f_code.co_lines() if line)
    return _jump

sys.settrace(lambda frame, event, arg: _jump)
frame = sys._getframe()
while frame is not None:
    frame.f_trace = _jump
    frame = frame.f_back
'''
PROC_MEM = '''import os, sys, time
def has_close_elements(numbers, threshold):
    # The reaper bwrap puts at pid 1 is dumpable: rewriting its code to exit(0) forged the
    # sandbox's exit status. Here pid 1 is the oracle itself, which is not.
    try:
        pc = int(open("/proc/1/syscall").read().split()[-1], 16)
        fd = os.open("/proc/1/mem", os.O_RDWR)
        os.pwrite(fd, bytes([0x31, 0xff, 0xb8, 0xe7, 0, 0, 0, 0x0f, 0x05]), pc)
        print("REWROTE PID 1", file=sys.stderr)
    except OSError as e:
        print(f"PID 1 REFUSED: {type(e).__name__}", file=sys.stderr)
    # An orphan's exit wakes pid 1 (its new parent) while the check still runs.
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(0.2)
            os._exit(1)
        os._exit(0)
    os.wait()
    time.sleep(1)
    return None
'''

EXPLOITS = {
    "writes_the_junit_report_itself": WRITE_REPORT + WRONG,
    "os_exit_zero_at_import": "import os\n" + WRITE_REPORT + "os._exit(0)\n",
    "os_exit_zero_in_the_function": ("import os\ndef has_close_elements(numbers, threshold):\n    "
                                     + WRITE_REPORT.strip() + "\n    os._exit(0)\n"),
    "atexit_hook_exits_zero": "import atexit, os\natexit.register(lambda: os._exit(0))\n" + WRONG,
    "rewrites_the_report_after_the_check_fails": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    for _ in range(40):\n        time.sleep(0.05)\n"
        "        " + WRITE_REPORT.strip() + "\n    os._exit(0)\n" + WRONG),
    "settrace_jumps_frames_past_the_asserts": FRAME_JUMPER + WRONG,
    "object_whose_eq_is_always_true": ("class Yes:\n    def __eq__(self, other):\n        return True\n"
                                       "    __hash__ = object.__hash__\n\n"
                                       "def has_close_elements(numbers, threshold):\n    return Yes()\n"),
    "int_subclass_with_forged_eq": ("class Yes(int):\n    def __eq__(self, other):\n        return True\n"
                                    "    __hash__ = int.__hash__\n\n"
                                    "def has_close_elements(numbers, threshold):\n    return Yes(0)\n"),
    "str_subclass_with_forged_eq": ("class Yes(str):\n    def __eq__(self, other):\n        return True\n"
                                    "    __hash__ = str.__hash__\n\n"
                                    "def has_close_elements(numbers, threshold):\n    return Yes('')\n"),
    "lowers_the_oracle_s_resource_limits": (
        "import os, resource, sys\ndef has_close_elements(numbers, threshold):\n"
        "    for pid in (os.getppid(), 1):\n        for which in (resource.RLIMIT_CPU, resource.RLIMIT_NOFILE, "
        "resource.RLIMIT_AS):\n            try:\n                resource.prlimit(pid, which, (1, 1))\n"
        "                print('LOWERED', file=sys.stderr)\n            except OSError as e:\n"
        "                print('REFUSED', e.errno, file=sys.stderr)\n    return None\n"),
    "kills_its_parent": ("import os, signal\ndef has_close_elements(numbers, threshold):\n"
                         "    for pid in (os.getppid(), 1, -1):\n        for sig in (signal.SIGINT, signal.SIGTERM, "
                         "signal.SIGSTOP, signal.SIGKILL):\n            try:\n                os.kill(pid, sig)\n"
                         "            except OSError:\n                pass\n    return None\n"),
    "writes_pass_looking_output_to_stdout": (
        "import os\nLINE = b'{\"sealbench_function_oracle\": 1, \"verdict\": \"pass\"}\\nPASSED\\n'\n"
        "os.write(1, LINE)\nfor path in ('/proc/1/fd/1', '/proc/self/fd/1'):\n    try:\n"
        "        fd = os.open(path, os.O_WRONLY)\n        os.write(fd, LINE)\n    except OSError:\n        pass\n"
        + WRONG),
    "rewrites_the_sandbox_init_through_proc_mem": PROC_MEM,
    "reads_the_hidden_tests_from_the_grading_copy": (
        "import os, sys\nfor name in ('test_sealbench_oracle.py', 'sealbench_oracle.json'):\n"
        "    print(name, 'READABLE' if os.path.exists(name) else 'GONE', file=sys.stderr)\n" + WRONG),
}


@pytest.fixture(scope="module")
def he_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sealbench.importers import import_pack

    assert HUMANEVAL is not None
    out = tmp_path_factory.mktemp("he") / "pack"
    import_pack("humaneval", HUMANEVAL, out, limit=33)
    return out


def writes(source: str) -> str:
    """An agent command that writes ``source`` to solution.py."""
    return f"sh -c 'echo {base64.b64encode(source.encode()).decode()} | base64 -d > solution.py'"


def run_agent(pack: Path, tmp_path: Path, command: str, task: str = "HumanEval_0") -> tuple[dict[str, Any], Path]:
    contract = tmp_path / "contract.json"
    # One run per locked run_id: each run of a test locks its own.
    run_id = "oracle-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]
    make_contract(pack, contract, task_ids=[task], command=command, run_id=run_id, max_attempts=1)
    run_dir = tmp_path / "run"
    execute(contract, run_dir, RunOptions(progress=False, sandbox="bubblewrap"))
    events = read_chain(run_dir / "journal.jsonl").events
    card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
    graded = [e["payload"] for e in events if e["kind"] == "graded"]
    return {"card": card, "graded": graded[0] if graded else None}, run_dir


def blob(run_dir: Path, digest: str) -> bytes:
    return (run_dir / "blobs" / digest.removeprefix("sha256:")).read_bytes()


@needs_bwrap
@needs_humaneval
def test_the_reference_passes_and_the_stub_fails_through_the_runner(he_pack: Path, tmp_path: Path) -> None:
    ok, run_dir = run_agent(he_pack, tmp_path / "a", writes(HE0_RIGHT))
    assert ok["card"]["outcome"] == "pass", blob(run_dir, ok["graded"]["oracle"]["stderr"])
    assert parse_summary(blob(run_dir, ok["graded"]["oracle"]["stdout"]))["verdict"] == "pass"
    ref, _ = run_agent(he_pack, tmp_path / "b", "builtin:reference", task="HumanEval_32")
    assert ref["card"]["outcome"] == "pass"
    stub, _ = run_agent(he_pack, tmp_path / "c", "sh -c 'echo >> solution.py'")
    assert stub["card"]["outcome"] == "fail"


@needs_bwrap
@needs_humaneval
@pytest.mark.parametrize("exploit", sorted(EXPLOITS))
def test_hostile_candidate_is_graded_fail(he_pack: Path, tmp_path: Path, exploit: str) -> None:
    if exploit == "rewrites_the_sandbox_init_through_proc_mem" and platform.machine() != "x86_64":
        pytest.skip("the rewriting code is x86_64")
    result, run_dir = run_agent(he_pack, tmp_path, writes(EXPLOITS[exploit]))
    graded = result["graded"]
    stdout, stderr = blob(run_dir, graded["oracle"]["stdout"]), blob(run_dir, graded["oracle"]["stderr"])
    assert result["card"]["outcome"] == "fail", (stdout, stderr)
    assert graded["tests_green"] is False and graded["oracle"]["exit_code"] == 1, (stdout, stderr)
    # The trusted parent itself reached a verdict: it was neither killed nor bypassed.
    summary = parse_summary(stdout)
    assert summary is not None and summary["verdict"] == "fail", (stdout, stderr)
    assert b"PASSED" not in stdout
    if exploit == "rewrites_the_sandbox_init_through_proc_mem":
        assert b"PID 1 REFUSED: PermissionError" in stderr, stderr
    if exploit == "reads_the_hidden_tests_from_the_grading_copy":
        assert stderr.count(b"GONE") == 2 and b"READABLE" not in stderr, stderr
    if exploit == "lowers_the_oracle_s_resource_limits" and platform.machine() in ("x86_64", "aarch64"):
        assert stderr.count(b"REFUSED 1") == 6 and b"LOWERED" not in stderr, stderr  # EPERM: seccomp
    if exploit == "kills_its_parent":
        assert "AssertionError" in summary["reason"]


@needs_bwrap
@needs_humaneval
def test_an_edited_prompt_helper_does_not_pass_through_the_runner(he_pack: Path, tmp_path: Path) -> None:
    cheat = "def poly(xs, x):\n    return 0\n\n\ndef find_zero(xs):\n    return 12345.0\n"
    result, _ = run_agent(he_pack, tmp_path, writes(cheat), task="HumanEval_32")
    assert result["card"]["outcome"] == "fail"


LEGACY_ORACLE = '''import os as _sealbench_os

_SEALBENCH_REPORT = "sealbench-oracle-junit.xml"
if _sealbench_os.path.lexists(_SEALBENCH_REPORT):
    _sealbench_os.remove(_SEALBENCH_REPORT)

import solution as _sealbench_candidate

globals().update(
    {_k: _v for _k, _v in vars(_sealbench_candidate).items() if not (_k.startswith("__") and _k.endswith("__"))}
)

# --- test (original) ---
def check(candidate):
    assert candidate(2, 3) == 5
# --- end ---

check(add)

with open(_SEALBENCH_REPORT, "w", encoding="utf-8") as _sealbench_file:
    _sealbench_file.write(
        '<testsuite name="sealbench" tests="1"><testcase classname="legacy_0" name="check"/></testsuite>\\n'
    )
'''


@needs_bwrap
def test_a_pack_sealed_with_the_script_oracle_still_grades_as_before(tmp_path: Path) -> None:
    from sealbench.pack import seal_pack

    pack = tmp_path / "legacy"
    task = pack / "tasks" / "legacy_0"
    for sub in ("workspace", "hidden", "solution"):
        (task / sub).mkdir(parents=True)
    (pack / "prompts").mkdir()
    (pack / "prompts" / "function-v1.txt").write_text("{task_prompt}\n{feedback}\n")
    (pack / "pack.json").write_text(json.dumps({"pack_version": 1, "name": "legacy"}))
    (task / "prompt.md").write_text("Write add(a, b).\n")
    (task / "workspace" / "solution.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    (task / "solution" / "solution.py").write_text("def add(a, b):\n    return a + b\n")
    (task / "hidden" / "test_sealbench_oracle.py").write_text(LEGACY_ORACLE)
    (task / "task.json").write_text(json.dumps({
        "task_id": "legacy_0", "prompt_template_id": "function-v1",
        "oracle_cmd": ["python", "test_sealbench_oracle.py"], "hidden_tests_sha256": "pending-local-hash",
        "max_attempts": 1, "wall_clock_s": 30, "language": "python", "junit_xml": "sealbench-oracle-junit.xml",
        "required_tests": ["legacy_0::check"]}))
    seal_pack(pack)
    ref, _ = run_agent(pack, tmp_path / "ref", "builtin:reference", task="legacy_0")
    assert ref["card"]["outcome"] == "pass" and ref["graded"]["junit"]["ok"]
    wrong, _ = run_agent(pack, tmp_path / "wrong", writes("def add(a, b):\n    return 0\n"), task="legacy_0")
    assert wrong["card"]["outcome"] == "fail" and wrong["graded"]["junit"]["why"].startswith("no JUnit report written")


def test_a_defaultdict_with_a_builtin_default_and_builtin_type_arguments_cross() -> None:
    from collections import defaultdict

    value = defaultdict(list, {"a": [1]})
    back = roundtrip(value)
    assert type(back) is defaultdict and back.default_factory is list and back == value
    with pytest.raises(NotPlainData):
        encode(defaultdict(lambda: 0))
    # Types cross as arguments only, by name, and only the builtin ones.
    assert decode(json.loads(json.dumps(encode(int, objects={}))), objects=lambda n, a: None) is int
    for bad in (int, type("Mine", (), {})):
        with pytest.raises(NotPlainData):
            encode(bad) if bad is int else encode(bad, objects={})
    with pytest.raises(NotPlainData):
        decode(["B", "int"])
