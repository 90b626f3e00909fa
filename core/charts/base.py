"""What every experiment's charts share: a run as a chart sees it, the runs as one frame, a colour per run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import altair as alt
import pandas as pd

from core.charts.palette import SERIES
from core.conclusions import Conclusion, MachineState
from core.records import RoundResult
from core.stats import nearest_rank

R = TypeVar("R")


class RunView(NamedTuple, Generic[R]):
    """One run as a chart draws it: its label and its records (rounds, or an experiment's own); for the page's
    conclusion also the machine's state during it and the conclusion kept with it (`core.conclusions.conclusion_of`)."""

    label: str
    rows: Sequence[R]
    state: MachineState | None = None
    conclusion: Conclusion | Mapping[str, Any] | None = None


Runs = Sequence[RunView[RoundResult]]


def frame(runs: Runs, experiment: str) -> pd.DataFrame:
    records = [{**row.to_dict(), "run": run.label} for run in runs for row in run.rows
               if row.experiment == experiment and not row.error]
    return pd.DataFrame.from_records(records)


def run_colour(runs: Runs, single: str) -> alt.Color | alt.Value:
    """One run: its phase colour. Several: a colour per run (the legend says which)."""
    if len(runs) < 2:
        return alt.value(single)
    labels = [run.label for run in runs]
    return alt.Color("run:N", title=None, scale=alt.Scale(domain=labels, range=SERIES[: len(labels)]),
                     legend=alt.Legend(orient="bottom"))


def spread(df: pd.DataFrame, x: str, y: str, colour: alt.Color | alt.Value) -> alt.LayerChart | None:
    """Repeats of one point: a rule from the fastest to the p90 and a tick at the p50 (nearest rank).

    None when no point was repeated: a single number has no spread to show.
    """
    groups = df.dropna(subset=[y]).groupby(["run", "target_tokens"])[[x, y]]
    if df.empty or groups.size().max() < 2:
        return None
    stats = pd.DataFrame([{"run": run, x: part[x].median(), "low": part[y].min(), "n": len(part),
                           "p50": nearest_rank(list(part[y]), 50), "p90": nearest_rank(list(part[y]), 90)}
                          for (run, _), part in groups if len(part) > 1])
    base = alt.Chart(stats).encode(x=alt.X(f"{x}:Q"), color=colour, tooltip=[
        "run", x, "n", alt.Tooltip("p50:Q", format=",.1f"), alt.Tooltip("p90:Q", format=",.1f")])
    return base.mark_rule(strokeWidth=2, opacity=0.5).encode(y="low:Q", y2="p90:Q") + base.mark_tick(
        thickness=3, size=18).encode(y="p50:Q")


