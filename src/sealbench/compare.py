"""Paired comparisons of verified bundles: discordant counts, the exact McNemar test, and a
verdict that can say "tie".

The scoring contract: "better" needs a paired design: the same task ids, the same budget policy, the same
tests, and a rule for ties written in advance. :func:`compare` refuses unless every bundle
verifies and the runs share task_ids, the pack digest, the hidden-test digests, the budget
policy, the metrics, the feedback policy, the forbidden paths and whether a flagged pass
counts, and every contract names the same tie rule and was locked before its run began. Runs whose
agents were isolated differently (bubblewrap, no sandbox, in-process) are refused unless the caller
allows it, and the report then carries the caveat; with ``require_signed`` every bundle must carry a
signature by one of the given keys (an unsigned bundle proves internal consistency only). Each pair of runs is then judged on the
tasks where they disagree: ``b`` (A passed, B failed) and ``c`` (A failed, B passed), the
exact McNemar p-value, Holm-adjusted across the pairs when more than two runs are compared,
and the tie rule's alpha.

:func:`decide`, :func:`judge`, :func:`paired_results`, :func:`check_comparable` and
:func:`compare_sides` are pure; :func:`compare` reads and verifies the bundles.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from .bundle import SIGNATURE, SUMS, VerifyReport, verify_bundle
from .derive import IN_PROCESS, NO_SANDBOX, NOT_RECORDED
from .errors import ScoreRefusal, UsageError, VerificationFailed
from .formats import Budget, Scorecard, ScoringContract, TieRule
from .stats import (
    TASKS_NEEDED_LIMIT,
    holm_adjust,
    mcnemar_exact,
    mcnemar_power,
    min_detectable_difference,
    tasks_needed,
)

TIE = "tie: no detectable difference on this slice"
UNDERPOWERED = "underpowered"
POWER = 0.8
"""The power a slice's detectable difference is stated at."""


def decide(b: int, c: int, p: float, alpha: float, names: tuple[str, str] = ("A", "B")) -> str:
    """The verdict of one pair: ``"<A> better"``, ``"<B> better"`` or :data:`TIE`.

    A difference is declared only when ``p <= alpha``; the better run is the one that passed
    more of the discordant tasks. Everything else, including every ``b == c``, is a tie.
    """
    if p <= alpha and b != c:
        return f"{names[0] if b > c else names[1]} better"
    return TIE


NEEDED_LIMIT = 20_000
"""Most discordant tasks :func:`discordant_needed` considers."""


