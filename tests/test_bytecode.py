"""Bytecode the harness did not compile never runs as the pack's own code.

Each exploit is a hostile agent in the real sandbox, on the sample pack's t_11 (the harness's
pytest): it leaves the stub as it is and writes bytecode compiled from the stub plus code
that walks up to pytest's ``Config`` and registers a plugin forcing every test to pass. Python
would load that bytecode under the stub's file name, which the guard takes for the pack's.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLE, make_contract, needs_bwrap
from sealbench.contract import lock_contract
from sealbench.files import model_json, write_atomic
from sealbench.journal import read_chain
from sealbench.pack import load_pack, seal_pack
from sealbench.runner import RunOptions, execute
from test_function_oracle import HE0_RIGHT, HUMANEVAL, needs_humaneval
from test_pytest_oracle import HIDDEN, RIGHT, TASK, datetime_now, make_pack

pytestmark = needs_bwrap

# Finds pytest's Config by walking up the frames and registers a plugin forcing every test to
# pass, from a thread (no frame of a changed file on its stack) under a library's module name.
FORGE = textwrap.dedent("""
    def _sealbench_forge():
        import sys as _sys, threading as _threading
        frame, manager = _sys._getframe(), None
        while frame is not None and manager is None:
            for value in list(frame.f_locals.values()):
                found = getattr(getattr(value, "config", value), "pluginmanager", None)
                if found is not None and hasattr(found, "register"):
                    manager = found
                    break
            frame = frame.f_back
        if manager is None:
            return
        import pytest as _pytest

        class ForcePass:
            @_pytest.hookimpl(wrapper=True)
            def pytest_runtest_makereport(self, item, call):
                report = yield
                report.outcome = "passed"
                report.longrepr = None
                return report

        ForcePass.__module__ = "_pytest.terminal"
        thread = _threading.Thread(target=manager.register, args=(ForcePass(), "sealbench-force-pass"))
        thread.start()
        thread.join()

    _sealbench_forge()
""")

# The agent: compiles ``spec["code"]`` to bytecode inside its sandbox, with this interpreter,
# and writes it where ``spec["mode"]`` says. Everything else it writes as text.
AGENT = textwrap.dedent("""
    import importlib._bootstrap_external as bx, importlib.util, json, os, pathlib, sys
    spec = json.loads(pathlib.Path(sys.argv[1]).read_text())
    for rel, text in spec.get("files", {}).items():
        pathlib.Path(rel).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(rel).write_text(text)
    source = pathlib.Path(spec["source"]) if spec.get("source") else None
    stub = source.read_bytes() if source is not None else b""
    code = compile(stub.decode() + spec["code"], spec.get("name") or os.path.abspath(spec["source"]), "exec")
    mode = spec["mode"]
    if mode == "none":
        sys.exit(0)
    if mode.startswith("runtime"):
        # window.py itself, changed, makes the bytecode at run time from bytes made here, its
        # code named after pytest's own file.
        import _pytest.terminal
        code = compile(spec["code"], _pytest.terminal.__file__, "exec")
        data = bytes(bx._code_to_timestamp_pyc(code, 0, 0))
        if mode == "runtime-sourceless":
            tail = ("pathlib.Path(__file__).with_name('_winimpl.pyc').write_bytes(%r)\\n"
                    "import importlib; importlib.invalidate_caches(); import _winimpl\\n" % data)
        elif mode == "runtime-marshal-load":
            tail = "import io; exec(marshal.load(io.BytesIO(%r)), {'__name__': 'winimpl'})\\n" % data[16:]
        else:
            tail = "exec(marshal.loads(%r), {'__name__': 'winimpl'})\\n" % data[16:]
        source.write_text(stub.decode() + "\\nimport marshal, pathlib\\n" + tail)
        sys.exit(0)
    if mode == "unchecked-hash":
        data = bx._code_to_hash_pyc(code, importlib.util.source_hash(stub), checked=False)
    elif mode == "timestamp":
        st = source.stat()
        data = bx._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size)
    else:
        data = bx._code_to_timestamp_pyc(code, 0, 0)
    if mode == "sourceless":
        target = pathlib.Path(spec["target"])
    else:
        target = source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(bytes(data))
    print("wrote", target)
