"""Summaries, verdicts and the CLI's summary lines never invent a number.

The rounds are built by hand: the case from the issue is a server killed during experiment 3's
second strategy, leaving four append-only rounds against one timestamp-first round.
"""

from __future__ import annotations

from core.experiments import EXPERIMENTS, input_length, output_length, prefix_cache
from core.experiments.output_length import output_verdict
from core.experiments.prefix_cache import cache_verdict
from core.records import RoundResult


def summary_lines(rows: list[RoundResult]) -> list[str]:
    """What `python -m core` prints after a run of every experiment."""
    return [line for spec in EXPERIMENTS.values() for line in spec.cli_lines(rows)]


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
    lines = list(summary_lines(KILLED))
    stamp = next(line for line in lines if "[timestamp_first]" in line)
    assert "a median no data recomputed, TTFT no data" in stamp
    assert " 0 recomputed" not in stamp and "TTFT 0 ms" not in stamp
    assert "timestamp_first recomputed 1.0x the tokens append_only did (round 1, measured for both)." in lines


def test_report_with_no_successful_rounds_invents_nothing():
    failed = [RoundResult("output", 1, output_tokens=None, error="HTTP 500"),
              RoundResult("input", 1, error="HTTP 500")]
    assert list(summary_lines(failed)) == []
    assert output_length.summarize_output(failed).ms_per_output_token is None
    assert input_length.summarize_input(failed).prefill_tps is None


def test_report_names_who_timed_each_figure():
    rows = [RoundResult("input", 1, prompt_tokens=1000, recomputed_tokens=1000, prefill_ms=500.0, ttft_ms=520.0,
                        prefill_source="server"),
            RoundResult("output", 1, output_tokens=33, ms_per_output_token=25.0, total_ms=900.0,
                        decode_source="client")]
    lines = list(summary_lines(rows))
    assert lines[0] == "Experiment 1: prefill 2,000 tokens/s (timed by the server)"
    assert lines[1] == "Experiment 2: decode 40.0 tokens/s (25.0 ms per output token, timed by the client)"


def test_cache_verdict_needs_a_later_round_measured_by_both():
    assert cache_verdict(KILLED) == (False, {})
    both = [*KILLED[:5], cache_row("timestamp_first", 2, 1990, ttft=880)]
    shown, values = cache_verdict(both)
    assert shown and values["rounds"] == 1 and (values["append"], values["breaker"]) == (20, 1990)


def test_cache_verdict_without_counts_uses_ttft_on_the_same_rounds():
    rows = [cache_row("append_only", n, None, ttft=t) for n, t in ((1, 900), (2, 60), (3, 2000))]
    rows += [cache_row("timestamp_first", n, None, ttft=t) for n, t in ((1, 900), (2, 880))]
    shown, values = cache_verdict(rows)
    assert shown and (values["by"], values["append"], values["breaker"]) == ("time", 60, 880)  # round 3 is not compared


def test_output_verdict_without_timings_is_not_a_verdict():
    rows = [RoundResult("output", n, output_tokens=n * 16, ms_per_output_token=None, total_ms=100.0 * n)
            for n in (1, 2)]
    assert output_verdict(rows) == (False, {})
