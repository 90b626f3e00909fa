"""Experiment 7 without a server: the script, the strategies' messages, the prediction's cache model, the money,
the conclusion in both languages, the charts and the recorded sample."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.charts import CHARTS
from core.charts.base import RunView
from core.conclusions import NO_DATA, NOT_SHOWN, SHOWN, MachineState, render
from core.experiments import EXPERIMENTS, input_length
from core.experiments import conversation as ex
from core.experiments.prices import PRICE_LISTS, PriceList, input_cost
from core.export import from_json, to_json
from core.records import RoundResult
from core.stats import QuadraticFit
from core.words import ContentWords


def pieces(messages):
    """A stand-in tokenizer that keeps prefixes: four characters a token, a marker around each message."""
    return [p for m in messages for p in (f"<{m['role']}>", *(m["content"][i:i + 4]
                                                              for i in range(0, len(m["content"]), 4)), "</>")]


def conversation(strategy, window=4, threshold=10_000):
    return ex.Conversation(strategy, "tag", "the reference", window, threshold)


def test_the_script_is_fixed_and_its_answers_shorten_to_whole_sentences():
    assert ex.script(40) == ex.script(40)
    assert len({t.user for t in ex.script(40)}) == 40, "every round asks something of its own"
    long, short = ex.script(8), ex.script(8, sentences=1)
    assert all(a.answer.count(". ") < b.answer.count(". ") for a, b in zip(short, long, strict=True))
    assert all(len(t.answer) > 200 for t in long), "answers of realistic length"


def test_the_summary_rule_takes_each_messages_first_sentence_without_the_round_marker():
    assert ex.first_sentence("[3] Yes: a train leaves at 14:13 on 5 May. It costs 60 euros.") == \
        "Yes: a train leaves at 14:13 on 5 May."
    assert ex.first_sentence("Is there a train? I prefer one.") == "Is there a train?"
    assert ex.first_sentence("no full stop") == "no full stop"


def test_keep_appends_and_the_window_keeps_its_last_messages():
    turns = ex.script(6)
    keep, window = conversation("keep"), conversation("window")
    for r in range(1, 7):
        kept, windowed = keep.messages(turns, r, pieces), window.messages(turns, r, pieces)
        assert len(kept) == 1 + 2 * (r - 1) + 1
        assert len(windowed) == 1 + min(2 * (r - 1), 4) + 1
        assert kept[0] == windowed[0] and kept[-1] == windowed[-1]
    assert windowed[1]["role"] == "user", "the window starts at a question"


def test_only_the_dynamic_window_rewrites_the_date_in_the_system_prompt():
    turns = ex.script(3)
    dynamic, window = conversation("window_dynamic"), conversation("window")
    systems = [dynamic.messages(turns, r, pieces)[0]["content"] for r in (1, 2, 3)]
    assert len(set(systems)) == 3 and ex.clock(2) in systems[1]
    assert {window.messages(turns, r, pieces)[0]["content"] for r in (1, 2, 3)} == {systems[0]}


@pytest.mark.parametrize("strategy", ["summary", "stable_summary"])
def test_a_summary_folds_at_the_threshold_and_keeps_the_last_two_rounds(strategy):
    turns = ex.script(12, sentences=1)
    talk = conversation(strategy, threshold=400)
    sent = [talk.messages(turns, r, pieces) for r in range(1, 13)]
    assert talk.summaries, "the prompt passed the threshold"
    first = talk.summaries[0]
    folded = sent[first - 1]
    assert folded[1]["role"] == "system" and "Round 1:" in folded[1]["content"]
    assert [m["content"] for m in folded[2:6]] == [turns[first - 3].user, turns[first - 3].answer,
                                                    turns[first - 2].user, turns[first - 2].answer]
    assert all(b - a >= ex.FOLD for a, b in zip(talk.summaries, talk.summaries[1:], strict=False))


def test_the_stable_summary_only_appends_and_the_rewritten_one_changes_its_heading():
    turns = ex.script(20, sentences=1)
    stable, rewritten = conversation("stable_summary", threshold=400), conversation("summary", threshold=400)
    texts = {name: [] for name in ("stable", "rewritten")}
    for r in range(1, 21):
        for name, talk in (("stable", stable), ("rewritten", rewritten)):
            found = talk.messages(turns, r, pieces)
            texts[name].append(found[1]["content"] if found[1]["role"] == "system" else "")
    stable_texts = [s for s in dict.fromkeys(texts["stable"]) if s]
    assert len(stable_texts) >= 2
    assert all(b.startswith(a) for a, b in zip(stable_texts, stable_texts[1:], strict=False))
    rewritten_texts = [s for s in dict.fromkeys(texts["rewritten"]) if s]
    assert not any(b.startswith(a) for a, b in zip(rewritten_texts, rewritten_texts[1:], strict=False))


def test_the_cache_model_reuses_the_common_prefix_and_shifted_chunks():
    cache, prompt = list("SSSSaaaabbbbcccc"), list("SSSSbbbbccccdd")
    assert ex.reused(cache, prompt) == 4
    assert ex.recomputed(cache, prompt) == 10
    assert ex.reused(cache, prompt, chunk=4) == 12, "bbbbcccc found further back and shifted"
    assert ex.reused(cache, prompt, chunk=9) == 4, "a run shorter than the chunk is not reused"
    assert ex.recomputed(prompt, prompt) == 1, "a prompt wholly in the cache still computes one token"


def test_the_prediction_of_keep_is_each_rounds_new_question_and_answer():
    settings = ex.Settings(conversation_rounds=5, window=4)
    planned = ex.requests(ex.script(5), ("keep", "window"), "ref", settings, pieces)
    keep = [r for r in planned if r.strategy == "keep"]
    for before, now in zip(keep, keep[1:], strict=False):
        assert now.predicted_recomputed == now.prompt_tokens - before.prompt_tokens
    window = [r for r in planned if r.strategy == "window"]
    assert window[0].predicted_recomputed > window[0].prompt_tokens - 10, "round 1 starts cold (its own tag)"
    sliding = window[3:]  # rounds 4 and 5: the window dropped the oldest round
    system = len(pieces(window[0].messages[:1]))
    # cached: the system prompt and what the next message happens to start with (its role marker, a piece or two)
    assert all(0 <= r.prompt_tokens - r.predicted_recomputed - system <= 3 for r in sliding)


def test_the_time_prediction_counts_the_attention_over_what_is_cached():
    """Experiment 1's curve T(n) = a + b n + c n²: k new tokens after c cached cost T(c + k) - T(c)."""
    curve = QuadraticFit(a=30.0, b=2.0, c=0.0005, r2=0.99)
    settings = ex.with_prediction(ex.Settings(), curve, 400.0, 900.0)
    assert (settings.prefill_tps, settings.attention_ns, settings.predicted_from) == (500.0, 500.0, "measured")
    for cached, k in ((0, 500), (3000, 150), (900, 400)):
        assert ex.predict_ms(settings, k, cached + k) == pytest.approx(curve.at(cached + k) - curve.at(cached))
    late, early = ex.predict_ms(settings, 150, 3150), ex.predict_ms(settings, 150, 150)
    assert late and early and late > 2 * early, "the same 150 tokens cost more behind 3,000 cached"


