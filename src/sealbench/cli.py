"""The ``sealbench`` command line: parse, call one library function, render, exit.

Exit codes: 0 done; 2 usage error; 3 refusal (bad input, another writer and a failed or full
disk included): no rate emitted; 4 verification failed (tampering found); 1 anything
unexpected (traceback with --debug); 130 interrupted by Ctrl-C (SIGINT); 141 the reader of
its output went away (``| head``); 143 stopped by SIGTERM. Imports of the library happen inside the handlers so ``sealbench --help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from .formats import AgentSpec, ModelEndpoint, ScoringContract
    from .pack import Pack

EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE, EXIT_REFUSED, EXIT_VERIFY = 0, 1, 2, 3, 4
EXIT_SIGINT, EXIT_SIGPIPE, EXIT_SIGTERM = 130, 141, 143

EPILOG = """exit codes:
  0    done
  2    usage error
  3    refusal, including bad input, a directory another command is writing, and a full or
       failing disk: no rate emitted
  4    verification failed (tampering found)
  1    anything unexpected (a bug; --debug prints the traceback)
  130  interrupted by Ctrl-C (SIGINT); a run continues with --resume
  141  the reader of the output went away (as with | head); a run continues with --resume
  143  stopped by SIGTERM; a run continues with --resume
"""


# Every command, by where it falls in the workflow: `sealbench --help` lists them from here
# (argparse has no groups of subcommands); a test keeps it equal to the parser's commands.
COMMAND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("set up", ("init", "pack seal", "pack check", "pack validate", "import", "mine", "env build", "agents list",
                "agents install", "keygen")),
    ("run", ("contract new", "contract lock", "agents check", "run", "probe", "eval", "demo")),
    ("inspect", ("show", "score", "report", "compare", "runs list", "runs show", "runs rebuild", "runs move")),
    ("publish", ("bundle", "verify")),
    ("admin", ("schema", "model-stub")),
)

# Each command's examples, shown at the end of its --help: the flow of `sealbench init mypack`
# (a test parses every line with the real parser).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ("sealbench demo",
         "sealbench init mypack",
         "sealbench eval mypack --agent \"python3 mypack/agent.py {prompt_file}\" --run-id mypack-1",
         "sealbench verify bundles/mypack-1",
         "sealbench report bundles/mypack-1"),
    "schema": ("sealbench schema contract", "sealbench schema journal-events"),
    "pack": ("sealbench pack seal mypack", "sealbench pack validate mypack", "sealbench pack check mypack"),
    "pack seal": ("sealbench pack seal mypack", "sealbench pack seal --update --drop-validity mypack"),
    "pack check": ("sealbench pack check mypack",),
    "pack validate": ("sealbench pack validate mypack", "sealbench pack validate mypack --repeat 5 --jobs 4"),
    "env": ("sealbench env build swebench-pack",),
    "env build": ("sealbench env build swebench-pack",),
    "import": ("sealbench import humaneval HumanEval.jsonl.gz -o humaneval-pack",
               "sealbench import mbpp mbpp.jsonl -o mbpp-pack --limit 50 --max-attempts 2",
               "sealbench import swebench swebench-lite.jsonl -o swebench-pack --repo clones/"),
    "mine": ("sealbench mine clones/click --since 2026-07-01 -o click-fresh",
             "sealbench mine click.bundle --since 2026-07-01 --until 2026-08-01 --max 20 -o click-fresh --json mined.json"),
    "contract": ("sealbench contract new mypack -o mypack.contract.json --agent \"python3 mypack/agent.py "
                 "{prompt_file}\" \\\n      --agent-label \"my agent 0.1\" --host \"this machine\"",
                 "sealbench contract lock mypack.contract.json --run-id mypack-1"),
    "contract new": ("sealbench contract new mypack -o mypack.contract.json --agent \"python3 mypack/agent.py "
                     "{prompt_file}\" \\\n      --agent-label \"my agent 0.1\" --host \"this machine\"",
                     "sealbench contract new mypack -o codex.contract.json --agent preset:codex --model gpt-5-mini \\\n"
                     "      --host \"this machine\" --max-model-calls 50 --wall-clock-s 900"),
    "contract lock": ("sealbench contract lock mypack.contract.json --run-id mypack-1",),
    "agents": ("sealbench agents list", "sealbench agents install codex",
               "sealbench agent check mypack.contract.json"),
    "agents check": ("sealbench agent check mypack.contract.json",
                     "sealbench agent check mypack.contract.json --task fix-add"),
    "agents list": ("sealbench agents list",),
    "agents install": ("sealbench agents install codex", "sealbench agents install aider --version 0.86.2"),
    "score": ("sealbench score mypack.contract.json runs/mypack-1",
              "sealbench score mypack.contract.json runs/mypack-1 --json"),
    "run": ("sealbench run mypack.contract.json --out runs/mypack-1",
            "sealbench run mypack.contract.json --resume runs/mypack-1",
            "sealbench run mypack.contract.json --out runs/mypack-1-replay --replay bundles/mypack-1"),
    "probe": ("sealbench probe mypack.contract.json --out runs/mypack-1",),
    "demo": ("sealbench demo", "sealbench demo --dir /tmp/sealbench-demo"),
    "init": ("sealbench init mypack",),
    "eval": ("sealbench eval mypack --agent \"python3 mypack/agent.py {prompt_file}\" --run-id mypack-1",),
    "bundle": ("sealbench bundle runs/mypack-1 --out bundles",
               "sealbench bundle runs/mypack-1 --out bundles --sign keys/me.key"),
    "verify": ("sealbench verify bundles/mypack-1", "sealbench verify bundles/mypack-1 --pubkey keys/me.pub"),
    "report": ("sealbench report bundles/mypack-1", "sealbench report runs/mypack-1 --out mypack-1-report"),
    "show": ("sealbench show runs/mypack-1", "sealbench show runs/mypack-1 --outcome fail --outcome timeout",
             "sealbench show bundles/mypack-1 fix-add --attempt 1"),
    "model-stub": ("sealbench model-stub --script replies.toml --port 8400",),
    "keygen": ("sealbench keygen keys/me",),
    "compare": ("sealbench compare bundles/mypack-1 bundles/mypack-2",
                "sealbench compare bundles/mypack-1 bundles/mypack-2 --html compare-1-2"),
    "runs": ("sealbench runs list", "sealbench runs show mypack-1"),
    "runs list": ("sealbench runs list",),
    "runs show": ("sealbench runs show mypack-1",),
    "runs rebuild": ("sealbench runs rebuild runs bundles",),
    "runs move": ("sealbench runs move runs/mypack-1 /data/runs/mypack-1",),
}


def _examples(prog: str) -> str | None:
    """The examples section of a command's help (``prog`` is its usage name)."""
    lines = EXAMPLES.get(prog.removeprefix("sealbench").strip())
    return None if lines is None else "examples:\n" + "".join(f"  {line}\n" for line in lines)


def _leaf_commands(action: argparse._SubParsersAction[Any], prefix: str = "") -> dict[str, str]:
    """``{"contract new": its help, ...}``: every command that runs something, by its full name."""
    found: dict[str, str] = {}
    for choice in action._choices_actions:
        name = f"{prefix}{choice.dest}"
        nested = _subcommands(action.choices[choice.dest])
        found.update(_leaf_commands(nested, f"{name} ") if nested else {name: choice.help or ""})
    return found


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


