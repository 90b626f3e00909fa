"""Typed records: one per request (`RequestResult`) and one per experiment round (`RoundResult`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RequestResult:
    """What one streaming request measured. Times are seconds since the request was sent.

    Fields a backend does not report stay ``None`` ("not reported"), never 0.
    A failed request has ``success=False`` and a human-readable ``error``; it never raises.
    """

    success: bool = False
    error: str = ""
    first_byte_s: float | None = None
    first_reasoning_s: float | None = None
    ttft_s: float | None = None
    end_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    text: str = ""
    reasoning_text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reused_tokens: int | None = None
    recomputed_tokens: int | None = None
    server_prefill_ms: float | None = None
    server_decode_ms: float | None = None
    server_decode_tokens: int | None = None

    @property
    def inter_token_s(self) -> list[float]:
        """Gaps between consecutive content chunks after the first (inter-token latency)."""
        times = [t for t in self.chunk_times_s if self.ttft_s is not None and t >= self.ttft_s]
        return [b - a for a, b in zip(times, times[1:])]


@dataclass
class RoundResult:
    """One row of an experiment: what a chart point and a table row are made of."""

    experiment: str
    round: int
    strategy: str | None = None
    repeat: int = 1
    target_tokens: int | None = None
    prompt_tokens: int | None = None
    recomputed_tokens: int | None = None
    reused_tokens: int | None = None
    prefill_ms: float | None = None
    ttft_ms: float | None = None
    first_byte_ms: float | None = None
    first_reasoning_ms: float | None = None  # reasoning models: thinking starts before the first visible token
    output_tokens: int | None = None
    decode_ms: float | None = None
    total_ms: float | None = None
    ms_per_output_token: float | None = None
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_request(cls, experiment: str, round_no: int, result: RequestResult, **extra: Any) -> "RoundResult":
        """Fold a request's measurements into a round row."""

        def ms(seconds: float | None) -> float | None:
            return None if seconds is None else round(seconds * 1000, 2)

        decode_ms = result.server_decode_ms
        per_token = None
        if result.server_decode_ms is not None and result.server_decode_tokens:
            per_token = result.server_decode_ms / result.server_decode_tokens
        elif result.ttft_s is not None and result.end_s is not None and result.completion_tokens and result.completion_tokens > 1:
            decode_ms = (result.end_s - result.ttft_s) * 1000
            per_token = decode_ms / (result.completion_tokens - 1)
        return cls(
            experiment=experiment,
            round=round_no,
            prompt_tokens=result.prompt_tokens,
            recomputed_tokens=result.recomputed_tokens,
            reused_tokens=result.reused_tokens,
            prefill_ms=None if result.server_prefill_ms is None else round(result.server_prefill_ms, 2),
            ttft_ms=ms(result.ttft_s),
            first_byte_ms=ms(result.first_byte_s),
            first_reasoning_ms=ms(result.first_reasoning_s),
            output_tokens=result.completion_tokens,
            decode_ms=None if decode_ms is None else round(decode_ms, 2),
            total_ms=ms(result.end_s),
            ms_per_output_token=None if per_token is None else round(per_token, 3),
            error=result.error,
            **extra,
        )
