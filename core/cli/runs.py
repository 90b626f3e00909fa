"""Saved runs: list, show, export, import, rename and delete what the run store holds.

``python -m core runs list [--experiment NAME] [--json]``, ``runs show RUN``, ``runs export RUN
[-o FILE]``, ``runs import FILE...``, ``runs rename RUN LABEL``, ``runs delete RUN...``. A run is
named by its id or the start of it (as ``runs list`` prints it). The store is ``$PREFILL_LAB_DB``
(a path, default ``$XDG_DATA_HOME/prefill-lab/runs.sqlite``, or a ``postgresql://`` URL: a team's
store, where ``list`` shows each run's author and only the author renames or deletes it); an HTML
report is ``python -m core report``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from core.conclusions import render
from core.experiments import EXPERIMENTS
from core.store import ImportRefused, RunStore, SavedRun, export_run, import_export, machine_name, open_store
from core.store.dates import run_date
from core.words import ContentWords

LIST_COLUMNS = [("id", 18), ("experiment", 13), ("label", 40), ("machine", 36), ("date", 16), ("rounds", 6),
                ("status", 8)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="saved runs, newest first")
    listing.add_argument("--experiment", choices=list(EXPERIMENTS), help="only this experiment")
    listing.add_argument("--json", action="store_true", help="one JSON object per run instead of a table")
    actions.add_parser("show", help="one run: settings, machine and every round").add_argument("run")
    export = actions.add_parser("export", help="one run as JSON another machine can import")
    export.add_argument("run")
    export.add_argument("-o", "--output", type=Path, help="write to this file (default: stdout)")
    importing = actions.add_parser("import", help="exports from the app, `python -m core --json` or `runs export`")
    importing.add_argument("files", type=Path, nargs="+")
    rename = actions.add_parser("rename", help="give a run a new label")
    rename.add_argument("run")
    rename.add_argument("label")
    actions.add_parser("delete", help="delete runs and their rounds").add_argument("runs", nargs="+")


def open_for_cli() -> RunStore:
    """The store, saying on stderr when it had to fall back to memory."""
    store = open_store()
    if store.problem:
        print(f"warning: {store.problem}", file=sys.stderr)
    return store


def _date(saved: SavedRun) -> str:
    return run_date(saved.started_at)


def _find(store: RunStore, run: str) -> SavedRun | None:
    saved = store.get(run)
    if saved is None:
        print(f"error: no saved run {run!r} (or more than one starts so); `python -m core runs list` shows them",
              file=sys.stderr)
    return saved


def _list(store: RunStore, args: argparse.Namespace) -> int:
    runs = store.runs(args.experiment)
    if args.json:
        for item in runs:
            print(json.dumps({**asdict(item), "machine_name": machine_name(item.machine)}, ensure_ascii=False))
        return 0
    print(" ".join(name.ljust(width) for name, width in LIST_COLUMNS))
    for item in runs:
        machine = f"{machine_name(item.machine)} · {item.author}" if item.author else machine_name(item.machine)
        cells = [item.id, item.experiment, item.label, machine, _date(item), str(item.rounds), item.status]
        print(" ".join(cell[:width].ljust(width) for cell, (_, width) in zip(cells, LIST_COLUMNS, strict=True)))
    return 0


def _show(store: RunStore, args: argparse.Namespace) -> int:
    saved = _find(store, args.run)
    if saved is None:
        return 2
    print(f"{saved.label}\n  id {saved.id} · {saved.experiment} · {saved.status} · {_date(saved)} · "
          f"{saved.rounds} rounds · {saved.source}\n  machine: {machine_name(saved.machine)}")
    for line in _state_lines(saved) + _conclusion_lines(saved):
        print(f"  {line}")
    print(f"  settings: {json.dumps(saved.settings, ensure_ascii=False)}")
    for record in store.records(saved.id):
        print("  " + json.dumps({k: v for k, v in record.to_dict().items() if v not in (None, "", [])},
                                ensure_ascii=False))
    return 0


def _state_lines(saved: SavedRun) -> list[str]:
    """The machine during the run as the meter saw it, and the busy note the page shows beside it."""
    state, words = saved.state, ContentWords()
    lines = [f"machine state: {json.dumps(state.to_dict())}" if state.measured else
             "machine state: not measured (a remote API, a run saved before it was kept, or a system that would "
             "not tell)"]
    if state.busy and state.server_share is not None and state.others_s is not None:
        lines.append(words("roofline.busy", share=100 * state.server_share, others=state.others_s))
        if state.load is not None and state.cores:
            lines.append(words("roofline.busy_load", load=state.load, cores=state.cores))
    return lines


def _conclusion_lines(saved: SavedRun) -> list[str]:
    """What the run showed, computed once as it ended, in the content's words; its key and numbers where this
    version has no words for it (a run from a newer Prefill Lab)."""
    conclusion = saved.conclusion
    if conclusion is None:
        return []
    try:
        return ["conclusion:", *(f"  {line}" for line in render(conclusion, ContentWords()))]
    except (KeyError, IndexError, ValueError):
        return [f"conclusion: {json.dumps(conclusion.to_dict(), ensure_ascii=False)}"]


def _export(store: RunStore, args: argparse.Namespace) -> int:
    saved = _find(store, args.run)
    if saved is None:
        return 2
    text = export_run(saved, store.records(saved.id))
    if args.output:
        args.output.write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def _import(store: RunStore, args: argparse.Namespace) -> int:
    for path in args.files:
        try:
            ids = import_export(store, path, str(path))
        except OSError as exc:
            print(f"error: {path}: cannot be read ({exc})", file=sys.stderr)
            return 2
        except ImportRefused as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"imported {path}: {', '.join(ids)}")
    return 0


def _rename(store: RunStore, args: argparse.Namespace) -> int:
    target = _find(store, args.run)
    if target is None:
        return 2
    if not store.mine(target):
        return _not_yours(store, target)
    if not store.rename(target.id, args.label):
        print(f"error: {target.id} was not renamed: {store.problem}", file=sys.stderr)
        return 1
    print(f"renamed {target.id}: {args.label}")
    return 0


def _delete(store: RunStore, args: argparse.Namespace) -> int:
    found = [_find(store, name) for name in args.runs]
    if any(saved is None for saved in found):
        return 2  # nothing deleted when one name is wrong
    for saved in found:
        if saved is not None and not store.mine(saved):
            return _not_yours(store, saved)  # nothing deleted when one run is another author's
    for gone in found:
        assert gone is not None
        if not store.delete(gone.id):
            print(f"error: {gone.id} was not deleted: {store.problem}", file=sys.stderr)
            return 1
        print(f"deleted {gone.id}: {gone.label}")
    return 0


def _not_yours(store: RunStore, saved: SavedRun) -> int:
    print(f"error: {saved.id} is {saved.author or 'nobody'}'s run; on a team's store only its author renames or "
          f"deletes it (you are {store.author!r}: set PREFILL_LAB_AUTHOR to change that)", file=sys.stderr)
    return 2


ACTIONS = {"list": _list, "show": _show, "export": _export, "import": _import, "rename": _rename, "delete": _delete}


def run(args: argparse.Namespace) -> int:
    return ACTIONS[args.action](open_for_cli(), args)
