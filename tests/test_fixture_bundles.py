"""Bundles made by earlier versions of sealbench verify with today's code, forever.

A bundle is published once and verified by strangers for years; a verifier that reads a
bundle of an older release as tampered breaks that promise the day a release ships. Each
folder under ``tests/fixtures/bundles/`` was made by the commit it is named after (see its
README). A change that makes one fail must bump the derivation version and keep the old
rules, never edit these files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import rewrite_journal
from sealbench.bundle import VerificationFailed, verify_bundle
from sealbench.cli import main
from sealbench.derive import DERIVATION_VERSION

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bundles"
MADE_BY = sorted(p for p in FIXTURES.iterdir() if p.is_dir())
BUNDLES = [b for release in MADE_BY for b in sorted(release.iterdir()) if (b / "SHA256SUMS").is_file()]


def test_every_release_left_its_two_bundles() -> None:
    assert len(MADE_BY) >= 2, "one folder per release, the oldest kept"
    for release in MADE_BY:
        names = sorted(b.name for b in release.iterdir() if b.is_dir())
        assert names == ["demo-reference", "demo-two-attempts"], release.name
        assert (release / "signing.pub").is_file()
        assert (release / "demo-two-attempts" / "SHA256SUMS.sig").is_file()


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda b: f"{b.parent.name}/{b.name}")
def test_a_bundle_made_by_an_earlier_release_verifies(bundle: Path) -> None:
    signed = (bundle / "SHA256SUMS.sig").is_file()
    report = verify_bundle(bundle, pubkey=bundle.parent / "signing.pub" if signed else None)
    assert report.run_id == bundle.name
    assert report.signed is signed
    assert (report.rate.n, report.rate.task_pass_count) == (5, 5)
    assert len(report.scorecards) == 5


@pytest.mark.parametrize("release", MADE_BY, ids=lambda r: r.name)
def test_the_cli_verifies_an_earlier_release_with_its_key(release: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", str(release / "demo-two-attempts"), "--pubkey", str(release / "signing.pub")])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("ok: bundle ") and "signed by key" in out


@pytest.mark.parametrize("release", MADE_BY, ids=lambda r: r.name)
def test_an_edited_copy_of_an_earlier_bundle_still_fails(release: Path, tmp_path: Path) -> None:
    # The check above could pass by accepting anything; an edit to a derived file must not.
    copy = tmp_path / "demo-reference"
    shutil.copytree(release / "demo-reference", copy)
    rate = copy / "rate.json"
    rate.write_text(rate.read_text().replace('"task_pass_count": 5', '"task_pass_count": 4'))
    with pytest.raises(VerificationFailed) as info:
        verify_bundle(copy)
    assert any("rate.json" in p for p in info.value.problems), info.value.problems


# --- a bundle made by a newer release ------------------------------------------------------


def _rewrite_first_event(bundle: Path, **changes: object) -> None:
    """Change the first journal event (top-level fields, or ``payload`` keys) and redo every
    hash and sum after it, as a newer release would have written them."""
    import hashlib
    import json


    journal = bundle / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    for key, value in changes.items():
        if key in events[0]:
            events[0][key] = value
        else:
            events[0]["payload"][key] = value
    rewrite_journal(journal, events)
    sums = []
    for line in (bundle / "SHA256SUMS").read_text().splitlines():
        rel = line.split("  ", 1)[1]
        sums.append(f"{hashlib.sha256((bundle / rel).read_bytes()).hexdigest()}  {rel}\n")
    (bundle / "SHA256SUMS").write_text("".join(sums))


@pytest.mark.parametrize(("change", "names"), [
    ({"derivation_version": DERIVATION_VERSION + 1},
     (f"rules version {DERIVATION_VERSION + 1}", f"versions 1 to {DERIVATION_VERSION}")),
    ({"journal_version": 3}, ("format 3", "formats 1 to 2")),
], ids=["derivation", "journal-format"])
def test_a_bundle_made_by_a_newer_release_is_named_so_and_not_called_tampered(
        change: dict[str, int], names: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before versions, a one-word change in a derived file's rules made every bundle already
    # published fail verify as tampered.
    from sealbench.errors import MadeByNewerRelease

    bundle = tmp_path / "demo-reference"
    shutil.copytree(MADE_BY[-1] / "demo-reference", bundle)
    _rewrite_first_event(bundle, **change)
    with pytest.raises(MadeByNewerRelease) as info:
        verify_bundle(bundle)
    assert all(n in info.value.problems[0] for n in names), info.value.problems
    code = main(["verify", str(bundle)])
    err = capsys.readouterr().err
    assert code == 4 and "made by a newer release of sealbench" in err
    assert "verification failed" not in err and "edited" not in err and "tamper" not in err.replace(
        "nothing is claimed about tampering", "")


def test_an_unknown_older_derivation_version_is_a_problem_not_a_pass(tmp_path: Path) -> None:
    bundle = tmp_path / "demo-reference"
    shutil.copytree(MADE_BY[-1] / "demo-reference", bundle)
    _rewrite_first_event(bundle, derivation_version=0)
    with pytest.raises(VerificationFailed) as info:
        verify_bundle(bundle)
    assert any("derivation_version 0 is not one this release derives" in p for p in info.value.problems)


# --- a run a crash interrupted, under the rules of its version -------------------------------

CRASHED = Path(__file__).resolve().parent / "fixtures" / "interrupted" / "made-by-e86af19" / "crash-on-the-last-attempt"


def test_a_version_4_bundle_whose_last_attempt_a_crash_ended_keeps_its_fail_and_its_rate() -> None:
    # Derivation version 5 made such a task an infra_error, which refuses the rate; a bundle of
    # version 4 keeps the verdict it was published with.
    report = verify_bundle(CRASHED)
    assert [c.outcome.value for c in report.scorecards] == ["fail"]
    assert (report.rate.n, report.rate.task_pass_count) == (1, 0)
    journal = [json.loads(line) for line in (CRASHED / "journal.jsonl").read_text().splitlines()]
    assert journal[0]["payload"]["derivation_version"] == 4
    assert [e["attempt"] for e in journal if e["kind"] == "attempt_interrupted"] == [1]


def test_the_new_outcome_written_into_a_version_4_bundle_is_refused(tmp_path: Path) -> None:
    from test_consistency import forge

    bundle = tmp_path / "crash"
    shutil.copytree(CRASHED, bundle)
    (bundle / "blobs").mkdir(exist_ok=True)  # it holds no blob, and git keeps no empty folder

    def infra(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in events:
            if e["kind"] == "task_finished":
                e["payload"]["outcome"] = "infra_error"
        return events

    forge(bundle, infra)
    with pytest.raises(VerificationFailed) as info:
        verify_bundle(bundle)
    assert any("says outcome 'infra_error'" in p and "'fail' or 'timeout'" in p for p in info.value.problems), \
        info.value.problems
