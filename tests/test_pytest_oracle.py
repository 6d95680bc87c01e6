"""The harness's own pytest (sealbench-pytest) against hostile agents, in the real sandbox.

Each exploit runs as a hostile agent through ``execute`` on a sample task whose hidden tests
the agent's wrong solution fails, under a contract that forbids only the hidden test paths:
the forbidden-path defaults are the second line of defence, and these tests check the first.
Where the exploit works against the form sealbench generated before (``python -m pytest``),
the same agent is also run there, unguarded, and passes: the exploit is real, and the guard
is what stops it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLE, make_contract, needs_bwrap, publishes
from sealbench import pytest_guard, pytest_oracle
from sealbench.contract import DEFAULT_FORBIDDEN, contract_digest, lock_contract, new_contract
from sealbench.digest import digest_json
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec, ScoringContract
from sealbench.importers import import_pack
from sealbench.journal import read_chain
from sealbench.pack import load_pack, seal_pack
from sealbench.report import write_report
from sealbench.runner import RunOptions, execute

TASK = "t_11_fix_off_by_one"
HIDDEN = "test_oracle_window.py"
# Passes two of the three hidden tests: last_n(items, 0) returns the whole list.
WRONG = "def last_n(items, n):\n    return items[-n:]\n"
RIGHT = "def last_n(items, n):\n    return items[-n:] if n > 0 else []\n"
OLD_FORM = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", HIDDEN]
PASS_XML = ('<testsuite tests="1"><testcase classname="test_oracle_window" '
            'name="test_zero_gives_nothing"/></testsuite>')
# How a forger finds the JUnit report: pytest's --junitxml, or the harness's private directory.
FIND_REPORT = textwrap.dedent("""    import os, sys

    def _reports():
        for arg in sys.argv:
            if arg.startswith("--junitxml="):
                yield arg.split("=", 1)[1]
            elif os.path.isdir(arg):
                yield os.path.join(arg, "sealbench-junit.xml")
