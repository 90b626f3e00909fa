"""Experiment 8 (`core.experiments.arrivals`): the schedule, the split of TTFT against a one-slot server on
127.0.0.1 whose queue is known from the sends, a slowed client, the conclusion on made-up levels, and the sweep on
the real embedded llama-server."""

from __future__ import annotations

import sys
import threading
import time
from statistics import median
from typing import Any

import httpx
import pytest

from core.backends import OpenAICompatBackend
from core.backends.base import PROCESSING_HEADER, ChatRequest, read_processing
from core.backends.llama_server import LlamaServerBackend
from core.conclusions import DISTURBED, NO_DATA, NOT_SHOWN, SHOWN, MachineState, render
from core.experiments import arrivals as ar
from core.experiments.base import WARM_UP_TOKENS, RunContext
from core.records import RequestResult
from core.stats import linear_fit, nearest_rank
from core.words import ContentWords
from tests.support.fake_slot import SlotProcess

# The one-slot fake runs in a process of its own, so its threads never wait for this client's interpreter lock. What
# is left between the arithmetic and the client's reading: wake-ups of threads on a machine whose load varies. The
# fake's own sleeps say how late a thread woke during this very test (each request sleeps ``TOKENS`` times: its
# prefill, then between tokens): up to three such wake-ups stand between a queue and its reading (the fake's
# hand-over of the slot, its handler's write, the client's reader), and the client's reader may wait for its
# interpreter lock while the level's other threads run (a switch interval each time, up to three seen: errors of
# 1-12 ms at load 4.5 where the fake's sleeps were at most 1-2 ms late; one run in ten had one request 21 ms off, a
# stall of the client's reader that the fake's sleeps did not see).
TOKENS = 4


def resolution_ms(served: dict[str, tuple[float, float, float, int | None]], prefill_s: float,
                  token_s: float) -> float:
    """How finely this machine timed a thread during the test: the fake's worst lateness per sleep, from its own
    service times (they stretch with the load), as a tolerance: three of them and three lock switch intervals."""
    nominal = prefill_s + (TOKENS - 1) * token_s
    late = max((released - started - nominal) / TOKENS for _, started, released, _ in served.values())
    return 3 * sys.getswitchinterval() * 1000 + 3 * max(late, 0.0) * 1000


def tagged(n: int, prefix: str = "req") -> list[ChatRequest]:
    return [ChatRequest([{"role": "user", "content": f"{prefix} {i}\nHello."}], max_tokens=TOKENS)
            for i in range(n)]


def parts_add_up(record: ar.ArrivalRequest) -> None:
    parts = [record.client_ms, record.network_ms, record.queue_ms, record.prefill_ms, record.rest_ms]
    assert None not in parts and record.ttft_ms == pytest.approx(sum(p or 0.0 for p in parts), abs=0.01)


def test_the_schedule_is_poisson_seeded_and_bounded():
    first = ar.schedule(4.0, 30.0, seed=8)
    assert first == ar.schedule(4.0, 30.0, seed=8) and first != ar.schedule(4.0, 30.0, seed=9)
    assert first[0] == 0.0 and all(0 <= t < 30.0 for t in first) and first == sorted(first)
    assert 80 <= len(first) <= 160  # 120 expected; a Poisson count's spread is about 11
    gaps = [b - a for a, b in zip(first, first[1:], strict=False)]
    assert min(gaps) < 0.05 < 0.6 < max(gaps)  # exponential gaps: bursts and lulls, not a metronome
    settings = ar.Settings(rates=(0.5, 2.0), duration_s=10.0)
    counts = [len(ar.schedule(r, 10.0, settings.seed)) for r in settings.rates]
    found = ar.plan(settings)
    assert (found.requests, found.records) == (sum(counts) + 1, 2)
    assert found.tokens == sum(counts) * (settings.prompt_tokens + settings.output_tokens) + WARM_UP_TOKENS


def test_prepare_orders_the_rates_and_refuses_a_level_over_the_client_pool():
    conn: Any = None
    assert ar.prepare(ar.Settings(rates=(2.0, 0.5, 0.0)), conn).rates == (0.5, 2.0)
    with pytest.raises(ValueError, match="at most 100 per rate"):
        ar.prepare(ar.Settings(rates=(20.0,), duration_s=30.0), conn)
    with pytest.raises(ValueError, match="at least one rate"):
        ar.prepare(ar.Settings(rates=(0.0,)), conn)