""")


def bytecode_agent(tmp_path: Path, spec: dict[str, Any], name: str) -> tuple[str, list[str]]:
    home = tmp_path / f"agent-{name}"
    home.mkdir()
    (home / "spec.json").write_text(json.dumps(spec))
    (home / "agent.py").write_text(AGENT)
    return f"python {home}/agent.py {home}/spec.json", [str(home)]


def run_bytecode(tmp_path: Path, spec: dict[str, Any], name: str, *, pack: Path | None = None,
                 task: str = TASK, **contract: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The bytecode agent's run of ``task`` (one attempt unless ``contract`` says otherwise),
    under a contract that forbids only the hidden tests; (its first graded payload, its scorecard)."""
    pack = pack or make_pack(tmp_path, f"pack-{name}")
    command, mounts = bytecode_agent(tmp_path, spec, name)
    contract_file = tmp_path / f"{name}.contract.json"
    draft = make_contract(pack, contract_file, task_ids=(task,), command=command, mounts=mounts,
                          run_id=None, **{"max_attempts": 1, **contract})
    draft = draft.model_copy(update={"forbidden_paths": load_pack(pack).tasks[task].hidden_paths()})
    write_atomic(contract_file, model_json(lock_contract(draft, name, datetime_now(), load_pack(pack))))
    run_dir = tmp_path / name
    execute(contract_file, run_dir, RunOptions(progress=False))
    graded = [e["payload"] for e in read_chain(run_dir / "journal.jsonl").events if e["kind"] == "graded"]
    card = json.loads((run_dir / "scorecards.jsonl").read_text().splitlines()[0])
    return (graded[0] if graded else {}), card


WINDOW = {"source": "window.py", "code": FORGE}
WINDOW_STUB = (SAMPLE / "tasks" / TASK / "workspace" / "window.py").read_text()


@pytest.mark.parametrize("mode", ["unchecked-hash", "timestamp"])
def test_exploit_pyc_beside_the_unchanged_stub_is_forbidden_in_the_patch(tmp_path: Path, mode: str) -> None:
    graded, card = run_bytecode(tmp_path, {**WINDOW, "mode": mode}, mode)
    assert card["outcome"] == "fail", graded
    assert graded["forbidden"] == ["__pycache__/window.cpython-311.pyc"], graded


def package_pack(tmp_path: Path, name: str) -> Path:
    """The sample pack with t_11's module moved into a package, ``winlib.window``."""
    pack = make_pack(tmp_path, name)
    task = pack / "tasks" / TASK
    for folder in ("workspace", "solution"):
        (task / folder / "winlib").mkdir()
        (task / folder / "winlib" / "__init__.py").write_text("")
        (task / folder / "window.py").rename(task / folder / "winlib" / "window.py")
    hidden = task / "hidden" / HIDDEN
    hidden.write_text(hidden.read_text().replace("from window import", "from winlib.window import"))
    seal_pack(pack, update=True)
    return pack


def test_exploit_pyc_in_a_packages_pycache_is_forbidden_in_the_patch(tmp_path: Path) -> None:
    pack = package_pack(tmp_path, "pack-package")
    spec = {"source": "winlib/window.py", "code": FORGE, "mode": "unchecked-hash"}
    graded, card = run_bytecode(tmp_path, spec, "package", pack=pack)
    assert card["outcome"] == "fail", graded
    assert graded["forbidden"] == ["winlib/__pycache__/window.cpython-311.pyc"], graded


