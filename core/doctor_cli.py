"""Find what breaks the prefix cache in an agent's logged requests (the cache doctor).

``python -m core doctor FILE...``. Without ``--backend`` the analysis is static: the documented stable serialization and token
estimates (about 4 characters per token, labelled as estimates). ``--backend local`` (or ``llama
--url``) renders each round with the server's chat template and counts tokens exactly; add
``--replay`` to send the rounds and print what the server really recomputed and reused.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx

from core import doctor
from core.backends import BACKENDS
from core.cli_target import add_target_arguments, target_from_args
from core.connect import open_connection
from core.engine import EngineError
from core.prompts import EstimatingTokenCounter


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, help="a JSONL/JSON request log, or one text file per round")
    servers = [name for name, spec in BACKENDS.items() if spec.is_llama_server]
    add_target_arguments(parser, servers, None, context=False)
    parser.add_argument("--replay", action="store_true", help="also send the rounds and report what was recomputed")
    parser.add_argument("--provider", choices=sorted(doctor.BILLING_RULES), help="show what this provider bills as cached")
    parser.add_argument("--json", type=Path, help="write one record per round as JSON")


def run(args: argparse.Namespace) -> int:
    """Without --backend: a static analysis; with a llama-server: exact tokens, and --replay."""
    try:
        transcript = doctor.load_paths(args.files)
    except (OSError, doctor.TranscriptError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for error in transcript.errors:
        print(f"skipped: {error}", file=sys.stderr)
    with ExitStack() as stack:
        try:
            conn = None if args.backend is None else stack.enter_context(open_connection(target_from_args(args, stack)))
        except (EngineError, httpx.HTTPError, ValueError) as exc:
            print(f"error: cannot use the backend: {exc}", file=sys.stderr)
            return 2
        counter = conn.counter if conn else EstimatingTokenCounter()
        analysis = doctor.analyse(transcript, counter, conn.backend if conn else None)
        replayed = list(doctor.replay(transcript, conn.backend)) if args.replay and conn else []
    print(f"{len(analysis.findings)} rounds, rendered with the {analysis.rendering}; tokens "
          f"{'exact' if counter.exact else 'estimated (~4 chars/token)'}.")
    print(f"{'round':>5} {'breaks':>6} {'cause':>22} {'msg':>4} {'field':>10} {'diff@':>7} {'prefix':>7} "
          f"{'prompt':>7} {'recomp':>7} {'append':>7}" + ("  replay: recomputed/reused" if replayed else ""))
    for index, f in enumerate(analysis.findings):
        line = (f"{f.round:>5} {'YES' if f.breaks_cache else '-':>6} {f.cause:>22} {f.message_index if f.message_index is not None else '-':>4} "
                f"{f.field or '-':>10} {f.first_diff_char if f.first_diff_char is not None else '-':>7} "
                f"{f.common_prefix_tokens:>7} {f.prompt_tokens:>7} {f.recomputed_tokens:>7} {f.append_only_recomputed_tokens:>7}")
        if index < len(replayed):
            row = replayed[index]
            line += f"  {row.recomputed_tokens}/{row.reused_tokens}" + (f" ERROR {row.error}" if row.error else "")
        print(line)
    first = analysis.first_break
    totals = analysis.totals()
    if first:
        print(f"The cache first breaks in round {first.round}: {first.cause} in message {first.message_index} "
              f"({first.field}) at character {first.first_diff_char}.")
    else:
        print("No round breaks the cache: every round extends the previous one.")
    print(f"Recomputed in all: {totals['recomputed']:,} tokens; an append-only version: {totals['append_only']:,}.")
    if args.provider:
        rows = doctor.billing(analysis, doctor.BILLING_RULES[args.provider])
        cost, ideal = sum(r["cost"] for r in rows), sum(r["append_only_cost"] for r in rows)
        print(f"{args.provider}: {sum(r['cached_tokens'] for r in rows):,} tokens billed as cached, "
              f"${cost:.6f} input cost vs ${ideal:.6f} append-only.")
    if args.json:
        records = []
        for index, f in enumerate(analysis.findings):
            record = f.to_dict()
            record.pop("old_snippet"), record.pop("new_snippet")
            if index < len(replayed):
                record["replay"] = replayed[index].to_dict()
            records.append(record)
        args.json.write_text(json.dumps({"rendering": analysis.rendering, "errors": analysis.errors, "rounds": records}, indent=2))
    return 0
