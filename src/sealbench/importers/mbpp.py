"""MBPP (full and sanitized) and MBPP+ (EvalPlus, original format): one function per task.

MBPP's own prompt shows the three test asserts; here they are the hidden tests, so the
prompt gives the description and the signature of the function(s) the tests call instead,
taken from the reference code's ``def`` lines. The benchmark's program is the code, then
the setup code / test imports, then the asserts, in one namespace. What the tests use from
the reference code besides functions (a class such as ``Node`` they construct, a constant)
is given in the stub verbatim: the task cannot be solved without it. A module the tests use
but only the reference imports (MBPP 596 uses ``sys``) is imported by the hidden test.

* ``mbpp``: mbpp.jsonl (text, code, task_id, test_setup_code, test_list, challenge_test_list)
  or sanitized-mbpp.json (prompt, code, task_id, test_imports, test_list, source_file), told
  apart by their fields; JSON Lines or a JSON array alike. ``challenge_test_list`` is not
  part of MBPP's evaluation and is not used.
* ``mbppplus``: MbppPlus-OriginFmt.jsonl.gz, whose ``test`` is a standalone script calling
  the function by name (it needs numpy).
"""

from __future__ import annotations

import ast
import builtins
import copy
import symtable
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import PackError, UsageError
from .draft import ImportOptions, PackDraft, TaskDraft, make_record, text_file
from .oracle import CANDIDATE_FILE, function_oracle_cmd, function_oracle_files, normalise_newlines
from .provenance import describe, load_template, provenance
from .sources import (
    SourceRecord,
    check_unique,
    fenced,
    file_digest,
    first_records,
    get_int,
    get_str,
    get_str_list,
    named,
    parse_python,
    read_records,
    require_fields,
)

TEMPLATE_ID = "function-v1"
FULL_FIELDS = ("task_id", "text", "code", "test_setup_code", "test_list")
SANITIZED_FIELDS = ("task_id", "prompt", "code", "test_imports", "test_list")
PLUS_FIELDS = ("task_id", "prompt", "code", "test_imports", "test")
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class _Set:
    kind: str
    pack_name: str
    title: str
    license: str
    wall_clock_s: float
    known_sha256: str | None


# Mbpp_123's reference alone takes 9 s (15 s on a loaded machine).
MBPP_FULL = _Set("mbpp", "mbpp", "Google MBPP (full set)", "CC BY 4.0", 60.0,
                 "ccf64ceae9c5403bf50a044cb6d505bfd2a2963ee58338ba268fd65beab92a9f")
MBPP_SANITIZED = _Set("mbpp", "mbpp-sanitized", "Google MBPP (sanitized subset)", "CC BY 4.0", 60.0,
                      "ca95deaa9a01ef0a6f439f88bcf0dd3db3563d22f22aad6cae04ebb9a8d8c8e9")
# Its scripts embed hundreds of inputs and import numpy; Mbpp_599's reference alone takes 26 s.
MBPP_PLUS = _Set("mbppplus", "mbppplus", "EvalPlus MBPP+ (evalplus/mbppplus_release, original format)",
                 "Apache-2.0", 120.0, "7a5aec547b134fa297ee6c45f829298aa3f58de02547b8d8a5c3d85d9cb10efc")


@dataclass(frozen=True)
class Interface:
    """What a task's tests need from the candidate module, read off the reference code."""

    functions: list[str]
    """Names of the functions the tests call, in the reference's order."""
    signatures: list[str]
    """Their ``def`` lines (``def f(a, b):``)."""
    stub: str
    """solution.py as the agent gets it: what the tests use verbatim, function stubs."""
    given: list[str]
    """Names defined verbatim in the stub (classes, constants)."""
    given_source: str
    """Their source, as the stub gives it: the oracle runs it as trusted code."""
    test_imports: list[str]
    """Import statements of the reference that the tests rely on without importing."""


def _bound_names(tree: ast.AST) -> set[str]:
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
    return bound


def free_globals(code: str, where: str) -> set[str]:
    """Global names ``code`` reads, in any scope, without binding them at module level.

    Scopes matter: a test helper's local ``freq_count`` (MBPP+ 88) does not bind the global
    function the test calls.

    Raises:
        PackError: the code does not parse.
    """
    parse_python(code, where, "test code")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        top = symtable.symtable(code, "<test>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    used: set[str] = set()
    pending = [top]
    while pending:
        table = pending.pop()
        used.update(s.get_name() for s in table.get_symbols()
                    if s.is_referenced() and (table is top or s.is_global()))
        pending.extend(table.get_children())
    return used - bound


def _stub_function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, str]:
    stub = copy.copy(node)
    stub.decorator_list = []
    stub.body = [ast.Raise(exc=ast.Name(id="NotImplementedError", ctx=ast.Load()), cause=None)]
    text = ast.unparse(ast.fix_missing_locations(ast.Module(body=[stub], type_ignores=[])))
    return text.split("\n", 1)[0], text


