"""Runs in and out of the store as the JSON exports the app and the CLI write (`core.export.to_json`).

An export is ``{"settings", "rounds", "summary"}`` (experiment 4: ``"levels"`` too); one written
from the store also has ``"run"``: its label, machine, experiment, status and dates, and
``"format"`` (`EXPORT_FORMAT`). Exports older than ``"run"`` (the app's downloads, ``python -m core
--json``) are read as format 1 with an unknown machine. A CLI export of several experiments becomes
one run per experiment.

An import reads the whole file before it writes anything: a file that is not an export, or a
record it does not understand, is refused with the file's name, the line and what was expected.
Old spellings (``reused_tokens``, ``prefix_cache``: `core.records.renamed`) are migrated; nothing else
is guessed: a field this version does not know is refused, not dropped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from core.experiments import EXPERIMENTS
from core.export import Record, to_json
from core.records import renamed
from core.runs.runner import DONE
from core.store.codec import record_from_dict
from core.store.db import CUT, ENDED, IMPORTED, REFERENCE, RunStore, SavedRun
from core.store.machine import machine_name

EXPORT_FORMAT = 1
REFERENCE_FILE = Path(__file__).resolve().parents[2] / "samples" / "chapter_mac_studio.json"
REFERENCE_ID = "chapter-mac-studio"
HINT = "Give a JSON file from the app's JSON download, `python -m core --json` or `python -m core runs export`."


class ImportRefused(ValueError):
    """A file that cannot be imported; the message names the file, the line and what was expected."""


@dataclass(frozen=True)
class Incoming:
    """One run read from an export, checked, not yet stored."""

    experiment: str
    settings: dict[str, Any]
    records: list[Record]
    run: dict[str, Any]


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _members(text: str, start: int, decoder: json.JSONDecoder) -> dict[str, int]:
    """The offset of each member's value in the JSON object starting at ``start`` (the text is valid JSON)."""
    offsets: dict[str, int] = {}
    pos = start + 1
    while True:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "}":
            return offsets
        key, pos = decoder.raw_decode(text, pos)
        while text[pos] in " \t\r\n:":
            pos += 1
        offsets[key] = pos
        _, pos = decoder.raw_decode(text, pos)


def _elements(text: str, start: int, decoder: json.JSONDecoder) -> list[int]:
    """The offset of each element of the JSON array starting at ``start``."""
    offsets: list[int] = []
    pos = start + 1
    while True:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "]":
            return offsets
        offsets.append(pos)
        _, pos = decoder.raw_decode(text, pos)