""")

pytestmark = needs_bwrap


def make_pack(tmp_path: Path, name: str, oracle_cmd: list[str] | None = None,
              **record_changes: Any) -> Path:
    """A sealed copy of the sample pack; ``oracle_cmd`` and ``record_changes`` change TASK's
    record, ``hidden_extra`` (a keyword) is appended to its hidden test file."""
    dest = tmp_path / name
    shutil.copytree(SAMPLE, dest)
    hidden_extra = record_changes.pop("hidden_extra", "")
    if hidden_extra:
        hidden = dest / "tasks" / TASK / "hidden" / HIDDEN
        hidden.write_text(hidden.read_text() + hidden_extra)
    path = dest / "tasks" / TASK / "task.json"
    record = json.loads(path.read_text())
    record.update(record_changes)
    if oracle_cmd is not None:
        record["oracle_cmd"] = oracle_cmd
    path.write_text(json.dumps(record))
    seal_pack(dest)
    return dest


def agent(tmp_path: Path, files: dict[str, str], name: str) -> tuple[str, list[str]]:
    """A hostile agent that writes ``files`` into its workspace: (command, mounts)."""
    home = tmp_path / f"agent-{name}"
    home.mkdir()
    (home / "files.json").write_text(json.dumps(files))
    (home / "agent.py").write_text(
        "import json, os, pathlib, sys\n"
        "files = json.loads(pathlib.Path(sys.argv[1]).read_text())\n"
        "for rel, text in files.items():\n"
        "    path = pathlib.Path(rel)\n"
        "    path.parent.mkdir(parents=True, exist_ok=True)\n"
        "    path.write_text(text)\n")
    return f"python {home}/agent.py {home}/files.json", [str(home)]


def run(tmp_path: Path, files: dict[str, str], *, name: str, old_form: bool = False,
        flagged_pass: str = "not_counted", forbidden: list[str] | None = None,
        task: str = TASK, pack: Path | None = None) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """Run the agent for one attempt; (its graded payload, its scorecard, the task's events).

    The contract forbids only the hidden tests' paths unless ``forbidden`` says otherwise.
    """
    pack = pack or make_pack(tmp_path, f"pack-{name}", OLD_FORM if old_form else None)
    command, mounts = agent(tmp_path, files, name)
    contract_file = tmp_path / f"{name}.contract.json"
    draft = make_contract(pack, contract_file, task_ids=(task,), command=command, mounts=mounts,
                          run_id=None, max_attempts=1, flagged_pass=flagged_pass)
    hidden = load_pack(pack).tasks[task].hidden_paths()
    draft = draft.model_copy(update={"forbidden_paths": hidden if forbidden is None else forbidden})
    locked = lock_contract(draft, name, datetime_now(), load_pack(pack))
    write_atomic(contract_file, model_json(locked))
    run_dir = tmp_path / name
    execute(contract_file, run_dir, RunOptions(progress=False))
    events = read_chain(run_dir / "journal.jsonl").events
    if not any(e["kind"] == "harness_error" for e in events):
        publishes(contract_file, run_dir, tmp_path / f"{name}-bundles")
    graded = [e["payload"] for e in events if e["kind"] == "graded"]
    card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
    return (graded[0] if graded else {}), card, [e for e in events if e["task_id"] == task]


def datetime_now() -> Any:
    from conftest import LOCK_TIME

    return LOCK_TIME


def flags(graded: dict[str, Any]) -> list[str]:
    return list(graded.get("forging_flags", []))


# --- honest work under the guard ------------------------------------------------------------


def test_honest_fix_passes_with_no_flag_and_no_scorecard_field(tmp_path: Path) -> None:
    graded, card, events = run(tmp_path, {"window.py": RIGHT}, name="honest")
    assert card["outcome"] == "pass" and graded["task_pass"] is True
    assert graded["oracle_guard"] == pytest_oracle.GUARD_LABEL and flags(graded) == []
    assert graded["junit"]["ran"] == 3 and graded["junit"]["failed"] == 0
    assert "forging_flags" not in card and "flagged_pass" not in graded
    assert "oracle_guard" not in events[0]["payload"]  # task_started: guarded, nothing to say


def test_wrong_solution_fails_under_the_guard_and_passes_nothing_by_itself(tmp_path: Path) -> None:
    graded, card, _ = run(tmp_path, {"window.py": WRONG}, name="wrong")
    assert card["outcome"] == "fail" and graded["junit"]["failed"] == 1 and flags(graded) == []


def test_exercism_style_pack_imports_and_discriminates_under_the_guard(tmp_path: Path) -> None:
    track = tmp_path / "track" / "exercises" / "practice" / "leap"
    for rel, text in {
        ".docs/instructions.md": "Tell whether a year is a leap year.\n",
        ".meta/config.json": json.dumps({"files": {"solution": ["leap.py"], "test": ["leap_test.py"],
                                                   "example": [".meta/example.py"]}}),
        ".meta/example.py": "def leap_year(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
        "leap.py": "def leap_year(year):\n    pass\n",
        "leap_test.py": ("import unittest\n\nfrom leap import leap_year\n\n\nclass LeapTest(unittest.TestCase):\n"
                         "    def test_2000(self):\n        self.assertIs(leap_year(2000), True)\n\n"
                         "    def test_1900(self):\n        self.assertIs(leap_year(1900), False)\n"),
    }.items():
        (track / rel).parent.mkdir(parents=True, exist_ok=True)
        (track / rel).write_text(text)
    pack = import_pack("exercism", tmp_path / "track", tmp_path / "leap-pack")
    record = pack.tasks["leap"].record
    assert record.oracle_cmd == ["sealbench-pytest", "-q", "leap_test.py"] and record.junit_xml is None
    example = ("def leap_year(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n")
    graded, card, _ = run(tmp_path, {"leap.py": example}, name="leap-right", task="leap", pack=pack.root)
    assert card["outcome"] == "pass" and flags(graded) == []
    assert graded["junit"]["missing_required"] == []
    graded, card, _ = run(tmp_path, {"leap.py": "def leap_year(year):\n    return True\n"}, name="leap-wrong",
                          task="leap", pack=pack.root)
    assert card["outcome"] == "fail" and graded["junit"]["failed"] == 1 and flags(graded) == []


def test_src_layout_declares_its_path_with_o_pythonpath(tmp_path: Path) -> None:
    pack = make_pack(tmp_path, "pack-src", ["sealbench-pytest", "-q", "-o", "pythonpath=src", HIDDEN])
    task = pack / "tasks" / TASK
    (task / "workspace" / "src").mkdir()
    (task / "workspace" / "window.py").rename(task / "workspace" / "src" / "window.py")
    shutil.rmtree(task / "solution")
    seal_pack(pack)  # only the workspace moved: the hidden tests' digest stands
    graded, card, _ = run(tmp_path, {"src/window.py": RIGHT}, name="src-layout", pack=pack)
    assert card["outcome"] == "pass", graded


# --- cause 3: pytest read configuration, plugins and itself from the workspace ----------------


FORCE_PASS_CONFTEST = textwrap.dedent("""\
    import pytest

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(item, call):
        report = yield
        report.outcome = "passed"
        report.longrepr = None
        return report
""")


def test_conftest_that_forces_pass_is_ignored(tmp_path: Path) -> None:
    files = {"window.py": WRONG, "conftest.py": FORCE_PASS_CONFTEST}
    graded, card, _ = run(tmp_path, files, name="conftest")
    assert card["outcome"] == "fail" and graded["oracle_ignored"] == ["conftest.py"]
    assert graded["forbidden"] == []  # the guard stopped it, not the forbidden paths
    _, old, _ = run(tmp_path, files, name="conftest-old", old_form=True)
    assert old["outcome"] == "pass"


XFAIL_PLUGIN = ("import pytest\n\ndef pytest_collection_modifyitems(items):\n"
                "    for item in items:\n        item.add_marker(pytest.mark.xfail(reason='x'))\n")


@pytest.mark.parametrize(("config", "text"), [
    ("pytest.ini", "[pytest]\naddopts = --deselect test_oracle_window.py::test_zero_gives_nothing\n"),
    ("tox.ini", "[pytest]\naddopts = -k 'not zero'\n"),
    ("setup.cfg", "[tool:pytest]\naddopts = -k 'not zero'\n"),
    ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-p xfail_everything'\n"),
])
def test_ini_addopts_that_deselect_or_xfail_tests_is_not_read(tmp_path: Path, config: str, text: str) -> None:
    files = {"window.py": WRONG, config: text, "xfail_everything.py": XFAIL_PLUGIN}
    name = config.replace(".", "-")
    graded, card, _ = run(tmp_path, files, name=name)
    assert card["outcome"] == "fail" and graded["junit"]["failed"] == 1
    _, old, _ = run(tmp_path, files, name=f"{name}-old", old_form=True)
    assert old["outcome"] == "pass"


EXIT_ZERO = "import os\nos._exit(0)\n"


@pytest.mark.parametrize("shadow", ["pytest.py", "_pytest/__init__.py", "pluggy/__init__.py"])
def test_pytest_shadow_package_in_workspace_is_not_imported(tmp_path: Path, shadow: str) -> None:
    files = {"window.py": WRONG, shadow: EXIT_ZERO}
    name = "shadow-" + shadow.split("/")[0].replace(".", "-").strip("_")
    graded, card, _ = run(tmp_path, files, name=name)
    assert card["outcome"] == "fail" and graded["junit"]["failed"] == 1 and flags(graded) == []
    if shadow == "pytest.py":
        # The form before sealbench-pytest imported it (it passed), and is now kept from it by a
        # forbidden path: a module named like the test runner's where the oracle imports from.
        old_graded, old, _ = run(tmp_path, files, name=f"{name}-old", old_form=True)
        assert old["outcome"] == "fail" and old_graded["forbidden"] == ["pytest.py"]


@pytest.mark.parametrize("path", ["sitecustomize.py", "usercustomize.py", "force.pth"])
def test_sitecustomize_usercustomize_or_pth_in_workspace_is_not_run(tmp_path: Path, path: str) -> None:
    body = "import os; os._exit(0)\n"
    graded, card, _ = run(tmp_path, {"window.py": WRONG, path: body}, name=path.replace(".", "-"))
    assert card["outcome"] == "fail" and graded["junit"]["failed"] == 1 and flags(graded) == []


def test_plugin_via_entry_point_in_workspace_is_not_loaded(tmp_path: Path) -> None:
    files = {
        "window.py": WRONG,
        "forcepass-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: forcepass\nVersion: 1.0\n",
        "forcepass-1.0.dist-info/entry_points.txt": "[pytest11]\nforcepass = forcepass_plugin\n",
        "forcepass_plugin.py": FORCE_PASS_CONFTEST,
    }
    graded, card, _ = run(tmp_path, files, name="entry-point")
    assert card["outcome"] == "fail" and graded["junit"]["failed"] == 1
    _, old, _ = run(tmp_path, files, name="entry-point-old", old_form=True)
    assert old["outcome"] == "pass"


# --- cause 4: code under test inside the pytest process -------------------------------------------


def test_code_under_test_calling_os_exit_during_import_fails_and_is_flagged(tmp_path: Path) -> None:
    graded, card, _ = run(tmp_path, {"window.py": EXIT_ZERO}, name="os-exit")
    assert card["outcome"] == "fail" and graded["junit"]["why"].startswith("no JUnit report written: ")
    assert "the code under test ended it" in graded["junit"]["why"]
    assert {"exit_hook", "session_cut_short"} <= set(flags(graded))
    assert card["forging_flags"]["flags"] == flags(graded)
    _, old, _ = run(tmp_path, {"window.py": EXIT_ZERO}, name="os-exit-old", old_form=True)
    assert old["outcome"] == "pass"


def test_junit_report_rewritten_from_an_atexit_hook_is_not_a_pass(tmp_path: Path) -> None:
    forger = WRONG + FIND_REPORT + textwrap.dedent(f"""\
        import atexit

        def _forge():
            for path in _reports():
                with open(path, "w") as f:
                    f.write({PASS_XML!r})
            os._exit(0)

        atexit.register(_forge)
    """)
    graded, card, _ = run(tmp_path, {"window.py": forger}, name="atexit")
    assert card["outcome"] == "fail" and graded["junit"]["failed"] == 1
    assert flags(graded) == ["exit_hook"]
    pack = make_pack(tmp_path, "pack-atexit-old", [*OLD_FORM, "--junitxml=report.xml"], junit_xml="report.xml")
    _, old, _ = run(tmp_path, {"window.py": forger}, name="atexit-old", pack=pack)
    assert old["outcome"] == "pass"


def test_report_write_from_code_under_test_is_refused_and_flagged(tmp_path: Path) -> None:
    forger = WRONG + FIND_REPORT + textwrap.dedent(f"""\
        for path in _reports():
            try:
                with open(path, "w") as f:
                    f.write({PASS_XML!r})
            except PermissionError:
                pass
            try:
                os.remove(os.path.join(os.path.dirname(path), "sealbench-record.jsonl"))
            except PermissionError:
                pass
    """)
    graded, card, _ = run(tmp_path, {"window.py": forger}, name="report-write")
    assert card["outcome"] == "fail" and "report_write" in flags(graded)
    assert graded["junit"]["failed"] == 1


def test_exploit_code_under_test_plants_a_deeply_nested_report_and_kills_pytest(tmp_path: Path) -> None:
    # A subprocess (which the guard's hooks do not see) writes the report, and pytest is killed
    # before it writes its own. Built as a tree, 60 MiB of such nesting stalled the runner's
    # threads for 14 s and took 2.6 GB; read as a stream, it is refused at 64 levels.
    forger = WRONG + FIND_REPORT + textwrap.dedent("""\
        import signal, subprocess
        for path in _reports():
            subprocess.run([sys.executable, "-c", "import sys; open(sys.argv[1], 'wb').write(b'<a>' * 10000 + b'</a>' * 10000)",
                            path])
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    graded, card, events = run(tmp_path, {"window.py": forger}, name="deep-report")
    assert card["outcome"] == "fail" and graded["junit"]["ok"] is False
    assert "nested deeper than 64" in graded["junit"]["why"]
    assert not any(e["kind"] == "harness_error" for e in events)


GC_FORGER = WRONG + textwrap.dedent("""\
    import gc

    class _ForcePass:
        def pytest_runtest_makereport(self, item, call):
            pass

    def _install():
        import pytest

        class Force:
            @pytest.hookimpl(wrapper=True)
            def pytest_runtest_makereport(self, item, call):
                report = yield
                report.outcome = "passed"
                report.longrepr = None
                return report

        for obj in gc.get_objects():
            if type(obj).__name__ == "Config" and type(obj).__module__ == "_pytest.config":
                obj.pluginmanager.register(Force(), "force-pass")
                return

    _install()
""")


FORCE_PASS_BY_CLASS = textwrap.dedent("""\
    from _pytest import reports

    _original = reports.TestReport.from_item_and_call.__func__

    def _forced(cls, item, call):
        report = _original(cls, item, call)
        report.outcome, report.longrepr = "passed", None
        return report

    reports.TestReport.from_item_and_call = classmethod(_forced)
""")


def test_code_under_test_patching_pytest_reporting_via_gc_is_flagged_and_not_counted(tmp_path: Path) -> None:
    graded, card, _ = run(tmp_path, {"window.py": GC_FORGER}, name="gc")
    # The forgery works: pytest exits 0 and its report says every test passed ...
    assert graded["tests_green"] is True and graded["junit"]["failed"] == 0
    # ... and the pass is flagged and, under the default contract, not counted.
    assert {"gc_walk", "runner_hook"} <= set(flags(graded))
    assert graded["flagged_pass"] == "not_counted" and card["outcome"] == "fail"
    assert card["forging_flags"]["passes_not_counted"] == [1]
    assert "the contract does not count a flagged pass" in card["forging_flags"]["why"]
    graded, card, _ = run(tmp_path, {"window.py": GC_FORGER}, name="gc-counted", flagged_pass="counted")
    assert graded["flagged_pass"] == "counted" and card["outcome"] == "pass"
    assert card["forging_flags"]["passes_not_counted"] == []


def test_code_under_test_patching_pytest_classes_is_flagged_and_not_counted(tmp_path: Path) -> None:
    graded, card, _ = run(tmp_path, {"window.py": WRONG + FORCE_PASS_BY_CLASS}, name="patch")
    assert graded["tests_green"] is True and "runner_patched" in flags(graded)
    assert card["outcome"] == "fail"


def test_code_under_test_setting_a_trace_function_is_flagged_and_not_counted(tmp_path: Path) -> None:
    tracer = RIGHT + "import sys\nsys.settrace(lambda frame, event, arg: None)\n"
    graded, card, _ = run(tmp_path, {"window.py": tracer}, name="trace")
    assert graded["tests_green"] is True and flags(graded) == ["trace_function"]
    assert card["outcome"] == "fail" and card["forging_flags"]["flags"] == ["trace_function"]


def test_forged_record_written_through_the_inherited_descriptor_does_not_authenticate(tmp_path: Path) -> None:
    # A forger that knows the harness: reporting patched to pass, then, right after pytest
    # writes its (passing) report, a clean end record appended to the guard's own record
    # through its descriptor and the process ended before the guard can end the session.
    forger = WRONG + FORCE_PASS_BY_CLASS + textwrap.dedent("""\
        import json, os, posix
        from _pytest import terminal

        # Called by pytest's terminal reporter right after the JUnit report is written.
        def _then_forge(self):
            for fd in os.listdir("/proc/self/fd"):
                try:
                    target = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    continue
                if target.endswith("sealbench-record.jsonl"):
                    end = {"kind": "end", "status": 0, "flags": [], "tests": {}, "ignored": []}
                    os.write(int(fd), (json.dumps(end, sort_keys=True) + "\\n").encode())
                    os.write(int(fd), (json.dumps({"kind": "mac", "mac": "0" * 64}) + "\\n").encode())
            posix._exit(0)

        terminal.TerminalReporter.summary_stats = _then_forge
    """)
    graded, card, _ = run(tmp_path, {"window.py": forger}, name="forged-record")
    assert graded["oracle"]["exit_code"] == 0 and graded["junit"]["ok"] is True  # the forgery "worked"
    assert {"record_tampered", "session_cut_short"} <= set(flags(graded))
    assert card["outcome"] == "fail"


def test_silencing_the_guards_wrappers_is_flagged(tmp_path: Path) -> None:
    forger = WRONG + FORCE_PASS_BY_CLASS + textwrap.dedent("""\
        import atexit, os

        for fn in (os._exit, atexit.register):
            for cell in fn.__closure__ or ():
                if callable(cell.cell_contents) and getattr(cell.cell_contents, "__name__", "") == "audit":
                    cell.cell_contents = lambda *args: None
        atexit.register(print)
    """)
    graded, card, _ = run(tmp_path, {"window.py": forger}, name="silenced")
    assert graded["tests_green"] is True and "runner_patched" in flags(graded)
    assert any("closure" in d for d in graded["forging_detail"])
    assert card["outcome"] == "fail"


def test_hidden_test_function_swapped_through_pytests_config_is_flagged(tmp_path: Path) -> None:
    # pytest sets _pytest.assertion.util._config while a test runs: from there the session
    # and its items are one attribute away, with no audited step on the way.
    forger = textwrap.dedent("""\
        def last_n(items, n):
            from _pytest.assertion import util
            session = util._config.pluginmanager.get_plugin("session")
            for item in session.items:
                item.obj = lambda *args, **kwargs: None
            return items[-n:]
    """)
    graded, card, _ = run(tmp_path, {"window.py": forger}, name="swap-items")
    assert graded["tests_green"] is True and flags(graded) == ["runner_patched"]
    assert "the pack's code replaced by code under test" in graded["forging_detail"][0]
    assert card["outcome"] == "fail"


def test_messages_forged_to_the_watch_are_flagged(tmp_path: Path) -> None:
    forger = RIGHT + "import sys\nsys.audit('sealbench.test', 'x::y', 'x::y', 'passed')\n"
    graded, card, _ = run(tmp_path, {"window.py": forger}, name="fake-message")
    assert flags(graded) == ["runner_hook"] and card["outcome"] == "fail"


def test_code_under_test_that_hangs_times_out_without_a_flag(tmp_path: Path) -> None:
    hang = "def last_n(items, n):\n    while True:\n        pass\n"
    pack = make_pack(tmp_path, "pack-hang", wall_clock_s=4)
    graded, card, _ = run(tmp_path, {"window.py": hang}, name="hang", pack=pack)
    assert card["outcome"] == "timeout" and graded["oracle_timed_out"] is True
    assert flags(graded) == [] and "forging_flags" not in card


def test_report_lists_flagged_tasks_and_why(tmp_path: Path) -> None:
    from sealbench.report import build_sections, load_run, render_markdown

    run(tmp_path, {"window.py": GC_FORGER}, name="report-gc")
    view = load_run(tmp_path / "report-gc")
    text = render_markdown(view, build_sections(view))
    assert "Forging flags" in text and "fail (flagged)" in text
    assert "gc_walk" in text and "a flagged pass is not counted" in text
    run(tmp_path, {"window.py": RIGHT}, name="report-honest")
    view = load_run(tmp_path / "report-honest")
    assert "Forging flags" not in render_markdown(view, build_sections(view))


def test_code_under_test_walking_frames_is_flagged(tmp_path: Path) -> None:
    walker = ("import sys\n\ndef last_n(items, n):\n    sys._getframe(1)\n"
              "    return items[-n:] if n > 0 else []\n")
    graded, card, _ = run(tmp_path, {"window.py": walker}, name="frames")
    assert flags(graded) == ["frame_walk"] and card["outcome"] == "fail"


@pytest.mark.parametrize(("name", "body"), [
    ("skip", "import pytest\n\ndef last_n(items, n):\n    if n == 0:\n        pytest.skip('later')\n"
             "    return items[-n:]\n"),
    ("unittest-skip", "import unittest\n\ndef last_n(items, n):\n    if n == 0:\n"
                      "        raise unittest.SkipTest('later')\n    return items[-n:]\n"),
    ("exit", "import pytest\n\ndef last_n(items, n):\n    if n == 0:\n        pytest.exit('done', returncode=0)\n"
             "    return items[-n:]\n"),
])
def test_skip_or_exit_raised_from_code_under_test_is_flagged(tmp_path: Path, name: str, body: str) -> None:
    graded, card, _ = run(tmp_path, {"window.py": body}, name=f"outcome-{name}")
    assert "outcome_from_code_under_test" in flags(graded) and card["outcome"] == "fail"


def test_standard_module_shadowed_by_the_workspace_is_flagged(tmp_path: Path) -> None:
    pack = make_pack(tmp_path, "pack-shadow-stdlib", hidden_extra=(
        "\n\nimport fractions\n\n\ndef test_thirds():\n    assert fractions.Fraction(1, 3) * 3 == 1\n"))
    shadow = "class Fraction:\n    def __init__(self, *a):\n        pass\n\n    def __mul__(self, other):\n        return 1\n"
    graded, card, _ = run(tmp_path, {"window.py": RIGHT, "fractions.py": shadow}, name="shadow-stdlib", pack=pack)
    assert graded["tests_green"] is True and flags(graded) == ["module_shadowed"]
    assert card["outcome"] == "fail"


def test_hidden_tests_own_skip_mark_raises_no_flag(tmp_path: Path) -> None:
    pack = make_pack(tmp_path, "pack-skipmark", hidden_extra=(
        "\n\nimport pytest\n\n\n@pytest.mark.skip(reason='pack')\ndef test_skipped_by_the_pack():\n"
        "    assert False\n\n\ndef test_skips_itself():\n    pytest.skip('pack')\n\n\n"
        "@pytest.mark.xfail(reason='pack', strict=True)\ndef test_xfails():\n    assert False\n"))
    graded, card, _ = run(tmp_path, {"window.py": RIGHT}, name="skipmark", pack=pack)
    assert card["outcome"] == "pass" and flags(graded) == []


# --- a crash says whose it was ---------------------------------------------------------------


def broken_guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the guard whose start fails on an import, in place of the harness's."""
    text = pytest_oracle.GUARD_FILE.read_text()
    start = "        import pytest\n\n        ending = _install("
    assert text.count(start) == 1
    broken = tmp_path / "broken-guard" / "pytest_guard.py"
    broken.parent.mkdir()
    broken.write_text(text.replace(start, start.replace("import pytest\n", "import pytest\n        import "
                                                        "sealbench_missing_plugin_module\n")))
    monkeypatch.setattr(pytest_oracle, "GUARD_FILE", broken)
    return broken


def test_a_broken_guard_is_the_harness_failure_with_its_traceback_in_validate_and_show(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any) -> None:
    pack = make_pack(tmp_path, "validate-broken-guard")
    for other in (pack / "tasks").iterdir():
        if other.name != TASK:
            shutil.rmtree(other)
    seal_pack(pack)
    broken_guard(tmp_path, monkeypatch)
    code, out, err = cli("pack", "validate", pack, "--repeat", "1", "--no-progress")
    said = out + err
    assert "invalid: t_11_fix_off_by_one: harness error" in said, said
    assert "the test runner crashed: sealbench-pytest: the guard failed before any test ran: ModuleNotFoundError: " \
           "No module named 'sealbench_missing_plugin_module' (pytest_guard.py line" in said
    assert "not the agent's" in said and "runs on sealbench's own Python" in said
    # In a run the attempt is not the agent's fail: a harness error, said by show and the task page.
    graded, card, events = run(tmp_path, {"window.py": RIGHT}, name="broken-guard")
    assert graded == {} and card["outcome"] == "harness_error"
    (error,) = [e["payload"]["error"] for e in events if e["kind"] == "harness_error"]
    assert "No module named 'sealbench_missing_plugin_module'" in error and "Its output ends: " in error
    code, out, _ = cli("show", tmp_path / "broken-guard")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith(TASK))
    assert "the harness failed, not the agent: " in row and "the test runner crashed" in row
    assert "No module named 'sealbench_missing_plugin_module'" in row
    _, html_path = write_report(tmp_path / "broken-guard", tmp_path / "report")
    page = (html_path.parent / "tasks" / f"{TASK}.html").read_text(encoding="utf-8")
    assert "the test runner crashed" in page and "sealbench_missing_plugin_module" in page


