"""Every page on three machine profiles, with no sentence that contradicts the figures shown beside it.

The profiles are injected as the roofline page's tests inject a machine (`cache_roof`: this machine's probe cache,
which every page reads), each with a session's runs of experiments 1, 2, 4 and 5 measured on it:

- a 2-core CPU whose decode is under 2x slower than its prefill (the roofs predict 1.8x, it measured 1.6x);
- a CPU where decode is about 4x slower (predicted 4.0x, measured 3.8x);
- the chapter's M3 Ultra at about 27x (its 819 GB/s, and a compute peak that gives this model 27.7x; measured 26.7x).

How a sentence's claim is read: the page's text (markdown, captions, info, success, warning boxes) is cut into
sentences. A sentence is about this machine when it says "this machine", "here", "this backend", "this run" or "this
session", and is a labelled reference (left alone) when it names the chapter, the Mac or a GPU. In every sentence
about this machine, each figure written as a multiple ("1.8x", "**4.0x**", "3.8×") must equal, to the digits shown,
one of the figures this machine's numbers give: the roofs' prediction R, its agreement band R/2..2R, the batching
bound G, the measured prefill:decode ratio, each run's own conclusion values, or the rules' thresholds (1.3x to show
batching, 2x for a machine to show it). A fixed number about "here" (the old "less than twice", "27x ... and this
machine's is not") fails it, and so does a sentence that says a bound the prediction contradicts: "cannot show it"
where the roofs allow batching, "enough room" where they do not, "agrees" for a ratio outside the band.
Experiment 6's page is rendered too (no exception, none of the fixed sentences); its numbers are its owner's tests'.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from core.conclusions import conclusion_of
from core.engine.choice import find_model
from core.experiments import EXPERIMENTS
from core.experiments.batch import MIN_GAIN, BatchLevel, summarize_batch
from core.experiments.roofline import RooflineRecord
from core.records import RoundResult
from core.roofline.arithmetic import MIN_SHOWABLE_GAIN, RATIO_SPREAD, predict
from core.roofline.model import from_gguf
from core.roofline.peaks import Ceiling, Roof
from core.runs.runner import BackgroundRun
from tests.pages.test_roofline import cache_roof
from tests.support.apptest import app
from ui.navigation import PAGES

# (roof, measured decode tokens/s, measured prefill tokens/s, decode gain from 1 to 4 streams)
PROFILES = {
    "two_cores": (Roof("2-core CPU", Ceiling(15.3e9, "sum"), Ceiling(73e9, "matmul"), "2026-12-01"), 80.0, 130.0, 1.1),
    "about_4x": (Roof("8-core CPU", Ceiling(20e9, "sum"), Ceiling(210e9, "matmul"), "2026-12-01"), 60.0, 228.0, 2.4),
    "m3_ultra": (Roof("M3 Ultra profile", Ceiling(819.2e9, "sum"), Ceiling(60e12, "matmul"), "2026-12-01"), 180.0,
                 4800.0, 3.5),
}
HERE = ("this machine", "here", "this backend", "this run", "this session")
REFERENCE = ("chapter", "Mac", "GPU", "provider")
FIXED = ("less than twice", "cost nearly the same", "and this machine's is not", "under 2x there", "Fixed cost",
         "on a small CPU the two cost")
NUMBERS_CHECKED = ("home", "input", "output", "cache", "batch", "roofline")  # the pages of experiments 1-5, the home
MULTIPLE = re.compile(r"(\d[\d,]*(?:\.\d+)?)\**\s?[x×]")


def runs_on(roof: Roof, decode: float, prefill: float, gain: float) -> dict[str, list[BackgroundRun]]:
    """A session's runs of experiments 1, 2, 4 and 5 on a machine measuring ``prefill`` and ``decode``."""
    sizes, lengths = (256, 512, 1024, 2048), (16, 32, 64, 128)
    inputs = [RoundResult("input", i, prompt_tokens=s, recomputed_tokens=s, prefill_ms=s / prefill * 1000,
                          ttft_ms=s / prefill * 1000 + 20, output_tokens=4, prefill_source="server", target_tokens=s)
              for i, s in enumerate(sizes, 1)]
    outputs = [RoundResult("output", i, prompt_tokens=50, output_tokens=n, ms_per_output_token=1000 / decode,
                           ttft_ms=50 / prefill * 1000, total_ms=50 / prefill * 1000 + n * 1000 / decode,
                           decode_source="server", target_tokens=n) for i, n in enumerate(lengths, 1)]
    levels = [BatchLevel(n, aggregate_decode_tps=decode * g, per_stream_decode_tps=decode * g / n,
                         aggregate_prefill_tps=prefill, prefill_prompt_tokens=600 * n, output_tokens=128 * n)
              for n, g in ((1, 1.0), (4, gain))]
    probe = [RooflineRecord(1, "bandwidth", roof.bandwidth, "B/s", "probe"),
             RooflineRecord(2, "compute", roof.flops, "FLOP/s", "probe"),
             RooflineRecord(3, "prefill", prefill, "tokens/s", "one request", 250.0, 500),
             RooflineRecord(4, "decode", decode, "tokens/s", "one request", 516.0, 500)]
    made = {"input": inputs, "output": outputs, "batch": levels, "roofline": probe}
    return {name: [BackgroundRun.recorded(name, {}, list(rows), f"{roof.machine} · {name}")]
            for name, rows in made.items()}


