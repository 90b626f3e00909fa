"""Experiment 4 on the command line (``python -m core --only batch``): its table and its summary.

On the embedded engine the sweep runs against a second llama-server with slots (``-np N
--kv-unified``), so experiments 1-3 keep their one-slot server: one server per setting.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack

from core.backends.connect import Connection, Target, open_connection
from core.engine.server import DEFAULT_CONTEXT, LocalServer
from core.experiments.batch import BatchLevel, concurrency_sweep, levels_that_fit, server_slots
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


def batch_connection(conn: Connection, stack: ExitStack, levels: Sequence[int],
                     context: int = DEFAULT_CONTEXT) -> Connection:
    """``conn``, or for the embedded engine with too few slots a second server with enough (stopped with ``stack``)."""
    if conn.name != "local" or (server_slots(conn.backend) or 1) >= max(levels, default=1):
        return conn
    slots = max(levels)
    print(f"Starting an embedded llama-server with {slots} slots...", file=sys.stderr)
    server = stack.enter_context(LocalServer(context=context, slots=slots))
    return stack.enter_context(open_connection(Target("local", url=server.url)))


def run_sweep(conn: Connection, levels: Sequence[int]) -> Iterator[BatchLevel]:
    """The sweep at the levels the server allows; a note on stderr names the ones it does not."""
    slots = server_slots(conn.backend)
    allowed = levels_that_fit(levels, slots)
    skipped = sorted(set(levels) - set(allowed))
    if skipped:
        print(f"note: skipping concurrency {', '.join(map(str, skipped))}: the server has {slots} slots",
              file=sys.stderr)
    print(header())
    for level in concurrency_sweep(conn.backend, conn.counter, allowed):
        print(format_level(level), flush=True)
        yield level


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
