"""Measured tokens/s placed under a machine's roofs, and what the roofs predict before a run.

For a phase that ran at T tokens/s:

- FLOP/s = T x (2 x matmul weights + 4 x layers x n_embd x context): the attention term counts QKᵀ
  and AV over the context each token attends to (half the prompt, on average, in prefill);
- bytes/s = T x the bytes one token costs: decode reads every weight once per step for all N
  streams and each stream's KV cache, so (weights + N x KV x context) / N; prefill reads the weights
  once per micro-batch of `UBATCH` tokens;
- intensity = FLOP / byte; MFU = FLOP/s / the compute roof; MBU = bytes/s / the bandwidth roof.
  Both are returned unclipped: above 1 the roof (a probe's lower bound) undershot.

The roofs bound each phase: tokens/s <= roof(intensity) / FLOPs per token. Their ratio predicts how
much faster prefill is than decode here (experiment 2), and since batching can lift decode at most
to the prefill rate, the most batching can gain is G ≈ prefill tokens/s / single-stream decode
tokens/s (experiment 4).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from core.roofline.model import ModelFacts
from core.roofline.peaks import Roof

PREFILL = "prefill"
DECODE = "decode"
UBATCH = 512  # llama-server's default -ub: a prompt is computed 512 tokens per weight read
RATIO_SPREAD = 2.0  # a measured prefill:decode ratio within [R / 2, 2 R] agrees with the prediction R
# Batching is shown by a gain of at least 1.3x (core.experiments.batch.MIN_GAIN, in its `conclude`). The bound G
# assumes perfect batching; on the 2-core Zen 1 a bound of 1.7 gave 1.10 measured, so a machine whose bound is
# under 2 cannot show the effect at all (README, "What your machine can show").
MIN_SHOWABLE_GAIN = 2.0
PROMPT_TOKENS = 500  # the context the predictions assume (the engine probe's prompt)


@dataclass(frozen=True)
class Measurement:
    """One measured phase: ``tps`` over all streams, at ``context`` tokens attended on average."""

    phase: str  # PREFILL or DECODE
    label: str  # e.g. "experiment 1", "experiment 4 · N = 4", "Mac Studio (chapter)"
    tps: float
    context: float
    streams: int = 1
    prompt_tokens: int | None = None  # prefill: the prompt's length (how many tokens share one weight read)


@dataclass(frozen=True)
class PhasePoint:
    """A measurement on the roofline, with both ratios and their denominators."""

    measurement: Measurement
    flops_per_token: float
    bytes_per_token: float
    flops_per_s: float
    bytes_per_s: float
    intensity: float  # FLOP per byte
    bound_tps: float  # what the roofs allow at this intensity
    mfu: float | None  # None where the machine has no compute roof (never a guess)
    mbu: float
    peak_flops: float | None
    peak_bandwidth: float
    bound_by: str  # "compute" or "memory": which roof is lower at this intensity

    @property
    def probe_undershot(self) -> bool:
        """A ratio above 100 %: the measured roof is below the true one."""
        return self.mbu > 1.0 or (self.mfu is not None and self.mfu > 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "probe_undershot": self.probe_undershot}


def bytes_per_token(model: ModelFacts, m: Measurement) -> float:
    if m.phase == PREFILL:
        per_pass = max(1, min(m.prompt_tokens or UBATCH, UBATCH))
        return model.decode_bytes / per_pass + (model.kv_bytes_per_token or 0)
    return model.bytes_per_step(m.context, m.streams) / max(m.streams, 1)


def place(roof: Roof, model: ModelFacts, m: Measurement) -> PhasePoint:
    """``m`` on ``roof``'s roofline for ``model``."""
    flops = model.flops_per_token(m.context)
    moved = bytes_per_token(model, m)
    intensity = flops / moved
    attainable = roof.attainable(intensity)
    bound_by = "compute" if roof.flops is not None and roof.flops <= roof.bandwidth * intensity else "memory"
    return PhasePoint(
        measurement=m, flops_per_token=flops, bytes_per_token=moved, flops_per_s=m.tps * flops,
        bytes_per_s=m.tps * moved, intensity=intensity, bound_tps=attainable / flops,
        mfu=m.tps * flops / roof.flops if roof.flops else None,
        mbu=m.tps * moved / roof.bandwidth, peak_flops=roof.flops, peak_bandwidth=roof.bandwidth,
        bound_by=bound_by)


def bound(roof: Roof, model: ModelFacts, phase: str, context: float, streams: int = 1,
          prompt_tokens: int | None = None) -> float:
    """The most tokens/s the roofs allow a phase (all streams together)."""
    probe = Measurement(phase, "bound", 1.0, context, streams, prompt_tokens)
    return place(roof, model, probe).bound_tps


@dataclass(frozen=True)
class Prediction:
    """What the roofs say experiments 2 and 4 can show on this machine, before any run."""

    prefill_bound: float  # tokens/s, a PROMPT_TOKENS prompt
    decode_bound: float  # tokens/s, one stream at that context
    ratio: float  # R: prefill bound / decode bound
    gain_bound: float  # G: the most batching can gain
    gain_from: str  # "measured" (experiments 1 and 2 of this session) or "roofs"
    ridge: float | None
    decode_intensity: float

    @property
    def can_show_batching(self) -> bool:
        return self.gain_bound >= MIN_SHOWABLE_GAIN

    def ratio_agrees(self, measured_ratio: float) -> bool:
        """Whether a measured prefill:decode ratio is within the stated spread of R."""
        return self.ratio / RATIO_SPREAD <= measured_ratio <= self.ratio * RATIO_SPREAD

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "can_show_batching": self.can_show_batching, "min_showable_gain": MIN_SHOWABLE_GAIN,
                "ratio_spread": RATIO_SPREAD}


def predict(roof: Roof, model: ModelFacts, prefill_tps: float | None = None, decode_tps: float | None = None,
            prompt_tokens: int = PROMPT_TOKENS) -> Prediction | None:
    """R from the roofs; G from this session's measured prefill and decode where both exist, else R.

    None where the machine has no compute roof: without it the prefill bound is unknown."""
    if roof.flops is None:
        return None
    prefill = bound(roof, model, PREFILL, prompt_tokens / 2, prompt_tokens=prompt_tokens)
    decode = bound(roof, model, DECODE, prompt_tokens)
    measured = bool(prefill_tps and decode_tps)
    gain = prefill_tps / decode_tps if prefill_tps and decode_tps else prefill / decode
    decode_point = place(roof, model, Measurement(DECODE, "bound", 1.0, prompt_tokens))
    return Prediction(prefill_bound=prefill, decode_bound=decode, ratio=prefill / decode, gain_bound=gain,
                      gain_from="measured" if measured else "roofs", ridge=roof.ridge,
                      decode_intensity=decode_point.intensity)


def roof_line(roof: Roof, low: float = 0.1, high: float = 10_000.0, points: int = 41) -> list[tuple[float, float]]:
    """(intensity, attainable FLOP/s) pairs on a log scale, the ridge point included: the chart's roof."""
    step = (math.log10(high) - math.log10(low)) / (points - 1)
    xs = [10 ** (math.log10(low) + i * step) for i in range(points)]
    if roof.ridge and low < roof.ridge < high:
        xs = sorted([*xs, roof.ridge])
    return [(x, roof.attainable(x)) for x in xs]
