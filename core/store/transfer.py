"""Runs in and out of the store as the JSON exports the app and the CLI write (`core.export.to_json`).

An export is ``{"settings", "rounds", "summary"}`` (experiment 4: ``"levels"`` too); one written
from the store also has ``"run"``: its label, machine, experiment, status and dates, and
``"format"`` (`EXPORT_FORMAT`). Exports older than ``"run"`` (the app's downloads, ``python -m core
--json``) are read as format 1 with an unknown machine. A CLI export of several experiments becomes
one run per experiment.

An import reads the whole file before it writes anything: a file that is not an export, or a
record it does not understand, is refused with the file's name, the line and what was expected. It reads
the file a value at a time (`core.store.stream`), twice: once to check it, once to store it a batch of
records at a time, so that memory holds a batch and never the file.
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

import io
import json
import math
import re
from collections.abc import Iterator, Sequence
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
from core.store.stream import Broken, JsonStream
from core.words import Sentence, said

EXPORT_FORMAT = 1
REFERENCE_FILE = Path(__file__).resolve().parents[2] / "samples" / "chapter_mac_studio.json"
REFERENCE_ID = "chapter-mac-studio"
MAX_MEASURE = 1e15  # larger than any count or milliseconds a run can measure; a float still holds it exactly
LAST_DATE = 253402300799.0  # 9999-12-31 23:59:59 UTC: the last second a date can be shown
MAX_DEPTH = 32  # settings, machine and summary are a few levels deep; more is not an export's
NOT_FINITE = re.compile(r"(?<![\w.\"])(-?Infinity|NaN)(?![\w\"])")
HINT = Sentence("import_refused.hint")


class ImportRefused(ValueError):
    """A file that cannot be imported; the message (a `Sentence` from ``[import_refused]``) names the file, the
    line and what was expected."""


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


def _check_run(run: dict[str, Any]) -> None:
    """The run's dates: seconds since 1970 up to the year 9999, or null."""
    for name in ("started_at", "finished_at"):
        value = run.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= LAST_DATE:
            raise ImportRefused(Sentence("import_refused.bad_date", field=name, value=repr(value)))


NUMBERS = frozenset({int, float})


@dataclass(frozen=True)
class _Field:
    """What one field of a record type accepts: the exact types JSON gives (a bool is not a number)."""

    types: frozenset[type]
    name: str


def _field(hint: Any) -> _Field:
    if get_origin(hint) is list:  # a level's streams, checked one by one
        return _Field(frozenset({list}), Sentence("import_refused.a_list"))
    kinds = get_args(hint) or (hint,)
    types = {t for k in kinds for t in {float: (int, float), int: (int,)}.get(k, (k,))}
    names = ["null" if n == "NoneType" else n for n in (getattr(k, "__name__", str(k)) for k in kinds)]
    return _Field(frozenset(types), _either(names))


def _either(names: list[str]) -> str:
    """``int or float or null``, its "or" said in the page's language."""
    if len(names) == 1:
        return names[0]
    return Sentence("import_refused.either", first=names[0], rest=_either(names[1:]))