def test_the_prediction_takes_the_runs_own_rate_then_the_curve_then_the_median_then_the_roofline():
    carried = ex.Settings(prefill_tps=123.0, predicted_from="engine probe")
    good, bent = QuadraticFit(1.0, 2.0, 0.0001, 0.99), QuadraticFit(1.0, 2.0, -0.001, 0.99)
    loose = QuadraticFit(1.0, 2.0, 0.0001, 0.5)
    assert ex.with_prediction(carried, good, 400.0, 900.0) == carried
    assert ex.with_prediction(ex.Settings(), good, 400.0, 900.0).attention_ns == 100.0
    for curve in (bent, loose, None):  # a curve bending down, or one that does not fit its points: the median
        chosen = ex.with_prediction(ex.Settings(), curve, 400.0, 900.0)
        assert (chosen.prefill_tps, chosen.attention_ns, chosen.predicted_from) == (400.0, None, "measured")
    roof = ex.with_prediction(ex.Settings(), None, None, 900.0)
    assert (roof.prefill_tps, roof.predicted_from) == (900.0, "roofline")
    assert ex.with_prediction(ex.Settings(), None, None, None).prefill_tps is None
    assert ex.predict_ms(ex.Settings(), 100, 200) is None


def test_experiment_1_fits_its_curve_through_its_rounds():
    rows = [RoundResult(input_length.ID, i, prompt_tokens=n, recomputed_tokens=n, ttft_ms=30 + 2 * n + 0.0005 * n * n,
                        prefill_ms=20 + 2 * n + 0.0005 * n * n) for i, n in enumerate((256, 512, 1024, 2048, 4096), 1)]
    curve = input_length.summarize_input(rows).prefill_curve
    assert curve is not None and curve.c == pytest.approx(0.0005) and curve.b == pytest.approx(2.0)


