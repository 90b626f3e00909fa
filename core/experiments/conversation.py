"""Experiment 7 (``conversation``): one long agent conversation, its history shortened several ways, and what a
pause costs.

A scripted conversation with a travel agent (its system prompt, tools, a dynamic date and the reference text at the
top; user turns and answers of realistic length) is played once per strategy, with the same turns:

- ``keep``: append only;
- ``window``: the last ``window`` messages after the system prompt;
- ``window_dynamic``: the same window, and the system prompt's date rewritten every round (the trap);
- ``summary``: at ``threshold`` prompt tokens the older messages are replaced by one summary message, rewritten
  at every summary (its heading names the rounds it covers). The summary is extractive by a fixed rule (the first
  sentence of each message), not written by the model: the run stays deterministic and predictable;
- ``stable_summary``: the same threshold, but each summary is appended to the summary message as a new block and
  earlier blocks are never rewritten, so the prompt before the new block stays cached;
- ``window_reuse`` (llama-server only): the window, with llama-server's chunk reuse (``n_cache_reuse``, KV
  shifting) asked for per request. OpenAI, Anthropic, DeepSeek and Gemini cache exact prefixes only.

The history carries the script's answers, not the model's: each round the model writes ``answer_tokens`` tokens
(``ignore_eos``) that are thrown away, so the strategies differ only in what they send. That makes every request
known before the run: the recomputed tokens of each round follow from the script (`predict`: the longest common
prefix of the prompt's tokens with the previous request's, as the server's cache matches it; chunk reuse
simulated as llama-server does it), and the time from this machine's prefill rate within `PREDICTION_SPREAD`.

Then a pause (llama-server only): the ``keep`` conversation resumed three ways, its TTFTs side by side: with its
cache still in the slot, restored from the server's RAM prompt cache after other conversations took every slot
(LRU), and with no cache at all (the same prompt under a new session tag: the embedded server cannot drop its RAM
cache on request, and slot actions need ``--slot-save-path``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.backends.llama_server import LlamaServerBackend
from core.conclusions import NO_DATA, NOT_SHOWN, SHOWN, Conclusion, Finding, MachineState, disturbed
from core.documents import DocumentError, FittedDocument, fit_document, read_document
from core.experiments.base import (
    INTERNAL,
    NO_WIDGET,
    PREFILL_TPS,
    RESERVED_TOKENS,
    ROUNDS_TABLE,
    Experiment,
    Option,
    Plan,
    RunContext,
    Table,
    names,
)
from core.experiments.prices import PRICE_LISTS, PriceList, input_cost
from core.experiments.prompts import nonce
from core.experiments.samples import SAMPLES_DIR
from core.records import RoundResult, renamed
from core.stats import QuadraticFit, median
from core.words import Sentence

ID = "conversation"
STRATEGIES = ("keep", "window", "window_dynamic", "summary", "stable_summary", "window_reuse")
REUSE = "window_reuse"  # needs llama-server's chunk reuse
EXACT_PREFIX = tuple(s for s in STRATEGIES if s != REUSE)  # what a provider's cache can do: what money is shown for
RESUME = ("resume_in_slot", "resume_restored", "resume_gone")  # the pause's three requests
REUSE_CHUNK = 32  # n_cache_reuse: the shortest shifted chunk llama-server reuses
RECENT = 4  # messages a summary leaves as they are (the last two rounds)
FOLD = 3  # the fewest rounds a summary folds in: a summary above the threshold does not fold every round
PREDICTION_SPREAD = 2.0  # a measured prefill time within [P / 2, 2 P] agrees with the prediction P
CURVE_R2 = 0.9  # experiment 1's curve predicts only where it fits its own points this well
CHEAPEST_AT = (10, 20, 40)
MAX_ROUNDS = 40
START = datetime(2026, 3, 2, 9, 0)  # the script's clock: round r is asked 3 minutes after round r - 1
SAMPLE = SAMPLES_DIR / "embedded_conversation.json"

OPTIONS = (Option("--conversation-rounds", "experiment 7 rounds per strategy (2-40)", int),
           Option("--conversation-strategies", f"experiment 7 strategies, comma separated: {', '.join(STRATEGIES)}",
                  names),
           Option("--window", "experiment 7: messages a window keeps after the system prompt", int),
           Option("--threshold", "experiment 7: prompt tokens at which a summary replaces older messages", int),
           Option("--conversation-doc", "experiment 7: a UTF-8 file as the agent's reference text",
                  default_text="the built-in travel policy"),
           PREFILL_TPS,
           Option("--attention-ns", "experiment 7: how the prefill slows as the context grows, ns per token per "
                  "token of context / 2 (the n² term of experiment 1's curve)", float, default_text="0"))


@dataclass(frozen=True)
class Settings:
    """The defaults are the run that fits the 3-minute goal on 2 idle cores (BENCHMARKS 23) and still shows the
    lesson. Chosen from `prepare`'s exact counts and the curve's prediction, not by trial: 24 rounds of 4-sentence
    answers and a 250-token reference predicted 51,504 recomputed tokens, about 277 s with the pause (243 s
    measured). Twenty rounds (the fewest that reach the round-20 comparison), 2-sentence answers (each turn still
    a question and an answer with figures) and a 120-token reference predict 29,025 tokens, about 146 s with the
    pause and the warm-up: the window (6 messages) slides from round 5 for 16 rounds and recomputes about 3x what
    ``keep`` does; at threshold 1,500 the summaries fold twice (rounds 13 and 18; at 2,000 only once); ``keep`` is
    cheapest at round 10 and ``stable_summary`` at round 20. The trap, ``window_dynamic``, is still 40 % of it."""

    conversation_rounds: int = 20
    conversation_strategies: tuple[str, ...] = STRATEGIES
    window: int = 6
    threshold: int = 1500
    conversation_doc: str = field(default="default", metadata=NO_WIDGET)  # the reference text's name
    reference_tokens: int = field(default=120, metadata=NO_WIDGET)
    answer_sentences: int = field(default=2, metadata=NO_WIDGET)  # of each scripted answer (1-4)
    pause: bool = True
    answer_tokens: int = field(default=1, metadata=NO_WIDGET)  # what the model writes each round (thrown away)
    prefill_tps: float | None = field(default=None, metadata=NO_WIDGET)  # the rate the time prediction is from
    attention_ns: float | None = field(default=None, metadata=NO_WIDGET)  # c of experiment 1's curve (`predict_ms`)
    predicted_from: str = field(default="", metadata=NO_WIDGET)  # "measured" (experiment 1) or "roofline"
    predicted_tokens: int | None = field(default=None, metadata=NO_WIDGET)  # all requests' recomputed (`prepare`)
    predicted_seconds: float | None = field(default=None, metadata=NO_WIDGET)  # their prefill (`prepare`)
    document: str | None = field(default=None, metadata=INTERNAL)  # the reference text; None: the built-in one
    fitted: FittedDocument | None = field(default=None, metadata=INTERNAL)


@dataclass
class ConversationRound(RoundResult):
    """One request: experiment 3's round record with what the script predicted for it before the run."""

    predicted_recomputed: int | None = None
    predicted_ms: float | None = None
    summarized: bool = False  # a summary was written for this round

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "predicted_recomputed": self.predicted_recomputed,
                "predicted_ms": self.predicted_ms, "summarized": self.summarized}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConversationRound:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in renamed(data).items() if k in names})