def interface(code: str, test_code: str, where: str) -> Interface:
    """Read what the tests need off the reference code.

    The tests' free names (used, never bound by the tests) that the reference defines at top
    level are what the candidate must provide: functions become stubs, anything else (a class
    the tests construct, a constant) is given verbatim; a module the reference imports is
    imported by the hidden test. Builtins count only when the reference redefines them (MBPP
    126 defines ``sum``).

    Raises:
        PackError: the code or the tests do not parse, or the tests call no function the
            reference defines.
    """
    module = parse_python(code, where, "code")
    free = free_globals(test_code, where)
    functions: list[str] = []
    signatures: list[str] = []
    given_src: list[str] = []
    given: list[str] = []
    imports: list[str] = []
    stubs: list[str] = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in free:
            signature, stub = _stub_function(node)
            functions.append(node.name)
            signatures.append(signature)
            stubs.append(stub)
        elif isinstance(node, ast.ClassDef) and node.name in free:
            given.append(node.name)
            given_src.append(ast.get_source_segment(code, node) or ast.unparse(node))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            names = _bound_names(node) & free
            if names:
                given.extend(sorted(names))
                given_src.append(ast.get_source_segment(code, node) or ast.unparse(node))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name).split(".")[0] in free - _BUILTINS:
                    single = copy.copy(node)
                    single.names = [alias]
                    imports.append(ast.unparse(single))
    if not functions:
        raise PackError(f"{where}: the tests call no function the reference code defines "
                        f"(free names in the tests: {', '.join(sorted(free - _BUILTINS)) or 'none'})")
    stub = "\n\n\n".join([*given_src, *stubs]) + "\n"
    given_source = "\n\n\n".join(given_src) + "\n" if given_src else ""
    return Interface(functions, signatures, stub, given, given_source, imports)


def task_prompt(description: str, iface: Interface) -> str:
    """prompt.md: the task's description and the signature(s) to implement, never the tests."""
    what = "the function" if len(iface.functions) == 1 else "the functions"
    text = (f"{description.strip()}\n\nWrite {what} in `{CANDIDATE_FILE}`, which holds "
            f"{'a stub' if len(iface.functions) == 1 else 'stubs'} raising `NotImplementedError`:\n\n"
            f"{fenced(chr(10).join(iface.signatures), 'python')}\n")
    if iface.given:
        names = ", ".join(f"`{n}`" for n in iface.given)
        pronoun = "it" if len(iface.given) == 1 else "them"
        text += f"\n`{CANDIDATE_FILE}` also defines {names}, which the tests use: keep {pronoun}.\n"
    return text


def _draft_task(spec: _Set, rec: SourceRecord, options: ImportOptions, *, source: Path, digest: str,
                wall_clock_s: float, description: str, code: str, sections: Sequence[tuple[str, str]],
                iface: Interface, number: int) -> TaskDraft:
    task_id = f"Mbpp_{number}"
    added = ("imports the tests need but do not make, from the reference code (added by sealbench)",
             "\n".join(iface.test_imports))
    hidden = function_oracle_files(origin=f"task {number} of {source.name}", importer=spec.kind,
                                   functions=iface.functions,
                                   trusted=[("what the tests use from the reference code, as the stub gives it",
                                             iface.given_source)],
                                   sections=[added, *sections])
    record = make_record(
        rec.where, task_id=task_id, template_id=TEMPLATE_ID, oracle_cmd=function_oracle_cmd(),
        max_attempts=options.max_attempts, wall_clock_s=wall_clock_s,
        provenance=provenance(spec.title, digest, options.license or spec.license, str(number)),
    )
    return TaskDraft(
        record=record,
        prompt=task_prompt(description, iface),
        workspace={CANDIDATE_FILE: text_file(iface.stub)},
        hidden={name: text_file(text) for name, text in hidden.items()},
        solution={CANDIDATE_FILE: text_file(code if code.endswith("\n") else code + "\n")},
        origin=rec.where,
    )