class _TopHelp(argparse.RawDescriptionHelpFormatter):
    """Lists the commands by workflow (COMMAND_GROUPS) instead of argparse's one flat list."""

    def _format_action(self, action: argparse.Action) -> str:
        if not isinstance(action, argparse._SubParsersAction):
            return super()._format_action(action)
        import textwrap

        leaves = _leaf_commands(action)
        groups = [*COMMAND_GROUPS]
        placed = {name for _, names in COMMAND_GROUPS for name in names}
        if set(leaves) - placed:  # a command missing from the table still shows (a test fails on it)
            groups.append(("other", tuple(sorted(set(leaves) - placed))))
        column = 2 + max(len(name) for name in leaves)
        width = max(self._width - 4 - column, 30)
        out: list[str] = []
        for title, names in groups:
            out.append(f"  {title}:\n")
            for name in names:
                lines = textwrap.wrap(leaves.get(name, ""), width, break_on_hyphens=False) or [""]
                out.append(f"    {name:<{column}}{lines[0]}\n")
                out.extend(f"    {'':<{column}}{line}\n" for line in lines[1:])
        return "".join(out)


def _sandbox_names() -> list[str]:
    """``auto`` and every registered sandbox backend (the registry loads none of them)."""
    from .sandboxes import names

    return names()


class _Parser(argparse.ArgumentParser):
    """Keeps the lines of descriptions and epilogs, ends each help with the command's examples,
    and names a command group's commands, not argparse's internal names, in errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        examples = _examples(self.prog)
        if examples is not None:
            self.epilog = f"{self.epilog}\n{examples}" if self.epilog else examples

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"sealbench: error: {self._plain(message)}\n")

    def _plain(self, message: str) -> str:
        """``message`` with the subcommands' internal name (``contract_command``) replaced by the
        commands to choose from."""
        sub = _subcommands(self)
        if sub is None:
            return message
        name = str(sub.metavar or sub.dest)  # how argparse names the subcommand in its messages
        given = re.match(rf"argument {re.escape(name)}: invalid choice: ('[^']*')", message)
        required = message.removeprefix("the following arguments are required:")
        if given:
            said = f"unknown command {given.group(1)}"
        elif required != message and name in required.replace(",", " ").split():
            said = f"`{self.prog}` needs a command"
        else:
            return message
        names = ", ".join(choice.dest for choice in sub._choices_actions)
        return f"{said}: choose one of: {names} (`{self.prog} --help` says what each does)"


def _show_outcomes() -> tuple[str, ...]:
    # From .outcomes, not .show: the parser is built on every start, and .outcomes imports only enum.
    from .outcomes import SHOWN_OUTCOMES

    return SHOWN_OUTCOMES


def _next(args: argparse.Namespace, *words: str | Path, why: str = "") -> None:
    """After a success, the usual next command: ``next: `sealbench WORDS` (why)``."""
    if getattr(args, "next_hints", True):  # eval runs the next commands itself
        import shlex

        command = " ".join(["sealbench", *map(shlex.quote, map(str, words))])
        print(f"next: `{command}`" + (f" ({why})" if why else ""))


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def cmd_schema(args: argparse.Namespace) -> int:
    from .formats import SCHEMAS

    if args.name == "journal-events":
        from .events import json_schema

        _print_json(json_schema())
        return EXIT_OK
    _print_json(SCHEMAS[args.name].model_json_schema())
    return EXIT_OK


def cmd_pack_seal(args: argparse.Namespace) -> int:
    from .errors import UsageError
    from .pack import seal_pack

    changes: list[str] = []
    if args.drop_validity and not args.update:
        raise UsageError("--drop-validity goes with --update: `sealbench pack seal --update --drop-validity PACK`")
    from .importers.tasks_file import expand_in_place

    expanded = expand_in_place(Path(args.pack))
    if expanded is not None:
        print(f"expanded {expanded.name} into {args.pack}/tasks/ (derived: edit {expanded.name}, not the layout)")
    pack = seal_pack(Path(args.pack), update=args.update, drop_validity=args.drop_validity, changes=changes)
    if args.update or len(changes) != len(pack.tasks):
        for line in changes or ["nothing changed since the last seal"]:
            print(f"  {line}")
    print(f"sealed {len(pack.tasks)} task(s) in {pack.root.name}: {pack.sealed_digest}")
    if pack.manifest.validity is None:
        _next(args, "pack", "validate", args.pack, why="a contract needs a validated pack")
    return EXIT_OK


def cmd_pack_check(args: argparse.Namespace) -> int:
    from .pack import check_pack

    pack = check_pack(Path(args.pack))
    print(f"ok: {len(pack.tasks)} task(s), pack digest {pack.sealed_digest}")
    return EXIT_OK


def cmd_pack_validate(args: argparse.Namespace) -> int:
    from .validate import validate_pack

    validity = validate_pack(Path(args.pack), repeat=args.repeat, jobs=args.jobs, sandbox=args.sandbox,
                             progress=False if args.no_progress else None, ray=_ray_options(args))
    bad = {tid: ev for tid, ev in validity.tasks.items() if not ev.valid}
    print(f"{len(validity.tasks) - len(bad)} of {len(validity.tasks)} task oracles valid "
          f"(reference passes and empty change fails, {validity.repeat} runs each; no trivial solution passes; "
          f"sandbox {validity.sandbox})")
    for tid, ev in bad.items():
        print(f"  invalid: {tid}: {ev.reason}" + (f" ({ev.why})" if ev.why else ""))
    if validity.tasks and len(bad) == len(validity.tasks):
        print(f"sealbench: refused: no task of {args.pack} has a valid oracle, so no contract can measure it; "
              "fix the oracles (the reasons above), seal and validate again", file=sys.stderr)
        return EXIT_REFUSED
    _next(args, "contract", "new", args.pack, "-o", f"{Path(args.pack).name}.contract.json", "--agent", "CMD",
          "--agent-label", "LABEL", "--host", "HOST", why="the agent's command, its name and where it runs")
    return EXIT_OK


def _repo_options(values: Sequence[str] | None) -> tuple[str | None, list[tuple[str, str]]]:
    """``--repo`` values: at most one PATH, and any number of owner/name=PATH."""
    from .errors import UsageError

    plain: list[str] = []
    named: list[tuple[str, str]] = []
    for value in values or []:
        name, eq, path = value.partition("=")
        if eq and re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", name):
            named.append((name, path))
        else:
            plain.append(value)
    if len(plain) > 1:
        raise UsageError(f"--repo PATH given {len(plain)} times; name the others: --repo owner/name=PATH")
    return (plain[0] if plain else None), named


def cmd_import(args: argparse.Namespace) -> int:
    from .importers import import_pack

    repo, repos = _repo_options(args.repo)
    pack = import_pack(args.kind, Path(args.source), Path(args.output), repo=repo, repos=repos or None,
                       python=args.python, env_spec=args.env_spec,
                       max_attempts=args.max_attempts, limit=args.limit, wall_clock_s=args.wall_clock_s)
    print(f"imported {len(pack.tasks)} task(s) into {pack.root}, sealed: {pack.sealed_digest}")
    print(pack.manifest.description)
    return EXIT_OK


def cmd_mine(args: argparse.Namespace) -> int:
    from .mine import MineOptions, mine, write_report

    report = mine(Path(args.repo), Path(args.output), MineOptions(
        since=args.since, until=args.until, max_candidates=args.max, repeat=args.repeat, repository=args.repository,
        name=args.name, python=args.python, sandbox=args.sandbox, say=lambda line: print(line, flush=True)))
    print(report.table())
    if args.json is not None:
        write_report(report, Path(args.json))
    if report.pack is None:
        print(f"no candidate kept: nothing written at {args.output}")
        return EXIT_REFUSED
    print(f"wrote {len(report.kept)} validated task(s) to {report.pack}, every one committed after {args.since}")
    _next(args, "contract", "new", args.output, "--fresh-after", args.since, "-o", "CONTRACT",
          why="the contract locks the date; every report then states it")
    return EXIT_OK


def cmd_env_build(args: argparse.Namespace) -> int:
    from .environments import build_all, cache_root
    from .pack import check_pack

    pack = check_pack(Path(args.pack))
    print(f"building the environments of {pack.manifest.name} in {cache_root()} (uv, from the package index)",
          flush=True)
    build_all(pack, say=lambda line: print(line, flush=True))
    return EXIT_OK


def _contract_agent(args: argparse.Namespace, preset_name: str | None) -> tuple[AgentSpec | None,
                                                                               list[ModelEndpoint] | None]:
    """The agent ``contract new`` names, and the model endpoint its preset declares."""
    from .formats import AgentSpec

    if preset_name is not None:
        from .presets import agent_for, endpoint_for

        agent, preset = agent_for(preset_name, args.model, version=args.agent_version, label=args.agent_label)
        return agent, [endpoint_for(preset, args.model, args.model_base_url, args.model_key_env)]
    if args.agent:
        agent = AgentSpec(label=args.agent_label, command=args.agent, mounts=list(args.agent_mount))
        if not agent.command.startswith("builtin:"):
            from .preflight import refuse_missing_paths

            refuse_missing_paths(agent.command, agent.mounts)  # a typo'd path would spend the run_id
        return agent, None
    return None, None


def _warn_about_the_new_contract(contract: ScoringContract, pack: Pack, agent: AgentSpec | None) -> None:
    """What would bite later, said now: caps that leave grading little room, an agent command
    that cannot start, oracles that run pytest unguarded."""
    from .contract import headroom_warnings
    from .pytest_oracle import runs_pytest_unguarded

    for line in headroom_warnings(contract, pack):
        print(line)
    if agent is not None and not agent.command.startswith("builtin:"):
        _warn_if_agent_cannot_start(agent)
    unguarded = [t for t in contract.task_ids if runs_pytest_unguarded(pack.tasks[t].record.oracle_cmd)]
    if unguarded:
        print(f"note: {len(unguarded)} task(s) run pytest unguarded (an oracle_cmd from before sealbench-pytest, "
              f"e.g. {unguarded[0]}): the workspace's pytest configuration is honoured; re-import the pack "
              "to guard them")


def cmd_contract_new(args: argparse.Namespace) -> int:
    from .contract import new_contract
    from .errors import UsageError
    from .files import model_json, write_atomic
    from .pack import check_pack
    from .scratch import sweep_temp_files

    preset_name = args.agent.removeprefix("preset:") if args.agent and args.agent.startswith("preset:") else None
    if preset_name is None and bool(args.agent) != bool(args.agent_label):
        raise UsageError("--agent and --agent-label go together")
    if (preset_name is None) != (args.model is None):
        raise UsageError("--agent preset:NAME and --model MODEL go together")
    out = Path(args.output)
    if out.exists() and not args.force:
        raise UsageError(f"{out} exists; pass --force to overwrite an unlocked draft")
    pack = check_pack(Path(args.pack))
    agent, endpoints = _contract_agent(args, preset_name)
    contract, left_out = new_contract(
        pack,
        out,
        args.task or (),
        host=args.host,
        model_access=args.model_access,
        terms_read_on=args.terms_read_on,
        agent=agent,
        max_attempts=args.max_attempts,
        wall_clock_s=args.wall_clock_s,
        feedback=args.feedback,
        attempt_gap_s=args.attempt_gap_s,
        model_caps={k: v for k, v in (("max_model_calls", args.max_model_calls),
                                      ("max_model_tokens", args.max_model_tokens),
                                      ("max_model_cost", args.max_model_cost)) if v is not None},
        sandbox_caps={k: v << 20 for k, v in (("workspace_bytes", args.workspace_mib),
                                              ("tmp_bytes", args.tmp_mib)) if v is not None},
        narration_probe=not args.no_narration_probe,
        oracle_validity="unavailable" if args.oracle_validity_unavailable else "required",
        seed=args.seed,
        flagged_pass="counted" if args.count_flagged_passes else "not_counted",
        fresh_after=args.fresh_after,
    )
    if endpoints is not None:
        contract = contract.model_copy(update={"model_endpoints": endpoints})
    if args.min_power is not None:
        if not 0 < args.min_power < 1:
            raise UsageError(f"--min-power must be between 0 and 1 (for example 0.8), not {args.min_power:g}")
        contract = contract.model_copy(update={"tie_rule": contract.tie_rule.model_copy(
            update={"min_power": args.min_power})})
    sweep_temp_files(out.parent)
    write_atomic(out, model_json(contract))
    print(f"wrote unlocked contract {out}: {len(contract.task_ids)} task(s) in the denominator")
    from .freshness import statement

    fresh = statement(contract)
    if fresh is not None:
        print(f"{fresh}: the date is locked with the contract")
    if endpoints is not None:
        e = endpoints[0]
        print(f"model endpoint {e.name!r}: {e.style} at {e.base_url}, key read from ${e.key_env} at run; "
              f"check model_endpoints (base_url, key_env, prices) in {out} before the lock")
    for tid, why in left_out.items():
        print(f"left out before lock: {tid}: {why}")
    _warn_about_the_new_contract(contract, pack, agent)
    from .contract import UNSPECIFIED

    if contract.access_class is None or contract.access_class.host in UNSPECIFIED:  # lock refuses it: say so now
        _next(args, *(str(w) for w in args.command_line[1:]), *(() if args.force else ("--force",)), "--host", "HOST",
              why="where the run happens: the lock needs it")
    else:
        _next(args, "contract", "lock", out, "--run-id", "RUN_ID",
              why="a new id; check the contract first: nothing in it changes after the lock")
    return EXIT_OK


def _warn_if_agent_cannot_start(agent: Any) -> None:
    """What ``run`` would refuse about the agent's command, said now, before the lock."""
    from .errors import SealbenchError
    from .grading import command_path
    from .preflight import problems
    from .sandbox import open_sandbox

    try:
        sandbox = open_sandbox("auto")
        found = problems(agent.command, agent.mounts, sandbox, command_path())
    except SealbenchError as e:
        print(f"note: the agent's command was not checked in a sandbox here: {e}")
        return
    for problem in found:
        print(f"warning: {problem}; run will refuse this contract until then")