def test_exploit_code_under_test_that_kills_pytest_is_the_agents_fail(tmp_path: Path) -> None:
    """Were every crash the harness's, killing pytest would turn a fail into a harness error."""
    killer = RIGHT + "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    graded, card, events = run(tmp_path, {"window.py": killer}, name="killed")
    assert card["outcome"] == "fail" and not any(e["kind"] == "harness_error" for e in events)
    why = graded["junit"]["why"]
    assert why.startswith("no JUnit report written: the test process exited 137 (killed by signal 9)")
    assert "the harness's own test run passes in this environment, so the code under test ended it" in why


def test_pythonpath_options_are_taken_out_for_a_pytest_without_them() -> None:
    args = pytest_guard.rooted_pythonpath(["-q", "-o", "pythonpath=src lib", "-k", "x", "--override-ini=pythonpath=other",
                                           "-opythonpath=last", "t.py"], "/r")
    assert pytest_guard.pythonpath_for_old_pytest(args) == (["-q", "-k", "x", "t.py"], ["/r/last"])
    assert pytest_guard.pythonpath_for_old_pytest(["-o", "pythonpath=/r/a /r/b"])[1] == ["/r/a", "/r/b"]


def test_a_crash_is_summed_up_by_its_exception_and_where_in_the_guard() -> None:
    internal = ("INTERNALERROR> Traceback (most recent call last):\n"
                'INTERNALERROR>   File "/x/pytest_guard.py", line 12, in pytest_runtest_logreport\n'
                "INTERNALERROR> AttributeError: 'TestReport' object has no attribute 'when'\n")
    assert pytest_oracle.crash_summary(internal) == ("AttributeError: 'TestReport' object has no attribute 'when' "
                                                      "(in the guard, pytest_guard.py line 12, in "
                                                      "pytest_runtest_logreport)")
    assert pytest_oracle.crash_summary("1 passed\n") is None
    assert pytest_oracle.process_end(137, None) == "exited 137 (killed by signal 9)"
    assert pytest_oracle.crashed(0, False, {"why": pytest_oracle.NO_REPORT})
    assert not pytest_oracle.crashed(None, True, {"why": pytest_oracle.NO_REPORT})
    assert not pytest_oracle.crashed(1, False, {"ok": False, "why": "1 failed"})


