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

Every value is checked for range before anything is stored, so that no imported value can break a
list, a page or a report later: no ``NaN`` or ``Infinity`` anywhere (nor a number too large for a
float), a record's measures from 0 to `MAX_MEASURE`, a run's dates within what a clock can show, and
no settings, machine or summary nested deeper than `MAX_DEPTH`. Fields named like keys (``api_key``,
``OPENAI_API_KEY``, ``apiKey``) are dropped from the settings, machine and summary, as the store's own
writes drop them. Reading is linear in the file's size (100,000 rounds: BENCHMARKS.md).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from core.conclusions import Conclusion
from core.experiments import EXPERIMENTS
from core.export import Record, to_json
from core.records import renamed
from core.runs.runner import DONE
from core.secrets import without_keys
from core.store.codec import record_from_dict
from core.store.db import CUT, ENDED, IMPORTED, REFERENCE, RunStore, SavedRun
from core.store.machine import machine_name

EXPORT_FORMAT = 1
REFERENCE_FILE = Path(__file__).resolve().parents[2] / "samples" / "chapter_mac_studio.json"
REFERENCE_ID = "chapter-mac-studio"
MAX_MEASURE = 1e15  # larger than any count or milliseconds a run can measure; a float still holds it exactly
LAST_DATE = 253402300799.0  # 9999-12-31 23:59:59 UTC: the last second a date can be shown
MAX_DEPTH = 32  # settings, machine and summary are a few levels deep; more is not an export's
NOT_FINITE = re.compile(r"(?<![\w.\"])(-?Infinity|NaN)(?![\w\"])")
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


class _NotFinite(ValueError):
    """A ``NaN``, ``Infinity`` or a number too large for a float, met while parsing."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _constant(text: str) -> Any:
    raise _NotFinite(text)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests deeper than ``limit`` levels (no recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item]
    return False


def _loads(text: str, name: str) -> Any:
    """The export parsed, refused with the line of the first value no record can hold."""
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_constant)
    except _NotFinite as exc:
        found = NOT_FINITE.search(text) or re.search(re.escape(str(exc)), text)
        line = _line(text, found.start()) if found else 1
        raise ImportRefused(f"{name}, line {line}: {exc} is not a number a run can hold (no NaN, no Infinity, "
                            "nothing beyond a float's range). Correct that value, or export the run again.") from None
    except json.JSONDecodeError as exc:
        raise ImportRefused(f"{name}, line {exc.lineno}: not JSON ({exc.msg}). {HINT}") from exc
    except RecursionError:
        raise ImportRefused(f"{name}: JSON nested deeper than Python can read (an export is a few levels "
                            f"deep). {HINT}") from None


def _check_run(run: dict[str, Any]) -> None:
    """The run's dates: seconds since 1970 up to the year 9999, or null."""
    for name in ("started_at", "finished_at"):
        value = run.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= LAST_DATE:
            raise ImportRefused(f"\"run\".{name} is {value!r}; a date is seconds since 1970 (up to the "
                                "year 9999) or null. Correct it, or export the run again.")


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


def _element_line(text: str, start: int, index: int, decoder: json.JSONDecoder) -> int:
    """The line of element ``index`` of the JSON array starting at ``start``: looked for only when that
    element is refused (counting lines for every round read 19,000 rounds in 20 s)."""
    pos = start + 1
    for _ in range(index + 1):
        while text[pos] in " \t\r\n,":
            pos += 1
        at = pos
        _, pos = decoder.raw_decode(text, pos)
    return _line(text, at)


NUMBERS = frozenset({int, float})


@dataclass(frozen=True)
class _Field:
    """What one field of a record type accepts: the exact types JSON gives (a bool is not a number)."""

    types: frozenset[type]
    name: str


def _field(hint: Any) -> _Field:
    if get_origin(hint) is list:  # a level's streams, checked one by one
        return _Field(frozenset({list}), "a list")
    kinds = get_args(hint) or (hint,)
    types = {t for k in kinds for t in {float: (int, float), int: (int,)}.get(k, (k,))}
    names = [getattr(k, "__name__", str(k)) for k in kinds]
    return _Field(frozenset(types), " or ".join("null" if n == "NoneType" else n for n in names))