@cache
def _schema(cls: type) -> tuple[dict[str, _Field], frozenset[str]]:
    """A record type's fields and the ones it requires."""
    hints = get_type_hints(cls)
    required = frozenset(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
    return {f.name: _field(hints[f.name]) for f in fields(cls)}, required


def _measure(name: str, value: Any, where: Sentence) -> None:
    """A number must be a measure: from 0 to `MAX_MEASURE`."""
    if not 0 <= value <= MAX_MEASURE:
        raise ImportRefused(Sentence("import_refused.out_of_range", where=where, field=repr(name), value=repr(value),
                                     most=f"{MAX_MEASURE:.0e}"))


def _check_record(data: Any, cls: type, where: Sentence) -> None:
    """Fields known, present, of their type, and each number a measure (streams: numbers and text only)."""
    if not isinstance(data, dict):
        raise ImportRefused(Sentence("import_refused.not_record", where=where, found=type(data).__name__, hint=HINT))
    types, required = _schema(cls)
    if not data.keys() <= types.keys():
        unknown = sorted(set(data) - set(types))
        raise ImportRefused(Sentence("import_refused.unknown_field", where=where, fields=", ".join(map(repr, unknown))))
    if not required <= data.keys():
        missing = sorted(required - set(data))
        raise ImportRefused(Sentence("import_refused.missing", where=where, fields=", ".join(map(repr, missing)),
                                     hint=HINT))
    for name, value in data.items():
        kind = type(value)
        if kind not in types[name].types:
            raise ImportRefused(Sentence("import_refused.wrong_type", where=where, field=repr(name),
                                         expected=types[name].name, value=repr(value)))
        if kind in NUMBERS and not 0 <= value <= MAX_MEASURE:
            _measure(name, value, where)
    for number, stream in enumerate(data.get("streams") or [], start=1):
        if not isinstance(stream, dict):
            raise ImportRefused(Sentence("import_refused.stream_not_object", where=where, number=number,
                                         value=repr(stream)))
        in_stream = Sentence("import_refused.in_stream", where=where, number=number)
        for name, value in stream.items():
            for item in value if isinstance(value, list) else [value]:  # chunk_times_s: a list of seconds
                if isinstance(item, dict | list):
                    raise ImportRefused(Sentence("import_refused.not_flat", where=in_stream, field=repr(name)))
                if type(item) in NUMBERS:
                    _measure(name, item, in_stream)


def _record(item: Any, key: str, index: int) -> tuple[str, dict[str, Any]]:
    """Element ``index`` of the ``key`` list checked: its experiment and its fields, old spellings made current."""
    where = Sentence(WHERE[key], n=index + 1)  # (round 3), (level 2)
    owners = OWNERS[key]
    item = renamed(item) if isinstance(item, dict) else item
    experiment = item.get("experiment") if isinstance(item, dict) and len(owners) > 1 else owners[0].id
    if experiment not in EXPERIMENTS or EXPERIMENTS[experiment].records != key:
        raise ImportRefused(Sentence("import_refused.unknown_experiment", where=where, experiment=repr(experiment),
                                     expected=", ".join(spec.id for spec in owners)))
    _check_record(item, EXPERIMENTS[experiment].record, where)
    return experiment, item


RECORD_KEYS = tuple(dict.fromkeys(spec.records for spec in EXPERIMENTS.values()))  # "rounds", "levels"
WHERE = {"rounds": "import_refused.in_round", "levels": "import_refused.in_level",
         "roofline": "import_refused.in_roofline", "steps": "import_refused.in_step", "rates": "import_refused.in_rate"}
OWNERS = {key: [spec for spec in EXPERIMENTS.values() if spec.records == key] for key in RECORD_KEYS}
DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_constant)
BATCH = 1000  # records stored per transaction on an import's second reading
Export = str | bytes | Path  # an export's text, an upload's bytes, or its file (never read whole)


