"""The pytest versions the harness's guard is tested on: environments built with uv, kept in the
project's ``.cache/envs`` across test runs (keyed by the spec, so by the pins).

The oldest whose default run works on Python 3.11 is 6.2.4 (:data:`OLDEST`): before it,
pytest's assertion rewriting builds import nodes without the line numbers Python 3.10 made
required, and every test module fails to compile ("required field "lineno" missing from
alias"). 5.4 runs under ``--assert=plain``, which its packs then declare (:data:`PLAIN_ASSERTS`).
pluggy 0.13.1 is the newest pluggy pytest 5.4 and 6.2 accept, and has no new-style wrappers;
7.0.1 with pluggy 1.0.0 is the pair the first repositories pinned.
"""


from __future__ import annotations

import functools
import os
from importlib import metadata
from pathlib import Path
from typing import Final

from sealbench import environments
from sealbench.environments import BuiltEnv
from sealbench.formats import EnvironmentSpec
from sealbench.importers.swebench import resolve_requirements

CACHE: Final = Path(__file__).resolve().parents[1] / ".cache" / "envs"

MATRIX: Final[dict[str, tuple[str, ...]]] = {
    "5.4": ("pytest==5.4.3", "pluggy==0.13.1"),
    "6.2": ("pytest==6.2.4", "pluggy==0.13.1"),
    "7.0": ("pytest==7.0.1", "pluggy==1.0.0"),
    "7.4": ("pytest==7.4.4",),
    "8.0": ("pytest==8.0.2",),
    # The newest: the pytest sealbench itself is installed with.
    "newest": (f"pytest=={metadata.version('pytest')}",),
}
OLDEST, NEWEST = "6.2", "newest"
PLAIN_ASSERTS: Final = frozenset({"5.4"})
"""Versions whose assertion rewriting fails on Python 3.11: their packs add --assert=plain."""
ENDS: Final = (OLDEST, NEWEST)


@functools.cache
def spec(version: str) -> EnvironmentSpec:
    # env build installs exactly the lines it is given: the pins and all they need, resolved.
    lines = resolve_requirements(MATRIX[version], "3.11", "the pytest matrix", f"pytest {version}")
    return EnvironmentSpec(name=f"pytest matrix {version}", python="3.11", requirements=lines,
                           source="sealbench's tests: the pytest versions the guard runs on", import_roots=[])


def build(version: str) -> BuiltEnv:
    """The environment of ``version``, built once and then found in :data:`CACHE`."""
    built, _cached = environments.build(spec(version), cache=CACHE)
    return built


def use_cache() -> str | None:
    """Point sealbench at :data:`CACHE`; the old value, for :func:`restore`."""
    old = os.environ.get("SEALBENCH_ENV_CACHE")
    os.environ["SEALBENCH_ENV_CACHE"] = str(CACHE)
    return old


def restore(old: str | None) -> None:
    if old is None:
        os.environ.pop("SEALBENCH_ENV_CACHE", None)
    else:
        os.environ["SEALBENCH_ENV_CACHE"] = old
