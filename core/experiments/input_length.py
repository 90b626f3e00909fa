"""Experiment 1 (``input``): prompts of growing length; TTFT and server prefill ms against prompt tokens."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.backends.tokens import EstimatingTokenCounter
from core.documents import default_document
from core.experiments.base import (
    INTERNAL,
    RESERVED_TOKENS,
    Experiment,
    Option,
    Plan,
    RunContext,
    ints,
    measured_rows,
    timed_by,
)
from core.experiments.prompts import input_length_messages, nonce, prompt_overhead
from core.experiments.samples import EMBEDDED_DEFAULT
from core.records import RoundResult
from core.stats import LinearFit, linear_fit, median
from core.words import Words

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
    overhead = prompt_overhead(counter)
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


@dataclass
class InputSummary:
    prefill_tps: float | None
    ttft_fit: LinearFit | None
    prefill_fit: LinearFit | None
    prefill_source: str | None = None  # "server" (prefill_ms), "client" (TTFT where the server reports none), both

    def ms_per_1k(self) -> float | None:
        fit = self.prefill_fit or self.ttft_fit
        return None if fit is None else fit.slope * 1000


def summarize_input(rows: Sequence[RoundResult]) -> InputSummary:
    """Prefill speed: tokens computed over the server's prefill time, or over TTFT where it reports none."""
    ok = measured_rows(rows, ID)
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
        timed_by(used, "prefill_source"),
    )


def input_verdict(rows: Sequence[RoundResult]) -> tuple[bool, dict[str, Any]]:
    """Shown: TTFT rose from the smallest prompt to the largest, along a rising line."""
    ok = sorted((r for r in measured_rows(rows, ID) if r.ttft_ms is not None), key=lambda r: r.prompt_tokens or 0)
    summary = summarize_input(rows)
    if len({r.prompt_tokens for r in ok}) < 2 or not summary.prefill_tps:
        return False, {}
    first, last = ok[0], ok[-1]
    fit = summary.ttft_fit
    shown = last.ttft_ms > first.ttft_ms and fit is not None and fit.slope > 0  # type: ignore[operator]
    return shown, {"first": first.ttft_ms, "first_tokens": first.prompt_tokens, "last": last.ttft_ms,
                   "last_tokens": last.prompt_tokens, "speed": summary.prefill_tps}


def verdict_text(rows: Sequence[RoundResult], t: Words) -> tuple[bool, str]:
    shown, values = input_verdict(rows)
    return shown, t("input.shown", **values) if shown else t("input.not_shown")


def cli_lines(rows: Sequence[RoundResult]) -> Iterator[str]:
    summary = summarize_input(rows)
    if summary.prefill_tps:
        per_1k = summary.ms_per_1k()
        yield (f"Experiment 1: prefill {summary.prefill_tps:,.0f} tokens/s"
               + (f", {per_1k:.0f} ms per 1k input tokens" if per_1k else "")
               + f" (timed by the {summary.prefill_source})")


EXPERIMENT = Experiment(
    id=ID, title="TTFT and prefill time against prompt length", icon=":material/input:", settings=Settings,
    rounds=rounds, plan=plan, prepare=prepare, summary=summarize_input, verdict=input_verdict,
    verdict_text=verdict_text, cli_lines=cli_lines, options=OPTIONS, sample=EMBEDDED_DEFAULT)
