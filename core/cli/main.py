"""Command line: ``python -m core`` runs the experiments, like the chapter's scripts.

Examples::

    python -m core                                  # experiments 1-3 on the embedded local server
    python -m core --only cache --rounds 6 --json cache.json
    python -m core --backend llama --url http://127.0.0.1:8080
    python -m core --only batch --concurrency 1,2,4,8 --json batch.json   # experiment 4: many requests at once
    python -m core --preset DeepSeek --only cache   # key from $DEEPSEEK_API_KEY
    python -m core doctor agent_log.jsonl --json findings.json    # a subcommand: see `python -m core --help`

The per-round table goes to stdout, progress to stderr. A key is read from the environment
variable of the preset (or ``--key-env``), never from the command line, so it stays out of shell
history and process listings. Ctrl-C stops a run: the records measured so far still go to the
summary, ``--json`` and ``--csv``, and the exit status is 130 (as a shell reports SIGINT).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from datetime import datetime
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from core.backends import BACKENDS
from core.backends.connect import Connection, Target, open_connection
from core.backends.server_lock import ServerLock
from core.cli import capture as capture_cli
from core.cli import doctor as doctor_cli
from core.cli import engine as engine_cli
from core.cli import report as report_cli
from core.cli import roofline as roofline_cli
from core.cli import runs as runs_cli
from core.cli.outputs import check_outputs
from core.cli.target import add_target_arguments, apply_deadline, connection_with_slots, target_from_args
from core.conclusions import conclusion_of, paragraph
from core.engine.server import EngineError
from core.experiments import EXPERIMENTS, Experiment, declared_options
from core.experiments.base import Option, RunContext, Table, exported_settings
from core.export import Record, to_csv, to_json
from core.runs import BackgroundRun, Events, NotStarted, RunOrder, Visit, start_run
from core.store import RunStore
from core.words import ContentWords

# Each subcommand module has `add_arguments(parser)` and `run(args) -> int`; its docstring's first line is its help.
SUBCOMMANDS: dict[str, ModuleType] = {"doctor": doctor_cli, "capture": capture_cli, "engine": engine_cli,
                                      "runs": runs_cli, "report": report_cli,
                                      "roofline": roofline_cli}
DEFAULT_RUN = [spec.id for spec in EXPERIMENTS.values() if spec.default]

INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT)


def _default_text(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _option_help(option: Option, specs: Sequence[Experiment]) -> str:
    """Its help, the experiments it sets when shared, and each one's default where they differ."""
    defaults = {spec.id: _default_text(getattr(spec.settings(), option.dest)) for spec in specs}
    default = option.default_text or (next(iter(defaults.values())) if len(set(defaults.values())) == 1
                                      else ", ".join(f"{name} {value}" for name, value in defaults.items()))
    shared = f"; sets {', '.join(defaults)}" if len(specs) > 1 else ""
    return f"{option.help}{shared} (default {default})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description="Measure prefill, decode and prefix caching.")
    add_target_arguments(parser, list(BACKENDS), None)
    lines = "; ".join(f"{spec.id}: {spec.title}" for spec in EXPERIMENTS.values())
    parser.add_argument("--only", choices=list(EXPERIMENTS), action="append",
                        help=f"run only this experiment (repeatable; default: {', '.join(DEFAULT_RUN)}). {lines}")
    for option, specs in declared_options().values():  # each once, for every experiment that has it (--repeats)
        parser.add_argument(option.flag, type=option.parse, help=_option_help(option, specs))
    parser.add_argument("--json", type=Path, help="write settings and records as JSON")
    parser.add_argument("--csv", type=Path, help="write rounds as CSV (experiment 4 alone: its levels)")
    parser.add_argument("--no-save", action="store_true",
                        help="do not save this run in the run store (`python -m core runs list`)")
    commands = parser.add_subparsers(dest="command", title="subcommands", metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        summary = (module.__doc__ or name).strip().splitlines()[0]
        module.add_arguments(commands.add_parser(name, help=summary, description=module.__doc__,
                                                 formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def _prepare(spec: Experiment, settings: Any, conn: Connection) -> Any:
    """``settings`` fitted to ``conn``; a note on stderr for each option the server does not allow in full."""
    prepared = spec.prepare(settings, conn)
    for option in spec.options:
        before, after = getattr(settings, option.dest), getattr(prepared, option.dest)
        if isinstance(before, tuple) and set(after) < set(before):
            left_out = ", ".join(map(str, sorted(set(before) - set(after))))
            print(f"note: skipping {option.flag} {left_out}: more than this server takes", file=sys.stderr)
    return prepared


def hold_server(target: Target, conn: Connection, stack: ExitStack) -> None:
    """One run at a time on a llama-server, with the app's runs too (`core.backends.server_lock`): wait for it,
    saying so, and warn when a client that takes no lock is using it."""
    key = target.lock_key()
    if key is None:
        return
    lock = ServerLock(key)
    lock.acquire(on_wait=lambda holder: print(f"Waiting for another run on this server ({holder or 'unknown'})...",
                                               file=sys.stderr))
    stack.callback(lock.release)
    busy = conn.busy_slots()
    if busy:
        print(f"warning: another client is using this server ({busy} slot(s) busy): its requests share the server "
              "with this run's, so timings may be slower than the server alone.", file=sys.stderr)


def _rounds(spec: Experiment, settings: Any, run: RunContext) -> Iterator[Record]:
    return spec.rounds(run, settings)


def _store_notes(store: RunStore | None) -> Callable[[BackgroundRun, Record], None]:
    """Say when the store stops taking rounds, and when it works again (each round is in the table meanwhile)."""
    waiting = [bool(store and store.unsaved)]

    def heard(run: BackgroundRun, record: Record) -> None:
        if store is not None and bool(store.unsaved) != waiting[0]:
            waiting[0] = bool(store.unsaved)
            print(f"warning: {store.problem}" if waiting[0] else "The run store works again: every round "
                  "measured so far is written.", file=sys.stderr)

    return heard


def run_one(spec: Experiment, prepared: Any, conn: Connection, target: Target, store: RunStore | None,
            saved: dict[str, Any], label: str, on_record: Callable[[BackgroundRun, Record], None]) -> BackgroundRun:
    """One experiment through the app's own call (`core.runs.session.start_run`: saving, the meter, the
    conclusion), on the command's connection and under its server lock; Ctrl-C stops it, keeping its records
    and saving it as stopped, then goes on up (`KeyboardInterrupt`)."""
    order = RunOrder(spec.id, saved, spec.plan(prepared), lambda _conn: partial(_rounds, spec, prepared))
    notes = _store_notes(store)

    def heard(run: BackgroundRun, record: Record) -> None:
        notes(run, record)
        on_record(run, record)

    settled = threading.Event()  # waited on, not the worker thread: a join cut by Ctrl-C can lose the thread
    run = start_run(order, target, label=lambda _conn: label, store=store, visit=Visit(log=False), connection=conn,
                    lock=False, events=Events(on_record=heard, on_end=lambda _run: settled.set()))
    try:
        while not settled.wait(0.2):  # a wait with a timeout, so Ctrl-C is heard on every system
            pass
    except KeyboardInterrupt:
        run.stop()
        settled.wait()
        raise
    if run.error:
        print(f"error: [{spec.id}] {run.error}", file=sys.stderr)
    return run


def unsaved(store: RunStore | None) -> bool:
    """Say, at the end, when rounds measured could not be written to the store (they are lost when this ends):
    waiting for a database that fails, or all of them in memory since the store asked for could not be used."""
    if store is not None and not store.on_disk and store.problem:
        print(f"error: nothing measured here was kept: the run store asked for could not be used ({store.problem}) "
              "Every round is in the table above (and in --json/--csv when given).", file=sys.stderr)
        return True
    if store is None or not store.unsaved or store.flush():
        return False
    print(f"error: {store.unsaved} writes of the runs measured here (rounds, their start or end) were not saved: "
          f"{store.failing}. Every round is in the table above (and in --json/--csv when given).", file=sys.stderr)
    return True


def _report(args: argparse.Namespace, specs: Sequence[Experiment], settings: dict[str, Any],
            records: dict[str, list[Record]], ended: Mapping[str, BackgroundRun] | None = None) -> None:
    """Each experiment's conclusion over its own records, in the content's words: the one its run stored (computed
    with the machine's state as the run ended), what its page and the report say of the same run; --json (each
    experiment's state and conclusion under ``summary``), --csv."""
    words = ContentWords("en")
    summary: dict[str, Any] = {}
    for spec in specs:
        run = (ended or {}).get(spec.id)
        state = run.state if run is not None else None
        conclusion = conclusion_of(spec, spec.own(records.get(spec.records, [])), state,
                                   run.conclusion if run is not None else None)
        summary[spec.id] = {"state": state.to_dict() if state else None, "conclusion": conclusion.to_dict()}
        print(words(f"{spec.id}.title"))
        print(paragraph(conclusion, words))
    if args.json:
        args.json.write_text(to_json(settings, records, summary))
    if args.csv:
        args.csv.write_text(to_csv(settings, records.get("rounds") or next(iter(records.values()), [])))


def run_experiments(args: argparse.Namespace) -> int:
    only: list[str] = list(dict.fromkeys(args.only or DEFAULT_RUN))  # each experiment once, in the order given
    specs = [EXPERIMENTS[name] for name in only]
    chosen = {spec.id: spec.from_args(vars(args)) for spec in EXPERIMENTS.values()}
    records: dict[str, list[Record]] = {}  # by export key (rounds, levels)
    with ExitStack() as stack:
        try:
            # one experiment alone starts the embedded engine with the slots it needs, not a one-slot server first
            slots = specs[0].slots(chosen[specs[0].id]) if len(specs) == 1 else 1
            target = target_from_args(args, stack, slots)
            conn = apply_deadline(stack.enter_context(open_connection(target)), args)
        except (EngineError, httpx.HTTPError, ValueError) as exc:
            print(f"error: cannot use the backend: {exc}", file=sys.stderr)
            return 2
        hold_server(target, conn, stack)
        prepared: dict[str, Any] = {}
        connections: dict[str, Connection] = {}
        try:  # every experiment's settings are checked before the first request
            for spec in specs:
                connections[spec.id] = apply_deadline(
                    connection_with_slots(conn, stack, spec.slots(chosen[spec.id]), args.context), args)
                prepared[spec.id] = _prepare(spec, chosen[spec.id], connections[spec.id])
        except (EngineError, httpx.HTTPError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        # each experiment's settings under its id: two experiments' same-named fields (prompt_tokens) never meet
        settings = {**conn.describe(), "only": only, "deadline_s": args.deadline,
                    **{spec.id: exported_settings(prepared[spec.id]) for spec in specs}}
        store = None if args.no_save else runs_cli.open_for_cli()
        label = f"{conn.name} · {conn.info.get('model') or conn.backend.model} · {datetime.now():%Y-%m-%d %H:%M}"
        shown: Table | None = None
        interrupted = False
        ended: dict[str, BackgroundRun] = {}  # each experiment's run, with its state and conclusion
        try:
            for spec in specs:
                print(f"[{spec.id}] running...", file=sys.stderr)
                if spec.table is not shown:  # experiments 1-3 share one table of rounds
                    shown = spec.table
                    print(spec.table.header())
                saved = {"only": only, "deadline_s": args.deadline, **exported_settings(prepared[spec.id])}

                def row(run: BackgroundRun, record: Record, spec: Experiment = spec) -> None:
                    records.setdefault(spec.records, []).append(record)
                    print(spec.table.row(record), flush=True)

                ended[spec.id] = run_one(spec, prepared[spec.id], connections[spec.id], target, store, saved, label,
                                         row)
        except KeyboardInterrupt:  # Ctrl-C: what was measured is kept and written below
            interrupted = True
        except NotStarted as exc:
            print(f"error: [{spec.id}] cannot run: {exc}", file=sys.stderr)
            return 2
    return _ended(args, specs, settings, records, ended, store, interrupted)

def _ended(args: argparse.Namespace, specs: Sequence[Experiment], settings: dict[str, Any],
           records: dict[str, list[Record]], ended: Mapping[str, BackgroundRun], store: RunStore | None,
           interrupted: bool) -> int:
    """What a run of experiments prints once they end (each one's conclusion, the files asked for) and its exit
    code: 1 when a record failed or a write was lost, `INTERRUPTED` after Ctrl-C."""
    if interrupted:
        print(f"Interrupted (Ctrl-C): {sum(map(len, records.values()))} records were measured; they are kept.",
              file=sys.stderr)
    _report(args, specs, settings, records, ended)
    if unsaved(store) and not interrupted:
        return 1
    if interrupted:
        return INTERRUPTED
    failed = any(run.error for run in ended.values()) or any(r.error for kind in records.values() for r in kind)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if problem := check_outputs(args):  # before the work, not after it
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        code = int(SUBCOMMANDS[args.command].run(args)) if args.command else run_experiments(args)
        sys.stdout.flush()  # a reader that went away (`| head`) is found here, not in a traceback at exit
        return code
    except KeyboardInterrupt:  # before anything was measured (starting the engine, connecting)
        print("Interrupted (Ctrl-C).", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `runs list | head`: the reader has what it wanted; no traceback, no flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
