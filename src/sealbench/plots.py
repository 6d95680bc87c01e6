"""Report figures, drawn with matplotlib as SVG.

Importing this module imports matplotlib (about half a second), so nothing on the CLI's
start-up path imports it; :mod:`sealbench.report` imports it only when it draws.

The figures use matplotlib's object API (``matplotlib.figure.Figure``): no pyplot, hence no
GUI backend, no global figure registry, nothing left open. They are deterministic: no date
in the metadata, a fixed hash salt for SVG ids, and jitter from a fixed sequence rather than
a random generator, so the same run gives byte-identical files.

Counts are drawn as counts, out of the denominator: no axis is a percentage.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .outcomes import Outcome, TaskState

__all__ = ["COLOURS", "AttemptPoint", "attempts_svg", "elapsed_svg", "outcomes_svg"]

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
COLOURS: dict[str, str] = {
    Outcome.PASS.value: "#009E73",
    Outcome.FAIL.value: "#D55E00",
    Outcome.ABSTAIN.value: "#7F7F7F",
    Outcome.TIMEOUT.value: "#E69F00",
    Outcome.HARNESS_ERROR.value: "#CC79A7",
    Outcome.INFRA_ERROR.value: "#0072B2",
    TaskState.UNFINISHED.value: "#56B4E9",
}
_INK = "#444444"
# Typed loosely: the stubs spell every rc key as a Literal that only newer releases export.
_STYLE: dict[Any, Any] = {
    "svg.hashsalt": "sealbench",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": _INK,
    "xtick.color": _INK,
    "ytick.color": _INK,
}
_WIDTH_IN = 7.2


class AttemptPoint(NamedTuple):
    """Tasks passed by attempt ``k`` out of ``n``, with the interval bounds as proportions."""

    k: int
    passed: int
    n: int
    low: float
    high: float


@contextmanager
def _figure(height_in: float) -> Iterator[Figure]:
    with rc_context(_STYLE):
        yield Figure(figsize=(_WIDTH_IN, height_in), layout="constrained")


def _svg(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with rc_context(_STYLE):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def attempts_svg(points: Sequence[AttemptPoint], feedback: str) -> bytes:
    """Cumulative task_pass by attempt k with Wilson 95% intervals, titled as not pass@k.

    Raises:
        ValueError: no points.
    """
    if not points:
        raise ValueError("attempts_svg needs at least one point")
    n = points[0].n
    ks = [p.k for p in points]
    ys = [p.passed for p in points]
    below = [p.passed - p.low * p.n for p in points]
    above = [p.high * p.n - p.passed for p in points]
    with _figure(3.2) as fig:
        ax = fig.add_subplot()
        ax.axhline(n, color="#999999", linestyle="--", linewidth=1)
        ax.text(ks[0] - 0.45, n, f"denominator: {n} tasks", va="bottom", ha="left", fontsize=8, color=_INK)
        ax.plot(ks, ys, color=COLOURS[Outcome.PASS], linewidth=1, linestyle=":")
        ax.errorbar(ks, ys, yerr=[below, above], fmt="o", color=COLOURS[Outcome.PASS], ecolor=_INK, capsize=5,
                    markersize=8, label="task_pass by attempt k, Wilson 95% interval")
        for p in points:
            ax.annotate(f"{p.passed} of {p.n}", (p.k, p.passed), textcoords="offset points", xytext=(9, -4),
                        fontsize=9, va="center")
        ax.set_xticks(ks)
        ax.set_xlim(ks[0] - 0.5, ks[-1] + 0.5)
        ax.set_ylim(0, n * 1.12)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("attempt k")
        ax.set_ylabel("tasks passed by attempt k")
        ax.set_title(f"Sequential attempts with feedback policy {feedback}, not pass@k", fontsize=10)
        ax.legend(loc="lower right", fontsize=8, frameon=False)
        ax.grid(axis="y", alpha=0.3)
        return _svg(fig)


def outcomes_svg(counts: Mapping[str, int], n: int) -> bytes:
    """One bar per outcome (zeros included), labelled 'c of n'."""
    names = list(counts)
    with _figure(0.42 * len(names) + 0.8) as fig:
        ax = fig.add_subplot()
        ypos = list(range(len(names)))[::-1]
        ax.barh(ypos, [counts[k] for k in names], color=[COLOURS.get(k, _INK) for k in names], height=0.6)
        for y, name in zip(ypos, names, strict=True):
            ax.text(counts[name] + n * 0.01, y, f"{counts[name]} of {n}", va="center", fontsize=9)
        ax.set_yticks(ypos, names)
        ax.set_xlim(0, max(n, 1) * 1.15)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"tasks, out of the denominator of {n}")
        ax.grid(axis="x", alpha=0.3)
        return _svg(fig)


def elapsed_svg(rows: Sequence[tuple[str, Sequence[float]]], cap_s: float | None) -> bytes:
    """A strip plot: one dot per task, one row per outcome, and the wall-clock cap as a line.

    ``rows`` pairs an outcome name with its tasks' elapsed seconds, top row first.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("elapsed_svg needs at least one row")
    top = max((s for _, secs in rows for s in secs), default=1.0)
    with _figure(0.5 * len(rows) + 1.1) as fig:
        ax = fig.add_subplot()
        for i, (name, secs) in enumerate(rows):
            base = len(rows) - 1 - i
            # Golden-ratio jitter: spread without randomness, so the figure is reproducible.
            ys = [base + ((j * 0.618034) % 1 - 0.5) * 0.4 for j in range(len(secs))]
            ax.scatter(list(secs), ys, s=36, color=COLOURS.get(name, _INK), edgecolors="white", linewidths=0.5,
                       zorder=3)
        if cap_s is not None:
            ax.axvline(cap_s, color=COLOURS[Outcome.FAIL], linestyle="--", linewidth=1)
            ax.text(cap_s, len(rows) - 0.5, f"wall-clock cap {cap_s:g} s ", fontsize=8, color=COLOURS[Outcome.FAIL],
                    ha="right", va="bottom")
            top = max(top, cap_s)
        ax.set_yticks(list(range(len(rows)))[::-1], [name for name, _ in rows])
        ax.set_ylim(-0.6, len(rows) - 0.1)
        ax.set_xlim(-top * 0.015, top * 1.04)  # dots at 0 s stay clear of the axis
        ax.set_xlabel("elapsed seconds per task (all attempts, oracle included)")
        ax.grid(axis="x", alpha=0.3)
        return _svg(fig)
