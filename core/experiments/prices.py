"""Providers' list prices, the price lens beside experiment 4: output costs 3-5 times input (editable on the page).

Experiment 4 measures the machine's side of it (`core.experiments.batch.BatchSummary.decode_cost_alone`):
a decode token costs ``prefill tokens/s / decode tokens/s`` prefill tokens.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PriceList:
    """One model's list prices in USD per million tokens, with when and where they were read."""

    provider: str
    model: str
    input_per_mtok: float
    output_per_mtok: float
    as_of: str
    source: str


PRICE_LISTS = (
    PriceList("OpenAI", "gpt-4.1", 2.00, 8.00, "2026-06-21", "OpenAI model pricing, via tokenmath.io"),
    PriceList("OpenAI", "gpt-4o", 2.50, 10.00, "2026-05",
              "platform.openai.com/docs/pricing, via aimodelcalc.pages.dev"),
    PriceList("Anthropic", "claude-sonnet-4-5", 3.00, 15.00, "2025-11-25",
              "Anthropic pricing, via docs.rs/cogito-claude"),
    PriceList("DeepSeek", "deepseek-chat (cache miss)", 0.27, 1.10, "2025-02",
              "api-docs.deepseek.com/quick_start/pricing-details-usd"),
)
