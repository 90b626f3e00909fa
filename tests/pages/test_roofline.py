"""The roofline in the app (AppTest): predictions on experiments 2 and 4 from the recorded levels of a slow CPU
(batching cannot show: no "run again") and of a fast one (it can), the fifth page with the probe and the phases."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.conclusions import DISTURBED, paragraph
from core.experiments import EXPERIMENTS, batch
from core.experiments.batch import BatchLevel
from core.roofline import peaks
from core.roofline.peaks import Ceiling, Roof
from core.runs.runner import BackgroundRun
from core.words import ContentWords
from tests.support.apptest import api_state, app, chart_values

# The 2-core Zen 1 of ../shared/notes/roofline.md and a 16-core desktop: recorded probe levels
SLOW = Roof("AMD EPYC Zen 1, 2 cores", Ceiling(15.3e9, "numpy float64 sum"), Ceiling(73e9, "numpy float32 matmul"),
            "2026-11-30")
FAST = Roof("16-core desktop", Ceiling(80e9, "numpy float64 sum"), Ceiling(1.5e12, "numpy float32 matmul"),
            "2026-11-30")


def cache_roof(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, roof: Roof | None) -> None:
    """This machine's probe cache (the real one the app reads) in a temporary folder, holding ``roof``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if roof is not None:
        store = tmp_path / "prefill-lab" / "roofline.json"
        store.parent.mkdir(parents=True)
        store.write_text(json.dumps({peaks.machine_key(): roof.to_dict()}))


def levels(decode: list[float], prefill: list[float]) -> list[BatchLevel]:
    return [BatchLevel(n, aggregate_decode_tps=d, per_stream_decode_tps=d / n, aggregate_prefill_tps=p,
                       prefill_prompt_tokens=600 * n, output_tokens=128 * n)
            for n, d, p in zip((1, 4), decode, prefill, strict=True)]


def batch_history(rows: list[BatchLevel], label: str) -> dict[str, list[BackgroundRun]]:
    return {batch.ID: [BackgroundRun.recorded(batch.ID, {"recorded": True}, list(rows), label)]}


def texts_of(at) -> str:  # type: ignore[no-untyped-def]
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
                     + [s.value for s in at.success])


def batch_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, roof: Roof, rows: list[BatchLevel],
               label: str) -> tuple[AppTest, str]:
    """Experiment 4's page on a machine with ``roof`` cached, after a run of ``rows``: the app and its text."""
    cache_roof(tmp_path, monkeypatch, roof)
    at = app(history=batch_history(rows, label))
    at.run()
    at.switch_page("app_pages/batch.py").run()
    assert not at.exception, at.exception
    return at, texts_of(at)


@pytest.mark.slow
def test_slow_cpu_page_says_batching_cannot_show_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow_levels = levels([59.9, 65.9], [100.6, 101.0])  # decode 1.10x from 1 to 4 streams, as measured there
    at, text = batch_page(tmp_path, monkeypatch, SLOW, slow_levels, "Zen 1 levels")
    assert "this machine cannot show it" in text and "at most about **1.8x**" in text
    assert "As predicted, this machine cannot show it: decode gained 1.10x" in text
    assert "run again" not in text.lower()
    at.switch_page("app_pages/output.py").run()
    assert "about **1.8x** faster per token" in texts_of(at)


@pytest.mark.slow
def test_fast_cpu_page_says_batching_can_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, text = batch_page(tmp_path, monkeypatch, FAST, levels([60.0, 210.0], [420.0, 430.0]), "desktop levels")
    assert "at most about **7.1x** here" in text and "enough room to show the effect" in text
    assert "Decode gained 3.50x of the at most 7.1x batching allows here" in text


