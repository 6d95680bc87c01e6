"""sealbench's modules in layers: a module imports only from its own layer or the ones below.

Every import that runs counts, at module level or inside a function (the CLI's lazy imports).
One under ``if TYPE_CHECKING:`` does not: it never runs, and a type may name what a higher
layer defines (the sandbox registry names the ``Sandbox`` it returns). A package (``sandbox``,
``importers``, ``presets``) is one entry: its modules share its layer. A new module must be
placed in :data:`LAYERS`; an import that climbs must be fixed, or listed in
:data:`ALLOWED_UPWARD` with the reason it may climb for now (three at most).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "sealbench"

LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("values: words, formats, digests; and the programs that run alone inside a sandbox",
     frozenset({"errors", "outcomes", "formats", "freshness", "events", "digest", "safe_text", "stats", "progress",
                "relay", "function_oracle", "pytest_guard", "repo_install", "trivial", "vocabulary"})),
    ("files: scratch, atomic writes, trees, the blob store, locks, signatures, the clock, usage counts",
     frozenset({"scratch", "files", "agentfs", "lock", "signing", "gitrepo", "clock", "usage", "bytecode",
                "charge", "model_api", "document", "plots", "blobs"})),
    ("records: the journal, packs, agents, environments, workspaces, conversations, a run's stories",
     frozenset({"journal", "scorecard", "pack", "pytest_oracle", "agents", "environments", "sandboxes",
                "workspace", "conversation", "model_stub", "stories"})),
    ("the sandbox and the rules: contracts, derivation, scores, importers; a run's settings and cancellation",
     frozenset({"sandbox", "contract", "derive", "consistency", "score", "preflight", "presets", "importers",
                "first_run", "settings", "cancellation"})),
    ("grading and reading a run: grades, the sandboxes a machine holds, bundles, the runs index, a run's story",
     frozenset({"grading", "sizing", "bundle", "scoring_io", "runs_index", "show"})),
    ("attempts: one attempt, the executors, the coordinator, the model gateway",
     frozenset({"attempt", "executors", "coordinator", "gateway", "replay", "ray_executor"})),
    ("runs: a contract executed, a pack validated, tasks mined",
     frozenset({"runner", "validate", "mine"})),
    ("commands and pages: reports, comparisons, the demo, agent checks",
     frozenset({"report", "render", "compare", "compare_page", "task_pages", "agent_check", "demo"})),
    ("the interface: the CLI, the public API, the generated docs",
     frozenset({"cli", "cli_doc", "__init__", "schema_doc", "refusal_catalogue"})),
)
LAYER: dict[str, int] = {module: n for n, (_, modules) in enumerate(LAYERS) for module in modules}

ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("ray_executor", "validate"): "the Validator a cluster's node runs for `validate --executor ray`, "
                                  "until validation on a node is its own module below both",
}


def _module(path: Path) -> str:
    """``sandbox`` for src/sealbench/sandbox/process.py: the entry of :data:`LAYERS` it belongs to."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[0] if parts != ("__init__",) else "__init__"


def _package(path: Path) -> list[str]:
    """The dotted package a relative import in ``path`` starts from, below ``sealbench``."""
    return list(path.relative_to(SRC).with_suffix("").parts[:-1])


def _targets(node: ast.AST, package: list[str]) -> Iterator[str]:
    """The sealbench modules an import statement names, dotted below ``sealbench``."""
    if isinstance(node, ast.Import):
        yield from (a.name.removeprefix("sealbench.") for a in node.names if a.name.startswith("sealbench."))
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = package[: len(package) - node.level + 1]
        elif node.module is not None and (node.module == "sealbench" or node.module.startswith("sealbench.")):
            base, node = [], ast.ImportFrom(node.module.removeprefix("sealbench").lstrip(".") or None, node.names, 0)
        else:
            return
        if node.module:
            yield ".".join([*base, node.module])
        else:  # from . import x: x may be a module or a name of the package
            yield from (".".join([*base, a.name]) for a in node.names)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _sources() -> Iterator[Path]:
    for path in sorted(SRC.rglob("*.py")):
        if "examples" not in path.relative_to(SRC).parts:
            yield path


@functools.cache
def imports() -> tuple[tuple[str, str, int, Path], ...]:
    """(module, imported module, line, file) for every import of one sealbench module by another."""
    return tuple(_imports())


def _imports() -> Iterator[tuple[str, str, int, Path]]:
    known = {_module(p) for p in _sources()}
    for path in _sources():
        module = _module(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block) for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            for target in _targets(node, _package(path)):
                top = target.split(".")[0] or "__init__"
                if top in known and top != module:
                    yield module, top, node.lineno, path


def test_every_module_has_a_layer() -> None:
    missing = sorted({_module(p) for p in _sources()} - set(LAYER))
    assert not missing, f"add {missing} to LAYERS in tests/test_layers.py, in the lowest layer it fits"
    gone = sorted(set(LAYER) - {_module(p) for p in _sources()})
    assert not gone, f"LAYERS names modules that no longer exist: {gone}"


def test_no_module_imports_from_a_higher_layer() -> None:
    climbs = sorted({f"{path.relative_to(SRC.parent)}:{line}: {module} (layer {LAYER[module]}) imports {target} "
                     f"(layer {LAYER[target]})"
                     for module, target, line, path in imports()
                     if module in LAYER and target in LAYER and LAYER[target] > LAYER[module]
                     and (module, target) not in ALLOWED_UPWARD})
    assert not climbs, "imports that go up a layer (move the code down, or the module up):\n" + "\n".join(climbs)


def test_the_allowed_climbs_are_few_and_all_still_climb() -> None:
    assert len(ALLOWED_UPWARD) <= 3
    assert all(reason.strip() for reason in ALLOWED_UPWARD.values())
    seen = {(module, target) for module, target, _, _ in imports()}
    assert set(ALLOWED_UPWARD) <= seen, f"no longer imported, drop them: {set(ALLOWED_UPWARD) - seen}"
    assert all(LAYER[target] > LAYER[module] for module, target in ALLOWED_UPWARD), "not a climb: drop it"


def test_no_import_cycle_but_through_an_allowed_climb() -> None:
    graph: dict[str, set[str]] = {}
    for module, target, _, _ in imports():
        if (module, target) not in ALLOWED_UPWARD:
            graph.setdefault(module, set()).add(target)
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path[path.index(module):], module))}"
        if module not in done:
            for target in sorted(graph.get(module, ())):
                visit(target, (*path, module))
            done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_the_layer_check_sees_lazy_relative_and_absolute_imports(tmp_path: Path) -> None:
    source = ("from . import files\nfrom .sandbox import open_sandbox\nimport sealbench.journal\n"
              "from sealbench import errors\nfrom sealbench.show import read_run\n"
              "def later():\n    from .runner import execute\n")
    found = [t for node in ast.walk(ast.parse(source)) for t in _targets(node, [])]
    typing_only = ast.parse("if TYPE_CHECKING:\n    from .runner import RunResult\n").body[0]
    assert _is_type_checking(typing_only)
    assert sorted(found) == ["errors", "files", "journal", "runner", "sandbox", "show"]
