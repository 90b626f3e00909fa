"""The measured phases of experiments 1, 2 and 4 as roofline `Measurement`s, and the chapter's own.

Experiment 1 gives prefill (its median tokens/s, at its median prompt), experiment 2 decode (at
its short prompt plus half its answers), experiment 4 decode at each N (and prefill at each N).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.experiments import input_length, output_length
from core.experiments.base import OUTPUT_PROMPT_TOKENS
from core.experiments.batch import BatchLevel
from core.experiments.roofline import RooflineRecord
from core.records import RoundResult
from core.roofline.arithmetic import DECODE, PREFILL, Measurement
from core.roofline.model import ModelFacts
from core.stats import median

# The chapter's Mac Studio (samples/chapter_reference.json): Qwen3.5-2B Q4_K_M (about 1.2 GB, the chapter's own
# figure), prefill 4,900 tokens/s at a 17k-token prompt, decode 183 tokens/s. Its parameter count is the name's.
CHAPTER_PREFILL_TPS, CHAPTER_DECODE_TPS, CHAPTER_PROMPT = 4900.0, 183.0, 17_000
CHAPTER_MODEL = ModelFacts(name="Qwen3.5-2B Q4_K_M (chapter)", n_params=2_000_000_000, size_bytes=1_200_000_000,
                           decode_bytes=1_200_000_000, matmul_params=2_000_000_000, source="user")


def prefill_of(rows: Sequence[RoundResult], label: str = "experiment 1") -> Measurement | None:
    tps = input_length.summarize_input(rows).prefill_tps
    ok = [r for r in rows if r.experiment == input_length.ID and not r.error]
    prompt = median(r.prompt_tokens for r in ok if r.prompt_tokens)
    if not tps or not prompt:
        return None
    return Measurement(PREFILL, label, tps, prompt / 2, prompt_tokens=int(prompt))


def decode_of(rows: Sequence[RoundResult], label: str = "experiment 2") -> Measurement | None:
    tps = output_length.summarize_output(rows).decode_tps
    ok = [r for r in rows if r.experiment == output_length.ID and not r.error]
    prompt = median(r.prompt_tokens for r in ok if r.prompt_tokens) or OUTPUT_PROMPT_TOKENS
    answer = median(r.output_tokens for r in ok if r.output_tokens) or 0
    return Measurement(DECODE, label, tps, prompt + answer / 2) if tps else None


def batch_of(levels: Sequence[BatchLevel], label: str = "experiment 4") -> list[Measurement]:
    """Decode (and prefill) at every N that measured a rate."""
    found: list[Measurement] = []
    for level in sorted(levels, key=lambda lv: lv.concurrency):
        n = level.concurrency
        decode = [s for s in level.streams if s.phase == DECODE and not s.error]
        prompt = median(s.prompt_tokens for s in decode if s.prompt_tokens) or OUTPUT_PROMPT_TOKENS
        answer = (level.output_tokens / n) if n else 0
        if level.aggregate_decode_tps:
            found.append(Measurement(DECODE, f"{label} · N = {n}", level.aggregate_decode_tps, prompt + answer / 2, n))
        if level.aggregate_prefill_tps and level.prefill_prompt_tokens:
            each = level.prefill_prompt_tokens / n
            found.append(Measurement(PREFILL, f"{label} · N = {n}", level.aggregate_prefill_tps, each / 2, n,
                                     prompt_tokens=int(each)))
    return found


def probe_phases(records: Sequence[RooflineRecord], label: str = "experiment 5") -> list[Measurement]:
    """The one request of experiment 5: its prefill and decode."""
    return [Measurement(r.kind, label, r.value, r.context or 0.0, prompt_tokens=r.prompt_tokens)
            for r in records if r.kind in (PREFILL, DECODE) and r.value and not r.error]


def chapter_points(label: str) -> list[Measurement]:
    return [Measurement(PREFILL, label, CHAPTER_PREFILL_TPS, CHAPTER_PROMPT / 2, prompt_tokens=CHAPTER_PROMPT),
            Measurement(DECODE, label, CHAPTER_DECODE_TPS, CHAPTER_PROMPT)]
