"""Plain-text summaries of a run's rounds, for the command line: what each experiment showed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from core import experiments as ex
from core.results import RoundResult


def summary_lines(rows: Sequence[RoundResult]) -> Iterator[str]:
    inp, out = ex.summarize_input(rows), ex.summarize_output(rows)
    if inp.prefill_tokens_per_s:
        per_1k = inp.ms_per_1k()
        yield f"Experiment 1: prefill {inp.prefill_tokens_per_s:,.0f} tokens/s" + (f", {per_1k:.0f} ms per 1k input tokens" if per_1k else "")
    if out.ms_per_token:
        yield f"Experiment 2: decode {out.decode_tokens_per_s:,.1f} tokens/s ({out.ms_per_token:.1f} ms per output token)"
    ratio = ex.prefill_decode_ratio(inp, out)
    if ratio:
        yield f"Prefill processes a token {ratio:.0f}x faster than decode produces one."
    cache = ex.summarize_cache(rows)
    for s in cache.values():
        yield (f"Experiment 3 [{s.strategy}]: {s.rounds} rounds, recomputed {s.recomputed_total} and reused "
               f"{s.reused_total} tokens in total; from round 2 a median {s.recomputed_after_first or 0:.0f} recomputed, "
               f"TTFT {s.ttft_median_after_first_ms or 0:.0f} ms")
    for name, ratio in ex.recomputed_ratio(cache).items():
        yield f"{name} recomputed {ratio:.1f}x the tokens append_only did."