# --- the verdict's channel ----------------------------------------------------------------


KEY = bytes(range(32))


def oracle(private: Path, key: bytes = KEY) -> pytest_oracle.GuardedOracle:
    return pytest_oracle.GuardedOracle(argv=("x",), env={}, readonly=(), writable=(), private=private, key=key)


def lines(*entries: dict[str, Any]) -> bytes:
    return b"".join((json.dumps(e, sort_keys=True) + "\n").encode() for e in entries)


def sealed(body: bytes, key: bytes = KEY) -> bytes:
    """``body`` and the last line the guard writes: its authentication."""
    import hashlib

    mac = pytest_guard.record_mac(key, hashlib.sha256(body).digest())
    return body + lines({"kind": "mac", "mac": mac})


def write_run(private: Path, record: bytes | None, report: bytes | None) -> None:
    private.mkdir()
    if report is not None:
        (private / pytest_guard.REPORT_NAME).write_bytes(report)
    if record is not None:
        (private / pytest_guard.RECORD_NAME).write_bytes(record)


def end(report: bytes, **extra: Any) -> dict[str, Any]:
    from sealbench.digest import sha256_bytes

    return {"kind": "end", "status": 0, "flags": [], "report_sha256": sha256_bytes(report),
            "tests": {"m::t": "passed"}, **extra}


