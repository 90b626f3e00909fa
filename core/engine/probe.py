"""A quick check that a llama-server works here: start it, time one completion."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import httpx

from core.engine.choice import EngineError
from core.engine.server import LocalServer

PROBE_PROMPT = "The quick brown fox jumps over the lazy dog. " * 50  # about 500 tokens
PROBE_ANSWER_TOKENS = 32


def measure_speed(url: str, prompt: str = PROBE_PROMPT, answer_tokens: int = PROBE_ANSWER_TOKENS) -> dict[str, float]:
    """One uncached completion: prefill and decode tokens/s from the server's own counts (decode: its
    ``predicted_n - 1`` steps over ``predicted_ms``, as `core.records.decode_timing` counts them)."""
    body = {"prompt": prompt, "n_predict": answer_tokens, "ignore_eos": True, "cache_prompt": False}
    timings = httpx.post(url + "/completion", json=body, timeout=300).raise_for_status().json()["timings"]
    return {"prompt_tokens": timings["prompt_n"], "prefill_tps": round(timings["prompt_per_second"], 1),
            "answer_tokens": timings["predicted_n"],
            "decode_tps": round((timings["predicted_n"] - 1) / timings["predicted_ms"] * 1000, 1)}


def probe(binary: Path, model: Path, repeats: int = 1) -> dict[str, Any]:
    """Start ``binary`` with ``model`` and time ``repeats`` completions, keeping the fastest decode (the
    least disturbed by other work on the machine); ``probe_ok`` false with the reason otherwise."""
    with tempfile.TemporaryDirectory(prefix="prefill-lab-probe-") as logs:
        try:
            with LocalServer(binary, model, context=2048, log_dir=Path(logs)) as server:
                runs = [measure_speed(server.url) for _ in range(repeats)]
                return {"probe_ok": True, **max(runs, key=lambda run: run["decode_tps"])}
        except (EngineError, httpx.HTTPError, KeyError) as exc:
            return {"probe_ok": False, "problem": str(exc)}
