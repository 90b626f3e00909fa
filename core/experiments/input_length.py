"""Experiment 1 (``input``): prompts of growing length; TTFT and server prefill ms against prompt tokens."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.backends.tokens import EstimatingTokenCounter
from core.conclusions import DISTURBED, NO_DATA, NOT_SHOWN, SHOWN, Conclusion, Finding, MachineState, disturbed
from core.documents import default_document
from core.experiments.base import (
    INTERNAL,
    REPEATS,
    RESERVED_TOKENS,
    Experiment,
    Option,
    Plan,
    RunContext,
    ints,
    measured_rows,
    timed_by,
    timed_word,
)
from core.experiments.prompts import input_length_messages, nonce, prompt_overhead
from core.experiments.samples import EMBEDDED_DEFAULT
from core.records import RoundResult
from core.stats import LinearFit, QuadraticFit, linear_fit, median, quadratic_fit, spike

ID = "input"
ANSWER_TOKENS = 4  # experiment 1 asks for this many output tokens
OPTIONS = (Option("--sizes", "experiment 1 input tokens, comma separated", ints),
           REPEATS)


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    repeats: int = 1
    max_tokens: int = field(default=ANSWER_TOKENS, metadata=INTERNAL)


def plan(settings: Settings) -> Plan:
    sizes = settings.sizes
    return Plan(len(sizes) * settings.repeats, (sum(sizes) + ANSWER_TOKENS * len(sizes)) * settings.repeats).warmed()


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
    prefill_curve: QuadraticFit | None = None  # ms = a + b n + c n² over prompt tokens n (c: attention's share)

    def ms_per_1k(self) -> float | None:
        fit = self.prefill_fit or self.ttft_fit
        return None if fit is None else fit.slope * 1000


def summarize_input(rows: Sequence[RoundResult]) -> InputSummary:
    """Prefill speed: tokens computed over the server's prefill time, or over TTFT where it reports none."""
    ok = measured_rows(rows, ID)
    speeds, used, points = [], [], []
    for r in ok:
        tokens = r.recomputed_tokens if r.recomputed_tokens is not None else r.prompt_tokens
        ms = r.prefill_ms if r.prefill_ms is not None else r.ttft_ms
        if tokens and ms:
            speeds.append(tokens / ms * 1000)
            used.append(r)
            points.append((float(tokens), float(ms)))
    prompt_tokens = [r.prompt_tokens for r in ok]
    return InputSummary(
        median(speeds),
        linear_fit(prompt_tokens, [r.ttft_ms for r in ok]),
        linear_fit(prompt_tokens, [r.prefill_ms for r in ok]),
        timed_by(used, "prefill_source"),
        quadratic_fit([n for n, _ in points], [ms for _, ms in points]),
    )


SLOWER_THAN_LONGER = 2.0  # a round that took this many times the time per token of a longer prompt waited on something


def _per_token(r: RoundResult) -> float | None:
    """A round's prefill (or TTFT) milliseconds per prompt token."""
    ms = r.prefill_ms if r.prefill_ms is not None else r.ttft_ms
    return ms / r.prompt_tokens if ms and r.prompt_tokens else None


def _contention(ok: Sequence[RoundResult]) -> Finding | None:
    """A round that spent more per prompt token than a longer prompt did (a longer prompt costs at least as much per
    token, attention only adds to it), or far more than its own size's other repeats: another program took the CPU."""
    by_size: dict[int, list[float]] = {}
    for r in ok:
        if (cost := _per_token(r)) is not None and r.prompt_tokens:
            by_size.setdefault(r.prompt_tokens, []).append(cost)
    sizes = sorted(by_size)
    for size, longer in zip(sizes, sizes[1:], strict=False):
        reference = median(by_size[longer]) or 0
        worst = max(by_size[size])
        if reference and worst >= SLOWER_THAN_LONGER * reference:
            return Finding("slow_round", {"tokens": size, "ms_per_1k": worst * 1000, "longer": longer,
                                          "longer_ms_per_1k": reference * 1000, "times": worst / reference})
    for size in sizes:
        found = spike(by_size[size], SLOWER_THAN_LONGER)
        if found is not None:
            return Finding("slow_repeat", {"tokens": size, "times": found[1]})
    return None


def _claims(summary: InputSummary) -> tuple[Finding, ...]:
    """The two prefill rates, each named for what it is, and the fitted line's intercept as what it is."""
    claims = [Finding("rate_median", {"speed": summary.prefill_tps, "source_word": timed_word(summary.prefill_source)})]
    per_1k, fit = summary.ms_per_1k(), summary.ttft_fit
    if per_1k and per_1k > 0:
        r2 = (summary.prefill_fit or summary.ttft_fit).r2  # type: ignore[union-attr]
        claims.append(Finding("rate_fit", {"per_1k": per_1k, "speed": 1e6 / per_1k, "r2": r2}))
    if fit is not None:
        key = "intercept" if fit.intercept >= 0 else "intercept_negative"
        claims.append(Finding(key, {"intercept": fit.intercept, "r2": fit.r2}))
    return tuple(claims)


def conclude(rows: Sequence[RoundResult], state: MachineState | None) -> Conclusion:
    """Shown: TTFT rose from the smallest prompt to the largest along a rising line; disturbed where a round
    waited on something else (`_contention`) or the meter called the machine busy."""
    ok = sorted((r for r in measured_rows(rows, ID) if r.ttft_ms is not None), key=lambda r: r.prompt_tokens or 0)
    summary = summarize_input(rows)
    sizes = len({r.prompt_tokens for r in ok})
    claims = _claims(summary) if summary.prefill_tps else ()
    if sizes < 2 or not summary.prefill_tps:
        return Conclusion(ID, NO_DATA, Finding("too_few", {"sizes": sizes}), claims)
    first, last = ok[0], ok[-1]
    ends = {"first": first.ttft_ms, "first_tokens": first.prompt_tokens, "last": last.ttft_ms,
            "last_tokens": last.prompt_tokens}
    if (trouble := disturbed(state) or _contention(ok)) is not None:
        return Conclusion(ID, DISTURBED, trouble, claims)
    if last.ttft_ms <= first.ttft_ms:  # type: ignore[operator]
        return Conclusion(ID, NOT_SHOWN, Finding("ttft_fell", ends), claims)
    fit = summary.ttft_fit
    if fit is not None and fit.slope <= 0:
        return Conclusion(ID, NOT_SHOWN, Finding("line_fell", {"per_1k": fit.slope * 1000}), claims)
    return Conclusion(ID, SHOWN, Finding("ttft_rose", ends), claims)


EXPERIMENT = Experiment(
    id=ID, title="TTFT and prefill time against prompt length", icon=":material/input:", settings=Settings,
    rounds=rounds, plan=plan, prepare=prepare, summary=summarize_input, conclude=conclude, options=OPTIONS,
    sample=EMBEDDED_DEFAULT)
