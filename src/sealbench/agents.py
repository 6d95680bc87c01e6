"""Agents: a command template run in the sandbox, a built-in, or a Python callable.

Extension point: :func:`register_builtin` adds a named in-process agent; the built-ins use
the same path. What was used is recorded in the run's first journal event.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import RunRefusal

if TYPE_CHECKING:
    from .pack import Task

# the scorecard rules' signature: agent(task, workspace, attempt) -> anything JSON-serialisable
PythonAgent = Callable[[dict[str, Any], Path, int], Any]
PLACEHOLDERS = ("prompt_file", "workspace", "attempt", "max_attempts", "task_id")
_PLACEHOLDER_RE = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


def split_template(template: str) -> list[str]:
    """A command template's words, split like a shell, placeholders left in.

    Raises:
        RunRefusal: the template does not parse or is empty.
    """
    try:
        tokens = shlex.split(template)
    except ValueError as e:
        raise RunRefusal(f"agent command template does not parse: {e}") from None
    if not tokens:
        raise RunRefusal("agent command template is empty")
    return tokens


def render_argv(template: str, values: Mapping[str, str]) -> list[str]:
    """Split a command template like a shell and fill placeholders in one pass.

    One pass means a value containing ``{attempt}`` is never substituted again.

    Raises:
        RunRefusal: the template does not parse or is empty.
    """
    return [_PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], tok) for tok in split_template(template)]


def _reference(task: Task, workspace: Path, attempt: int) -> dict[str, Any]:
    if not task.solution.is_dir():
        return {"copied": []}
    copied = []
    for src in sorted(p for p in task.solution.rglob("*") if p.is_file() or p.is_symlink()):
        rel = src.relative_to(task.solution)
        dest = workspace / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        shutil.copy2(src, dest, follow_symlinks=False)
        copied.append(rel.as_posix())
    return {"copied": copied}


def _noop(task: Task, workspace: Path, attempt: int) -> dict[str, Any]:
    return {"changed": []}


BuiltinAgent = Callable[["Task", Path, int], dict[str, Any]]
_BUILTINS: dict[str, BuiltinAgent] = {}


def register_builtin(name: str, agent: BuiltinAgent) -> None:
    """Make ``builtin:<name>`` available to contracts."""
    _BUILTINS[name] = agent


register_builtin("reference", _reference)
register_builtin("noop", _noop)


@dataclass(frozen=True)
class ResolvedAgent:
    """How the runner will drive the contract's agent."""

    kind: str  # "command", "builtin" or "python-callable"
    label: str
    command: str
    builtin: BuiltinAgent | None = None
    callable: PythonAgent | None = None

    @property
    def sandboxed(self) -> bool:
        return self.kind == "command"

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "label": self.label, "command": self.command,
                "sandboxed": self.sandboxed}


def resolve_agent(label: str, command: str, python_agent: PythonAgent | None = None) -> ResolvedAgent:
    """Resolve a contract's agent.

    Raises:
        RunRefusal: an unknown ``builtin:`` name or an unparsable template.
    """
    if python_agent is not None:
        name = getattr(python_agent, "__qualname__", repr(python_agent))
        return ResolvedAgent("python-callable", label, f"python:{name} (unsandboxed, in-process)",
                             callable=python_agent)
    if command.startswith("builtin:"):
        name = command.removeprefix("builtin:")
        if name not in _BUILTINS:
            raise RunRefusal(f"unknown built-in agent {command!r}; known: {sorted(_BUILTINS)}")
        return ResolvedAgent("builtin", label, command, builtin=_BUILTINS[name])
    render_argv(command, {k: "" for k in PLACEHOLDERS})
    return ResolvedAgent("command", label, command)
