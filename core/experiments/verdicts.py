"""Did a run show what its experiment is meant to show? Pure functions over the rounds.

Each returns ``(shown, values)``: ``values`` fill the page's sentence in either language.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.experiments import input_length, output_length, prefix_cache, summaries
from core.records import RoundResult
from core.stats import median

Verdict = tuple[bool, dict[str, Any]]


def input_verdict(rows: Sequence[RoundResult]) -> Verdict:
    ok = sorted((r for r in rows if r.experiment == input_length.ID and not r.error and r.ttft_ms is not None),
                key=lambda r: r.prompt_tokens or 0)
    summary = summaries.summarize_input(rows)
    if len({r.prompt_tokens for r in ok}) < 2 or not summary.prefill_tps:
        return False, {}
    first, last = ok[0], ok[-1]
    fit = summary.ttft_fit
    shown = last.ttft_ms > first.ttft_ms and fit is not None and fit.slope > 0  # type: ignore[operator]
    return shown, {"first": first.ttft_ms, "first_tokens": first.prompt_tokens, "last": last.ttft_ms,
                   "last_tokens": last.prompt_tokens, "speed": summary.prefill_tps}


def output_verdict(rows: Sequence[RoundResult]) -> Verdict:
    ok = sorted((r for r in rows if r.experiment == output_length.ID and not r.error and r.ms_per_output_token
                 and r.total_ms is not None), key=lambda r: r.output_tokens or 0)
    if len({r.output_tokens for r in ok}) < 2:
        return False, {}
    per_token = ([r.ms_per_output_token for r in ok if (r.output_tokens or 0) >= 8]
                 or [r.ms_per_output_token for r in ok])
    middle = median(per_token)
    if not middle:
        return False, {}
    spread = (max(per_token) - min(per_token)) / middle * 100  # type: ignore[type-var, operator]
    first, last = ok[0], ok[-1]
    shown = last.total_ms > first.total_ms and spread < 50  # type: ignore[operator]
    return shown, {"tokens": last.output_tokens, "total": last.total_ms, "per_token": middle, "spread": spread}


def cache_verdict(rows: Sequence[RoundResult]) -> Verdict:
    """Compares append-only with the first other strategy on the rounds after the first that both
    measured, by token counts or else by TTFT."""
    ok = [r for r in rows if r.experiment == prefix_cache.ID and not r.error and r.round > 1]
    names = list(dict.fromkeys(r.strategy for r in ok))
    if "append_only" not in names or len(names) < 2:
        return False, {}
    other = next(n for n in names if n != "append_only")
    common = {r.round for r in ok if r.strategy == "append_only"} & {r.round for r in ok if r.strategy == other}
    append = [r for r in ok if r.strategy == "append_only" and r.round in common]
    breaker = [r for r in ok if r.strategy == other and r.round in common]
    if not common:
        return False, {}
    append_tokens = median(r.recomputed_tokens for r in append)
    breaker_tokens = median(r.recomputed_tokens for r in breaker)
    share = median(r.recomputed_tokens / r.prompt_tokens for r in breaker
                   if r.recomputed_tokens is not None and r.prompt_tokens)
    if append_tokens is not None and breaker_tokens is not None and share is not None:
        shown = append_tokens <= 64 and share >= 0.9
        return shown, {"by": "tokens", "append": append_tokens, "breaker": breaker_tokens, "share": share,
                       "other": other, "rounds": len(common)}
    append_ttft, breaker_ttft = median(r.ttft_ms for r in append), median(r.ttft_ms for r in breaker)
    if append_ttft is None or breaker_ttft is None:
        return False, {}
    return append_ttft < breaker_ttft, {"by": "time", "append": append_ttft, "breaker": breaker_ttft, "other": other,
                                        "rounds": len(common)}