REPORT = b'<testsuite><testcase classname="m" name="t"/></testsuite>'
START = {"kind": "start", "guard_version": 1}
GC_FLAG = {"kind": "flag", "flag": "gc_walk", "detail": "gc.get_objects from x.py"}


@pytest.mark.parametrize(("record", "expected"), [
    (sealed(lines(START, end(REPORT))), []),
    (sealed(lines(START, GC_FLAG, end(REPORT, flags=[["gc_walk", "gc.get_objects from x.py"]]))), ["gc_walk"]),
    (lines(START, end(REPORT)), ["record_tampered", "session_cut_short"]),  # no authentication
    (sealed(lines(START, end(REPORT)), key=b"k" * 32), ["record_tampered", "session_cut_short"]),
    (sealed(lines(START, GC_FLAG, end(REPORT, flags=[["gc_walk", "x"]])))
     .replace(json.dumps(GC_FLAG, sort_keys=True).encode(), b" " * len(json.dumps(GC_FLAG, sort_keys=True))),
     ["gc_walk", "record_tampered", "session_cut_short"]),  # a flag blanked out: the end still has it
    (sealed(lines(START)), ["session_cut_short"]),
    (sealed(lines(START)) + lines(end(REPORT)), ["record_tampered", "session_cut_short"]),  # a forged end
    (lines(START, GC_FLAG), ["gc_walk", "record_tampered", "session_cut_short"]),
    (b"", ["record_tampered", "session_cut_short"]),
    (None, ["record_tampered"]),
    (sealed(lines(START, end(b"<testsuite/>"))), ["report_write"]),
    (sealed(lines(START, end(REPORT, tests={"m::t": "failed"}))), ["report_mismatch"]),
])
def test_a_changed_or_cut_record_or_report_is_a_flag_never_an_error(
        tmp_path: Path, record: bytes | None, expected: list[str]) -> None:
    private = tmp_path / "private"
    write_run(private, record, REPORT)
    verdict = pytest_oracle.read_verdict(oracle(private), ["m::t"])
    assert sorted(verdict.flags) == expected
    assert verdict.junit["ok"] is True


