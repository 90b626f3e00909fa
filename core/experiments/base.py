"""What every experiment shares: the run context its generator gets, its plan, its options and the warm-up.

An experiment is a generator ``rounds(run, settings)`` that yields one record per request (or per
level): a caller can redraw after every record and stop at any time (``run.cancel``) keeping what
was measured; the record in flight when the stop comes is dropped, not recorded half-measured. A
record that fails is yielded with its ``error`` and ends the experiment: later requests would fail
the same way (a server that is down) or measure a broken conversation.

Every experiment first sends one short warm-up request that is kept out of the results: a fresh
server pays for model load and first-touch allocation on its first request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from core.backends.base import ChatRequest, StreamingBackend
from core.backends.chunks import ProgressCallback
from core.backends.connect import Connection
from core.backends.tokens import TokenCounter
from core.records import RequestResult

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

    @property
    def steps(self) -> int:
        return self.requests if self.records is None else self.records


@dataclass(frozen=True)
class RunContext:
    """Where a run's requests go and how it is stopped and heard: what every generator gets."""

    connection: Connection
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: ProgressCallback | None = None
    warm: bool = True  # send the warm-up request first

    @property
    def backend(self) -> StreamingBackend:
        return self.connection.backend

    @property
    def counter(self) -> TokenCounter:
        return self.connection.counter

    def stopped(self) -> bool:
        return self.cancel.is_set()

    def send(self, request: ChatRequest) -> RequestResult:
        """One request with this run's progress and cancel."""
        return self.backend.stream_chat(request, on_progress=self.progress, cancel=self.cancel)

    def warm_up(self) -> None:
        """One tiny request whose timing is thrown away (unless ``warm`` is off)."""
        if self.warm:
            warm_up(self.backend, self.cancel)


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