# -- the script -----------------------------------------------------------------------------------------------
REFERENCE = """Northwind Travel policy for business trips.
1. Book economy class for flights under six hours; premium economy is allowed above six hours with a manager's approval.
2. Prefer trains to flights when the train takes under four hours door to door; trains are cheaper and count less CO2.
3. Hotels: at most 160 euros a night in capital cities and 120 euros elsewhere, breakfast included where possible.
4. Refundable fares are preferred. A non-refundable fare needs a reason in the booking note.
5. Book at least 14 days ahead when the trip is planned; late bookings above 500 euros need approval.
6. Travellers choose their seats; extra legroom seats are paid privately unless the flight is over six hours.
7. Visas and travel insurance are paid by the company. Ask for the passport nationality before checking visa rules.
8. Every trip has a budget set by the manager; report the total of flights, trains and hotels against it.
9. Meals are reimbursed up to 45 euros a day against receipts; alcohol is not reimbursed.
10. Cancel bookings that are no longer needed at once: a cancellation before the deadline is usually free."""

SYSTEM = """Session {tag}.
You are Wayfarer, the travel agent of Northwind Travel. Today is {clock}.
Plan trips for the traveller: flights, trains, hotels and visas. Quote prices in euros, say what is refundable, \
and ask before you book anything.

# Tools
- search_flights(origin, destination, date, cabin): flights with prices and seats left
- search_trains(origin, destination, date): trains and fares
- search_hotels(city, check_in, nights, max_price): hotels with prices and ratings
- book(offer_id, traveller): books an offer; needs the traveller's consent
- cancel(booking_id): cancels a booking and says what is refunded
- visa_rules(passport, country): the entry rules for a passport
- weather(city, date): the forecast
- convert(amount, from_currency, to_currency): today's exchange rate

# Reference
{reference}"""

TRIPS = (("Lisbon", "Porto", "Brazilian", "Portugal"), ("Berlin", "Vienna", "Indian", "Austria"),
         ("Madrid", "Seville", "Chinese", "Spain"), ("Paris", "Lyon", "Nigerian", "France"),
         ("Rome", "Florence", "Turkish", "Italy"))
AIRLINES = ("SkyBridge", "Aurora Air", "Meridian", "BlueLine", "Cobalt Wings")

USER = (
    "I need a flight from {a} to {b} on {day}, one adult, economy. What are the cheapest options before noon?",
    "Find me a hotel in {b} for {n} nights from {day}, under {price} euros a night, close to the old town.",
    "Is there a train from {b} back to {a} on {day2}? I prefer a direct one that arrives before dinner.",
    "My colleague travels on a {passport} passport. Does she need a visa for {country}, and how long does it take?",
    "What will the weather be like in {b} on {day}? Should we pack coats and umbrellas?",
    "Can I move the {a} flight to the next morning? What would the change cost, and is the fare still refundable?",
    "Add everything up for me: flights, trains and the hotel in {b}. Are we still under the {budget} euro budget?",
    "Please book the cheapest refundable options for the trip to {b} and send me the booking numbers.",
)

