"""One run, from the press of Run (or the CLI's command) to its settlement, through one call: `start_run`.

In order: the hosted demo's admission (`core.runs.admission.admit`: its limits, the API URL guard, the budgets;
the URL is checked there, once), the connection (through the guarded transport where the demo asks), the
experiment's source, the saved run (`core.runs.recording.recorded`: each record written as it arrives), the CPU
meter, then the run in the background (`BackgroundRun`). As its records end, the meter's `MachineState` and the
experiment's `Conclusion` (computed once, here) go on the run, before it says it has ended; once it has ended
they are written with how it ended (``summary["conclusion"]``, ``machine["state"]``) and the run is settled: its
connection closed, what it sent charged (every request its connection sent during the run, the warm-up and a level
cut by Stop included: `core.backends.base.SentTokens`), one line in the operator's log.

A run refused at any step raises `NotStarted` and leaves nothing behind: the reservation given back, the
connection closed, no saved run. The page and the CLI differ only in the `Events` they pass and in what they
hold themselves (the CLI its connections and the server's lock for all its experiments).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.backends import API, BACKENDS
from core.backends.connect import Connection, Target, open_connection
from core.engine.meter import CpuMeter, meter_for
from core.experiments import EXPERIMENTS
from core.experiments.base import Plan, RunContext, Source
from core.export import Record
from core.hosting import HostedSettings, Ledger, Refused, TokenLedger, guarded_transport, log_run
from core.runs.admission import Admission, admit
from core.runs.recording import RunRecorder, recorded
from core.runs.runner import STOPPED, BackgroundRun, Line

NOTHING, REFUSED, CONNECT, SETTINGS = "nothing", "refused", "connect", "settings"  # why a run did not start


class Order(Protocol):
    """What to run: `ui.runs.ExperimentPlan` is one; the CLI builds one per experiment."""

    @property
    def experiment(self) -> str: ...

    @property
    def settings(self) -> dict[str, Any]: ...  # exported with the run, beside the connection's description

    @property
    def plan(self) -> Plan: ...

    @property
    def make_source(self) -> Callable[[Connection], Source]: ...  # raises ValueError (a sentence) when it cannot


@dataclass(frozen=True)
class RunOrder:
    """An `Order` as plain data: the CLI's, one per experiment of the command, and any caller's without a page."""

    experiment: str
    settings: dict[str, Any]
    plan: Plan
    make_source: Callable[[Connection], Source]


@dataclass(frozen=True)
class Visit:
    """Who starts the run and under which rules; the default, a local install, admits everything."""

    hosted: HostedSettings = field(default_factory=HostedSettings)
    budgets: Ledger = field(default_factory=TokenLedger)
    line: Line | None = None  # the cap's line shared by every session: this process's `QUEUE` unless given
    visitor: str = ""  # for the per-visitor limits and budgets
    whose_key: str = ""  # "typed" for the visitor's own key, which spends none of the operator's budgets
    owner: str = ""  # written on the saved run: the hosted visitor's id, "" on a local install
    page_alive: Callable[[], bool] | None = None  # is the page that started it still there (a closed tab stops it)
    log: bool = True  # one line per run in the operator's log (the app's; the CLI prints its own lines)


@dataclass(frozen=True)
class Events:
    """What the caller hears, in the run's worker: each record once saved, and the end once settled."""

    on_record: Callable[[BackgroundRun, Record], None] | None = None
    on_end: Callable[[BackgroundRun], None] | None = None


class NotStarted(Exception):
    """The run did not start, and nothing of it is left: ``reason`` is `NOTHING` (no request planned),
    `REFUSED` (``cause`` is the hosted demo's `Refused`), `CONNECT` or `SETTINGS` (``cause`` says why)."""

    def __init__(self, reason: str, cause: Exception | None = None) -> None:
        super().__init__(str(cause) if cause is not None else reason)
        self.reason, self.cause = reason, cause


