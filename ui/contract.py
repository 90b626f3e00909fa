"""The contract between an experiment page and the shared run loop (`ui.experiment`).

A page describes its run as an `ExperimentPlan`: the settings, the `core.experiments.rounds.Plan` (requests and
tokens, for budgets and progress) and `make_source`, which turns a `Connection` into the experiment's
generator. It draws with a `DrawRuns`, which gets `RunView`s: the current run first, then the earlier runs
the user chose to compare. An experiment whose records are not rounds (experiment 4 yields one
`core.experiments.batch.BatchLevel` per concurrency) gives the loop a `Records` saying how to name, count, tabulate
and export them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import pandas as pd

from core.backends.connect import Connection
from core.experiments.rounds import Plan
from core.experiments.runner import RowSource
from core.export import Record, to_json
from core.records import RoundResult
from ui.content import Texts


class RunView(NamedTuple):
    """One run as a chart draws it."""

    label: str
    rows: Sequence[RoundResult]


class SourceFactory(Protocol):
    def __call__(self, conn: Connection) -> RowSource: ...


class DrawRuns(Protocol):
    def __call__(self, runs: Sequence[RunView], t: Texts, key: str) -> None:
        """Draw metrics, charts and verdict; ``key`` makes element keys unique per redraw."""


@dataclass(frozen=True)
class ExperimentPlan:
    experiment: str  # a `core.experiments.rounds` name: INPUT, OUTPUT, CACHE, ...
    settings: dict[str, Any]  # exported with the rounds; never a key
    plan: Plan
    make_source: SourceFactory
    steps: int | None = None  # records the run will yield, when that is not one per request (progress)
    slots: int = 1  # the embedded server's slots this experiment needs (one server per setting)


@dataclass(frozen=True)
class Records:
    """How the shared run loop names, counts, tabulates and exports an experiment's records."""

    table: Callable[[Sequence[Any]], pd.DataFrame]
    name: Callable[[Any], str]  # a failed record in a message: "round 3 · append_only", "N = 4"
    step: str = "common.round_of"  # the progress text, formatted with i and n
    done: str = "common.done"  # formatted with n
    stopped: str = "common.stopped"  # formatted with n
    failed: str = "common.failed"  # before the failed record's name and error
    export: Callable[[dict[str, Any], Sequence[Record]], str] = to_json  # the JSON download