ANSWER = (
    ("[{r}] I found three morning flights from {a} to {b} on {day}.",
     "The cheapest is {air} at {p1} euros, leaving at 07:{mm} and landing at 09:{mm}, with a carry-on bag included.",
     "{air2} leaves at 10:15 for {p2} euros and allows one change for a 40 euro fee.",
     "Both are economy fares within the policy; tell me which one you prefer and I will hold it for 24 hours."),
    ("[{r}] There are four hotels in {b} under {price} euros a night for {n} nights from {day}.",
     "The Hotel Central is 600 metres from the old town at {p1} euros with breakfast, rated 8.7 by 2,300 guests.",
     "Casa Verde costs {p2} euros, is a little quieter and can be cancelled free of charge until two days before.",
     "Both are within the policy limit of 120 euros outside capitals; the Central has the better reviews."),
    ("[{r}] Yes: a direct train leaves {b} at 14:{mm} on {day2} and reaches {a} at 17:{mm}.",
     "The flexible fare is {p1} euros and can be changed until departure; the saver fare is {p2} euros and cannot.",
     "A later train at 16:05 needs one change and arrives at 20:40, which is after dinner.",
     "The policy prefers the train here, as it takes under four hours; shall I reserve two seats together?"),
    ("[{r}] A {passport} passport holder needs a visa for {country} for stays of any length.",
     "The application is made at the consulate with the invitation letter, a hotel booking and travel insurance.",
     "It usually takes 10 to 15 working days, so she should apply this week to be safe for the trip on {day}.",
     "The company pays the fee of 80 euros; I can prepare the invitation letter from the booking details."),
    ("[{r}] The forecast for {b} on {day} is 14 degrees in the afternoon and 6 degrees at night.",
     "Rain is likely in the morning, with a 60 percent chance of showers until about 11:00.",
     "The wind is light, so umbrellas will do; a warm coat is worth it for the evenings.",
     "I will check the forecast again two days before you leave and tell you if it changes."),
    ("[{r}] The {a} flight can move to the 07:{mm} departure on the next morning.",
     "The change costs {p1} euros on this fare, plus the difference in price of {p2} euros.",
     "The fare stays refundable after the change, minus a 30 euro service fee if you cancel later.",
     "The hotel in {b} would then need one more night; shall I ask whether the late check-in is free?"),
    ("[{r}] Here is the total so far for the trip to {b}: flights {p1} euros, trains {p2} euros, hotel 540 euros.",
     "Travel insurance adds 38 euros and the visa fee 80 euros, which the company pays as well.",
     "That makes 1,{mm}0 euros in all, which leaves about 300 euros under the {budget} euro budget.",
     "Meals are not included; at 45 euros a day they would use most of what is left."),
    ("[{r}] I booked the refundable options for {b} and sent the confirmations to your email.",
     "The flight booking is NW-{p1}-{mm} and the hotel booking is HC-{p2}-{r}; the train is booked as TR-{mm}{r}.",
     "Everything can be cancelled free of charge until 48 hours before departure.",
     "The total is within the budget, and the booking note says why the train was chosen."),
)


@dataclass(frozen=True)
class Turn:
    """One round of the script: the user's message and the answer the history carries."""

    round: int
    user: str
    answer: str