def cmd_agent_check(args: argparse.Namespace) -> int:
    from .agent_check import check_agent

    result = check_agent(Path(args.contract), args.task, sandbox=args.sandbox,
                         pack=Path(args.pack) if args.pack else None)
    for line in result.lines():
        print(line)
    return EXIT_OK if result.ok else EXIT_REFUSED


def cmd_agents_list(args: argparse.Namespace) -> int:
    from .presets import agents_dir, list_installed, load_preset, preset_names

    installed = list_installed()
    print(f"agent presets (installs in {agents_dir()}):")
    for name in preset_names():
        preset = load_preset(name)
        mine = [i for i in installed if i.name == name]
        where = ", ".join(f"{i.version} ({i.bytes / 1e6:.0f} MB)" for i in mine) or "not installed"
        print(f"  {name:<16} {preset.install.registry} {preset.install.package}=={preset.install.version} "
              f"[{preset.api_style}]  installed: {where}")
    return EXIT_OK


def cmd_agents_install(args: argparse.Namespace) -> int:
    from .presets import install, load_preset

    preset = load_preset(args.name)
    version = args.install_version or preset.install.version
    print(f"installing {args.name} ({preset.install.registry} {preset.install.package} {version}) ...", flush=True)
    done = install(args.name, version)
    print(f"installed {done.name} {done.version} in {done.root} ({done.bytes / 1e6:.0f} MB, {done.seconds:.0f} s)")
    _next(args, "contract", "new", "PACK", "-o", "CONTRACT", "--agent", f"preset:{done.name}", "--model", "MODEL",
          *(() if version == preset.install.version else ("--agent-version", version)))
    return EXIT_OK


