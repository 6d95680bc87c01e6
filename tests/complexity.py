"""The complexity gate of ``make lint``: no function in src/ decides more than it can be read.

Each function's cyclomatic complexity (radon's count: one, plus one per branch, loop, boolean
operator, ``except`` and comprehension condition; a nested function counts on its own) must be
at most ``max`` of ``[tool.sealbench.complexity]`` in pyproject.toml. The functions over it
today are listed in ``[tool.sealbench.complexity.allow]``, each with its complexity then, and
the list only shrinks:

* a function over ``max`` that is not listed fails (split it: decide in pure helpers);
* a listed function grown past its number fails;
* a listed function at ``max`` or under, or gone, fails until it is taken off the list.

Run ``python tests/complexity.py`` (exit 1, one line per problem) or call :func:`problems`.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parent.parent


def _functions(blocks: Iterable[Function | Class], prefix: str = "", top: bool = True,
               ) -> Iterator[tuple[str, int, int]]:
    """(qualified name, complexity, line) of each function; radon lists a top-level class's
    methods again at the top level (as ``Class.method``), a nested class's only in it."""
    for block in blocks:
        if isinstance(block, Class):
            if not top:
                yield from _functions(block.methods, f"{prefix}{block.name}.", top=False)
            yield from _functions(block.inner_classes, f"{prefix}{block.name}.", top=False)
            continue
        name = block.fullname if top else f"{prefix}{block.name}"
        yield name, block.complexity, block.lineno
        yield from _functions(block.closures, f"{name}.", top=False)


def measure(source: Path, package: Path) -> dict[str, tuple[int, str]]:
    """``module:qualified.name`` -> (complexity, ``file:line``) for every function under ``source``;
    ``module`` is dotted from ``package`` (``sandbox.process`` for sandbox/process.py)."""
    found: dict[str, tuple[int, str]] = {}
    for path in sorted(source.rglob("*.py")):
        module = ".".join(path.relative_to(package).with_suffix("").parts)
        for name, complexity, line in _functions(cc_visit(path.read_text(encoding="utf-8"))):
            key = f"{module}:{name}"
            if complexity > found.get(key, (0, ""))[0]:  # one name defined twice: the worse counts
                found[key] = (complexity, f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}")
    return found


def judge(measured: Mapping[str, tuple[int, str]], most: int, allowed: Mapping[str, int]) -> list[str]:
    """Every way ``measured`` breaks the gate, one line each (see the module docstring)."""
    out = []
    for key, (complexity, where) in sorted(measured.items()):
        if complexity > most and key not in allowed:
            out.append(f"{where}: {key} has complexity {complexity}, over {most}: split it (decide in pure "
                       "helpers), do not list it")
        elif key in allowed and complexity > allowed[key]:
            out.append(f"{where}: {key} has complexity {complexity}, more than the {allowed[key]} it is "
                       "listed with: it may only come down")
        elif key in allowed and complexity <= most:
            out.append(f"{where}: {key} is down to {complexity}: take it off [tool.sealbench.complexity.allow]")
    out += [f"{key} is listed in [tool.sealbench.complexity.allow] but no longer exists: take it off"
            for key in sorted(set(allowed) - set(measured))]
    return out


def problems(root: Path = ROOT) -> list[str]:
    settings = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["sealbench"]["complexity"]
    package = root / "src" / "sealbench"
    return judge(measure(package, package), settings["max"], settings.get("allow", {}))


def main() -> int:
    found = problems()
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
