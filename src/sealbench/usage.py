"""What a task's model calls used and cost, from its ``model_call`` events and the locked price
table. Pure functions: the deriver, the report and ``compare`` read the same numbers.

Tokens are summed as the upstream reported them. Cost is computed only from the contract's
locked prices, per call, by the API style's meaning of its usage fields: the OpenAI styles
count cached tokens inside their input tokens, Anthropic's Messages counts them apart. Cost
is unknown (None), never zero, when any forwarded call of the task reported no usage, or
named a model the price table does not price.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from . import events as ev
from .formats import ModelEndpoint, ModelPrice, ModelUsage
from .safe_text import inert

ANTHROPIC_STYLES = frozenset({"anthropic-messages"})
"""Styles whose input tokens exclude the cached ones (the others include them)."""
ENDPOINT_FAILED: Final = "the model endpoint failed"
"""How the harness error of an attempt that ended while its model endpoint was failing begins
(:func:`sealbench.attempt.run_attempt`): a cause that is neither the agent's nor the harness's."""
NEVER_STARTED: Final = "the agent never started"
"""How the harness error of an attempt whose agent command could not be executed begins
(:func:`sealbench.attempt.never_started`): a setup mistake, never a measured attempt."""
_MILLION = 1_000_000


@dataclass(frozen=True)
class Usage:
    """Model use summed over calls: counts, tokens as reported, and cost when it is known."""

    calls: int = 0
    """Requests the agent made to the gateway, refused ones included."""
    refused: int = 0
    """Requests the gateway refused (never sent upstream)."""
    failed: int = 0
    """Requests forwarded that the upstream failed: no reply, a 5xx, or a 429."""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    unreported: int = 0
    """Calls answered successfully whose reply reported no usage: their tokens are not in the
    sums, and the cost is unknown."""
    cost: float | None = 0.0
    """Cost by the locked price table; None when unknown (no price, or a call without usage)."""
    currency: str | None = None

    def __add__(self, other: Usage) -> Usage:
        currency = self.currency or other.currency
        if self.currency and other.currency and self.currency != other.currency:
            cost: float | None = None
        else:
            cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return Usage(self.calls + other.calls, self.refused + other.refused, self.failed + other.failed,
                      self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                      self.cached_tokens + other.cached_tokens, self.unreported + other.unreported, cost, currency)


def recorded(u: ModelUsage) -> Usage:
    """A scorecard's ``model_usage`` as a :class:`Usage`, to be summed."""
    return Usage(u.calls, u.refused, u.failed, u.input_tokens, u.output_tokens, u.cached_tokens, u.unreported,
                 u.cost, u.currency)


def total(used: Iterable[ModelUsage]) -> Usage:
    """The sum of scorecards' ``model_usage`` (a run's model use); its cost is unknown when any
    task's is, or when their currencies differ."""
    out = Usage()
    for u in used:
        out = out + recorded(u)
    return out


def cost_words(cost: float | None, currency: str | None) -> str:
    """A cost as printed: four decimals and its currency, or "unknown"."""
    return "unknown" if cost is None else f"{cost:.4f} {inert(currency or '')}".rstrip()


def upstream_failed(call: ev.ModelCall) -> bool:
    """The call was forwarded and the upstream failed it: no reply at all, a server error, or
    a rate limit. The infrastructure's failure, never the agent's."""
    if call.refused is not None:
        return False
    return call.status is None or call.status >= 500 or call.status == 429


def call_cost(call: ev.ModelCall, style: str | None, price: ModelPrice | None) -> float | None:
    """One call's cost by ``price`` (per million tokens), or None when it cannot be known."""
    if call.refused is not None or (call.status is not None and call.status >= 400 and call.input_tokens is None):
        return 0.0  # never sent upstream, or an error reply that reports no usage: nothing billed
    if price is None or style is None or call.input_tokens is None or call.output_tokens is None:
        return None
    cached = call.cached_tokens or 0
    cached_price = price.cached_input if price.cached_input is not None else price.input
    uncached = call.input_tokens if style in ANTHROPIC_STYLES else max(0, call.input_tokens - cached)
    return (uncached * price.input + cached * cached_price + call.output_tokens * price.output) / _MILLION


def usage_of(calls: Iterable[ev.ModelCall], endpoints: Iterable[ModelEndpoint] = ()) -> Usage:
    """The summed use of ``calls`` (see the module docstring) under the endpoints' locked prices."""
    by_name: Mapping[str, ModelEndpoint] = {e.name: e for e in endpoints}
    total = Usage()
    for call in calls:
        endpoint = by_name.get(call.endpoint or "")
        prices = endpoint.prices if endpoint is not None and endpoint.prices else {}
        price = prices.get(call.model or "")
        forwarded = call.refused is None
        reported = call.input_tokens is not None or call.output_tokens is not None
        many = call.refused_count if not forwarded and call.refused_count is not None else 1
        total = total + Usage(
            calls=many, refused=0 if forwarded else many, failed=1 if upstream_failed(call) else 0,
            input_tokens=call.input_tokens or 0, output_tokens=call.output_tokens or 0,
            cached_tokens=call.cached_tokens or 0,
            unreported=1 if forwarded and not reported and call.status is not None and call.status < 400 else 0,
            cost=call_cost(call, endpoint.style if endpoint is not None else None, price),
            currency=price.currency if price is not None else None,
        )
    return total


def unfinished(events: Iterable[ev.Event]) -> list[ev.ModelCallStarted]:
    """The calls journaled as started whose ``model_call`` never came (the runner died while
    they were under way): forwarded, their use unknown."""
    items = list(events)
    ended = {(e.task_id, e.attempt, e.index) for e in items if isinstance(e, ev.ModelCall)}
    return [e for e in items if isinstance(e, ev.ModelCallStarted) and (e.task_id, e.attempt, e.index) not in ended]


def task_usage(lines: Iterable[ev.Line], endpoints: Iterable[ModelEndpoint] = ()) -> Usage | None:
    """The use of one task's model calls; None when the task made none (no field is derived then).
    A call started and never ended counts as one whose usage was not reported."""
    events = [line.event for line in lines]
    calls = [e for e in events if isinstance(e, ev.ModelCall)]
    lost = unfinished(events)
    if not calls and not lost:
        return None
    total = usage_of(calls, endpoints)
    by_name: Mapping[str, ModelEndpoint] = {e.name: e for e in endpoints}
    for started in lost:
        endpoint = by_name.get(started.endpoint or "")
        price = (endpoint.prices or {}).get(started.model or "") if endpoint is not None else None
        total = total + Usage(calls=1, unreported=1, cost=None, currency=price.currency if price else None)
    return total