def test_queue_times_are_the_queueing_the_sends_imply():
    """Requests at about 1.6x what one slot serves: each waits for the ones before it. The queue the arrivals imply,
    from the fake's own timings (its service times are read, not assumed: they stretch with the machine's load):
    a request starts when it arrived or when the one before it released the slot, whichever is later. Every
    request's measured queue is that within the resolution this machine timed threads at during the test."""
    with SlotProcess(prefill_s=0.06, token_s=0.01) as server, LlamaServerBackend(server.url) as backend:
        offsets = ar.schedule(15.0, 1.2, seed=4)  # 18 arrivals
        rtt = ar.round_trip(backend)
        sent, origin, ended = ar.send_on_schedule(backend, tagged(len(offsets)), offsets, threading.Event(), 10.0)
        records = [ar.split(i, item, origin, rtt, ended) for i, item in enumerate(sent)]
        served = server.served()
    assert len(served) == len(offsets) >= 12 and not any(r.error or r.cut for r in records)
    tolerance = resolution_ms(served, 0.06, 0.01)
    previous_release, implied = 0.0, {}
    for i in sorted(range(len(sent)), key=lambda i: served[f"req {i}"][1]):  # in the order the slot took them
        arrived, _, released, _ = served[f"req {i}"]
        implied[i] = (max(arrived, previous_release) - arrived) * 1000
        previous_release = released
    assert max(implied.values()) > 5 * tolerance  # the check bites: queues far above the tolerance
    errors = []
    for i, record in enumerate(records):
        assert record.queue_ms is not None
        errors.append(record.queue_ms - implied[i])
        parts_add_up(record)
    misses = sorted(map(abs, errors))  # one request's reader can still stall (a busy machine): nine in ten within
    assert median(misses) <= tolerance / 2 and (nearest_rank(misses, 90) or 0) <= tolerance, (tolerance, errors)
    assert misses[-1] <= 3 * tolerance, (tolerance, errors)  # a stall, never a request served out of its turn
    level = ar.fold(ar.ArrivalLevel(15.0, 1.2, 4), records, ended - origin)
    assert level.queue_p99_ms is not None and level.queue_p99_ms > 200 and level.completed == len(records)
    assert level.ttft_mean_ms == pytest.approx(sum(getattr(level, f"{p}_mean_ms") or 0.0 for p in ar.PARTS),
                                               abs=0.05)


class SlowClient(LlamaServerBackend):
    """A client that takes 150 ms before each send (a busy process, a full pool): its delay, not the server's."""

    def stream_chat(self, request: ChatRequest, *args: Any, **kwargs: Any) -> RequestResult:
        time.sleep(0.15)
        return super().stream_chat(request, *args, **kwargs)


def test_a_slowed_client_is_counted_as_client_delay_not_server_time():
    with SlotProcess(prefill_s=0.03, token_s=0.005) as server, SlowClient(server.url) as backend:
        offsets = [0.0, 0.4, 0.8]
        rtt = ar.round_trip(backend)
        sent, origin, ended = ar.send_on_schedule(backend, tagged(3), offsets, threading.Event(), 10.0)
        records = [ar.split(i, item, origin, rtt, ended) for i, item in enumerate(sent)]
        served = server.served()
    tolerance = 2 * resolution_ms(served, 0.03, 0.005)  # three requests, each may meet one stall
    for i, record in enumerate(records):
        assert record.client_ms is not None and 150 <= record.client_ms <= 150 + tolerance
        assert record.queue_ms is not None and record.queue_ms <= tolerance  # the slot was free
        assert record.ttft_ms is not None and record.ttft_ms >= 150 + 30
        arrived, started, _, _ = served[f"req {i}"]
        assert started - arrived < tolerance / 1000  # the server did not queue it either: it came late, sent late
        parts_add_up(record)