def allowed(roof: Roof, decode: float, prefill: float, runs: dict[str, list[BackgroundRun]]) -> set[str]:
    """Every figure this machine's numbers give, as a page may write it (0, 1 or 2 decimals)."""
    model = from_gguf(find_model())
    figures: list[float] = [MIN_GAIN, MIN_SHOWABLE_GAIN, RATIO_SPREAD, prefill / decode]
    for p in (predict(roof, model), predict(roof, model, prefill, decode)):
        assert p is not None
        figures += [p.ratio, p.ratio / RATIO_SPREAD, p.ratio * RATIO_SPREAD, p.gain_bound]
    for name, (run,) in runs.items():
        found = conclusion_of(EXPERIMENTS[name], run.rows, None, None)
        figures += [v for f in found.findings() for v in f.values.values() if isinstance(v, int | float)]
    summary = summarize_batch(runs["batch"][0].rows)
    assert summary is not None
    figures += [x for x in (summary.decode_cost_alone, summary.decode_cost_batched) if x]
    return {f"{v:,.{d}f}" for v in figures for d in (0, 1, 2)}


def texts_of(at: AppTest) -> list[str]:
    return [e.value for kind in ("markdown", "caption", "info", "success", "warning") for e in getattr(at, kind)]


def sentences(texts: list[str]) -> list[str]:
    return [s for text in texts for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def contradictions(texts: list[str], figures: set[str], can_batch: bool, numbers: bool) -> list[str]:
    """What a page's texts say about this machine that its figures do not support (see the module docstring)."""
    found = [f"fixed sentence: {phrase}" for text in texts for phrase in FIXED if phrase in text]
    for sentence in sentences(texts) if numbers else ():
        if not any(mark in sentence for mark in HERE) or any(ref in sentence for ref in REFERENCE):
            continue
        found += [f"{number}x not a figure here: {sentence}" for number in MULTIPLE.findall(sentence)
                  if number not in figures]
        if ("cannot show it" in sentence if can_batch else "enough room to show" in sentence):
            found.append(f"bound contradicted: {sentence}")
    return found


def test_the_check_finds_the_sentences_that_were_true_of_one_machine_only() -> None:
    """The issue's sentences, on the 4x profile's figures: each is caught, and a computed one passes."""
    figures = {"3.8", "4.0", "2.4", "1.3", "2"}
    old = ["How much slower it is on your machine depends on that machine's ridge point: on two CPU cores it is "
           "less than twice (Experiment 5 shows why).",
           "On this machine the roofline predicts prefill about 4.0x faster per token than decode, and batching at "
           "most 12.6x: enough to show in experiment 4.",
           "batching can gain at most about **1.8x** here (from the two roofs), under the 2x a run needs to show it "
           "clearly: **this machine cannot show it**."]
    found = contradictions(old, figures, can_batch=True, numbers=True)
    assert [line.split(":")[0] for line in found] == ["fixed sentence", "12.6x not a figure here",
                                                       "1.8x not a figure here", "bound contradicted"], found
    assert contradictions(["Measured here: **3.8x** (experiments 1 and 2)."], figures, True, True) == []


@pytest.mark.slow
@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_page_on_this_machine_says_only_what_its_figures_support(profile: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    roof, decode, prefill, gain = PROFILES[profile]
    cache_roof(tmp_path, monkeypatch, roof)
    runs = runs_on(roof, decode, prefill, gain)
    figures = allowed(roof, decode, prefill, runs)
    prediction = predict(roof, from_gguf(find_model()), prefill, decode)
    assert prediction is not None
    at = app(history=runs)
    at.run()
    said: dict[str, Any] = {}
    for page in PAGES:
        at.switch_page(page.path).run()
        assert not at.exception and not at.error, (page.path, at.exception, [e.value for e in at.error])
        checked = Path(page.path).stem in NUMBERS_CHECKED
        wrong = contradictions(texts_of(at), figures, prediction.can_show_batching, checked)
        assert not wrong, (page.path, wrong)
        said[page.path] = "\n".join(texts_of(at))
    agrees = prediction.ratio_agrees(prefill / decode)
    assert (f"the measured {prefill / decode:.1f}x agrees" in said["app_pages/output.py"]) is agrees
    home = said["app_pages/home.py"]
    assert f"about {prediction.ratio:.1f}x faster per token" in home and f"**{prediction.ratio:.1f}x** slower" in home
    assert "(the chapter's machine, a reference)" in home  # the Mac's 27x, labelled as the chapter's


@pytest.mark.slow
def test_a_disturbed_run_does_not_predict_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Experiments 1 and 2 measured on a busy machine: their ratio is still quoted as measured, but experiment 4's
    prediction comes from the roofs (seen: a 20x "batching bound" from a busy run beside the roofs' 5x)."""
    from core.conclusions import MachineState
    roof, decode, prefill, gain = PROFILES["about_4x"]
    cache_roof(tmp_path, monkeypatch, roof)
    runs = runs_on(roof, decode / 3, prefill, gain)  # decode slowed 3x by the others
    busy = MachineState(measured=True, server_share=0.3, others_s=40.0, load=4.9, cores=2, busy=True)
    for name in ("input", "output"):
        runs[name][0].state = busy
    model = from_gguf(find_model())
    roofs, disturbed = predict(roof, model), predict(roof, model, prefill, decode / 3)
    assert roofs is not None and disturbed is not None and f"{roofs.gain_bound:.1f}" != f"{disturbed.gain_bound:.1f}"
    at = app(history=runs)
    at.run()
    at.switch_page("app_pages/batch.py").run()
    text = "\n".join(texts_of(at))
    assert not at.exception and f"**{roofs.gain_bound:.1f}x** here (from the two roofs" in text
    assert f"**{disturbed.gain_bound:.1f}x** here" not in text
