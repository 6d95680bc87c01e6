"""A deterministic demo agent for the sample pack: wrong on attempt 1, right on attempt 2.

It stands in for an agent that repairs its patch after a red test. It reads the task id
and attempt from the SEALBENCH_* environment and edits the workspace (its cwd).
"""

import os
import pathlib

TASK = os.environ["SEALBENCH_TASK_ID"]
ATTEMPT = int(os.environ["SEALBENCH_ATTEMPT"])
ws = pathlib.Path.cwd()

# A transcript for the trace: what this agent "thought".
trace = pathlib.Path(os.environ["SEALBENCH_TRACE_DIR"]) / f"attempt-{ATTEMPT}.txt"
trace.write_text(f"{TASK}: attempt {ATTEMPT}\n")

if TASK == "t_11_fix_off_by_one":
    body = "items[-n:] if n < len(items) else items[1:]" if ATTEMPT == 1 else "items[-n:]"
    (ws / "window.py").write_text(
        f"def last_n(items: list[int], n: int) -> list[int]:\n    if n <= 0:\n        return []\n    return {body}\n"
    )
elif TASK == "t_03_rename_helper":
    src = (ws / "billing.py").read_text()
    new = src.replace("def calc(", "def compute_total(")
    if ATTEMPT >= 2:
        new = new.replace("{calc(", "{compute_total(")
    (ws / "billing.py").write_text(new)
elif TASK == "csv-split-001":
    if ATTEMPT == 1:
        body = "return [f.strip('\"') for f in line.split(',')]"
    else:
        body = "import csv\n\n    return next(csv.reader([line]))"
    (ws / "csvsplit.py").write_text(f"def split_line(line: str) -> list[str]:\n    {body}\n")
elif TASK == "t_22_reject_network_call":
    src = (ws / "settings.py").read_text()
    guard = '    if source.startswith("http://"):\n        raise ValueError(source)\n'
    if ATTEMPT >= 2:
        guard = (
            '    if "://" in source:\n'
            '        scheme, _, rest = source.partition("://")\n'
            '        if scheme != "file":\n'
            '            raise ValueError(source)\n'
            "        source = rest\n"
        )
    marker = "def load_settings(source: str) -> dict[str, str]:\n"
    (ws / "settings.py").write_text(src.replace(marker, marker + guard))
elif TASK == "t_18_add_missing_test":
    tests = ws / "tests" / "test_slug.py"
    cases = ['    assert slugify("Hello") == "hello"\n']
    if ATTEMPT >= 2:
        cases += ['    assert slugify("a  --  b") == "a-b"\n', '    assert slugify(" !x! ") == "x"\n']
    tests.write_text("from slug import slugify\n\n\ndef test_slugify():\n" + "".join(cases))
