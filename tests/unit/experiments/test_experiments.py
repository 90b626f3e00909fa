"""The experiments' generators against the real embedded llama-server and the real SmolLM2 model, and
``python -m core`` running experiment 3 end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from core.backends.tokens import ServerTokenCounter
from core.conclusions import Conclusion, paragraph
from core.documents import default_document, fit_document
from core.experiments import input_length, output_length
from core.experiments import prefix_cache as cache
from core.experiments.base import RunContext
from core.words import ContentWords

pytestmark = pytest.mark.llama

SMALL_DOC_TOKENS = 600


def test_props_and_exact_token_counts(local):
    assert local.context == 4096 and local.info["model"].endswith(".gguf") and local.info["server_build"]
    counter = ServerTokenCounter(local.backend)
    fitted = fit_document(default_document()[:20000], 300, counter)
    assert fitted.truncated and 295 <= counter.count(fitted.text) <= 305


def test_prefix_cache_append_reuses_timestamp_recomputes(local):
    document = fit_document(default_document(), SMALL_DOC_TOKENS, local.counter)
    settings = cache.Settings(rounds=3, fitted=document, answer_tokens=12)
    rows = list(cache.rounds(RunContext(local), settings))
    assert [r.error for r in rows] == [""] * 6
    append = [r for r in rows if r.strategy == "append_only"]
    stamp = [r for r in rows if r.strategy == "timestamp_first"]
    assert append[0].recomputed_tokens > SMALL_DOC_TOKENS
    for row in append[1:]:
        assert row.recomputed_tokens <= 32 and row.cached_tokens > SMALL_DOC_TOKENS
    for row in stamp:
        assert row.recomputed_tokens >= 0.9 * row.prompt_tokens
    summary = cache.summarize_cache(rows)
    assert cache.recomputed_ratio(summary)["timestamp_first"] > 2


def test_ttft_grows_with_input_length(local):
    rows = list(input_length.rounds(RunContext(local), input_length.Settings(sizes=(128, 1024), max_tokens=2)))
    assert [r.error for r in rows] == ["", ""]
    short, long = rows
    assert long.prompt_tokens > 5 * short.prompt_tokens
    assert long.ttft_ms > short.ttft_ms and long.prefill_ms > short.prefill_ms
    assert short.recomputed_tokens >= short.prompt_tokens - 4, "the nonce at the start defeats the cache"
    rates = sorted(r.recomputed_tokens / r.prefill_ms * 1000 for r in rows)  # no floor: a busy CI machine is slow
    assert input_length.summarize_input(rows).prefill_tps == pytest.approx(sum(rates) / 2) and rates[0] > 0


def test_total_time_grows_with_output_length(local):
    rows = list(output_length.rounds(RunContext(local), output_length.Settings(lengths=(8, 64))))
    assert [r.output_tokens for r in rows] == [8, 64]  # ignore_eos forces the exact length
    assert rows[1].total_ms > rows[0].total_ms
    summary = output_length.summarize_output(rows)
    assert 1 < summary.ms_per_output_token < 500


def test_stop_keeps_measured_rounds(local):
    cancel = threading.Event()
    rows = []
    for row in output_length.rounds(RunContext(local, cancel, warm=False), output_length.Settings((4, 4, 4, 4))):
        rows.append(row)
        if len(rows) == 2:
            cancel.set()
    assert len(rows) == 2 and all(not r.error for r in rows)


def test_cli_cache_experiment_on_embedded_default(tmp_path):
    out = tmp_path / "cache.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "--only",
            "cache",
            "--rounds",
            "2",
            "--doc-tokens",
            "300",
            "--context",
            "2048",
            "--json",
            str(out),
            "--csv",
            str(tmp_path / "cache.csv"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    said = paragraph(Conclusion.from_dict(data["summary"]["cache"]["conclusion"]), ContentWords("en"))
    assert said in proc.stdout and "timestamp first recomputed" in said, proc.stdout
    assert data["settings"]["backend"] == "local" and data["settings"]["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    rounds = data["rounds"]
    assert [(r["experiment"], r["strategy"], r["round"], r["error"]) for r in rounds] == [
        ("cache", "append_only", 1, ""),
        ("cache", "append_only", 2, ""),
        ("cache", "timestamp_first", 1, ""),
        ("cache", "timestamp_first", 2, ""),
    ]
    for row in rounds:
        assert 300 < row["prompt_tokens"] < 2048 and row["output_tokens"] > 0
        assert 0 < row["prefill_ms"] <= row["ttft_ms"] and row["decode_ms"] > 0
    append_2, stamp_2 = rounds[1], rounds[3]
    assert append_2["recomputed_tokens"] <= 32 and append_2["cached_tokens"] > 300
    assert stamp_2["recomputed_tokens"] >= 0.9 * stamp_2["prompt_tokens"]
    csv_lines = (tmp_path / "cache.csv").read_text().splitlines()
    assert len(csv_lines) == 5 and csv_lines[1].startswith("local,SmolLM2-135M-Instruct.Q4_1.gguf,http://127.0.0.1:")
    assert ",cache,1,append_only," in csv_lines[1] and ",cache,2,timestamp_first," in csv_lines[4]
