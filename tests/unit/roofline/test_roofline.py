"""The roofline: the probe on this machine (real numpy, real timing), the real SmolLM2 GGUF's costs worked
out by hand, the arithmetic and predictions for a slow and a fast machine, the busy measure, model discovery."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from core.cli.main import main
from core.engine.choice import find_model
from core.engine.meter import CpuMeter
from core.engine.models import find_ggufs
from core.engine.server import LocalServer
from core.roofline import peaks
from core.roofline.arithmetic import (
    DECODE,
    MIN_SHOWABLE_GAIN,
    PREFILL,
    Measurement,
    place,
    predict,
    roof_line,
)
from core.roofline.hardware import ACCELERATORS, MAC_STUDIO
from core.roofline.model import ModelFacts, from_gguf, from_server, from_user
from core.roofline.peaks import Ceiling, Roof
from core.roofline.report import build, lines, percent
from core.words import ContentWords

# The 2-core Zen 1 of ../shared/notes/roofline.md, and a fast desktop CPU (recorded levels, not this machine's).
SLOW = Roof("AMD EPYC Zen 1, 2 cores", Ceiling(15.3e9, "numpy float64 sum"), Ceiling(73e9, "numpy float32 matmul"),
            "2026-11-30")
FAST = Roof("16-core desktop", Ceiling(80e9, "numpy float64 sum"), Ceiling(1.5e12, "numpy float32 matmul"),
            "2026-11-30")
SMOL_PARAMS, SMOL_BYTES = 134_515_008, 96_576_768


@pytest.fixture(scope="module")
def smol() -> ModelFacts:
    return from_gguf(find_model())


def test_probe_measures_plausible_peaks_and_names_its_kernels() -> None:
    compute = peaks.measure_compute(n=256, budget_s=0.1)
    memory = peaks.measure_bandwidth(working_set=64 << 20, budget_s=0.2)
    # any machine since 2010: more than 100 MFLOP/s and 100 MB/s, less than a datacenter GPU
    assert 1e8 < compute.value < 1e15 and 1e8 < memory.value < 1e13
    assert compute.kernel == "numpy float32 matmul" and compute.size.startswith("256x256, best of")
    assert compute.library and compute.source == peaks.PROBE
    assert memory.kernel == "numpy float64 sum, one slice per thread" and memory.size.startswith("64 MiB")
    assert memory.threads == peaks.cores()


@pytest.mark.slow
def test_machine_roof_is_cached_per_machine_and_rerun_on_demand(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert peaks.cached() is None
    began = time.perf_counter()
    first = peaks.machine_roof()
    assert time.perf_counter() - began < 30  # the benchmark's goal is 10 s; this guards only against a hang
    assert first.seconds is not None and first.ridge is not None
    assert peaks.cached() == first and peaks.machine_roof() == first  # read back, not measured again
    stored = json.loads((tmp_path / "prefill-lab" / "roofline.json").read_text())
    assert list(stored) == [peaks.machine_key()]
    assert peaks.machine_roof(rerun=True).as_of >= first.as_of


@pytest.mark.slow
def test_smollm2_gguf_facts_match_the_hand_count(smol: ModelFacts) -> None:
    assert smol.n_params == SMOL_PARAMS and smol.size_bytes == SMOL_BYTES
    assert smol.tied_embeddings is True  # no output.weight: the head reads the whole embedding table
    assert smol.decode_bytes == SMOL_BYTES and smol.matmul_params == SMOL_PARAMS
    assert (smol.n_layers, smol.n_embd, smol.n_ctx_train, smol.ftype) == (30, 576, 8192, "Q4_1")
    assert smol.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2  # K and V, 30 layers, 3 KV heads of 64, f16: 23,040
    assert smol.flops_per_token(0) == 2 * SMOL_PARAMS
    assert smol.flops_per_token(500) == 2 * SMOL_PARAMS + 4 * 30 * 576 * 500


def test_untied_model_reads_one_embedding_row() -> None:
    """A model with its own head reads one row of the embedding table per token, not the table."""
    import gguf  # installed with requirements-local.txt
    import numpy as np

    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"untied-{os.getpid()}.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((100, 8), dtype=np.float32))
    writer.add_tensor("output.weight", np.zeros((100, 8), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((8, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    try:
        facts = from_gguf(path)
    finally:
        path.unlink()
    assert facts.tied_embeddings is False and facts.n_params == 100 * 8 * 2 + 64
    assert facts.decode_bytes == (800 + 64) * 4 + 8 * 4  # head and layer whole, one 8-float row of the table
    assert facts.matmul_params == 800 + 64


def test_server_facts_agree_with_the_gguf(local_server: LocalServer, smol: ModelFacts) -> None:
    facts = from_server(httpx.get(local_server.url + "/v1/models", timeout=30).json())
    assert facts is not None
    assert (facts.n_params, facts.size_bytes, facts.n_embd, facts.n_ctx_train) == (SMOL_PARAMS, SMOL_BYTES, 576, 8192)
    assert facts.kv_bytes_per_token is None  # the server does not say: unknown, not zero


def test_phases_on_the_slow_machine_match_the_hand_arithmetic(smol: ModelFacts) -> None:
    decode = place(SLOW, smol, Measurement(DECODE, "experiment 2", 59.9, 0))
    assert decode.bytes_per_s == pytest.approx(59.9 * SMOL_BYTES)
    assert decode.mbu == pytest.approx(59.9 * SMOL_BYTES / 15.3e9)  # 37.8 %
    assert decode.intensity == pytest.approx(2 * SMOL_PARAMS / SMOL_BYTES)  # 2.79 FLOP/byte
    assert decode.bound_by == "memory" and decode.bound_tps == pytest.approx(15.3e9 / SMOL_BYTES)
    prefill = place(SLOW, smol, Measurement(PREFILL, "experiment 1", 100.6, 256, prompt_tokens=512))
    flops = 2 * SMOL_PARAMS + 4 * 30 * 576 * 256
    assert prefill.flops_per_s == pytest.approx(100.6 * flops) and prefill.mfu == pytest.approx(100.6 * flops / 73e9)
    assert prefill.intensity == pytest.approx(flops / (SMOL_BYTES / 512 + 23_040))
    assert prefill.bound_by == "compute"
    batched = place(SLOW, smol, Measurement(DECODE, "experiment 4 · N = 4", 200.0, 100, streams=4))
    assert batched.bytes_per_token == pytest.approx((SMOL_BYTES + 4 * 23_040 * 100) / 4)


def test_slow_cpu_cannot_show_batching_and_a_fast_one_can(smol: ModelFacts) -> None:
    slow = predict(SLOW, smol, prefill_tps=100.6, decode_tps=59.9)
    assert slow is not None and slow.gain_from == "measured"
    assert slow.gain_bound == pytest.approx(100.6 / 59.9) and not slow.can_show_batching
    prefill_bound = 73e9 / (2 * SMOL_PARAMS + 4 * 30 * 576 * 250)
    decode_bound = 15.3e9 / (SMOL_BYTES + 23_040 * 500)
    assert slow.ratio == pytest.approx(prefill_bound / decode_bound)  # 1.80
    assert slow.ratio_agrees(100.6 / 59.9) and not slow.ratio_agrees(10.0)
    fast = predict(FAST, smol)
    assert fast is not None and fast.gain_from == "roofs" and fast.gain_bound > MIN_SHOWABLE_GAIN
    assert fast.can_show_batching and fast.ratio == pytest.approx(7.08, rel=0.01)


def test_mbu_above_100_percent_is_shown_as_the_probe_undershooting(smol: ModelFacts) -> None:
    low = Roof("probe that undershot", Ceiling(1e9, "numpy float64 sum"), Ceiling(73e9, "numpy float32 matmul"), "x")
    point = place(low, smol, Measurement(DECODE, "experiment 2", 59.9, 0))
    assert point.mbu == pytest.approx(5.79, rel=0.01) and point.probe_undershot
    assert percent(point.mbu) == "578 % (probe undershot)"


def test_unknown_compute_gives_no_mfu_and_no_prediction() -> None:
    mac = ACCELERATORS[MAC_STUDIO]
    assert mac.flops is None and mac.memory.source.startswith("https://")
    model = from_user("2B", 2, 0.6)
    point = place(mac, model, Measurement(DECODE, "chapter", 183, 0))
    assert point.mfu is None and point.mbu == pytest.approx(183 * 1.2e9 / 819.2e9)
    assert predict(mac, model) is None and percent(None) == "no peak"
    cited = [r.as_of and (r.compute is None or r.compute.source.startswith("https://")) for r in ACCELERATORS.values()]
    assert all(cited)


def test_roof_line_bends_at_the_ridge() -> None:
    line = dict(roof_line(SLOW))
    ridge = 73e9 / 15.3e9
    assert line[ridge] == pytest.approx(73e9)
    assert line[min(line)] == pytest.approx(15.3e9 * min(line)) and line[max(line)] == 73e9


@pytest.mark.slow
def test_cli_prints_and_writes_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    store = tmp_path / "prefill-lab" / "roofline.json"
    store.parent.mkdir(parents=True)
    store.write_text(json.dumps({peaks.machine_key(): SLOW.to_dict()}))  # recorded levels in the real cache
    assert main(["roofline", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "ridge     4.8 FLOP/byte" in out and "this machine cannot show it" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["model"]["n_params"] == SMOL_PARAMS and data["prediction"]["can_show_batching"] is False
    assert main(["roofline", "--accelerator", "NVIDIA H100 SXM", "--params", "70"]) == 0
    assert "this machine can show it" in capsys.readouterr().out


def test_report_lines_show_denominators(smol: ModelFacts) -> None:
    report = build(SLOW, smol, [Measurement(PREFILL, "experiment 1", 100.6, 256, prompt_tokens=512),
                                Measurement(DECODE, "experiment 2", 59.9, 100)])
    text = "\n".join(lines(report))
    assert "MFU = FLOP/s / 73 GFLOP/s; MBU = bytes/s / 15.3 GB/s" in text
    assert report.prediction is not None and report.prediction.gain_bound == pytest.approx(100.6 / 59.9)


@pytest.mark.skipif(not CpuMeter.measurable(), reason="the busy measure reads Linux /proc")
def test_a_run_on_a_busy_machine_is_reported_as_busy(local_server: LocalServer) -> None:
    assert local_server.process is not None
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.5)
        meter = CpuMeter(local_server.process.pid)
        meter.start()
        # A short request: with every core burning, llama.cpp's threads wait on each other at every step (a fresh
        # 2-core CI took over 120 s for 48 tokens); what is measured is the share, not the speed.
        body = {"prompt": "Count to a hundred.", "n_predict": 8, "ignore_eos": True, "cache_prompt": False}
        httpx.post(local_server.url + "/completion", json=body, timeout=600).raise_for_status()
        share = meter.stop()
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert share is not None and share.server_s > 0
    assert share.busy and share.server_share < 0.75, share


def test_a_server_that_is_not_running_is_not_measured() -> None:
    meter = CpuMeter(None)
    meter.start()
    assert meter.stop() is None


def test_discovery_finds_ggufs_where_runners_keep_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_CACHE", "HF_HOME", "LLAMA_CACHE", "LLAMA_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    hub = tmp_path / ".cache" / "huggingface" / "hub" / "models--org--m"
    (hub / "blobs").mkdir(parents=True)
    (hub / "blobs" / "abc").write_bytes(b"GGUF" + b"\0" * 60)
    (hub / "snapshots" / "rev").mkdir(parents=True)
    (hub / "snapshots" / "rev" / "m-Q4_K_M.gguf").symlink_to(hub / "blobs" / "abc")
    studio = tmp_path / ".lmstudio" / "models" / "pub" / "big"
    studio.mkdir(parents=True)
    for name in ("big-00001-of-00002.gguf", "big-00002-of-00002.gguf", "mmproj-big.gguf"):
        (studio / name).write_bytes(b"GGUF" + b"\0" * 200)
    (tmp_path / ".cache" / "llama.cpp").mkdir(parents=True)
    (tmp_path / ".cache" / "llama.cpp" / "small.gguf").write_bytes(b"GGUF")
    found = find_ggufs()
    assert [(f.path.name, f.where) for f in found] == [("small.gguf", "llama.cpp"), ("m-Q4_K_M.gguf", "Hugging Face"),
                                                       ("big-00001-of-00002.gguf", "LM Studio")]
    monkeypatch.setenv("LLAMA_MODEL", str(tmp_path / ".cache" / "llama.cpp" / "small.gguf"))
    assert [f.where for f in find_ggufs()] == ["LLAMA_MODEL", "Hugging Face", "LM Studio"]


@pytest.mark.slow
def test_cli_only_roofline_prints_a_table_and_a_summary(fake_api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the probe caches this machine's roofs there
    code = main(["--backend", "api", "--url", fake_api.base_url, "--model", "ok", "--only", "roofline",
                 "--matmul-n", "256", "--no-save"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["round", "kind", "value", "how"]
    assert [line.split()[1] for line in lines[1:5]] == ["bandwidth", "compute", "prefill", "decode"]
    assert re.search(r" [\d.]+ GB/s ", lines[1]), lines[1]  # a figure as a reader reads it, not 8092695617.4
    assert lines[5] == ContentWords("en")("roofline.title")  # then its conclusion, in the pages' words
    # "Measured: on this backend prefill ran ..." on a quiet machine, "Disturbed, so ..." where others took the CPU
    said = ContentWords("en")
    assert lines[6].startswith((said("roofline.conclusion.shown") + " on this backend prefill ran ",
                                said("roofline.conclusion.disturbed"))), lines[6]
    assert "the ridge point is" in lines[6], lines[6]


@pytest.mark.parametrize("llc,available,most", [
    (480 << 20, 64 << 30, 1 << 30),  # a VM's 480 MiB "cache": 8x would be 3.8 GB
    (480 << 20, 2 << 30, 512 << 20),  # little memory free: a quarter of it
    (32 << 20, 64 << 30, 256 << 20),
    (None, None, 256 << 20),
])
def test_the_bandwidth_probe_is_bounded_by_the_memory_available(llc: int | None, available: int | None,
                                                                most: int) -> None:
    size, why = peaks.working_set_size(llc, available)
    assert 0 < size <= most and size >= min(most, 256 << 20)
    assert ("capped" in why) == (most < 8 * (llc or 0))


def test_the_probe_says_what_size_it_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peaks, "last_level_cache", lambda: 480 << 20)
    monkeypatch.setattr(peaks, "available_memory", lambda: 256 << 20)  # a machine with little free
    memory = peaks.measure_bandwidth(budget_s=0.1)
    assert memory.size.startswith("64 MiB (8x the 480 MiB LLC, capped at 1024 MiB, capped at a quarter of the 256 MiB")


def test_a_folder_in_place_of_the_cached_figures_is_said_and_the_machine_still_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "prefill-lab" / "roofline.json").mkdir(parents=True)
    monkeypatch.setattr(peaks, "probe", lambda: peaks.Roof("here", peaks.measure_bandwidth(16 << 20, budget_s=0.05),
                                                           peaks.measure_compute(64, budget_s=0.05), "now"))
    assert "is a folder" in peaks.cache_problem()
    assert peaks.machine_roof().machine == "here" and peaks.cached() is None
