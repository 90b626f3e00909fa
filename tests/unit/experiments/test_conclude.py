"""Experiments 1-5 each conclude a run once: the recorded runs (samples/*.json) and perturbed copies of them (a
disturbed level or round, a rising prefill, a negative intercept, a busy machine) give one conclusion that names the
condition that decided it, with numbers equal to the records', rendered in both languages from the same words."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from core.conclusions import DISTURBED, NO_DATA, NOT_SHOWN, SHOWN, Conclusion, MachineState, paragraph, render
from core.experiments import EXPERIMENTS, batch, input_length, output_length, prefix_cache, roofline
from core.experiments.batch import BatchLevel
from core.records import RoundResult
from core.stats import linear_fit, median
from core.words import ContentWords

BUSY = MachineState(measured=True, server_share=0.31, others_s=14.5, load=3.2, cores=2, busy=True)
FIVE = ("input", "output", "cache", "batch", "roofline")


def recorded(experiment: str) -> list[Any]:
    return EXPERIMENTS[experiment].recorded()[1]


def decided(found: Conclusion) -> tuple[str, str, dict[str, Any]]:
    assert found.decided_by is not None, found
    return found.status, found.decided_by.key, dict(found.decided_by.values)


@pytest.mark.parametrize("experiment", FIVE)
def test_a_recorded_run_concludes_shown_and_every_sentence_renders_in_both_languages(experiment: str) -> None:
    found = EXPERIMENTS[experiment].conclude(recorded(experiment), None)
    assert found.status == SHOWN and found.experiment == experiment and found.claims
    for lang in ("en", "zh"):
        lines = render(found, ContentWords(lang))
        assert len(lines) == 2 + len(found.claims) and all(lines) and not any("{" in line for line in lines)


@pytest.mark.parametrize("experiment", FIVE)
def test_a_busy_machine_disturbs_a_timed_conclusion_and_says_by_how_much(experiment: str) -> None:
    found = EXPERIMENTS[experiment].conclude(recorded(experiment), BUSY)
    if experiment == "cache":  # counted, not timed: said beside the counts, not deciding
        assert found.status == SHOWN and found.claims[-1].key == "busy_counts"
        return
    assert decided(found) == (DISTURBED, "busy", {"share": 31.0, "others": 14.5})
    assert "the server had 31 % of the CPU time used, and other programs took 14.5 CPU-seconds" in paragraph(
        found, ContentWords("en"))


def test_input_names_its_two_prefill_rates_and_a_negative_intercept_as_what_it_is() -> None:
    rows = recorded("input")
    ok = sorted(rows, key=lambda r: r.prompt_tokens)
    status, key, values = decided(input_length.conclude(rows, None))
    assert (status, key) == (SHOWN, "ttft_rose")
    assert (values["first"], values["last"]) == (ok[0].ttft_ms, ok[-1].ttft_ms)
    claims = {c.key: c.values for c in input_length.conclude(rows, None).claims}
    rates = [r.recomputed_tokens / r.prefill_ms * 1000 for r in ok]  # the tokens it computed
    assert claims["rate_median"]["speed"] == median(rates)
    prefill_fit = linear_fit([r.prompt_tokens for r in ok], [r.prefill_ms for r in ok])
    assert prefill_fit is not None and claims["rate_fit"]["per_1k"] == prefill_fit.slope * 1000
    ttft_fit = linear_fit([r.prompt_tokens for r in ok], [r.ttft_ms for r in ok])
    assert ttft_fit is not None and ttft_fit.intercept < 0
    assert claims["intercept_negative"]["intercept"] == ttft_fit.intercept  # never "0 ms"
    said = paragraph(input_length.conclude(rows, None), ContentWords("en"))
    assert f"{ttft_fit.intercept:,.0f} ms, below zero: not a negative cost" in said


def test_input_with_a_round_slower_per_token_than_a_longer_prompt_is_disturbed() -> None:
    rows = recorded("input")
    slowed = [replace(r, prefill_ms=r.prefill_ms * 8, ttft_ms=r.ttft_ms * 8) if r.prompt_tokens == 513 else r
              for r in rows]
    status, key, values = decided(input_length.conclude(slowed, None))
    assert (status, key, values["tokens"], values["longer"]) == (DISTURBED, "slow_round", 513, 1026)
    assert values["times"] == pytest.approx((1539.57 * 8 / 513) / (3376.39 / 1026))


def test_input_whose_ttft_fell_says_so_with_its_ends() -> None:
    rows = [RoundResult("input", 1, prompt_tokens=1000, prefill_ms=900.0, ttft_ms=910.0, target_tokens=1000),
            RoundResult("input", 2, prompt_tokens=1100, prefill_ms=880.0, ttft_ms=890.0, target_tokens=1100)]
    assert decided(input_length.conclude(rows, None)) == (NOT_SHOWN, "ttft_fell", {
        "first": 910.0, "first_tokens": 1000, "last": 890.0, "last_tokens": 1100})


def output_rows(per_token: list[float]) -> list[RoundResult]:
    return [RoundResult("output", i, output_tokens=n, ms_per_output_token=ms, total_ms=100 + n * ms, target_tokens=n)
            for i, (n, ms) in enumerate(zip((16, 32, 64, 128, 256), per_token, strict=False), 1)]


def test_output_names_the_one_condition_that_failed() -> None:
    varied = output_length.conclude(output_rows([10.0, 12.0, 14.0, 16.0, 18.0]), None)
    assert decided(varied) == (NOT_SHOWN, "per_token_varied", {"spread": 8 / 14 * 100, "low": 10.0, "high": 18.0,
                                                               "limit": 50})
    assert len(render(varied, ContentWords("en"))) == 2 + len(varied.claims)  # one condition, not a list of all
    spiked = output_length.conclude(output_rows([20.0, 21.0, 60.0, 20.5, 21.5]), None)
    assert decided(spiked) == (DISTURBED, "slow_round", {"ms": 60.0, "median": 21.0, "times": 60.0 / 21.0})
    shown = output_length.conclude(recorded("output"), None)
    assert decided(shown)[2]["total"] == max(r.total_ms for r in recorded("output"))


def cache_rows(append: int, breaker: int, prompt: int = 2000) -> list[RoundResult]:
    return [RoundResult("cache", n, strategy=s, prompt_tokens=prompt, recomputed_tokens=prompt if n == 1 else r,
                        ttft_ms=100.0) for s, r in (("append_only", append), ("timestamp_first", breaker))
            for n in (1, 2, 3)]


def test_cache_names_the_strategy_that_failed_its_rule() -> None:
    assert decided(prefix_cache.conclude(cache_rows(300, 2000), None))[:2] == (NOT_SHOWN, "append_recomputed")
    status, key, values = decided(prefix_cache.conclude(cache_rows(20, 1000), None))
    assert (status, key, values["share"]) == (NOT_SHOWN, "breaker_reused", 0.5)
    assert "from round 2 timestamp first recomputed only 50% of its prompt" in paragraph(
        prefix_cache.conclude(cache_rows(20, 1000), None), ContentWords("en"))


def levels(rates: list[tuple[int, float, float, float]]) -> list[BatchLevel]:
    """(N, aggregate decode, each stream's decode, aggregate prefill) per level."""
    return [BatchLevel(n, aggregate_decode_tps=d, per_stream_decode_tps=s, aggregate_prefill_tps=p,
                       prefill_prompt_tokens=600 * n, output_tokens=128 * n) for n, d, s, p in rates]


def test_batch_a_level_whose_streams_beat_one_alone_is_disturbed_not_a_gain() -> None:
    """The issue's run: one stream alone at 4.5 tokens/s, each of two at 45.8, a 17.1x "gain"."""
    found = batch.conclude(levels([(1, 4.5, 4.5, 300.0), (2, 91.6, 45.8, 310.0), (8, 77.0, 9.6, 320.0)]), None)
    assert decided(found) == (DISTURBED, "stream_beats_alone", {"n": 2, "each": 45.8, "n1": 1, "alone": 4.5,
                                                                "times": 45.8 / 4.5})
    assert "each of 2 streams decoded at 45.8 tokens/s, 10.2x the 4.5 tokens/s of 1 alone" in paragraph(
        found, ContentWords("en"))


def test_batch_a_rising_prefill_decides_it_with_its_number() -> None:
    found = batch.conclude(levels([(1, 40.0, 40.0, 100.0), (8, 171.0, 21.4, 326.0)]), None)
    assert decided(found) == (NOT_SHOWN, "prefill_not_flat", {"n1": 1, "n2": 8, "gain": 3.26, "flat": 25.0})
    said = paragraph(found, ContentWords("en"))
    assert said.startswith("Not shown by this run: prefill did not stay flat: 3.26x from 1 to 8 requests at once")
    assert "4.3x)" in said and "held back" not in said  # its decode gain is a claim, not a second verdict
    recorded_levels = recorded("batch")
    _, _, values = decided(batch.conclude(recorded_levels, None))
    first, last = recorded_levels[0], recorded_levels[-1]
    assert values["gain"] == last.aggregate_decode_tps / first.aggregate_decode_tps


def test_roofline_without_its_phases_is_not_shown_and_without_roofs_has_no_data() -> None:
    records = recorded("roofline")
    found = roofline.conclude(records, None)
    values = {r.kind: r.value for r in records}
    assert decided(found) == (SHOWN, "measured", {"ratio": values["prefill"] / values["decode"]})
    assert found.claims[0].values["ridge"] == values["compute"] / values["bandwidth"]
    assert decided(roofline.conclude(records[:2], None))[:2] == (NOT_SHOWN, "no_phases")
    assert roofline.conclude([], None).status == NO_DATA