@cache
def _schema(cls: type) -> tuple[dict[str, _Field], frozenset[str]]:
    """A record type's fields and the ones it requires."""
    hints = get_type_hints(cls)
    required = frozenset(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
    return {f.name: _field(hints[f.name]) for f in fields(cls)}, required


def _measure(name: str, value: Any, where: str) -> None:
    """A number must be a measure: from 0 to `MAX_MEASURE`."""
    if not 0 <= value <= MAX_MEASURE:
        raise ImportRefused(f"{where}: {name!r} is {value!r}; a measure is from 0 to {MAX_MEASURE:.0e}.")


def _check_record(data: Any, cls: type, where: str) -> None:
    """Fields known, present, of their type, and each number a measure (streams: numbers and text only)."""
    if not isinstance(data, dict):
        raise ImportRefused(f"{where}: expected a record (a JSON object), found {type(data).__name__}. {HINT}")
    types, required = _schema(cls)
    if not data.keys() <= types.keys():
        unknown = sorted(set(data) - set(types))
        raise ImportRefused(f"{where}: unknown field {', '.join(map(repr, unknown))}; is the file from a newer "
                            "Prefill Lab? Import it there, or export it again with this version.")
    if not required <= data.keys():
        missing = sorted(required - set(data))
        raise ImportRefused(f"{where}: the field {', '.join(map(repr, missing))} is missing. {HINT}")
    for name, value in data.items():
        kind = type(value)
        if kind not in types[name].types:
            raise ImportRefused(f"{where}: {name!r} should be {types[name].name}, found {value!r}.")
        if kind in NUMBERS and not 0 <= value <= MAX_MEASURE:
            _measure(name, value, where)
    for number, stream in enumerate(data.get("streams") or [], start=1):
        if not isinstance(stream, dict):
            raise ImportRefused(f"{where}: stream {number} should be an object, found {stream!r}.")
        for name, value in stream.items():
            for item in value if isinstance(value, list) else [value]:  # chunk_times_s: a list of seconds
                if isinstance(item, dict | list):
                    raise ImportRefused(f"{where}, stream {number}: {name!r} should hold numbers or text.")
                if type(item) in NUMBERS:
                    _measure(name, item, f"{where}, stream {number}")


def read_export(text: str, name: str) -> list[Incoming]:
    """Check an export and split it into runs; raise `ImportRefused` naming ``name`` and the line."""
    decoder = json.JSONDecoder()
    data = _loads(text, name)
    if not isinstance(data, dict) or not ({"rounds", "levels"} & set(data)):
        raise ImportRefused(f"{name}, line 1: JSON, but not a Prefill Lab export (no \"rounds\" or \"levels\"). "
                            f"{HINT}")
    top = text.index("{")

    def line(key: str) -> int:
        """The line of a top-level member, looked for only for a message (it parses the file again)."""
        return _line(text, _members(text, top, decoder).get(key, top))

    run = data.get("run") or {}
    if not isinstance(run, dict):
        raise ImportRefused(f"{name}, line {line('run')}: \"run\" should be an object.")
    version = run.get("format", 1)
    if not isinstance(version, int) or version > EXPORT_FORMAT:
        raise ImportRefused(f"{name}, line {line('run')}: export format {version!r} is from a newer "
                            f"Prefill Lab (this one reads up to {EXPORT_FORMAT}). Import it with that version.")
    try:
        _check_run(run)
    except ImportRefused as exc:
        raise ImportRefused(f"{name}, line {line('run')}: {exc}") from None
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise ImportRefused(f"{name}, line {line('settings')}: \"settings\" should be an object.")
    for key, value in (("settings", settings), ("run", run)):
        if _depth_over(value, MAX_DEPTH):
            raise ImportRefused(f"{name}, line {line(key)}: \"{key}\" is nested more than {MAX_DEPTH} "
                                f"levels deep; an export's is a few levels. {HINT}")
    settings = without_keys(renamed(settings))
    by_experiment: dict[str, list[Record]] = {}
    for key in dict.fromkeys(spec.records for spec in EXPERIMENTS.values()):  # "rounds", "levels"
        items = data.get(key) or []
        if not isinstance(items, list):
            raise ImportRefused(f"{name}, line {line(key)}: \"{key}\" should be a list.")
        owners = [spec for spec in EXPERIMENTS.values() if spec.records == key]
        for index, item in enumerate(items):
            where = f"({key[:-1]} {index + 1})"
            try:
                item = renamed(item) if isinstance(item, dict) else item
                experiment = item.get("experiment") if isinstance(item, dict) and len(owners) > 1 else owners[0].id
                if experiment not in EXPERIMENTS or EXPERIMENTS[experiment].records != key:
                    raise ImportRefused(f"{where}: unknown experiment {experiment!r}; expected one of "
                                        f"{', '.join(spec.id for spec in owners)}.")
                _check_record(item, EXPERIMENTS[experiment].record, where)
            except ImportRefused as exc:
                at = _element_line(text, _members(text, top, decoder)[key], index, decoder)
                raise ImportRefused(f"{name}, line {at} {exc}") from None
            by_experiment.setdefault(experiment, []).append(record_from_dict(experiment, item))
    if not by_experiment:
        raise ImportRefused(f"{name}, line 1: an export with no rounds or levels; nothing to import.")
    return [Incoming(experiment, own_settings(settings, experiment), records, run)
            for experiment, records in by_experiment.items()]


def own_settings(settings: dict[str, Any], experiment: str) -> dict[str, Any]:
    """One experiment's settings in an export: the shared ones (backend, model) and, where the CLI wrote several
    experiments' settings each under its id, that experiment's own (their same-named fields never meet)."""
    own = settings.get(experiment)
    shared = {name: value for name, value in settings.items() if name not in EXPERIMENTS}
    return {**shared, **(renamed(own) if isinstance(own, dict) else {})}


def _summary(found: Any) -> dict[str, Any]:
    """An imported run's summary without fields named like keys, and its conclusion read as one (a finding's
    ``key`` names its words, not a secret), or left out when it is not one."""
    if not isinstance(found, dict):
        return {}
    summary: dict[str, Any] = without_keys({name: value for name, value in found.items() if name != "conclusion"})
    if isinstance(found.get("conclusion"), dict):
        try:
            summary["conclusion"] = Conclusion.from_dict(found["conclusion"]).to_dict()
        except ValueError:  # no status this version knows: the run comes in without it
            pass
    return summary


def import_export(store: RunStore, text: str, name: str, owner: str = "", source: str = IMPORTED,
                  run_id: str | None = None) -> list[str]:
    """Store every run of an export (all or none are checked first); return their ids."""
    incoming = read_export(text, name)
    ids = []
    for item in incoming:
        run = item.run
        label = str(run.get("label") or f"{item.settings.get('backend', '?')} · {item.settings.get('model', '?')} "
                    f"· {Path(name).name}")
        machine = without_keys(run["machine"]) if isinstance(run.get("machine"), dict) else {
            "label": f"imported: {name}"}
        status = str(run["status"]) if run.get("status") in (*ENDED, CUT) else DONE
        started = run.get("started_at") if isinstance(run.get("started_at"), int | float) else None
        new_id = store.begin(item.experiment, item.settings, label=label, machine=machine, owner=owner,
                             source=source, run_id=run_id if len(incoming) == 1 else None, started_at=started)
        store.add_all(new_id, item.records)
        finished = run.get("finished_at") if isinstance(run.get("finished_at"), int | float) else None
        summary = _summary(run.get("summary"))
        store.finish(new_id, status, summary, finished_at=finished)
        ids.append(new_id)
    return ids


def _date(value: Any) -> float | None:
    """A stored date as an export holds it: null for one no clock can show (1e300, Infinity: an older
    version's import), which `_check_run` would refuse on the way back in."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= LAST_DATE
    return float(value) if ok else None


def export_run(saved: SavedRun, records: Sequence[Record]) -> str:
    """A stored run as an export another machine can import (cut runs are exported as stopped)."""
    run = {"format": EXPORT_FORMAT, "experiment": saved.experiment, "label": saved.label,
           "machine": saved.machine, "machine_name": machine_name(saved.machine), "source": saved.source,
           "status": saved.status if saved.status in ENDED else CUT,  # a run still going exports as cut
           "started_at": _date(saved.started_at), "finished_at": _date(saved.finished_at), "summary": saved.summary}
    spec = EXPERIMENTS.get(saved.experiment)
    return to_json(saved.settings, {spec.records if spec else "rounds": records}, run=run)


def seed_reference(store: RunStore) -> None:
    """The chapter's published Mac Studio figures, a labelled reference run (added once)."""
    if store.get(REFERENCE_ID) is None:
        import_export(store, REFERENCE_FILE.read_text(), REFERENCE_FILE.name, source=REFERENCE, run_id=REFERENCE_ID)