def cmd_contract_lock(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from .contract import headroom_warnings, load_contract, lock_contract, pack_path
    from .files import model_json, write_atomic
    from .pack import check_pack
    from .scratch import sweep_temp_files

    path = Path(args.contract)
    contract = load_contract(path)
    pack = None
    if contract.pack is not None and not (contract.locked_at or contract.run_id):
        pack = check_pack(pack_path(contract, path), contract.task_ids)
    locked = lock_contract(contract, args.run_id, datetime.now(UTC), pack)
    sweep_temp_files(path.parent)
    write_atomic(path, model_json(locked))
    for line in headroom_warnings(locked, pack) if pack is not None else ():
        print(line)
    print(f"locked {locked.run_id} at {locked.locked_at}: {locked.contract_sha256}")
    _next(args, "run", path, "--out", f"runs/{locked.run_id}")
    return EXIT_OK


def cmd_score(args: argparse.Namespace) -> int:
    from .contract import load_contract
    from .errors import Refusal, ScoreRefusal
    from .progress import Steps
    from .score import score
    from .scoring_io import events_from

    contract = load_contract(Path(args.contract))
    where = Path(args.events)
    with Steps(False if args.no_progress else None, "score") as steps:
        events = events_from(where, contract, steps)
    summary = where.is_dir() and not args.json
    try:
        rate = score(contract, events)
    except Refusal as e:
        if summary:  # the why comes before the refusal, as run prints it: a harness error's cause
            _print_run_cards(contract.run_id, where)
        setup = _never_started(where) if where.is_dir() else None
        if setup is not None:  # the refusal names the path and the way out, not only "harness errors"
            raise ScoreRefusal(f"{e}; {setup}") from None
        raise
    if args.json:
        _print_json(rate.model_dump(mode="json"))
        return EXIT_OK
    from .render import rate_lines

    if summary:
        # The run's summary, as run printed it: the scorecards, why the others did not pass, the rate.
        _print_run_cards(contract.run_id, where)
    for line in rate_lines(rate):
        print(line)
    from .freshness import statement

    fresh = statement(contract)
    if fresh is not None:
        print(fresh)
    return EXIT_OK


def _never_started(run_dir: Path) -> str | None:
    """The run's first harness error saying its agent never started, if its journal reads."""
    from .bundle import never_started_error
    from .journal import read_chain

    try:
        return never_started_error(read_chain(run_dir / "journal.jsonl").events)
    except Exception:  # the refusal stands as score said it; this only adds to its words
        return None


def _print_run_cards(run_id: str | None, run_dir: Path) -> None:
    from .render import print_cards_and_why, read_scorecards

    print_cards_and_why(run_id, run_dir, read_scorecards(run_dir))


def _executor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where the attempts (or oracles) run: this machine's pool, or the nodes of a Ray cluster, "
                        "each in its own sandbox, with this process alone writing (default: local)")
    p.add_argument("--address", default="auto",
                   help="with --executor ray: the cluster (auto: the one this machine belongs to or RAY_ADDRESS; "
                        "HOST:PORT; ray://HOST:PORT; local: a private one on this machine) (default: auto)")
    p.add_argument("--ray-resources", metavar="JSON", default='{"CPU": 1}',
                   help="with --executor ray: what each node's runner reserves; only nodes that offer it run "
                        "attempts (default: {\"CPU\": 1})")
    p.add_argument("--ray-schedule-timeout", metavar="S", type=float, default=60.0,
                   help="with --executor ray: seconds a node's runner may wait to be scheduled before the run "
                        "refuses (default: 60)")


def _ray_options(args: argparse.Namespace) -> Any:
    from .errors import UsageError

    if args.executor != "ray":
        for flag, value, default in (("--address", args.address, "auto"),
                                     ("--ray-resources", args.ray_resources, '{"CPU": 1}'),
                                     ("--ray-schedule-timeout", args.ray_schedule_timeout, 60.0)):
            if value != default:
                raise UsageError(f"{flag} applies to --executor ray only")
        return None
    from .ray_executor import RayOptions

    try:
        resources = json.loads(args.ray_resources)
    except json.JSONDecodeError as e:
        raise UsageError(f"--ray-resources: not JSON ({e.msg}); e.g. '{{\"CPU\": 1}}'") from None
    if not isinstance(resources, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for k, v in resources.items()):
        raise UsageError("--ray-resources: an object of resource names to non-negative numbers, e.g. '{\"CPU\": 1}'")
    if args.ray_schedule_timeout <= 0:
        raise UsageError("--ray-schedule-timeout must be positive")
    return RayOptions(address=args.address, resources={k: float(v) for k, v in resources.items()},
                      schedule_timeout_s=args.ray_schedule_timeout)


def _run_options(args: argparse.Namespace) -> Any:
    from .runner import RunOptions

    opts = RunOptions(sandbox=args.sandbox, keep_work=args.keep_work,
                      workspace_quota=not args.no_workspace_quota, pack=Path(args.pack) if args.pack else None,
                      ray=_ray_options(args))
    if args.jobs is not None:
        if args.jobs < 1:
            from .errors import UsageError

            raise UsageError("--jobs must be at least 1")
        opts.jobs = args.jobs
    if args.no_progress:
        opts.progress = False
    return opts


def cmd_run(args: argparse.Namespace) -> int:
    from .errors import UsageError
    from .preflight import check_ahead

    # The sandbox's smoke test and the agent command's check in it run while the runner imports
    # and checks the pack.
    check_ahead(args.contract, args.sandbox)
    from .render import load_table_printer, print_run_summary

    if args.resume and args.out and Path(args.resume) != Path(args.out):
        raise UsageError("--resume names the run directory; do not also pass a different --out")
    run_dir = Path(args.resume or args.out or "")
    if not (args.resume or args.out):
        raise UsageError("pass --out RUN_DIR (or --resume RUN_DIR)")
    opts = _run_options(args)
    opts.resume = bool(args.resume)
    opts.replay = Path(args.replay) if args.replay else None
    resume = (f"sealbench run {args.contract} --resume {run_dir}" + (f" --pack {args.pack}" if args.pack else "")
              + (f" --replay {args.replay}" if args.replay else ""))
    # While the agents run, not after them: the summary's table printer.
    result = _execute_resumable(resume, Path(args.contract), run_dir, opts, command_line=args.command_line,
                                on_started=lambda _journal: load_table_printer())
    if result.interrupted:
        print(f"interrupted; continue with: {resume}", file=sys.stderr)
        return EXIT_SIGTERM if result.interrupted_by == "SIGTERM" else EXIT_SIGINT
    code = print_run_summary(Path(args.contract), run_dir, result)
    if code == EXIT_OK:
        _next_after_run(args, run_dir)
    return code


def _next_after_run(args: argparse.Namespace, run_dir: Path) -> None:
    """Why tasks did not pass, when some did not; else the declared probe, else the bundle."""
    import shlex

    from .bundle import probe_declared
    from .contract import load_contract

    then: tuple[str | Path, ...] = ("bundle", run_dir, "--out", "bundles")
    why = "what a stranger needs to verify the run"
    if probe_declared(load_contract(Path(args.contract))) and not (run_dir / "narration_probe.json").is_file():
        then = ("probe", args.contract, "--out", run_dir)
        why = "the contract declares the narration probe; a bundle needs it"
    rate = json.loads((run_dir / "rate.json").read_text(encoding="utf-8"))
    missed = rate["n"] - rate["task_pass_count"]
    if missed:
        _next(args, "show", run_dir, why=f"why {missed} task(s) did not pass; then "
              f"`sealbench {' '.join(shlex.quote(str(w)) for w in then)}`")
    else:
        _next(args, *then, why=why)


def _execute_resumable(resume: str, contract: Path, run_dir: Path, opts: Any, **kwargs: Any) -> Any:
    """The runner's execute; a storage failure's refusal says how to go on once it is fixed."""
    from .errors import StorageError
    from .runner import execute

    try:
        return execute(contract, run_dir, opts, **kwargs)
    except StorageError as e:
        journal = (run_dir / "probe" if kwargs.get("probe") else run_dir) / "journal.jsonl"
        again = resume if journal.is_file() else "the same command again"
        raise StorageError(f"{e}; once the storage works again, run {again}") from e


