"""Experiment 3 (``cache``): the same long context for several rounds under each strategy.

Each round adds the previous answer and a new question at the end. The strategy decides what the
system prompt starts with: unchanged (``append_only``) or something new every round. The document
is fitted to the backend's context once (`prepare`, `cache_doc_budget`) and sent as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.documents import DocumentError, FittedDocument, default_document, fit_document, read_document
from core.experiments.base import INTERNAL, NO_WIDGET, RESERVED_TOKENS, Option, Plan, RunContext, names
from core.experiments.prompts import STRATEGIES, Conversation
from core.records import RoundResult

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
    return Plan(settings.rounds * len(settings.strategies), per_strategy * len(settings.strategies))


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
        raise ValueError(f"Unknown strategies: {', '.join(unknown)}; choose from {', '.join(STRATEGIES)}.")
    if settings.fitted is not None:
        return settings
    text = settings.document if settings.document is not None else read_doc(settings.doc)
    return replace(settings, doc=Path(settings.doc).name, document=text, fitted=_fit(settings, text, conn))


def _fit(settings: Settings, text: str, conn: Connection) -> FittedDocument:
    budget = cache_doc_budget(settings.doc_tokens, conn.context, settings.rounds, settings.answer_tokens)
    return fit_document(text, budget, conn.counter)


def rounds(run: RunContext, settings: Settings) -> Iterator[RoundResult]:
    """The document fitted by `prepare` (here if the caller did not) goes out as it is."""
    settings = prepare(settings, run.connection)
    document = settings.fitted or _fit(settings, settings.document or "", run.connection)
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