def test_exploit_sourceless_pyc_in_the_patch_is_forbidden(tmp_path: Path) -> None:
    import _pytest.terminal

    spec = {"source": "window.py", "code": FORGE, "mode": "sourceless", "target": "_winimpl.pyc",
            "name": _pytest.terminal.__file__,
            "files": {"window.py": WINDOW_STUB + "\nimport _winimpl  # noqa\n"}}
    graded, card = run_bytecode(tmp_path, spec, "sourceless")
    assert card["outcome"] == "fail", graded
    assert graded["forbidden"] == ["_winimpl.pyc"], graded


@pytest.mark.parametrize("mode", ["runtime-sourceless", "runtime-marshal", "runtime-marshal-load"])
def test_exploit_bytecode_made_at_run_time_is_code_under_test(tmp_path: Path, mode: str) -> None:
    graded, card = run_bytecode(tmp_path, {**WINDOW, "mode": mode}, mode)
    assert card["outcome"] == "fail", graded
    assert graded["forbidden"] == [] and "disguised_code" in graded["forging_flags"], graded


VISIBLE = textwrap.dedent("""\
    from window import last_n


    def test_visible_last_two():
        assert last_n([7, 8, 9], 2) == [8, 9]


    def test_visible_none():
        assert last_n([7], 0) == []
""")


def test_exploit_pyc_left_out_of_the_patch_does_not_reach_the_visible_tests(tmp_path: Path) -> None:
    """A pyc the agent keeps out of its patch (its .gitignore) is still in its workspace, where
    the visible tests run between attempts: they run the stub, not the pyc."""
    pack = make_pack(tmp_path, "pack-visible", visible_test_cmd=["python", "-m", "pytest", "-q", "-p",
                                                                 "no:cacheprovider", "test_visible.py"])
    (pack / "tasks" / TASK / "workspace" / "test_visible.py").write_text(VISIBLE)
    seal_pack(pack, update=True)
    spec = {**WINDOW, "code": RIGHT, "mode": "unchecked-hash", "files": {".gitignore": "__pycache__/\n"}}
    graded, card = run_bytecode(tmp_path, spec, "visible", pack=pack, max_attempts=2, feedback="visible_tests")
    assert card["outcome"] == "fail" and graded["forbidden"] == [], graded
    run_dir = tmp_path / "visible"
    shown = [e["payload"]["visible_tests"] for e in read_chain(run_dir / "journal.jsonl").events
             if e["kind"] == "feedback"]
    out = (run_dir / "blobs" / shown[0]["stdout"].removeprefix("sha256:")).read_text()
    assert shown[0]["exit_code"] == 1 and "1 failed, 1 passed" in out, out


def test_the_packs_own_bytecode_stays_out_of_the_grading_copy(tmp_path: Path) -> None:
    import importlib._bootstrap_external as bx
    import importlib.util

    check = textwrap.dedent("""

        def test_no_bytecode_in_the_grading_copy():
            import pathlib
            found = [str(p) for p in pathlib.Path(".").rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc"]
            assert found == []
    """)
    pack = make_pack(tmp_path, "pack-own-bytecode", hidden_extra=check)
    task = pack / "tasks" / TASK
    stub = (task / "workspace" / "window.py").read_bytes()
    data = bytes(bx._code_to_hash_pyc(compile(stub, "window.py", "exec"),  # type: ignore[attr-defined]
                                      importlib.util.source_hash(stub), checked=False))
    for where in (task / "workspace" / "__pycache__", task / "hidden" / "__pycache__"):
        where.mkdir()
        (where / f"window.{sys.implementation.cache_tag}.pyc").write_bytes(data)
    (task / "workspace" / "stale.pyc").write_bytes(data)
    seal_pack(pack, update=True)
    graded, card = run_bytecode(tmp_path, {"mode": "none", "files": {"window.py": RIGHT}}, "own", pack=pack)
    assert card["outcome"] == "pass" and graded["junit"]["ran"] == 4, graded