@pytest.mark.slow
def test_a_run_short_of_the_bound_is_told_why_not_to_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One core on the prebuilt engine: the roofs allowed 2.8x, the run measured 1.2x (38 -> 47 tokens/s)."""
    _, text = batch_page(tmp_path, monkeypatch, FAST, levels([38.5, 47.4], [113.0, 82.9]), "one core")
    assert "Not shown by this run: decode throughput grew only 1.23x from 1 to 4 streams" in text
    assert "Decode gained 1.23x of the at most 7.1x batching allows here (from the two roofs" in text
    assert "run again" not in text.lower()


def test_chinese_prediction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache_roof(tmp_path, monkeypatch, SLOW)
    at = app(lang="zh")
    at.run()
    at.switch_page("app_pages/batch.py").run()
    assert not at.exception and "这台机器演示不出来" in texts_of(at)


@pytest.mark.slow
def test_unmeasured_machine_offers_the_probe_and_places_the_phases(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cache_roof(tmp_path, monkeypatch, None)
    history: dict[str, list[BackgroundRun]] = {}
    for experiment in ("input", "output", batch.ID):
        settings, rows = EXPERIMENTS[experiment].recorded()
        history[experiment] = [BackgroundRun.recorded(experiment, settings, rows, f"Recorded · {experiment}")]
    at = app(history=history)
    at.run()
    at.switch_page("app_pages/roofline.py").run()
    assert not at.exception, at.exception
    assert any("Not measured yet" in i.value for i in at.info)
    at.button(key="run_roofline").click().run(timeout=600)  # experiment 5: the real probe, then one request
    assert not at.exception, at.exception
    # the run's four figures, then this machine's roofs as cached for every page
    assert [m.label for m in at.metric] == ["Compute peak", "Memory bandwidth", "Prefill", "Decode",
                                            "Compute peak", "Memory bandwidth", "Ridge point"]
    run = at.session_state["history"]["roofline"][-1]
    if run.state.busy:  # this suite runs on a shared 2-core machine: a run the meter called busy says so instead
        said = " ".join(box.value for box in [*at.success, *at.info])
        assert run.conclusion.status == DISTURBED and paragraph(run.conclusion, ContentWords("en")) in said
    else:
        assert any(s.value.startswith("Measured: on this backend prefill ran ") and "the ridge point is" in s.value
                   for s in at.success)
    assert (tmp_path / "prefill-lab" / "roofline.json").is_file()
    frames = [d.value for d in at.dataframe]
    records = next(f for f in frames if "kind" in f)
    assert list(records["kind"]) == ["bandwidth", "compute", "prefill", "decode"]  # the run's records
    table = next(f for f in frames if "phase" in f)
    assert list(table["phase"])[:2] == ["prefill", "decode"] and "N" in table
    # a percentage each, unclipped: a probe taken on a busy machine may be below what a recorded run reached
    assert table["MBU"].str.fullmatch(r"\d+ %( \(probe undershot\))?").all(), list(table["MBU"])
    values = chart_values(at)
    machines = {v["machine"] for v in values if "machine" in v}
    assert {"Apple M3 Ultra", "NVIDIA H100 SXM"} <= machines and len(machines) == 3
    runs = {v.get("run") for v in values}
    assert {"experiment 1", "experiment 2", "experiment 4 · N = 8", "experiment 5"} <= runs


@pytest.mark.slow
def test_home_button_measures_this_machine_in_one_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     fake_api) -> None:  # type: ignore[no-untyped-def]
    """The probe, then short runs of experiments 1 and 2, one after another, all kept in the history."""
    cache_roof(tmp_path, monkeypatch, None)
    at = app(**api_state(fake_api))
    at.run()
    assert not at.exception, at.exception
    at.button(key="measure_machine").click().run(timeout=600)
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    history = at.session_state["history"]
    assert [len(history[e][-1].rows) > 0 for e in ("roofline", "input", "output")] == [True] * 3
    assert "batch" not in history  # a minute cannot show batching: experiment 4 runs from its own page
    assert [r.kind for r in history["roofline"][-1].rows] == ["bandwidth", "compute", "prefill", "decode"]
    assert peaks.cached() is not None  # the probe's figures are this machine's from now on
    assert not at.session_state["measure_machine_chain"]


@pytest.mark.slow
def test_sidebar_offers_the_ggufs_local_runners_keep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GGUF in llama.cpp's cache shows in the sidebar; picking it restarts the embedded server with it."""
    from core.engine.choice import find_model
    from ui.sidebar.models import _found

    for name in ("HF_HUB_CACHE", "HF_HOME", "LLAMA_CACHE", "LLAMA_MODEL"):
        monkeypatch.delenv(name, raising=False)
    cache_roof(tmp_path, monkeypatch, None)
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / ".cache" / "llama.cpp"
    folder.mkdir(parents=True)
    (folder / "smol-copy.gguf").symlink_to(find_model())
    _found.clear()
    at = app()
    at.run()
    box = at.sidebar.selectbox(key="embedded_model")
    assert box.options == ["SmolLM2-135M (the default)", "smol-copy.gguf · 0.1 GB · llama.cpp"]
    box.set_value(str(folder / "smol-copy.gguf")).run()
    assert not at.exception, at.exception
    assert os.environ["LLAMA_MODEL"] == str(folder / "smol-copy.gguf")
    assert any("smol-copy.gguf" in c.value for c in at.sidebar.caption)  # the restarted server loaded it


@pytest.mark.slow
def test_a_run_on_a_busy_machine_says_so_beside_the_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            fake_api) -> None:  # type: ignore[no-untyped-def]
    """The fake API listens on 127.0.0.1 in this process, so this process is the server the run measures;
    CPU-burning processes started here take the machine, and the page says the machine was busy."""
    import subprocess
    import sys
    import time

    from core.engine.meter import CpuMeter

    if not CpuMeter.measurable():
        pytest.skip("the busy measure reads Linux /proc")
    cache_roof(tmp_path, monkeypatch, None)
    fake_api.token_delay = 0.03  # each answer takes a while, so the run lasts long enough to measure
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.5)
        at = app(**api_state(fake_api))
        at.run()
        at.switch_page("app_pages/output.py").run()
        at.multiselect(key="output_lengths").set_value([8, 16, 32]).run()
        at.button(key="run_output").click().run(timeout=300)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert not at.exception, at.exception
    state = at.session_state["history"]["output"][-1].state  # the run's field (`core.conclusions.MachineState`)
    assert state.measured and state.busy, state
    assert any(w.value.startswith("The machine was busy: the server had") for w in at.warning)


@pytest.mark.slow
def test_before_a_run_the_page_asks_for_no_settings_and_names_the_chapters_marks_as_the_chapters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache_roof(tmp_path, monkeypatch, SLOW)
    at = app()
    at.run()
    at.switch_page("app_pages/roofline.py").run()
    assert not at.exception, at.exception
    infos = [i.value for i in at.info]
    assert "Nothing measured yet on this machine: press Run (this experiment has no settings)." in infos
    assert not any("Choose the settings" in text for text in infos)
    kinds = {(v["machine"], v["kind"]) for v in chart_values(at) if "kind" in v}
    chapter = "the chapter's measurement on its own machine (a reference, not this machine)"
    assert ("Apple M3 Ultra", chapter) in kinds and ("Apple M3 Ultra", "measured here") not in kinds
