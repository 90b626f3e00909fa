"""Experiment 4 (``batch``): many requests at once. A concurrency sweep that yields one `BatchLevel` per N.

At each level N the sweep sends two phases, each of N requests started together (threads behind a
barrier, one shared httpx client whose pool holds them all):

- **prefill**: N prompts of about ``prompt_tokens`` tokens with ``max_tokens=1``; the aggregate
  prefill rate is their prompt tokens over the phase's wall time;
- **decode**: N short prompts answered with exactly ``output_tokens`` tokens (``ignore_eos``); the
  aggregate decode rate is all streams' output tokens over the phase's wall time, and each stream's
  own rate is its tokens after the first over the time from its first to its last token.

Every request starts with its own nonce, and a llama-server is also told ``cache_prompt: false``,
so nothing is served from a cache. Each stream's start, first token, chunks and end are kept in
seconds since its level's phase began (`StreamTiming`), so their overlap can be checked.
A failing stream is counted in its level (``errors``, first message in ``error``) and the other
streams and levels go on; a level where every request failed ends the sweep.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from core.backends.base import ChatRequest, StreamingBackend
from core.backends.connect import Connection
from core.backends.llama_server import LlamaServerBackend
from core.backends.tokens import TokenCounter
from core.conclusions import DISTURBED, NO_DATA, NOT_SHOWN, SHOWN, Conclusion, Finding, MachineState, disturbed
from core.experiments.base import (
    OUTPUT_PROMPT_TOKENS,
    OUTPUT_TOKENS,
    PROMPT_TOKENS,
    Experiment,
    Option,
    Plan,
    RunContext,
    Table,
    ints,
)
from core.experiments.prompts import document_body, input_length_messages, nonce, output_length_messages
from core.experiments.samples import EMBEDDED_BATCH
from core.records import RequestResult, renamed
from core.stats import nearest_rank

ID = "batch"
BATCH_SLOTS = 8  # the app's embedded batch server: -np 8 --kv-unified, one 8,192-token cache shared
OPTIONS = (Option("--concurrency", "experiment 4 (batch) requests at once, comma separated; up to the server's "
                  "slots", ints), PROMPT_TOKENS, OUTPUT_TOKENS)


@dataclass(frozen=True)
class Settings:
    concurrency: tuple[int, ...] = (1, 2, 4, 8)  # the levels N of the sweep
    output_tokens: int = 128
    prompt_tokens: int = 600


@dataclass
class StreamTiming:
    """One request of a level, in seconds since its phase began; first token None when none came."""

    phase: str  # "prefill" or "decode"
    start_s: float
    first_token_s: float | None
    end_s: float
    output_tokens: int
    prompt_tokens: int | None
    cached_tokens: int | None
    chunk_times_s: list[float] = field(default_factory=list)
    error: str = ""


@dataclass
class BatchLevel:
    """One concurrency level: throughputs, latency percentiles (nearest rank) and its streams."""

    concurrency: int
    aggregate_decode_tps: float | None = None
    per_stream_decode_tps: float | None = None  # median over the streams
    per_stream_decode_tps_min: float | None = None
    per_stream_decode_tps_max: float | None = None
    aggregate_prefill_tps: float | None = None
    prefill_prompt_tokens: int | None = None  # all the prefill phase's prompts together
    output_tokens: int = 0  # all the decode phase's streams together
    ttft_p50_ms: float | None = None  # decode phase: N short prompts sent at once
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None  # gaps between consecutive chunks, all streams pooled
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    prefill_wall_ms: float | None = None
    wall_ms: float | None = None  # the decode phase
    cached_tokens: int | None = None  # summed over every request; None when the server does not report it
    errors: int = 0
    error: str = ""  # the first failing stream's message; "" when every stream succeeded
    streams: list[StreamTiming] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BatchLevel":
        """Read back a record written by `to_dict` (an export, a recorded sample)."""
        names = set(cls.__dataclass_fields__)
        level = cls(**{k: v for k, v in renamed(data).items() if k in names and k != "streams"})
        level.streams = [StreamTiming(**renamed(s)) for s in data.get("streams") or []]
        return level


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def _rate(tokens: float, seconds: float | None) -> float | None:
    return round(tokens / seconds, 2) if tokens and seconds and seconds > 0 else None


def _output_tokens(result: RequestResult) -> int:
    if result.completion_tokens is not None:
        return result.completion_tokens
    return len([t for t in result.chunk_times_s if result.ttft_s is not None and t >= result.ttft_s])


def _timing(phase: str, offset: float, result: RequestResult) -> StreamTiming:
    def shifted(seconds: float | None) -> float | None:
        return None if seconds is None else round(offset + seconds, 5)

    end = shifted(result.end_s)  # None when the request failed before any answer
    return StreamTiming(phase, round(offset, 5), shifted(result.ttft_s), round(offset, 5) if end is None else end,
                        _output_tokens(result), result.prompt_tokens, result.cached_tokens,
                        [round(offset + t, 5) for t in result.chunk_times_s], result.error)


def _stream_rate(stream: StreamTiming) -> float | None:
    """One stream's decode rate: its tokens after the first over the time from its first to its last token."""
    if stream.first_token_s is None:
        return None
    return _rate(stream.output_tokens - 1, stream.end_s - stream.first_token_s)


