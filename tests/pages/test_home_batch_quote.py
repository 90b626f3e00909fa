"""The home page quotes experiment 4's own conclusion (never a sentence of its own), and its quick run does not
claim to show batching."""

from __future__ import annotations

from core.experiments import batch
from core.experiments.batch import BatchLevel
from core.runs.runner import BackgroundRun
from tests.support.apptest import app, rendered


def levels(decode: tuple[float, float]) -> list[BatchLevel]:
    return [BatchLevel(n, aggregate_decode_tps=d, per_stream_decode_tps=d / n, aggregate_prefill_tps=300.0,
                       prefill_prompt_tokens=200 * n, output_tokens=32 * n)
            for n, d in zip((1, 4), decode, strict=True)]


def home_text(decode: tuple[float, float]) -> str:
    run = BackgroundRun.recorded(batch.ID, {"recorded": True}, levels(decode), "a run")
    at = app(history={batch.ID: [run]})
    at.run()
    assert not at.exception, at.exception
    return rendered(at)


def test_a_run_that_did_not_show_batching_is_not_quoted_as_if_it_had():
    """The issue's case: 96 -> 35 tokens/s from 1 to 4 streams (0.4x) on a 2-core machine."""
    short = home_text((96.0, 35.0))
    from ui.roofline.measure import QUICK  # after the app has loaded ui (imported alone, ui.roofline is a cycle)

    assert batch.ID not in QUICK  # the minute's quick run cannot show it, so it does not run it
    assert "Not shown by this run: decode throughput grew only 0.36x from 1 to 4 streams" in short
    assert "96.0 → 35.0 tokens/s" in short and "sharing each step" not in short
    shown = home_text((60.0, 110.0))
    assert "Shown: decode throughput grew 1.8x from 1 to 4 streams sharing each step" in shown
    assert "Not shown" not in shown
