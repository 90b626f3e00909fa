"""Summaries and conclusions (what the CLI, the pages and the report say) never invent a number.

The rounds are built by hand: the case from the issue is a server killed during experiment 3's
second strategy, leaving four append-only rounds against one timestamp-first round.
"""

from __future__ import annotations

from core.conclusions import NO_DATA, SHOWN, render
from core.experiments import EXPERIMENTS, input_length, output_length, prefix_cache
from core.records import RoundResult
from core.words import ContentWords


def summary_lines(rows: list[RoundResult]) -> list[str]:
    """The sentences `python -m core` prints after a run of every experiment (`core.cli.main._report`)."""
    return [line for spec in EXPERIMENTS.values() for line in render(spec.conclude(rows, None), ContentWords("en"))]


def cache_row(strategy: str, round_no: int, recomputed: int | None, prompt: int = 2000, ttft: float = 100.0,
              error: str = "") -> RoundResult:
    reused = None if recomputed is None else prompt - recomputed
    return RoundResult("cache", round_no, strategy=strategy, prompt_tokens=prompt, recomputed_tokens=recomputed,
                       cached_tokens=reused, ttft_ms=ttft, error=error)


KILLED = [*(cache_row("append_only", n, 2000 if n == 1 else 20, ttft=900 if n == 1 else 50) for n in (1, 2, 3, 4)),
          cache_row("timestamp_first", 1, 2000, ttft=900),
          cache_row("timestamp_first", 2, None, error="Cannot connect to http://127.0.0.1:8080: is it running?")]


def test_a_strategy_with_one_round_has_no_medians_after_the_first():
    summary = prefix_cache.summarize_cache(KILLED)["timestamp_first"]
    assert summary.rounds == 1 and summary.recomputed_total == 2000
    assert summary.recomputed_after_first is None and summary.ttft_median_after_first_ms is None


def test_the_ratio_compares_only_the_rounds_both_strategies_measured():
    by_strategy = prefix_cache.summarize_cache(KILLED)
    assert prefix_cache.common_rounds(by_strategy, "timestamp_first") == [1]
    # round 1 against round 1, not 2000/2060
    assert prefix_cache.recomputed_ratio(by_strategy) == {"timestamp_first": 1.0}
    longer = [*KILLED[:5], cache_row("timestamp_first", 2, 1990), cache_row("timestamp_first", 3, 1995)]
    expected = (2000 + 1990 + 1995) / (2000 + 20 + 20)
    assert prefix_cache.recomputed_ratio(prefix_cache.summarize_cache(longer)) == {"timestamp_first": expected}


def test_no_shared_round_no_ratio():
    rows = [cache_row("append_only", 1, 2000), cache_row("timestamp_first", 2, 2000)]
    assert prefix_cache.recomputed_ratio(prefix_cache.summarize_cache(rows)) == {}


def test_report_says_no_data_instead_of_zero():
    """Timestamp-first measured only round 1: nothing compares, so no conclusion, and no zero stands for a figure."""
    found = prefix_cache.conclude(KILLED, None)
    assert (found.status, found.decided_by.key if found.decided_by else None) == (NO_DATA, "too_few")
    lines = summary_lines(KILLED)
    assert not any(" 0 recomputed" in line or "TTFT of 0 ms" in line for line in lines)


def test_report_with_no_successful_rounds_invents_nothing():
    failed = [RoundResult("output", 1, output_tokens=None, error="HTTP 500"),
              RoundResult("input", 1, error="HTTP 500")]
    for module in (input_length, output_length, prefix_cache):
        found = module.conclude(failed, None)
        assert found.status == NO_DATA and found.claims == (), found
    assert output_length.summarize_output(failed).ms_per_output_token is None
    assert input_length.summarize_input(failed).prefill_tps is None


def test_report_names_who_timed_each_figure():
    rows = [RoundResult("input", 1, prompt_tokens=1000, recomputed_tokens=1000, prefill_ms=500.0, ttft_ms=520.0,
                        prefill_source="server"),
            RoundResult("output", 1, output_tokens=33, ms_per_output_token=25.0, total_ms=900.0,
                        decode_source="client")]
    lines = summary_lines(rows)
    assert ("Prefill rate as the median of the rounds' own rates (prompt tokens ÷ prefill time, timed by the "
            "server): 2,000 tokens/s.") in lines
    assert "Decode ran at 40.0 tokens/s (25.0 ms per output token, timed by the client (the stream's clock))." in lines


def test_cache_conclusion_needs_a_later_round_measured_by_both():
    both = [*KILLED[:5], cache_row("timestamp_first", 2, 1990, ttft=880)]
    found = prefix_cache.conclude(both, None)
    assert found.status == SHOWN and found.decided_by is not None and found.decided_by.key == "tokens"
    values = found.decided_by.values
    assert values["rounds"] == 1 and (values["append"], values["breaker"]) == (20, 1990)


def test_cache_conclusion_without_counts_uses_ttft_on_the_same_rounds():
    rows = [cache_row("append_only", n, None, ttft=t) for n, t in ((1, 900), (2, 60), (3, 2000))]
    rows += [cache_row("timestamp_first", n, None, ttft=t) for n, t in ((1, 900), (2, 880))]
    found = prefix_cache.conclude(rows, None)
    assert found.status == SHOWN and found.decided_by is not None
    assert (found.decided_by.key, found.decided_by.values["append"], found.decided_by.values["breaker"]) == (
        "time", 60, 880)  # round 3 is not compared


def test_output_without_timings_concludes_nothing():
    rows = [RoundResult("output", n, output_tokens=n * 16, ms_per_output_token=None, total_ms=100.0 * n)
            for n in (1, 2)]
    found = output_length.conclude(rows, None)
    assert found.status == NO_DATA and found.claims == ()