def test_a_cap_on_open_requests_makes_the_wait_client_delay_and_never_opens_more():
    """A hosted demo's cap (``max_open``): with one open at a time, three arrivals 20 ms apart never meet at the
    one-slot server; the later ones wait in the client, and that wait is client delay, timed from the schedule."""
    with SlotProcess(prefill_s=0.06, token_s=0.01) as server, LlamaServerBackend(server.url) as backend:
        rtt = ar.round_trip(backend)
        sent, origin, ended = ar.send_on_schedule(backend, tagged(3), [0.0, 0.02, 0.04], threading.Event(), 10.0,
                                                  max_open=1)
        records = [ar.split(i, item, origin, rtt, ended) for i, item in enumerate(sent)]
        served = server.served()
    tolerance = 2 * resolution_ms(served, 0.06, 0.01)  # three requests, each may meet one stall
    times = [served[f"req {i}"] for i in range(3)]
    assert all(later[0] >= earlier[2] for earlier, later in zip(times, times[1:], strict=False))  # never two open
    assert rtt is not None
    for i, record in enumerate(records):
        assert record.queue_ms is not None and record.queue_ms <= tolerance  # the slot was always free
        parts_add_up(record)
        # it was sent as the one before it ended: the services (and a round trip each) before it, less its offset
        expected = sum((released - started) * 1000 + rtt for _, started, released, _ in times[:i]) - 20 * i
        assert record.client_ms is not None and abs(record.client_ms - expected) <= tolerance * (i + 1), (i, expected,
                                                                                                      record)
    assert records[2].client_ms is not None and records[2].client_ms > 100  # it waited for two of them


def test_a_processing_time_header_is_the_servers_part_and_the_split_still_adds_up():
    """An OpenAI-compatible API that sends ``openai-processing-ms`` (the one-slot fake, answering as an API: no
    progress, no timings; its headers wait for the first token): that is the server's part, queue and prefill
    together (each request's is the header the fake sent, queueing included), queue and prefill stay "not
    reported", and client, network, server and rest add up to the measured TTFT."""
    with SlotProcess(prefill_s=0.06, token_s=0.01, processing_header=True) as server, \
            OpenAICompatBackend(server.url, "m") as backend:
        rtt = ar.round_trip(backend)
        sent, origin, ended = ar.send_on_schedule(backend, tagged(3), [0.0, 0.02, 0.04], threading.Event(), 10.0)
        records = [ar.split(i, item, origin, rtt, ended) for i, item in enumerate(sent)]
        served = server.served()
    for i, record in enumerate(records):
        header = served[f"req {i}"][3]
        assert header is not None and record.server_ms == header and not record.error, record
        assert (record.queue_ms, record.prefill_ms) == (None, None)
        parts = [record.client_ms, record.network_ms, record.server_ms, record.rest_ms]
        assert None not in parts and record.ttft_ms == pytest.approx(sum(p or 0.0 for p in parts), abs=0.01)
    assert records[2].server_ms is not None and records[2].server_ms > 120  # it queued behind two: the header says
    level = ar.fold(ar.ArrivalLevel(50.0, 0.06, 4, capacity_rps=5.0), records, ended - origin)
    assert level.queue_mean_ms is None and level.server_mean_ms is not None
    assert level.ttft_mean_ms == pytest.approx(sum(getattr(level, f"{p}_mean_ms") or 0.0 for p in ar.PARTS),
                                               abs=0.05)
    found = ar.conclude([level, ar.fold(ar.ArrivalLevel(1.0, 1.0, 4, capacity_rps=5.0), records[:1], 1.0)], None)
    split = next(claim for claim in found.claims if claim.key.startswith("split"))
    assert split.key == "split_server" and found.decided_by.key == "queue_unreported"
    for words in (ContentWords("en"), ContentWords("zh")):
        assert any("openai-processing-ms" in line for line in render(found, words))


def test_a_processing_header_that_is_not_a_number_is_named_never_used():
    result = RequestResult()
    read_processing(httpx.Headers({PROCESSING_HEADER: "soon"}), result)
    read_processing(httpx.Headers({PROCESSING_HEADER: "-4"}), result)
    assert result.server_processing_ms is None and len(result.unreadable_fields) == 2
    assert result.unreadable_fields[0] == "header openai-processing-ms = 'soon' (not a number of milliseconds)"
    read_processing(httpx.Headers({PROCESSING_HEADER: "125"}), result)
    assert result.server_processing_ms == 125.0


