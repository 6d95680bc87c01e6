"""Shared fixtures: real packs in temporary directories, locked contracts, the CLI."""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sealbench.cli import main
from sealbench.contract import lock_contract, new_contract
from sealbench.files import model_json, write_atomic
from sealbench.formats import AgentSpec, ScoringContract
from sealbench.pack import load_pack, seal_pack

SAMPLE = Path(__file__).resolve().parents[1] / "src" / "sealbench" / "examples" / "sample_pack"
SEED_IDS = ["t_03_rename_helper", "t_11_fix_off_by_one", "t_18_add_missing_test", "t_22_reject_network_call"]
SEEDS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "seeds"
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LOCK_TIME = datetime(2026, 10, 12, 9, 30, tzinfo=UTC)
# Packs kept as fixtures hold hidden tests of their own: data, not tests of sealbench.
collect_ignore_glob = ["fixtures/*"]


@pytest.fixture(scope="module", autouse=True)
def _module_runs_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Runs made by module fixtures record themselves in an index of the module's own."""
    with pytest.MonkeyPatch.context() as mp:
        data = tmp_path_factory.mktemp("sealbench-data")
        mp.setenv("SEALBENCH_DATA_DIR", str(data))
        yield data


@pytest.fixture(autouse=True)
def runs_index_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's runs record themselves in its own index (never the user's), so run_ids
    may repeat across tests; subprocesses inherit it through the environment."""
    data = tmp_path / "sealbench-data"
    monkeypatch.setenv("SEALBENCH_DATA_DIR", str(data))
    return data


@pytest.fixture
def raw_pack(tmp_path: Path) -> Path:
    """An unsealed copy of the sample pack."""
    dest = tmp_path / "pack"
    shutil.copytree(SAMPLE, dest)
    return dest


def task_ids(pack: Path) -> tuple[str, ...]:
    """The ids of a pack's tasks, sorted (the folder names under ``tasks/``)."""
    return tuple(sorted(p.name for p in (pack / "tasks").iterdir()))


@pytest.fixture
def sealed_pack(raw_pack: Path) -> Path:
    seal_pack(raw_pack)
    return raw_pack


def in_ci() -> bool:
    """True under CI (``CI=true``), where no sandbox test may be skipped."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@functools.cache
def bubblewrap_problem() -> tuple[str, str] | None:
    """Why the bubblewrap sandbox cannot run tests here: ("missing", why), ("broken", why), or None.

    Only a ``bwrap`` that is not installed is a reason to skip; one that is installed and does
    not start is a failure of every test that needs it, with bubblewrap's own error.
    """
    found = shutil.which("bwrap")
    if found is None:
        return "missing", ("bubblewrap is not installed (no `bwrap` on PATH), and this test runs agents in it; "
                           "`make setup` installs it (apt-get install bubblewrap)")
    try:
        from sealbench.sandbox import open_sandbox

        open_sandbox("bubblewrap")
    except Exception as e:
        return "broken", f"bubblewrap is installed ({found}) but the sandbox does not start: {type(e).__name__}: {e}"
    return None


def bwrap_available() -> bool:
    """True when the bubblewrap sandbox starts here (make setup installs it)."""
    return bubblewrap_problem() is None


needs_bwrap = pytest.mark.needs_bwrap
"""Runs agents in the real bubblewrap sandbox: skipped only when bwrap is not installed (never
under CI), failed with bubblewrap's error when it is installed but does not start."""


# Property tests explore new examples on every local run; under CI they replay the same ones,
# so that a submission's verdict does not depend on which random examples a run drew (an
# example found locally is kept in .hypothesis/ and, when it matters, pinned with @example).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() == "true":
    _hypothesis_settings.load_profile("ci")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_bwrap: runs agents in the real bubblewrap sandbox")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_bwrap") is None:
        return
    problem = bubblewrap_problem()
    if problem is None:
        return
    kind, why = problem
    if kind == "missing" and not in_ci():
        pytest.skip(why)
    if kind == "missing":
        why += "; CI is set, and CI does not pass with sandbox tests skipped"
    pytest.fail(why, pytrace=False)


def make_contract(
    pack_dir: Path,
    out: Path,
    *,
    task_ids: Sequence[str] = (),
    command: str = "builtin:reference",
    run_id: str | None = "run-1",
    host: str = "operator-supplied free server option",
    **kwargs: Any,
) -> ScoringContract:
    """Write (and by default lock) a contract for a sealed pack."""
    pack = load_pack(pack_dir)
    contract, _ = new_contract(
        pack, out, task_ids, host=host, agent=AgentSpec(label="test agent", command=command,
                                                         mounts=kwargs.pop("mounts", [])),
        oracle_validity=kwargs.pop("oracle_validity", "unavailable"), **kwargs,
    )
    if run_id is not None:
        contract = lock_contract(contract, run_id, LOCK_TIME, pack)
    write_atomic(out, model_json(contract))
    return contract


@pytest.fixture
def seed_contract(sealed_pack: Path, tmp_path: Path) -> tuple[Path, ScoringContract]:
    """Seed 004's four-task slice, locked."""
    path = tmp_path / "scoring_contract.json"
    return path, make_contract(sealed_pack, path, task_ids=SEED_IDS)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")
    return path


def rewrite_journal(journal: Path, events: list[dict[str, Any]]) -> None:
    """Write ``events`` as ``journal`` with every ``prev`` and ``hash`` redone, as a writer that
    recomputes the whole chain would (what a hash chain alone cannot tell from a true one)."""
    from sealbench.journal import event_hash

    prev = None
    for ev in events:
        ev["prev"] = prev
        ev["hash"] = prev = event_hash(ev)
    journal.write_bytes(b"".join(json.dumps(ev, sort_keys=True, separators=(",", ":")).encode() + b"\n"
                                 for ev in events))


def publishes(contract_file: Path, run_dir: Path, out: Path | None = None, options: Any = None) -> Path:
    """Probe, score, bundle and verify a finished run as a publisher would, each of which must
    succeed (what a hostile agent does must never make an honest run unpublishable); the probe
    runs the same agent under the run's options. Returns the verified bundle."""
    import dataclasses

    from sealbench.bundle import make_bundle, verify_bundle
    from sealbench.contract import load_contract
    from sealbench.runner import RunOptions, execute
    from sealbench.score import score
    from sealbench.scoring_io import events_from

    locked = load_contract(contract_file)
    if locked.controls is not None and locked.controls.narration_probe is not None \
            and not (run_dir / "narration_probe.json").is_file():
        probe_options = dataclasses.replace(options or RunOptions(), progress=False, resume=False)
        execute(contract_file, run_dir, probe_options, probe=True)
    rate = score(locked, events_from(run_dir, locked))
    assert rate.n == len(locked.task_ids)
    bundle = make_bundle(run_dir, out or run_dir.parent / "bundles")
    verify_bundle(bundle)
    return bundle
