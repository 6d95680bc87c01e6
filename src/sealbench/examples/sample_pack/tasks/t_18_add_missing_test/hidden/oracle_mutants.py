"""Mutation oracle: the agent's tests must pass on slugify and fail on each broken variant.

Every variant is the real module with one behaviour changed, docstring and annotations alike,
so a test can tell them apart only by what slugify does. The real module is the one the task
was sealed with, not the workspace's copy. The runs share a sandbox, so a test could keep state
from one run to the next: the real module runs three times among the three mutants, in an order
drawn at random, each run in a folder of its own, and every real run must pass.
"""

import os
import pathlib
import random
import subprocess
import sys
import tempfile

REAL = '''"""URL slugs."""

import re


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
'''
LINE = '    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")\n'
MUTANTS = {
    "no_lower": '    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-")\n',
    "no_collapse": '    return re.sub(r"[^a-z0-9]", "-", text.lower()).strip("-")\n',
    "no_strip": '    return re.sub(r"[^a-z0-9]+", "-", text.lower())\n',
}


def run_tests(source: str) -> int:
    test_file = pathlib.Path.cwd() / "tests" / "test_slug.py"
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "tests").mkdir()
        (root / "tests" / "test_slug.py").write_text(test_file.read_text())
        (root / "slug.py").write_text(source)
        (root / "tmp").mkdir()
        env = dict(os.environ, PYTHONPATH=str(root), TMPDIR=str(root / "tmp"), HOME=str(root))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_slug.py"]
        return subprocess.run(cmd, cwd=root, env=env, capture_output=True).returncode


if not (pathlib.Path.cwd() / "tests" / "test_slug.py").is_file():
    print("tests/test_slug.py is missing")
    sys.exit(1)
assert LINE in REAL
runs = [("real", REAL)] * 3 + [(name, REAL.replace(LINE, line)) for name, line in MUTANTS.items()]
random.SystemRandom().shuffle(runs)
failed_on_real = 0
survived = []
for name, source in runs:
    code = run_tests(source)
    if name == "real" and code != 0:
        failed_on_real += 1
    elif name != "real" and code == 0:
        survived.append(name)
if failed_on_real:
    print(f"the new tests fail on the real slugify ({failed_on_real} of 3 runs)")
    sys.exit(1)
if survived:
    print("mutants not caught:", ", ".join(survived))
    sys.exit(1)
print("all mutants caught")
