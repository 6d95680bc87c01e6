"""`sealbench env build` on hostile packs: nothing of a pack's choosing runs on the host.

Each pack here is made by the test (a copy of the sample pack whose task names an
environment, sealed by its hostile author), built through the CLI with the real uv. The
packages a pack names come from a folder of this test (``UV_FIND_LINKS``, with the index
turned off), so that the wheels and source distributions are the test's own hostile ones.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import SAMPLE
from sealbench import environments
from sealbench.cli import main
from sealbench.formats import EnvironmentSpec
from sealbench.importers import import_pack
from sealbench.pack import load_pack, seal_pack

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
TASK = "csv-split-001"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The environments' cache, and a package index of the test's own: only ``links/``."""
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("SEALBENCH_ENV_CACHE", str(tmp_path / "envs"))
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(links))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    return tmp_path / "envs"


def hostile_pack(tmp_path: Path, requirements: list[str], python: str = PYTHON) -> Path:
    """The sample pack with one task naming an environment of these lines, sealed."""
    root = tmp_path / "pack"
    shutil.copytree(SAMPLE, root)
    record_file = root / "tasks" / TASK / "task.json"
    record = json.loads(record_file.read_text())
    record["environment"] = {"name": "hostile", "python": python, "requirements": requirements,
                             "source": "its author", "import_roots": ["."]}
    record_file.write_text(json.dumps(record))
    seal_pack(root)
    return root


