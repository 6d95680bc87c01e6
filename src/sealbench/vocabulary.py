"""What a run started under each derivation version may write, as data.

A resumed run keeps the version it started under (see :data:`sealbench.derive.DERIVATION_VERSION`),
so every writer asks that version's :class:`Vocabulary` whether it may write a word, rather than
comparing the version with a number of its own. A flag, once on, stays on in every later version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Vocabulary:
    """What a run started under one derivation version may write."""

    submitted: bool
    """``submitted``, ``duplicate_result`` and ``model_call`` events."""
    transcripts: bool
    """The agent's trace folder kept as blobs, listed on ``agent_finished`` (``transcript_files``)."""
    moved_pack: bool
    """A header that names a pack moved away from the contract's ``pack.path``."""
    agent_ending: bool
    """``agent_ending`` on ``agent_finished``, read from a preset's launcher record."""
    infra_error: bool
    """A task whose last attempt was interrupted, with no attempt or time left, ends as
    ``infra_error`` (before: ``fail`` or ``timeout``)."""
    announced_calls: bool
    """``model_call_started`` before a call is forwarded; a ``model_call`` that names a body by
    digest apart from its blob, or stands for many refused requests."""
    continuations: bool
    """Run headers that carry ``continuation`` and ``moved_from``."""


VOCABULARY: Final[dict[int, Vocabulary]] = {
    1: Vocabulary(submitted=False, transcripts=False, moved_pack=False, agent_ending=False,
                  infra_error=False, announced_calls=False, continuations=False),
    2: Vocabulary(submitted=True, transcripts=False, moved_pack=False, agent_ending=False,
                  infra_error=False, announced_calls=False, continuations=False),
    3: Vocabulary(submitted=True, transcripts=True, moved_pack=True, agent_ending=False,
                  infra_error=False, announced_calls=False, continuations=False),
    4: Vocabulary(submitted=True, transcripts=True, moved_pack=True, agent_ending=True,
                  infra_error=False, announced_calls=False, continuations=False),
    5: Vocabulary(submitted=True, transcripts=True, moved_pack=True, agent_ending=True,
                  infra_error=True, announced_calls=True, continuations=True),
}
"""Each derivation version's vocabulary."""


def vocabulary_of(version: int) -> Vocabulary:
    """The vocabulary of runs started under ``version``. A version below the first reads as
    the first and one past the last as the last, as a ``>=`` against each flag's version did:
    whether such a run may be read or resumed at all is decided elsewhere."""
    return VOCABULARY[min(max(version, min(VOCABULARY)), max(VOCABULARY))]