class _Reading:
    """One reading of an export, a value at a time (`core.store.stream`): the members other than the records
    are kept, each record is checked and handed on; the first record refused under each key is kept in
    `refused` while the rest of the file is still read, so that a file broken further on is said as such."""

    def __init__(self, export: Export, name: str) -> None:
        self.export, self.name = export, name
        self.members: dict[str, Any] = {}
        self.lines: dict[str, int] = {}  # the line of each member's value
        self.refused: dict[str, Sentence] = {}

    def records(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(experiment, fields) of each record, in the file's order; a file that is not JSON is refused here."""
        raw = self.export.open("rb") if isinstance(self.export, Path) else io.BytesIO(
            self.export.encode() if isinstance(self.export, str) else self.export)
        with raw:
            stream = JsonStream(raw, DECODER)
            try:
                yield from self._document(stream)
            except Broken as exc:
                raise ImportRefused(Sentence("import_refused.broken", name=self.name, line=exc.line, reason=exc.reason,
                                             hint=HINT)) from None
            except ImportRefused:
                raise
            except _NotFinite as exc:  # met in the value that starts where reading is
                found = NOT_FINITE.search(stream.text, stream.pos) or re.compile(re.escape(str(exc))).search(
                    stream.text, stream.pos)
                line = stream.line(found.start() if found else None)
                raise ImportRefused(Sentence("import_refused.not_finite", name=self.name, line=line,
                                             value=str(exc))) from None
            except ValueError:  # an integer longer than Python reads (4,300 digits)
                raise ImportRefused(Sentence("import_refused.too_long", name=self.name, line=stream.line())) from None
            except RecursionError:
                raise ImportRefused(Sentence("import_refused.too_deep", name=self.name, hint=HINT)) from None

    def _document(self, stream: JsonStream) -> Iterator[tuple[str, dict[str, Any]]]:
        if stream.peek() != "{":  # JSON or not? Read to its end (an array an element at a time)
            if stream.peek() == "[":
                for _ in stream.elements():
                    stream.value()
            else:
                stream.value()
            stream.end()
            return
        for key, line in stream.members():
            if key in self.lines:
                raise ImportRefused(Sentence("import_refused.given_twice", name=self.name, line=line, member=key,
                                             hint=HINT))
            self.lines[key] = line
            if key not in RECORD_KEYS or stream.peek() != "[":
                self.members[key] = stream.value()
                continue
            self.members[key] = []
            for index in stream.elements():
                item = stream.value()
                if key in self.refused:
                    continue
                try:
                    yield _record(item, key, index)
                except ImportRefused as exc:
                    self.refused[key] = Sentence("import_refused.record_at", name=self.name,
                                                 line=stream.line(stream.began), error=said(exc))
        stream.end()

    def line(self, key: str) -> int:
        return self.lines.get(key, 1)


@dataclass(frozen=True)
class _Survey:
    """What the first reading of an export found: its settings and run, and per experiment its records."""

    settings: dict[str, Any]
    run: dict[str, Any]
    counts: dict[str, int]


def _survey(export: Export, name: str) -> _Survey:
    """Read the whole export once, keeping no record; raise `ImportRefused` naming ``name`` and the line."""
    reading = _Reading(export, name)
    counts: dict[str, int] = {}
    for experiment, _ in reading.records():
        counts[experiment] = counts.get(experiment, 0) + 1
    data = reading.members
    if not ({"rounds", "levels"} & set(data)):
        raise ImportRefused(Sentence("import_refused.not_export", name=name, hint=HINT))
    run = data.get("run") or {}
    if not isinstance(run, dict):
        raise ImportRefused(Sentence("import_refused.not_object", name=name, line=reading.line("run"), member="run"))
    version = run.get("format", 1)
    if not isinstance(version, int) or version > EXPORT_FORMAT:
        raise ImportRefused(Sentence("import_refused.newer_format", name=name, line=reading.line("run"),
                                     version=repr(version), most=EXPORT_FORMAT))
    try:
        _check_run(run)
    except ImportRefused as exc:
        raise ImportRefused(Sentence("import_refused.at", name=name, line=reading.line("run"),
                                     error=said(exc))) from None
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise ImportRefused(Sentence("import_refused.not_object", name=name, line=reading.line("settings"),
                                     member="settings"))
    for key, value in (("settings", settings), ("run", run)):
        if _depth_over(value, MAX_DEPTH):
            raise ImportRefused(Sentence("import_refused.too_nested", name=name, line=reading.line(key), member=key,
                                         most=MAX_DEPTH, hint=HINT))
    for key in RECORD_KEYS:
        if not isinstance(data.get(key) or [], list):
            raise ImportRefused(Sentence("import_refused.not_list", name=name, line=reading.line(key), member=key))
        if key in reading.refused:
            raise ImportRefused(reading.refused[key])
    if not counts:
        raise ImportRefused(Sentence("import_refused.empty", name=name))
    order = {experiment: counts[experiment] for key in RECORD_KEYS for experiment in counts
             if EXPERIMENTS[experiment].records == key}
    return _Survey(without_keys(renamed(settings)), run, order)


def _batches(export: Export, name: str, survey: _Survey) -> Iterator[tuple[str, int, list[Record]]]:
    """The second reading: (experiment, number of its first record, records) a `BATCH` at a time."""
    reading = _Reading(export, name)
    waiting: dict[str, list[Record]] = {experiment: [] for experiment in survey.counts}
    done = dict.fromkeys(survey.counts, 0)
    for experiment, item in reading.records():
        if experiment not in waiting:
            raise ImportRefused(Sentence("import_refused.changed_experiment", name=name, experiment=experiment))
        batch = waiting[experiment]
        batch.append(record_from_dict(experiment, item))
        if len(batch) == BATCH:
            yield experiment, done[experiment] + 1, batch
            done[experiment] += len(batch)
            waiting[experiment] = []
    if reading.refused or any(done[e] + len(waiting[e]) != n for e, n in survey.counts.items()):
        raise ImportRefused(Sentence("import_refused.changed", name=name))
    for experiment, batch in waiting.items():
        if batch:
            yield experiment, done[experiment] + 1, batch


def read_export(export: Export, name: str) -> list[Incoming]:
    """Check an export and split it into runs, every record in memory; raise `ImportRefused` naming ``name``
    and the line."""
    survey = _survey(export, name)
    records: dict[str, list[Record]] = {experiment: [] for experiment in survey.counts}
    for experiment, _, batch in _batches(export, name, survey):
        records[experiment] += batch
    return [Incoming(experiment, own_settings(survey.settings, experiment), rows, survey.run)
            for experiment, rows in records.items()]


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


def _begin(store: RunStore, survey: _Survey, experiment: str, name: str, owner: str, source: str,
           run_id: str | None) -> str:
    """A stored run for ``experiment``'s records of an export, still running until they are all in."""
    run, settings = survey.run, own_settings(survey.settings, experiment)
    label = str(run.get("label") or f"{settings.get('backend', '?')} · {settings.get('model', '?')} "
                f"· {Path(name).name}")
    machine = without_keys(run["machine"]) if isinstance(run.get("machine"), dict) else {"label": f"imported: {name}"}
    started = run.get("started_at") if isinstance(run.get("started_at"), int | float) else None
    return store.begin(experiment, settings, label=label, machine=machine, owner=owner, source=source,
                       run_id=run_id, started_at=started)


def import_export(store: RunStore, export: Export, name: str, owner: str = "", source: str = IMPORTED,
                  run_id: str | None = None) -> list[str]:
    """Store every run of an export and return their ids. The file is read to its end and checked before
    anything is written, then read again and stored a `BATCH` of records at a time, so that memory holds a
    batch, never the file; runs begun by a second reading that fails (a file changed meanwhile, Ctrl-C) are
    deleted again."""
    survey = _survey(export, name)
    ids = {experiment: _begin(store, survey, experiment, name, owner, source,
                              run_id if len(survey.counts) == 1 else None) for experiment in survey.counts}
    try:
        for experiment, first, batch in _batches(export, name, survey):
            store.add_all(ids[experiment], batch, first=first)
    except BaseException:
        for begun in ids.values():
            store.delete(begun)
        raise
    run = survey.run
    status = str(run["status"]) if run.get("status") in (*ENDED, CUT) else DONE
    finished = run.get("finished_at") if isinstance(run.get("finished_at"), int | float) else None
    for new_id in ids.values():
        store.finish(new_id, status, _summary(run.get("summary")), finished_at=finished)
    return list(ids.values())


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
