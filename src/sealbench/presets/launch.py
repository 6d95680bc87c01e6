"""Runs a preset's agent inside the sandbox and records how the agent itself says it ended.

Copied beside each installed agent by ``sealbench agents install`` and run by the contract's
command with the sandbox's Python; standard library only (nothing of sealbench is importable
in the sandbox). It fills ``@prompt`` (the prompt's text) and ``@trace/`` (the trace folder)
in the agent's argv, and ``@{NAME}`` within an argument (the variable's value, such as the
gateway's URL), makes the folders given by ``--mkdir``, runs the agent with its output passed
through (and its standard output also written to ``--tee FILE`` in the trace folder, for an
agent that prints its transcript), then writes ``$SEALBENCH_TRACE_DIR/sealbench-ending.json``
and one ``sealbench-launch:`` line on stderr, and exits with the agent's exit code. The ending
is the agent's own word, kept beside the oracle's verdict: it never decides pass or fail.

    python launch.py [--ending-json FILE:KEY.KEY] [--ending-text TEXT=LABEL ...] [--mkdir DIR ...]
                     [--tee FILE] -- ARGV...
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, NamedTuple

TAIL_BYTES = 1 << 20
"""How much of the agent's output is kept for --ending-text (the last MiB of each stream)."""


_ENV_RE = re.compile(r"@\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _pump(src: IO[bytes], dst: IO[bytes], tail: bytearray, copy: IO[bytes] | None = None) -> None:
    while True:
        chunk = src.read1(65536)  # type: ignore[attr-defined]
        if not chunk:
            return
        dst.write(chunk)
        dst.flush()
        if copy is not None:
            try:
                copy.write(chunk)
            except OSError:  # the workspace's quota is full, say: the copy stops, the agent goes on
                copy = None
        tail += chunk
        if len(tail) > 2 * TAIL_BYTES:
            del tail[:-TAIL_BYTES]


def _fill(arg: str, prompt: str, trace: str) -> str:
    if arg == "@prompt":
        return prompt
    if arg.startswith("@trace/"):
        return trace + arg.removeprefix("@trace")
    return _ENV_RE.sub(lambda m: os.environ.get(m.group(1), ""), arg)


def _json_ending(trace: Path, spec: str) -> str | None:
    name, _, keys = spec.partition(":")
    try:
        text = (trace / name).read_text(encoding="utf-8")
        try:
            value: Any = json.loads(text)
        except (ValueError, RecursionError):  # JSON Lines: the last line says how it ended
            value = json.loads(text.strip().rsplit("\n", 1)[-1])
        for key in keys.split("."):
            value = value[key]
    except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError):
        return None
    return value if isinstance(value, str) else json.dumps(value)


class Options(NamedTuple):
    """The launcher's own options, before ``--``."""

    ending_json: str | None = None
    tee: str | None = None
    dirs: tuple[str, ...] = ()
    texts: tuple[tuple[str, str], ...] = ()
    """(text, label): the agent said ``label`` when ``text`` is in its output."""


def parse_options(opts: list[str]) -> Options:
    """``--flag VALUE`` pairs; a later ``--ending-json`` or ``--tee`` wins, an unknown flag is ignored."""
    found = Options()
    for flag, value in zip(opts[::2], opts[1::2], strict=False):
        if flag == "--ending-json":
            found = found._replace(ending_json=value)
        elif flag == "--tee":
            found = found._replace(tee=value)
        elif flag == "--mkdir":
            found = found._replace(dirs=(*found.dirs, value))
        elif flag == "--ending-text":
            text, _, label = value.partition("=")
            found = found._replace(texts=(*found.texts, (text, label or text)))
    return found


def _make_folders(trace: str, dirs: tuple[str, ...]) -> None:
    if trace:
        Path(trace).mkdir(parents=True, exist_ok=True)
    for sub in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        if os.environ.get(sub):
            Path(os.environ[sub]).mkdir(parents=True, exist_ok=True)
    for folder in dirs:
        Path(folder).mkdir(parents=True, exist_ok=True)


def _open_copy(trace: str, tee: str | None) -> IO[bytes] | None:
    if not (tee and trace):
        return None
    try:
        return open(Path(trace, tee), "wb")
    except OSError as e:
        print(f"sealbench-launch: no copy of the agent's output in {tee}: {e}", file=sys.stderr)
        return None


def _run(command: list[str], copy: IO[bytes] | None) -> tuple[int, str] | None:
    """The agent's exit code and the tail of its output, passed through as it comes; None when it
    did not start."""
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as e:
        print(f"sealbench-launch: the agent did not start: {e}", file=sys.stderr)
        return None
    tails = (bytearray(), bytearray())
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, sys.stdout.buffer, tails[0], copy)),
             threading.Thread(target=_pump, args=(proc.stderr, sys.stderr.buffer, tails[1]))]
    for pump in pumps:
        pump.start()
    code = proc.wait()
    for pump in pumps:
        pump.join()
    return code, bytes(tails[0] + tails[1]).decode("utf-8", "replace")


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("sealbench-launch: usage: launch.py [--ending-json F:K] [--ending-text T=L] -- ARGV", file=sys.stderr)
        return 2
    split = argv.index("--")
    options, command = parse_options(argv[:split]), argv[split + 1:]
    trace = os.environ.get("SEALBENCH_TRACE_DIR", "")
    prompt_file = os.environ.get("SEALBENCH_PROMPT_FILE", "")
    prompt = Path(prompt_file).read_text(encoding="utf-8") if prompt_file else ""
    _make_folders(trace, options.dirs)
    command = [_fill(a, prompt, trace) for a in command]
    copy = _open_copy(trace, options.tee)
    try:
        ran = _run(command, copy)
    finally:
        if copy is not None:
            with contextlib.suppress(OSError):
                copy.close()
    if ran is None:
        return 127
    code, output = ran
    said = [label for text, label in options.texts if text in output]
    ending = _json_ending(Path(trace), options.ending_json) if options.ending_json and trace else None
    record = {"exit_code": code, "ending": ending, "said": said}
    if trace:
        Path(trace, "sealbench-ending.json").write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
    words = ", ".join(([f"status {ending}"] if ending else []) + said) or "nothing"
    print(f"sealbench-launch: the agent reports: {words} (exit {code})", file=sys.stderr)
    if code < 0:
        return 128 + (-code if -code in signal.valid_signals() else 0)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
