"""Experiment 1 (``input``): prompts of growing length; TTFT and server prefill ms against prompt tokens."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.backends.tokens import EstimatingTokenCounter
from core.documents import default_document
from core.experiments.base import INTERNAL, RESERVED_TOKENS, Option, Plan, RunContext, ints
from core.experiments.prompts import input_length_messages, nonce
from core.records import RoundResult

ID = "input"
ANSWER_TOKENS = 4  # experiment 1 asks for this many output tokens
OPTIONS = (Option("--sizes", "experiment 1 input tokens, comma separated", ints),
           Option("--repeats", "repeats per size/length (medians are reported)", int))


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    repeats: int = 1
    max_tokens: int = field(default=ANSWER_TOKENS, metadata=INTERNAL)


def plan(settings: Settings) -> Plan:
    sizes = settings.sizes
    return Plan(len(sizes) * settings.repeats, (sum(sizes) + ANSWER_TOKENS * len(sizes)) * settings.repeats)


def sizes_that_fit(sizes: Sequence[int], context: int | None) -> list[int]:
    """The requested input sizes that leave room for the answer in ``context`` tokens."""
    if not context:
        return list(sizes)
    return [s for s in sizes if s + RESERVED_TOKENS <= context]


def prepare(settings: Settings, conn: Connection) -> Settings:
    """The sizes in order, without those that do not fit the server's context."""
    return replace(settings, sizes=tuple(sizes_that_fit(sorted(settings.sizes), conn.context)))


def rounds(run: RunContext, settings: Settings) -> Iterator[RoundResult]:
    run.warm_up()
    counter = run.counter
    overhead = counter.count(input_length_messages("", nonce())[0]["content"]) + 24
    document = default_document()[: max(settings.sizes, default=0) * 8]  # plenty for any tokenizer; cheap to cut
    round_no = 0
    for size in settings.sizes:
        body = counter.truncate(document, max(size - overhead, 1))
        for repeat in range(1, settings.repeats + 1):
            if run.stopped():
                return
            round_no += 1
            messages = input_length_messages(body, nonce())
            result = run.send(ChatRequest(messages, max_tokens=settings.max_tokens, ignore_eos=True))
            if run.stopped():
                return
            if isinstance(counter, EstimatingTokenCounter):
                counter.observe(sum(len(m["content"]) for m in messages), result.prompt_tokens)
            yield RoundResult.from_request(ID, round_no, result, repeat=repeat, target_tokens=size)
            if result.error:
                return