def run_concurrently(backend: StreamingBackend, requests: Sequence[ChatRequest], phase: str,
                     cancel: threading.Event | None = None) -> tuple[list[StreamTiming], list[RequestResult], float]:
    """Send ``requests`` at once (one thread each, released together); their timings, results and wall seconds."""
    barrier = threading.Barrier(len(requests) + 1)
    origin: list[float] = []

    def send(request: ChatRequest) -> tuple[float, RequestResult]:
        barrier.wait()
        offset = backend.clock() - origin[0]
        return offset, backend.stream_chat(request, cancel=cancel)

    with ThreadPoolExecutor(max_workers=len(requests), thread_name_prefix=f"batch-{phase}") as pool:
        futures = [pool.submit(send, request) for request in requests]
        origin.append(backend.clock())
        barrier.wait()
        sent = [future.result() for future in futures]
    timings = [_timing(phase, offset, result) for offset, result in sent]
    wall = max(t.end_s for t in timings) - min(t.start_s for t in timings)
    return timings, [result for _, result in sent], wall


def measure_level(backend: StreamingBackend, concurrency: int, body: str,
                  output_tokens: int = Settings.output_tokens, cancel: threading.Event | None = None) -> BatchLevel:
    """Both phases at one concurrency, folded into one record (see the module docstring).

    ``body`` is the prefill phase's document (`prefill_body`); TTFT and inter-token percentiles come
    from the decode phase.
    """
    extra = {"cache_prompt": False} if isinstance(backend, LlamaServerBackend) else {}
    prefill_requests = [ChatRequest(input_length_messages(body, nonce()), max_tokens=1, ignore_eos=True,
                                    extra=extra) for _ in range(concurrency)]
    prefill, prefill_results, prefill_wall = run_concurrently(backend, prefill_requests, "prefill", cancel)
    decode_requests = [ChatRequest(output_length_messages(nonce()), max_tokens=output_tokens, ignore_eos=True,
                                   extra=extra) for _ in range(concurrency)]
    decode: list[StreamTiming] = []
    decode_results: list[RequestResult] = []
    decode_wall = None
    if cancel is None or not cancel.is_set():  # a stop between the phases sends no more requests
        decode, decode_results, decode_wall = run_concurrently(backend, decode_requests, "decode", cancel)
    level = BatchLevel(concurrency, streams=prefill + decode, prefill_wall_ms=_ms(prefill_wall),
                       wall_ms=_ms(decode_wall))
    failed = [t.error for t in level.streams if t.error]
    level.errors, level.error = len(failed), (failed[0] if failed else "")
    cached = [t.cached_tokens for t in level.streams if t.cached_tokens is not None]
    level.cached_tokens = sum(cached) if cached else None
    prompt_tokens = [(r.recomputed_tokens if r.recomputed_tokens is not None else r.prompt_tokens) or 0
                     for r in prefill_results if not r.error]
    level.prefill_prompt_tokens = sum(prompt_tokens) or None
    level.aggregate_prefill_tps = _rate(sum(prompt_tokens), prefill_wall)
    ok = [(t, r) for t, r in zip(decode, decode_results, strict=True) if not r.error]
    level.output_tokens = sum(t.output_tokens for t, _ in ok)
    level.aggregate_decode_tps = _rate(level.output_tokens, decode_wall)
    per_stream = [rate for rate in (_stream_rate(t) for t, _ in ok) if rate is not None]
    level.per_stream_decode_tps = nearest_rank(per_stream, 50)
    level.per_stream_decode_tps_min = min(per_stream, default=None)
    level.per_stream_decode_tps_max = max(per_stream, default=None)
    ttfts = [r.ttft_s * 1000 for _, r in ok if r.ttft_s is not None]
    gaps = [gap * 1000 for _, r in ok for gap in r.inter_token_s]
    for name, values in (("ttft", ttfts), ("itl", gaps)):
        for percent in (50, 90, 99):
            value = nearest_rank(values, percent)
            setattr(level, f"{name}_p{percent}_ms", None if value is None else round(value, 2))
    return level