def test_an_api_without_a_queue_figure_says_not_reported():
    item = ar.Sent(due=10.0, result=RequestResult(success=True, sent_at=10.002, ttft_s=0.3, end_s=0.5,
                                                  chunk_times_s=[0.3, 0.4, 0.5], completion_tokens=3))
    record = ar.split(0, item, origin=9.0, rtt_ms=40.0, ended=11.0)
    assert (record.queue_ms, record.prefill_ms, record.server_ms) == (None, None, None)
    assert record.client_ms == pytest.approx(2.0) and record.network_ms == 40.0
    assert record.rest_ms == pytest.approx(260.0) and record.ttft_ms == pytest.approx(302.0)
    assert record.itl_ms == pytest.approx(100.0) and record.scheduled_s == pytest.approx(1.0)
    level = ar.fold(ar.ArrivalLevel(1.0, 10.0, 8), [record], 1.0)
    assert level.queue_mean_ms is None and ar.queue_share(level) is None
    assert (level.itl_p50_ms, level.itl_p99_ms, level.ttft_p50_ms) == (100.0, 100.0, 302.0)
    cut = ar.split(1, ar.Sent(due=10.5, cut=True), origin=9.0, rtt_ms=40.0, ended=12.0)
    assert cut.waited_ms == pytest.approx(1500.0) and cut.ttft_ms is None
    level = ar.fold(ar.ArrivalLevel(1.0, 10.0, 8), [record, cut], 2.0)
    assert (level.cut, level.completed, level.ttft_p99_ms) == (1, 1, 1500.0)  # the cut one counts, as a lower bound


def test_the_prefill_clocks_overlap_with_the_progress_chunk_comes_off_the_queue():
    """The server starts its prefill clock a moment before its first progress chunk reaches the client: 10 ms here."""
    result = RequestResult(success=True, sent_at=5.0, ttft_s=0.1, prompt_started_s=0.06, server_prefill_ms=50.0,
                           end_s=0.1, chunk_times_s=[0.1])
    record = ar.split(0, ar.Sent(due=5.0, result=result), origin=5.0, rtt_ms=5.0, ended=6.0)
    assert (record.network_ms, record.queue_ms, record.prefill_ms, record.rest_ms) == (5.0, 45.0, 50.0, 0.0)
    parts_add_up(record)


def made_up(rate: float, ttft: float, queue: float | None, n: int = 10, capacity: float | None = 2.0,
            itl: float = 20.0) -> ar.ArrivalLevel:
    streams = []
    for i in range(n):
        rest = ttft - 1 - 5 - (queue or 0) - 100
        streams.append(ar.ArrivalRequest(i, i / rate, ttft_ms=ttft, client_ms=1.0, network_ms=5.0, queue_ms=queue,
                                         prefill_ms=100.0, rest_ms=rest, itl_ms=itl, gaps_ms=[itl] * 4,
                                         service_ms=300.0, output_tokens=5))
    return ar.fold(ar.ArrivalLevel(rate, n / rate, 8, capacity_rps=capacity, ttft_target_ms=500.0,
                                   itl_target_ms=50.0), streams, n / rate)