def test_a_record_replaced_by_a_link_is_not_followed(tmp_path: Path) -> None:
    private = tmp_path / "private"
    write_run(private, None, REPORT)
    (tmp_path / "elsewhere.jsonl").write_bytes(sealed(lines(START, end(REPORT))))
    (private / pytest_guard.RECORD_NAME).symlink_to(tmp_path / "elsewhere.jsonl")
    assert "record_tampered" in pytest_oracle.read_verdict(oracle(private), []).flags


def test_a_cut_record_of_a_failed_process_is_no_flag(tmp_path: Path) -> None:
    write_run(tmp_path / "private", lines(START), None)
    assert pytest_oracle.read_verdict(oracle(tmp_path / "private"), [], exit_code=1).flags == []
    assert pytest_oracle.read_verdict(oracle(tmp_path / "private"), [], exit_code=None).flags == []
    assert pytest_oracle.read_verdict(oracle(tmp_path / "private"), [], exit_code=0).flags == [
        "record_tampered", "session_cut_short"]


def test_a_report_replaced_by_a_link_or_a_fifo_is_not_followed(tmp_path: Path) -> None:
    import os

    private = tmp_path / "private"
    write_run(private, lines(START), None)
    (private / pytest_guard.REPORT_NAME).symlink_to(tmp_path / "elsewhere.xml")
    (tmp_path / "elsewhere.xml").write_bytes(REPORT)
    assert pytest_oracle.read_verdict(oracle(private), []).junit["why"] == "no JUnit report written"
    (private / pytest_guard.REPORT_NAME).unlink()
    os.mkfifo(private / pytest_guard.REPORT_NAME)
    assert pytest_oracle.read_verdict(oracle(private), []).junit["why"] == "no JUnit report written"