def cmd_probe(args: argparse.Namespace) -> int:
    from .sandbox import open_ahead

    open_ahead(args.sandbox)  # as in cmd_run
    opts = _run_options(args)
    opts.resume = args.resume
    run_dir = Path(args.out)
    resume = f"sealbench probe {args.contract} --out {run_dir} --resume" + (f" --pack {args.pack}" if args.pack else "")
    result = _execute_resumable(resume, Path(args.contract), run_dir, opts, probe=True,
                                command_line=args.command_line)
    if result.interrupted:
        print(f"interrupted; continue with: {resume}", file=sys.stderr)
        return EXIT_SIGTERM if result.interrupted_by == "SIGTERM" else EXIT_SIGINT
    summary = json.loads((run_dir / "narration_probe.json").read_text(encoding="utf-8"))
    print(summary["sentence"])
    print(f"  {summary['emitted_no_patch']} of {summary['n']} task(s) left the workspace unchanged, as the probe "
          f"asks (a control beside the rate, never part of it)")
    for tid in summary["failed"]:
        print(f"  changed the workspace although asked only to summarise: {tid}")
    _next(args, "bundle", run_dir, "--out", "bundles", why="what a stranger needs to verify the run")
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from .first_run import init_pack

    folder = Path(args.pack)
    for path in init_pack(folder):
        print(f"wrote {path}")
    _next(args, "eval", folder, "--agent", f"python3 {folder}/agent.py {{prompt_file}}", "--run-id",
          f"{folder.name}-1", why=f"see {folder}/README.md")
    return EXIT_OK


def cmd_eval(args: argparse.Namespace) -> int:
    from .first_run import run_eval

    return run_eval(Path(args.pack), args.agent, args.run_id, label=args.agent_label, host=args.host,
                    out=Path(args.out), bundles=Path(args.bundles),
                    main=lambda argv: main(argv, next_hints=False))


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if args.agent is not None:
        from .demo import run_agent_demo

        return run_agent_demo(Path(args.dir), args.agent, sandbox=args.sandbox)
    return run_demo(Path(args.dir), sandbox=args.sandbox)


def cmd_bundle(args: argparse.Namespace) -> int:
    from .bundle import make_bundle
    from .runs_index import record_bundle

    sign_key = Path(args.sign) if args.sign else None
    out = make_bundle(Path(args.run_dir), Path(args.out), sign_key=sign_key, public=args.public)
    record_bundle(out, "made here, not verified yet (sealbench verify BUNDLE)")
    print(f"wrote bundle {out}" + (" (signed: SHA256SUMS.sig)" if sign_key else ""))
    if args.public:
        print(f"wrote its sealed part {out}.sealed: the hidden tests' output; keep it private while the pack is in use")
    pubkey = sign_key.with_suffix(".pub") if sign_key and sign_key.suffix == ".key" else "PUBKEY"  # keygen's pair
    _next(args, "verify", out, *(("--pubkey", pubkey) if sign_key else ()))
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from .bundle import verify_bundle
    from .errors import VerificationFailed
    from .progress import Steps
    from .runs_index import record_bundle, verify_status

    bundle = Path(args.bundle)
    try:
        with Steps(False if args.no_progress else None, "verify") as steps:
            report = verify_bundle(bundle, pubkey=Path(args.pubkey) if args.pubkey else None,
                                   pack=Path(args.pack) if args.pack else None,
                                   sealed=Path(args.sealed) if args.sealed else None, steps=steps)
    except VerificationFailed as e:
        record_bundle(bundle, f"does not verify: {len(e.problems)} problem(s); first: {e.problems[0]}")
        raise
    said = record_bundle(bundle, verify_status(report.signed, report.signature))
    for line in report.lines():
        print(line)
    if "ANOTHER RUN" in said:
        print(f"runs index on this machine: {said.split('; but ', 1)[-1]}")
    _next(args, "report", bundle, why="report.md and report.html")
    return EXIT_OK


def cmd_model_stub(args: argparse.Namespace) -> int:
    from .model_stub import serve_forever

    return serve_forever(Path(args.script), args.port, args.latency_ms, args.require_key_env)


