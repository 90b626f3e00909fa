"""The contract between an experiment page and the shared run loop (`ui.runs`).

A page describes its run as an `ExperimentPlan`: the settings it exports, the
`core.experiments.base.Plan` (requests and tokens, for budgets and progress) and `make_source`,
which turns a `Connection` into the experiment's generator over a `RunContext`. A registered
experiment gets all three from `core.experiments.EXPERIMENTS` (`ExperimentPlan.of`).
It draws with a `DrawRuns`, which gets `RunView`s: the current run first, then the earlier runs
the user chose to compare. An experiment whose records are not rounds (experiment 4 yields one
`core.experiments.batch.BatchLevel` per concurrency) gives the loop a `Records` saying how to name,
count and tabulate them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pandas as pd

from core.backends.connect import Connection
from core.charts.base import RunView
from core.experiments import Experiment
from core.experiments.base import Plan, Source, exported_settings
from ui.text import Texts

R = TypeVar("R")


class SourceFactory(Protocol):
    def __call__(self, conn: Connection) -> Source:
        """The generator for this connection; raises ValueError (a sentence) when the settings cannot run on it."""


class DrawRuns(Protocol):
    def __call__(self, runs: Sequence[RunView[Any]], t: Texts, key: str) -> None:
        """Draw metrics, charts and verdict; ``key`` makes element keys unique per redraw."""


@dataclass(frozen=True)
class ExperimentPlan:
    experiment: str  # a `core.experiments.EXPERIMENTS` id, or another page's ("doctor")
    settings: dict[str, Any]  # exported with the records; never a key
    plan: Plan
    make_source: SourceFactory
    slots: int = 1  # the embedded server's slots this experiment needs (one server per setting)

    @classmethod
    def of(cls, spec: Experiment, settings: Any, check: Callable[[Any, Connection], None] | None = None,
           slots: int | None = None, **exported: Any) -> ExperimentPlan:
        """A registered experiment's plan: its settings are prepared for the connection (and ``check``ed) when
        the run starts; ``exported`` adds settings to the export."""
        def make_source(conn: Connection) -> Source:
            prepared = spec.prepare(settings, conn)
            if check is not None:
                check(prepared, conn)
            return lambda run: spec.rounds(run, prepared)

        return cls(spec.id, {**exported_settings(settings), **exported}, spec.plan(settings), make_source,
                   spec.slots(settings) if slots is None else slots)


@dataclass(frozen=True)
class Records:
    """How the shared run loop names, counts and tabulates an experiment's records."""

    table: Callable[[Sequence[Any]], pd.DataFrame]
    name: Callable[[Any], str]  # a failed record in a message: "round 3 · append_only", "N = 4"
    step: str = "common.round_of"  # the progress text, formatted with i and n
    done: str = "common.done"  # formatted with n
    stopped: str = "common.stopped"  # formatted with n
    failed: str = "common.failed"  # before the failed record's name and error
    empty: str = "common.no_rounds"  # before any run ("common.no_run" for an experiment without settings)
