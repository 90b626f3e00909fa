"""Providers' list prices, the price lens beside experiment 4: output costs 3-5 times input (editable on the page);
and their cache prices, experiment 7's money: a cached input token costs a fraction of a recomputed one, above a
minimum prompt length.

Experiment 4 measures the machine's side of it (`core.experiments.batch.BatchSummary.decode_cost_alone`):
a decode token costs ``prefill tokens/s / decode tokens/s`` prefill tokens.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PriceList:
    """One model's list prices in USD per million tokens, with when and where they were read. A cache read costs
    ``cached_input_per_mtok``; Anthropic bills the tokens it writes to its cache at ``cache_write_per_mtok``;
    a prompt shorter than ``cache_min_tokens`` is not cached at all."""

    provider: str
    model: str
    input_per_mtok: float
    output_per_mtok: float
    as_of: str
    source: str
    cached_input_per_mtok: float | None = None  # None: no cache discount
    cache_write_per_mtok: float | None = None  # None: writing to the cache costs the input price
    cache_min_tokens: int = 0


PRICE_LISTS = (
    PriceList("OpenAI", "gpt-4.1", 2.00, 8.00, "2026-06-21", "OpenAI model pricing, via tokenmath.io", 0.50, None,
              1024),
    PriceList("OpenAI", "gpt-4o", 2.50, 10.00, "2026-05",
              "platform.openai.com/docs/pricing, via aimodelcalc.pages.dev", 1.25, None, 1024),
    PriceList("Anthropic", "claude-sonnet-4-5", 3.00, 15.00, "2025-11-25",
              "Anthropic pricing, via docs.rs/cogito-claude (cache: 5-minute writes 1.25x, reads 0.1x)", 0.30, 3.75,
              1024),
    PriceList("DeepSeek", "deepseek-chat (cache miss)", 0.27, 1.10, "2025-02",
              "api-docs.deepseek.com/quick_start/pricing-details-usd (cache hit 0.07, 64-token units)", 0.07, None,
              64),
)


def input_cost(price: PriceList, prompt_tokens: int | None, cached_tokens: int | None) -> float | None:
    """USD for one prompt of which ``cached_tokens`` were read from a cache; None where a count is not reported.
    Below the provider's minimum nothing is cached, so every token costs the input price."""
    if prompt_tokens is None or cached_tokens is None:
        return None
    if price.cached_input_per_mtok is None or prompt_tokens < price.cache_min_tokens:
        return prompt_tokens * price.input_per_mtok / 1e6
    written = price.cache_write_per_mtok if price.cache_write_per_mtok is not None else price.input_per_mtok
    return ((prompt_tokens - cached_tokens) * written + cached_tokens * price.cached_input_per_mtok) / 1e6