# --- old packs, contracts, forbidden paths --------------------------------------------------


def test_old_form_pytest_oracle_runs_as_sealed_and_is_recorded(tmp_path: Path) -> None:
    graded, card, events = run(tmp_path, {"window.py": RIGHT}, name="old", old_form=True)
    assert card["outcome"] == "pass" and "oracle_guard" not in graded
    assert events[0]["kind"] == "task_started" and events[0]["payload"]["oracle_guard"] == "none"
    assert events[0]["payload"]["oracle_cmd"] == OLD_FORM
    pack = load_pack(make_pack(tmp_path, "pack-old-contract", OLD_FORM))
    contract, _ = new_contract(pack, tmp_path / "c.json", [TASK], host="h",
                               agent=AgentSpec(label="a", command="builtin:noop"))
    assert "pyproject.toml" in (contract.forbidden_paths or [])
    guarded, _ = new_contract(load_pack(make_pack(tmp_path, "pack-new-contract")), tmp_path / "c2.json", [TASK],
                              host="h", agent=AgentSpec(label="a", command="builtin:noop"))
    assert "pyproject.toml" not in (guarded.forbidden_paths or [])


@pytest.mark.parametrize("path", ["pytest.py", "_pytest/__init__.py", "pluggy/__init__.py",
                                  "evil-1.0.dist-info/entry_points.txt", "sub/conftest.py"])
def test_default_contract_also_forbids_the_shadows(tmp_path: Path, path: str) -> None:
    graded, card, _ = run(tmp_path, {"window.py": RIGHT, path: EXIT_ZERO}, name="forbid-" + path.split("/")[0],
                          forbidden=list(DEFAULT_FORBIDDEN))
    assert graded["forbidden"] == [path] and card["outcome"] == "fail"


def test_a_repository_src_pytest_package_is_not_forbidden() -> None:
    from sealbench.workspace import forbidden_hits

    assert forbidden_hits(["src/_pytest/python.py", "src/pytest/__init__.py", "pyproject.toml"],
                          list(DEFAULT_FORBIDDEN), []) == []


def test_a_module_named_like_one_imported_from_elsewhere_is_forbidden_only_where_the_oracle_imports(
        tmp_path: Path) -> None:
    from sealbench.workspace import module_shadows

    pristine, ws = tmp_path / "pristine", tmp_path / "ws"
    pristine.mkdir()
    (pristine / "json.py").write_text("")  # the task's own: changing it is a fix
    (ws / "vendor" / "p").mkdir(parents=True)
    (ws / "decimal").symlink_to("vendor/p")  # a link to a package, imported as decimal
    (ws / "data").write_text("")
    hidden = ["oracle.py", "tests/test_x.py", "a/b/test_y.py"]
    changed = ["pathlib.py", "random.cpython-311-x86_64-linux-gnu.so", "email/__init__.py", "tests/typing.py",
               "pytest.pyc", "pydantic/__init__.py", "decimal", "vendor/p/__init__.py", "a/fractions.py",
               "src/json.py", "json.py", "io.py", "src/pkg/types.py", "pkg/parser.py", "test/test_new.py", "calc.py",
               "tests/test_x.py", "data", "test.py", "this.py"]
    assert module_shadows(changed, pristine, ws, hidden) == [
        "pathlib.py", "random.cpython-311-x86_64-linux-gnu.so", "email/__init__.py", "tests/typing.py",
        "pytest.pyc", "pydantic/__init__.py", "decimal", "a/fractions.py"]
    # pytest's -o pythonpath=src puts src/ ahead of the standard library too.
    assert module_shadows(["src/json.py"], pristine, ws, [], ["python", "-m", "pytest", "-o", "pythonpath=src"]) == [
        "src/json.py"]


def test_contract_locked_before_flagged_pass_keeps_its_digest(tmp_path: Path) -> None:
    pack = load_pack(make_pack(tmp_path, "pack-digest"))
    contract, _ = new_contract(pack, tmp_path / "c.json", [TASK], host="h",
                               agent=AgentSpec(label="a", command="builtin:noop"))
    old = contract.model_copy(update={"flagged_pass": None})
    body = old.model_dump(mode="json", exclude={"contract_sha256", "flagged_pass"})
    assert contract_digest(old) == digest_json(body)  # what earlier releases computed
    assert contract_digest(contract) != contract_digest(old)
    file = json.loads(model_json(old))
    del file["flagged_pass"]
    assert ScoringContract.model_validate(file).flagged_pass is None


def test_a_src_layout_repository_is_imported_from_src() -> None:
    from sealbench.importers.oracle import import_roots, pytest_oracle_cmd

    assert import_roots(["src/click/__init__.py", "tests/test_x.py"]) == ["src"]
    assert import_roots(["calc/__init__.py", "src/notes.txt"]) == ["."]
    assert pytest_oracle_cmd(["t.py"], pythonpath=["src"]) == ["sealbench-pytest", "-q", "-o", "pythonpath=src", "t.py"]


