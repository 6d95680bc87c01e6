"""Repository tasks that run: sealed environments built with uv, and SWE-bench's grading semantics.

Two sets of tasks, both in the real bubblewrap sandbox with environments built by uv from the
package index:

* a small repository made here (a src/ layout, a bug, a test patch), so that every machine
  runs the whole path: import, ``env build``, validation, reference and no-op agents, an agent
  that also edits the test file, and a hostile one that rewrites the test file instead of
  fixing the code;
* the three real click instances of the data folder beside this project (skipped, with the
  reason, where it is absent).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pytest_matrix
from conftest import SHARED_DATA, make_contract, needs_bwrap
from sealbench import environments
from sealbench.errors import EnvironmentRefused, PackError
from sealbench.formats import EnvironmentSpec
from sealbench.importers import import_pack
from sealbench.pack import Pack, load_pack
from sealbench.runner import RunOptions, execute
from sealbench.validate import validate_pack

pytestmark = needs_bwrap

CLICK = SHARED_DATA / "repos"
needs_click = pytest.mark.skipif(not (CLICK / "click.bundle").is_file(),
                                 reason=f"the click instances are not on this machine ({CLICK} is absent)")


def git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS_BEFORE = textwrap.dedent("""\
    from calc import add


    def test_add_zero():
        assert add(5, 0) == 5
""")
TESTS_AFTER = TESTS_BEFORE + textwrap.dedent("""\


    def test_add_two_numbers_gives_their_sum():
        assert add(2, 3) == 5
""")


@pytest.fixture(scope="module")
def env_cache() -> Iterator[Path]:
    """The project's cache of built environments (kept across test runs: a spec is built once)."""
    old = pytest_matrix.use_cache()
    yield pytest_matrix.CACHE
    pytest_matrix.restore(old)