@needs_humaneval
def test_exploit_pyc_beside_the_unchanged_stub_of_a_function_level_task_is_forbidden(tmp_path: Path) -> None:
    from sealbench.importers import import_pack

    assert HUMANEVAL is not None
    pack = import_pack("humaneval", HUMANEVAL, tmp_path / "he", limit=1).root
    spec = {"source": "solution.py", "code": HE0_RIGHT, "mode": "unchecked-hash"}
    graded, card = run_bytecode(tmp_path, spec, "function-level", pack=pack, task="HumanEval_0")
    assert card["outcome"] == "fail", graded
    assert graded["forbidden"] == ["__pycache__/solution.cpython-311.pyc"], graded


def _through_a_library(how: str) -> str:
    """window.py's stub plus code that has a library frame compile FORGE under pytest's own file
    name (or build its code objects under it), then runs it."""
    import _pytest.terminal

    lib = _pytest.terminal.__file__
    if how == "singledispatch":
        make = f"import functools\n_c = functools.singledispatch(compile)({FORGE!r}, {lib!r}, 'exec')\n"
    elif how == "thread-pool":
        make = ("import concurrent.futures as cf\nwith cf.ThreadPoolExecutor(1) as _ex:\n"
                f"    _c = _ex.submit(compile, {FORGE!r}, {lib!r}, 'exec').result()\n")
    else:  # code.replace, through a library frame too, of every code object
        make = ("import functools, types\n_r = functools.singledispatch(types.CodeType.replace)\n"
                "def _rename(c):\n"
                "    consts = tuple(_rename(k) if isinstance(k, types.CodeType) else k for k in c.co_consts)\n"
                f"    return _r(c, co_filename={lib!r}, co_consts=consts)\n"
                f"_c = _rename(compile({FORGE!r}, 'winimpl', 'exec'))\n")
    return WINDOW_STUB + "\n" + make + "exec(_c, {'__name__': 'winimpl'})\n"


@pytest.mark.parametrize("how", ["singledispatch", "thread-pool", "code-replace"])
def test_exploit_code_a_library_frame_compiles_under_a_library_name_is_disguised(tmp_path: Path, how: str) -> None:
    """A library frame that calls compile for the code under test (functools.singledispatch, a
    thread pool) is no proof the code is the library's: only the file's own bytes are."""
    graded, card = run_bytecode(tmp_path, {"mode": "none", "files": {"window.py": _through_a_library(how)}}, how)
    assert card["outcome"] == "fail", graded
    assert graded["forbidden"] == [] and "disguised_code" in graded["forging_flags"], graded


def test_asyncio_imported_by_the_code_under_test_is_not_disguised_code(tmp_path: Path) -> None:
    """asyncio marks its own generator functions as coroutines at import (``types.coroutine``,
    a ``code.replace`` under asyncio's file name): the library's own code, never a forge. A
    real repository's code under test imports it (click's pager tests did)."""
    right = RIGHT + "import asyncio\n"
    graded, card = run_bytecode(tmp_path, {"mode": "none", "files": {"window.py": right}}, "asyncio")
    assert card["outcome"] == "pass" and not graded.get("forging_flags"), graded


def test_exploit_types_coroutine_over_code_renamed_as_a_library_stays_disguised(tmp_path: Path) -> None:
    """``types.coroutine`` copies a code object that already carries its name: code under test
    that renamed its generator after a library file is flagged when it renames it, and the
    coroutine's copy does not launder it."""
    import _pytest.terminal

    tail = ("import types\ndef _gen():\n    yield 1\n"
            f"_gen.__code__ = _gen.__code__.replace(co_filename={_pytest.terminal.__file__!r})\n"
            "types.coroutine(_gen)\n")
    graded, card = run_bytecode(tmp_path, {"mode": "none", "files": {"window.py": RIGHT + tail}}, "coroutine")
    assert card["outcome"] == "fail" and "disguised_code" in graded["forging_flags"], graded


