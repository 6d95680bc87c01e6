"""Each derivation version's vocabulary: one per version, and a word once written stays writable."""

from __future__ import annotations

from dataclasses import fields

from sealbench.derive import DERIVATION_VERSION, RESUMABLE
from sealbench.vocabulary import VOCABULARY, vocabulary_of


def test_every_derivation_version_has_a_vocabulary() -> None:
    assert sorted(VOCABULARY) == list(range(1, DERIVATION_VERSION + 1))
    assert frozenset(VOCABULARY) == RESUMABLE


def test_a_flag_only_ever_turns_on_with_a_later_version() -> None:
    versions = sorted(VOCABULARY)
    for flag in (f.name for f in fields(VOCABULARY[versions[0]])):
        turned = [getattr(VOCABULARY[v], flag) for v in versions]
        assert turned == sorted(turned), f"{flag} turns off again: {dict(zip(versions, turned, strict=True))}"
        assert turned[-1], f"{flag} is not written by the current version"


def test_a_version_outside_the_table_reads_as_its_nearest_end() -> None:
    assert vocabulary_of(0) == VOCABULARY[1]
    assert vocabulary_of(DERIVATION_VERSION + 1) == VOCABULARY[DERIVATION_VERSION]
    assert not vocabulary_of(2).transcripts and vocabulary_of(3).transcripts
