"""HumanEval and HumanEval+ (EvalPlus, original format): one function to complete per task.

Record fields: task_id, prompt (imports, helpers, the function's signature and docstring),
entry_point, canonical_solution (the body) and test (defines ``check(candidate)``). The
benchmark's program is ``prompt + completion + test + check(entry_point)`` in one namespace.

Each task becomes:

* ``workspace/solution.py``: the prompt with a body that raises NotImplementedError;
* ``solution/solution.py``: prompt + canonical_solution;
* ``hidden/test_sealbench_oracle.py``: the original test and the ``check`` call, and
  ``hidden/sealbench_oracle.json``: the function-level oracle's spec, whose trusted code is
  the prompt (its helpers, such as 32's ``poly``, are the pack's, never the candidate's; see
  :mod:`sealbench.importers.oracle`);
* ``prompt.md``: what to do and the full original prompt.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from ..errors import PackError, UsageError
from .draft import ImportOptions, PackDraft, TaskDraft, make_record, text_file
from .oracle import CANDIDATE_FILE, function_oracle_cmd, function_oracle_files
from .provenance import describe, load_template, provenance
from .sources import (
    SourceRecord,
    check_unique,
    fenced,
    file_digest,
    first_records,
    get_str,
    named,
    parse_python,
    read_records,
    require_fields,
    task_id_for,
)

TEMPLATE_ID = "function-v1"
FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")


@dataclass(frozen=True)
class FunctionSet:
    """What differs between HumanEval-format sets."""

    kind: str
    title: str
    license: str
    wall_clock_s: float
    known_sha256: str


HUMANEVAL = FunctionSet(
    kind="humaneval",
    title="OpenAI HumanEval (openai/human-eval)",
    license="MIT",
    wall_clock_s=30.0,
    known_sha256="b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
)
# Its tests embed hundreds of inputs and import numpy; HumanEval/15's and /139's take ~20 s alone.
HUMANEVALPLUS = FunctionSet(
    kind="humanevalplus",
    title="EvalPlus HumanEval+ (evalplus/humanevalplus_release, original format)",
    license="Apache-2.0 (plus MIT for the HumanEval part)",
    wall_clock_s=120.0,
    known_sha256="daa7661c8189924068069b0872a440b491edb60f8bdf431d5957adc88d18bae5",
)


def import_humaneval(source: Path, options: ImportOptions) -> PackDraft:
    """Import HumanEval.jsonl.gz (or a file of the same format).

    Raises:
        PackError: a damaged file or record, naming the file and the record.
        UsageError: an option this importer does not take.
    """
    return import_function_set(HUMANEVAL, source, options)


def import_humanevalplus(source: Path, options: ImportOptions) -> PackDraft:
    """Import HumanEvalPlus-OriginFmt.jsonl.gz (its tests need numpy in the oracle's Python).

    Raises:
        PackError: a damaged file or record, naming the file and the record.
        UsageError: an option this importer does not take.
    """
    return import_function_set(HUMANEVALPLUS, source, options)


def stub_source(prompt: str, entry_point: str, where: str) -> str:
    """The prompt with a body raising NotImplementedError under the entry point's docstring.

    Raises:
        PackError: the prompt does not parse, or the entry point is not its last function
            (the body would land in another function).
    """
    tree = parse_python(prompt, where, "prompt")
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not functions or functions[-1].name != entry_point or tree.body[-1] is not functions[-1]:
        raise PackError(f"{where}: entry_point {entry_point!r} is not the last statement of the prompt")
    first = functions[-1].body[0]
    # The body's own leading whitespace: tabs stay tabs.
    indent = prompt.splitlines()[first.lineno - 1][: first.col_offset]
    text = prompt if prompt.endswith("\n") else prompt + "\n"
    stub = f"{text}{indent}raise NotImplementedError\n"
    parse_python(stub, where, "prompt plus a stub body")
    return stub


def _helpers(prompt: str, entry_point: str) -> list[str]:
    tree = parse_python(prompt, "prompt", "prompt")
    return [n.name for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name != entry_point]


def task_prompt(prompt: str, entry_point: str) -> str:
    """prompt.md: the instruction and the full original prompt.

    Raises:
        PackError: the prompt does not parse.
    """
    helpers = _helpers(prompt, entry_point)
    keep = ""
    if helpers:
        names = ", ".join(f"`{h}`" for h in helpers)
        keep = f" The file also defines {names}: keep {'it' if len(helpers) == 1 else 'them'} as given."
    return (
        f"Complete the function `{entry_point}` in `{CANDIDATE_FILE}`. The file holds the task's original "
        f"prompt, shown below: the function's signature and docstring, with a body that raises "
        f"`NotImplementedError`. Replace that body; keep the function's name and signature.{keep}\n\n"
        f"{fenced(prompt, 'python')}\n"
    )


def _task(spec: FunctionSet, rec: SourceRecord, options: ImportOptions, source: Path, digest: str,
          wall_clock_s: float) -> TaskDraft:
    original = get_str(rec, "task_id")
    prompt = get_str(rec, "prompt")
    entry_point = get_str(rec, "entry_point")
    canonical = get_str(rec, "canonical_solution")
    test = get_str(rec, "test")
    if not entry_point.isidentifier():
        raise PackError(f"{rec.where}: entry_point {entry_point!r} is not a Python name")
    task_id = task_id_for(original, rec.where)
    hidden = function_oracle_files(
        origin=f"{original} of {source.name}",
        importer=spec.kind,
        functions=[entry_point],
        trusted=[("prompt (original)", prompt)],
        sections=[("test (original)", test), ("the benchmark's check call", f"check({entry_point})")],
    )
    record = make_record(
        rec.where,
        task_id=task_id,
        template_id=TEMPLATE_ID,
        oracle_cmd=function_oracle_cmd(),
        max_attempts=options.max_attempts,
        wall_clock_s=wall_clock_s,
        provenance=provenance(spec.title, digest, options.license or spec.license, original),
    )
    solution = (prompt if prompt.endswith("\n") else prompt + "\n") + canonical
    return TaskDraft(
        record=record,
        prompt=task_prompt(prompt, entry_point),
        workspace={CANDIDATE_FILE: text_file(stub_source(prompt, entry_point, rec.where))},
        hidden={name: text_file(text) for name, text in hidden.items()},
        solution={CANDIDATE_FILE: text_file(solution)},
        origin=rec.where,
    )


def import_function_set(spec: FunctionSet, source: Path, options: ImportOptions) -> PackDraft:
    """Import any HumanEval-format file under ``spec``.

    Raises:
        PackError: a damaged file or record, a duplicate id, naming the file and the record.
        UsageError: an option this importer does not take.
    """
    if options.repository_options():
        raise UsageError(f"{', '.join(options.repository_options())} is for swebench imports, not {spec.kind}")
    digest = file_digest(source)
    records = [named(r, "task_id") for r in read_records(source)]
    for rec in records:
        require_fields(rec, FIELDS)
    check_unique((task_id_for(get_str(r, "task_id"), r.where), r.where) for r in records)
    wall = options.wall_clock_s or spec.wall_clock_s
    # Every record is checked before any task is built: a defect near the end of the file
    # must refuse the import even when --limit keeps only the first records.
    tasks = [_task(spec, rec, options, source, digest, wall) for rec in records]
    chosen = first_records(tasks, options.limit)
    return PackDraft(
        name=options.name or spec.kind,
        description=describe(title=spec.title, kind=spec.kind, source=source, digest=digest,
                             known_digest=spec.known_sha256, imported=len(chosen), total=len(records),
                             options=options, wall_clock_s=wall),
        provenance=provenance(spec.title, digest, options.license or spec.license),
        templates={TEMPLATE_ID: load_template(TEMPLATE_ID)},
        tasks=chosen,
    )
