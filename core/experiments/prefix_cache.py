"""Experiment 3 (``cache``): the same long context for several rounds under each strategy.

Each round adds the previous answer and a new question at the end. The strategy decides what the
system prompt starts with: unchanged (``append_only``) or something new every round. The document
is fitted to the backend's context once (`prepare`, `cache_doc_budget`) and sent as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.conclusions import (
    DISTURBED,
    NO_DATA,
    NOT_SHOWN,
    SHOWN,
    Conclusion,
    Finding,
    MachineState,
    Value,
    disturbed,
)
from core.documents import DocumentError, FittedDocument, default_document, fit_document, read_document
from core.experiments.base import (
    INTERNAL,
    NO_WIDGET,
    RESERVED_TOKENS,
    Experiment,
    Option,
    Plan,
    RunContext,
    measured_rows,
    names,
)
from core.experiments.prompts import STRATEGIES, Conversation
from core.experiments.samples import EMBEDDED_DEFAULT
from core.records import RoundResult
from core.stats import median, spike
from core.words import Sentence

ID = "cache"
ANSWER_TOKENS = 24  # experiment 3's answers
QUESTION_TOKENS = 40  # a question and its chat-template framing, rounded up
DEFAULT_DOC = "default"  # the `doc` of the built-in document
OPTIONS = (Option("--doc", "experiment 3: a UTF-8 text file replacing the built-in document",
                  default_text="the built-in document"),
           Option("--rounds", "experiment 3 rounds per strategy", int),
           Option("--strategies", f"experiment 3 strategies, comma separated: {', '.join(STRATEGIES)}", names),
           Option("--doc-tokens", "experiment 3 document budget", int))


@dataclass(frozen=True)
class Settings:
    rounds: int = 6
    strategies: tuple[str, ...] = ("append_only", "timestamp_first")
    doc: str = field(default=DEFAULT_DOC, metadata=NO_WIDGET)  # the document's name (a path on the command line)
    doc_tokens: int = 2000
    document: str | None = field(default=None, metadata=INTERNAL)  # its text; None: read `doc`
    fitted: FittedDocument | None = field(default=None, metadata=INTERNAL)  # fitted to the backend
    answer_tokens: int = field(default=ANSWER_TOKENS, metadata=INTERNAL)
    seed: int = field(default=0, metadata=INTERNAL)


def plan(settings: Settings) -> Plan:
    """Round ``i`` sends the document and ``i`` questions and answers."""
    doc_tokens = settings.fitted.tokens if settings.fitted else settings.doc_tokens
    per_strategy = sum(doc_tokens + i * (QUESTION_TOKENS + ANSWER_TOKENS) for i in range(1, settings.rounds + 1))
    return Plan(settings.rounds * len(settings.strategies), per_strategy * len(settings.strategies)).warmed()


def cache_doc_budget(doc_tokens: int, context: int | None, rounds: int, answer_tokens: int = ANSWER_TOKENS) -> int:
    """The document budget that leaves room in ``context`` for every round's question and answer.

    Raises `DocumentError` when not even a short document fits.
    """
    if not context:
        return doc_tokens
    room = context - RESERVED_TOKENS - rounds * (answer_tokens + QUESTION_TOKENS)
    if room < 100:
        raise DocumentError(f"{rounds} rounds do not fit in a {context:,}-token context; choose fewer rounds.")
    return min(doc_tokens, room)


def read_doc(doc: str) -> str:
    """The text of ``doc``: the built-in document, or a UTF-8 file. Raises `DocumentError` saying why not."""
    if doc == DEFAULT_DOC:
        return default_document()
    path = Path(doc)
    try:
        return read_document(path.read_bytes(), path.name)
    except OSError as exc:
        raise DocumentError(f"Cannot read {doc}: {exc.strerror or exc}.") from None


def prepare(settings: Settings, conn: Connection) -> Settings:
    """The strategies checked and the document read and fitted to ``conn`` (unless the caller fitted it).

    Raises `DocumentError` (a `ValueError`) with a sentence saying what to change.
    """
    unknown = [s for s in settings.strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(Sentence("settings_refused.unknown_strategies", unknown=", ".join(unknown),
                                  known=", ".join(STRATEGIES)))
    if settings.fitted is not None:
        return settings
    text = settings.document if settings.document is not None else read_doc(settings.doc)
    return replace(settings, doc=Path(settings.doc).name, document=text, fitted=_fit(settings, text, conn))


def _fit(settings: Settings, text: str, conn: Connection) -> FittedDocument:
    budget = cache_doc_budget(settings.doc_tokens, conn.context, settings.rounds, settings.answer_tokens)
    return fit_document(text, budget, conn.counter)


def rounds(run: RunContext, settings: Settings) -> Iterator[RoundResult]:
    """The document fitted by `prepare` (here if the caller did not) goes out as it is."""
    settings = prepare(settings, run.conn)
    document = settings.fitted or _fit(settings, settings.document or "", run.conn)
    run.warm_up()
    for strategy in settings.strategies:
        conversation = Conversation(document.text, strategy, settings.seed)
        for round_no in range(1, settings.rounds + 1):
            if run.stopped():
                return
            result = run.send(ChatRequest(conversation.next_messages(), max_tokens=settings.answer_tokens))
            if run.stopped():
                return
            yield RoundResult.from_request(ID, round_no, result, strategy=strategy)
            if result.error:
                return
            conversation.answered(result.text)


@dataclass
class StrategySummary:
    strategy: str
    rounds: int
    recomputed_total: int | None
    cached_total: int | None
    recomputed_after_first: float | None
    ttft_median_after_first_ms: float | None
    recomputed_by_round: dict[int, int] = field(default_factory=dict)
    cache_write_total: int | None = None  # Anthropic: tokens written to the cache (None: not reported)


def _total(values: list[int | None]) -> int | None:
    return None if not values or None in values else sum(v for v in values if v is not None)


def summarize_cache(rows: Sequence[RoundResult]) -> dict[str, StrategySummary]:
    out: dict[str, StrategySummary] = {}
    ok = measured_rows(rows, ID)
    for strategy in dict.fromkeys(r.strategy for r in ok):
        mine = [r for r in ok if r.strategy == strategy]
        later = [r for r in mine if r.round > 1]
        writes = [r.cache_write_tokens for r in mine]
        out[str(strategy)] = StrategySummary(
            str(strategy),
            len(mine),
            _total([r.recomputed_tokens for r in mine]),
            _total([r.cached_tokens for r in mine]),
            median(r.recomputed_tokens for r in later),
            median(r.ttft_ms for r in later),
            {r.round: r.recomputed_tokens for r in mine if r.recomputed_tokens is not None},
            None if all(w is None for w in writes) else sum(w or 0 for w in writes),
        )
    return out


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


APPEND_LIMIT = 64  # tokens: appending only recomputes about one question and answer from round 2
BREAKER_SHARE = 0.9  # a strategy that breaks the prefix recomputes at least this share of its prompt
SPIKE = 3.0  # a later round's TTFT this many times its strategy's median waited on something else


def _claims(rows: Sequence[RoundResult]) -> tuple[Finding, ...]:
    """Each strategy's totals from its rounds, and how many times the append-only tokens each other recomputed."""
    summaries = summarize_cache(rows)
    claims: list[Finding] = []
    for s in summaries.values():
        name = f"strategy.{s.strategy}"
        if s.recomputed_total is not None and s.cached_total is not None:
            claims.append(Finding("strategy_tokens", {"strategy_word": name, "rounds": s.rounds,
                                                      "recomputed": s.recomputed_total, "cached": s.cached_total}))
        if s.ttft_median_after_first_ms is not None:
            claims.append(Finding("strategy_ttft", {"strategy_word": name, "ttft": s.ttft_median_after_first_ms}))
    for other, ratio in recomputed_ratio(summaries).items():
        claims.append(Finding("ratio", {"strategy_word": f"strategy.{other}", "ratio": ratio,
                                        "rounds": len(common_rounds(summaries, other))}))
    return tuple(claims)