def test_the_conclusion_reads_the_queue_taking_over_past_capacity():
    en, zh = ContentWords("en"), ContentWords("zh")
    shown = ar.conclude([made_up(4.0, 3000.0, 2800.0), made_up(0.5, 120.0, 1.0)], None)
    assert shown.status == SHOWN and shown.decided_by.key == "queue_took_over"
    assert shown.decided_by.values["share"] == pytest.approx(2800 / 3000 * 100)
    goodput = next(c for c in shown.claims if c.key == "goodput")
    assert (goodput.values["low_good"], goodput.values["high_good"]) == (10, 0)
    cases = {
        "none_above": [made_up(0.5, 120.0, 1.0), made_up(1.0, 130.0, 2.0)],
        "ttft_flat": [made_up(0.5, 120.0, 1.0), made_up(4.0, 200.0, 150.0)],
        "queue_small": [made_up(0.5, 120.0, 1.0), made_up(4.0, 3000.0, 100.0)],
        "queue_unreported": [made_up(0.5, 120.0, None), made_up(4.0, 3000.0, None)],
        "no_capacity": [made_up(0.5, 120.0, 1.0, capacity=None), made_up(4.0, 3000.0, 2800.0, capacity=None)],
    }
    for key, levels in cases.items():
        found = ar.conclude(levels, None)
        if key == "no_capacity":  # without a prediction, this run's own service time at its lowest rate
            assert found.status == SHOWN and found.claims[0].key == "capacity_run"
            continue
        assert (found.status, found.decided_by.key) == (NOT_SHOWN, key)
        for words in (en, zh):
            assert all(render(found, words))
    assert ar.conclude([made_up(0.5, 120.0, 1.0)], None).status == NO_DATA
    busy = ar.conclude(cases["none_above"], MachineState(True, 0.4, 50.0, 9.0, 2, True))
    assert (busy.status, busy.decided_by.key) == (DISTURBED, "busy")
    late = made_up(4.0, 3000.0, 2800.0)
    late.settled, late.settle_s = False, 40.0
    leftover = ar.conclude([made_up(0.5, 120.0, 1.0), late], None)
    assert (leftover.status, leftover.decided_by.key) == (DISTURBED, "leftover")
    assert leftover.decided_by.values["rate"] == 4.0
    for found in (shown, busy, leftover, ar.conclude([], None)):
        for words in (en, zh):
            assert all(render(found, words))


def test_a_level_reads_back_from_its_export():
    level = made_up(2.0, 300.0, 50.0)
    again = ar.ArrivalLevel.from_dict(level.to_dict())
    assert again == level and again.streams[3].gaps_ms == [20.0] * 4


def test_on_the_embedded_server_the_queue_takes_over_past_capacity(local):
    """Below capacity (one request every 10 service times) the queue is near zero; above it (one every 0.1) TTFT
    grows with the run and the queue is most of it; the parts add up to the measured TTFT. The service time is
    probed first, on a machine whose load moves: at one every 0.3 a probe made while it was three times busier
    than during the level left the level below capacity (a queue share of 2 %, once)."""
    backend = local.backend
    run = RunContext(local)
    run.warm_up()
    times = []
    for i in range(3):  # the median of three: one send on a busy machine can take twice another's time
        probe = backend.stream_chat(ChatRequest([{"role": "user", "content": f"probe {i}\nSay hello."}], max_tokens=8,
                                                ignore_eos=True, extra={"cache_prompt": False}))
        assert probe.server_prefill_ms is not None and probe.server_decode_ms is not None, probe.error
        times.append((probe.server_prefill_ms + probe.server_decode_ms) / 1000)
    service = median(times)

    def level(spacing: float, n: int, prefix: str) -> ar.ArrivalLevel:
        offsets = [i * spacing * service for i in range(n)]
        requests = [ChatRequest([{"role": "user", "content": f"{prefix} {i}\nSay hello."}], max_tokens=8,
                                ignore_eos=True, extra={"cache_prompt": False}) for i in range(n)]
        rtt = ar.round_trip(backend)
        sent, origin, ended = ar.send_on_schedule(backend, requests, offsets, threading.Event(), 60 * service + 30)
        streams = [ar.split(i, item, origin, rtt, ended) for i, item in enumerate(sent)]
        return ar.fold(ar.ArrivalLevel(1 / (spacing * service), offsets[-1] or 1.0, 0), streams, ended - origin)

    low, high = level(10.0, 3, "low"), level(0.1, 8, "high")  # 10: a request finds the slot free at 10x the load
    for found in (low, high):
        assert found.completed == found.requests and not found.cut, found.error
        for record in found.streams:
            parts_add_up(record)
    assert low.queue_p50_ms is not None and low.ttft_p50_ms is not None
    assert low.queue_p50_ms < 0.1 * low.ttft_p50_ms  # near zero: each request found the slot free
    share = ar.queue_share(high)
    assert share is not None and share > 0.5
    fit = linear_fit([r.scheduled_s for r in high.streams], [r.ttft_ms for r in high.streams])
    assert fit is not None and fit.slope > 0.5  # each second of the run adds over 0.5 s of waiting (9 expected)
    assert high.streams[-1].ttft_ms > 2 * high.streams[0].ttft_ms  # type: ignore[operator]
