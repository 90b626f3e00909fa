"""Experiments 1-3, each a generator that yields one `RoundResult` per request (summaries: `.summaries`).

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
from dataclasses import dataclass

from core.backends.base import ChatRequest, ProgressCallback, StreamingBackend
from core.experiments.prompts import (
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
from core.records import RequestResult, RoundResult

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
    ``document`` was fitted to the backend's context once (`core.experiments.prompts.fit_document`, see
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
