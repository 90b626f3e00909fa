"""Experiment 8 (``arrivals``): requests arriving over time, and where their time to first token goes when the
server is busy. An open-loop sweep that yields one `ArrivalLevel` per rate.

At each rate the requests (a prompt of about ``prompt_tokens`` tokens that starts with its own nonce, an answer
of ``output_tokens`` tokens with ``ignore_eos``) arrive as a **Poisson process**, seeded (``seed`` and the rate
pick the same arrivals in every run), for ``duration_s`` seconds: exponential gaps, so bursts come as they do
from many independent users (vLLM's ``bench serve`` and GuideLLM schedule the same way). Each request has its own
thread, started just before its time, that sleeps until it and sends: the schedule never waits for an earlier
request (open loop).

**Timed from the schedule.** A request's TTFT counts from when it was *scheduled*, whether or not the client
could send it then: a late send is **client delay**, never hidden (a client that waits before sending and times
from the send reports the wait away: the coordinated-omission error). The rest of TTFT is split into:

- **network**: one round trip to the server (a GET of ``/health`` or the model list, the fastest of five, 50 ms
  apart, just before the level, as AIPerf subtracts), at most what the request took before the server began it;
- **queue**: from the send to the moment the server began the prompt, less the round trip; llama-server says
  when (the first ``prompt_progress`` chunk, which it sends as it starts a prompt, ``time_ms`` 0). A server that
  does not say (a chat API) leaves it "not reported" (None), never 0;
- **prefill**: the server's own ``prompt_ms`` where reported;
- **server**: where a server reports neither but sends its own processing time in a header (OpenAI's
  ``openai-processing-ms``, `core.backends.base.PROCESSING_HEADER`): queue and prefill together, unsplit;
  None ("not reported") otherwise;
- **rest**: what remains (the first token's sampling and delivery; for an API without the header, the unsplit
  server time). The server's prefill clock starts a moment before its first progress chunk reaches the client:
  that overlap is taken off the queue (a header longer than the time left after the round trip: off the
  network), so no part is below 0.

The six add up to the measured TTFT by construction. A level ends at most ``duration_s`` after its last
arrival (`DRAIN`): requests still open then are cut and counted (``cut``), their TTFT at least the time they
waited (a lower bound in the percentiles, marked so), never dropped.

**Capacity**: the rate at which the prefill and decode work per second reaches what this machine did
(``prompt / prefill rate + (answer - 1) / decode rate`` seconds per request, experiments 1, 2 and 4, recorded
with the run); without them, this run's own service time at its lowest rate (one request at a time).
**Goodput** is the share of requests meeting a TTFT and an inter-token target the reader sets.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from core.backends.base import ChatRequest, StreamingBackend
from core.backends.connect import Connection
from core.backends.llama_server import LlamaServerBackend
from core.conclusions import DISTURBED, NO_DATA, NOT_SHOWN, SHOWN, Conclusion, Finding, MachineState, disturbed
from core.experiments.base import (
    DECODE_TPS,
    NO_WIDGET,
    OUTPUT_TOKENS,
    PREFILL_TPS,
    PROMPT_TOKENS,
    Experiment,
    Option,
    Plan,
    RunContext,
    Table,
)
from core.experiments.prompts import document_body, input_length_messages, nonce
from core.experiments.samples import SAMPLES_DIR
from core.records import RequestResult
from core.stats import median, nearest_rank
from core.words import Sentence

ID = "arrivals"
MAX_REQUESTS = 100  # per level: httpx's connection pool holds 100; more at once would wait inside the client
LEAD_S = 0.05  # a request's thread starts this long before its time, then sleeps until it
DRAIN = 1.0  # a level waits at most ``DRAIN x duration_s`` after its last arrival for its last requests
CUT_JOIN_S = 10.0  # how long a cut request's thread may take to end once its connection is shut
SETTLE_LOOK_S = 0.25  # a level starts once the server showed no busy slot on two looks this far apart
QUEUE_TOOK_OVER = 0.5  # shown: at the highest rate the queue is at least half the mean TTFT
TTFT_ROSE = 2.0  # ... and the median TTFT at least doubled from the lowest rate
PARTS = ("client", "network", "queue", "prefill", "server", "rest")
SAMPLE = SAMPLES_DIR / "embedded_arrivals.json"


def floats(text: str) -> tuple[float, ...]:
    """``"0.5,1,2"`` -> ``(0.5, 1.0, 2.0)``."""
    return tuple(float(part) for part in text.split(",") if part.strip())


OPTIONS = (Option("--rates", "experiment 8 (arrivals) requests per second, comma separated", floats),
           Option("--duration-s", "experiment 8: seconds of arrivals at each rate", float),
           PROMPT_TOKENS, OUTPUT_TOKENS, PREFILL_TPS, DECODE_TPS)


@dataclass(frozen=True)
class Settings:
    rates: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 3.0)  # requests per second, one level each
    duration_s: float = 20.0
    prompt_tokens: int = 100
    output_tokens: int = 16
    seed: int = 8
    ttft_target_ms: float = 1000.0  # goodput: a request meets both targets
    itl_target_ms: float = 100.0
    # The rates the capacity is predicted from (experiments 1, 2 and 4), filled before the run; exported with it.
    prefill_tps: float | None = field(default=None, metadata=NO_WIDGET)
    decode_tps: float | None = field(default=None, metadata=NO_WIDGET)
    predicted_from: str = field(default="", metadata=NO_WIDGET)  # "measured" where the rates are set
    # The most requests open at once (a hosted demo's cap on the operator's key): one due while they are all open
    # waits for one to end, and the wait is client delay, timed from the schedule like any late send. None: no cap.
    max_open: int | None = field(default=None, metadata=NO_WIDGET)


@dataclass
class ArrivalRequest:
    """One request of a level. Times in ms from its scheduled start (``scheduled_s`` since the level began); the
    parts add up to ``ttft_ms``; None where not measured or not reported."""

    index: int
    scheduled_s: float
    ttft_ms: float | None = None
    client_ms: float | None = None  # scheduled -> sent
    network_ms: float | None = None
    queue_ms: float | None = None  # None: the server does not say when it began
    prefill_ms: float | None = None
    server_ms: float | None = None  # a processing-time header's queue and prefill together (no queue or prefill)
    rest_ms: float | None = None
    end_ms: float | None = None
    itl_ms: float | None = None  # its mean gap between tokens after the first
    gaps_ms: list[float] = field(default_factory=list)
    service_ms: float | None = None  # the server's prefill plus decode
    output_tokens: int = 0
    prompt_tokens: int | None = None
    waited_ms: float | None = None  # cut before its first token: how long it had waited (a lower bound)
    cut: bool = False
    error: str = ""


@dataclass
class ArrivalLevel:
    """One rate: its requests, TTFT and ITL percentiles (nearest rank) and the mean split of TTFT."""

    rate: float  # requests per second asked for
    duration_s: float
    seed: int
    requests: int = 0  # scheduled
    completed: int = 0
    cut: int = 0
    errors: int = 0
    error: str = ""
    offered_rps: float | None = None  # the arrivals drawn, over the duration
    served_rps: float | None = None  # requests that finished, over the level's wall time
    rtt_ms: float | None = None
    ttft_p50_ms: float | None = None  # cut requests count with the time they waited (``cut`` > 0: lower bounds)
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    queue_p50_ms: float | None = None
    queue_p90_ms: float | None = None
    queue_p99_ms: float | None = None
    client_p50_ms: float | None = None
    client_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    ttft_mean_ms: float | None = None  # the means over the requests that finished: the parts add up to it
    client_mean_ms: float | None = None
    network_mean_ms: float | None = None
    queue_mean_ms: float | None = None
    prefill_mean_ms: float | None = None
    server_mean_ms: float | None = None
    rest_mean_ms: float | None = None
    service_ms: float | None = None  # median server time per request (prefill + decode)
    capacity_rps: float | None = None  # predicted before the run from experiments 1, 2 and 4
    ttft_target_ms: float | None = None
    itl_target_ms: float | None = None
    wall_s: float | None = None
    settle_s: float | None = None  # how long the level waited for the server to be idle before its first arrival
    settled: bool = True  # False: the server was still busy (the previous rate's cut requests) when it began
    experiment: str = ID
    streams: list[ArrivalRequest] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArrivalLevel:
        names = set(cls.__dataclass_fields__)
        level = cls(**{k: v for k, v in data.items() if k in names and k != "streams"})
        known = set(ArrivalRequest.__dataclass_fields__)
        level.streams = [ArrivalRequest(**{k: v for k, v in s.items() if k in known})
                         for s in data.get("streams") or []]
        return level


# -- the schedule and the sends --------------------------------------------------------------------------------------
def schedule(rate: float, duration_s: float, seed: int) -> list[float]:
    """Poisson arrivals at ``rate`` per second in ``[0, duration_s)``, the first at 0; the same for the same seed."""
    rng = random.Random(f"{seed}:{rate}")
    offsets, at = [], 0.0
    while at < duration_s and rate > 0:
        offsets.append(round(at, 6))
        at += rng.expovariate(rate)
    return offsets


@dataclass
class Sent:
    """One request as the scheduler saw it: when it was due (the backend's clock), its result, whether it was cut."""

    due: float
    result: RequestResult | None = None
    cut: bool = False


def send_on_schedule(backend: StreamingBackend, requests: Sequence[ChatRequest], offsets: Sequence[float],
                     cancel: threading.Event, drain_s: float,
                     max_open: int | None = None) -> tuple[list[Sent], float, float]:
    """Send each request at the level's origin plus its offset, each on its own thread (never waiting for an
    earlier one, unless ``max_open`` are open: then for the first of them to end); at the last offset plus
    ``drain_s`` cut the ones still open. ``(sent, origin, end)``."""
    origin = backend.clock() + LEAD_S
    sent = [Sent(origin + offset) for offset in offsets]
    cut = threading.Event()
    room = threading.BoundedSemaphore(max_open) if max_open else None

    def send(item: Sent, request: ChatRequest) -> None:
        while (wait := item.due - backend.clock()) > 0:  # never early: a wait may end a little before its time
            if cancel.wait(wait):
                return
        if room is not None:  # a wait for room is client delay; a stop or a cut ends the open ones, making room
            room.acquire()
        try:
            if not (cancel.is_set() or cut.is_set()):
                item.result = backend.stream_chat(request, cancel=cancel)
        finally:
            if room is not None:
                room.release()

    threads: list[threading.Thread] = []
    for item, request in zip(sent, requests, strict=True):
        lead = item.due - LEAD_S - backend.clock()
        if lead > 0 and cancel.wait(lead):
            break
        threads.append(threading.Thread(target=send, args=(item, request), name="arrivals", daemon=True))
        threads[-1].start()
    ends = origin + (offsets[-1] if offsets else 0.0) + drain_s
    for thread in threads:
        thread.join(max(ends - backend.clock(), 0.0))
    open_now = [item for item, thread in zip(sent, threads, strict=False) if thread.is_alive()]
    if open_now:
        cut.set()
        backend.abort()
        for item in open_now:
            item.cut = True
        for thread in threads:
            thread.join(CUT_JOIN_S)
    return sent, origin, backend.clock()


# -- one request's split ---------------------------------------------------------------------------------------------
def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def split(index: int, item: Sent, origin: float, rtt_ms: float | None, ended: float) -> ArrivalRequest:
    """One request's record: its TTFT from the schedule and the five parts that add up to it."""
    record = ArrivalRequest(index, round(item.due - origin, 6), cut=item.cut)
    result = item.result
    if result is None or result.sent_at is None:  # never sent: stopped or cut before its time
        record.waited_ms = _ms(ended - item.due) if item.cut else None
        return record
    client = _ms(result.sent_at - item.due)
    record.client_ms, record.prompt_tokens = client, result.prompt_tokens
    if result.ttft_s is None:
        record.error = "" if item.cut else result.error or "no first token"
        record.waited_ms = _ms(ended - item.due) if item.cut else None
        return record
    from_sent = result.ttft_s * 1000
    started = None if result.prompt_started_s is None else result.prompt_started_s * 1000
    network = None if rtt_ms is None else min(rtt_ms, from_sent if started is None else started)
    queue = None if started is None or network is None else started - network
    prefill = None if result.server_prefill_ms is None else min(result.server_prefill_ms, from_sent)
    header = result.server_processing_ms
    server = min(header, from_sent) if header is not None and started is None and prefill is None else None
    queue, network, rest = _overlap_off(from_sent, network, queue, (prefill or 0.0) + (server or 0.0))
    record.ttft_ms = round(client + from_sent, 3)
    record.network_ms, record.queue_ms = _round(network), _round(queue)
    record.prefill_ms, record.server_ms, record.rest_ms = _round(prefill), _round(server), round(rest, 3)
    record.end_ms = None if result.end_s is None else round(client + result.end_s * 1000, 3)
    record.gaps_ms = [round(gap * 1000, 3) for gap in result.inter_token_s]
    record.itl_ms = _round(sum(record.gaps_ms) / len(record.gaps_ms)) if record.gaps_ms else None
    record.output_tokens = result.completion_tokens or len(record.gaps_ms) + 1
    if result.server_prefill_ms is not None and result.server_decode_ms is not None:
        record.service_ms = round(result.server_prefill_ms + result.server_decode_ms, 3)
    record.error = "" if item.cut else result.error
    return record


def _overlap_off(from_sent: float, network: float | None, queue: float | None,
                 served: float) -> tuple[float | None, float | None, float]:
    """``(queue, network, rest)`` with the rest never below 0, ``served`` the server's own prefill or processing
    time: its prefill clock starts a moment before its first progress chunk reaches the client, so an overlap is
    taken off the queue (then the network: a processing header longer than what the round trip leaves)."""
    rest = from_sent - (network or 0.0) - (queue or 0.0) - served
    if rest < 0 and queue is not None:
        taken = min(queue, -rest)
        queue, rest = queue - taken, rest + taken
    if rest < 0 and network is not None:
        taken = min(network, -rest)
        network, rest = network - taken, rest + taken
    return queue, network, max(rest, 0.0)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# -- one level -------------------------------------------------------------------------------------------------------
def _percentiles(level: ArrivalLevel, name: str, values: Sequence[float], percents: Sequence[int]) -> None:
    for percent in percents:
        value = nearest_rank(values, percent)
        setattr(level, f"{name}_p{percent}_ms", None if value is None else round(value, 2))


def _mean(values: Sequence[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return round(sum(found) / len(found), 3) if found else None


def fold(level: ArrivalLevel, streams: list[ArrivalRequest], wall_s: float) -> ArrivalLevel:
    """A level's figures from its requests."""
    level.streams, level.requests, level.wall_s = streams, len(streams), round(wall_s, 3)
    timed = [s for s in streams if s.ttft_ms is not None]
    level.completed = sum(1 for s in timed if not s.error and not s.cut)
    level.cut = sum(1 for s in streams if s.cut)
    failed = [s.error for s in streams if s.error]
    level.errors, level.error = len(failed), (failed[0] if failed else "")
    level.offered_rps = round(len(streams) / level.duration_s, 3) if level.duration_s else None
    level.served_rps = round(level.completed / wall_s, 3) if wall_s > 0 and level.completed else None
    waits = [s.ttft_ms if s.ttft_ms is not None else s.waited_ms for s in streams]
    _percentiles(level, "ttft", [w for w in waits if w is not None], (50, 90, 99))
    _percentiles(level, "queue", [s.queue_ms for s in timed if s.queue_ms is not None], (50, 90, 99))
    _percentiles(level, "client", [s.client_ms for s in streams if s.client_ms is not None], (50, 99))
    _percentiles(level, "itl", [gap for s in timed for gap in s.gaps_ms], (50, 90, 99))
    done = [s for s in timed if not s.error and not s.cut]  # a request cut mid-answer never got its timings
    level.ttft_mean_ms = _mean([s.ttft_ms for s in done])
    for part in PARTS:
        values = [getattr(s, f"{part}_ms") for s in done]
        mean = _mean(values) if all(v is not None for v in values) else None  # a part some lack is not reported
        setattr(level, f"{part}_mean_ms", mean)
    level.service_ms = median(s.service_ms for s in timed if s.service_ms is not None)
    return level


def round_trip(backend: StreamingBackend, looks: int = 5, apart_s: float = 0.05) -> float | None:
    """The network's round trip in ms: the fastest of ``looks`` GETs ``apart_s`` apart (waiting for a busy
    machine's scheduler only ever adds, and one stall of it spans back-to-back looks, not spaced ones); None when
    the server cannot be reached."""
    trips = []
    for look in range(looks):
        if look:
            time.sleep(apart_s)
        trip = backend.round_trip_ms()
        if trip is not None:
            trips.append(trip)
    return round(min(trips), 3) if trips else None


def settle(backend: StreamingBackend, bound_s: float, cancel: threading.Event) -> tuple[float, bool]:
    """Wait until a llama-server has no busy slot on two looks `SETTLE_LOOK_S` apart (the previous rate's cut
    requests: a server reads a request its client already left and serves it), at most ``bound_s``.
    ``(seconds waited, idle)``; an API says nothing of its slots: ``(0, True)``."""
    if not isinstance(backend, LlamaServerBackend):
        return 0.0, True
    began, idle_looks = backend.clock(), 0
    while idle_looks < 2:
        busy = backend.busy_slots()
        if busy is None:  # a server that does not say (--no-slots): nothing to wait for
            return 0.0, True
        idle_looks = idle_looks + 1 if busy == 0 else 0
        waited = backend.clock() - began
        if idle_looks < 2 and (waited >= bound_s or cancel.wait(SETTLE_LOOK_S)):
            return round(waited, 3), False
    return round(backend.clock() - began, 3), True


def measure_level(backend: StreamingBackend, rate: float, settings: Settings,
                  requests: Callable[[int], list[ChatRequest]], cancel: threading.Event) -> ArrivalLevel:
    """One rate on a settled server: the round trip, the arrivals on schedule, the split of every request."""
    level = ArrivalLevel(rate, settings.duration_s, settings.seed, capacity_rps=predicted_capacity(settings),
                         ttft_target_ms=settings.ttft_target_ms, itl_target_ms=settings.itl_target_ms)
    level.settle_s, level.settled = settle(backend, DRAIN * settings.duration_s, cancel)
    offsets = schedule(rate, settings.duration_s, settings.seed)
    level.rtt_ms = round_trip(backend)
    sent, origin, ended = send_on_schedule(backend, requests(len(offsets)), offsets, cancel,
                                           DRAIN * settings.duration_s, settings.max_open)
    streams = [split(i, item, origin, level.rtt_ms, ended) for i, item in enumerate(sent)]
    return fold(level, streams, ended - origin)


# -- the experiment --------------------------------------------------------------------------------------------------
def predicted_capacity(settings: Settings) -> float | None:
    """Requests per second at which the work per second reaches what this machine did: one request costs
    ``prompt / prefill rate + (answer - 1) / decode rate`` seconds of the server."""
    if not settings.prefill_tps or not settings.decode_tps:
        return None
    seconds = settings.prompt_tokens / settings.prefill_tps + max(settings.output_tokens - 1, 0) / settings.decode_tps
    return round(1 / seconds, 4) if seconds > 0 else None


def with_rates(settings: Settings, prefill_tps: float, decode_tps: float) -> Settings:
    """``settings`` with this machine's measured rates (experiments 1, 2 and 4) to predict the capacity from."""
    return replace(settings, prefill_tps=prefill_tps, decode_tps=decode_tps, predicted_from="measured")


def plan(settings: Settings) -> Plan:
    """Every arrival of every level (the seeded schedule says exactly how many) plus the warm-up; one record per
    rate. Tokens: each prompt and its answer, and the warm-up's. Open at once: ``max_open``, else a level's every
    arrival (an open loop does not wait for a slow server); its rate: the highest."""
    counts = [len(schedule(rate, settings.duration_s, settings.seed)) for rate in settings.rates]
    requests = sum(counts)
    return Plan(requests + 1 if requests else 0, requests * (settings.prompt_tokens + settings.output_tokens),
                records=len(settings.rates), at_once=settings.max_open or max(counts, default=1),
                per_second=max(settings.rates, default=None)).warmed()


def prepare(settings: Settings, conn: Connection) -> Settings:
    """The rates in order; refused (a sentence) where a level would send more than `MAX_REQUESTS`."""
    rates = tuple(sorted({r for r in settings.rates if r > 0}))
    if not rates or settings.duration_s <= 0:
        raise ValueError(Sentence("settings_refused.arrivals_none"))
    most = max(len(schedule(rate, settings.duration_s, settings.seed)) for rate in rates)
    if most > MAX_REQUESTS:
        raise ValueError(Sentence("settings_refused.arrivals_too_many", most=most, duration=settings.duration_s,
                                  allowed=MAX_REQUESTS))
    return replace(settings, rates=rates)


def rounds(run: RunContext, settings: Settings) -> Iterator[ArrivalLevel]:
    """One `ArrivalLevel` per rate, lowest first; a stop drops the level in flight (what it sent is still charged:
    `core.backends.base.SentTokens`). ``run.progress`` hears
    ``{"rate": r, "level": i, "levels": n}`` as each level starts."""
    run.warm_up()
    body = document_body(run.counter, settings.prompt_tokens)
    extra = {"cache_prompt": False} if isinstance(run.backend, LlamaServerBackend) else {}

    def requests(n: int) -> list[ChatRequest]:
        return [ChatRequest(input_length_messages(body, nonce()), max_tokens=settings.output_tokens, ignore_eos=True,
                            extra=extra) for _ in range(n)]

    for index, rate in enumerate(settings.rates, start=1):
        if run.stopped():
            return
        if run.progress is not None:
            run.progress({"rate": rate, "level": index, "levels": len(settings.rates)})
        level = measure_level(run.backend, rate, settings, requests, run.cancel)
        if run.stopped():
            return
        yield level
        if level.requests and level.errors == level.requests:
            return


# -- what a sweep says -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArrivalSummary:
    """The levels by rate and the capacity they are read against."""

    levels: tuple[ArrivalLevel, ...]
    capacity: float | None
    capacity_from: str  # "predicted" (experiments 1, 2, 4), "run" (this run's lowest rate) or ""

    def below(self) -> list[ArrivalLevel]:
        return [lv for lv in self.levels if self.capacity and lv.rate < self.capacity]

    def above(self) -> list[ArrivalLevel]:
        return [lv for lv in self.levels if self.capacity and lv.rate > self.capacity]


def queue_share(level: ArrivalLevel) -> float | None:
    """The queue's share of the mean TTFT; None where the server does not report its queue."""
    if level.queue_mean_ms is None or not level.ttft_mean_ms:
        return None
    return level.queue_mean_ms / level.ttft_mean_ms


def goodput(level: ArrivalLevel, ttft_target_ms: float, itl_target_ms: float) -> tuple[int, float | None]:
    """Requests that met both targets, and their rate per second of arrivals; cut and failed requests never do."""
    good = sum(1 for s in level.streams if s.ttft_ms is not None and not s.error and not s.cut
               and s.ttft_ms <= ttft_target_ms and (s.itl_ms is None or s.itl_ms <= itl_target_ms))
    return good, (round(good / level.duration_s, 3) if level.duration_s else None)


def summarize(records: Sequence[Any]) -> ArrivalSummary | None:
    """None until a level measured a first token (or waited for one until it was cut)."""
    levels = tuple(sorted((r for r in records if isinstance(r, ArrivalLevel) and r.ttft_p50_ms is not None),
                          key=lambda lv: lv.rate))
    if not levels:
        return None
    predicted = next((lv.capacity_rps for lv in levels if lv.capacity_rps), None)
    if predicted:
        return ArrivalSummary(levels, predicted, "predicted")
    service = _service(levels)
    return ArrivalSummary(levels, round(1000 / service, 4) if service else None, "run" if service else "")


def _service(levels: Sequence[ArrivalLevel]) -> float | None:
    """The server's time per request at the lowest rate that finished one (one request at a time, or nearly)."""
    return next((lv.service_ms for lv in levels if lv.service_ms), None)


def _claims(found: ArrivalSummary) -> tuple[Finding, ...]:
    claims: list[Finding] = []
    if found.capacity:
        claims.append(Finding(f"capacity_{found.capacity_from}", {"capacity": found.capacity,
                                                                   "service": _service(found.levels) or 0.0}))
    finished = [lv for lv in found.levels if lv.ttft_mean_ms is not None]
    if finished:
        last = finished[-1]
        parts = {part: getattr(last, f"{part}_mean_ms") for part in PARTS}
        values = {"rate": last.rate, "ttft": last.ttft_mean_ms, **{k: v or 0.0 for k, v in parts.items()}}
        reported = parts["queue"] is not None and parts["network"] is not None
        claims.append(Finding("split" if reported else "split_server" if parts["server"] is not None
                              else "split_unreported", values))
    low, top = found.levels[0], found.levels[-1]
    claims.append(Finding("goodput", {
        "low_rate": low.rate, "low_good": goodput(low, *_targets(low))[0], "low_total": low.requests,
        "high_rate": top.rate, "high_good": goodput(top, *_targets(top))[0], "high_total": top.requests,
        "ttft_target": _targets(top)[0], "itl_target": _targets(top)[1]}))
    worst = max(found.levels, key=lambda lv: lv.client_p99_ms or 0.0)
    claims.append(Finding("client_delay", {"p99": worst.client_p99_ms or 0.0, "rate": worst.rate}))
    claims.extend(Finding("cut", {"rate": lv.rate, "cut": lv.cut, "total": lv.requests})
                  for lv in found.levels if lv.cut)
    return tuple(claims)


def _targets(level: ArrivalLevel) -> tuple[float, float]:
    return (level.ttft_target_ms or Settings.ttft_target_ms, level.itl_target_ms or Settings.itl_target_ms)


def _disturbed(found: ArrivalSummary, state: MachineState | None) -> Finding | None:
    """A busy machine (the meter), or a rate that began while the server still served the previous rate's cut
    requests."""
    meter = disturbed(state)
    if meter is not None:
        return meter
    leftover = next((lv for lv in found.levels if not lv.settled), None)
    if leftover is None:
        return None
    return Finding("leftover", {"rate": leftover.rate, "waited": leftover.settle_s or 0.0})


def conclude(records: Sequence[Any], state: MachineState | None) -> Conclusion:
    """Shown: the median TTFT at the highest rate (above capacity) is at least `TTFT_ROSE` times the lowest's
    (below it), and the queue is at least `QUEUE_TOOK_OVER` of its mean TTFT; decided by the first that failed."""
    found = summarize(records)
    if found is None or len(found.levels) < 2:
        return Conclusion(ID, NO_DATA, Finding("too_few", {"levels": len(found.levels) if found else 0}))
    claims = _claims(found)
    trouble = _disturbed(found, state)
    if trouble is not None:
        return Conclusion(ID, DISTURBED, trouble, claims)
    low, high = found.levels[0], found.levels[-1]
    share = next((queue_share(lv) for lv in reversed(found.above()) if queue_share(lv) is not None), None)
    checks = (
        (found.capacity is None, Finding("no_capacity", {})),
        (not found.below(), Finding("none_below", {"capacity": found.capacity or 0.0, "rate": low.rate})),
        (not found.above(), Finding("none_above", {"capacity": found.capacity or 0.0, "rate": high.rate})),
        (all(lv.queue_mean_ms is None for lv in found.levels), Finding("queue_unreported", {})),
        (share is None, Finding("none_finished", {"rate": high.rate})),
        ((high.ttft_p50_ms or 0) < TTFT_ROSE * (low.ttft_p50_ms or 0),
         Finding("ttft_flat", {"low": low.ttft_p50_ms or 0.0, "high": high.ttft_p50_ms or 0.0, "times": TTFT_ROSE})),
        ((share or 0) < QUEUE_TOOK_OVER, Finding("queue_small", {"share": (share or 0) * 100, "rate": high.rate})),
    )
    for failed, finding in checks:
        if failed:
            return Conclusion(ID, NOT_SHOWN, finding, claims)
    return Conclusion(ID, SHOWN, Finding("queue_took_over", {
        "capacity": found.capacity or 0.0, "low_rate": low.rate, "low": low.ttft_p50_ms or 0.0, "high_rate": high.rate,
        "high": high.ttft_p50_ms or 0.0, "share": (share or 0) * 100}), claims)


TABLE = Table((("rate", "rate/s", 6), ("requests", "sent", 5), ("ttft_p50_ms", "ttft p50", 9),
               ("ttft_p90_ms", "ttft p90", 9), ("ttft_p99_ms", "ttft p99", 9), ("queue_p50_ms", "queue p50", 9),
               ("client_p99_ms", "client p99", 10), ("itl_p50_ms", "itl p50", 8), ("itl_p99_ms", "itl p99", 8),
               ("cut", "cut", 4), ("errors", "errors", 6)))

EXPERIMENT = Experiment(
    id=ID, title="requests arriving at a rate: TTFT split into client, network, queue and prefill",
    icon=":material/schedule:", settings=Settings, rounds=rounds, plan=plan, prepare=prepare, summary=summarize,
    conclude=conclude, table=TABLE, record=ArrivalLevel, records="rates", options=OPTIONS,
    sample=SAMPLE, default=False)