def plan(settings: Settings) -> Plan:
    """Two requests per stream per level (prefill, decode) plus the warm-up, for budgets; one record per level."""
    streams = sum(settings.concurrency)
    tokens = streams * (settings.prompt_tokens + 1 + OUTPUT_PROMPT_TOKENS + settings.output_tokens)
    return Plan(2 * streams + 1 if streams else 0, tokens, records=len(settings.concurrency),
                at_once=slots(settings)).warmed()


def slots(settings: Settings) -> int:
    """The embedded server's slots the sweep needs: its largest N."""
    return max(settings.concurrency, default=1)


def server_slots(backend: StreamingBackend) -> int | None:
    """How many requests a llama-server decodes at once (``/props`` ``total_slots``); None for an API."""
    return backend.props().get("total_slots") if isinstance(backend, LlamaServerBackend) else None


def levels_that_fit(levels: Sequence[int], most: int | None) -> list[int]:
    """The requested concurrencies the server (``/props`` ``total_slots``) or a hosted limit allows."""
    return sorted({n for n in levels if n >= 1 and (most is None or n <= most)})


def prepare(settings: Settings, conn: Connection) -> Settings:
    """The levels in order, up to the slots the server decodes at once."""
    return replace(settings, concurrency=tuple(levels_that_fit(settings.concurrency, server_slots(conn.backend))))


def prefill_body(counter: TokenCounter, prompt_tokens: int = Settings.prompt_tokens) -> str:
    """The document cut so that a prefill-phase prompt is about ``prompt_tokens`` tokens."""
    return document_body(counter, prompt_tokens)


def rounds(run: RunContext, settings: Settings) -> Iterator[BatchLevel]:
    """One `BatchLevel` per concurrency in ``settings.concurrency``, in the order given.

    A stop drops the level in flight and keeps the ones measured. ``run.progress`` hears
    ``{"concurrency": N, "level": i, "levels": len(levels)}`` as each level starts.
    """
    run.warm_up()
    levels = settings.concurrency
    body = prefill_body(run.counter, settings.prompt_tokens)
    for index, concurrency in enumerate(levels, start=1):
        if run.stopped():
            return
        if run.progress is not None:
            run.progress({"concurrency": concurrency, "level": index, "levels": len(levels)})
        level = measure_level(run.backend, concurrency, body, settings.output_tokens, run.cancel)
        if run.stopped():
            return
        yield level
        if level.errors == len(level.streams):
            return


# What a sweep says: decode gains from sharing steps, prefill does not. The cost ratio compares the machine time
# one token takes: a decode token costs ``prefill tokens/s / decode tokens/s`` prefill tokens. Alone (N = 1) that
# is the full price of memory-bound decode; batched (the largest N) it is what a provider that fills its batches
# pays (the price lens beside it: `core.experiments.prices`).
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


def summarize_batch(levels: Sequence[Any]) -> BatchSummary | None:
    """None until two levels with a decode rate exist (one level shows no trend)."""
    usable = sorted((lv for lv in levels if isinstance(lv, BatchLevel) and lv.aggregate_decode_tps),
                    key=lambda lv: lv.concurrency)
    if len(usable) < 2:
        return None
    return BatchSummary(usable[0], usable[-1])


