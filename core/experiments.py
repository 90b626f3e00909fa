"""The three experiments, each a generator that yields one `RoundResult` per request.

A caller can redraw after every round and stop at any time (``cancel``) keeping what was measured;
the round in flight when the stop comes is dropped, not recorded half-measured.
A round that fails is yielded with its ``error`` and ends the experiment: later rounds would fail
the same way (a server that is down) or measure a broken conversation (experiment 3).

Every experiment first sends one short warm-up request that is kept out of the results: a fresh
server pays for model load and first-touch allocation on its first request.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from core.backends.base import ChatRequest, ProgressCallback, StreamingBackend
from core.prompts import (
    STRATEGIES,
    Conversation,
    DocumentError,
    EstimatingTokenCounter,
    FittedDocument,
    TokenCounter,
    input_length_messages,
    nonce,
    output_length_messages,
)
from core.results import RequestResult, RoundResult
from core.stats import LinearFit, linear_fit, median

INPUT = "input_length"
OUTPUT = "output_length"
CACHE = "prefix_cache"

DEFAULT_INPUT_SIZES = (256, 512, 1024, 2048, 4096)
DEFAULT_OUTPUT_LENGTHS = (16, 32, 64, 128, 256)
DEFAULT_STRATEGIES = ("append_only", "timestamp_first")
DEFAULT_ROUNDS = 6
DEFAULT_CACHE_DOC_TOKENS = 2000
RESERVED_TOKENS = 64  # template, instructions and the answer's first tokens
INPUT_ANSWER_TOKENS = 4  # experiment 1 asks for this many output tokens
OUTPUT_PROMPT_TOKENS = 60  # experiment 2's short prompt, rounded up
CACHE_ANSWER_TOKENS = 24  # experiment 3's answers
QUESTION_TOKENS = 40  # experiment 3: a question and its chat-template framing, rounded up


@dataclass(frozen=True)
class Plan:
    """What a run will send, for budgets and progress: requests, and about how many tokens in and out."""

    requests: int
    tokens: int


def plan_input(sizes: Sequence[int], repeats: int) -> Plan:
    return Plan(len(sizes) * repeats, (sum(sizes) + INPUT_ANSWER_TOKENS * len(sizes)) * repeats)


def plan_output(lengths: Sequence[int], repeats: int) -> Plan:
    return Plan(len(lengths) * repeats, (sum(lengths) + OUTPUT_PROMPT_TOKENS * len(lengths)) * repeats)


def plan_cache(doc_tokens: int, rounds: int, strategies: int) -> Plan:
    """Round ``i`` sends the document and ``i`` questions and answers."""
    per_strategy = sum(doc_tokens + i * (QUESTION_TOKENS + CACHE_ANSWER_TOKENS) for i in range(1, rounds + 1))
    return Plan(rounds * strategies, per_strategy * strategies)


def warm_up(backend: StreamingBackend, cancel: threading.Event | None = None) -> RequestResult:
    """One tiny request whose timing is thrown away."""
    return backend.stream_chat(ChatRequest([{"role": "user", "content": "Say OK."}], max_tokens=2), cancel=cancel)


def _stopped(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()


def sizes_that_fit(sizes: Sequence[int], context: int | None) -> list[int]:
    """The requested input sizes that leave room for the answer in ``context`` tokens."""
    if not context:
        return list(sizes)
    return [s for s in sizes if s + RESERVED_TOKENS <= context]


def input_length_sweep(backend: StreamingBackend, document: str, counter: TokenCounter,
                       sizes: Sequence[int] = DEFAULT_INPUT_SIZES, repeats: int = 1, max_tokens: int = 4,
                       cancel: threading.Event | None = None, on_progress: ProgressCallback | None = None,
                       warm: bool = True) -> Iterator[RoundResult]:
    """Experiment 1: prompts of growing length; TTFT and server prefill ms against prompt tokens."""
    if warm:
        warm_up(backend, cancel)
    overhead = counter.count(input_length_messages("", nonce())[0]["content"]) + 24
    document = document[: max(sizes, default=0) * 8]  # plenty for any tokenizer; keeps tokenizing cheap
    round_no = 0
    for size in sizes:
        body = counter.truncate(document, max(size - overhead, 1))
        for repeat in range(1, repeats + 1):
            if _stopped(cancel):
                return
            round_no += 1
            messages = input_length_messages(body, nonce())
            result = backend.stream_chat(ChatRequest(messages, max_tokens=max_tokens, ignore_eos=True),
                                         on_progress=on_progress, cancel=cancel)
            if _stopped(cancel):
                return
            if isinstance(counter, EstimatingTokenCounter):
                counter.observe(sum(len(m["content"]) for m in messages), result.prompt_tokens)
            yield RoundResult.from_request(INPUT, round_no, result, repeat=repeat, target_tokens=size)
            if result.error:
                return


def output_length_sweep(backend: StreamingBackend, lengths: Sequence[int] = DEFAULT_OUTPUT_LENGTHS, repeats: int = 1,
                        cancel: threading.Event | None = None, on_progress: ProgressCallback | None = None,
                        warm: bool = True) -> Iterator[RoundResult]:
    """Experiment 2: answers of growing length; total time and per-token decode time."""
    if warm:
        warm_up(backend, cancel)
    round_no = 0
    for length in lengths:
        for repeat in range(1, repeats + 1):
            if _stopped(cancel):
                return
            round_no += 1
            request = ChatRequest(output_length_messages(nonce()), max_tokens=length, ignore_eos=True)
            result = backend.stream_chat(request, on_progress=on_progress, cancel=cancel)
            if _stopped(cancel):
                return
            yield RoundResult.from_request(OUTPUT, round_no, result, repeat=repeat, target_tokens=length)
            if result.error:
                return


def cache_doc_budget(doc_tokens: int, context: int | None, rounds: int,
                     answer_tokens: int = CACHE_ANSWER_TOKENS) -> int:
    """The document budget that leaves room in ``context`` for every round's question and answer.

    Raises `DocumentError` when not even a short document fits.
    """
    if not context:
        return doc_tokens
    room = context - RESERVED_TOKENS - rounds * (answer_tokens + QUESTION_TOKENS)
    if room < 100:
        raise DocumentError(f"{rounds} rounds do not fit in a {context:,}-token context; choose fewer rounds.")
    return min(doc_tokens, room)


def prefix_cache_rounds(
    backend: StreamingBackend,
    document: FittedDocument,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    rounds: int = DEFAULT_ROUNDS,
    answer_tokens: int = CACHE_ANSWER_TOKENS,
    seed: int = 0,
    cancel: threading.Event | None = None,
    on_progress: ProgressCallback | None = None,
    warm: bool = True,
) -> Iterator[RoundResult]:
    """Experiment 3: the same long context for ``rounds`` rounds under each strategy.

    Each round adds the previous answer and a new question at the end. The strategy decides what
    the system prompt starts with: unchanged (``append_only``) or something new every round.
    ``document`` was fitted to the backend's context once (`core.prompts.fit_document`, see
    `cache_doc_budget`); it is sent as it is.
    """
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"Unknown strategies: {', '.join(unknown)}; choose from {', '.join(STRATEGIES)}.")
    if warm:
        warm_up(backend, cancel)
    for strategy in strategies:
        conversation = Conversation(document.text, strategy, seed)
        for round_no in range(1, rounds + 1):
            if _stopped(cancel):
                return
            request = ChatRequest(conversation.next_messages(), max_tokens=answer_tokens)
            result = backend.stream_chat(request, on_progress=on_progress, cancel=cancel)
            if _stopped(cancel):
                return
            yield RoundResult.from_request(CACHE, round_no, result, strategy=strategy)
            if result.error:
                return
            conversation.answered(result.text)


# -- summaries: never invent a number; a figure with no rounds behind it is None ("no data") ----------
def _ok(rows: Sequence[RoundResult], experiment: str) -> list[RoundResult]:
    return [r for r in rows if r.experiment == experiment and not r.error]


def _sources(rows: Sequence[RoundResult], name: str) -> str | None:
    """SERVER, CLIENT, both joined with "+", or None: where the timings behind a summary came from."""
    found = sorted({getattr(r, name) for r in rows if getattr(r, name)})
    return "+".join(found) or None


@dataclass
class InputSummary:
    prefill_tokens_per_s: float | None
    ttft_fit: LinearFit | None
    prefill_fit: LinearFit | None
    prefill_source: str | None = None  # "server" (prefill_ms), "client" (TTFT where the server reports none), both

    def ms_per_1k(self) -> float | None:
        fit = self.prefill_fit or self.ttft_fit
        return None if fit is None else fit.slope * 1000


def summarize_input(rows: Sequence[RoundResult]) -> InputSummary:
    """Prefill speed: tokens computed over the server's prefill time, or over TTFT where it reports none."""
    ok = _ok(rows, INPUT)
    speeds, used = [], []
    for r in ok:
        tokens = r.recomputed_tokens if r.recomputed_tokens is not None else r.prompt_tokens
        ms = r.prefill_ms if r.prefill_ms is not None else r.ttft_ms
        if tokens and ms:
            speeds.append(tokens / ms * 1000)
            used.append(r)
    prompt_tokens = [r.prompt_tokens for r in ok]
    return InputSummary(
        median(speeds),
        linear_fit(prompt_tokens, [r.ttft_ms for r in ok]),
        linear_fit(prompt_tokens, [r.prefill_ms for r in ok]),
        _sources(used, "prefill_source"),
    )


