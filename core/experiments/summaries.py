"""Summaries of an experiment's rounds. They never invent a number: a figure with no rounds behind it is
``None`` ("no data"), and a ratio compares only the rounds both sides measured."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from core.experiments import input_length, output_length, prefix_cache
from core.records import RoundResult
from core.stats import LinearFit, linear_fit, median


def _ok(rows: Sequence[RoundResult], experiment: str) -> list[RoundResult]:
    return [r for r in rows if r.experiment == experiment and not r.error]


def _sources(rows: Sequence[RoundResult], name: str) -> str | None:
    """SERVER, CLIENT, both joined with "+", or None: where the timings behind a summary came from."""
    found = sorted({getattr(r, name) for r in rows if getattr(r, name)})
    return "+".join(found) or None


@dataclass
class InputSummary:
    prefill_tps: float | None
    ttft_fit: LinearFit | None
    prefill_fit: LinearFit | None
    prefill_source: str | None = None  # "server" (prefill_ms), "client" (TTFT where the server reports none), both

    def ms_per_1k(self) -> float | None:
        fit = self.prefill_fit or self.ttft_fit
        return None if fit is None else fit.slope * 1000


def summarize_input(rows: Sequence[RoundResult]) -> InputSummary:
    """Prefill speed: tokens computed over the server's prefill time, or over TTFT where it reports none."""
    ok = _ok(rows, input_length.ID)
    speeds, used = [], []
    for r in ok:
        tokens = r.recomputed_tokens if r.recomputed_tokens is not None else r.prompt_tokens
        ms = r.prefill_ms if r.prefill_ms is not None else r.ttft_ms
        if tokens and ms:
            speeds.append(tokens / ms * 1000)
            used.append(r)
    prompt_tokens = [r.prompt_tokens for r in ok]
    return InputSummary(
        median(speeds),
        linear_fit(prompt_tokens, [r.ttft_ms for r in ok]),
        linear_fit(prompt_tokens, [r.prefill_ms for r in ok]),
        _sources(used, "prefill_source"),
    )


@dataclass
class OutputSummary:
    ms_per_output_token: float | None
    decode_tps: float | None
    decode_source: str | None = None  # "server" (llama-server's decode timings), "client" (the stream clock), both


def summarize_output(rows: Sequence[RoundResult]) -> OutputSummary:
    ok = _ok(rows, output_length.ID)
    per_token = median(r.ms_per_output_token for r in ok)
    return OutputSummary(
        per_token,
        1000 / per_token if per_token else None,
        _sources([r for r in ok if r.ms_per_output_token is not None], "decode_source"),
    )


@dataclass
class StrategySummary:
    strategy: str
    rounds: int
    recomputed_total: int | None
    cached_total: int | None
    recomputed_after_first: float | None
    ttft_median_after_first_ms: float | None
    recomputed_by_round: dict[int, int] = field(default_factory=dict)
    cache_write_total: int | None = None  # Anthropic: tokens written to the cache (None: not reported)


def _total(values: list[int | None]) -> int | None:
    return None if not values or None in values else sum(v for v in values if v is not None)


def summarize_cache(rows: Sequence[RoundResult]) -> dict[str, StrategySummary]:
    out: dict[str, StrategySummary] = {}
    ok = _ok(rows, prefix_cache.ID)
    for strategy in dict.fromkeys(r.strategy for r in ok):
        mine = [r for r in ok if r.strategy == strategy]
        later = [r for r in mine if r.round > 1]
        writes = [r.cache_write_tokens for r in mine]
        out[str(strategy)] = StrategySummary(
            str(strategy),
            len(mine),
            _total([r.recomputed_tokens for r in mine]),
            _total([r.cached_tokens for r in mine]),
            median(r.recomputed_tokens for r in later),
            median(r.ttft_ms for r in later),
            {r.round: r.recomputed_tokens for r in mine if r.recomputed_tokens is not None},
            None if all(w is None for w in writes) else sum(w or 0 for w in writes),
        )
    return out


def prefill_decode_ratio(input_summary: InputSummary, output_summary: OutputSummary) -> float | None:
    """How many times faster prefill processes a token than decode produces one."""
    if input_summary.prefill_tps and output_summary.decode_tps:
        return input_summary.prefill_tps / output_summary.decode_tps
    return None


def common_rounds(summaries: dict[str, StrategySummary], name: str, base: str = "append_only") -> list[int]:
    """The rounds both strategies measured a recomputed count for: the only rounds a ratio may compare."""
    if name not in summaries or base not in summaries:
        return []
    return sorted(set(summaries[name].recomputed_by_round) & set(summaries[base].recomputed_by_round))


def recomputed_ratio(summaries: dict[str, StrategySummary], base: str = "append_only") -> dict[str, float]:
    """Each strategy's recomputed tokens over the append-only ones, on the same rounds only.

    A strategy that shares no measured round with ``base`` (or a base that recomputed nothing on
    them) gets no ratio: 1 round against 4 is not a comparison.
    """
    out: dict[str, float] = {}
    for name, summary in summaries.items():
        common = common_rounds(summaries, name, base)
        anchor_total = sum(summaries[base].recomputed_by_round[r] for r in common)
        if name != base and anchor_total:
            out[name] = sum(summary.recomputed_by_round[r] for r in common) / anchor_total
    return out
