"""Did a run show what its experiment is meant to show? Pure functions over the rounds.

Each returns ``(shown, values)``: ``values`` fill the page's sentence in either language.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core import experiments as ex
from core.results import RoundResult
from core.stats import median

Verdict = tuple[bool, dict[str, Any]]


def input_verdict(rows: Sequence[RoundResult]) -> Verdict:
    ok = sorted((r for r in rows if r.experiment == ex.INPUT and not r.error and r.ttft_ms is not None),
                key=lambda r: r.prompt_tokens or 0)
    summary = ex.summarize_input(rows)
    if len({r.prompt_tokens for r in ok}) < 2 or not summary.prefill_tokens_per_s:
        return False, {}
    first, last = ok[0], ok[-1]
    fit = summary.ttft_fit
    shown = last.ttft_ms > first.ttft_ms and fit is not None and fit.slope > 0
    return shown, {"first": first.ttft_ms, "first_tokens": first.prompt_tokens, "last": last.ttft_ms,
                   "last_tokens": last.prompt_tokens, "speed": summary.prefill_tokens_per_s}


def output_verdict(rows: Sequence[RoundResult]) -> Verdict:
    ok = sorted((r for r in rows if r.experiment == ex.OUTPUT and not r.error and r.ms_per_output_token),
                key=lambda r: r.output_tokens or 0)
    if len({r.output_tokens for r in ok}) < 2:
        return False, {}
    per_token = [r.ms_per_output_token for r in ok if (r.output_tokens or 0) >= 8] or [r.ms_per_output_token for r in ok]
    middle = median(per_token) or 1.0
    spread = (max(per_token) - min(per_token)) / middle * 100  # type: ignore[type-var]
    last = ok[-1]
    shown = (last.total_ms or 0) > (ok[0].total_ms or 0) and spread < 50
    return shown, {"tokens": last.output_tokens, "total": last.total_ms, "per_token": middle, "spread": spread}


def cache_verdict(rows: Sequence[RoundResult]) -> Verdict:
    """Compares append-only with the first other strategy, by token counts or else by TTFT."""
    summaries = ex.summarize_cache(rows)
    append = summaries.get("append_only")
    others = [s for name, s in summaries.items() if name != "append_only" and s.rounds >= 2]
    if append is None or append.rounds < 2 or not others:
        return False, {}
    other = others[0]
    if append.recomputed_after_first is not None and other.recomputed_after_first is not None:
        later = [r for r in rows if r.strategy == other.strategy and r.round > 1 and not r.error]
        share = median((r.recomputed_tokens or 0) / r.prompt_tokens for r in later if r.prompt_tokens) or 0.0
        shown = append.recomputed_after_first <= 64 and share >= 0.9
        return shown, {"by": "tokens", "append": append.recomputed_after_first, "breaker": other.recomputed_after_first,
                       "share": share, "other": other.strategy}
    if append.ttft_median_after_first_ms is None or other.ttft_median_after_first_ms is None:
        return False, {}
    shown = append.ttft_median_after_first_ms < other.ttft_median_after_first_ms
    return shown, {"by": "time", "append": append.ttft_median_after_first_ms,
                   "breaker": other.ttft_median_after_first_ms, "other": other.strategy}