def in_tree_backend(project: Path, marker: Path) -> None:
    """A project whose build backend is its own backend.py, which writes ``marker`` on import."""
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = []
        build-backend = "backend"
        backend-path = ["."]

        [project]
        name = "evil"
        version = "1.0"
    """))
    (project / "backend.py").write_text(f"open({str(marker)!r}, 'w').write('ran on the host')\n")


def wheel(links: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A wheel of ``files`` (and its metadata) in ``links``."""
    dist = f"{name}-{version}.dist-info"
    files = {**files, f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    path = links / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for rel, text in files.items():
            z.writestr(rel, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{rel},sha256={digest},{len(text)}")
        z.writestr(f"{dist}/RECORD", "\n".join([*record, f"{dist}/RECORD,,"]) + "\n")
    return path


def env_build(pack: Path) -> int:
    return main(["env", "build", str(pack)])


def test_exploit_env_requirement_names_a_local_project_with_an_in_tree_backend(
        tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``evil @ file:///...`` names a project whose build backend is its own code: uv would
    import it on the host, as root, to build it. env build refuses the line before anything
    runs: no environment is made, the backend never runs."""
    marker = tmp_path / "marker"
    in_tree_backend(tmp_path / "evil", marker)
    pack = hostile_pack(tmp_path, ["pytest==8.3.3", f"evil @ {(tmp_path / 'evil').as_uri()}"])
    assert env_build(pack) == 3
    err = capsys.readouterr().err
    assert "requirement 2 'evil @ file://" in err and "names a URL or a path" in err, err
    assert "nothing was installed or run" in err
    assert not marker.exists()
    assert not cache.exists() or not any(cache.iterdir())


@pytest.mark.parametrize(("line", "why"), [
    ("-e /tmp/evil", "an option or an editable install"),
    ("evil @ https://example.invalid/evil-1.0-py3-none-any.whl", "a URL or a path"),
    ("https://example.invalid/evil-1.0.tar.gz", "not a requirement"),
    ("/tmp/evil", "not a requirement"),
    ("--index-url https://example.invalid/simple", "an option"),
    ("--extra-index-url https://example.invalid/simple", "an option"),
    ("-r /tmp/more-requirements.txt", "an option"),
    ("--trusted-host example.invalid", "an option"),
    ("pytest==8.3.3 --index-url https://example.invalid/simple", "an option or a comment"),
    ("pytest==8.3.3\n-e /tmp/evil", "control character"),
    ("pytest==8.3.3 ; python_version == '--find-links=/tmp/evil'", "read as an option"),
    ("pytest", "does not pin one version"),
    ("pytest>=8", "does not pin one version"),
    ("pytest==8.*", "does not pin one version"),
    ("pytest[testing]==8.3.3", "extras"),
])
def test_exploit_env_requirement_line_that_is_not_a_pinned_package_of_the_index(
        tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str], line: str, why: str) -> None:
    pack = hostile_pack(tmp_path, [line])
    assert env_build(pack) == 3
    err = capsys.readouterr().err
    assert "requirement 1 " in err and why in err, err
    assert not cache.exists() or not any(cache.iterdir())


def test_exploit_env_python_names_an_executable_of_the_pack(tmp_path: Path, cache: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """uv takes a path for ``--python`` and runs it to ask what it is: a spec's python that
    names the pack's own script would run it on the host. Only version numbers are taken."""
    marker = tmp_path / "marker"
    script = tmp_path / "python3"
    script.write_text(f"#!/bin/sh\necho ran > {marker}\nexec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    pack = hostile_pack(tmp_path, [], python=str(script))
    assert env_build(pack) == 3
    assert "is not a version number" in capsys.readouterr().err
    assert not marker.exists()


def test_exploit_env_package_with_only_a_source_distribution_is_not_built(
        tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pinned package of the index that has no wheel: building it runs its backend on the
    host. env build installs wheels only, and names the package."""
    marker = tmp_path / "marker"
    in_tree_backend(tmp_path / "src" / "evil-1.0", marker)
    (tmp_path / "src" / "evil-1.0" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
    with tarfile.open(tmp_path / "links" / "evil-1.0.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "src" / "evil-1.0", arcname="evil-1.0")
    pack = hostile_pack(tmp_path, ["evil==1.0"])
    assert env_build(pack) == 3
    err = capsys.readouterr().err
    assert "evil has no wheel for this machine" in err and "wheels only" in err, err
    assert not marker.exists()


def test_exploit_env_wheel_with_a_pth_file_runs_nothing_on_the_host(tmp_path: Path, cache: Path) -> None:
    """A pinned wheel may hold a .pth file, which any interpreter of the environment runs as it
    starts (uv's bytecode compile and ``pip freeze`` started one). The environment is built, and
    the file never runs on the host: the interpreter is started there only without site."""
    marker = tmp_path / "marker"
    wheel(tmp_path / "links", "evil", "1.0", {"evil.pth": f"import os; open({str(marker)!r}, 'w')\n",
                                                "evil/__init__.py": "VALUE = 1\n"})
    pack = hostile_pack(tmp_path, ["evil==1.0"])
    assert env_build(pack) == 0
    assert not marker.exists()
    spec = load_pack(pack).tasks[TASK].record.environment
    assert spec is not None
    built = environments.load(spec)
    assert built is not None and built.packages == ("evil==1.0",)
    assert list(built.root.glob("lib/python*/site-packages/evil/__pycache__/__init__*.pyc"))


def test_pinned_requirement_rebuilds_the_line_from_its_parse() -> None:
    line = "colorama==0.4.6 ; sys_platform == 'win32' --hash=sha256:" + "a" * 64
    assert environments.pinned_requirement(line) == 'colorama==0.4.6; sys_platform == "win32" --hash=sha256:' + "a" * 64
    spec = EnvironmentSpec(name="n", python=PYTHON, source="s", import_roots=["."],
                           requirements=["pytest==8.3.3 --hash=sha256:" + "b" * 64, "pluggy==1.5.0"])
    assert any("all or none must" in p for p in environments.spec_problems(spec))


def git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def test_exploit_repository_requirements_file_names_a_local_project(tmp_path: Path) -> None:
    """A repository's own tests requirements name a project with an in-tree backend (by URL
    and as ``-e``): import leaves those lines out, says so in the spec's source, resolves the
    rest to pinned wheels of the index, and never runs the backend."""
    marker = tmp_path / "marker"
    in_tree_backend(tmp_path / "evil", marker)
    repo = tmp_path / "calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_calc.py").write_text("from calc import add\n")
    (repo / "requirements").mkdir()
    evil = (tmp_path / "evil").as_uri()
    (repo / "requirements" / "tests.txt").write_text(f"pytest\nevil @ {evil}\n-e {tmp_path / 'evil'}\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", ".")
    (repo / "tests" / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    test_patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", ".")
    data = tmp_path / "instances.jsonl"
    data.write_text(json.dumps({
        "repo": "example/calc", "instance_id": "example__calc-1", "base_commit": base, "patch": patch,
        "test_patch": test_patch, "problem_statement": "add() subtracts.",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]), "PASS_TO_PASS": "[]"}) + "\n")
    pack = import_pack("swebench", data, tmp_path / "pack", repos=[("example/calc", repo)])
    spec = pack.tasks["example__calc-1"].record.environment
    assert spec is not None
    assert not environments.spec_problems(spec), spec
    assert any(r.startswith("pytest==") for r in spec.requirements)
    assert not any("evil" in r for r in spec.requirements)
    assert "left out" in spec.source and "evil @ file://" in spec.source, spec.source
    assert not marker.exists()