def test_reuse_is_asked_for_the_reuse_variant_only():
    planned = ex.requests(ex.script(2), ("window", "window_reuse"), "ref", ex.Settings(), pieces)
    assert [r.extra for r in planned] == [{}, {}, {"n_cache_reuse": ex.REUSE_CHUNK}, {"n_cache_reuse": ex.REUSE_CHUNK}]


def test_money_counts_the_discount_the_write_premium_and_the_minimum():
    openai = next(p for p in PRICE_LISTS if p.provider == "OpenAI")
    assert input_cost(openai, 2000, 1000) == pytest.approx((1000 * 2.00 + 1000 * 0.50) / 1e6)
    assert input_cost(openai, 1000, 900) == pytest.approx(1000 * 2.00 / 1e6), "below the minimum: nothing cached"
    anthropic = next(p for p in PRICE_LISTS if p.provider == "Anthropic")
    assert input_cost(anthropic, 2000, 1000) == pytest.approx((1000 * 3.75 + 1000 * 0.30) / 1e6)
    assert input_cost(openai, 2000, None) is None, "not reported is not 0"
    plain = PriceList("X", "y", 1.0, 2.0, "now", "here")
    assert input_cost(plain, 2000, 1500) == pytest.approx(2000 / 1e6)


def rows_of(strategy, counts, prompt=1000, predicted=None, summarized=()):
    return [ex.ConversationRound(ex.ID, r, strategy, prompt_tokens=prompt + 100 * r, recomputed_tokens=n,
                                 cached_tokens=prompt + 100 * r - n, prefill_ms=n * 2.0, ttft_ms=n * 2.0 + 5,
                                 predicted_recomputed=n if predicted is None else predicted, predicted_ms=n * 2.5,
                                 summarized=r in summarized)
            for r, n in enumerate(counts, start=1)]


RUN = (rows_of("keep", [1000] + [60] * 11) + rows_of("window", [1000, 60, 60] + [500] * 9)
       + rows_of("summary", [1000] + [60] * 5 + [900] + [60] * 5, summarized=(7,))
       + [ex.ConversationRound(ex.ID, 13, label, prompt_tokens=2000, recomputed_tokens=n, cached_tokens=2000 - n,
                               ttft_ms=ms, predicted_recomputed=n)
          for label, n, ms in (("resume_gone", 2000, 4000.0), ("resume_in_slot", 40, 90.0),
                               ("resume_restored", 41, 120.0))])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_conclusion_speaks_every_finding_in_both_languages(lang):
    found = ex.conclude(RUN, MachineState(measured=True, server_share=0.4, others_s=12.0, load=9.5, busy=True))
    assert found.status == SHOWN and found.decided_by is not None
    assert found.decided_by.values["ratio"] == pytest.approx(round(500 / 60, 1)), "medians of rounds 2-12"
    keys = [f.key for f in found.claims]
    assert {"predicted", "strategy", "strategy_time", "summaries", "cheapest", "pause", "busy_counts"} <= set(keys)
    assert found.status == SHOWN, "a busy machine changes the times, not the counts that decide"
    lines = render(found, ContentWords(lang))
    assert len(lines) == 2 + len(found.claims) and all(lines)
    cheapest = next(f for f in found.claims if f.key == "cheapest")
    assert cheapest.values["round"] == 10 and cheapest.values["strategy_word"] == "conversation.strategy.keep"
    assert ("keep everything" if lang == "en" else "全部保留") in " ".join(lines), "strategies named in the language"