def script(rounds: int, sentences: int = 4) -> list[Turn]:
    """The scripted turns: eight kinds of request over five trips, the values varying with the round."""
    turns = []
    for r in range(1, rounds + 1):
        kind, trip = (r - 1) % len(USER), TRIPS[(r - 1) // len(USER) % len(TRIPS)]
        day = START + timedelta(days=14 + r)
        values = {"r": r, "a": trip[0], "b": trip[1], "passport": trip[2], "country": trip[3],
                  "day": day.strftime("%d %B"), "day2": (day + timedelta(days=3)).strftime("%d %B"), "n": 2 + r % 3,
                  "price": 100 + 10 * (r % 3), "budget": 2000 + 100 * (r % 5), "air": AIRLINES[r % len(AIRLINES)],
                  "air2": AIRLINES[(r + 2) % len(AIRLINES)], "p1": 80 + 7 * r, "p2": 60 + 5 * r, "mm": 10 + r}
        answer = " ".join(part.format(**values) for part in ANSWER[kind][: max(1, min(sentences, 4))])
        turns.append(Turn(r, USER[kind].format(**values), answer))
    return turns


def clock(round_no: int) -> str:
    return (START + timedelta(minutes=3 * (round_no - 1))).strftime("%A %d %B %Y, %H:%M")


def system_prompt(tag: str, reference: str, round_no: int = 1) -> str:
    return SYSTEM.format(tag=tag, clock=clock(round_no), reference=reference)


def first_sentence(text: str) -> str:
    """The summary's extractive rule: a message's first sentence, without the answer's round marker."""
    text = re.sub(r"^\[\d+\]\s*", "", text)
    found = re.match(r".+?[.?!](?=\s|$)", text)
    return found.group(0) if found else text


def summary_lines(turns: Sequence[Turn]) -> str:
    return "\n".join(f"- Round {t.round}: the traveller: {first_sentence(t.user)} The agent: "
                     f"{first_sentence(t.answer)}" for t in turns)


Messages = list[dict[str, str]]
Tokens = Callable[[Messages], list[Any]]  # a prompt's tokens (ids, or text pieces where counts are estimated)


@dataclass
class Conversation:
    """One strategy's conversation: the history it keeps and the summary it wrote, round by round."""

    strategy: str
    tag: str
    reference: str
    window: int
    threshold: int
    summary: str = ""  # the summary message's text ("" before the first summary)
    summarized: int = 0  # the rounds folded into the summary
    summaries: list[int] = field(default_factory=list)  # the rounds at which a summary was written

    def messages(self, turns: Sequence[Turn], round_no: int, tokens: Tokens) -> Messages:
        """What round ``round_no`` sends (``turns``: the whole script); a summary strategy may fold here."""
        if self.strategy in ("summary", "stable_summary"):
            built = self._build(turns, round_no)
            if round_no - 1 - self.summarized >= RECENT // 2 + FOLD and len(tokens(built)) > self.threshold:
                self._fold(turns, round_no)
                built = self._build(turns, round_no)
            return built
        system = system_prompt(self.tag, self.reference, round_no if self.strategy == "window_dynamic" else 1)
        history = _history(turns[: round_no - 1])
        if self.strategy != "keep":
            history = history[len(history) - min(len(history), self.window):]
        return [{"role": "system", "content": system}, *history, {"role": "user", "content": turns[round_no - 1].user}]

    def _build(self, turns: Sequence[Turn], round_no: int) -> Messages:
        head = [{"role": "system", "content": system_prompt(self.tag, self.reference)}]
        if self.summary:
            head.append({"role": "system", "content": self.summary})
        return [*head, *_history(turns[self.summarized: round_no - 1]),
                {"role": "user", "content": turns[round_no - 1].user}]

    def _fold(self, turns: Sequence[Turn], round_no: int) -> None:
        """Every round but the last ``RECENT // 2`` into the summary: rewritten whole, or appended to."""
        upto = round_no - 1 - RECENT // 2
        if self.strategy == "summary":
            self.summary = (f"Summary of rounds 1-{upto} (the first sentence of each message):\n"
                            f"{summary_lines(turns[:upto])}")
        else:
            block = f"Rounds {self.summarized + 1}-{upto}:\n{summary_lines(turns[self.summarized:upto])}"
            self.summary = f"{self.summary}\n{block}" if self.summary else f"Summary of the conversation.\n{block}"
        self.summarized = upto
        self.summaries.append(round_no)


def _history(turns: Sequence[Turn]) -> Messages:
    return [m for t in turns for m in ({"role": "user", "content": t.user}, {"role": "assistant", "content": t.answer})]


# -- the prediction -------------------------------------------------------------------------------------------
def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def reused(cache: Sequence[Any], prompt: Sequence[Any], chunk: int = 0) -> int:
    """The prompt tokens a llama-server slot holding ``cache`` reuses: the common prefix, and with ``chunk`` > 0
    every later run of at least ``chunk`` equal tokens found by shifting (its ``n_cache_reuse`` loop)."""
    n_past = common_prefix(cache, prompt)
    head_c = head_p = n_past
    while chunk > 0 and head_c < len(cache) and head_p < len(prompt):
        n = common_prefix(cache[head_c:], prompt[head_p:])
        if n >= chunk:
            head_c, head_p, n_past = head_c + n, head_p + n, n_past + n
        else:
            head_c += 1
    return n_past


def recomputed(cache: Sequence[Any], prompt: Sequence[Any], chunk: int = 0) -> int:
    """What the server computes: the prompt less what it reuses, and at least one token."""
    return max(len(prompt) - reused(cache, prompt, chunk), 1)


@dataclass(frozen=True)
class Request:
    """One request of the run, known before it: what it sends and what the script predicts it recomputes."""

    strategy: str
    round: int
    messages: Messages
    prompt_tokens: int
    predicted_recomputed: int
    extra: dict[str, Any] = field(default_factory=dict)
    summarized: bool = False  # a summary was written for this round


def tokens_of(conn: Connection) -> Tokens:
    """A prompt's tokens as the server sees them (its chat template, its tokenizer); elsewhere pieces of the
    estimated size that keep the same prefixes (a provider's tokenizer is not at hand)."""
    backend = conn.backend
    if isinstance(backend, LlamaServerBackend):
        return lambda messages: backend.tokenize(backend.apply_template(messages))
    size = max(1, round(getattr(conn.counter, "chars_per_token", 4.0)))
    return lambda messages: [piece for m in messages for piece in
                             (f"<{m['role']}>", *(m["content"][i:i + size] for i in range(0, len(m["content"]), size)),
                              "</>")]


def requests(turns: Sequence[Turn], strategies: Sequence[str], reference: str, settings: Settings,
             tokens: Tokens, previous: Sequence[Any] = ()) -> list[Request]:
    """Every request of the strategies, in order, with its predicted recomputed tokens (``previous``: the prompt
    the server holds before the first)."""
    out, cache = [], list(previous)
    for strategy in strategies:
        talk = Conversation(strategy, f"{strategy}-{nonce()}", reference, settings.window, settings.threshold)
        extra = {"n_cache_reuse": REUSE_CHUNK} if strategy == REUSE else {}
        for round_no in range(1, len(turns) + 1):
            folds = len(talk.summaries)
            messages = talk.messages(turns, round_no, tokens)
            prompt = tokens(messages)
            out.append(Request(strategy, round_no, messages, len(prompt),
                               recomputed(cache, prompt, REUSE_CHUNK if extra else 0), extra,
                               len(talk.summaries) > folds))
            cache = prompt
    return out


# -- the run --------------------------------------------------------------------------------------------------
def plan(settings: Settings) -> Plan:
    """Each strategy sends every round; a round's prompt grows by a question and an answer (about 160 tokens at
    full length) and the summaries and windows keep it shorter: the plan counts the longest, ``keep``."""
    doc = settings.fitted.tokens if settings.fitted else settings.reference_tokens
    per_round = 40 + 30 * min(max(settings.answer_sentences, 1), 4)
    keep = sum(doc + 350 + r * per_round for r in range(settings.conversation_rounds))
    pause = 3 + 2 * 2 if settings.pause else 0  # three resumes and the other conversations (two slots' worth)
    n = len(settings.conversation_strategies)
    return Plan(n * settings.conversation_rounds + pause, n * keep + (4 * keep // settings.conversation_rounds
                                                                        if settings.pause else 0)).warmed()


def prepare(settings: Settings, conn: Connection) -> Settings:
    """The strategies checked, the reference text fitted to ``conn``, the variant without chunk reuse dropped
    where the backend is no llama-server. Raises `ValueError` saying what to change."""
    unknown = [s for s in settings.conversation_strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(Sentence("settings_refused.unknown_strategies", unknown=", ".join(unknown),
                                  known=", ".join(STRATEGIES)))
    if not 2 <= settings.conversation_rounds <= MAX_ROUNDS:
        raise ValueError(Sentence("settings_refused.conversation_rounds", most=MAX_ROUNDS))
    if settings.window < 2 or settings.window % 2:
        raise ValueError("The window keeps whole rounds: choose an even number of messages, at least 2.")
    local = isinstance(conn.backend, LlamaServerBackend)
    strategies = tuple(s for s in settings.conversation_strategies if local or s != REUSE)
    if not strategies:
        raise ValueError("Choose at least one strategy this backend can run.")
    settings = replace(settings, conversation_strategies=strategies, pause=settings.pause and local)
    if settings.fitted is not None:
        return settings
    if settings.document is None and settings.conversation_doc != "default":
        settings = replace(settings, document=_read(settings.conversation_doc))
    budget = settings.reference_tokens
    if conn.context:
        longest = 350 + settings.conversation_rounds * (40 + 30 * min(max(settings.answer_sentences, 1), 4))
        room = conn.context - RESERVED_TOKENS - longest
        if room < 50:
            raise DocumentError(f"{settings.conversation_rounds} rounds do not fit in a {conn.context:,}-token "
                                "context; choose fewer rounds.")
        budget = min(budget, room)
    settings = replace(settings, fitted=fit_document(settings.document or REFERENCE, budget, conn.counter))
    planned = _requests(settings, conn)
    times = [predict_ms(settings, r.predicted_recomputed, r.prompt_tokens) for r in planned]
    return replace(settings, predicted_tokens=sum(r.predicted_recomputed for r in planned),
                   predicted_seconds=None if None in times else round(sum(t or 0.0 for t in times) / 1000, 1))


def with_prediction(settings: Settings, curve: QuadraticFit | None, rate: float | None,
                    roof_bound: float | None) -> Settings:
    """The one choice of the time prediction's rates for the page and the CLI: the ones ``settings`` carries (a run
    repeated, a benchmark's), else experiment 1's curve (its linear term as the rate, its square term as the
    attention's growth with the context) where it fits, else experiment 1's median rate, else the roofline's bound."""
    if settings.prefill_tps:
        return settings
    if curve is not None and curve.b > 0 and curve.c >= 0 and curve.r2 >= CURVE_R2:
        return replace(settings, prefill_tps=round(1000 / curve.b, 1), attention_ns=round(curve.c * 1e6, 3),
                       predicted_from="measured")
    if rate:
        return replace(settings, prefill_tps=rate, predicted_from="measured")
    if roof_bound:
        return replace(settings, prefill_tps=roof_bound, predicted_from="roofline")
    return settings


def predict_ms(settings: Settings, recomputed: int, prompt_tokens: int) -> float | None:
    """The prefill of ``recomputed`` new tokens after ``prompt_tokens - recomputed`` cached ones. Each new token attends
    to all before it, so with experiment 1's curve T(n) = a + b n + c n² this is T(cached + k) - T(cached) =
    b k + c k (2 cached + k): the same tokens cost more late in a long conversation. None without a rate."""
    if not settings.prefill_tps:
        return None
    cached = max(prompt_tokens - recomputed, 0)
    growth = (settings.attention_ns or 0.0) / 1e6 * recomputed * (2 * cached + recomputed)
    return round(recomputed / settings.prefill_tps * 1000 + growth, 2)


WARM_UP = [{"role": "user", "content": "Say OK."}]  # `core.experiments.base.warm_up`'s prompt


def _requests(settings: Settings, conn: Connection, warm: bool = True) -> list[Request]:
    """The run's requests and their predictions, the warm-up's prompt in the cache before the first."""
    tokens = tokens_of(conn)
    turns = script(settings.conversation_rounds, settings.answer_sentences)
    reference = settings.fitted.text if settings.fitted else REFERENCE
    return requests(turns, settings.conversation_strategies, reference, settings, tokens,
                    tokens(WARM_UP) if warm else ())


def _read(path: str) -> str:
    """A reference text from a file; `DocumentError` says why not."""
    try:
        return read_document(Path(path).read_bytes(), Path(path).name)
    except OSError as exc:
        raise DocumentError(f"Cannot read {path}: {exc.strerror or exc}.") from None


def rounds(run: RunContext, settings: Settings) -> Iterator[ConversationRound]:
    """Every request is built and predicted first; then sent, strategy by strategy; then the pause."""
    settings = prepare(settings, run.conn)
    planned = _requests(settings, run.conn, run.warm)
    run.warm_up()
    for request in planned:
        record = _send(run, settings, request)
        if record is None:
            return
        yield record
        if record.error:
            return
    if settings.pause:
        reference = settings.fitted.text if settings.fitted else REFERENCE
        turns = script(settings.conversation_rounds, settings.answer_sentences)
        yield from pause(run, settings, turns, reference, tokens_of(run.conn), planned[-1].messages)


def _send(run: RunContext, settings: Settings, request: Request) -> ConversationRound | None:
    """One request as a record with its prediction; None when the run was stopped meanwhile."""
    if run.stopped():
        return None
    result = run.send(ChatRequest(request.messages, max_tokens=settings.answer_tokens, ignore_eos=True,
                                  extra=request.extra))
    if run.stopped():
        return None
    predicted_ms = predict_ms(settings, request.predicted_recomputed, request.prompt_tokens)
    return _with_prediction(RoundResult.from_request(ID, request.round, result, strategy=request.strategy),
                            request, predicted_ms)


def _with_prediction(base: RoundResult, request: Request, predicted_ms: float | None) -> ConversationRound:
    values = {f.name: getattr(base, f.name) for f in fields(RoundResult)}
    values["target_tokens"] = request.prompt_tokens  # the prompt's size as the script counts it
    return ConversationRound(**values, predicted_recomputed=request.predicted_recomputed, predicted_ms=predicted_ms,
                             summarized=request.summarized)


PAUSE_TURNS = (
    ("I am back after a long meeting. Where were we with the trip, and is anything still waiting for my answer?",
     "[back] Welcome back. The bookings are held as we left them, and two questions wait for your answer."),
    ("Good. Please remind me of the two questions, and keep the same budget as before.",
     "[back] The first is the hotel's late check-in; the second is whether to add travel insurance."),
    ("Thanks. One more thing: is the hotel still refundable if the meeting moves by a day?",
     "[back] Yes, free cancellation runs until 48 hours before arrival."),
)


def pause(run: RunContext, settings: Settings, turns: Sequence[Turn], reference: str, tokens: Tokens,
          previous: Messages) -> Iterator[ConversationRound]:
    """The ``keep`` conversation under a new tag (no cache holds it: gone), resumed at once (in the slot), then
    after other conversations took every slot (restored from the RAM prompt cache, where the server keeps one)."""
    talk = Conversation("keep", f"pause-{nonce()}", reference, settings.window, settings.threshold)
    script_turns = [*turns, *(Turn(len(turns) + i + 1, u, a) for i, (u, a) in enumerate(PAUSE_TURNS))]
    cache = tokens(previous)
    n = len(turns)
    for label, round_no in (("resume_gone", n + 1), ("resume_in_slot", n + 2), ("resume_restored", n + 3)):
        if label == "resume_restored":
            failed = _others(run, settings, reference)
            if failed is not None:
                yield _with_prediction(RoundResult(ID, round_no, label, error=failed), _nothing(label), None)
                return
        messages = talk.messages(script_turns, round_no, tokens)
        prompt = tokens(messages)
        request = Request(label, round_no, messages, len(prompt), recomputed(cache, prompt))
        record = _send(run, settings, request)
        if record is None:
            return
        yield record
        if record.error:
            return
        cache = prompt


def _nothing(label: str) -> Request:
    return Request(label, 0, [], 0, 0)


def _others(run: RunContext, settings: Settings, reference: str) -> str | None:
    """One more conversation than the server has slots, each new: the least recently used slot, ours, goes to one
    of them. Returns what failed, or None."""
    slots = 1
    if isinstance(run.backend, LlamaServerBackend):
        try:
            slots = int(run.backend.props().get("total_slots") or 1)
        except (httpx.HTTPError, ValueError, TypeError):
            slots = 1  # an old build that does not say: one slot, and the next request finds a server that is gone
    for i in range(slots + 1):
        other = [{"role": "system", "content": system_prompt(f"other-{i}-{nonce()}", reference)},
                 {"role": "user", "content": USER[i % len(USER)].format(
                     a="Oslo", b="Bergen", day="3 May", day2="6 May", n=2, price=110, passport="Kenyan",
                     country="Norway", budget=1800)}]
        result = run.send(ChatRequest(other, max_tokens=settings.answer_tokens, ignore_eos=True))
        if result.error:
            return result.error
    return None


# -- what a run measured --------------------------------------------------------------------------------------
def measured(rows: Sequence[Any], strategy: str) -> list[ConversationRound]:
    return [r for r in rows if isinstance(r, ConversationRound) and r.experiment == ID and not r.error
            and r.strategy == strategy]


def prefill_ms(row: RoundResult) -> float | None:
    """The server's prefill time, else TTFT (a provider's)."""
    return row.prefill_ms if row.prefill_ms is not None else row.ttft_ms


@dataclass
class StrategyTotals:
    """One strategy over the rounds it measured: tokens and time, measured and predicted."""

    strategy: str
    rounds: int
    recomputed: int | None  # None: some round's count was not reported
    predicted: int
    exact: int  # rounds whose recomputed count equals the prediction
    worst: int | None  # the largest difference from the prediction, in tokens
    seconds: float | None
    predicted_seconds: float | None
    last_prompt: int | None
    summaries: tuple[int, ...]  # rounds at which a summary was written

    @property
    def time_agrees(self) -> bool | None:
        if not self.seconds or not self.predicted_seconds:
            return None
        return self.predicted_seconds / PREDICTION_SPREAD <= self.seconds <= self.predicted_seconds * PREDICTION_SPREAD


def totals(rows: Sequence[Any], strategy: str) -> StrategyTotals | None:
    mine = measured(rows, strategy)
    if not mine:
        return None
    counts = [r.recomputed_tokens for r in mine]
    known = [(r.recomputed_tokens, r.predicted_recomputed or 0) for r in mine if r.recomputed_tokens is not None]
    times, predicted = [prefill_ms(r) for r in mine], [r.predicted_ms for r in mine]
    return StrategyTotals(
        strategy, len(mine), None if None in counts else sum(c or 0 for c in counts),
        sum(r.predicted_recomputed or 0 for r in mine), sum(1 for m, p in known if m == p),
        max((abs(m - p) for m, p in known), default=None),
        None if None in times else sum(t or 0.0 for t in times) / 1000,
        None if None in predicted else sum(p or 0.0 for p in predicted) / 1000,
        mine[-1].prompt_tokens, tuple(r.round for r in mine if r.summarized))


def summarize(rows: Sequence[Any]) -> dict[str, StrategyTotals]:
    """Each strategy's totals, in the order run (the pause's requests apart)."""
    found = {s: totals(rows, s) for s in STRATEGIES}
    return {s: t for s, t in found.items() if t is not None}


def cumulative_cost(rows: Sequence[Any], strategy: str, price: PriceList, upto: int) -> float | None:
    """USD for the prompts of rounds 1..``upto`` on ``price``'s list; None unless every one was measured."""
    mine = [r for r in measured(rows, strategy) if r.round <= upto]
    if len(mine) < upto:
        return None
    costs = [input_cost(price, r.prompt_tokens, r.cached_tokens) for r in mine]
    return None if None in costs else sum(c or 0.0 for c in costs)


def cheapest(rows: Sequence[Any], upto: int, price: PriceList) -> tuple[str, float] | None:
    """The exact-prefix strategy whose prompts cost least through round ``upto``, and that cost."""
    costs = {s: cumulative_cost(rows, s, price, upto) for s in EXACT_PREFIX}
    known = {s: c for s, c in costs.items() if c is not None}
    return min(known.items(), key=lambda item: item[1]) if known else None


def resumes(rows: Sequence[Any]) -> dict[str, ConversationRound]:
    return {label: found[0] for label in RESUME if (found := measured(rows, label))}


# -- the conclusion -------------------------------------------------------------------------------------------
WINDOW_FACTOR = 2.0  # "shown": the window's median round recomputed at least this many times keep's


def conclude(rows: Sequence[Any], state: MachineState | None = None) -> Conclusion:
    """Shown when the window's median round recomputed at least `WINDOW_FACTOR` times ``keep``'s (the rounds after
    the first, where both start cold, that both measured; a median, so the rounds before it slides do not count); the
    claims: the prediction, each strategy's totals, the cheapest at rounds 10, 20 and 40, the pause."""
    found = summarize(rows)
    windowed = next((s for s in ("window", "window_dynamic") if s in found), None)
    if "keep" not in found or windowed is None:
        return Conclusion(ID, NO_DATA, None, _claims(rows, found, state))
    common = {r.round for r in measured(rows, "keep")} & {r.round for r in measured(rows, windowed)} - {1}
    keep = median_of([r.recomputed_tokens for r in measured(rows, "keep") if r.round in common])
    window = median_of([r.recomputed_tokens for r in measured(rows, windowed) if r.round in common])
    ratio = round(window / keep, 1) if keep else 0.0
    decided = Finding("window_vs_keep", {"strategy_word": _word(windowed), "window": round(window), "keep": round(keep),
                                         "ratio": ratio, "rounds": len(common)})
    status = SHOWN if ratio >= WINDOW_FACTOR else NOT_SHOWN
    return Conclusion(ID, status, decided, _claims(rows, found, state))


def _claims(rows: Sequence[Any], found: dict[str, StrategyTotals], state: MachineState | None) -> tuple[Finding, ...]:
    claims = []
    rounds_known = sum(1 for t in found.values() for _ in range(t.rounds))
    if found:
        claims.append(Finding("predicted", {"exact": sum(t.exact for t in found.values()), "rounds": rounds_known,
                                            "worst": max((t.worst or 0 for t in found.values()), default=0)}))
    for t in found.values():
        claims.extend(_strategy_claims(t))
    timed = [t for t in found.values() if t.time_agrees is not None]
    if timed:
        claims.append(Finding("time", {"within": sum(1 for t in timed if t.time_agrees), "strategies": len(timed),
                                       "spread": PREDICTION_SPREAD}))
    price = PRICE_LISTS[0]
    for upto in CHEAPEST_AT:
        best = cheapest(rows, upto, price)
        if best is not None:
            claims.append(Finding("cheapest", {"round": upto, "strategy_word": _word(best[0]), "usd": round(best[1], 5),
                                               "provider": f"{price.provider} {price.model}"}))
    claims.extend(_pause_claims(rows))
    busy = disturbed(state)  # counted, not timed: the machine's state is said beside the counts, not decisive
    if busy is not None:
        claims.append(Finding(f"{busy.key}_counts", dict(busy.values)))
    return tuple(claims)


def _word(strategy: str) -> str:
    """A strategy's name as a content key, quoted in the reader's language (`core.conclusions.render`)."""
    return f"conversation.strategy.{strategy}"


def _strategy_claims(t: StrategyTotals) -> Iterator[Finding]:
    seconds = _round(t.seconds) or 0.0
    if t.recomputed is None:
        yield Finding("strategy_unreported", {"strategy_word": _word(t.strategy), "rounds": t.rounds,
                                              "seconds": seconds})
    else:
        yield Finding("strategy", {"strategy_word": _word(t.strategy), "rounds": t.rounds, "recomputed": t.recomputed,
                                   "predicted": t.predicted, "prompt": t.last_prompt or 0, "seconds": seconds})
    if t.predicted_seconds:
        yield Finding("strategy_time", {"strategy_word": _word(t.strategy), "seconds": seconds,
                                        "predicted_seconds": _round(t.predicted_seconds)})
    if t.summaries:
        yield Finding("summaries", {"strategy_word": _word(t.strategy), "rounds": ", ".join(map(str, t.summaries))})


def _pause_claims(rows: Sequence[Any]) -> list[Finding]:
    found = resumes(rows)
    if len(found) < len(RESUME):
        return []
    slot, restored, gone = (found[label] for label in RESUME)
    values = {"slot": slot.ttft_ms, "restored": restored.ttft_ms, "gone": gone.ttft_ms,
              "slot_tokens": slot.recomputed_tokens, "restored_tokens": restored.recomputed_tokens,
              "gone_tokens": gone.recomputed_tokens}
    was_restored = (restored.recomputed_tokens is not None and gone.recomputed_tokens is not None
                    and restored.recomputed_tokens * 4 < gone.recomputed_tokens)
    return [Finding("pause" if was_restored else "pause_not_restored", values)]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def doctor_figure(rows: Sequence[Any]) -> dict[str, Any] | None:
    """What the doctor's compaction finding quotes: a summary round here against a ``keep`` round (tokens and
    prefill ms, medians), from a measured run of this experiment; None without one."""
    summary = [r for r in measured(rows, "summary") if r.summarized]
    keep = measured(rows, "keep")[1:]
    if not summary or not keep:
        return None
    return {"summary_tokens": median_of([r.recomputed_tokens for r in summary]),
            "summary_ms": median_of([prefill_ms(r) for r in summary]),
            "keep_tokens": median_of([r.recomputed_tokens for r in keep]),
            "keep_ms": median_of([prefill_ms(r) for r in keep])}


def median_of(values: Sequence[float | int | None]) -> float:
    return median(v for v in values if v is not None) or 0.0


TABLE = Table(ROUNDS_TABLE.columns[:5] + (("predicted_recomputed", "predicted", 9),) + ROUNDS_TABLE.columns[5:9])

EXPERIMENT = Experiment(
    id=ID, title="one long agent conversation: keep, slide a window or summarize, and what a pause costs",
    icon=":material/forum:", settings=Settings, rounds=rounds, plan=plan, prepare=prepare, summary=summarize,
    conclude=conclude, table=TABLE, record=ConversationRound, options=OPTIONS, sample=SAMPLE, default=False)
