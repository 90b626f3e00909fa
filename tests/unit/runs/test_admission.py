"""The hosted demo's one admission (limits, URL guard, reservation) and one settlement of a run."""

from __future__ import annotations

from functools import partial

import pytest

from core import hosting
from core.backends.connect import Target
from core.experiments.base import Plan
from core.hosting import HostedSettings, Refused, TokenLedger
from core.records import RoundResult
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
    sent = [RoundResult("input", 1, prompt_tokens=100, output_tokens=4)]
    assert admission.settle(sent) == 104 and admission.settle([]) == 0  # settled once: the second call charges nothing
    assert admission.spend.tokens == 104
    admit(Plan(2, 600), Target("api", URL, "m"), "v1", "OPENAI_API_KEY", HOSTED, budgets)  # 104 + 600 fits now


def test_a_visitors_own_key_and_a_local_install_reserve_nothing() -> None:
    assert admit(Plan(2, 600), Target("api", URL, "m"), "v1", "typed", HOSTED, TokenLedger()).spend is None
    local = admit(Plan(99, 10**9), Target("api", "http://127.0.0.1:1", "m"), "", "", HostedSettings(), TokenLedger())
    assert local.spend is None and local.settle([]) == 0


@pytest.mark.parametrize(("plan", "url", "key"), [(Plan(5, 10), URL, "rounds"),
                                                  (Plan(1, 10), "https://other.example.com/v1", "not_listed")])
def test_over_a_limit_or_off_the_list_is_refused_before_anything_is_reserved(plan: Plan, url: str, key: str) -> None:
    budgets = TokenLedger()
    with pytest.raises(Refused) as refused:
        admit(plan, Target("api", url, "m"), "v1", "OPENAI_API_KEY", HOSTED, budgets)
    assert refused.value.key == key and budgets._spends == []
