"""Mutation oracle: the agent's tests must pass on slugify and fail on each broken variant."""

import os
import pathlib
import subprocess
import sys
import tempfile

MUTANTS = {
    "no_lower": 'import re\ndef slugify(text):\n    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-")\n',
    "no_collapse": 'import re\ndef slugify(text):\n    return re.sub(r"[^a-z0-9]", "-", text.lower()).strip("-")\n',
    "no_strip": 'import re\ndef slugify(text):\n    return re.sub(r"[^a-z0-9]+", "-", text.lower())\n',
}


def run_tests(slug_source: str | None) -> int:
    here = pathlib.Path.cwd()
    test_file = here / "tests" / "test_slug.py"
    if not test_file.is_file():
        print("tests/test_slug.py is missing")
        sys.exit(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "tests").mkdir()
        (root / "tests" / "test_slug.py").write_text(test_file.read_text())
        source = slug_source if slug_source is not None else (here / "slug.py").read_text()
        (root / "slug.py").write_text(source)
        env = dict(os.environ, PYTHONPATH=str(root))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_slug.py"]
        return subprocess.run(cmd, cwd=root, env=env, capture_output=True).returncode


if run_tests(None) != 0:
    print("the new tests fail on the real slugify")
    sys.exit(1)
survivors = [name for name, src in MUTANTS.items() if run_tests(src) == 0]
if survivors:
    print("mutants not caught:", ", ".join(survivors))
    sys.exit(1)
print("all mutants caught")
