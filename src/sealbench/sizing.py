"""How many sandboxes at once a machine's memory holds: a sandbox's size-capped tmpfs mounts
(its workspace or grading copy under its quota, the harness-private folder of a grading, /tmp
and /dev/shm) are memory, so ``--jobs`` is refused (:func:`check_memory`) where hostile agents
that all fill theirs would take the host down, and its default (:func:`default_jobs`) fits.
"""

from __future__ import annotations

import dataclasses
import os

from .agentfs import TreeCaps
from .errors import RunRefusal
from .formats import Budget
from .grading import private_caps
from .sandbox import Limits


def default_jobs() -> int:
    """Agents mostly wait (on a model, on tests): more tasks than cores keeps them busy; but no
    more than the machine's memory can hold at their default quotas (see :func:`memory_per_job`)."""
    by_cores = max(2, min(16, 4 * (os.cpu_count() or 1)))
    total = _memory_total()
    if total is None:
        return by_cores
    return max(1, min(by_cores, int(total * MEMORY_SHARE) // memory_per_job(Limits(), TreeCaps())))


MEMORY_SHARE = 0.75
"""The share of the machine's memory the running tasks' tmpfs mounts may hold at most."""


def memory_per_job(limits: Limits, caps: TreeCaps, *, quota: bool = True) -> int:
    """Bytes of memory one running task's sandbox can hold in tmpfs pages at most: its workspace
    (or grading copy) quota, the harness-private folder of a grading, /tmp and /dev/shm.

    tmpfs pages are memory (swap aside): an agent that fills its quota holds that much until its
    attempt ends; one that writes nothing costs nothing.
    """
    quotas = caps.max_bytes + private_caps(caps).max_bytes if quota else 0  # none with --no-workspace-quota
    return quotas + 2 * limits.tmp_bytes


def _memory_total() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(jobs: int, limits: Limits, caps: TreeCaps, *, quota: bool = True) -> None:
    """Refuse a ``--jobs`` whose sandboxes could fill more than :data:`MEMORY_SHARE` of the
    machine's memory with their tmpfs quotas: hostile agents that all fill theirs would take
    the host down, not only their own runs.

    Raises:
        RunRefusal: the quotas of ``jobs`` tasks at once do not fit.
    """
    total = _memory_total()
    per_job = memory_per_job(limits, caps, quota=quota)
    if total is None or jobs * per_job <= total * MEMORY_SHARE:
        return
    gib = 2**30
    fits = int(total * MEMORY_SHARE) // per_job
    raise RunRefusal(
        f"--jobs {jobs} lets the running sandboxes hold up to {jobs * per_job / gib:.1f} GiB of memory in their "
        f"size-capped tmpfs mounts (per task: a workspace quota of {caps.max_bytes / gib:.2f} GiB, /tmp and "
        f"/dev/shm of {limits.tmp_bytes / gib:.2f} GiB each, {private_caps(caps).max_bytes >> 20} MiB of harness files), "
        f"more than {MEMORY_SHARE:.0%} of this machine's {total / gib:.1f} GiB; "
        + (f"use --jobs {fits} or fewer, or " if fits else "")
        + "lock a contract with smaller sandboxes (contract new --workspace-mib, --tmp-mib)"
    )


def sized(budget: Budget | None, limits: Limits, caps: TreeCaps) -> tuple[Limits, TreeCaps]:
    """The sandbox's sizes under the contract's budget: its ``tmp_bytes`` and
    ``workspace_bytes`` in place of the defaults, where it sets them."""
    if budget is None:
        return limits, caps
    if budget.tmp_bytes is not None:
        limits = dataclasses.replace(limits, tmp_bytes=budget.tmp_bytes)
    if budget.workspace_bytes is not None:
        caps = dataclasses.replace(caps, max_bytes=budget.workspace_bytes)
    return limits, caps
