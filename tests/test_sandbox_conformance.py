"""The conformance check of :mod:`sealbench.sandbox.conformance`, run on every registered
backend, and shown to notice a backend that breaks a promise."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import needs_bwrap
from sealbench import sandboxes
from sealbench.sandbox import NoSandbox, Prepared, SandboxResult, SandboxSpec, open_sandbox
from sealbench.sandbox.conformance import EVERY_BACKEND, ISOLATING_ONLY, check

REAL = [pytest.param(b.name, marks=needs_bwrap) if b.isolating else b.name
        for b in sandboxes.backends() if not b.test_only]


@pytest.mark.parametrize("kind", REAL)
def test_every_registered_backend_passes_the_conformance_check(kind: str) -> None:
    backend = sandboxes.backend(kind)
    assert backend is not None
    assert check(open_sandbox(kind), isolating=backend.isolating) == []


class _DeafToDeadlines(NoSandbox):
    """Runs every command with a day's deadline, whatever its spec says."""

    def prepare(self, spec: SandboxSpec) -> Prepared:
        return super().prepare(dataclasses.replace(spec, timeout_s=86400.0))


class _LeaksTheHostEnvironment(NoSandbox):
    def prepare(self, spec: SandboxSpec) -> Prepared:
        return super().prepare(dataclasses.replace(spec, env={**spec.env, "HOST_SECRET": "x"}))


class _Crashing(NoSandbox):
    def run(self, spec: SandboxSpec) -> SandboxResult:
        raise OSError("no such thing")


def test_a_backend_ignoring_its_deadline_fails_the_check_and_the_others_still_run() -> None:
    problems = check(_DeafToDeadlines(), isolating=False)
    assert problems and all(p.startswith(("killed at the deadline:", "killed from another thread:"))
                            for p in problems), problems
    assert any("past its deadline" in p for p in problems)


def test_a_backend_adding_to_the_environment_fails_the_check() -> None:
    assert [p.split(":")[0] for p in check(_LeaksTheHostEnvironment(), isolating=False)] == ["environment exact"]


def test_a_backend_that_raises_is_reported_check_by_check_not_raised() -> None:
    problems = check(_Crashing(), isolating=False)
    assert "exit code and output: raised OSError: no such thing" in problems
    assert len(problems) >= len(EVERY_BACKEND) - 3  # every check that calls run()


def test_a_backend_that_does_not_isolate_fails_every_isolation_check() -> None:
    problems = check(NoSandbox(), isolating=True)
    failed = {p.split(":")[0] for p in problems}
    assert failed >= {name for name, _ in ISOLATING_ONLY} - {"nothing left behind"}, problems
