"""The ``fake`` sandbox backend, for sealbench's own tests only (see :mod:`sealbench.sandboxes`).

Commands run as plain child processes of the test, with the same caps, kill policy and output
capture as ``none`` and no isolation at all: it stands in for bubblewrap in tests of the
runner's logic (resume, bundle, verify, compare, executors), never in a test of a defence
that needs isolation. Its journal header says ``fake``, so nothing it ran is mistaken for a
sandboxed run.
"""

from __future__ import annotations

from sealbench.sandbox import NoSandbox, Sandbox


class FakeSandbox(NoSandbox):
    kind = "fake"

    def describe(self) -> dict[str, str]:
        return {**super().describe(), "kind": self.kind, "note": "sealbench's tests only: not isolated"}


def open_fake() -> Sandbox:
    return FakeSandbox()