# --- an installation without pytest ------------------------------------------------------

WITHOUT_PYTEST = "import sys; sys.modules['pytest'] = None; from sealbench.cli import main; sys.exit(main(sys.argv[1:]))"


def _cli_without_pytest(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    """The real CLI on an interpreter where pytest cannot be imported (as after a bare install)."""
    return subprocess.run([sys.executable, "-c", WITHOUT_PYTEST, *map(str, argv)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_run_without_pytest_installed_is_refused_before_it_scores_anything(sealed_pack: Path,
                                                                              tmp_path: Path) -> None:
    # Without pytest every guarded oracle exited 1 and each attempt was scored the agent's
    # "fail": the reference agent scored 0 of 5 on the sample pack, and the run was bundled.
    contract = tmp_path / "c.json"
    make_contract(sealed_pack, contract, task_ids=("t_11_fix_off_by_one",), run_id="no-pytest")
    done = _cli_without_pytest("run", contract, "--out", tmp_path / "run", "--no-progress")
    assert done.returncode == 3, done.stderr
    assert "pytest is not installed beside sealbench" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_validation_without_pytest_installed_is_refused(sealed_pack: Path, tmp_path: Path) -> None:
    before = (sealed_pack / "pack.json").read_bytes()
    done = _cli_without_pytest("pack", "validate", sealed_pack, "--repeat", "1", "--no-progress")
    assert done.returncode == 3, done.stderr
    assert "pytest is not installed beside sealbench" in done.stderr
    assert (sealed_pack / "pack.json").read_bytes() == before  # no task was judged invalid


# --- which tests decide: every test in the report, or only the required ones ----------------

PASSED_BY_WRONG = ["test_oracle_window::test_returns_exactly_n_items",
                   "test_oracle_window::test_whole_list_when_n_is_large"]


@pytest.mark.parametrize(("decided_by", "required", "outcome"), [
    ("required", PASSED_BY_WRONG, "pass"),       # the failing test is not required: allowed to fail
    ("all", PASSED_BY_WRONG, "fail"),            # today's rule: every test in the report passes
    ("required", [*PASSED_BY_WRONG, "test_oracle_window::test_zero_gives_nothing"], "fail"),
    ("required", ["test_oracle_window::test_that_never_ran"], "fail"),  # a required test must run
])
def test_a_failing_test_that_is_not_required_decides_only_under_the_all_rule(
        tmp_path: Path, decided_by: str, required: list[str], outcome: str) -> None:
    pack = make_pack(tmp_path, "pack", required_tests=required, decided_by=decided_by)
    graded, card, _ = run(tmp_path, {"window.py": WRONG}, name="subset", pack=pack)
    assert graded["junit"]["ran"] == 3 and graded["junit"]["failed"] == 1
    assert graded["oracle"]["exit_code"] == 1  # pytest's "some tests failed", allowed under "required"
    assert card["outcome"] == outcome and flags(graded) == []


def test_the_rule_is_in_the_seal_and_absent_when_it_is_all(tmp_path: Path) -> None:
    plain = load_pack(make_pack(tmp_path, "plain")).manifest.seal
    same = load_pack(make_pack(tmp_path, "same", decided_by="all")).manifest.seal
    subset = load_pack(make_pack(tmp_path, "subset", required_tests=PASSED_BY_WRONG,
                                 decided_by="required")).manifest.seal
    assert plain is not None and same is not None and subset is not None
    assert plain.pack_sha256 == same.pack_sha256 != subset.pack_sha256
    # "all" is never written: every pack sealed before the rule existed keeps its digest.
    assert "decided_by" not in load_pack(tmp_path / "same").tasks[TASK].record.model_dump(mode="json")


def test_required_rule_without_required_tests_is_refused_at_seal(tmp_path: Path) -> None:
    from sealbench.errors import PackError

    with pytest.raises(PackError, match=r"decided_by: 'required' needs required_tests"):
        make_pack(tmp_path, "none-required", decided_by="required")


def test_verdict_rules_as_a_table() -> None:
    passed = {"a", "b"}
    assert pytest_oracle.verdict(3, 1, passed, ["a", "b"], "required")["ok"] is True
    assert pytest_oracle.verdict(3, 1, passed, ["a", "b"], "all")["ok"] is False
    assert pytest_oracle.verdict(3, 1, passed, ["c"], "required")["why"] == "not passed: ['c']"
    assert pytest_oracle.verdict(0, 0, set(), ["a"], "required")["why"] == "no test ran"
    assert pytest_oracle.verdict(2, 0, passed, [], "required")["ok"] is False
    assert [pytest_oracle.exit_passes(c, "required") for c in (0, 1, 2, 5, None)] == [True, True, False, False, False]
    assert [pytest_oracle.exit_passes(c, "all") for c in (0, 1)] == [True, False]


def test_exploit_a_required_name_is_not_covered_by_a_namesake_that_passed_in_another_file() -> None:
    # A required bare name that failed in one file, and a test of the same name that passed in
    # another: the required test did not pass, whatever the other one did.
    report = (b'<testsuite><testcase classname="tests.test_a" name="test_x"><failure/></testcase>'
              b'<testcase classname="tests.test_b" name="test_x"/>'
              b'<testcase classname="tests.test_b" name="test_y"/></testsuite>')
    got = pytest_oracle.junit_verdict(report, ["test_x", "tests.test_b::test_y"], "required")
    assert got["ok"] is False and got["missing_required"] == ["test_x"]
    skipped = report.replace(b"<failure/>", b"<skipped/>")
    assert pytest_oracle.junit_verdict(skipped, ["test_x"], "required")["ok"] is False
    # Named in full, the test that passed is what it says.
    assert pytest_oracle.junit_verdict(report, ["tests.test_b::test_x"], "required")["ok"] is True
