"""Every refusal sealbench can print, read from its own source: the reference page of refusals.

The package is walked with :mod:`ast` (nothing is imported or run): each ``raise`` of a
:class:`~sealbench.errors.UsageError` or :class:`~sealbench.errors.Refusal` (or a subclass)
gives an entry with its message, error class, exit code and way out, and so does each
``print("sealbench: refused: ...")`` of the CLI that returns exit 3 on its own. An f-string
message is rendered with its expressions as ``{placeholders}``; a message held in a variable
is read from the assignments to it in the same function. A message built where it cannot be
read (by another function, in a loop) takes its text from :data:`DYNAMIC`, so that no
refusal goes unlisted: :func:`unlisted` names the ones that would.

The way out is the message's own when it names one (a backticked command, or a clause such
as "run ...", "add --agent-mount ..."), otherwise the ``way_out`` of its error class
(:mod:`sealbench.errors`).

``python -m sealbench.refusal_catalogue PAGE`` writes the page; ``--check`` exits 1 when the
page is not what the code says (``make refusals`` does the first).
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

PACKAGE: Final = Path(__file__).resolve().parent
ROOTS: Final = ("UsageError", "Refusal")
"""The error classes whose raises are refusals (with every subclass): the input is wrong, not
the harness (``HarnessError``) and not the bytes verified (``VerificationFailed``)."""
PRINTED: Final = "sealbench: refused: "
"""How the CLI starts a refusal it prints itself."""


class Site(NamedTuple):
    """Where a message is built that cannot be read from the raise: module, function, error class."""

    module: str
    function: str
    error: str


_NO_PYTEST: Final = ("the oracles run pytest ({oracle_cmd}), but pytest is not installed beside sealbench "
                     "({sys.executable}); install sealbench with its dependencies (pip install sealbench brings pytest)")

DYNAMIC: Final[dict[Site, str]] = {
    Site("sealbench.runner", "_plan", "RunRefusal"): _NO_PYTEST,
    Site("sealbench.validate", "validate_pack", "RunRefusal"): _NO_PYTEST,
    Site("sealbench.sandbox.opening", "open_bubblewrap", "RunRefusal"):
        "the refusal the first opening of bubblewrap in this process gave (sealbench.sandbox.opening, _open_bubblewrap), "
        "said again",
    Site("sealbench.ray_executor", "NodeRunner.begin", "RunRefusal"):
        "the refusal (or OSError) a Ray node's own check of its set-up gave, said again on the coordinator",
}
"""Messages assembled where the walk cannot read them, by where they are raised."""

_VERBS: Final = frozenset({
    "add", "bundle", "build", "check", "choose", "copy", "create", "delete", "drop", "edit", "fix", "give",
    "install", "list", "lock", "make", "mend", "move", "name", "pass", "point", "re-run", "rebuild", "remove",
    "rename", "restore", "resume", "rerun", "run", "seal", "set", "start", "try", "use", "validate", "verify",
    "wait", "write",
})
_COMMAND = re.compile(r"`sealbench [^`]+`")


@dataclass(frozen=True)
class ErrorClass:
    """One error class of the refusal kinds: its exit code and the way out it names."""

    name: str
    module: str
    exit_code: int
    way_out: str
    doc: str


@dataclass(frozen=True)
class Entry:
    """One refusal: what it says, who raises it, and how out."""

    module: str
    function: str
    error: str
    exit_code: int
    message: str
    readable: bool
    """False when the message is :data:`DYNAMIC`'s description, not the code's words."""
    own_way_out: str | None
    """The clause of the message that names the way out, when it names one."""

    @property
    def fix(self) -> str:
        return self.own_way_out or ""


# ----------------------------------------------------------------------------- reading the code


def _modules(root: Path) -> tuple[tuple[str, ast.Module], ...]:
    return _parsed(root)


@functools.cache
def _parsed(root: Path) -> tuple[tuple[str, ast.Module], ...]:
    """Each module of the package under ``root``, parsed once per process."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        if "examples" in rel.parts:
            continue
        parts = [p for p in rel.parts if p != "__init__"]
        out.append((".".join(["sealbench", *parts]), ast.parse(path.read_text(encoding="utf-8"), str(path))))
    return tuple(out)


