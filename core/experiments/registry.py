"""The one registry of experiments, as `core.backends.BACKENDS` is of backends.

`EXPERIMENTS` is the single source of each experiment's id and its parts. The id (``input``,
``output``, ``cache``, ``batch``) is the CLI's ``--only`` choice, the records' ``experiment``, the
content key (``[input]``, ``nav.input`` in content/*.toml), the page's URL (``/cache``), the
session history key and the prefix of its widgets' session keys (``cache_rounds``). Read from here:
the CLI's ``--only`` and options (`core.cli.main`), the app's navigation (`ui.navigation`), the
session defaults (`ui.session`), the recorded samples (`Experiment.recorded`), the exports' record
key (`records_key`) and the page tests (tests/pages/test_pages.py, tests/unit/experiments/test_registry.py).

Adding an experiment with id ``ID`` touches, outside its own new files (``core/experiments/NAME.py``
with ``ID``, ``Settings``, ``plan``, ``prepare``, ``rounds``, ``OPTIONS`` and, if it wants them, its
summary, verdict and ``report`` lines; ``app_pages/ID.py``; ``ui/NAME_charts.py``; its tests; a
recorded ``samples/*.json`` if it has one):

1. this file: one `Experiment` entry in `EXPERIMENTS` (in navigation order);
2. content/en.toml and 3. content/zh.toml: its ``nav.ID`` title and its ``[ID]`` section.

Its summary and verdict may instead join the others in `summaries` / `verdicts` (a fourth and fifth
file then). A record type other than `RoundResult` needs ``to_dict``, ``from_dict`` and ``error``; the
CLI prints such records as JSON lines. Nothing else: navigation, ``--only``, its options, session
defaults, exports and the page smoke test follow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from core.backends.connect import Connection
from core.experiments import (
    batch,
    batch_summary,
    input_length,
    output_length,
    prefix_cache,
    roofline,
    summaries,
    verdicts,
)
from core.experiments.base import Option, Plan, RunContext, widget_settings
from core.experiments.samples import EMBEDDED_BATCH, EMBEDDED_DEFAULT
from core.export import Record, RecordType, from_json
from core.records import RoundResult


def _one_slot(settings: Any) -> int:
    return 1


@dataclass(frozen=True)
class Experiment:
    """One experiment: its id everywhere, its generator and everything a caller needs around it."""

    id: str
    title: str  # one line, for --help
    icon: str  # its navigation icon
    settings: type[Any]  # a frozen dataclass; its defaults are the CLI's and the session's
    rounds: Callable[[RunContext, Any], Iterator[Record]]  # the generator: (run, settings) -> records
    plan: Callable[[Any], Plan]  # settings -> requests and tokens, before connecting (budgets, progress)
    prepare: Callable[[Any, Connection], Any]  # settings fitted to a connection; ValueError says what to change
    summary: Callable[[Sequence[Any]], Any]  # records -> what the run measured ("no data" as None)
    verdict: Callable[[Sequence[Any]], tuple[bool | None, dict[str, Any]]]  # records -> shown?, values
    record: type[RecordType] = RoundResult  # what it yields (and reads back from an export)
    records: str = "rounds"  # the key of its records in a JSON export
    options: tuple[Option, ...] = ()  # its `python -m core` options
    sample: Path | None = None  # recorded results shipped with the project
    slots: Callable[[Any], int] = _one_slot  # the embedded server's parallel sequences it needs
    default: bool = True  # run by `python -m core` without --only
    report: Callable[[Sequence[Any]], Iterator[str]] | None = None  # its summary lines on the command line
    # (experiments 1-4 have theirs in core/cli/summary.py and core/cli/batch.py; the CLI prints records it
    # has no table for as JSON lines)

    @property
    def page(self) -> str:
        """Its page, named by its id so that its URL is ``/<id>``."""
        return f"app_pages/{self.id}.py"

    def session_defaults(self) -> dict[str, Any]:
        """``{id}_{field}`` -> the default of each setting a page's widget keeps (``cache_rounds``)."""
        return {f"{self.id}_{name}": value for name, value in widget_settings(self.settings()).items()}

    def from_args(self, values: Mapping[str, Any]) -> Any:
        """Its settings from parsed options (``vars(args)``); options it does not have keep their defaults."""
        names = {f.name for f in fields(self.settings)}
        return self.settings(**{o.dest: values[o.dest] for o in self.options
                                if o.dest in names and values.get(o.dest) is not None})

    def recorded(self) -> tuple[dict[str, Any], list[Any]]:
        """The settings and records of its recorded sample (none when it has none)."""
        if self.sample is None:
            return {}, []
        settings, records = from_json(self.sample.read_text(), self.records, self.record)
        return settings, [r for r in records if getattr(r, "experiment", self.id) == self.id]


EXPERIMENTS: dict[str, Experiment] = {
    spec.id: spec
    for spec in (
        Experiment(input_length.ID, "TTFT and prefill time against prompt length", ":material/input:",
                   input_length.Settings, input_length.rounds, input_length.plan, input_length.prepare,
                   summaries.summarize_input, verdicts.input_verdict, options=input_length.OPTIONS,
                   sample=EMBEDDED_DEFAULT),
        Experiment(output_length.ID, "total and per-token time against answer length", ":material/output:",
                   output_length.Settings, output_length.rounds, output_length.plan, output_length.prepare,
                   summaries.summarize_output, verdicts.output_verdict, options=output_length.OPTIONS,
                   sample=EMBEDDED_DEFAULT),
        Experiment(prefix_cache.ID, "the same long context for several rounds: append only vs broken prefix",
                   ":material/cached:", prefix_cache.Settings, prefix_cache.rounds, prefix_cache.plan,
                   prefix_cache.prepare, summaries.summarize_cache, verdicts.cache_verdict,
                   options=prefix_cache.OPTIONS, sample=EMBEDDED_DEFAULT),
        Experiment(batch.ID, "many requests at once: aggregate and per-stream tokens/s against N", ":material/stacks:",
                   batch.Settings, batch.rounds, batch.plan, batch.prepare, batch_summary.summarize_batch,
                   batch_summary.batch_verdict, record=batch.BatchLevel, records="levels", options=batch.OPTIONS,
                   sample=EMBEDDED_BATCH, slots=batch.slots, default=False),
        Experiment(roofline.ID, "this machine's compute and bandwidth roofs; one request's prefill and decode",
                   ":material/roofing:", roofline.Settings, roofline.rounds, roofline.plan, roofline.prepare,
                   roofline.summarize, roofline.verdict, record=roofline.RooflineRecord, records="roofline",
                   options=roofline.OPTIONS, sample=roofline.SAMPLE, default=False),
    )
}


def records_key(experiment: str) -> str:
    """Where an export keeps ``experiment``'s records (``rounds`` for anything not registered, e.g. the doctor)."""
    spec = EXPERIMENTS.get(experiment)
    return spec.records if spec else "rounds"


__all__ = ["EXPERIMENTS", "Experiment", "Option", "Plan", "RunContext", "records_key"]