def _trusted_by_name(how: str) -> str:
    """window.py's stub plus code that runs bytecode the agent made (FORGE, compiled under
    pytest's own file name) through a call that names a library's file as its origin."""
    import _pytest.terminal

    data = __import__("marshal").dumps(compile(FORGE, _pytest.terminal.__file__, "exec"))
    if how == "compile-bytecode":
        load = ("import importlib._bootstrap_external as _bx, os as _os\n"
                f"_c = _bx._compile_bytecode({data!r}, bytecode_path=_os.__file__)\n")
    elif how == "zip-archive":
        # An unchecked hash-based pyc's header, from an "archive" with no source in it.
        header = __import__("importlib.util").util.MAGIC_NUMBER + (1).to_bytes(4, "little") + bytes(8)
        load = ("import os as _os, types as _ty, zipimport as _z\n"
                f"_c = _z._unmarshal_code(_ty.SimpleNamespace(archive=_os.__file__, _files={{}}), 'x.pyc', 'x.pyc', "
                f"'x', {header + data!r})\n")
    else:  # marshal.load of a file object that only says it is a library's
        load = ("import io as _io, marshal as _m, os as _os\n"
                "class _F(_io.BytesIO):\n    name = _os.__file__\n"
                f"_c = _m.load(_F({data!r}))\n")
    return WINDOW_STUB + "\n" + load + "exec(_c, {'__name__': 'winimpl'})\n"


@pytest.mark.parametrize("how", ["compile-bytecode", "zip-archive", "marshal-load-named"])
def test_exploit_bytecode_that_only_names_a_library_file_is_code_under_test(tmp_path: Path, how: str) -> None:
    """importlib's and zipimport's locals and a file object's name are the caller's to choose:
    bytecode is a library's only when its bytes are those of the library's file."""
    graded, card = run_bytecode(tmp_path, {"mode": "none", "files": {"window.py": _trusted_by_name(how)}}, how)
    assert card["outcome"] == "fail", graded
    assert graded["forbidden"] == [] and "disguised_code" in graded["forging_flags"], graded


def _renamed(how: str) -> str:
    """window.py's stub plus code that runs FORGE under a name of the interpreter or pytest
    without compiling it under that name itself."""
    forge = FORGE + "\ndel _sealbench_forge\n"
    if how == "fix-co-filename":  # renames code objects without an audit event
        make = f"import _imp\n_c = compile({FORGE!r}, 'winimpl', 'exec')\n_imp._fix_co_filename(_c, _t.__file__)\n"
    elif how == "fresh-imp":  # the same from an _imp imported again, with functions of its own
        make = ("import sys\n_old = sys.modules.pop('_imp')\nimport _imp as _fresh\nsys.modules['_imp'] = _old\n"
                f"_c = compile({FORGE!r}, 'winimpl', 'exec')\n_fresh._fix_co_filename(_c, _t.__file__)\n")
    elif how == "frozen-name":
        make = f"import functools\n_c = functools.singledispatch(compile)({FORGE!r}, '<frozen zipimport>', 'exec')\n"
    else:  # "<string>" run in pytest's own module globals, compiled by a library frame
        return (WINDOW_STUB + "\nimport functools, _pytest.terminal as _t\n"
                f"functools.singledispatch(exec)({forge!r}, _t.__dict__)\n")
    return WINDOW_STUB + "\nimport _pytest.terminal as _t\n" + make + "exec(_c, {'__name__': 'winimpl'})\n"


@pytest.mark.parametrize("how", ["fix-co-filename", "fresh-imp", "frozen-name", "string-in-library-globals"])
def test_exploit_code_renamed_or_compiled_for_the_code_under_test_is_its_own(tmp_path: Path, how: str) -> None:
    """_imp._fix_co_filename, a frozen module's name or a library's globals do not make code the
    code under test wrote the interpreter's or pytest's."""
    graded, card = run_bytecode(tmp_path, {"mode": "none", "files": {"window.py": _renamed(how)}}, how)
    assert card["outcome"] == "fail", graded
    assert graded["forbidden"] == [] and graded["forging_flags"], graded