def _string(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _class_attrs(node: ast.ClassDef) -> dict[str, ast.expr]:
    """The values a class body assigns to plain names (``exit_code = 3``, ``way_out: str = ...``)."""
    attrs: dict[str, ast.expr] = {}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            attrs[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
            attrs[stmt.target.id] = stmt.value
    return attrs


def _classes(root: Path) -> dict[str, tuple[str, list[str], dict[str, ast.expr], str]]:
    """Every class the package defines: its module, base names, assigned attributes, docstring."""
    found: dict[str, tuple[str, list[str], dict[str, ast.expr], str]] = {}
    for module, tree in _modules(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases]
                found[node.name] = (module, bases, _class_attrs(node), ast.get_docstring(node) or "")
    return found


@functools.cache
def error_classes(root: Path = PACKAGE) -> dict[str, ErrorClass]:
    """Every class of the refusal kinds defined in the package, by name."""
    found = _classes(root)

    def chain(name: str) -> list[str]:
        out = [name]
        while out[-1] in found and found[out[-1]][1] and found[out[-1]][1][0] in found:
            out.append(found[out[-1]][1][0])
        return out

    classes: dict[str, ErrorClass] = {}
    for name, (module, _, _, doc) in found.items():
        line = chain(name)
        if not any(root_name in line for root_name in ROOTS):
            continue
        code = next(c.value for c in (found[n][2].get("exit_code") for n in line)
                    if isinstance(c, ast.Constant) and isinstance(c.value, int))
        way = next(w for w in (_string(found[n][2].get("way_out")) for n in line) if w is not None)
        classes[name] = ErrorClass(name, module, code, way, doc.splitlines()[0] if doc else "")
    return classes


@dataclass
class _Scope:
    """What a message's names can be read from: the function's assignments, the module's own
    (constants) and its functions (a message built by a helper that returns it)."""

    names: dict[str, list[ast.expr]]
    module_names: dict[str, list[ast.expr]]
    functions: dict[str, ast.FunctionDef]
    depth: int = 0

    def inner(self, function: ast.FunctionDef) -> _Scope:
        return _Scope(_assignments(function), self.module_names, self.functions, self.depth + 1)

    def without(self, name: str) -> _Scope:
        return _Scope({k: v for k, v in self.names.items() if k != name},
                      {k: v for k, v in self.module_names.items() if k != name}, self.functions, self.depth)


def _render(node: ast.expr, scope: _Scope, *, part: bool = False) -> list[str] | None:
    """The message's words (one per way it can read), placeholders for its expressions; None
    when they cannot be read here. ``part``: ``node`` is part of a longer message, where an
    expression that is no text of its own (a join, a call) reads as a placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [_render_fstring(node)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _render(node.left, scope, part=True), _render(node.right, scope, part=True)
        return None if left is None or right is None else [a + b for a in left for b in right]
    if isinstance(node, ast.IfExp):
        body, orelse = _render(node.body, scope, part=part), _render(node.orelse, scope, part=part)
        return None if body is None or orelse is None else body + orelse
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return _render_all([(value, scope) for value in node.values], part=True, skip_none=False)
    read = _render_name(node, scope, part) if isinstance(node, ast.Name) else \
        _render_call(node, scope) if isinstance(node, ast.Call) else []
    if read is None or read:  # unreadable, or read
        return read
    if part:
        return ["{" + _placeholder(node) + "}"]
    return None


def _render_fstring(node: ast.JoinedStr) -> str:
    """An f-string's words, a placeholder for each expression; an optional tail left out."""
    text = ""
    for piece in node.values:
        if isinstance(piece, ast.Constant):
            text += str(piece.value)
        elif isinstance(piece, ast.FormattedValue):
            value = piece.value
            if isinstance(value, ast.IfExp) and "" in (_string(value.body), _string(value.orelse)):
                continue  # an optional tail (", ..." when there are more): the message reads without it
            text += "{" + _placeholder(value) + "}"
    return text


def _render_all(values: list[tuple[ast.expr, _Scope]], *, part: bool, skip_none: bool) -> list[str] | None:
    """Every way each of ``values`` reads, in order; None when one cannot be read. ``skip_none``:
    a literal ``None`` (a helper's "no message") is no way of reading."""
    out: list[str] = []
    for value, scope in values:
        if skip_none and isinstance(value, ast.Constant) and value.value is None:
            continue
        rendered = _render(value, scope, part=part)
        if rendered is None:
            return None
        out += rendered
    return out


def _render_name(node: ast.Name, scope: _Scope, part: bool) -> list[str] | None:
    """A name's words: whatever the function (or else the module) assigns it, every time; []
    when nothing here assigns it, None when an assignment cannot be read."""
    values = scope.names.get(node.id) or scope.module_names.get(node.id)
    if not values:
        return []
    inner = scope.without(node.id)
    return _render_all([(value, inner) for value in values], part=part, skip_none=False)


def _render_call(node: ast.Call, scope: _Scope) -> list[str] | None:
    """A call of a helper of the same module: the words it can return (three calls deep at most);
    [] when it is no such call or returns no words, None when a return cannot be read."""
    if not (isinstance(node.func, ast.Name) and node.func.id in scope.functions and scope.depth < 3):
        return []
    function = scope.functions[node.func.id]
    inner = scope.inner(function)
    returned = [n.value for n in _own_nodes(function) if isinstance(n, ast.Return) and n.value is not None]
    return _render_all([(value, inner) for value in returned], part=True, skip_none=True)


_PLAIN: Final = frozenset({"len", "str", "repr", "sorted", "list", "set", "tuple", "int", "float", "min", "max",
                            "type", "sum", "join", "strip", "rstrip", "lstrip", "splitlines", "decode"})


def _placeholder(node: ast.expr) -> str:
    """A short name for what an expression fills in: its first name or attribute (``path`` for
    ``str(path)``, ``task.task_id`` for ``repr(task.task_id)``), else ``...``."""
    if isinstance(node, ast.Name | ast.Attribute):
        return re.sub(r"\s+", " ", ast.unparse(node))[:60]
    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    for n in ast.walk(node):
        if isinstance(n, ast.Name | ast.Attribute) and id(n) not in called and not (
                isinstance(n, ast.Name) and n.id in _PLAIN):
            return re.sub(r"\s+", " ", ast.unparse(n))[:60]
    return "..."


def _assignments(function: ast.AST) -> dict[str, list[ast.expr]]:
    """What each plain name of ``function`` is assigned (``x = ...``), every time; a name also
    changed another way (``x += ...``, a loop) is left out: it cannot be read."""
    seen: dict[str, list[ast.expr]] = {}
    other: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    seen.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            seen.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, ast.AugAssign | ast.For | ast.comprehension) and isinstance(node.target, ast.Name):
            other.add(node.target.id)
    return {k: v for k, v in seen.items() if k not in other}


def _assignments_here(tree: ast.Module) -> dict[str, list[ast.expr]]:
    """The module's own top-level assignments (its constants)."""
    seen: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            seen.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            seen.setdefault(node.target.id, []).append(node.value)
    return seen


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """Each function with its qualified name, and the module itself (``<module>``) for the rest."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield "<module>", tree
    yield from walk(tree, "")


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``function`` that are not inside a function nested in it."""
    for child in ast.iter_child_nodes(function):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue  # its own entry (a class's methods are walked as functions of their own)
        yield child
        yield from _own_nodes(child)


_BOUNDARY = re.compile(r"(?:[;:.,]\s+|\s+\(|\s+--\s+)")
_LEAD: Final = ("or", "then", "and", "so", "please", "instead,", "first")


def own_way_out(message: str) -> str | None:
    """The clause of ``message`` that names the way out (a command to run, a thing to do) and
    what follows it, if any: the first clause after the first that starts with a verb of doing."""
    for boundary in _BOUNDARY.finditer(message):
        rest = message[boundary.end():]
        words = rest.split()
        while words and words[0].lower() in _LEAD:
            words = words[1:]
        first = words[0].lower().rstrip(",") if words else ""
        if first in _VERBS or (first == "free" and words[1:2] == ["space"]):
            if boundary.group().strip() == "(" and rest.endswith(")"):
                rest = rest[:-1]
            return rest.strip()
    command = _COMMAND.search(message)
    return message[command.start():].strip() if command is not None else None


def _raised(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _printed_refusal(node: ast.AST) -> ast.expr | None:
    """The message of ``print("sealbench: refused: ...", file=sys.stderr)``, if ``node`` is one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" and node.args:
        first = node.args[0]
        head = first.values[0] if isinstance(first, ast.JoinedStr) and first.values else first
        if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.startswith(PRINTED):
            return first
    return None


class Raise(NamedTuple):
    """One place a refusal is raised (or printed), as read from the code."""

    module: str
    function: str
    error: str
    messages: list[str] | None
    """None: the message cannot be read here."""


def raises(root: Path = PACKAGE) -> list[Raise]:
    """Every raise of a refusal kind in the package (and every refusal the CLI prints itself)."""
    return list(_raises(root))


@functools.cache
def _raises(root: Path) -> tuple[Raise, ...]:
    classes = error_classes(root)
    found: list[Raise] = []
    for module, tree in _modules(root):
        module_names = {k: v for k, v in _assignments_here(tree).items() if k.isupper() or k.startswith("_")}
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for function, node in _functions(tree):
            scope = _Scope(_assignments(node) if function != "<module>" else {}, module_names, functions)
            for inner in _own_nodes(node):
                if isinstance(inner, ast.Raise) and isinstance(inner.exc, ast.Call):
                    error = _raised(inner.exc)
                    if error not in classes:
                        continue
                    arg = inner.exc.args[0] if inner.exc.args else None
                    messages = _render(arg, scope) if arg is not None else [""]
                    found.append(Raise(module, function, error, messages))
                elif (printed := _printed_refusal(inner)) is not None:
                    messages = _render(printed, scope)
                    found.append(Raise(module, function, "", [m[len(PRINTED):] for m in messages or []] or None))
    return tuple(found)


def unlisted(found: Sequence[Raise]) -> list[Raise]:
    """The raises whose message can be read neither from the code nor from :data:`DYNAMIC`."""
    return [r for r in found if r.messages is None and Site(r.module, r.function, r.error) not in DYNAMIC]


def entries(root: Path = PACKAGE) -> list[Entry]:
    """One entry per distinct message of each module (first by module, then as the code has them).

    Raises:
        ValueError: a raise whose message can be read neither from the code nor from :data:`DYNAMIC`.
    """
    classes = error_classes(root)
    found = raises(root)
    missing = unlisted(found)
    if missing:
        where = ", ".join(f"{r.module}.{r.function} ({r.error})" for r in missing)
        raise ValueError(f"messages that cannot be read, to describe in DYNAMIC: {where}")
    out: dict[tuple[str, str, str], Entry] = {}
    for r in found:
        readable = r.messages is not None
        texts = r.messages if r.messages is not None else [DYNAMIC[Site(r.module, r.function, r.error)]]
        for text in texts:
            key = (r.module, r.error, text)
            if key in out:
                before = out[key]
                if r.function not in before.function.split(", "):
                    out[key] = Entry(before.module, f"{before.function}, {r.function}", before.error,
                                     before.exit_code, before.message, before.readable, before.own_way_out)
                continue
            code = classes[r.error].exit_code if r.error else 3
            out[key] = Entry(r.module, r.function, r.error, code, text, readable,
                             own_way_out(text) if readable else None)
    return list(out.values())


class Counts(NamedTuple):
    raises: int
    messages: int
    own_way_out: int


def counts(root: Path = PACKAGE) -> Counts:
    """How many raises, distinct messages, and messages naming their own way out."""
    listed = entries(root)
    return Counts(len(raises(root)), len(listed), sum(1 for e in listed if e.own_way_out))


# ----------------------------------------------------------------------------- the page


def _md(text: str) -> str:
    """``text`` as inline markdown that shows as written (no table break, no HTML, no emphasis);
    a backticked command stays code."""
    out = []
    for i, piece in enumerate(text.replace("\n", " ").split("`")):
        if i % 2 == 0:
            piece = (piece.replace("\\", "\\\\").replace("<", "&lt;").replace(">", "&gt;")
                     .replace("*", "\\*").replace("_", "\\_"))
        out.append(piece.replace("|", "\\|"))
    return "`".join(out) if text.count("`") % 2 == 0 else "\\`".join(out)


def page(root: Path = PACKAGE) -> str:
    """The reference page of every refusal, as markdown."""
    classes = error_classes(root)
    listed = entries(root)
    n = counts(root)
    lines = [
        "# Refusals",
        "",
        "<!-- Generated by `python -m sealbench.refusal_catalogue docs/reference/refusals.md` (`make refusals`) "
        "from the code; a test fails when this page is not what the code says. Do not edit by hand. -->",
        "",
        "A refusal is sealbench saying no before it records anything: the input is wrong, and no rate is "
        "emitted. Each one is one line on stderr, `sealbench: refused: MESSAGE` (exit 3) or "
        "`sealbench: error: MESSAGE` (exit 2, the command line itself). This page lists every message the code "
        "can print that way, by the module that raises it, with its way out: the message's own words when it "
        "names one, otherwise the way out of its error class (below). A `{placeholder}` stands for what "
        "the message fills in (a path, a task id, a count).",
        "",
        f"{n.raises} places raise or print a refusal; they say {n.messages} distinct messages, of which "
        f"{n.own_way_out} name their own way out.",
        "",
        "## Error classes",
        "",
        "| class | exit | what it means | way out |",
        "|---|---|---|---|",
    ]
    for cls in sorted(classes.values(), key=lambda c: (c.exit_code, c.name)):
        lines.append(f"| `{cls.name}` | {cls.exit_code} | {_md(cls.doc)} | {_md(cls.way_out)} |")
    by_module: dict[str, list[Entry]] = {}
    for e in listed:
        by_module.setdefault(e.module, []).append(e)
    for module in sorted(by_module):
        lines += ["", f"## {module}", "", "| message | class | exit | raised in | way out |", "|---|---|---|---|---|"]
        for e in by_module[module]:
            message = _md(e.message) if e.readable else f"*{_md(e.message)}*"
            way = _md(e.own_way_out) if e.own_way_out else f"({_md(classes[e.error].way_out if e.error else '')})"
            cls_name = f"`{e.error}`" if e.error else "printed"
            lines.append(f"| {message} | {cls_name} | {e.exit_code} | {_md(e.function)} | {way} |")
    lines += [
        "",
        "A message in *italics* is built where the code cannot be read for it; the line describes what it says. "
        "A way out in (parentheses) is the error class's: the message itself names none.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sealbench.refusal_catalogue",
                                     description="write (or check) the reference page of every refusal")
    parser.add_argument("page", type=Path, help="the markdown page (docs/reference/refusals.md)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page is stale")
    args = parser.parse_args(argv)
    text = page()
    if args.check:
        try:
            current = args.page.read_text(encoding="utf-8")
        except OSError as e:
            print(f"{args.page}: cannot be read ({e.strerror}); write it with "
                  f"`python -m sealbench.refusal_catalogue {args.page}`", file=sys.stderr)
            return 1
        if current != text:
            print(f"{args.page} is stale: the code's refusals changed; write it again with "
                  f"`python -m sealbench.refusal_catalogue {args.page}`", file=sys.stderr)
            return 1
        return 0
    args.page.parent.mkdir(parents=True, exist_ok=True)
    args.page.write_text(text, encoding="utf-8")
    n = counts()
    print(f"{args.page}: {n.raises} raises, {n.messages} distinct messages, {n.own_way_out} naming their own way out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