@dataclass
class OutputSummary:
    ms_per_token: float | None
    decode_tokens_per_s: float | None
    total_fit: LinearFit | None
    decode_source: str | None = None  # "server" (llama-server's decode timings), "client" (the stream clock), both


def summarize_output(rows: Sequence[RoundResult]) -> OutputSummary:
    ok = _ok(rows, OUTPUT)
    per_token = median(r.ms_per_output_token for r in ok)
    return OutputSummary(
        per_token,
        1000 / per_token if per_token else None,
        linear_fit([r.output_tokens for r in ok], [r.total_ms for r in ok]),
        _sources([r for r in ok if r.ms_per_output_token is not None], "decode_source"),
    )


@dataclass
class StrategySummary:
    strategy: str
    rounds: int
    recomputed_total: int | None
    reused_total: int | None
    recomputed_after_first: float | None
    ttft_median_after_first_ms: float | None
    recomputed_by_round: dict[int, int] = field(default_factory=dict)
    cache_write_total: int | None = None  # Anthropic: tokens written to the cache (None: not reported)


def _total(values: list[int | None]) -> int | None:
    return None if not values or None in values else sum(v for v in values if v is not None)


def summarize_cache(rows: Sequence[RoundResult]) -> dict[str, StrategySummary]:
    out: dict[str, StrategySummary] = {}
    ok = _ok(rows, CACHE)
    for strategy in dict.fromkeys(r.strategy for r in ok):
        mine = [r for r in ok if r.strategy == strategy]
        later = [r for r in mine if r.round > 1]
        writes = [r.cache_write_tokens for r in mine]
        out[str(strategy)] = StrategySummary(
            str(strategy),
            len(mine),
            _total([r.recomputed_tokens for r in mine]),
            _total([r.reused_tokens for r in mine]),
            median(r.recomputed_tokens for r in later),
            median(r.ttft_ms for r in later),
            {r.round: r.recomputed_tokens for r in mine if r.recomputed_tokens is not None},
            None if all(w is None for w in writes) else sum(w or 0 for w in writes),
        )
    return out


