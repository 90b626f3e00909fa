"""The hosted demo's one admission and one settlement of a run, over `core.hosting`'s budgets.

`admit` checks a run against the demo's limits (its rounds, tokens, requests open at once and rate), guards an API's
URL (the allow list and public addresses) and reserves its estimated tokens on the operator's key, in that order,
before anything connects; `Admission.settle` charges what the run really sent once it ends (its connection's
count, `core.backends.base.SentTokens`), or nothing when it never started. A local install admits everything and
reserves nothing (`HostedSettings.hosted` is off).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.backends import API, BACKENDS
from core.backends.connect import Target
from core.experiments.base import Plan
from core.hosting import HostedSettings, Ledger, Spend, check_base_url


@dataclass
class Admission:
    """A run let in: the tokens it reserved (none on the visitor's own key or a local install), settled once."""

    plan: Plan
    budgets: Ledger  # `core.hosting.TokenLedger` in one process, `core.store.ledger.StoreLedger` in the store
    spend: Spend | None = None
    settled: bool = False

    def settle(self, tokens: int) -> int:
        """Charge the ``tokens`` the run sent in place of the estimate (a stopped run gives the rest back, a run
        that sent more pays it); ``tokens``."""
        if self.spend is not None and not self.settled:
            self.budgets.settle(self.spend, tokens)
        self.settled = True
        return tokens


def admit(plan: Plan, target: Target, visitor: str, whose_key: str, settings: HostedSettings,
          budgets: Ledger) -> Admission:
    """Let a run in, or raise `core.hosting.Refused` saying which limit it meets. ``whose_key`` is ``typed`` for
    the visitor's own key, whose runs spend none of the operator's budgets."""
    settings.check_run(plan.requests, plan.tokens, plan.at_once, plan.per_second)
    if BACKENDS[target.backend].needs == API:
        check_base_url(target.url, settings)
    spend = budgets.reserve(visitor, plan.tokens, settings) if settings.hosted and whose_key != "typed" else None
    return Admission(plan, budgets, spend)
