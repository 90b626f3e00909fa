"""Plain-text summaries of a run's rounds, for the command line: what each experiment showed.

A figure with no rounds behind it reads "no data"; every timing says whether the server or this
client's stream clock measured it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from core.experiments import summaries
from core.records import RoundResult

NO_DATA = "no data"


def _number(value: float | None, unit: str = "") -> str:
    return NO_DATA if value is None else f"{value:,.0f}{unit}"


def _rounds(numbers: list[int]) -> str:
    return f"round {numbers[0]}" if len(numbers) == 1 else f"rounds {', '.join(map(str, numbers))}"


def summary_lines(rows: Sequence[RoundResult]) -> Iterator[str]:
    inp, out = summaries.summarize_input(rows), summaries.summarize_output(rows)
    if inp.prefill_tps:
        per_1k = inp.ms_per_1k()
        yield (f"Experiment 1: prefill {inp.prefill_tps:,.0f} tokens/s"
               + (f", {per_1k:.0f} ms per 1k input tokens" if per_1k else "") + f" (timed by the {inp.prefill_source})")
    if out.ms_per_output_token and out.decode_tps:
        yield (f"Experiment 2: decode {out.decode_tps:,.1f} tokens/s "
               f"({out.ms_per_output_token:.1f} ms per output token, timed by the {out.decode_source})")
    ratio = summaries.prefill_decode_ratio(inp, out)
    if ratio:
        yield f"Prefill processes a token {ratio:.0f}x faster than decode produces one."
    cache = summaries.summarize_cache(rows)
    for s in cache.values():
        writes = "" if s.cache_write_total is None else f", wrote {s.cache_write_total:,} to the cache"
        yield (f"Experiment 3 [{s.strategy}]: {s.rounds} rounds, recomputed {_number(s.recomputed_total)} and read "
               f"{_number(s.cached_total)} cached tokens in total{writes}; from round 2 a median "
               f"{_number(s.recomputed_after_first)} recomputed, TTFT {_number(s.ttft_median_after_first_ms, ' ms')}")
    for name, ratio in summaries.recomputed_ratio(cache).items():
        yield (f"{name} recomputed {ratio:.1f}x the tokens append_only did "
               f"({_rounds(summaries.common_rounds(cache, name))}, measured for both).")
