"""Model use and cost from model_call events: tokens as reported, cost only by the locked prices."""

from __future__ import annotations

import pytest

from sealbench import events as ev
from sealbench.formats import ModelEndpoint, ModelPrice
from sealbench.usage import Usage, call_cost, task_usage, upstream_failed, usage_of

PRICE = ModelPrice(input=2.0, output=8.0, cached_input=0.5, read_on="2026-11-30")
OPENAI = ModelEndpoint(name="oa", style="openai-chat", base_url="https://api.example.test/v1", models=["m"],
                       key_env="K", prices={"m": PRICE})
ANTHROPIC = ModelEndpoint(name="an", style="anthropic-messages", base_url="https://api.example.test", models=["m"],
                          key_env="K", prices={"m": PRICE})
UNPRICED = ModelEndpoint(name="free", style="openai-chat", base_url="https://api.example.test/v1", models=["m"],
                         key_env="K")


def call(endpoint: str = "oa", **kw: object) -> ev.ModelCall:
    fields: dict[str, object] = {"task_id": "t", "attempt": 1, "index": 0, "status": 200, "endpoint": endpoint,
                                 "model": "m", "input_tokens": 1000, "output_tokens": 100, "cached_tokens": 400}
    fields.update(kw)
    return ev.ModelCall(**fields)  # type: ignore[arg-type]


def test_openai_counts_cached_tokens_inside_input_and_anthropic_apart() -> None:
    # OpenAI: 600 uncached at 2.0, 400 cached at 0.5, 100 out at 8.0, per million.
    assert call_cost(call(), "openai-chat", PRICE) == pytest.approx((600 * 2 + 400 * 0.5 + 100 * 8) / 1e6)
    # Anthropic: 1000 input at 2.0 (cache reads are apart), 400 cached at 0.5, 100 out at 8.0.
    assert call_cost(call("an"), "anthropic-messages", PRICE) == pytest.approx((1000 * 2 + 400 * 0.5 + 800) / 1e6)


def test_cost_is_unknown_never_zero_without_a_price_or_without_usage() -> None:
    assert usage_of([call("free")], [UNPRICED]).cost is None
    assert usage_of([call(input_tokens=None, output_tokens=None, cached_tokens=None)], [OPENAI]).cost is None
    assert usage_of([call(model="other")], [OPENAI]).cost is None


def test_refused_and_error_replies_without_usage_cost_nothing_and_are_counted() -> None:
    u = usage_of([call(), call(status=403, refused="undeclared model", input_tokens=None, output_tokens=None,
                               cached_tokens=None),
                  call(status=400, input_tokens=None, output_tokens=None, cached_tokens=None)], [OPENAI])
    assert (u.calls, u.refused, u.failed, u.unreported) == (3, 1, 0, 0)
    assert u.cost == pytest.approx((600 * 2 + 400 * 0.5 + 100 * 8) / 1e6)
    assert (u.input_tokens, u.output_tokens, u.cached_tokens) == (1000, 100, 400)


def test_upstream_failures_are_the_infrastructure_s() -> None:
    for status in (None, 500, 502, 503, 429):
        assert upstream_failed(call(status=status, input_tokens=None, output_tokens=None, cached_tokens=None))
    for status in (200, 400, 404):
        assert not upstream_failed(call(status=status))
    assert not upstream_failed(call(status=403, refused="token of a finished attempt"))
    u = usage_of([call(status=None, error="connection refused", input_tokens=None, output_tokens=None,
                       cached_tokens=None)], [OPENAI])
    assert (u.failed, u.unreported) == (1, 0) and u.cost is None


def test_sums_add_up_and_mixed_currencies_have_no_cost() -> None:
    a = Usage(calls=1, input_tokens=10, output_tokens=1, cost=0.5, currency="USD")
    b = Usage(calls=2, input_tokens=5, output_tokens=2, cost=0.25, currency="USD")
    assert (a + b) == Usage(calls=3, input_tokens=15, output_tokens=3, cost=0.75, currency="USD")
    assert (a + Usage(calls=1, cost=1.0, currency="EUR")).cost is None
    assert (a + Usage(calls=1, cost=None)).cost is None


def test_a_task_without_model_calls_has_no_usage() -> None:
    line = ev.Line(seq=0, time="t", mono_ms=0, boot_id=None, event=ev.Heartbeat(), raw={})
    assert task_usage([line]) is None
    used = ev.Line(seq=1, time="t", mono_ms=0, boot_id=None, event=call(), raw={})
    assert task_usage([line, used], [OPENAI]) == usage_of([call()], [OPENAI])


def test_compare_states_each_run_s_model_use_beside_the_verdict() -> None:
    from sealbench.compare import model_use_words
    from sealbench.formats import ModelUsage, Scorecard
    from sealbench.outcomes import Outcome

    def card(tid: str, passed: bool, cost: float | None) -> Scorecard:
        return Scorecard(task_id=tid, passed=passed, attempts_used=1, max_attempts=1, elapsed_ms=1, wall_clock_s=1.0,
                         prompt_template_id="p", hidden_tests_sha256="sha256:" + "0" * 64,
                         tool_trace_sha256="sha256:" + "1" * 64, scorecard_complete=True,
                         outcome=Outcome.PASS if passed else Outcome.FAIL, first_attempt_passed=passed, patch_sha256=None,
                         model_usage=ModelUsage(calls=2, refused=0, failed=0, unreported=0, input_tokens=100,
                                                output_tokens=10, cached_tokens=0, cost=cost,
                                                currency="USD" if cost is not None else None))

    assert model_use_words([card("a", True, 0.5), card("b", False, 0.25)]) == (
        "4 model call(s), 200 input and 20 output tokens, cost 0.7500 USD, 0.7500 per pass")
    assert model_use_words([card("a", True, 0.5), card("b", False, None)]) == (
        "4 model call(s), 200 input and 20 output tokens, cost unknown")
    assert model_use_words([]) is None