def _compared(rows: Sequence[RoundResult]) -> tuple[str, list[RoundResult], list[RoundResult]] | None:
    """Append-only's and the first other strategy's rounds after the first, on the rounds both measured."""
    ok = [r for r in measured_rows(rows, ID) if r.round > 1]
    strategies = list(dict.fromkeys(r.strategy for r in ok))
    if "append_only" not in strategies or len(strategies) < 2:
        return None
    other = str(next(n for n in strategies if n != "append_only"))
    common = {r.round for r in ok if r.strategy == "append_only"} & {r.round for r in ok if r.strategy == other}
    append = [r for r in ok if r.strategy == "append_only" and r.round in common]
    breaker = [r for r in ok if r.strategy == other and r.round in common]
    return (other, append, breaker) if common else None


def _by_tokens(other: str, append: list[RoundResult], breaker: list[RoundResult]) -> tuple[str, Finding] | None:
    """Decided by token counts (contention cannot change them); None where the backend reports none."""
    append_tokens = median(r.recomputed_tokens for r in append)
    breaker_tokens = median(r.recomputed_tokens for r in breaker)
    share = median(r.recomputed_tokens / r.prompt_tokens for r in breaker
                   if r.recomputed_tokens is not None and r.prompt_tokens)
    if append_tokens is None or breaker_tokens is None or share is None:
        return None
    values: dict[str, Value] = {"append": append_tokens, "breaker": breaker_tokens, "share": share,
                                "other_word": f"strategy.{other}", "rounds": len(append)}
    if append_tokens > APPEND_LIMIT:
        return NOT_SHOWN, Finding("append_recomputed", {**values, "limit": APPEND_LIMIT})
    if share < BREAKER_SHARE:
        return NOT_SHOWN, Finding("breaker_reused", {**values, "limit": BREAKER_SHARE})
    return SHOWN, Finding("tokens", values)