def prefill_decode_ratio(input_summary: InputSummary, output_summary: OutputSummary) -> float | None:
    """How many times faster prefill processes a token than decode produces one."""
    if input_summary.prefill_tokens_per_s and output_summary.decode_tokens_per_s:
        return input_summary.prefill_tokens_per_s / output_summary.decode_tokens_per_s
    return None


def common_rounds(summaries: dict[str, StrategySummary], name: str, base: str = "append_only") -> list[int]:
    """The rounds both strategies measured a recomputed count for: the only rounds a ratio may compare."""
    if name not in summaries or base not in summaries:
        return []
    return sorted(set(summaries[name].recomputed_by_round) & set(summaries[base].recomputed_by_round))


def recomputed_ratio(summaries: dict[str, StrategySummary], base: str = "append_only") -> dict[str, float]:
    """Each strategy's recomputed tokens over the append-only ones, on the same rounds only.

    A strategy that shares no measured round with ``base`` (or a base that recomputed nothing on
    them) gets no ratio: 1 round against 4 is not a comparison.
    """
    out: dict[str, float] = {}
    for name, summary in summaries.items():
        common = common_rounds(summaries, name, base)
        anchor_total = sum(summaries[base].recomputed_by_round[r] for r in common)
        if name != base and anchor_total:
            out[name] = sum(summary.recomputed_by_round[r] for r in common) / anchor_total
    return out