def test_no_window_is_no_data_and_a_window_that_barely_differs_is_not_shown():
    assert ex.conclude(rows_of("keep", [100, 60])).status == NO_DATA
    assert ex.conclude(rows_of("keep", [100, 60, 60]) + rows_of("window", [100, 60, 70])).status == NOT_SHOWN
    unreported = [replace(r, recomputed_tokens=None, cached_tokens=None) for r in rows_of("keep", [100, 60])]
    found = ex.conclude(unreported)
    assert [f.key for f in found.claims if f.key.startswith("strategy")] == ["strategy_unreported", "strategy_time"]


def test_a_restore_that_recomputes_everything_is_said_so():
    rows = [r if r.strategy != "resume_restored" else replace(r, recomputed_tokens=1990) for r in RUN]
    assert "pause_not_restored" in [f.key for f in ex.conclude(rows).claims]
    busy = ex.conclude(RUN, MachineState(busy=True))
    assert "busy_unmeasured_counts" in [f.key for f in busy.claims] and all(render(busy, ContentWords("zh")))


def test_the_prediction_is_counted_exact_and_the_worst_difference_named():
    rows = rows_of("keep", [1000, 60, 61], predicted=60)
    found = ex.summarize(rows)["keep"]
    assert (found.exact, found.worst) == (1, 940)


def test_records_go_out_and_come_back_with_their_prediction():
    text = to_json({}, {"rounds": RUN})
    _, back = from_json(text, "rounds", ex.ConversationRound)
    assert back == RUN


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_charts_draw_a_run_and_two(lang):
    words = ContentWords(lang)
    assert len(CHARTS[ex.ID]([RunView("a", RUN)], words)) == 5
    for chart in CHARTS[ex.ID]([RunView("a", RUN), RunView("b", RUN)], words):
        chart.to_dict()


def test_the_recorded_sample_is_a_run_of_the_default_strategies_that_shows_it():
    settings, records = EXPERIMENTS[ex.ID].recorded()
    defaults = ex.Settings()
    for name in ("conversation_rounds", "window", "threshold", "reference_tokens", "answer_sentences"):
        assert settings[name] == getattr(defaults, name), f"the sample is the default run: {name}"
    assert settings["conversation_rounds"] == len(ex.measured(records, "keep"))
    assert ex.conclude(records).status == SHOWN
    assert {r.strategy for r in records} == set(ex.STRATEGIES) | set(ex.RESUME)
    assert all(r.recomputed_tokens == r.predicted_recomputed for r in records if r.strategy in ex.STRATEGIES
               and r.round > 1)


def test_the_plan_counts_every_request_and_the_options_reach_the_settings():
    settings = EXPERIMENTS[ex.ID].from_args({"conversation_rounds": 10, "window": 8, "conversation_strategies":
                                             ("keep", "window")})
    assert (settings.conversation_rounds, settings.window) == (10, 8)
    assert ex.plan(settings).requests == 2 * 10 + 3 + 4
    assert ex.plan(replace(settings, pause=False)).requests == 20


def test_on_an_api_the_reuse_variant_and_the_pause_are_left_out_and_unreported_counts_stay_unknown(fake_api):
    from core.backends.connect import Target, open_connection
    from core.experiments.base import RunContext

    settings = ex.Settings(conversation_rounds=3, conversation_strategies=("keep", "window_reuse"), window=2)
    with open_connection(Target("api", fake_api.base_url, "ok")) as conn:
        prepared = ex.prepare(settings, conn)
        assert prepared.conversation_strategies == ("keep",) and not prepared.pause
        assert prepared.predicted_tokens and prepared.predicted_tokens > 0
        rows = list(ex.rounds(RunContext(conn, warm=False), prepared))
    assert [r.round for r in rows] == [1, 2, 3] and not any(r.error for r in rows)
    assert all(r.cached_tokens is None and r.predicted_recomputed for r in rows), "not reported is not 0"
    assert all(body["body"].get("ignore_eos") is None and "n_cache_reuse" not in body["body"]
               for body in fake_api.requests)
    assert ex.summarize(rows)["keep"].recomputed is None
    assert ex.cumulative_cost(rows, "keep", PRICE_LISTS[0], 3) is None
