"""Install the grading copy of a repository task as its users install it: run inside the sandbox.

The runner starts this file in the grading copy, before the oracle, as::

    python -P -s repo_install.py <out dir>

on the task environment's interpreter, with the environment bound read-only, no network, and
only the grading copy and ``<out dir>`` writable. It imports nothing of sealbench. It calls
the repository's own build backend, as ``[build-system]`` in its pyproject.toml declares it
(``setuptools.build_meta:__legacy__`` for a bare setup.py, as pip does), through the PEP 660
and PEP 517 hooks, for an editable install's metadata: ``prepare_metadata_for_build_editable``,
else ``build_editable`` (its wheel's ``.dist-info``), else the same two for a wheel. The
backend and what it builds from are the candidate's code: whatever they do happens here, in
the sandbox. What it leaves is ``<out dir>/site/NAME-VERSION.dist-info``, which the oracle's
pytest puts on ``sys.path`` with the import roots, once the guard watches: ``importlib.metadata``
then knows the repository (its version, its entry points), and its code is imported from the
grading copy, as an editable install does. No ``.pth`` file is installed: nothing of the
candidate's runs when an interpreter starts.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tomllib
import zipfile
from typing import Any

_LEGACY = "setuptools.build_meta:__legacy__"


def _backend() -> Any:
    try:
        with open("pyproject.toml", "rb") as f:
            system = tomllib.load(f).get("build-system") or {}
    except FileNotFoundError:
        system = {}
    name = str(system.get("build-backend") or _LEGACY)
    paths = [str(p) for p in system.get("backend-path") or []] if system.get("build-backend") else []
    if not os.path.exists("setup.py") and not system:
        raise SystemExit("no pyproject.toml [build-system] and no setup.py: nothing declares how to install this")
    for path in reversed(paths):
        sys.path.insert(0, os.path.abspath(path))
    module, _, obj = name.partition(":")
    backend: Any = importlib.import_module(module)
    for attr in obj.split(".") if obj else []:
        backend = getattr(backend, attr)
    return backend


def _dist_info_from_wheel(wheel: str, site: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.split("/", 1)[0].endswith(".dist-info")]
        for n in names:
            parts = n.split("/")
            if n.startswith("/") or ".." in parts or len(parts) != 2 or not parts[1]:
                continue
            z.extract(n, site)
    found = sorted(d for d in os.listdir(site) if d.endswith(".dist-info"))
    if not found:
        raise SystemExit(f"{os.path.basename(wheel)}: no .dist-info in the wheel the backend built")
    return found[0]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: repo_install.py OUT_DIR", file=sys.stderr)
        return 4
    out = os.path.abspath(argv[1])
    site, scratch = os.path.join(out, "site"), os.path.join(out, "scratch")
    os.makedirs(site)
    os.makedirs(scratch)
    backend = _backend()
    for hook, build in (("prepare_metadata_for_build_editable", "build_editable"),
                        ("prepare_metadata_for_build_wheel", "build_wheel")):
        if hasattr(backend, hook):
            dist_info = getattr(backend, hook)(scratch, {})
            shutil.move(os.path.join(scratch, dist_info), os.path.join(site, dist_info))
            break
        if hasattr(backend, build):
            wheel = getattr(backend, build)(scratch, {})
            dist_info = _dist_info_from_wheel(os.path.join(scratch, wheel), site)
            break
    else:
        raise SystemExit("the build backend has none of the PEP 517 and PEP 660 hooks")
    with open(os.path.join(site, dist_info, "INSTALLER"), "w", encoding="utf-8") as f:
        f.write("sealbench\n")
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"installed {dist_info}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
