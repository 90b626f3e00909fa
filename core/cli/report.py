"""An HTML report of saved runs: one file, charts included, that opens offline.

``python -m core report RUN [RUN...] --html FILE [--lang en|zh]``: each RUN is an id (or its start)
from ``python -m core runs list``; runs of one experiment share its charts, so two machines
compare on one chart. The Vega JavaScript is inside the file (no CDN).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.cli.runs import open_for_cli
from core.report import ContentWords, build_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN", help="saved run ids (see `python -m core runs list`)")
    parser.add_argument("--html", type=Path, required=True, help="write the report to this file")
    parser.add_argument("--lang", choices=["en", "zh"], default="en", help="the report's language")


def run(args: argparse.Namespace) -> int:
    store = open_for_cli()
    entries = []
    for name in args.runs:
        saved = store.get(name)
        if saved is None:
            print(f"error: no saved run {name!r} (or more than one starts so); `python -m core runs list` shows them",
                  file=sys.stderr)
            return 2
        entries.append((saved, store.records(saved.id)))
    args.html.write_text(build_report(entries, ContentWords(args.lang), args.lang), encoding="utf-8")
    print(f"wrote {args.html}: {len(entries)} run{'' if len(entries) == 1 else 's'}", file=sys.stderr)
    return 0
