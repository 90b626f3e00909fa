"""Experiment 4 on the command line (``python -m core --only batch``): its table and its summary.

On the embedded engine the sweep runs against a second llama-server with slots (``-np N
--kv-unified``, `core.cli.target.connection_with_slots`), so experiments 1-3 keep their one-slot server.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from core.experiments.batch import BatchLevel
from core.experiments.batch_summary import summarize_batch

COLUMNS = [("concurrency", "N", 3), ("aggregate_decode_tps", "decode/s", 9), ("per_stream_decode_tps", "stream/s", 9),
           ("aggregate_prefill_tps", "prefill/s", 9), ("ttft_p50_ms", "ttft p50", 9), ("ttft_p99_ms", "ttft p99", 9),
           ("itl_p50_ms", "itl p50", 8), ("itl_p99_ms", "itl p99", 8), ("wall_ms", "wall ms", 9),
           ("errors", "errors", 6)]


def header() -> str:
    return " ".join(title.rjust(width) for _, title, width in COLUMNS)


def format_level(level: BatchLevel) -> str:
    values = [(getattr(level, name), width) for name, _, width in COLUMNS]
    line = " ".join(("-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)).rjust(w) for v, w in values)
    return f"{line}  ERROR: {level.error}" if level.error else line


def _tps(value: float | None) -> str:
    """A rate, or "no data" where the level measured none (never a made-up 0)."""
    return "no data" if value is None else f"{value:,.0f}"


def _times(value: float | None) -> str:
    return "no data" if value is None else f"{value:.1f}x"


def summary_lines(levels: Sequence[BatchLevel]) -> Iterator[str]:
    summary = summarize_batch(levels)
    if summary is None:
        return
    first, last = summary.first, summary.last
    yield (f"Experiment 4: decode {_tps(first.aggregate_decode_tps)} -> {_tps(last.aggregate_decode_tps)} tokens/s "
           f"from {first.concurrency} to {last.concurrency} streams ({_times(summary.decode_gain)}); each stream "
           f"{_tps(first.per_stream_decode_tps)} -> {_tps(last.per_stream_decode_tps)} tokens/s; prefill "
           f"{_tps(first.aggregate_prefill_tps)} -> {_tps(last.aggregate_prefill_tps)} tokens/s.")
    if summary.decode_cost_alone and summary.decode_cost_batched:
        yield (f"A decode token costs the time of {summary.decode_cost_alone:.1f} prefill tokens alone, "
               f"{summary.decode_cost_batched:.1f} with {last.concurrency} streams.")
