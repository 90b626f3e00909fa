"""The hosted demo's one admission (limits, URL guard, reservation) and one settlement of a run."""

from __future__ import annotations

from functools import partial

import pytest

from core import hosting
from core.backends.connect import Target
from core.experiments import arrivals as ar
from core.experiments.base import WARM_UP_TOKENS, Plan
from core.hosting import HostedSettings, Refused, TokenLedger
from core.runs.admission import admit

URL = "https://api.example.com/v1"
HOSTED = HostedSettings(hosted=True, allowed_base_urls=(URL,), max_rounds=4, max_tokens_per_visitor=1000)
PUBLIC = [(2, 1, 6, "", ("93.184.215.14", 443))]  # what example.com resolves to


@pytest.fixture(autouse=True)
def resolves_publicly(monkeypatch: pytest.MonkeyPatch) -> None:
    """No DNS in tests: the guard's resolver answers a public address."""
    monkeypatch.setattr("core.runs.admission.check_base_url",
                        partial(hosting.check_base_url, resolve=lambda *args, **kwargs: PUBLIC))


def test_the_operators_key_reserves_and_settles_what_was_sent_once() -> None:
    budgets = TokenLedger()
    admission = admit(Plan(2, 600), Target("api", URL, "m"), "v1", "OPENAI_API_KEY", HOSTED, budgets)
    assert admission.spend is not None and admission.spend.tokens == 600
    with pytest.raises(Refused) as refused:  # the reservation holds: 600 + 600 > 1000
        admit(Plan(2, 600), Target("api", URL, "m"), "v1", "OPENAI_API_KEY", HOSTED, budgets)
    assert refused.value.key == "visitor_tokens"
    assert admission.settle(104) == 104 and admission.settle(0) == 0  # settled once: the second call charges nothing
    assert admission.spend.tokens == 104
    admit(Plan(2, 600), Target("api", URL, "m"), "v1", "OPENAI_API_KEY", HOSTED, budgets)  # 104 + 600 fits now


def test_a_visitors_own_key_and_a_local_install_reserve_nothing() -> None:
    assert admit(Plan(2, 600), Target("api", URL, "m"), "v1", "typed", HOSTED, TokenLedger()).spend is None
    local = admit(Plan(99, 10**9), Target("api", "http://127.0.0.1:1", "m"), "", "", HostedSettings(), TokenLedger())
    assert local.spend is None and local.settle(0) == 0


@pytest.mark.parametrize(("plan", "url", "key"), [(Plan(5, 10), URL, "rounds"),
                                                  (Plan(1, 10), "https://other.example.com/v1", "not_listed")])
def test_over_a_limit_or_off_the_list_is_refused_before_anything_is_reserved(plan: Plan, url: str, key: str) -> None:
    budgets = TokenLedger()
    with pytest.raises(Refused) as refused:
        admit(plan, Target("api", url, "m"), "v1", "OPENAI_API_KEY", HOSTED, budgets)
    assert refused.value.key == key and budgets._spends == []


def test_experiment_8_on_the_operators_key_is_capped_by_the_admission_not_only_the_page() -> None:
    """The page offers at most 1 request/s and caps open streams, but the admission is what holds, for any caller:
    a plan faster than the demo's rate, or an open loop that may open more streams than its concurrency (no
    ``max_open``: a level's every arrival at once on a slow API), is refused before anything is reserved; a capped
    one reserves its plan's tokens (the count the page prices) before it connects."""
    hosted = HostedSettings(hosted=True, allowed_base_urls=(URL,), max_concurrency=4, max_rate=1.0, max_rounds=100,
                            max_tokens_per_visitor=10**6)
    fast = ar.plan(ar.Settings(rates=(0.5, 2.0), duration_s=10.0, max_open=4))
    open_loop = ar.plan(ar.Settings(rates=(0.5, 1.0), duration_s=10.0))
    assert open_loop.at_once > 4 and fast.per_second == 2.0
    for plan, key in ((fast, "rate"), (open_loop, "concurrency")):
        budgets = TokenLedger()
        with pytest.raises(Refused) as refused:
            admit(plan, Target("api", URL, "m"), "v1", "OPENAI_API_KEY", hosted, budgets)
        assert refused.value.key == key and budgets._spends == []
    capped = ar.plan(ar.Settings(rates=(0.5, 1.0), duration_s=10.0, max_open=4))
    budgets = TokenLedger()
    admission = admit(capped, Target("api", URL, "m"), "v1", "OPENAI_API_KEY", hosted, budgets)
    assert admission.spend is not None and budgets._spends == [admission.spend]
    assert admission.spend.tokens == capped.tokens == (capped.requests - 1) * (100 + 16) + WARM_UP_TOKENS