@dataclass
class _Run:
    """What one run holds from admission to settlement."""

    order: Order
    target: Target
    visit: Visit
    admission: Admission
    conn: Connection
    owned: bool  # the session opened the connection, and closes it
    store: RunRecorder | None
    events: Events
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    since: int = field(init=False)  # the connection's tokens sent before this run (the CLI's serves each in turn)

    def __post_init__(self) -> None:
        self.since = self.conn.backend.sent.total

    def give_back(self) -> None:
        """Nothing was sent: the reservation goes back, the connection is closed."""
        self.admission.settle(0)
        if self.owned:
            self.conn.close()

    def concluded(self, source: Source, meter: CpuMeter, run: list[BackgroundRun]) -> Source:
        """``source`` saved record by record; as it ends, the machine's state and the conclusion on the run."""
        saved = recorded(source, self.store, self.run_id) if self.store is not None else source

        def records(context: RunContext) -> Iterator[Record]:
            seen: list[Record] = []
            meter.start()
            try:
                for record in saved(context):
                    seen.append(record)
                    if self.events.on_record is not None:
                        self.events.on_record(run[0], record)
                    yield record
            finally:
                run[0].state = meter.state()
                spec = EXPERIMENTS.get(self.order.experiment)
                if spec is not None and spec.conclude is not None:
                    run[0].conclusion = spec.conclude(seen, run[0].state)

        return records

    def settle(self, run: BackgroundRun) -> None:
        """In the worker once the run has ended: close, charge, log; then write how it ended, whatever failed."""
        try:
            if self.owned:
                self.conn.close()
            tokens = self.admission.settle(self.conn.backend.sent.total - self.since)
            outcome = run.ended_because if run.ended_because and run.status == STOPPED else run.status
            if self.visit.log:
                log_run(run.experiment, self.conn.name, str(self.conn.info.get("model") or self.conn.backend.model),
                        self.conn.backend.base_url, self.visit.whose_key, run.visitor, tokens, outcome,
                        run.seconds, len(run.rows))
        finally:
            self._ended(run)

    def _ended(self, run: BackgroundRun) -> None:
        try:
            if self.store is not None:
                summary = {"conclusion": run.conclusion.to_dict()} if run.conclusion is not None else {}
                self.store.finish(run.run_id, run.status, summary, state=run.state.to_dict())
        finally:  # the caller hears the end even when the store failed (the CLI waits for it)
            if self.events.on_end is not None:
                self.events.on_end(run)


def _connect(target: Target, settings: HostedSettings) -> Connection:
    """The run's connection; an API's through the guarded transport in hosted mode (its URL checked in
    admission: every address it resolves to is checked again as it connects)."""
    guarded = settings.hosted and BACKENDS[target.backend].needs == API
    return open_connection(target, guarded_transport(settings) if guarded else None)


def _admitted(order: Order, target: Target, visit: Visit,
              connection: Connection | None) -> tuple[Admission, Connection]:
    """Admitted and connected (the caller's connection, or a new one), or `NotStarted` with nothing reserved."""
    if order.plan.requests == 0:
        raise NotStarted(NOTHING)
    try:
        admission = admit(order.plan, target, visit.visitor, visit.whose_key, visit.hosted, visit.budgets)
    except Refused as exc:
        raise NotStarted(REFUSED, exc) from exc
    try:
        return admission, connection or _connect(target, visit.hosted)
    except Exception as exc:  # noqa: BLE001 - any failure to connect is said, never raised into a page
        admission.settle(0)
        raise NotStarted(CONNECT, exc) from exc


def start_run(order: Order, target: Target, *, label: Callable[[Connection], str], store: RunRecorder | None,
              visit: Visit | None = None, connection: Connection | None = None, lock: bool = True,
              events: Events | None = None) -> BackgroundRun:
    """Admit, connect, save, meter and start ``order`` in the background; settle it once it ends. The caller
    keeps ``connection`` (when given) open and closes it; ``lock``: the run takes the server's lock itself
    (the CLI holds it for all its experiments). Raises `NotStarted`, with nothing left behind."""
    visit = visit or Visit()
    admission, conn = _admitted(order, target, visit, connection)
    held = _Run(order, target, visit, admission, conn, connection is None, store, events or Events())
    try:
        source = order.make_source(conn)
    except ValueError as exc:  # a document or settings that cannot run here (DocumentError, Refused)
        held.give_back()
        raise NotStarted(REFUSED if isinstance(exc, Refused) else SETTINGS, exc) from exc
    return _launch(held, source, label(conn), lock)


def _launch(held: _Run, source: Source, label: str, lock: bool) -> BackgroundRun:
    settings = {**held.conn.describe(), **held.order.settings}
    if held.store is not None:
        held.store.begin(held.order.experiment, settings, label=label, owner=held.visit.owner,
                         secrets=[held.target.api_key], run_id=held.run_id)
    run: list[BackgroundRun] = []
    hosted = held.visit.hosted
    run.append(BackgroundRun(
        held.order.experiment, settings, held.concluded(source, meter_for(held.target.url or ""), run),
        connection=held.conn, lock_key=held.target.lock_key() if lock else None,
        planned_rounds=held.order.plan.steps, label=label, run_id=held.run_id, on_finish=lambda: held.settle(run[0]),
        on_stop=held.conn.abort, page_alive=held.visit.page_alive, grace_s=hosted.abandon_grace_s,
        visitor=held.visit.visitor, busy_slots=held.conn.busy_slots, line=held.visit.line))
    try:
        run[0].start(hosted.max_concurrent_runs, hosted.max_runs_per_visitor, hosted.max_waiting_runs)
    except Refused as exc:
        if held.store is not None:
            held.store.delete(held.run_id, owner=held.visit.owner or None)
        held.give_back()
        raise NotStarted(REFUSED, exc) from exc
    return run[0]
