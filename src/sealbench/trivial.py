"""Trivial candidates: what an oracle that checks nothing would pass.

An oracle proves little when the reference passes and the unchanged workspace fails if the
workspace's stub merely raises: a test that never asserts anything fails the stub too. So
``pack validate`` also grades candidates that do no work, and a task any of them passes is
invalid ("passes a trivial solution").

The stub is every function of a workspace file the reference solution replaces whose body,
docstrings and imports aside, is a single ``raise NotImplementedError``. For function-level
tasks the candidates are the stub's functions returning None, returning their first argument,
and returning a constant of each type the reference returned when graded (``0``, ``''``,
``[]``, ``False`` and ``True``...). For repository tasks only the first: the unchanged
workspace with the stub's raise removed. A task without a stub has no trivial candidate.

Pure: texts in, texts out.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import NamedTuple

CONSTANTS: dict[str, tuple[str, ...]] = {
    "bool": ("False", "True"),
    "bytes": ("b''",),
    "complex": ("0j",),
    "dict": ("{}",),
    "float": ("0.0",),
    "frozenset": ("frozenset()",),
    "int": ("0",),
    "list": ("[]",),
    "set": ("set()",),
    "str": ("''",),
    "tuple": ("()",),
}
"""The constant(s) tried for each type name the reference returned."""


class Stub(NamedTuple):
    """One stub function: where its raise is, and what it may return."""

    path: str
    name: str
    first_arg: str | None
    start: tuple[int, int]
    """(line, byte column) where the raise statement starts, 1-based line."""
    end: tuple[int, int]
    """(line, byte column) where it ends."""


class Trivial(NamedTuple):
    """A trivial candidate: its name (what it returns) and the files it changes."""

    name: str
    files: dict[str, str]


def _raises_not_implemented(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.Raise) or stmt.exc is None:
        return False
    exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _docstring_or_import(stmt: ast.stmt) -> bool:
    # HumanEval/115's prompt imports math before its docstring.
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return True
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _first_arg(node: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> str | None:
    names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    if in_class and names and names[0] in ("self", "cls"):
        names = names[1:]
    return names[0] if names else None


def find_stubs(path: str, text: str) -> list[Stub]:
    """The stub functions of one Python file (none when it does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    stubs: list[Stub] = []

    def visit(node: ast.AST, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                body = [stmt for stmt in child.body if not _docstring_or_import(stmt)]
                if len(body) == 1 and _raises_not_implemented(body[0]) and body[0].end_lineno is not None \
                        and body[0].end_col_offset is not None:
                    raise_ = body[0]
                    stubs.append(Stub(path, child.name, _first_arg(child, in_class),
                                      (raise_.lineno, raise_.col_offset),
                                      (raise_.end_lineno, raise_.end_col_offset)))  # type: ignore[arg-type]
                visit(child, False)
            elif isinstance(child, ast.ClassDef):
                visit(child, True)
            else:
                visit(child, in_class)

    visit(tree, False)
    return stubs


def _replace(text: str, stubs: Sequence[Stub], returns: Sequence[str]) -> str:
    """``text`` with each stub's raise replaced by ``return <expr>`` (ast columns are UTF-8 bytes)."""
    lines = text.encode("utf-8").split(b"\n")
    for stub, expr in sorted(zip(stubs, returns, strict=True), key=lambda p: p[0].start, reverse=True):
        (l0, c0), (l1, c1) = stub.start, stub.end
        head, tail = lines[l0 - 1][:c0], lines[l1 - 1][c1:]
        lines[l0 - 1 : l1] = [head + f"return {expr}".encode() + tail]
    return b"\n".join(lines).decode("utf-8")


def _variant(name: str, texts: Mapping[str, str], stubs: Sequence[Stub], exprs: Sequence[str]) -> Trivial:
    files = {}
    for path in sorted({s.path for s in stubs}):
        mine = [(s, e) for s, e in zip(stubs, exprs, strict=True) if s.path == path]
        files[path] = _replace(texts[path], [s for s, _ in mine], [e for _, e in mine])
    return Trivial(name, files)


def trivial_candidates(texts: Mapping[str, str], *, function_level: bool,
                       returned: Mapping[str, Sequence[str]] | None = None) -> list[Trivial]:
    """The trivial candidates of a task, from the texts of the workspace files its reference
    replaces (relative path -> text) and, for function-level tasks, the type names each
    function returned when the reference was graded."""
    stubs = [s for path in sorted(texts) for s in find_stubs(path, texts[path])]
    if not stubs:
        return []
    if not function_level:
        return [_variant("the stub's raise removed (returns None)", texts, stubs, ["None"] * len(stubs))]
    out = [_variant("returns None", texts, stubs, ["None"] * len(stubs))]
    if any(s.first_arg for s in stubs):
        out.append(_variant("returns its first argument", texts, stubs, [s.first_arg or "None" for s in stubs]))
    choices = [[c for t in sorted((returned or {}).get(s.name, ())) for c in CONSTANTS.get(t, ())] for s in stubs]
    for k in range(max(len(c) for c in choices)):
        exprs = [c[min(k, len(c) - 1)] if c else "None" for c in choices]
        named = sorted({f"{e} from {s.name}" for s, e, c in zip(stubs, exprs, choices, strict=True) if c})
        label = f"returns {exprs[0]}" if len(stubs) == 1 else "returns " + ", ".join(named)
        out.append(_variant(label, texts, stubs, exprs))
    return out
