"""What every attempt and grading of one run (or validation) shares, fixed before the first:
the run's :class:`Settings`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .agentfs import TreeCaps
from .agents import ResolvedAgent
from .derive import DERIVATION_VERSION
from .formats import Budget, ScoringContract
from .sandbox import Limits, Sandbox
from .vocabulary import Vocabulary, vocabulary_of

if TYPE_CHECKING:
    from .environments import BuiltEnv
    from .gateway import Gateway


@dataclass(frozen=True)
class Settings:
    """What every attempt and grading of one run (or validation) shares, fixed before the first."""

    contract: ScoringContract
    budget: Budget
    pack_root: Path
    run_dir: Path
    """Where blobs are stored (``run_dir/blobs``) and the workspaces live (``run_dir/work``)."""
    sandbox: Sandbox
    agent: ResolvedAgent
    limits: Limits = field(default_factory=Limits)
    tree_caps: TreeCaps = field(default_factory=TreeCaps)
    workspace_quota: bool = True
    keep_work: bool = False
    probe: bool = False
    template_override: str | None = None
    """The narration probe's template, used instead of each task's."""
    gateway: Gateway | None = None
    """The run's model gateway, when the contract declares model endpoints and the agent is a command."""
    yield_cpu: bool = False
    """Sandboxed commands run below the runner's priority (a run of many agents at once: see
    :data:`sealbench.sandbox.YIELD_ABOVE_JOBS`)."""
    environments: Mapping[str, BuiltEnv] = field(default_factory=dict)
    """The built environments the tasks name, by spec digest (checked before the run)."""
    durable_blobs: bool = True
    """Blobs are made durable before the line naming them is written; False on a cluster node,
    whose blobs the coordinator stores (durably) before it journals them."""
    derivation_version: int = DERIVATION_VERSION
    """The rules the run is derived by (a resumed run keeps the version it started under): what
    its journal may say (see :data:`sealbench.derive.DERIVATION_VERSION`)."""

    @property
    def vocabulary(self) -> Vocabulary:
        """What the run's journal may say, by :attr:`derivation_version`."""
        return vocabulary_of(self.derivation_version)

    @property
    def max_attempts(self) -> int:
        return 1 if self.probe else self.budget.max_attempts
