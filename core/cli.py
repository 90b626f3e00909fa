"""Command line: ``python -m core`` runs the experiments, like the chapter's scripts.

Examples::

    python -m core                                  # all three on the embedded local server
    python -m core --only cache --rounds 6 --json cache.json
    python -m core --backend llama --url http://127.0.0.1:8080
    python -m core --backend api --preset DeepSeek --only cache   # key from $DEEPSEEK_API_KEY
    python -m core doctor agent_log.jsonl --json findings.json    # the cache doctor (see core.doctor_cli)

The per-round table goes to stdout, progress to stderr. A key is read from the environment
variable of the preset (or ``--key-env``), never from the command line, so it stays out of shell
history and process listings.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

import httpx

from core import experiments as ex
from core.backends import PRESETS
from core.connect import Connection, connect_api, connect_local_or_llama
from core.engine import EngineError
from core.export import to_csv, to_json
from core.prompts import STRATEGIES, DocumentError, default_document, read_document
from core.results import RoundResult
from core.secrets import key_from_env

COLUMNS = [("experiment", 13), ("strategy", 17), ("round", 5), ("prompt_tokens", 9), ("recomputed_tokens", 10),
           ("reused_tokens", 9), ("prefill_ms", 10), ("ttft_ms", 9), ("output_tokens", 7), ("decode_ms", 9),
           ("total_ms", 9)]
HEADERS = {"prompt_tokens": "prompt", "recomputed_tokens": "recomputed", "reused_tokens": "reused",
           "output_tokens": "output", "strategy": "strategy"}


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description="Measure prefill, decode and prefix caching.")
    parser.add_argument("--backend", choices=["local", "llama", "api"], default="local",
                        help="local: start the embedded llama-server (default); llama: one at --url; api: OpenAI-compatible")
    parser.add_argument("--url", help="llama-server URL, or an API base URL (overrides the preset's)")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="API preset (base URL, model, key variable)")
    parser.add_argument("--model", help="model name for --backend api")
    parser.add_argument("--key-env", help="environment variable holding the API key")
    parser.add_argument("--only", choices=["input", "output", "cache"], action="append",
                        help="run only this experiment (repeatable); default: all three")
    parser.add_argument("--doc", type=Path, help="UTF-8 text file replacing the default document (experiment 3)")
    parser.add_argument("--rounds", type=int, default=ex.DEFAULT_ROUNDS, help="experiment 3 rounds per strategy")
    parser.add_argument("--strategies", default=",".join(ex.DEFAULT_STRATEGIES),
                        help=f"experiment 3 strategies, comma separated: {', '.join(STRATEGIES)}")
    parser.add_argument("--doc-tokens", type=int, default=ex.DEFAULT_CACHE_DOC_TOKENS, help="experiment 3 document budget")
    parser.add_argument("--sizes", type=_ints, default=list(ex.DEFAULT_INPUT_SIZES), help="experiment 1 input tokens")
    parser.add_argument("--lengths", type=_ints, default=list(ex.DEFAULT_OUTPUT_LENGTHS), help="experiment 2 output tokens")
    parser.add_argument("--repeats", type=int, default=1, help="repeats per size/length (medians are reported)")
    parser.add_argument("--context", type=int, default=8192, help="context size for the embedded server")
    parser.add_argument("--json", type=Path, help="write settings and rounds as JSON")
    parser.add_argument("--csv", type=Path, help="write rounds as CSV")
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


def connect(args: argparse.Namespace, stack: ExitStack) -> Connection:
    if args.backend in ("local", "llama"):
        return connect_local_or_llama(args.backend, args.url, stack, args.context)
    preset = PRESETS.get(args.preset) if args.preset else None
    base_url = args.url or (preset.base_url if preset else None)
    model = args.model or (preset.model if preset else "")
    if not base_url or not model:
        raise SystemExit("--backend api needs --preset or both --url and --model")
    key = key_from_env(args.key_env or (preset.key_env if preset else None))
    conn = connect_api(base_url, model, key)
    stack.callback(conn.backend.close)
    return conn


def summary_lines(rows: Sequence[RoundResult]) -> Iterator[str]:
    inp, out = ex.summarize_input(rows), ex.summarize_output(rows)
    if inp.prefill_tokens_per_s:
        per_1k = inp.ms_per_1k()
        yield f"Experiment 1: prefill {inp.prefill_tokens_per_s:,.0f} tokens/s" + (f", {per_1k:.0f} ms per 1k input tokens" if per_1k else "")
    if out.ms_per_token:
        yield f"Experiment 2: decode {out.decode_tokens_per_s:,.1f} tokens/s ({out.ms_per_token:.1f} ms per output token)"
    ratio = ex.prefill_decode_ratio(inp, out)
    if ratio:
        yield f"Prefill processes a token {ratio:.0f}x faster than decode produces one."
    cache = ex.summarize_cache(rows)
    for s in cache.values():
        yield (f"Experiment 3 [{s.strategy}]: {s.rounds} rounds, recomputed {s.recomputed_total} and reused "
               f"{s.reused_total} tokens in total; from round 2 a median {s.recomputed_after_first or 0:.0f} recomputed, "
               f"TTFT {s.ttft_median_after_first_ms or 0:.0f} ms")
    for name, ratio in ex.recomputed_ratio(cache).items():
        yield f"{name} recomputed {ratio:.1f}x the tokens append_only did."


def run(args: argparse.Namespace) -> int:
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
    with ExitStack() as stack:
        try:
            conn = connect(args, stack)
        except (EngineError, httpx.HTTPError) as exc:
            print(f"error: cannot use the backend: {exc}", file=sys.stderr)
            return 2
        try:
            ex.cache_doc_budget(args.doc_tokens, conn.context, args.rounds)
        except DocumentError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        sizes = ex.sizes_that_fit(args.sizes, conn.context)
        runs = {
            "input": lambda: ex.input_length_sweep(conn.backend, default_document(), conn.counter, sizes, args.repeats),
            "output": lambda: ex.output_length_sweep(conn.backend, args.lengths, args.repeats),
            "cache": lambda: ex.prefix_cache_rounds(conn.backend, document, conn.counter, strategies, args.rounds,
                                                    ex.cache_doc_budget(args.doc_tokens, conn.context, args.rounds)),
        }
        print(header())
        for name in only:
            print(f"[{name}] running...", file=sys.stderr)
            for row in runs[name]():
                rows.append(row)
                print(format_row(row), flush=True)
        settings = {**conn.describe(), "only": only, "rounds": args.rounds, "strategies": strategies,
                    "doc": args.doc.name if args.doc else "default", "doc_tokens": args.doc_tokens,
                    "sizes": sizes, "lengths": args.lengths, "repeats": args.repeats}
    for line in summary_lines(rows):
        print(line)
    if args.json:
        args.json.write_text(to_json(settings, rows))
    if args.csv:
        args.csv.write_text(to_csv(settings, rows))
    return 1 if any(r.error for r in rows) else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        from core.doctor_cli import main as doctor_main

        return doctor_main(argv[1:])
    return run(build_parser().parse_args(argv))