@pytest.fixture(scope="module")
def calc_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A repository with a bug, and one SWE-bench-style instance of its fix: (clone, instances)."""
    root = tmp_path_factory.mktemp("calc")
    repo = root / "calc"
    (repo / "src" / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "src" / "calc" / "__init__.py").write_text(BUGGY)
    (repo / "src" / "calc" / "_util.py").write_text("UNIT = 1\n")  # a module no fix touches: the pack's own
    (repo / "tests" / "test_calc.py").write_text(TESTS_BEFORE)
    (repo / "requirements").mkdir()
    (repo / "requirements" / "tests.txt").write_text("pytest\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "calc" / "__init__.py").write_text(FIXED)
    patch = git(repo, "diff", "--", "src")
    (repo / "tests" / "test_calc.py").write_text(TESTS_AFTER)
    test_patch = git(repo, "diff", "--", "tests")
    git(repo, "checkout", "-q", "--", ".")
    instance = {
        "repo": "example/calc", "instance_id": "example__calc-1", "base_commit": base, "patch": patch,
        "test_patch": test_patch, "problem_statement": "add() subtracts instead of adding.",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add_two_numbers_gives_their_sum"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_add_zero"]),
        "version": "", "environment_setup_commit": base,
    }
    data = root / "instances.jsonl"
    data.write_text(json.dumps(instance) + "\n")
    return repo, data


@pytest.fixture(scope="module")
def calc_pack(calc_repo: tuple[Path, Path], env_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    repo, data = calc_repo
    pack = import_pack("swebench", data, tmp_path_factory.mktemp("calcpack") / "pack", repos=[("example/calc", repo)])
    environments.build_all(pack, say=lambda _line: None)
    validate_pack(pack.root, repeat=1, progress=False)  # its verdict is a test of its own, below
    return load_pack(pack.root)


@pytest.fixture(scope="module")
def oldest_calc_pack(calc_repo: tuple[Path, Path], env_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    """The calc task in an environment of the oldest pytest the guard runs on."""
    repo, data = calc_repo
    override = tmp_path_factory.mktemp("oldest") / "envs.json"
    override.write_text(json.dumps({"example/calc": {"requirements": list(pytest_matrix.MATRIX[pytest_matrix.OLDEST])}}))
    pack = import_pack("swebench", data, override.parent / "pack", repos=[("example/calc", repo)], env_spec=override)
    environments.build_all(pack, say=lambda _line: None)
    validate_pack(pack.root, repeat=1, progress=False)  # its verdict is a test of its own, below
    return load_pack(pack.root)


@pytest.fixture(params=["newest", "oldest"])
def guard_pack(request: pytest.FixtureRequest) -> Pack:
    """The calc task on the newest pytest and on the oldest: a guard exploit must fail on both."""
    return request.getfixturevalue("calc_pack" if request.param == "newest" else "oldest_calc_pack")  # type: ignore[no-any-return]


def run_agent(pack: Pack, tmp_path: Path, command: str, name: str, **kwargs: Any) -> list[dict[str, Any]]:
    contract = tmp_path / f"{name}.json"
    make_contract(pack.root, contract, command=command, run_id=f"{name}-{os.getpid()}", **kwargs)
    run_dir = tmp_path / name
    execute(contract, run_dir, RunOptions(progress=False, jobs=2))
    return [json.loads(line) for line in (run_dir / "scorecards.jsonl").read_text().splitlines()]


def graded_events(run_dir: Path) -> list[dict[str, Any]]:
    return [e["payload"] for e in map(json.loads, (run_dir / "journal.jsonl").read_text().splitlines())
            if e["kind"] == "graded"]


def not_passed(run_dir: Path) -> str:
    """What the journal says about every attempt that did not pass (for an assertion's message):
    its grading, or its harness error, with the oracle's output kept as blobs."""
    lines = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    told = []
    for e in lines:
        p = e["payload"]
        if (e["kind"] == "graded" and not p.get("task_pass")) or e["kind"] == "harness_error":
            oracle = p.get("oracle") or {}
            output = [(run_dir / "blobs" / str(oracle[k]).removeprefix("sha256:")).read_text(errors="replace")[-1500:]
                      for k in ("stdout", "stderr") if oracle.get(k)]
            told.append(f"{e['task_id']} attempt {e['attempt']}: {e['kind']} {json.dumps(p)[:1500]} {output}")
    return "\n".join(told) or "no graded or harness_error line says why"


def python_agent(code: str, *args: str) -> str:
    return "python -c " + shlex.quote(textwrap.dedent(code)) + "".join(" " + shlex.quote(a) for a in args)


# --- the small repository: every machine --------------------------------------------------------


@pytest.mark.parametrize("which", ["calc_pack", "oldest_calc_pack"])
def test_validation_finds_the_task_valid_in_its_environment(which: str, request: pytest.FixtureRequest) -> None:
    """On the newest pytest and on the oldest: no flag on honest work, the empty change fails."""
    validity = request.getfixturevalue(which).manifest.validity
    assert validity is not None and all(ev.valid for ev in validity.tasks.values()), validity


def test_import_keeps_the_test_files_and_writes_an_environment(calc_pack: Pack) -> None:
    task = calc_pack.tasks["example__calc-1"]
    assert task.record.test_files == "reset"
    assert (task.pack_workspace / "tests" / "test_calc.py").read_text() == TESTS_BEFORE  # the pre-patch version
    assert (task.hidden / "tests" / "test_calc.py").read_text() == TESTS_AFTER
    spec = task.record.environment
    assert spec is not None and spec.import_roots == ["src"] and not environments.spec_problems(spec)
    assert any(r.startswith("pytest==") and "--hash=sha256:" in r for r in spec.requirements)
    assert "requirements/tests.txt" in spec.source and "resolved with hashes at import" in spec.source
    assert task.record.oracle_cmd == ["sealbench-pytest", "-q", "-o", "pythonpath=src", "tests/test_calc.py"]


def test_env_build_reuses_a_built_environment(calc_pack: Pack) -> None:
    ((spec, built, cached, _took),) = environments.build_all(calc_pack, say=lambda _line: None)
    assert cached and built.root == environments.env_dir(spec)
    assert any(p.lower().startswith("pytest==") for p in built.packages)
    # Nothing in the environment puts code under test on sys.path at an interpreter's start.
    assert not list(built.root.glob("lib/python*/site-packages/*.pth"))


def test_reference_passes_and_noop_fails_in_the_environment(calc_pack: Pack, tmp_path: Path) -> None:
    assert [c["outcome"] for c in run_agent(calc_pack, tmp_path, "builtin:reference", "ref")] == ["pass"]
    assert [c["outcome"] for c in run_agent(calc_pack, tmp_path, "builtin:noop", "noop")] != ["pass"]


def test_fix_plus_a_regression_test_in_the_touched_test_file_passes(calc_pack: Pack, tmp_path: Path) -> None:
    """SWE-bench-style agents add a test beside their fix: the test file is reset at grading,
    so that edit neither fails the attempt nor counts."""
    agent = python_agent(f"""\
        open("src/calc/__init__.py", "w").write({FIXED!r})
        with open("tests/test_calc.py", "a") as f:
            f.write("\\n\\ndef test_added_by_the_agent():\\n    assert add(1, 1) == 2\\n")
        import subprocess, sys
        # the agent runs the repository's tests in its environment, on its own workspace
        sys.exit(subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]).returncode)
    """)
    cards = run_agent(calc_pack, tmp_path, agent, "fixplus")
    assert [c["outcome"] for c in cards] == ["pass"]
    (graded,) = graded_events(tmp_path / "fixplus")
    assert graded["forbidden"] == [] and graded["task_pass"] is True


def test_rewriting_the_test_file_instead_of_fixing_is_discarded_at_grading(calc_pack: Pack, tmp_path: Path) -> None:
    """A reward-hacking agent replaces the test file with tests that pass on the buggy code,
    under the failing test's name: the hidden version is graded, so the attempt fails."""
    agent = python_agent("""\
        open("tests/test_calc.py", "w").write(
            "def test_add_zero():\\n    pass\\n\\n\\ndef test_add_two_numbers_gives_their_sum():\\n    pass\\n")
    """)
    cards = run_agent(calc_pack, tmp_path, agent, "rewrite")
    assert [c["outcome"] for c in cards] == ["fail"]
    (graded,) = graded_events(tmp_path / "rewrite")
    assert graded["patch_applies_clean"] is True and graded["tests_green"] is False


def test_environment_is_read_only_and_the_repository_link_is_the_workspace(calc_pack: Pack, tmp_path: Path) -> None:
    """The agent cannot change the environment its grading runs in, and the code Python
    imports as the package is its own workspace's."""
    agent = python_agent(f"""\
        import os, sys, calc
        assert os.path.realpath(calc.__file__) == os.path.realpath("src/calc/__init__.py"), calc.__file__
        try:
            open(os.path.join(sys.prefix, "planted.pth"), "w").write("import os\\n")
        except OSError as e:
            print("env write refused:", e.errno)
        else:
            sys.exit("the environment was writable")
        open("src/calc/__init__.py", "w").write({FIXED!r})
    """)
    cards = run_agent(calc_pack, tmp_path, agent, "readonly")
    assert [c["outcome"] for c in cards] == ["pass"]
    for built in environments.require(calc_pack).values():
        assert not list(built.root.rglob("planted.pth"))


def test_code_under_test_imported_through_the_repository_link_is_still_code_under_test(
        calc_pack: Pack, tmp_path: Path) -> None:
    """Through the environment the package is importable as /sealbench/repo/src/..., a path
    outside the grading copy: whichever name it is imported by, the guard sees it as code under
    test. A fix that also registers an exit hook (a known forging means) is flagged, and its
    pass not counted."""
    forger = FIXED + "\nimport atexit\natexit.register(lambda: None)\n"
    agent = python_agent(f"""\
        open("src/calc/__init__.py", "w").write({forger!r})
    """)
    cards = run_agent(calc_pack, tmp_path, agent, "forger")
    assert [c["outcome"] for c in cards] == ["fail"]
    (graded,) = graded_events(tmp_path / "forger")
    assert "exit_hook" in graded["forging_flags"], graded
    assert any("src/calc/__init__.py" in d for d in graded["forging_detail"]), graded["forging_detail"]


# Found by a hostile review: ways to pass with no fix at all. Each payload ends by making
# pytest run no test body (Function.runtest replaced), which the guard must see.
NO_TEST_RUNS = """
import gc, _pytest.python
for _o in gc.get_objects():
    if type(_o).__name__ == "_Watch":
        _o.snapshot = {}
_pytest.python.Function.runtest = lambda self: None
"""


def assert_forgery_fails(pack: Pack, tmp_path: Path, name: str, agent: str) -> dict[str, Any]:
    cards = run_agent(pack, tmp_path, agent, name)
    (graded,) = graded_events(tmp_path / name)
    assert [c["outcome"] for c in cards] == ["fail"], graded
    assert graded["task_pass"] is False
    return graded


def test_exploit_workspace_module_imported_while_pytest_itself_is_imported(guard_pack: Pack, tmp_path: Path) -> None:
    """copy.py looks for Jython's org.python.core when pytest is imported: a workspace src/org
    answered it, before the guard watched, when the environment put src/ on sys.path at the
    interpreter's start. Now only pytest adds it, once the guard watches."""
    planted = textwrap.dedent("""\
        import sys, importlib.machinery
        class _F:
            @classmethod
            def find_spec(cls, name, path=None, target=None):
                if name != "_pytest.python":
                    return None
                sys.meta_path.remove(cls)
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                real = spec.loader.exec_module
                def exec_module(module):
                    real(module)
                    module.Function.runtest = lambda self: None
                spec.loader.exec_module = exec_module
                return spec
        sys.meta_path.insert(0, _F)
        raise ImportError("no jython here")
    """)
    agent = python_agent(f"""\
        import os
        os.makedirs("src/org", exist_ok=True)
        open("src/org/__init__.py", "w").write({planted!r})
    """)
    assert_forgery_fails(guard_pack, tmp_path, "org", agent)


@pytest.mark.parametrize(("name", "globals_"), [("<frozen calc>", "{}"), ("<string>", "{'__file__': _os.__file__}")])
def test_exploit_code_compiled_under_a_library_name_is_code_under_test(guard_pack: Pack, tmp_path: Path, name: str,
                                                                        globals_: str) -> None:
    """Code under test compiled under a frozen module's kind of name, or run in globals naming
    a library file, was taken for the library's and could clear the guard's snapshot."""
    payload = f"\nimport os as _os\nexec(compile({NO_TEST_RUNS!r}, {name!r}, 'exec'), {globals_})\n"
    agent = python_agent(f"""\
        open("src/calc/__init__.py", "a").write({payload!r})
    """)
    graded = assert_forgery_fails(guard_pack, tmp_path, "compiled", agent)
    assert graded.get("forging_flags"), graded


@pytest.mark.parametrize("how", ["link", "subprocess"])
def test_exploit_pack_module_rewritten_at_run_time_is_no_longer_the_packs(guard_pack: Pack, tmp_path: Path,
                                                                           how: str) -> None:
    """A module of the pack (exempt from the guard's checks) rewritten by code under test,
    through a link the watch saw only by its own name, or by a process the watch does not
    run in, then imported: it is code under test now."""
    write = ("os.symlink('_util.py', link)\n    open(link, 'w').write(BODY)\n    os.remove(link)" if how == "link" else
             "import subprocess, sys\n    subprocess.run([sys.executable, '-c', "
             "'import sys; open(sys.argv[1], \"w\").write(sys.argv[2])', os.path.join(here, '_util.py'), BODY])")
    payload = (f"\n\nBODY = {NO_TEST_RUNS!r}\n"
               "def _swap():\n"
               "    import os, importlib\n"
               "    here = os.path.dirname(__file__)\n"
               "    link = os.path.join(here, 'zz_link')\n"
               f"    {write}\n"
               "    importlib.import_module('calc._util')\n"
               "_swap()\n")
    agent = python_agent(f"""\
        open("src/calc/__init__.py", "a").write({payload!r})
    """)
    graded = assert_forgery_fails(guard_pack, tmp_path, f"owned-{how}", agent)
    assert graded.get("forging_flags"), graded


def test_changed_environment_is_refused_at_run(calc_pack: Pack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One package changed in a built environment: run refuses before any line, naming it."""
    cache = tmp_path / "envs"
    monkeypatch.setenv("SEALBENCH_ENV_CACHE", str(cache))
    ((_spec, built, cached, _),) = environments.build_all(calc_pack, say=lambda _line: None)
    assert not cached
    subprocess.run([environments.uv_binary(), "pip", "install", "-q", "--python", str(built.root / "bin" / "python"),
                    "iniconfig==2.0.0"], check=True, capture_output=True)
    contract = tmp_path / "c.json"
    make_contract(calc_pack.root, contract, run_id=f"changed-{os.getpid()}")
    with pytest.raises(EnvironmentRefused, match="changed since it was built"):
        execute(contract, tmp_path / "run", RunOptions(progress=False))
    assert not (tmp_path / "run" / "journal.jsonl").exists()


def test_resume_refuses_an_environment_rebuilt_since_the_run_started(calc_pack: Pack, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Built, run, then rebuilt with other files (its record made to agree): the fresh build
    passes its own check, but a resume of the run refuses it, naming the journal's pin."""
    monkeypatch.setenv("SEALBENCH_ENV_CACHE", str(tmp_path / "envs"))
    ((_spec, built, _cached, _),) = environments.build_all(calc_pack, say=lambda _line: None)
    contract = tmp_path / "c.json"
    make_contract(calc_pack.root, contract, run_id=f"pinned-{os.getpid()}")
    execute(contract, tmp_path / "run", RunOptions(progress=False))
    subprocess.run([environments.uv_binary(), "pip", "install", "-q", "--python", str(built.root / "bin" / "python"),
                    "iniconfig==2.0.0"], check=True, capture_output=True)
    record = json.loads((built.root / environments.BUILT_FILE).read_text())
    record["tree_sha256"], _size = environments.tree_sha256(built.root)
    (built.root / environments.BUILT_FILE).write_text(json.dumps(record))
    assert environments.require(calc_pack)  # a consistent build of its own
    with pytest.raises(EnvironmentRefused, match="not the one this run started with"):
        execute(contract, tmp_path / "run", RunOptions(progress=False, resume=True))


def test_missing_environment_is_refused_with_the_command_that_builds_it(calc_pack: Pack, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEALBENCH_ENV_CACHE", str(tmp_path / "empty"))
    with pytest.raises(EnvironmentRefused, match=r"is not built .*sealbench env build"):
        validate_pack(calc_pack.root, repeat=1, progress=False)


def test_pack_digest_changes_with_the_environment_spec(calc_repo: tuple[Path, Path], tmp_path: Path) -> None:
    repo, data = calc_repo
    plain = import_pack("swebench", data, tmp_path / "a", repos=[("example/calc", repo)])
    override = tmp_path / "envs.json"
    override.write_text(json.dumps({"example/calc": {"pins": ["iniconfig==2.0.0"]}}))
    pinned = import_pack("swebench", data, tmp_path / "b", repos=[("example/calc", repo)], env_spec=override)
    assert plain.sealed_digest != pinned.sealed_digest
    spec = pinned.tasks["example__calc-1"].record.environment
    assert spec is not None and spec.requirements[-1] == "iniconfig==2.0.0" and "--env-spec" in spec.source
    # a pin replaces the derived line of its package; without hashes, it drops the others'
    assert [r for r in spec.requirements if r.startswith("iniconfig")] == ["iniconfig==2.0.0"]
    assert not any("--hash=" in r for r in spec.requirements) and "hashes dropped" in spec.source
    override.write_text(json.dumps({"example/calc": {"pins": ["iniconfig @ file:///tmp/iniconfig"]}}))
    with pytest.raises(PackError, match="names 'iniconfig @ file:///tmp/iniconfig', which env build would refuse"):
        import_pack("swebench", data, tmp_path / "c", repos=[("example/calc", repo)], env_spec=override)


def test_validation_says_when_the_environment_cannot_run_the_tests(calc_repo: tuple[Path, Path], tmp_path: Path,
                                                                     env_cache: Path) -> None:
    """An environment whose import roots miss the package: the reference fails, and validation
    says the tests could not start, with the end of the oracle's output, not only "fails"."""
    repo, data = calc_repo
    override = tmp_path / "envs.json"
    override.write_text(json.dumps({"example/calc": {"import_roots": ["lib"]}}))
    pack = import_pack("swebench", data, tmp_path / "p", repos=[("example/calc", repo)], env_spec=override)
    environments.build_all(pack, say=lambda _line: None)
    (evidence,) = validate_pack(pack.root, repeat=1, progress=False).tasks.values()
    assert not evidence.valid and evidence.why is not None
    assert "could not be imported or collected" in evidence.why and "No module named 'calc'" in evidence.why


def test_a_python_this_machine_lacks_is_said_plainly(tmp_path: Path) -> None:
    spec = EnvironmentSpec(name="old project", python="3.99", requirements=[], source="test", import_roots=["."])
    with pytest.raises(EnvironmentRefused, match=r"asks for Python 3\.99, which this machine does not have"):
        environments.build(spec, cache=tmp_path)
    assert not environments.env_dir(spec, tmp_path).exists()


def test_repo_dir_finds_each_repository_clone_by_name(calc_repo: tuple[Path, Path], tmp_path: Path) -> None:
    repo, data = calc_repo
    clones = tmp_path / "clones"
    clones.mkdir()
    shutil.copytree(repo, clones / "example__calc")
    pack = import_pack("swebench", data, tmp_path / "p", repo=clones)
    assert list(pack.tasks) == ["example__calc-1"]
    with pytest.raises(PackError, match="no clone of example/calc under"):
        import_pack("swebench", data, tmp_path / "q", repo=tmp_path)


# --- repositories that pin an older pytest ------------------------------------------------------


def make_instance(root: Path, slug: str, base: dict[str, str], fix: dict[str, str], tests: dict[str, str],
                  fail_to_pass: list[str], pass_to_pass: list[str]) -> tuple[Path, Path]:
    """A git repository of ``base`` and one SWE-bench-style instance: ``fix`` is its patch and
    ``tests`` its test patch; (the clone, the instances file)."""
    repo = root / slug.replace("/", "__")
    for rel, text in base.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    commit = git(repo, "rev-parse", "HEAD").strip()
    diffs = []
    for changes in (fix, tests):
        for rel, text in changes.items():
            (repo / rel).write_text(text)
        diffs.append(git(repo, "diff", "--", *changes))
        git(repo, "stash", "-q")  # the next diff is against the base, as SWE-bench's are
        git(repo, "stash", "drop", "-q")
    instance = {"repo": slug, "instance_id": slug.replace("/", "__") + "-1", "base_commit": commit,
                "patch": diffs[0], "test_patch": diffs[1], "problem_statement": f"{slug} has a bug.",
                "FAIL_TO_PASS": json.dumps(fail_to_pass), "PASS_TO_PASS": json.dumps(pass_to_pass),
                "version": "", "environment_setup_commit": commit}
    data = root / f"{slug.replace('/', '__')}.jsonl"
    data.write_text(json.dumps(instance) + "\n")
    return repo, data


UNITS_TESTS = textwrap.dedent("""\
    import pytest

    from units import to_meters


    @pytest.mark.parametrize(("value", "meters"), [(1, 1), (3, 3)])
    def test_meters_stay_meters(value, meters):
        assert to_meters(value, "m") == meters


    class TestCentimeters:
        def test_a_hundred_centimeters_is_a_meter(self):
            assert to_meters(100, "cm") == 1
""")
SLUG_TESTS = textwrap.dedent("""\
    import unittest

    from slugs import slugify


    class SlugTest(unittest.TestCase):
        def test_spaces_become_dashes(self):
            self.assertEqual(slugify("a b"), "a-b")
""")
# Two small repositories whose test requirements pin an older pytest: a src/ layout on the
# pytest 7.0.1 and pluggy 1.0.0 the first repositories pinned, and a flat one on the oldest.
OLD_PYTEST_REPOS: dict[str, dict[str, Any]] = {
    "units-pytest-7.0.1": {
        "slug": "example/units", "pins": ["pytest==7.0.1", "pluggy==1.0.0"],
        "base": {"src/units/__init__.py": "FACTORS = {'m': 1, 'cm': 0.01, 'km': 100}\n\n\n"
                                          "def to_meters(value, unit):\n    return value * FACTORS[unit]\n",
                 "tests/test_units.py": UNITS_TESTS,
                 "requirements/tests.txt": "pytest==7.0.1\npluggy==1.0.0\n"},
        "fix": {"src/units/__init__.py": "FACTORS = {'m': 1, 'cm': 0.01, 'km': 1000}\n\n\n"
                                         "def to_meters(value, unit):\n    return value * FACTORS[unit]\n"},
        "tests": {"tests/test_units.py": UNITS_TESTS + "\n\ndef test_a_kilometer_is_a_thousand_meters():\n"
                                                       "    assert to_meters(2, 'km') == 2000\n"},
        "fail_to_pass": ["tests/test_units.py::test_a_kilometer_is_a_thousand_meters"],
        "pass_to_pass": ["tests/test_units.py::test_meters_stay_meters[1-1]",
                         "tests/test_units.py::test_meters_stay_meters[3-3]",
                         "tests/test_units.py::TestCentimeters::test_a_hundred_centimeters_is_a_meter"],
    },
    "slugs-pytest-6.2.4": {
        "slug": "example/slugs", "pins": list(pytest_matrix.MATRIX[pytest_matrix.OLDEST]),
        "base": {"slugs/__init__.py": "def slugify(text):\n    return '-'.join(text.split())\n",
                 "tests/test_slugs.py": SLUG_TESTS,
                 "requirements-test.txt": "\n".join(pytest_matrix.MATRIX[pytest_matrix.OLDEST]) + "\n"},
        "fix": {"slugs/__init__.py": "def slugify(text):\n    return '-'.join(text.lower().split())\n"},
        "tests": {"tests/test_slugs.py": SLUG_TESTS + "\n    def test_capitals_become_small(self):\n"
                                                      "        self.assertEqual(slugify('A B'), 'a-b')\n"},
        "fail_to_pass": ["tests/test_slugs.py::SlugTest::test_capitals_become_small"],
        "pass_to_pass": ["tests/test_slugs.py::SlugTest::test_spaces_become_dashes"],
    },
}


@pytest.fixture(scope="module", params=list(OLD_PYTEST_REPOS))
def old_pytest_pack(request: pytest.FixtureRequest, env_cache: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Pack]:
    """An instance of a repository that pins an older pytest: (its pins, its pack, imported, its
    environment built, validated: the verdict is a test of its own)."""
    repo = OLD_PYTEST_REPOS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    clone, data = make_instance(root, repo["slug"], repo["base"], repo["fix"], repo["tests"],
                                repo["fail_to_pass"], repo["pass_to_pass"])
    pack = import_pack("swebench", data, root / "pack", repos=[(repo["slug"], clone)])
    environments.build_all(pack, say=lambda _line: None)
    validate_pack(pack.root, repeat=1, progress=False)
    return repo["pins"], load_pack(pack.root)


def test_an_older_pinned_pytest_is_the_environments_and_the_task_validates(
        old_pytest_pack: tuple[list[str], Pack]) -> None:
    pins, pack = old_pytest_pack
    (task,) = pack.tasks.values()
    spec = task.record.environment
    assert spec is not None, task
    pinned = {r.split(" --hash=", 1)[0] for r in spec.requirements}  # resolved at import, with hashes
    assert all(p in pinned for p in pins), spec
    (built,) = environments.require(pack).values()
    assert all(p in built.packages for p in pins), built.packages
    validity = pack.manifest.validity
    assert validity is not None and all(ev.valid for ev in validity.tasks.values()), validity
    # The empty change was graded, and failed: the hidden tests discriminate on this pytest.
    assert all(ev.reference_passes == [True] and ev.empty_change_passes == [False] for ev in validity.tasks.values())


def test_an_older_pinned_pytest_grades_reference_empty_change_and_gold_patch(
        old_pytest_pack: tuple[list[str], Pack], tmp_path: Path) -> None:
    _pins, pack = old_pytest_pack
    assert [c["outcome"] for c in run_agent(pack, tmp_path, "builtin:reference", "ref")] == ["pass"], \
        not_passed(tmp_path / "ref")
    assert [c["outcome"] for c in run_agent(pack, tmp_path, "builtin:noop", "noop")] == ["abstain"]  # nothing changed
    (task,) = pack.tasks.values()
    gold = tmp_path / "gold-patch"
    shutil.copytree(task.solution, gold)
    agent = python_agent("""\
        import shutil, sys
        shutil.copytree(sys.argv[1], ".", dirs_exist_ok=True)
    """, str(gold))
    cards = run_agent(pack, tmp_path, agent, "gold", mounts=[str(gold)])
    assert [c["outcome"] for c in cards] == ["pass"], not_passed(tmp_path / "gold")
    (graded,) = graded_events(tmp_path / "gold")
    assert not graded.get("forging_flags") and graded["junit"]["missing_required"] == [], graded
def test_a_file_the_test_patch_deletes_is_deleted_in_the_grading_copy(tmp_path: Path, env_cache: Path) -> None:
    """The fix removes legacy_add, and the test patch deletes the conftest.py that imported it:
    grading removes that file too, so the reference passes. An agent's edit of a file the test
    patch deletes (its legacy test) is discarded as an edit of the test patch's files is."""
    repo = tmp_path / "calc"
    (repo / "src" / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "requirements").mkdir()
    (repo / "requirements" / "tests.txt").write_text("pytest\n")
    (repo / "src" / "calc" / "__init__.py").write_text(BUGGY + "\n\ndef legacy_add(a, b):\n    return a - b\n")
    (repo / "tests" / "test_calc.py").write_text(TESTS_BEFORE)
    (repo / "tests" / "conftest.py").write_text("from calc import legacy_add  # noqa: F401\n")
    (repo / "tests" / "test_legacy.py").write_text("from calc import legacy_add\n\n\ndef test_legacy():\n"
                                                   "    assert legacy_add(2, 3) == -1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "calc" / "__init__.py").write_text(FIXED)
    patch = git(repo, "diff", "--", "src")
    (repo / "tests" / "test_calc.py").write_text(TESTS_AFTER)
    (repo / "tests" / "conftest.py").unlink()
    (repo / "tests" / "test_legacy.py").unlink()
    test_patch = git(repo, "diff", "--", "tests")
    git(repo, "checkout", "-q", "--", ".")
    data = tmp_path / "instances.jsonl"
    data.write_text(json.dumps({
        "repo": "example/calc", "instance_id": "example__calc-2", "base_commit": base, "patch": patch,
        "test_patch": test_patch, "problem_statement": "add() subtracts; drop legacy_add.",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add_two_numbers_gives_their_sum"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_add_zero"])}) + "\n")
    pack = import_pack("swebench", data, tmp_path / "pack", repos=[("example/calc", repo)])
    task = pack.tasks["example__calc-2"]
    assert task.record.deleted_test_files == ["tests/conftest.py", "tests/test_legacy.py"]
    assert (task.pack_workspace / "tests" / "conftest.py").is_file()  # the agent sees the tree before the patch
    environments.build_all(pack, say=lambda _line: None)
    (evidence,) = validate_pack(pack.root, repeat=1, progress=False).tasks.values()
    assert evidence.valid, evidence
    pack = load_pack(pack.root)
    agent = python_agent(f"""\
        open("src/calc/__init__.py", "w").write({FIXED!r})
        open("tests/test_legacy.py", "a").write("\\n\\ndef test_more():\\n    assert False\\n")
    """)
    assert [c["outcome"] for c in run_agent(pack, tmp_path, agent, "keeps")] == ["pass"], not_passed(tmp_path / "keeps")
    (graded,) = graded_events(tmp_path / "keeps")
    assert graded["forbidden"] == []


PYPROJECT = textwrap.dedent("""\
    [build-system]
    requires = ["flit_core>=3.4,<4"]
    build-backend = "flit_core.buildapi"

    [project]
    name = "calcpkg"
    version = "1.2.3"
    description = "A calculator that knows its version."

    [project.scripts]
    calc = "calcpkg:main"
""")


FIXED_CALCPKG = ('def version():\n    from importlib.metadata import version\n    return version("calcpkg")\n\n\n'
                 'def main():\n    print(version())\n')


def test_exploit_repository_installed_by_the_agent_s_own_build_backend_only_in_the_sandbox(
        tmp_path: Path, env_cache: Path) -> None:
    """The fix reads the package's version through importlib.metadata, and the tests look up its
    entry point: both need the repository installed. Its flit backend (pinned in the spec at
    import) installs each grading copy in the sandbox, and the reference grades green."""
    repo = tmp_path / "calcpkg"
    (repo / "src" / "calcpkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "requirements").mkdir()
    (repo / "requirements" / "tests.txt").write_text("pytest\n")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "src" / "calcpkg" / "__init__.py").write_text('def version():\n    return "unknown"\n\n\ndef main():\n'
                                                          '    print(version())\n')
    (repo / "tests" / "test_calc.py").write_text("import calcpkg\n\n\ndef test_main_exists():\n"
                                                 "    assert callable(calcpkg.main)\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "calcpkg" / "__init__.py").write_text(FIXED_CALCPKG)
    patch = git(repo, "diff", "--", "src")
    (repo / "tests" / "test_calc.py").write_text(textwrap.dedent("""\
        from importlib.metadata import entry_points

        import calcpkg


        def test_main_exists():
            assert callable(calcpkg.main)


        def test_version_is_the_installed_one():
            assert calcpkg.version() == "1.2.3"
            (script,) = entry_points(group="console_scripts", name="calc")
            assert script.load() is calcpkg.main
    """))
    test_patch = git(repo, "diff", "--", "tests")
    git(repo, "checkout", "-q", "--", ".")
    data = tmp_path / "instances.jsonl"
    data.write_text(json.dumps({
        "repo": "example/calcpkg", "instance_id": "example__calcpkg-1", "base_commit": base, "patch": patch,
        "test_patch": test_patch, "problem_statement": "version() does not say the installed version.",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_version_is_the_installed_one"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_main_exists"])}) + "\n")
    pack = import_pack("swebench", data, tmp_path / "pack", repos=[("example/calcpkg", repo)])
    spec = pack.tasks["example__calcpkg-1"].record.environment
    assert spec is not None and spec.install == "editable" and not environments.spec_problems(spec)
    assert any(r.startswith("flit-core==") for r in spec.requirements), spec.requirements
    environments.build_all(pack, say=lambda _line: None)
    (evidence,) = validate_pack(pack.root, repeat=1, progress=False).tasks.values()
    assert evidence.valid, evidence
    pack = load_pack(pack.root)
    assert [c["outcome"] for c in run_agent(pack, tmp_path, "builtin:reference", "ref")] == ["pass"], \
        not_passed(tmp_path / "ref")
    (graded,) = graded_events(tmp_path / "ref")
    assert graded["repo_install"]["exit_code"] == 0 and not graded.get("forging_flags"), graded

    # A hostile agent makes the build backend its own code, which would write on the host and
    # fake the metadata: it runs only in the sandbox, and the host file never appears.
    marker = tmp_path / "host-marker"
    backend = textwrap.dedent(f"""\
        import os
        print("backend ran as pid", os.getpid())
        try:
            open({str(marker)!r}, "w").write("ran on the host")
        except OSError as e:
            print("host write refused:", e)
        def prepare_metadata_for_build_editable(directory, settings=None):
            info = os.path.join(directory, "calcpkg-1.2.3.dist-info")
            os.makedirs(info)
            open(os.path.join(info, "METADATA"), "w").write("Metadata-Version: 2.1\\nName: calcpkg\\nVersion: 1.2.3\\n")
            return "calcpkg-1.2.3.dist-info"
    """)
    agent = python_agent(f"""\
        open("sb_backend.py", "w").write({backend!r})
        text = open("pyproject.toml").read().replace('build-backend = "flit_core.buildapi"',
                                                     'build-backend = "sb_backend"\\nbackend-path = ["."]')
        open("pyproject.toml", "w").write(text)
        open("src/calcpkg/__init__.py", "w").write({FIXED_CALCPKG!r})
    """)
    cards = run_agent(pack, tmp_path, agent, "backend")
    (graded,) = graded_events(tmp_path / "backend")
    assert not marker.exists()
    said = (tmp_path / "backend" / "blobs" / graded["repo_install"]["stdout"].removeprefix("sha256:")).read_text()
    assert "backend ran as pid" in said, said  # it ran, and not on this host: the marker is not here
    assert graded["repo_install"]["exit_code"] == 0, graded
    # its own metadata names no entry point: the candidate's install is what the tests see
    assert [c["outcome"] for c in cards] == ["fail"]


# --- the real click instances ------------------------------------------------------------------


# click's own race, not the harness's: on an exception in the generator, echo_via_pager sends
# the pager SIGTERM and then flushes what it had written, and `less` sometimes writes it out
# before the signal lands. Outside any sandbox, on click's base commit, this test and its twin
# (test5, the same case with a generator function) failed in 8 of 40 runs with both cores busy
# and in none of 40 on an idle machine; two test workers load the machine that much. `pack validate --repeat N` is how a user finds such a task (it says
# "flaky"); here the instance is graded without it, so that a failure means the harness's.
CLICK_RACY = {"pallets__click-4d3db84b": ["tests/test_utils.py::test_echo_via_pager[test6- less]"]}


def without_racy_tests(source: Path, dest: Path) -> Path:
    """The click instances, each without the tests of CLICK_RACY in its PASS_TO_PASS."""
    lines = []
    for line in source.read_text().splitlines():
        instance = json.loads(line)
        racy = CLICK_RACY.get(instance["instance_id"], [])
        tests = json.loads(instance["PASS_TO_PASS"])
        assert all(t in tests for t in racy), f"{instance['instance_id']}: {racy} not in PASS_TO_PASS"
        instance["PASS_TO_PASS"] = json.dumps([t for t in tests if t not in racy])
        lines.append(json.dumps(instance))
    dest.write_text("\n".join(lines) + "\n")
    return dest


@pytest.fixture(scope="module")
def click_pack(env_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    root = tmp_path_factory.mktemp("click")
    clone = root / "click"
    subprocess.run(["git", "clone", "-q", str(CLICK / "click.bundle"), str(clone)], check=True, capture_output=True)
    instances = without_racy_tests(CLICK / "click-instances.jsonl", root / "click-instances.jsonl")
    pack = import_pack("swebench", instances, root / "pack", repos=[("pallets/click", clone)])
    assert len(pack.tasks) == 3  # none dropped by the visible-test control
    built = environments.build_all(pack, say=lambda _line: None)
    assert sum(len(tids) for _d, (_s, tids) in environments.specs_of(pack).items()) == 3
    assert len(built) == 2  # two instances share one uv.lock, so one environment
    assert all(cached for _s, _b, cached, _t in environments.build_all(pack, say=lambda _line: None))
    validity = validate_pack(pack.root, repeat=1, jobs=2, progress=False)
    invalid = {tid: f"{ev.reason}: {ev.why}" for tid, ev in validity.tasks.items() if not ev.valid}
    assert not invalid and set(validity.tasks) == set(pack.tasks), invalid
    return load_pack(pack.root)


@needs_click
def test_click_reference_passes_three_and_noop_none(click_pack: Pack, tmp_path: Path) -> None:
    cards = run_agent(click_pack, tmp_path, "builtin:reference", "ref")
    assert [c["outcome"] for c in cards] == ["pass"] * 3, not_passed(tmp_path / "ref")
    assert not any(c["outcome"] == "pass" for c in run_agent(click_pack, tmp_path, "builtin:noop", "noop"))


@needs_click
def test_click_gold_patch_plus_an_extra_test_passes(click_pack: Pack, tmp_path: Path) -> None:
    gold = tmp_path / "gold"
    for tid, task in click_pack.tasks.items():
        shutil.copytree(task.solution, gold / tid)
        touched = sorted(p.relative_to(task.hidden).as_posix() for p in task.hidden.rglob("test_*.py"))
        (gold / f"{tid}.test").write_text(touched[0])
    agent = python_agent("""\
        import os, shutil, sys
        root, tid = sys.argv[1], os.environ["SEALBENCH_TASK_ID"]
        shutil.copytree(os.path.join(root, tid), ".", dirs_exist_ok=True)
        with open(open(os.path.join(root, tid + ".test")).read(), "a") as f:
            f.write("\\n\\ndef test_regression_added_by_the_agent():\\n    assert True\\n")
    """, str(gold))
    cards = run_agent(click_pack, tmp_path, agent, "goldplus", mounts=[str(gold)])
    assert [c["outcome"] for c in cards] == ["pass"] * 3, not_passed(tmp_path / "goldplus")


def test_the_installed_metadata_joins_the_pack_s_pythonpath() -> None:
    from sealbench.grading import with_pythonpath

    site = "/grading/install-1/site"
    assert with_pythonpath(["sealbench-pytest", "-q", "-o", "pythonpath=src", "tests/t.py"], site) == [
        "sealbench-pytest", "-q", "-o", f"pythonpath=src {site}", "tests/t.py"]
    assert with_pythonpath(["sealbench-pytest", "-opythonpath=a b", "-o", "pythonpath=src", "t.py"], site)[3] == \
        f"pythonpath=src {site}"
    assert with_pythonpath(["sealbench-pytest", "--override-ini=pythonpath=lib", "t.py"], site)[1] == \
        f"--override-ini=pythonpath=lib {site}"
    assert with_pythonpath(["sealbench-pytest", "-q", "t.py"], site) == [
        "sealbench-pytest", "-o", f"pythonpath={site}", "-q", "t.py"]