def discordant_needed(b: int, c: int, alpha: float, limit: int = NEEDED_LIMIT) -> tuple[int, int] | None:
    """About how many discordant tasks, split as ``b`` to ``c`` is, the exact McNemar test would
    need to declare a difference at ``alpha``: the smallest such split found (the larger count
    first), or None when ``b == c`` (no difference to declare) or more than ``limit`` would be
    needed. "About": the split is rounded to whole tasks, so the p-value is not strictly
    monotone in the count; the search doubles, then bisects.
    """
    if b == c or b < 0 or c < 0:
        return None
    share = max(b, c) / (b + c)

    def split(n: int) -> tuple[int, int]:
        hi = max(round(n * share), n // 2 + 1)
        return hi, n - hi

    def declared(n: int) -> bool:
        return mcnemar_exact(*split(n)) <= alpha

    low, high = b + c, b + c
    while not declared(high):
        if high >= limit:
            return None
        low, high = high, min(limit, high * 2)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if declared(mid) else (mid, high)
    return split(high)


@dataclass(frozen=True)
class PairResult:
    """One paired comparison on a shared slice."""

    name_a: str
    name_b: str
    n: int
    both_pass: int
    b: int
    c: int
    both_fail: int
    p_value: float
    p_adjusted: float | None
    alpha: float
    verdict: str
    family: int = 1
    """How many pairs were compared: the power is stated at ``alpha / family``, Holm's strictest step."""
    power: Power | None = None
    """What this slice could detect (:func:`slice_power`); None for an empty slice."""

    def sentence(self) -> str:
        """The comparison as one evidence sentence, counts first, then what the slice could detect."""
        adjusted = f", Holm-adjusted {self.p_adjusted:.4g}" if self.p_adjusted is not None else ""
        words = self.power.words(self.verdict) if self.power is not None else None
        return (
            f"{self.name_a} vs {self.name_b} on {self.n} task(s): {self.name_a} passed {self.b} that "
            f"{self.name_b} failed, {self.name_b} passed {self.c} that {self.name_a} failed; exact McNemar "
            f"p = {self.p_value:.4g}{adjusted}; {self.verdict} (alpha {self.alpha:g})"
            + (f" - {words}" if words else "")
        )

    def needed(self) -> tuple[int, int] | None:
        """For a tie with unequal discordant counts: about how many discordant tasks, split as
        these are, would be declared a difference (see :func:`discordant_needed`; unadjusted)."""
        if self.verdict != TIE or self.b == self.c:
            return None
        return discordant_needed(self.b, self.c, self.alpha)

    def missing(self) -> str | None:
        """The size of the evidence a tie lacks, in words; None when there is nothing to say."""
        if self.verdict != TIE:
            return None
        if self.b == self.c:
            return "the runs split the discordant tasks evenly: no number of tasks would separate them"
        needed = self.needed()
        if needed is None:
            return (f"a split of {max(self.b, self.c)} to {min(self.b, self.c)} would need more than "
                    f"{NEEDED_LIMIT:,} discordant tasks to be declared a difference")
        hi, lo = needed
        if hi + lo <= self.b + self.c:
            return ("unadjusted, this split would be declared a difference; the Holm adjustment across the pairs "
                    "makes it a tie")
        adjusted = " (before any Holm adjustment)" if self.p_adjusted is not None else ""
        return (f"a split like {max(self.b, self.c)} to {min(self.b, self.c)} is declared a difference from about "
                f"{hi + lo} discordant tasks ({hi} to {lo}){adjusted}; this slice has {self.b + self.c}")

    def to_json(self) -> dict[str, Any]:
        """The pair as plain JSON values."""
        return {
            "run_a": self.name_a, "run_b": self.name_b, "n": self.n, "both_pass": self.both_pass,
            "b": self.b, "c": self.c, "both_fail": self.both_fail, "p_value": self.p_value,
            "p_adjusted": self.p_adjusted, "alpha": self.alpha, "verdict": self.verdict,
            "discordant_needed": list(needed) if (needed := self.needed()) is not None else None,
            "power": self.power.to_json(self.verdict) if self.power is not None else None,
            "sentence": self.sentence(),
        }


def _points(share: float) -> str:
    value = share * 100
    return f"{value:.0f}" if value >= 10 or value == round(value) else f"{value:.1f}"


@dataclass(frozen=True)
class Power:
    """What a paired slice could detect with the exact McNemar test, at a stated power.

    ``level`` is the test's level (the tie rule's alpha, divided by the number of pairs when
    several are compared); the discordant share is the observed one, raised to the difference
    where a difference needs more.
    """

    n: int
    level: float
    power: float
    """The power the detectable difference is stated at (0.8)."""
    detectable: float | None
    """The smallest difference in pass rates found with ``power``; None when none is."""
    observed: float
    """The observed difference in pass rates, ``(b - c) / n``, signed."""
    observed_power: float
    """The power to find a difference of the observed size on this slice."""
    needed: int | None
    """About how many tasks the observed difference needs (None: no difference observed, or
    more than :data:`stats.TASKS_NEEDED_LIMIT`)."""
    min_power: float | None = None
    """The contract's locked minimum power, if any."""

    @property
    def underpowered(self) -> bool:
        """True when the contract locks a minimum power the observed difference falls short of."""
        return self.min_power is not None and self.observed_power < self.min_power

    def words(self, verdict: str) -> str:
        """What the slice could detect, in words, after the verdict."""
        at = f"{self.power:.0%} power at alpha {self.level:.3g}"
        if self.detectable is None:
            can = f"no difference in pass rates this slice could detect with {at}"
        elif verdict.endswith(" better"):
            return f"this slice detects differences of {_points(self.detectable)} points or more ({at})"
        else:
            can = f"this slice could only detect a difference of {_points(self.detectable)} points or more ({at})"
        if self.observed == 0:
            return can + "; the runs passed the same number of tasks, and no number of tasks would separate them"
        size = f"the observed {_points(abs(self.observed))} points"
        if self.needed is None:
            need = f"{size} would need more than {TASKS_NEEDED_LIMIT:,} tasks"
        elif self.needed <= self.n:
            need = f"{size} would be found with {self.observed_power:.0%} power on this many tasks"
        else:
            need = f"{size} would need about {self.needed:,} tasks"
        short = (f"; below the contract's minimum power of {self.min_power:.0%}" if self.underpowered
                 and self.min_power is not None else "")
        return f"{can}; {need}{short}"

    def to_json(self, verdict: str) -> dict[str, Any]:
        """The power as plain JSON values."""
        return {"level": self.level, "power": self.power, "min_detectable_difference": self.detectable,
                "observed_difference": self.observed, "observed_power": self.observed_power,
                "tasks_needed": self.needed, "min_power": self.min_power, "words": self.words(verdict)}


def slice_power(n: int, b: int, c: int, level: float, min_power: float | None = None) -> Power | None:
    """What ``n`` paired tasks with ``b`` and ``c`` discordant could detect at ``level``; None
    when ``n`` is 0."""
    if n <= 0:
        return None
    share, observed = (b + c) / n, (b - c) / n
    return Power(n=n, level=level, power=POWER, detectable=min_detectable_difference(n, share, level, POWER),
                 observed=observed, observed_power=mcnemar_power(n, share, observed, level),
                 needed=tasks_needed(share, observed, level, POWER), min_power=min_power)


def judge(
    b: int,
    c: int,
    alpha: float,
    *,
    names: tuple[str, str] = ("A", "B"),
    both_pass: int = 0,
    both_fail: int = 0,
    p_adjusted: float | None = None,
    family: int = 1,
    min_power: float | None = None,
) -> PairResult:
    """Judge one pair from its discordant counts; the verdict uses ``p_adjusted`` when given.

    ``family`` pairs are compared in all (the power is stated at ``alpha / family``). With a
    ``min_power`` the verdict is :data:`UNDERPOWERED` when the slice's power to find a
    difference of the observed size falls below it, whatever the test says.

    Raises:
        ValueError: a negative or non-integer count, or an adjusted p-value outside [0, 1].
    """
    p = mcnemar_exact(b, c)
    if p_adjusted is not None and not 0.0 <= p_adjusted <= 1.0:
        raise ValueError(f"p_adjusted must be in [0, 1], got {p_adjusted!r}")
    verdict = decide(b, c, p if p_adjusted is None else p_adjusted, alpha, names)
    n = both_pass + b + c + both_fail
    power = slice_power(n, b, c, alpha / family, min_power)
    if power is not None and power.underpowered:
        verdict = UNDERPOWERED
    return PairResult(name_a=names[0], name_b=names[1], n=n, both_pass=both_pass,
                      b=b, c=c, both_fail=both_fail, p_value=p, p_adjusted=p_adjusted, alpha=alpha,
                      verdict=verdict, family=family, power=power)


def paired_results(
    names: Sequence[str], passes: Sequence[Mapping[str, bool]], task_ids: Sequence[str], rule: TieRule
) -> list[PairResult]:
    """Every pair (in input order, A before B) judged on ``task_ids`` under ``rule``.

    With more than two runs the p-values are Holm-adjusted across all pairs (the family is
    every pair compared) and each verdict uses its adjusted value.

    Raises:
        ValueError: fewer than two runs, ``names`` and ``passes`` of different lengths, or a
            task missing from a run's passes.
    """
    if len(names) < 2 or len(names) != len(passes):
        raise ValueError("paired_results needs two or more runs, each with its passes")
    counts: list[tuple[int, int, int, int, int, int]] = []
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            a, b_run = passes[i], passes[j]
            missing = [t for t in task_ids if t not in a or t not in b_run]
            if missing:
                raise ValueError(f"tasks without a result: {missing[:5]}")
            both = sum(1 for t in task_ids if a[t] and b_run[t])
            b = sum(1 for t in task_ids if a[t] and not b_run[t])
            c = sum(1 for t in task_ids if not a[t] and b_run[t])
            counts.append((i, j, both, b, c, len(task_ids) - both - b - c))
    raw = [mcnemar_exact(b, c) for _, _, _, b, c, _ in counts]
    adjusted: list[float | None] = list(holm_adjust(raw)) if len(names) > 2 else [None] * len(raw)
    return [
        judge(b, c, rule.alpha, names=(names[i], names[j]), both_pass=both, both_fail=neither, p_adjusted=adj,
              family=len(counts), min_power=rule.min_power)
        for (i, j, both, b, c, neither), adj in zip(counts, adjusted, strict=True)
    ]


@dataclass(frozen=True)
class Side:
    """One verified run, as a comparison sees it."""

    run_id: str
    contract: ScoringContract
    passed: Mapping[str, bool]
    hidden_tests: Mapping[str, str]
    started_at: str
    isolation: str = NOT_RECORDED
    """How the agent was isolated (:func:`derive.isolation_of`)."""
    model_use: str | None = None
    """The run's model calls, tokens and cost, in words; None when its agent called no model."""

    @classmethod
    def of(cls, report: VerifyReport) -> Side:
        """The side of a bundle that verified."""
        return cls(
            run_id=report.run_id,
            contract=report.contract,
            passed={c.task_id: c.passed for c in report.scorecards},
            hidden_tests={c.task_id: c.hidden_tests_sha256 for c in report.scorecards},
            started_at=report.started_at,
            isolation=report.isolation,
            model_use=model_use_words(report.scorecards),
        )


@dataclass(frozen=True)
class CompareReport:
    """A paired comparison of two or more runs on one slice."""

    run_ids: tuple[str, ...]
    task_ids: tuple[str, ...]
    tie_rule: TieRule
    pairs: tuple[PairResult, ...]
    caveats: tuple[str, ...] = ()
    """What the comparison was allowed to overlook (mixed isolation), printed with it."""
    model_use: tuple[tuple[str, str], ...] = ()
    """``(run_id, what its model calls used)`` of the runs whose agent called a model."""
    fresh: tuple[tuple[str, str], ...] = ()
    """``(run_id, "all N tasks committed after DATE")`` of the runs whose contract claims fresh tasks."""

    def fresh_lines(self) -> list[str]:
        """The fresh-tasks claims: one line when every run makes the same one, else one per run."""
        said = {statement for _, statement in self.fresh}
        if len(said) == 1 and len(self.fresh) == len(self.run_ids):
            return [f"  {said.pop()} (every run's contract)"]
        return [f"  {run_id}: {statement}" for run_id, statement in self.fresh]

    def lines(self) -> list[str]:
        """The comparison as sentences for a terminal."""
        correction = "Holm-adjusted across the pairs" if len(self.run_ids) > 2 else "no correction (one pair)"
        head = (
            f"paired comparison of {', '.join(self.run_ids)} on the same {len(self.task_ids)} task(s); "
            f"tie rule fixed before the runs: {self.tie_rule.test} at alpha {self.tie_rule.alpha:g}, {correction}"
        )
        return [head, *self.fresh_lines(), *(f"  caveat: {c}" for c in self.caveats),
                *(f"  {p.sentence()}" for p in self.pairs),
                *(f"  {run_id} used {words}" for run_id, words in self.model_use), "  not a vendor ranking."]

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return {
            "compare_version": 1,
            "run_ids": list(self.run_ids),
            "task_ids": list(self.task_ids),
            "tie_rule": self.tie_rule.model_dump(mode="json"),
            "pairs": [p.to_json() for p in self.pairs],
            "caveats": list(self.caveats),
            "model_use": {run_id: words for run_id, words in self.model_use},
            "note": "not a vendor ranking",
            **({"fresh": {run_id: statement for run_id, statement in self.fresh}} if self.fresh else {}),
        }


def model_use_words(cards: Sequence[Scorecard]) -> str | None:
    """A run's model use in words (calls, tokens, cost and cost per pass); None without model calls."""
    from .usage import cost_words, total

    used = [c.model_usage for c in cards if c.model_usage is not None]
    if not used:
        return None
    summed = total(used)
    passes = sum(1 for c in cards if c.passed)
    per_pass = f", {summed.cost / passes:.4f} per pass" if summed.cost is not None and passes else ""
    return (f"{summed.calls} model call(s), {summed.input_tokens} input and {summed.output_tokens} output tokens, "
            f"cost {cost_words(summed.cost, summed.currency)}{per_pass}")


def _refuse(message: str) -> ScoreRefusal:
    return ScoreRefusal(f"no comparison: {message}")


def _when(text: str | None, what: str, run_id: str) -> datetime:
    try:
        if text is None:
            raise ValueError("missing")
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _refuse(f"{run_id}: cannot read its {what} {text!r}") from None
    if moment.tzinfo is None:
        raise _refuse(f"{run_id}: its {what} {text!r} has no time zone")
    return moment


def isolation_caveat(sides: Sequence[Side]) -> str | None:
    """The caveat of runs whose agents were isolated differently, or None when they agree."""
    if len({s.isolation for s in sides}) < 2:
        return None
    each = "; ".join(f"{s.run_id} ran {_isolated(s.isolation)}" for s in sides)
    return (f"the runs were isolated differently ({each}); their agents could reach different things "
            f"(the network, the hidden tests, the harness's own process), so a difference may come from the "
            f"isolation rather than the agents")


def _isolated(isolation: str) -> str:
    parts = isolation.split("+")
    if NO_SANDBOX in parts:
        return "with no sandbox" + ("" if parts == [NO_SANDBOX] else f" ({isolation})")
    if parts == [IN_PROCESS]:
        return "in-process (the agent inside sealbench's own process, the oracles sandboxed)"
    return f"in {isolation}" if isolation != NOT_RECORDED else "with its isolation not recorded"


def check_comparable(sides: Sequence[Side], *, allow_mixed_isolation: bool = False) -> None:
    """Refuse runs that do not form a paired design fixed in advance.

    Raises:
        UsageError: fewer than two runs.
        ScoreRefusal: a run_id twice, or runs that differ in task_ids, pack digest, hidden-test
            digests, budget policy, metrics, feedback policy, forbidden paths, flagged-pass
            policy, tie rule or (unless ``allow_mixed_isolation``) isolation, or a contract locked
            after its run began.
    """
    if len(sides) < 2:
        raise UsageError("compare needs two or more bundles")
    seen: set[str] = set()
    for s in sides:
        if s.run_id in seen:
            raise _refuse(f"run_id {s.run_id} given twice: a run cannot be paired with itself")
        seen.add(s.run_id)
    for s in sides[1:]:
        why = incomparable(sides[0], s, allow_mixed_isolation=allow_mixed_isolation)
        if why is not None:
            raise _refuse(why)
    for s in sides:
        locked = _when(s.contract.locked_at, "locked_at", s.run_id)
        started = _when(s.started_at, "run_started time", s.run_id)
        if locked > started:
            raise _refuse(f"{s.run_id}: its contract was locked at {s.contract.locked_at}, after its run "
                          f"began at {s.started_at}: the tie rule was not fixed before the run")


def _task_ids(a: Side, b: Side, pair: str) -> str | None:
    ta, tb = set(a.contract.task_ids), set(b.contract.task_ids)
    if ta == tb:
        return None
    return f"task_ids differ between {pair}: only in {a.run_id} {sorted(ta - tb)[:5]}, only in {b.run_id} {sorted(tb - ta)[:5]}"


def _pack(a: Side, b: Side, pair: str) -> str | None:
    fp, sp = (a.contract.pack.sha256 if a.contract.pack else None), (b.contract.pack.sha256 if b.contract.pack else None)
    return None if fp == sp else f"pack digests differ between {pair}: {fp} and {sp}"


def _hidden_tests(a: Side, b: Side, pair: str) -> str | None:
    hidden = sorted(t for t in a.contract.task_ids if a.hidden_tests.get(t) != b.hidden_tests.get(t))
    return f"hidden-test digests differ between {pair} for {hidden[:5]}" if hidden else None


def _attempts_and_time(a: Side, b: Side, pair: str) -> str | None:
    fb, sb = a.contract.budget, b.contract.budget
    if fb is None or sb is None or (fb.max_attempts, fb.wall_clock_s) != (sb.max_attempts, sb.wall_clock_s):
        return f"budget policy differs between {pair}: {_caps(a.contract)} and {_caps(b.contract)}"
    return None


def _metrics(a: Side, b: Side, pair: str) -> str | None:
    return None if a.contract.metrics == b.contract.metrics else f"metrics differ between {pair}"


def _feedback(a: Side, b: Side, pair: str) -> str | None:
    fb, sb = a.contract.budget, b.contract.budget
    if fb is None or sb is None or fb.feedback == sb.feedback:
        return None
    return f"feedback policy differs between {pair}: {fb.feedback} and {sb.feedback}"


def _rest_of_budget(a: Side, b: Side, pair: str) -> str | None:
    # The rest of the budget is the budget policy too: the pause between attempts, the caps
    # on model use, the sandbox's sizes (unset, a size is this release's default).
    if a.contract.budget is None or b.contract.budget is None:
        return None
    fv, sv = _budget_policy(a.contract.budget), _budget_policy(b.contract.budget)
    differ = [f"{k} {fv[k]!r} and {sv[k]!r}" for k in fv if fv[k] != sv[k]]
    return f"budget policy differs between {pair}: {'; '.join(differ)} (None: not set)" if differ else None


def _forbidden_paths(a: Side, b: Side, pair: str) -> str | None:
    fa, fb = a.contract.forbidden_paths, b.contract.forbidden_paths
    same = sorted(fa or []) == sorted(fb or []) and (fa is None) == (fb is None)
    return None if same else f"forbidden paths differ between {pair}"


def _flagged_pass(a: Side, b: Side, pair: str) -> str | None:
    fa, fb = a.contract.flagged_pass or "not_counted", b.contract.flagged_pass or "not_counted"
    return None if fa == fb else (f"flagged-pass policies differ between {pair}: a flagged pass is {fa} in one "
                                     f"and {fb} in the other")


def _tie_rule(a: Side, b: Side, pair: str) -> str | None:
    ra, rb = a.contract.tie_rule, b.contract.tie_rule
    return None if ra == rb else f"tie rules differ between {pair}: {_rule(ra)} and {_rule(rb)}"


def _isolation(a: Side, b: Side, pair: str) -> str | None:
    if a.isolation == b.isolation:
        return None
    return (f"isolation differs between {pair}: {a.run_id} ran {_isolated(a.isolation)}, {b.run_id} {_isolated(b.isolation)}; "
            "the agents were not held to the same rules. Pass --allow-mixed-isolation to compare anyway "
            "(the comparison then says so)")


PAIRED_DESIGN: Final[tuple[Callable[[Side, Side, str], str | None], ...]] = (
    _task_ids, _pack, _hidden_tests, _attempts_and_time, _metrics, _feedback, _rest_of_budget, _forbidden_paths,
    _flagged_pass, _tie_rule,
)
"""What two runs must share to be compared, in the order a refusal names the first difference."""


def incomparable(a: Side, b: Side, *, allow_mixed_isolation: bool = False) -> str | None:
    """The first way ``a`` and ``b`` do not form a paired design (see :func:`check_comparable`;
    the times a contract was locked are checked there), in words naming both runs; None when
    they do. Reads nothing: a pure decision."""
    for rule in PAIRED_DESIGN if allow_mixed_isolation else (*PAIRED_DESIGN, _isolation):
        why = rule(a, b, f"{a.run_id} and {b.run_id}")
        if why is not None:
            return why
    return None


def _budget_policy(budget: Budget) -> dict[str, Any]:
    """The budget's fields beyond attempts, time and feedback, a sandbox size left unset read as
    the size it stands for (so that `--workspace-mib 1024` pairs with no option at all)."""
    from .agentfs import TreeCaps
    from .sandbox import Limits

    values = {k: getattr(budget, k) for k in type(budget).model_fields
              if k not in ("max_attempts", "wall_clock_s", "feedback")}
    defaults = {"workspace_bytes": TreeCaps().max_bytes, "tmp_bytes": Limits().tmp_bytes}
    return {k: (defaults[k] if v is None and k in defaults else v) for k, v in values.items()}


def _caps(contract: ScoringContract) -> str:
    b = contract.budget
    return f"max_attempts {b.max_attempts}, wall_clock_s {b.wall_clock_s:g}" if b else "no budget"


def _rule(rule: TieRule) -> str:
    return f"{rule.test} alpha {rule.alpha:g} {rule.correction}"


def compare_sides(sides: Sequence[Side], *, allow_mixed_isolation: bool = False) -> CompareReport:
    """Compare verified runs pairwise under their shared tie rule.

    Raises:
        UsageError: fewer than two runs.
        ScoreRefusal: the runs are not comparable (see :func:`check_comparable`).
    """
    check_comparable(sides, allow_mixed_isolation=allow_mixed_isolation)
    task_ids = tuple(sides[0].contract.task_ids)
    rule = sides[0].contract.tie_rule
    try:
        pairs = paired_results([s.run_id for s in sides], [s.passed for s in sides], task_ids, rule)
    except ValueError as e:
        raise _refuse(str(e)) from None
    caveat = isolation_caveat(sides)
    from .freshness import statement

    fresh = tuple((s.run_id, said) for s in sides if (said := statement(s.contract)) is not None)
    return CompareReport(model_use=tuple((s.run_id, s.model_use) for s in sides if s.model_use), fresh=fresh,
                         run_ids=tuple(s.run_id for s in sides), task_ids=task_ids, tie_rule=rule,
                         pairs=tuple(pairs), caveats=(caveat,) if caveat else ())


_SIGNATURE_CAP = 64 * 1024
_SUMS_CAP = 256 * 2**20


def _signer(path: Path, pubkeys: Sequence[Path]) -> Path:
    """The key among ``pubkeys`` whose signature ``path`` carries.

    Raises:
        ScoreRefusal: the bundle carries no signature, or none by these keys.
    """
    from .agentfs import read_regular
    from .signing import read_key, signature_valid

    # Read as regular files inside the bundle only: never through a link the bundle carries.
    sig = read_regular(path, SIGNATURE, _SIGNATURE_CAP)
    if sig is None:
        raise _refuse(f"{path} is not signed (no {SIGNATURE}); --require-signed compares signed bundles only, "
                      f"since an unsigned bundle proves internal consistency only (a link, or anything but "
                      f"a regular file of at most {_SIGNATURE_CAP // 1024} KiB, is no signature)")
    data = read_regular(path, SUMS, _SUMS_CAP) or b""
    for key in pubkeys:
        if signature_valid(read_key(key), data, sig):
            return key
    raise _refuse(f"{path}: {SIGNATURE} is not a signature by any key given with --pubkey "
                  f"({', '.join(str(k) for k in pubkeys)})")


def compare(bundles: Sequence[Path], *, allow_mixed_isolation: bool = False, require_signed: bool = False,
            pubkeys: Sequence[Path] = ()) -> CompareReport:
    """Verify each bundle, then compare the runs pairwise (see the module docstring).

    With ``require_signed`` each bundle must carry a signature by one of ``pubkeys``.

    Raises:
        UsageError: fewer than two bundles, a path that is not a bundle directory, a key that
            cannot be read, or ``require_signed`` without ``pubkeys``.
        ScoreRefusal: a bundle does not verify or is not signed as required, or the runs are
            not comparable.
    """
    if len(bundles) < 2:
        raise UsageError("compare needs two or more bundles")
    if require_signed and not pubkeys:
        raise UsageError("--require-signed needs the keys the bundles must be signed by: --pubkey KEY (repeat it)")
    sides = []
    for path in bundles:
        key = _signer(path, pubkeys) if require_signed else None
        try:
            report = verify_bundle(path, pubkey=key)
        except VerificationFailed as e:
            raise _refuse(f"{path} does not verify ({len(e.problems)} problem(s); first: {e.problems[0]}); "
                          f"see `sealbench verify {path}`") from None
        if report.replay_of is not None:
            raise _refuse(f"{path} is a replay of run {report.replay_of.get('run_id')}: its model replies came from "
                          "that run's record, so it reproduces a run and measures nothing; compare measured runs")
        sides.append(Side.of(report))
    return compare_sides(sides, allow_mixed_isolation=allow_mixed_isolation)