MIN_GAIN = 1.3  # decode throughput must grow at least this much from the smallest N to the largest
FLAT = 0.25  # ... while prefill throughput stays within this share of where it started
ALONE_MARGIN = 1.25  # each of N streams cannot decode faster than one alone: beating it by this much is contention


def _contention(levels: Sequence[BatchLevel], first: BatchLevel) -> Finding | None:
    """A level whose streams each decoded faster than the smallest level's did: that one was slowed by something
    else (one stream alone at 4.5 tokens/s, each of two at 45.8, in the issue that asked for this)."""
    alone = first.per_stream_decode_tps
    for level in levels:
        each = level.per_stream_decode_tps
        if alone and each and level.concurrency > first.concurrency and each > ALONE_MARGIN * alone:
            return Finding("stream_beats_alone", {"n": level.concurrency, "each": each, "n1": first.concurrency,
                                                  "alone": alone, "times": each / alone})
    return None


def _claims(summary: BatchSummary) -> tuple[Finding, ...]:
    first, last = summary.first, summary.last
    ends = {"n1": first.concurrency, "n2": last.concurrency}
    claims = [Finding("decode", {**ends, "d1": first.aggregate_decode_tps, "d2": last.aggregate_decode_tps,
                                 "gain": summary.decode_gain})]
    if first.per_stream_decode_tps and last.per_stream_decode_tps:
        claims.append(Finding("per_stream", {**ends, "s1": first.per_stream_decode_tps,
                                             "s2": last.per_stream_decode_tps}))
    if summary.prefill_gain:
        claims.append(Finding("prefill", {**ends, "p1": first.aggregate_prefill_tps, "p2": last.aggregate_prefill_tps,
                                          "gain": summary.prefill_gain}))
    if summary.decode_cost_alone and summary.decode_cost_batched:
        claims.append(Finding("cost", {"alone": summary.decode_cost_alone, "batched": summary.decode_cost_batched,
                                       "n2": last.concurrency}))
    return tuple(claims)


def conclude(levels: Sequence[BatchLevel], state: MachineState | None) -> Conclusion:
    """Shown: decode throughput grew at least `MIN_GAIN` from the smallest N to the largest while prefill stayed
    within `FLAT`; decided by the first rule that failed, or by contention (`_contention`, a busy meter)."""
    summary = summarize_batch(levels)
    if summary is None or summary.decode_gain is None:
        return Conclusion(ID, NO_DATA, Finding("too_few"))
    claims, ends = _claims(summary), {"n1": summary.first.concurrency, "n2": summary.last.concurrency}
    usable = [lv for lv in levels if isinstance(lv, BatchLevel)]
    if (trouble := disturbed(state) or _contention(usable, summary.first)) is not None:
        return Conclusion(ID, DISTURBED, trouble, claims)
    if summary.decode_gain < MIN_GAIN:
        return Conclusion(ID, NOT_SHOWN, Finding("decode_short", {**ends, "gain": summary.decode_gain,
                                                                  "need": MIN_GAIN}), claims)
    prefill = summary.prefill_gain
    if prefill is not None and abs(prefill - 1) > FLAT:
        return Conclusion(ID, NOT_SHOWN, Finding("prefill_not_flat", {**ends, "gain": prefill,
                                                                      "flat": 100 * FLAT}), claims)
    return Conclusion(ID, SHOWN, Finding("batched", {**ends, "gain": summary.decode_gain}), claims)


TABLE = Table((("concurrency", "N", 3), ("aggregate_decode_tps", "decode/s", 9),
               ("per_stream_decode_tps", "stream/s", 9), ("aggregate_prefill_tps", "prefill/s", 9),
               ("ttft_p50_ms", "ttft p50", 9), ("ttft_p99_ms", "ttft p99", 9), ("itl_p50_ms", "itl p50", 8),
               ("itl_p99_ms", "itl p99", 8), ("wall_ms", "wall ms", 9), ("errors", "errors", 6)))


EXPERIMENT = Experiment(
    id=ID, title="many requests at once: aggregate and per-stream tokens/s against N", icon=":material/stacks:",
    settings=Settings, rounds=rounds, plan=plan, prepare=prepare, summary=summarize_batch, conclude=conclude,
    table=TABLE, record=BatchLevel, records="levels",
    options=OPTIONS, sample=EMBEDDED_BATCH, slots=slots, default=False)