def _mbpp_task(spec: _Set, rec: SourceRecord, options: ImportOptions, source: Path, digest: str,
               wall_clock_s: float) -> TaskDraft:
    number = get_int(rec, "task_id")
    code = normalise_newlines(get_str(rec, "code"))
    tests = get_str_list(rec, "test_list")
    if spec is MBPP_FULL:
        description = get_str(rec, "text")
        setup = [("test_setup_code (original)", get_str(rec, "test_setup_code"))]
    else:
        description = get_str(rec, "prompt")
        setup = [("test_imports (original)", "\n".join(get_str_list(rec, "test_imports")))]
    if not tests:
        raise PackError(f"{rec.where}: field 'test_list' is empty")
    sections = [*setup, ("test_list (original)", "\n".join(tests))]
    iface = interface(code, normalise_newlines("\n".join(c for _, c in sections)), rec.where)
    return _draft_task(spec, rec, options, source=source, digest=digest, wall_clock_s=wall_clock_s,
                       description=description, code=code, sections=sections, iface=iface, number=number)


def _plus_task(spec: _Set, rec: SourceRecord, options: ImportOptions, source: Path, digest: str,
               wall_clock_s: float) -> TaskDraft:
    number = get_int(rec, "task_id")
    code = normalise_newlines(get_str(rec, "code")).lstrip("\n")
    sections = [("test_imports (original)", "\n".join(get_str_list(rec, "test_imports"))),
                ("test (original)", get_str(rec, "test"))]
    iface = interface(code, normalise_newlines("\n".join(c for _, c in sections)), rec.where)
    return _draft_task(spec, rec, options, source=source, digest=digest, wall_clock_s=wall_clock_s,
                       description=get_str(rec, "prompt"), code=code, sections=sections, iface=iface,
                       number=number)


def _variant(records: Sequence[SourceRecord], source: Path) -> _Set:
    first = records[0].data
    if "text" in first or "test_setup_code" in first:
        return MBPP_FULL
    if "prompt" in first or "test_imports" in first:
        return MBPP_SANITIZED
    raise PackError(f"{records[0].where}: neither an mbpp.jsonl record (text, test_setup_code) nor a "
                    f"sanitized-mbpp.json one (prompt, test_imports); is {source.name} an MBPP file?")


_Builder = Callable[[_Set, SourceRecord, ImportOptions, Path, str, float], TaskDraft]


def _import(spec: _Set, records: Sequence[SourceRecord], fields: Sequence[str], source: Path,
            options: ImportOptions, build: _Builder) -> PackDraft:
    if options.repository_options():
        raise UsageError(f"{', '.join(options.repository_options())} is for swebench imports, not {spec.kind}")
    digest = file_digest(source)
    for rec in records:
        require_fields(rec, fields)
    check_unique((f"Mbpp_{get_int(r, 'task_id')}", r.where) for r in records)
    wall = options.wall_clock_s or spec.wall_clock_s
    tasks = [build(spec, rec, options, source, digest, wall) for rec in records]
    chosen = first_records(tasks, options.limit)
    return PackDraft(
        name=options.name or spec.pack_name,
        description=describe(title=spec.title, kind=spec.kind, source=source, digest=digest,
                             known_digest=spec.known_sha256, imported=len(chosen), total=len(records),
                             options=options, wall_clock_s=wall,
                             note="The prompt gives the function's signature; the original asserts are hidden."),
        provenance=provenance(spec.title, digest, options.license or spec.license),
        templates={TEMPLATE_ID: load_template(TEMPLATE_ID)},
        tasks=chosen,
    )


def import_mbpp(source: Path, options: ImportOptions) -> PackDraft:
    """Import mbpp.jsonl or sanitized-mbpp.json (told apart by the records' fields).

    Raises:
        PackError: a damaged file or record, mixed variants, a duplicate id, naming the file
            and the record.
        UsageError: an option this importer does not take.
    """
    records = [named(r, "task_id") for r in read_records(source)]
    spec = _variant(records, source)
    fields = FULL_FIELDS if spec is MBPP_FULL else SANITIZED_FIELDS
    return _import(spec, records, fields, source, options, _mbpp_task)


def import_mbppplus(source: Path, options: ImportOptions) -> PackDraft:
    """Import MbppPlus-OriginFmt.jsonl.gz (its tests need numpy in the oracle's Python).

    Raises:
        PackError: a damaged file or record, a duplicate id, naming the file and the record.
        UsageError: an option this importer does not take.
    """
    records = [named(r, "task_id") for r in read_records(source)]
    return _import(MBPP_PLUS, records, PLUS_FIELDS, source, options, _plus_task)
