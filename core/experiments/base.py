"""What every experiment shares: its declaration (`Experiment`), the run context its generator gets, its
plan, its options, its command-line table and the warm-up.

An experiment is a generator ``rounds(run, settings)`` that yields one record per request (or per
level): a caller can redraw after every record and stop at any time (``run.cancel``) keeping what
was measured; the record in flight when the stop comes is dropped, not recorded half-measured (what its requests
sent is charged all the same: the connection counts it, `core.backends.base.SentTokens`). A
record that fails is yielded with its ``error`` and ends the experiment: later requests would fail
the same way (a server that is down) or measure a broken conversation.

Every experiment first sends one short warm-up request that is kept out of the results: a fresh
server pays for model load and first-touch allocation on its first request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from core.backends.base import ChatRequest, StreamingBackend
from core.backends.chunks import ProgressCallback
from core.backends.connect import Connection
from core.backends.tokens import TokenCounter
from core.conclusions import Conclusion, MachineState
from core.export import Record, RecordType, from_json
from core.records import RequestResult, RoundResult

WARM_UP_TOKENS = 40  # the warm-up's "Say OK." in a chat template (a system prompt some add) and its 2 answer tokens
RESERVED_TOKENS = 64  # template, instructions and the answer's first tokens
OUTPUT_PROMPT_TOKENS = 60  # experiment 2's short prompt (and experiment 4's decode prompt), rounded up
INTERNAL = {"internal": True}  # a `Settings` field that is neither a widget nor exported (`exported_settings`)
NO_WIDGET = {"widget": False}  # exported, but no page widget keeps it in the session (`widget_settings`)


@dataclass(frozen=True)
class Plan:
    """What a run will send, for budgets and progress: requests, about how many tokens in and out, and
    how many records it yields when that is not one per request."""

    requests: int
    tokens: int
    records: int | None = None
    at_once: int = 1  # the most requests it may have open together (a hosted demo caps it: `core.hosting`)
    per_second: float | None = None  # the highest rate it schedules requests at; None: each waits for the last

    @property
    def steps(self) -> int:
        return self.requests if self.records is None else self.records

    def warmed(self) -> Plan:
        """This plan with the warm-up's tokens (`RunContext.warm_up`), which every experiment sends first: the
        tokens shown and reserved before a run count it, as its settlement charges it."""
        return replace(self, tokens=self.tokens + WARM_UP_TOKENS) if self.requests else self


@dataclass(frozen=True)
class RunContext:
    """Where a run's requests go and how it is stopped and heard: what every generator gets.

    The one who runs a source builds it: the CLI, or `core.runs.runner.BackgroundRun`, which owns the cancel and
    the progress. A context without a connection (a test's scripted source) has nowhere to send."""

    connection: Connection | None
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: ProgressCallback | None = None
    warm: bool = True  # send the warm-up request first

    @property
    def conn(self) -> Connection:
        if self.connection is None:
            raise RuntimeError("this run has no connection to send requests to")
        return self.connection

    @property
    def backend(self) -> StreamingBackend:
        return self.conn.backend

    @property
    def counter(self) -> TokenCounter:
        return self.conn.counter

    def stopped(self) -> bool:
        return self.cancel.is_set()

    def send(self, request: ChatRequest) -> RequestResult:
        """One request with this run's progress and cancel."""
        return self.backend.stream_chat(request, on_progress=self.progress, cancel=self.cancel)

    def warm_up(self) -> None:
        """One tiny request whose timing is thrown away (unless ``warm`` is off)."""
        if self.warm:
            warm_up(self.backend, self.cancel)


Source = Callable[[RunContext], Iterator[Record]]  # a run's records: an experiment's generator with its settings


def warm_up(backend: StreamingBackend, cancel: threading.Event | None = None) -> RequestResult:
    """One tiny request whose timing is thrown away."""
    return backend.stream_chat(ChatRequest([{"role": "user", "content": "Say OK."}], max_tokens=2), cancel=cancel)


@dataclass(frozen=True)
class Option:
    """A command-line option of an experiment (``python -m core``); ``dest`` names its `Settings` field,
    whose default is the option's default."""

    flag: str
    help: str
    parse: Callable[[str], Any] = str
    default_text: str | None = None  # how --help names the default (else the field's default)

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


# Options that mean one thing in every experiment whose settings have the field: one flag per idea, declared here
# once and named in each of those experiments' ``OPTIONS`` (tests/unit/experiments/test_registry.py checks it).
REPEATS = Option("--repeats", "repeats per size or length (medians are reported)", int)
PROMPT_TOKENS = Option("--prompt-tokens", "prompt tokens of each request", int)
OUTPUT_TOKENS = Option("--output-tokens", "answer tokens of each request", int)
PREFILL_TPS = Option("--prefill-tps", "this machine's prefill tokens/s to predict from (experiment 1 measures it)",
                     float, default_text="none: measured, or not predicted")
DECODE_TPS = Option("--decode-tps", "this machine's decode tokens/s to predict from (experiment 2 measures it)",
                    float, default_text="none: measured, or not predicted")


def ints(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``: a comma-separated option."""
    return tuple(int(part) for part in text.split(",") if part.strip())


def names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def exported_settings(settings: Any) -> dict[str, Any]:
    """A settings dataclass as an export writes it: every field but the internal ones, tuples as lists."""
    return {f.name: _plain(getattr(settings, f.name)) for f in fields(settings) if not f.metadata.get("internal")}


def widget_settings(settings: Any) -> dict[str, Any]:
    """The exported fields a page's widgets keep in the session, as the widgets take them (lists)."""
    return {f.name: _plain(getattr(settings, f.name)) for f in fields(settings)
            if not f.metadata.get("internal") and f.metadata.get("widget", True)}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def measured_rows(rows: Sequence[Any], experiment: str) -> list[RoundResult]:
    """The rounds of ``experiment`` that did not fail."""
    return [r for r in rows if isinstance(r, RoundResult) and r.experiment == experiment and not r.error]


def timed_by(rows: Sequence[RoundResult], name: str) -> str | None:
    """SERVER, CLIENT, both joined with "+", or None: where the timings behind a summary came from."""
    found = sorted({getattr(r, name) for r in rows if getattr(r, name)})
    return "+".join(found) or None


def timed_word(source: str | None) -> str:
    """The content key naming where a summary's timings came from (`timed_by`), for a finding's ``source_word``."""
    return "common.timed_" + ("both" if source and "+" in source else source or "client")


@dataclass(frozen=True)
class Table:
    """How the command line prints an experiment's records: ``(field, header, width)`` columns, one line each."""

    columns: tuple[tuple[str, str, int], ...]

    def header(self) -> str:
        return " ".join(title[:width].rjust(width) for _, title, width in self.columns)

    def row(self, record: Any) -> str:
        line = " ".join(_cell(getattr(record, name, None), width) for name, _, width in self.columns)
        return f"{line}  ERROR: {record.error}" if record.error else line

    def rows(self, records: Sequence[Any]) -> list[dict[str, Any]]:
        """The same columns for a page's table: ``{field: value}`` per record (the names its help explains), and its
        error."""
        return [{**{name: getattr(r, name, None) for name, _, _ in self.columns}, "error": r.error}
                for r in records]


def _cell(value: object, width: int) -> str:
    text = "-" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)
    return text[:width].rjust(width)


ROUNDS_TABLE = Table((("experiment", "experiment", 10), ("strategy", "strategy", 17), ("round", "round", 5),
                      ("prompt_tokens", "prompt", 9), ("recomputed_tokens", "recomputed", 10),
                      ("cached_tokens", "cached", 9), ("prefill_ms", "prefill_ms", 10), ("ttft_ms", "ttft_ms", 9),
                      ("output_tokens", "output", 7), ("decode_ms", "decode_ms", 9), ("total_ms", "total_ms", 9)))


def _one_slot(settings: Any) -> int:
    return 1


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """One experiment, declared by its own module (``EXPERIMENT = Experiment(id=ID, ...)``): its id everywhere,
    its generator and everything a caller needs around it, so that no caller tests an id."""

    id: str
    title: str  # one line, for --help
    icon: str  # its navigation icon
    settings: type[Any]  # a frozen dataclass; its defaults are the CLI's and the session's
    rounds: Callable[[RunContext, Any], Iterator[Record]]  # the generator: (run, settings) -> records
    plan: Callable[[Any], Plan]  # settings -> requests and tokens, before connecting (budgets, progress)
    prepare: Callable[[Any, Connection], Any]  # settings fitted to a connection; ValueError says what to change
    summary: Callable[[Sequence[Any]], Any]  # records -> what the run measured ("no data" as None)
    # records, the machine's state -> the run's one conclusion (core.conclusions): what every consumer renders
    conclude: Callable[[Sequence[Any], MachineState | None], Conclusion]
    table: Table = ROUNDS_TABLE  # its records on the command line
    record: type[RecordType] = RoundResult  # what it yields (and reads back from an export)
    records: str = "rounds"  # the key of its records in a JSON export
    options: tuple[Option, ...] = ()  # its `python -m core` options
    sample: Path | None = None  # recorded results shipped with the project
    slots: Callable[[Any], int] = _one_slot  # the embedded server's parallel sequences it needs
    default: bool = True  # run by `python -m core` without --only

    @property
    def page(self) -> str:
        """Its page, named by its id so that its URL is ``/<id>``."""
        return f"app_pages/{self.id}.py"

    def session_defaults(self) -> dict[str, Any]:
        """``{id}_{field}`` -> the default of each setting a page's widget keeps (``cache_rounds``)."""
        return {f"{self.id}_{name}": value for name, value in widget_settings(self.settings()).items()}

    def from_args(self, values: Mapping[str, Any]) -> Any:
        """Its settings from parsed options (``vars(args)``); options it does not have keep their defaults."""
        names = {f.name for f in fields(self.settings)}
        return self.settings(**{o.dest: values[o.dest] for o in self.options
                                if o.dest in names and values.get(o.dest) is not None})

    def recorded(self) -> tuple[dict[str, Any], list[Any]]:
        """The settings and records of its recorded sample (none when it has none)."""
        if self.sample is None:
            return {}, []
        settings, records = from_json(self.sample.read_text(), self.records, self.record)
        return settings, self.own(records)

    def own(self, records: Sequence[Any]) -> list[Any]:
        """Its records among others (an export's rounds hold experiments 1-3 together)."""
        return [r for r in records if getattr(r, "experiment", self.id) == self.id]
