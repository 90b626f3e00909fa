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
history and process listings.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from types import ModuleType

import httpx

from core.backends import BACKENDS
from core.backends.connect import Connection, Target, open_connection
from core.backends.server_lock import ServerLock
from core.cli import batch as batch_cli
from core.cli import capture as capture_cli
from core.cli import doctor as doctor_cli
from core.cli import engine as engine_cli
from core.cli.summary import summary_lines
from core.cli.target import add_target_arguments, target_from_args
from core.engine.server import EngineError
from core.experiments import rounds as ex
from core.experiments.batch import DEFAULT_LEVELS, BatchLevel
from core.experiments.prompts import STRATEGIES, DocumentError, default_document, fit_document, read_document
from core.export import to_csv, to_json
from core.records import RoundResult

# Each subcommand module has `add_arguments(parser)` and `run(args) -> int`; its docstring's first line is its help.
SUBCOMMANDS: dict[str, ModuleType] = {"doctor": doctor_cli, "capture": capture_cli, "engine": engine_cli}

COLUMNS = [("experiment", 13), ("strategy", 17), ("round", 5), ("prompt_tokens", 9), ("recomputed_tokens", 10),
           ("reused_tokens", 9), ("prefill_ms", 10), ("ttft_ms", 9), ("output_tokens", 7), ("decode_ms", 9),
           ("total_ms", 9)]
HEADERS = {"prompt_tokens": "prompt", "recomputed_tokens": "recomputed", "reused_tokens": "reused",
           "output_tokens": "output", "strategy": "strategy"}


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description="Measure prefill, decode and prefix caching.")
    add_target_arguments(parser, list(BACKENDS), None)
    parser.add_argument("--only", choices=["input", "output", "cache", "batch"], action="append",
                        help="run only this experiment (repeatable); default: input, output and cache")
    parser.add_argument("--doc", type=Path, help="UTF-8 text file replacing the default document (experiment 3)")
    parser.add_argument("--rounds", type=int, default=ex.DEFAULT_ROUNDS, help="experiment 3 rounds per strategy")
    parser.add_argument("--strategies", default=",".join(ex.DEFAULT_STRATEGIES),
                        help=f"experiment 3 strategies, comma separated: {', '.join(STRATEGIES)}")
    parser.add_argument("--doc-tokens", type=int, default=ex.DEFAULT_CACHE_DOC_TOKENS,
                        help="experiment 3 document budget")
    parser.add_argument("--sizes", type=_ints, default=list(ex.DEFAULT_INPUT_SIZES), help="experiment 1 input tokens")
    parser.add_argument("--lengths", type=_ints, default=list(ex.DEFAULT_OUTPUT_LENGTHS),
                        help="experiment 2 output tokens")
    parser.add_argument("--repeats", type=int, default=1, help="repeats per size/length (medians are reported)")
    parser.add_argument("--concurrency", type=_ints, default=list(DEFAULT_LEVELS),
                        help="experiment 4 (batch) requests at once, comma separated; up to the server's slots")
    parser.add_argument("--json", type=Path, help="write settings and rounds as JSON")
    parser.add_argument("--csv", type=Path, help="write rounds as CSV (experiment 4 alone: its levels)")
    commands = parser.add_subparsers(dest="command", title="subcommands", metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        summary = (module.__doc__ or name).strip().splitlines()[0]
        module.add_arguments(commands.add_parser(name, help=summary, description=module.__doc__,
                                                 formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def _cell(value: object, width: int) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, float):
        text = f"{value:.1f}"
    else:
        text = str(value)
    return text[:width].rjust(width)


def format_row(row: RoundResult) -> str:
    line = " ".join(_cell(getattr(row, name), width) for name, width in COLUMNS)
    return f"{line}  ERROR: {row.error}" if row.error else line


def header() -> str:
    return " ".join(HEADERS.get(name, name)[:width].rjust(width) for name, width in COLUMNS)


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


def run_experiments(args: argparse.Namespace) -> int:
    only = args.only or ["input", "output", "cache"]
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    document = default_document()
    if args.doc:
        try:
            document = read_document(args.doc.read_bytes(), args.doc.name)
        except (OSError, DocumentError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    rows: list[RoundResult] = []
    levels: list[BatchLevel] = []
    with ExitStack() as stack:
        try:
            # experiment 4 alone: start the embedded engine with its slots at once, not a one-slot server first
            slots = max(args.concurrency, default=1) if set(only) == {"batch"} else 1
            target = target_from_args(args, stack, slots)
            conn = stack.enter_context(open_connection(target))
        except (EngineError, httpx.HTTPError, ValueError) as exc:
            print(f"error: cannot use the backend: {exc}", file=sys.stderr)
            return 2
        hold_server(target, conn, stack)
        try:
            fitted = fit_document(document, ex.cache_doc_budget(args.doc_tokens, conn.context, args.rounds),
                                  conn.counter) if "cache" in only else None
        except DocumentError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        sizes = ex.sizes_that_fit(args.sizes, conn.context)
        runs: dict[str, Callable[[], Iterator[RoundResult]]] = {
            "input": partial(
                ex.input_length_sweep, conn.backend, default_document(), conn.counter, sizes, args.repeats
            ),
            "output": partial(ex.output_length_sweep, conn.backend, args.lengths, args.repeats),
        }
        if fitted is not None:
            runs["cache"] = partial(ex.prefix_cache_rounds, conn.backend, fitted, strategies, args.rounds)
        if set(only) - {"batch"}:
            print(header())
        for name in only:
            print(f"[{name}] running...", file=sys.stderr)
            if name == "batch":
                batch_conn = batch_cli.batch_connection(conn, stack, args.concurrency, args.context)
                levels = list(batch_cli.run_sweep(batch_conn, args.concurrency))
                continue
            for row in runs[name]():
                rows.append(row)
                print(format_row(row), flush=True)
        settings = {
            **conn.describe(),
            "only": only,
            "rounds": args.rounds,
            "strategies": strategies,
            "doc": args.doc.name if args.doc else "default",
            "doc_tokens": args.doc_tokens,
            "sizes": sizes,
            "lengths": args.lengths,
            "repeats": args.repeats,
            "concurrency": args.concurrency,
        }
    for line in [*summary_lines(rows), *batch_cli.summary_lines(levels)]:
        print(line)
    if args.json:
        args.json.write_text(to_json(settings, rows, levels=levels))
    if args.csv:
        args.csv.write_text(to_csv(settings, rows or levels))
    return 1 if any(r.error for r in rows) or any(level.error for level in levels) else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command:
        return int(SUBCOMMANDS[args.command].run(args))
    return run_experiments(args)
