"""Skips that cannot mask: a sandbox test skips only when bubblewrap is not installed, says so,
and never under CI; a bubblewrap that is installed and does not start fails the test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SANDBOX_TEST = "tests/test_runner.py::test_noop_agent_abstains_and_cannot_pass"


def pytest_with(path: str, ci: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path, "CI": ci}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider", SANDBOX_TEST],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_bubblewrap_that_does_not_start_fails_the_test_with_its_error(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }\n'
                    'echo "bwrap: Creating new namespace failed: Operation not permitted" >&2; exit 1\n')
    fake.chmod(0o755)
    proc = pytest_with(f"{fake.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}", ci="false")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 error" in out and "1 skipped" not in out
    assert f"bubblewrap is installed ({fake}) but the sandbox does not start" in out
    assert "Creating new namespace failed: Operation not permitted" in out


def test_bubblewrap_not_installed_skips_saying_which_tool_and_why(tmp_path: Path) -> None:
    proc = pytest_with(str(tmp_path), ci="false")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "1 skipped" in out
    assert "bubblewrap is not installed (no `bwrap` on PATH), and this test runs agents in it" in out


def test_bubblewrap_not_installed_fails_under_ci(tmp_path: Path) -> None:
    proc = pytest_with(str(tmp_path), ci="true")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 error" in out and "1 skipped" not in out
    assert "CI does not pass with sandbox tests skipped" in out