def _by_time(other: str, append: list[RoundResult], breaker: list[RoundResult],
             state: MachineState | None) -> tuple[str, Finding] | None:
    """Decided by TTFT where there are no counts: a busy machine or a round far above its strategy's median spoils
    that."""
    append_ttft, breaker_ttft = median(r.ttft_ms for r in append), median(r.ttft_ms for r in breaker)
    if append_ttft is None or breaker_ttft is None:
        return None
    if (trouble := disturbed(state)) is not None:
        return DISTURBED, trouble
    for rounds in (append, breaker):
        found = spike([r.ttft_ms for r in rounds if r.ttft_ms is not None], SPIKE)
        if found is not None:
            return DISTURBED, Finding("slow_round", {"strategy_word": f"strategy.{rounds[0].strategy}",
                                                    "times": found[1]})
    values: dict[str, Value] = {"append": append_ttft, "breaker": breaker_ttft, "other_word": f"strategy.{other}",
                                "rounds": len(append)}
    return (SHOWN, Finding("time", values)) if append_ttft < breaker_ttft else (NOT_SHOWN, Finding("ttft_not_lower",
                                                                                                    values))


def conclude(rows: Sequence[RoundResult], state: MachineState | None) -> Conclusion:
    """Append only against the first other strategy, on the rounds after the first both measured: by token counts
    (which a busy machine cannot change: it is said beside them), else by TTFT."""
    compared = _compared(rows)
    decided = None if compared is None else _by_tokens(*compared) or _by_time(*compared, state)
    if decided is None:
        return Conclusion(ID, NO_DATA, Finding("too_few"))
    claims = _claims(rows)
    busy = disturbed(state)
    if busy is not None and decided[0] != DISTURBED:  # counted, not timed: the machine's state is said, not decisive
        claims = (*claims, Finding(f"{busy.key}_counts", dict(busy.values)))
    return Conclusion(ID, decided[0], decided[1], claims)


EXPERIMENT = Experiment(
    id=ID, title="the same long context for several rounds: append only vs broken prefix", icon=":material/cached:",
    settings=Settings, rounds=rounds, plan=plan, prepare=prepare, summary=summarize_cache, conclude=conclude,
    options=OPTIONS, sample=EMBEDDED_DEFAULT)