@cache
def _schema(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A record type's field types and the fields it requires."""
    hints = get_type_hints(cls)
    required = frozenset(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
    return {f.name: hints[f.name] for f in fields(cls)}, required


def _accepts(hint: Any, value: Any) -> bool:
    for kind in get_args(hint) or (hint,):
        if kind is type(None) and value is None:
            return True
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind in (str, bool) and isinstance(value, kind):
            return True
        if get_origin(kind) is list and isinstance(value, list):
            return True
    return False


def _type_name(hint: Any) -> str:
    names = [getattr(k, "__name__", str(k)) for k in (get_args(hint) or (hint,))]
    return " or ".join("null" if n == "NoneType" else n for n in names)


def _check_record(data: Any, cls: type, where: str) -> None:
    if not isinstance(data, dict):
        raise ImportRefused(f"{where}: expected a record (a JSON object), found {type(data).__name__}. {HINT}")
    types, required = _schema(cls)
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise ImportRefused(f"{where}: unknown field {', '.join(map(repr, unknown))}; is the file from a newer "
                            "Prefill Lab? Import it there, or export it again with this version.")
    missing = sorted(required - set(data))
    if missing:
        raise ImportRefused(f"{where}: the field {', '.join(map(repr, missing))} is missing. {HINT}")
    for name, value in data.items():
        if name != "streams" and not _accepts(types[name], value):
            raise ImportRefused(f"{where}: {name!r} should be {_type_name(types[name])}, found {value!r}.")


def read_export(text: str, name: str) -> list[Incoming]:
    """Check an export and split it into runs; raise `ImportRefused` naming ``name`` and the line."""
    decoder = json.JSONDecoder()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportRefused(f"{name}, line {exc.lineno}: not JSON ({exc.msg}). {HINT}") from exc
    if not isinstance(data, dict) or not ({"rounds", "levels"} & set(data)):
        raise ImportRefused(f"{name}, line 1: JSON, but not a Prefill Lab export (no \"rounds\" or \"levels\"). "
                            f"{HINT}")
    top = text.index("{")
    offsets = _members(text, top, decoder)
    run = data.get("run") or {}
    if not isinstance(run, dict):
        raise ImportRefused(f"{name}, line {_line(text, offsets['run'])}: \"run\" should be an object.")
    version = run.get("format", 1)
    if not isinstance(version, int) or version > EXPORT_FORMAT:
        raise ImportRefused(f"{name}, line {_line(text, offsets['run'])}: export format {version!r} is from a newer "
                            f"Prefill Lab (this one reads up to {EXPORT_FORMAT}). Import it with that version.")
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise ImportRefused(f"{name}, line {_line(text, offsets['settings'])}: \"settings\" should be an object.")
    settings = renamed(settings)
    by_experiment: dict[str, list[Record]] = {}
    for key in dict.fromkeys(spec.records for spec in EXPERIMENTS.values()):  # "rounds", "levels"
        items = data.get(key) or []
        if not isinstance(items, list):
            raise ImportRefused(f"{name}, line {_line(text, offsets[key])}: \"{key}\" should be a list.")
        lines = [_line(text, at) for at in _elements(text, offsets[key], decoder)] if items else []
        owners = [spec for spec in EXPERIMENTS.values() if spec.records == key]
        for index, (item, line) in enumerate(zip(items, lines, strict=True), start=1):
            where = f"{name}, line {line} ({key[:-1]} {index})"
            item = renamed(item) if isinstance(item, dict) else item
            experiment = item.get("experiment") if isinstance(item, dict) and len(owners) > 1 else owners[0].id
            if experiment not in EXPERIMENTS or EXPERIMENTS[experiment].records != key:
                raise ImportRefused(f"{where}: unknown experiment {experiment!r}; expected one of "
                                    f"{', '.join(spec.id for spec in owners)}.")
            _check_record(item, EXPERIMENTS[experiment].record, where)
            by_experiment.setdefault(experiment, []).append(record_from_dict(experiment, item))
    if not by_experiment:
        raise ImportRefused(f"{name}, line 1: an export with no rounds or levels; nothing to import.")
    return [Incoming(experiment, settings, records, run) for experiment, records in by_experiment.items()]


def import_export(store: RunStore, text: str, name: str, owner: str = "", source: str = IMPORTED,
                  run_id: str | None = None) -> list[str]:
    """Store every run of an export (all or none are checked first); return their ids."""
    incoming = read_export(text, name)
    ids = []
    for item in incoming:
        run = item.run
        label = str(run.get("label") or f"{item.settings.get('backend', '?')} · {item.settings.get('model', '?')} "
                    f"· {Path(name).name}")
        machine = run.get("machine") if isinstance(run.get("machine"), dict) else {"label": f"imported: {name}"}
        status = str(run["status"]) if run.get("status") in (*ENDED, CUT) else DONE
        started = run.get("started_at") if isinstance(run.get("started_at"), int | float) else None
        new_id = store.begin(item.experiment, item.settings, label=label, machine=machine, owner=owner,
                             source=source, run_id=run_id if len(incoming) == 1 else None, started_at=started)
        for seq, record in enumerate(item.records, start=1):
            store.add(new_id, record, seq)
        finished = run.get("finished_at") if isinstance(run.get("finished_at"), int | float) else None
        summary = run.get("summary") if isinstance(run.get("summary"), dict) else {}
        store.finish(new_id, status, summary, finished_at=finished)
        ids.append(new_id)
    return ids


def export_run(saved: SavedRun, records: Sequence[Record]) -> str:
    """A stored run as an export another machine can import (cut runs are exported as stopped)."""
    run = {"format": EXPORT_FORMAT, "experiment": saved.experiment, "label": saved.label,
           "machine": saved.machine, "machine_name": machine_name(saved.machine), "source": saved.source,
           "status": saved.status if saved.status in ENDED else CUT,  # a run still going exports as cut
           "started_at": saved.started_at, "finished_at": saved.finished_at, "summary": saved.summary}
    spec = EXPERIMENTS.get(saved.experiment)
    return to_json(saved.settings, {spec.records if spec else "rounds": records}, run=run)


def seed_reference(store: RunStore) -> None:
    """The chapter's published Mac Studio figures, a labelled reference run (added once)."""
    if store.get(REFERENCE_ID) is None:
        import_export(store, REFERENCE_FILE.read_text(), REFERENCE_FILE.name, source=REFERENCE, run_id=REFERENCE_ID)