def cmd_keygen(args: argparse.Namespace) -> int:
    from .signing import keygen

    private, public = keygen(Path(args.out_prefix))
    print(f"wrote {private} (private, mode 0600: sign with `sealbench bundle RUN_DIR --sign {private}`)")
    print(f"wrote {public} (public: publish it; `sealbench verify BUNDLE --pubkey {public}`)")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from .compare import compare

    bundles = [Path(b) for b in (args.a, *args.others)]
    report = compare(bundles, allow_mixed_isolation=args.allow_mixed_isolation,
                     require_signed=args.require_signed, pubkeys=[Path(k) for k in args.pubkey])
    if args.html:
        from .compare_page import write_compare_page

        page = write_compare_page(bundles, report, Path(args.html))
        print(f"wrote {page}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        _print_json(report.to_json())
    else:
        for line in report.lines():
            print(line)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from .lock import hold_reader
    from .progress import Steps
    from .report import write_report

    # A run directory is read whole, under its reader lock: never while a run writes it.
    with (hold_reader(Path(args.bundle), "report") or contextlib.nullcontext(),
          Steps(False if args.no_progress else None, "report") as steps):
        md, html = write_report(Path(args.bundle), Path(args.out) if args.out else None, steps=steps)
    print(f"wrote {md} and {html}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from .lock import hold_reader
    from .show import read_run, table_lines, task_lines, to_json

    where = Path(args.run)
    # A run directory is read under its reader lock: never while a run writes it.
    with hold_reader(where, "show") or contextlib.nullcontext():
        shown = read_run(where)
        outcomes = tuple(args.outcome or ())
        if args.json:
            sys.stdout.write(to_json(shown, args.task, args.attempt, outcomes, full=args.full) + "\n")
        elif args.task is None:
            for line in table_lines(shown, outcomes):
                print(line)
        else:
            for line in task_lines(shown, args.task, args.attempt, full=args.full):
                print(line)
    return EXIT_OK


def cmd_runs_list(args: argparse.Namespace) -> int:
    from .runs_index import list_runs

    for line in list_runs().list_lines():
        print(line)
    return EXIT_OK


def cmd_runs_show(args: argparse.Namespace) -> int:
    from .runs_index import show_run

    for line in show_run(args.run_id).lines():
        print(line)
    return EXIT_OK


def cmd_runs_move(args: argparse.Namespace) -> int:
    from .runs_index import move_run

    old, new = Path(args.old).resolve(), Path(args.new).resolve()
    run_id = move_run(old, new)
    print(f"run {run_id} moved: it continues in {new} (`sealbench run CONTRACT --resume {new}`); "
          f"{old} is never resumed")
    return EXIT_OK


def cmd_runs_rebuild(args: argparse.Namespace) -> int:
    from .runs_index import rebuild

    for line in rebuild([Path(d) for d in args.dirs]).lines():
        print(line)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; handlers are looked up from ``func``."""
    parser = _Parser(
        prog="sealbench",
        description="Measure coding agents honestly: a scorecard with every knob, or a refusal.",
        epilog=EPILOG,
        formatter_class=_TopHelp,
    )
    parser.add_argument("--debug", action="store_true", help="print tracebacks of unexpected errors")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, title="commands", metavar="COMMAND")

    p = sub.add_parser("schema", help="print the JSON Schema of a format")
    p.add_argument("name", choices=["task", "pack", "contract", "journal-event", "journal-events", "scorecard", "rate",
                                    "events"], help="the format: one of %(choices)s")
    p.set_defaults(func=cmd_schema)

    pack = sub.add_parser("pack", help="seal or check a task pack").add_subparsers(
        dest="pack_command", parser_class=_Parser, required=True
    )
    p = pack.add_parser("seal", help="compute digests, fill placeholders, write the seal")
    p.add_argument("pack", help="the pack directory (pack.json, prompts/, tasks/)")
    p.add_argument("--update", action="store_true",
                   help="take edited hidden tests as they are now and print what changed since the last seal "
                        "(default: refuse hidden tests that changed)")
    p.add_argument("--drop-validity", action="store_true",
                   help="with --update on a validated pack: remove its validity evidence, which no longer describes "
                        "it (then run `sealbench pack validate PACK` again)")
    p.set_defaults(func=cmd_pack_seal)
    p = pack.add_parser("check", help="verify a sealed pack without writing")
    p.add_argument("pack", help="the sealed pack directory")
    p.set_defaults(func=cmd_pack_check)
    p = pack.add_parser("validate", help="prove each oracle discriminates: reference passes, empty change "
                        "and trivial solutions fail")
    p.add_argument("pack", help="the sealed pack directory; the evidence is written into it")
    p.add_argument("--repeat", type=int, default=3, help="grades of each kind per task (default 3)")
    p.add_argument("--jobs", type=int, default=2, help="tasks validated at once (default 2)")
    p.add_argument("--sandbox", choices=_sandbox_names(), default="auto",
                   help="where the oracles run (default: auto, the first sandbox that isolates and starts here; never none)")
    p.add_argument("--no-progress", action="store_true", help="plain lines instead of a progress bar")
    _executor_arguments(p)
    p.set_defaults(func=cmd_pack_validate)

    env = sub.add_parser("env", help="build the Python environments a pack's repository tasks run in").add_subparsers(
        dest="env_command", parser_class=_Parser, required=True
    )
    p = env.add_parser("build", help="build each environment the pack's tasks name with uv (cached by the spec's digest)")
    p.add_argument("pack", help="the sealed pack directory")
    p.set_defaults(func=cmd_env_build)

    p = sub.add_parser("import", help="import a public task set (HumanEval, MBPP, Exercism, SWE-bench, ...) as a sealed pack")
    p.add_argument("kind", help="humaneval, humanevalplus, mbpp, mbppplus, exercism, swebench, tasks (or a registered importer)")
    p.add_argument("source", help="the data file, or the track directory for exercism")
    p.add_argument("-o", "--output", required=True, metavar="PACK", help="new pack directory (must not exist)")
    p.add_argument("--repo", metavar="[OWNER/NAME=]PATH", action="append",
                   help="swebench: a local clone of the instances' repository, or a directory of clones "
                   "(owner__name, name or owner/name under it); OWNER/NAME=PATH names the clone of one "
                   "repository (repeatable; default: none)")
    p.add_argument("--python", metavar="VERSION",
                   help="swebench: the Python version of the tasks' environments (default: the one running sealbench)")
    p.add_argument("--env-spec", metavar="FILE",
                   help="swebench: JSON overrides of the environments per \"owner/name\" or \"owner/name@version\" "
                   "(name, python, requirements, pins, source, import_roots; default: none)")
    p.add_argument("--max-attempts", type=int, metavar="N", help="every task's retry ceiling (default 1)")
    p.add_argument("--limit", type=int, metavar="N", help="import only the first N records (all are checked)")
    p.add_argument("--wall-clock-s", type=float, metavar="S",
                   help="every task's wall-clock ceiling (default: the importer's)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("mine", help="mine fresh repository tasks from a git history's commits after a date")
    p.add_argument("repo", help="a local clone or a git bundle of the repository")
    p.add_argument("--since", required=True, metavar="DATE",
                   help="keep commits whose author and committer dates are both after DATE (YYYY-MM-DD is "
                   "midnight UTC, or an ISO 8601 time)")
    p.add_argument("--until", metavar="DATE", help="and neither of them after DATE (default: no bound)")
    p.add_argument("--max", type=int, metavar="N", help="examine at most the first N candidates (default: all)")
    p.add_argument("-o", "--output", required=True, metavar="PACK", help="new pack directory (must not exist)")
    p.add_argument("--repeat", type=int, default=3, metavar="N",
                   help="runs of the tests before and after each fix, and pack validate's repeats (default 3)")
    p.add_argument("--repository", metavar="NAME",
                   help="the repository's name in the tasks' provenance (default: the clone's directory name)")
    p.add_argument("--name", metavar="NAME", help="the pack name (default: REPOSITORY-fresh-SINCE)")
    p.add_argument("--python", metavar="VERSION",
                   help="the Python version of the tasks' environments (default: the one running sealbench)")
    p.add_argument("--sandbox", default="auto", choices=_sandbox_names(),
                   help="where the tests run (default: auto)")
    p.add_argument("--json", metavar="FILE", help="also write the kept/dropped report as JSON to FILE")
    p.set_defaults(func=cmd_mine)

    con = sub.add_parser("contract", help="write or lock a scoring contract").add_subparsers(
        dest="contract_command", parser_class=_Parser, required=True
    )
    p = con.add_parser("new", help="write an unlocked contract over an explicit denominator")
    # Grouped as the contract is: what runs, what it may spend, where, and what is reported beside it.
    agent = p.add_argument_group("the agent")
    model = p.add_argument_group("the model endpoint (with --agent preset:NAME)")
    budget = p.add_argument_group("the budget and caps (per task)")
    access = p.add_argument_group("the access class")
    controls = p.add_argument_group("controls and the tie rule")
    tasks = p.add_argument_group("the denominator")
    output = p.add_argument_group("output")
    p.add_argument("pack", help="the sealed pack the contract measures")
    output.add_argument("-o", "--output", required=True, metavar="CONTRACT", help="the contract file to write")
    tasks.add_argument("--task", action="append", help="a task id of the denominator (repeat); default: every valid task")
    access.add_argument("--host", help="where the run happens (required before lock)")
    access.add_argument("--model-access", help="how the model is reached")
    access.add_argument("--terms-read-on", help="ISO date the host's terms were read")
    agent.add_argument("--agent-label", help="name and version of the agent under test")
    agent.add_argument("--agent", help="command template, builtin:reference / builtin:noop, or preset:NAME (an "
                   "installed agent preset: sealbench agents list)")
    agent.add_argument("--agent-mount", action="append", default=[], help="host path the agent needs, read-only")
    model.add_argument("--model", help="with --agent preset:NAME: the model the agent asks for")
    agent.add_argument("--agent-version", metavar="V",
                   help="with --agent preset:NAME: the installed version to lock (default: the preset's pin)")
    model.add_argument("--model-base-url", metavar="URL", help="with --agent preset:NAME: the model endpoint's "
                   "upstream base URL (default: the provider's for the preset's API style)")
    model.add_argument("--model-key-env", metavar="NAME", help="with --agent preset:NAME: the host variable holding "
                   "the key (default: OPENAI_API_KEY or ANTHROPIC_API_KEY, by API style)")
    budget.add_argument("--max-attempts", type=int, metavar="N",
                   help="the retry cap per task (default: the tasks' own, when they agree)")
    budget.add_argument("--wall-clock-s", type=float, metavar="S",
                   help="the wall-clock cap per task, grading included (default: the tasks' own, when they agree)")
    budget.add_argument("--feedback", choices=["none", "pass_fail", "visible_tests"], default="none",
                   help="what the agent sees between attempts; never hidden-test output (default: none)")
    budget.add_argument("--attempt-gap-s", type=float, metavar="SECONDS",
                   help="start each retry only at a whole multiple of SECONDS after the previous attempt "
                        "ended, so grading time does not reach the agent (counts against the wall clock)")
    budget.add_argument("--max-model-calls", type=int, metavar="N",
                   help="per task, at most N model calls forwarded through the gateway, over its attempts "
                        "(default: no cap)")
    budget.add_argument("--max-model-tokens", type=int, metavar="N",
                   help="per task, refuse further model calls once N tokens (input plus output, as reported) "
                        "are used (default: no cap)")
    budget.add_argument("--max-model-cost", type=float, metavar="AMOUNT",
                   help="per task, refuse further model calls once they cost AMOUNT by the locked prices "
                        "(default: no cap; needs a price for every allowed model)")
    budget.add_argument("--workspace-mib", type=int, metavar="MIB",
                   help="each task's workspace quota (and its grading copy's) in MiB, locked in the budget "
                        "(default: 1024)")
    budget.add_argument("--tmp-mib", type=int, metavar="MIB",
                   help="each sandbox's /tmp and /dev/shm in MiB, locked in the budget (default: 512); small "
                        "sizes with a small --workspace-mib let run --jobs go high for model-bound agents")
    controls.add_argument("--no-narration-probe", action="store_true", help="declare no narration probe control")
    controls.add_argument("--oracle-validity-unavailable", action="store_true",
                   help="lock without oracle-validity evidence (every report says so)")
    controls.add_argument("--count-flagged-passes", action="store_true",
                   help="count a pass whose test process raised a forging flag (by default it fails)")
    controls.add_argument("--fresh-after", metavar="DATE",
                   help="refuse any task not committed after DATE (YYYY-MM-DD is midnight UTC; mined packs record "
                        "each task's commit dates) and lock the date: every report states it (default: no claim)")
    controls.add_argument("--seed", type=int, default=0, help="seed for tasks that do not pin their own (default 0)")
    controls.add_argument("--min-power", type=float, metavar="P",
                   help="lock a minimum power (0 to 1, such as 0.8): `compare` calls a pair underpowered, whatever "
                        "its test says, when the slice's power to find a difference of the observed size is below P")
    output.add_argument("--force", action="store_true", help="overwrite CONTRACT if it exists (default: refuse)")
    p.set_defaults(func=cmd_contract_new)
    p = con.add_parser("lock", help="lock a contract: run_id, locked_at, contract sha256")
    p.add_argument("contract", help="the unlocked contract file; locked in place")
    p.add_argument("--run-id", required=True, help="a new id for this study (a run_id is run once per machine)")
    p.set_defaults(func=cmd_contract_lock)

    agents = sub.add_parser("agents", aliases=["agent"],
                            help="agent presets (real agents installed by exact version), and a check of an "
                                 "agent's setup").add_subparsers(dest="agents_command", parser_class=_Parser,
                                                                 required=True)
    p = agents.add_parser("check", help="run the contract's agent once on one task in scratch, never counted: "
                                        "does it start, reach its model, leave a patch (exit 3 when not)")
    p.add_argument("contract", help="the contract (locked or not); it is not changed")
    p.add_argument("--task", metavar="ID", help="the task to try (default: the contract's first)")
    p.add_argument("--sandbox", choices=_sandbox_names(), default="auto",
                   help="where the agent runs (default: auto, the sandbox run would use)")
    p.add_argument("--pack", metavar="PATH", help="the pack's folder, when it moved (default: the contract's pack.path)")
    p.set_defaults(func=cmd_agent_check)
    p = agents.add_parser("list", help="every preset, its pinned version and API style, and what is installed")
    p.set_defaults(func=cmd_agents_list)
    p = agents.add_parser("install", help="install a preset's agent from its package registry, by exact version")
    p.add_argument("name", help="a preset (sealbench agents list)")
    # Its own dest: the top-level --version (print sealbench's and exit) must not read it.
    p.add_argument("--version", dest="install_version", metavar="V", help="the exact version (default: the preset's pin)")
    p.set_defaults(func=cmd_agents_install)

    p = sub.add_parser("score", help="score seed events (events.json) or a run directory's journal under a locked contract")
    p.add_argument("contract", help="the locked contract")
    p.add_argument("events", help="events.json (seed events), or a run directory (its journal is scored)")
    p.add_argument("--json", action="store_true", help="print rate.json's content instead of the summary run prints")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on a terminal")
    p.set_defaults(func=cmd_score)

    for name, func, help_text in (("run", cmd_run, "run a locked contract's agent over its denominator"),
                                  ("probe", cmd_probe, "run the narration probe (summary only, no changes)")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("contract", help="the locked contract")
        p.add_argument("--out", required=name == "probe", help="run directory (the probe writes into RUN_DIR/probe/)")
        if name == "run":
            p.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run; no attempt is given back")
            p.add_argument("--replay", metavar="BUNDLE",
                           help="run again with every model call answered from BUNDLE's record (this contract's "
                                "bundle): nothing leaves the machine, a differing request is journaled as a "
                                "divergence; a reproduction, never counted as a run (default: a measured run)")
        else:
            p.add_argument("--resume", action="store_true", help="continue a stopped probe")
        p.add_argument("--jobs", type=int, help="tasks at once (default: 4 per core, 2 to 16, fewer where the "
                       "sandboxes' memory quotas would not fit)")
        p.add_argument("--sandbox", choices=_sandbox_names(), default="auto",
                       help="'none' runs agents unisolated; the run records it and reports say so "
                       "(default: auto, the first sandbox that isolates and starts here; never none)")
        p.add_argument("--keep-work", action="store_true", help="keep workspaces and grading copies")
        p.add_argument("--pack", metavar="PATH",
                       help="the pack's folder, when it moved from the contract's pack.path: checked against "
                            "the locked digest and recorded in the journal (default: the contract's pack.path)")
        p.add_argument("--no-workspace-quota", action="store_true",
                       help="bind workspaces from the host (their files can be watched while the agent runs) "
                            "instead of a size-capped tmpfs; an agent can then fill the disk (recorded)")
        p.add_argument("--no-progress", action="store_true", help="plain lines instead of a progress bar")
        _executor_arguments(p)
        p.set_defaults(func=func)

    p = sub.add_parser("demo", help="the whole flow on the embedded sample pack")
    p.add_argument("--dir", default="sealbench-demo",
                   help="where the demo writes its pack, contracts and runs (default: sealbench-demo)")
    p.add_argument("--sandbox", choices=_sandbox_names(), default="auto", help="where the agents run (default: auto, the first sandbox that isolates and starts here; never none)")
    p.add_argument("--agent", metavar="NAME", default=None,
                   help="instead, a real agent: install the preset NAME (cached; see `sealbench agents list`) and "
                        "run it over two sample tasks against a scripted model, one fixed and one not; then "
                        "bundle, verify, report (default: none, the scripted agents' demo)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("init", help="write a new pack folder: tasks.toml with one worked task, agent.py, README.md")
    p.add_argument("pack", help="the folder to create (its name is the pack's name)")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("eval", help="seal, validate, contract new, lock, run, probe and bundle in one go, printing "
                                    "each command it stands for")
    p.add_argument("pack", help="a pack folder (a tasks.toml, or the sealed layout)")
    p.add_argument("--agent", required=True, metavar="CMD",
                   help="the agent's command (placeholders: {prompt_file}, {workspace}, {attempt}, {max_attempts}, "
                        "{task_id}); a relative file in it is made absolute and mounted on its own")
    p.add_argument("--run-id", required=True, help="the run's id, used once")
    p.add_argument("--agent-label", help="the agent's name and version in the scorecards (default: the run_id)")
    p.add_argument("--host", default="this machine", help="where the agent ran, for the access class "
                   "(default: 'this machine')")
    p.add_argument("--out", default="runs", help="where RUN_ID/ and RUN_ID.contract.json go (default: runs/)")
    p.add_argument("--bundles", default="bundles", help="where the bundle goes (default: bundles/)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("bundle", help="write OUT/<run_id>/ with SHA256SUMS: what a stranger needs to verify a run")
    p.add_argument("run_dir", help="a finished run directory (run --out)")
    p.add_argument("--out", default="runs", help="where the bundle directory is created (default: runs/)")
    p.add_argument("--sign", metavar="KEY", help="Ed25519 private key (sealbench keygen): also write SHA256SUMS.sig")
    p.add_argument("--public", action="store_true",
                   help="withhold the hidden tests' output (kept as digests): its bodies go to OUT/<run_id>.sealed/, "
                        "to keep private while the pack is in use")
    p.set_defaults(func=cmd_bundle)

    p = sub.add_parser("verify", help="check a bundle: sums, signature, journal chain, lock; re-derive everything")
    p.add_argument("bundle", help="a bundle directory (runs/<run_id>/)")
    p.add_argument("--pubkey", metavar="KEY", help="public key that must have signed SHA256SUMS")
    p.add_argument("--pack", help="the sealed pack: check its digest against the contract too")
    p.add_argument("--sealed", metavar="DIR", help="a public bundle's sealed part: check the withheld outputs "
                   "against it (default: BUNDLE.sealed beside the bundle, when present)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on a terminal")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("report", help="write report.md and a self-contained report.html for a bundle or run directory")
    p.add_argument("bundle", metavar="BUNDLE", help="a bundle (runs/<run_id>/) or a run directory")
    p.add_argument("--out", metavar="DIR", help="where to write (default: BUNDLE-report/ beside it; never inside a bundle)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on a terminal")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("show", help="why each task ended as it did: a table of tasks, or one task's attempts in full")
    p.add_argument("run", metavar="RUN_OR_BUNDLE", help="a run directory (run --out) or a bundle (runs/<run_id>/)")
    p.add_argument("task", metavar="TASK", nargs="?", help="a task_id: its caps, attempts, outputs, patch, "
                   "grading and outcome (default: one line per task)")
    p.add_argument("--attempt", metavar="N", type=int, help="only attempt N of TASK (default: every attempt)")
    p.add_argument("--outcome", action="append", choices=_show_outcomes(), metavar="OUTCOME",
                   help="only tasks with this outcome, in the table (repeatable; one of %(choices)s; default: all)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts instead of text")
    p.add_argument("--full", action="store_true", help="every byte of each output and patch read (up to 4 MiB "
                   "each; default: the last 4,000 characters of an output, the first of a patch)")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("model-stub", help="a scripted model on 127.0.0.1 (OpenAI chat, Responses, Anthropic "
                       "Messages; streamed or not): check an agent setup without reaching a real model")
    p.add_argument("--script", required=True, metavar="FILE",
                   help="replies in order: a JSON list, or TOML [[reply]] tables (see docs/tutorials/real-agent.md)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one, printed)")
    p.add_argument("--latency-ms", type=int, default=0, metavar="N", help="wait N ms before each reply (default 0)")
    p.add_argument("--require-key-env", metavar="NAME",
                   help="answer 401 unless the request carries the key held in this variable")
    p.set_defaults(func=cmd_model_stub)

    p = sub.add_parser("keygen", help="make an Ed25519 key pair for signing bundles")
    p.add_argument("out_prefix", metavar="OUT_PREFIX", help="writes OUT_PREFIX.key (mode 0600) and OUT_PREFIX.pub")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("compare", help="paired comparison of bundles: exact McNemar under the contracts' tie rule")
    p.add_argument("a", metavar="A", help="a bundle")
    p.add_argument("others", metavar="B", nargs="+",
                   help="one or more bundles of the same slice (three or more runs: Holm-adjusted)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--allow-mixed-isolation", action="store_true",
                   help="compare runs isolated differently (bubblewrap, none, in-process); the output says so")
    p.add_argument("--require-signed", action="store_true",
                   help="refuse bundles not signed by a --pubkey key (unsigned: internal consistency only)")
    p.add_argument("--pubkey", metavar="KEY", action="append", default=[],
                   help="a public key the bundles may be signed by (repeat it)")
    p.add_argument("--html", metavar="DIR", help="also write DIR/compare.html: the verdicts, the tasks where the runs "
                   "disagree and every task's outcome per run, each linked to that run's page of the task")
    p.set_defaults(func=cmd_compare)

    runs = sub.add_parser("runs", help="the local index of runs made on this machine (one run per run_id)")
    runs_sub = runs.add_subparsers(dest="runs_command", parser_class=_Parser, required=True)
    p = runs_sub.add_parser("list", help="every run the index knows, by start time (not a ranking)")
    p.set_defaults(func=cmd_runs_list)
    p = runs_sub.add_parser("show", help="what the index knows of one run_id")
    p.add_argument("run_id", help="a run_id (runs list shows them)")
    p.set_defaults(func=cmd_runs_show)
    p = runs_sub.add_parser("rebuild", help="recreate the index from run directories and bundles (the files win)")
    p.add_argument("dirs", metavar="DIR", nargs="*",
                   help="run directories, bundles, or folders holding them; also rereads every place it knew")
    p.set_defaults(func=cmd_runs_rebuild)
    p = runs_sub.add_parser("move", help="continue a run in a copy of its directory (OLD is then never resumed)")
    p.add_argument("old", metavar="OLD", help="the run's directory, as the index records it")
    p.add_argument("new", metavar="NEW", help="a copy of it at the same point, where the run continues")
    p.set_defaults(func=cmd_runs_move)
    return parser


def _on_sigterm(signum: int, frame: Any) -> None:
    from .errors import Terminated

    raise Terminated


def main(argv: Sequence[str] | None = None, *, next_hints: bool = True) -> int:
    """Entry point of the console script; returns the exit code. ``next_hints``: print the usual
    next command after a success (off where a caller runs the next commands itself)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.command_line = ["sealbench", *(sys.argv[1:] if argv is None else argv)]
    args.next_hints = next_hints
    if args.version:
        from . import __version__

        print(f"sealbench {__version__}")
        return EXIT_OK
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    # SIGTERM stops a command as Ctrl-C does: its clean-ups run (a run records the stop and can
    # be resumed), and the exit code says which signal it was.
    previous: Any = None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:  # ignored by our starter: leave it so
        with contextlib.suppress(ValueError):  # not the main thread: signals are the caller's
            previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _dispatch(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command's handler; errors become one line and an exit code."""
    try:
        code: int = args.func(args)
        return code
    except KeyboardInterrupt as e:
        from .errors import Terminated

        if isinstance(e, Terminated):
            print("sealbench: stopped by SIGTERM", file=sys.stderr)
            return EXIT_SIGTERM
        print("sealbench: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_SIGPIPE
    except Exception as e:
        from .errors import (
            MadeByNewerRelease,
            Refusal,
            SealbenchError,
            VerificationFailed,
            describe_storage_failure,
            storage_failure,
        )

        failure = None if isinstance(e, Refusal) else storage_failure(e)
        if failure is not None:
            # The disk under the command failed or is full: a refusal to go on, never a crash.
            print(f"sealbench: refused: storage failure: {describe_storage_failure(failure)}; free space "
                  f"(or fix the storage) and run the command again", file=sys.stderr)
            if args.debug:
                raise
            return EXIT_REFUSED
        if isinstance(e, MadeByNewerRelease):
            print(f"sealbench: cannot verify: {'; '.join(e.problems)}", file=sys.stderr)
            return EXIT_VERIFY
        if isinstance(e, VerificationFailed):
            print("sealbench: verification failed:", file=sys.stderr)
            for problem in e.problems:
                print(f"  - {problem}", file=sys.stderr)
            return EXIT_VERIFY
        if isinstance(e, SealbenchError):
            prefix = "refused" if e.exit_code == EXIT_REFUSED else "error"
            print(f"sealbench: {prefix}: {e}", file=sys.stderr)
            if args.debug:
                raise
            return e.exit_code
        if args.debug:
            raise
        print(f"sealbench: unexpected error ({type(e).__name__}): {e}; rerun with --debug", file=sys.stderr)
        return EXIT_UNEXPECTED


def _silence_stdout() -> None:
    """The reader of stdout left (``| head``): send the rest nowhere, so that the flush at exit
    prints no traceback."""
    import os

    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def entry() -> None:
    """The console script: :func:`main`, then exit.

    Everything is freed by the operating system at exit; the interpreter's last full garbage
    collection over every object imported (pydantic's schemas, rich) would only cost time, so
    those objects are frozen out of it first.
    """
    code = main()
    try:
        sys.stdout.flush()  # what is still buffered, while a closed reader can still be told apart
    except BrokenPipeError:
        _silence_stdout()
        code = code or EXIT_SIGPIPE
    import gc

    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
