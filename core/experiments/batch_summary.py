"""What a concurrency sweep says: decode gains from sharing steps, prefill does not; and the price lens.

The cost ratio compares the machine time one token takes: a decode token costs
``prefill tokens/s / decode tokens/s`` prefill tokens. Alone (N = 1) that is the full price of
memory-bound decode; batched (the largest N) it is what a provider that fills its batches pays.
Providers' list prices put output at 3-5 times input (`PRICE_LISTS`, editable on the page).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.experiments.batch import BatchLevel


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


@dataclass
class BatchSummary:
    """The first and last usable levels of a sweep, and what changed between them."""

    first: BatchLevel
    last: BatchLevel

    @property
    def decode_gain(self) -> float | None:
        """Aggregate decode tokens/s at the largest N over the smallest."""
        return _ratio(self.last.aggregate_decode_tps, self.first.aggregate_decode_tps)

    @property
    def prefill_gain(self) -> float | None:
        return _ratio(self.last.aggregate_prefill_tps, self.first.aggregate_prefill_tps)

    @property
    def decode_cost_alone(self) -> float | None:
        """Prefill tokens one decode token costs at the smallest N (one stream: memory-bound)."""
        return _ratio(self.first.aggregate_prefill_tps, self.first.aggregate_decode_tps)

    @property
    def decode_cost_batched(self) -> float | None:
        """The same at the largest N: batching shares each weight read among the streams."""
        return _ratio(self.last.aggregate_prefill_tps, self.last.aggregate_decode_tps)


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top and bottom else None


def summarize_batch(levels: Sequence[BatchLevel]) -> BatchSummary | None:
    """None until two levels with a decode rate exist (one level shows no trend)."""
    usable = sorted((lv for lv in levels if lv.aggregate_decode_tps), key=lambda lv: lv.concurrency)
    if len(usable) < 2:
        return None
    return BatchSummary(usable[0], usable[-1])


def batch_verdict(levels: Sequence[BatchLevel]) -> tuple[bool | None, dict[str, float]]:
    """Whether this run showed the effect (decode grew at least 1.3x, prefill stayed within 25 %), and its numbers.

    None while there are fewer than two usable levels.
    """
    summary = summarize_batch(levels)
    if summary is None or summary.decode_gain is None:
        return None, {}
    first, last = summary.first, summary.last
    prefill_gain = summary.prefill_gain or 1.0
    values = {"n1": first.concurrency, "n2": last.concurrency, "decode_gain": summary.decode_gain,
              "prefill_gain": prefill_gain, "d1": first.aggregate_decode_tps or 0, "d2": last.aggregate_decode_tps or 0,
              "s1": first.per_stream_decode_tps or 0, "s2": last.per_stream_decode_tps or 0,
              "p1": first.aggregate_prefill_tps or 0, "p2": last.aggregate_prefill_tps or 0}
    return summary.decode_gain >= 1.3 and 0.75 <= prefill_gain <= 1.25, values
