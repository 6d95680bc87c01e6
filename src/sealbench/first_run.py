"""A first number from a handful of files: ``sealbench init`` and ``sealbench eval``.

``init PACK`` writes a pack folder a newcomer edits: ``tasks.toml`` with one worked task,
``agent.py`` (an agent stub that solves it) and a ``README.md`` of its own. ``eval PACK
--agent CMD --run-id ID`` then runs the whole measured flow as the commands it stands for,
printing each before it runs and stopping at the first that does not succeed: seal, validate
(when the seal has no validity evidence), contract new, contract lock, run, probe, bundle.
Nothing is skipped or relaxed: the contract is locked before the run, and the bundle is what
``verify`` checks. A relative file in the agent's command is made absolute and mounted on its
own (never its folder, which may hold the pack and its hidden tests).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import UsageError

_PLAIN = re.compile(r"[\w@%+=:,./{}-]+")  # a word the shell reads as it is (placeholders included)

TASKS_TOML = '''\
# The tasks of this pack, one [[tasks]] table each. `sealbench pack seal` expands this file
# into the sealed layout beside it (pack.json, prompts/, tasks/): edit this file, not that.
name = "{name}"
description = "A pack made with `sealbench init`: one worked task to start from."
max_attempts = 2        # each task's retry ceiling
wall_clock_s = 60       # each task's wall-clock ceiling, grading included

[[tasks]]
id = "fix-add"
prompt = "`add(a, b)` in calc.py should return the sum of a and b. It returns their difference. Fix it."
# The files the agent starts from.
workspace = {{ "calc.py" = "def add(a, b):\\n    return a - b\\n" }}
# The tests that decide the task; the agent never sees them.
hidden = {{ "test_calc.py" = "from calc import add\\n\\n\\ndef test_add():\\n    assert add(2, 3) == 5\\n\\n\\ndef test_add_negative():\\n    assert add(-1, -1) == -2\\n" }}
# A reference solution: `pack validate` checks that it passes and that an empty change fails.
solution = {{ "calc.py" = "def add(a, b):\\n    return a + b\\n" }}
'''

AGENT_PY = '''\
"""An agent stub for sealbench: it runs once per attempt, in the task's workspace (its current
directory), inside the sandbox. Put your agent here: read the prompt, change the files.

