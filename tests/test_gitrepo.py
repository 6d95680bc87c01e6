"""The hand-written one-commit repository is one git itself accepts and agrees with."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from sealbench.gitrepo import init_one_commit

ENV = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=True).stdout


def make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "x-y").mkdir()
    (root / "x").mkdir()
    (root / "a.txt").write_text("a\n")
    (root / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (root / "sub" / "run.sh").chmod(0o755)
    (root / "sub" / "deeper" / "bin.dat").write_bytes(bytes(range(256)))
    (root / "x-y" / "f").write_text("1")
    (root / "x" / "f").write_text("2")
    (root / "link").symlink_to("a.txt")
    (root / "ünïcode.md").write_text("u")


def test_repo_passes_fsck_and_status_is_clean(tmp_path: Path) -> None:
    make_tree(tmp_path)
    init_one_commit(tmp_path, tmp_path / ".git")
    git(tmp_path, "fsck", "--strict")
    assert git(tmp_path, "status", "--porcelain") == ""
    assert git(tmp_path, "rev-list", "--count", "HEAD").strip() == "1"


def test_tree_matches_what_git_add_writes(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    make_tree(ours)
    shutil.copytree(ours, theirs, symlinks=True)
    init_one_commit(ours, ours / ".git")
    git(theirs, "init", "-q")
    git(theirs, "add", "-A")
    assert git(ours, "rev-parse", "HEAD^{tree}") == git(theirs, "write-tree")
