"""The contract between an experiment page and the shared run loop (`ui.experiment`).

A page describes its run as an `ExperimentPlan`: the settings, the `core.experiments.Plan` (requests and
tokens, for budgets and progress) and `make_source`, which turns a `Connection` into the experiment's
generator. It draws with a `DrawRuns`, which gets `RunView`s: the current run first, then the earlier runs
the user chose to compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from core.connect import Connection
from core.content import Texts
from core.experiments import Plan
from core.results import RoundResult
from core.runner import RowSource


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
    experiment: str  # a `core.experiments` name: INPUT, OUTPUT, CACHE, ...
    settings: dict[str, Any]  # exported with the rounds; never a key
    plan: Plan
    make_source: SourceFactory