sealbench runs it as `python3 agent.py PROMPT_FILE` (the contract's command, `{prompt_file}`
filled in). Its environment names the task and the attempt: SEALBENCH_TASK_ID, SEALBENCH_ATTEMPT.
"""

import os
import pathlib
import sys

prompt = pathlib.Path(sys.argv[1]).read_text(encoding="utf-8")
print(f"task {os.environ.get('SEALBENCH_TASK_ID')}, attempt {os.environ.get('SEALBENCH_ATTEMPT')}")
print(prompt)

# Follow the prompt: when it says to change no file (the narration probe), change none.
if "Do NOT change" in prompt:
    sys.exit(0)
# A stand-in for a real agent: it knows how to fix the worked task, and nothing else.
calc = pathlib.Path("calc.py")
if calc.exists():
    calc.write_text(calc.read_text(encoding="utf-8").replace("a - b", "a + b"), encoding="utf-8")
'''

README_MD = '''\
# {name}

A sealbench pack. Three files: `tasks.toml` (the tasks), `agent.py` (the agent) and this one.

```sh
sealbench eval {name} --agent "python3 {name}/agent.py {{prompt_file}}" --run-id {name}-1
sealbench verify bundles/{name}-1
sealbench report bundles/{name}-1
```

`eval` seals the pack, validates its oracles (the reference solution passes, an empty change
fails), writes and locks a scoring contract, runs the agent on every task in the sandbox,
runs the narration probe, and bundles the run; each step is printed as the command it stands
for. A run_id is used once: choose a new one for the next run.

Add tasks to `tasks.toml`; each needs an `id`, a `prompt`, its `workspace` files, `hidden`
tests (files named `test_*.py`, run by pytest) and a reference `solution`.
'''


def init_pack(folder: Path) -> list[Path]:
    """Write a new pack folder: ``tasks.toml``, ``agent.py`` and ``README.md``; returns them.

    Raises:
        UsageError: ``folder`` exists and is not empty, or its name is not a valid pack name.
    """
    from .formats import check_id

    try:
        check_id(folder.name)
    except ValueError as e:
        raise UsageError(f"{folder.name!r} cannot name a pack: {e}") from None
    if folder.is_symlink() or (folder.exists() and (not folder.is_dir() or any(folder.iterdir()))):
        raise UsageError(f"{folder} exists and is not an empty folder; choose a new name")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("tasks.toml", TASKS_TOML), ("agent.py", AGENT_PY), ("README.md", README_MD)):
        path = folder / name
        path.write_text(text.format(name=folder.name) if name != "agent.py" else text, encoding="utf-8")
        written.append(path)
    return written


def agent_files(command: str) -> tuple[str, list[str]]:
    """``command`` with each word naming an existing file by a relative path made absolute, and
    those files (to mount one by one)."""
    from .agents import split_template

    words, mounts = [], []
    for word in split_template(command):
        if not word.startswith("/") and "{" not in word and os.path.isfile(word):
            word = os.path.abspath(word)
            mounts.append(word)
        words.append(word)
    return " ".join(w if _PLAIN.fullmatch(w) else shlex.quote(w) for w in words), mounts


def eval_steps(pack: Path, command: str, run_id: str, *, label: str | None, host: str, out: Path,
               bundles: Path) -> list[tuple[str, list[str] | None]]:
    """The commands ``eval`` stands for, in order: ``(why, argv)``; an argv of None marks a step
    decided when its turn comes (validation, needed only without evidence for the seal)."""
    absolute, mounts = agent_files(command)
    contract = out / f"{run_id}.contract.json"
    run_dir = out / run_id
    new = ["contract", "new", str(pack), "-o", str(contract), "--host", host,
           "--agent-label", label or run_id, "--agent", absolute]
    for mount in mounts:
        new += ["--agent-mount", mount]
    return [
        ("seal the pack", ["pack", "seal", str(pack)]),
        ("validate its oracles", None),
        ("write the scoring contract", new),
        ("lock it before the run", ["contract", "lock", str(contract), "--run-id", run_id]),
        ("run the agent on every task", ["run", str(contract), "--out", str(run_dir)]),
        ("run the narration probe", ["probe", str(contract), "--out", str(run_dir)]),
        ("bundle the run", ["bundle", str(run_dir), "--out", str(bundles)]),
    ]


def run_eval(pack: Path, command: str, run_id: str, *, label: str | None, host: str, out: Path,
             bundles: Path, main: Callable[[Sequence[str]], int]) -> int:
    """Run :func:`eval_steps` through ``main`` (the CLI's), printing each; the first non-zero
    exit code ends it and is returned.

    Raises:
        UsageError: the run_id's contract or run directory already exists.
    """
    from .formats import check_id
    from .pack import load_pack

    try:
        check_id(run_id)
    except ValueError as e:
        raise UsageError(f"--run-id: {e}") from None
    for taken in (out / f"{run_id}.contract.json", out / run_id, bundles / run_id):
        if taken.exists():
            raise UsageError(f"{taken} exists: a run_id is used once; choose a new --run-id")

    def validated() -> bool:
        manifest = load_pack(pack).manifest
        return (manifest.validity is not None and manifest.seal is not None
                and manifest.validity.pack_sha256 == manifest.seal.pack_sha256)

    steps = eval_steps(pack, command, run_id, label=label, host=host, out=out, bundles=bundles)
    for why, argv in steps:
        if argv is None:
            if validated():
                print(f"# {why}: already validated for this seal")
                continue
            argv = ["pack", "validate", str(pack)]
        print(f"# {why}\n$ sealbench {' '.join(w if _PLAIN.fullmatch(w) else shlex.quote(w) for w in argv)}",
              flush=True)
        code = main(argv)
        if code != 0:
            print(f"sealbench: eval stopped at `sealbench {argv[0]}` (exit {code}); the steps before it stand",
                  flush=True)
            return code
    print(f"next: `sealbench verify {bundles / run_id}`, then `sealbench report {bundles / run_id}`")
    return 0
