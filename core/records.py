"""Typed records: one per request (`RequestResult`) and one per experiment round (`RoundResult`).

Every count and time in them was validated where it was read (`core.backends.usage`): a field a
server sent that is not a number is left out and named in ``unreadable_fields``, so the arithmetic
here never meets a string.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

SERVER = "server"  # a timing the server measured (llama-server's timings)
CLIENT = "client"  # a timing read off the stream clock on this side

# Old spellings in exports written before the names were made one (samples/*.json, users' files) -> the new.
RENAMED_FIELDS = {"reused_tokens": "cached_tokens", "levels": "concurrency"}
RENAMED_EXPERIMENTS = {"input_length": "input", "output_length": "output", "prefix_cache": "cache"}


def renamed(data: dict[str, Any]) -> dict[str, Any]:
    """A record or settings read back from an export, with old field names and experiment ids made current."""
    out = {RENAMED_FIELDS.get(k, k): v for k, v in data.items()}
    if isinstance(out.get("experiment"), str):
        out["experiment"] = RENAMED_EXPERIMENTS.get(out["experiment"], out["experiment"])
    return out


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
    reasoning_inline: bool = False  # reasoning came inside the content, between <think> and </think>
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens served from the server's or provider's cache
    recomputed_tokens: int | None = None
    cache_write_tokens: int | None = None  # Anthropic: prompt tokens written to the cache (billed at a premium)
    usage_source: str | None = None  # the stream field the token counts were read from
    server_prefill_ms: float | None = None
    server_decode_ms: float | None = None
    server_decode_tokens: int | None = None  # llama-server's predicted_n: every answer token, the first included
    unreadable_fields: list[str] = field(default_factory=list)  # sent by the server but not a number: left out
    sent_at: float | None = None  # the backend clock when the request was sent: the times above count from it
    server_processing_ms: float | None = None  # the server's own time before its response, from its header
    # (`core.backends.base.PROCESSING_HEADER`): queue and prefill together, unsplit
    prompt_started_s: float | None = None  # when the server said it began this prompt (llama-server's prompt_progress,
    # read back to its start), on the stream clock: queue plus the network's round trip after the send

    @property
    def inter_token_s(self) -> list[float]:
        """Gaps between consecutive content chunks after the first (inter-token latency)."""
        times = [t for t in self.chunk_times_s if self.ttft_s is not None and t >= self.ttft_s]
        return [b - a for a, b in zip(times, times[1:], strict=False)]


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
    cached_tokens: int | None = None
    prefill_ms: float | None = None
    ttft_ms: float | None = None
    first_byte_ms: float | None = None
    first_reasoning_ms: float | None = None  # reasoning models: thinking starts before the first visible token
    reasoning_inline: bool = False  # the reasoning was <think>…</think> inside the content; TTFT is after it
    output_tokens: int | None = None
    decode_ms: float | None = None
    total_ms: float | None = None
    ms_per_output_token: float | None = None
    cache_write_tokens: int | None = None
    usage_source: str | None = None  # e.g. "usage.prompt_tokens_details.cached_tokens", "timings.cache_n"
    prefill_source: str | None = None  # SERVER (prefill_ms from the server) or CLIENT (only TTFT, the stream clock)
    decode_source: str | None = None  # SERVER (the server's decode timings) or CLIENT (the stream clock)
    unreadable_fields: str = ""  # fields the server sent that were not numbers ("; " between them), left out
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Every field, shallow: they are all plain values (``asdict``'s deep copy made drawing 1,000 saved
        runs take seconds, BENCHMARKS.md)."""
        return {name: getattr(self, name) for name in ROUND_FIELD_NAMES}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundResult:
        """Read back a record written by `to_dict` (an export, a recorded sample), old spellings too."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in renamed(data).items() if k in names})

    @classmethod
    def from_request(cls, experiment: str, round_no: int, result: RequestResult, **extra: Any) -> "RoundResult":
        """Fold a request's measurements into a round row, saying where each timing came from."""
        decode_ms, per_token, decode_source = decode_timing(result)
        prefill_source = (SERVER if result.server_prefill_ms is not None
                          else CLIENT if result.ttft_s is not None else None)
        return cls(
            experiment=experiment,
            round=round_no,
            prompt_tokens=result.prompt_tokens,
            recomputed_tokens=result.recomputed_tokens,
            cached_tokens=result.cached_tokens,
            prefill_ms=_round(result.server_prefill_ms, 2),
            ttft_ms=_ms(result.ttft_s),
            first_byte_ms=_ms(result.first_byte_s),
            first_reasoning_ms=_ms(result.first_reasoning_s),
            reasoning_inline=result.reasoning_inline,
            output_tokens=result.completion_tokens,
            decode_ms=_round(decode_ms, 2),
            total_ms=_ms(result.end_s),
            ms_per_output_token=_round(per_token, 3),
            cache_write_tokens=result.cache_write_tokens,
            usage_source=result.usage_source,
            prefill_source=prefill_source,
            decode_source=decode_source,
            unreadable_fields="; ".join(result.unreadable_fields),
            error=result.error,
            **extra,
        )


ROUND_FIELD_NAMES = tuple(f.name for f in fields(RoundResult))


def decode_timing(result: RequestResult) -> tuple[float | None, float | None, str | None]:
    """``(decode ms, ms per decode step, source)``: every experiment's decode figure is per decode step.

    llama-server: from its counts, ``predicted_ms / (predicted_n - 1)``. The first answer token comes out of
    the prefill pass and ``predicted_ms`` starts when it is sampled, so it covers ``predicted_n - 1`` decode
    steps (a one-token answer reports 0.001 ms on build 571d0d5). The server's own ``predicted_per_token_ms``
    is not read: builds disagree on it (571d0d5, the embedded default, divides by ``predicted_n`` and its log
    says the same, 4 tokens in 42.19 ms = 10.55 ms per token, 33 % under the 14.06 ms a step took; 7e4c0a9
    divides by ``predicted_n - 1``). Elsewhere the stream clock: first content token to the end, over the
    tokens after the first.
    """
    if result.server_decode_ms is not None:
        steps = (result.server_decode_tokens or 0) - 1  # one token: no decode step (the server then says ~0 ms)
        return result.server_decode_ms, result.server_decode_ms / steps if steps >= 1 else None, SERVER
    tokens = result.completion_tokens
    if result.ttft_s is None or result.end_s is None or not tokens or tokens < 2:
        return None, None, None
    decode_ms = (result.end_s - result.ttft_s) * 1000
    return decode_ms, decode_ms / (tokens - 1), CLIENT


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)
