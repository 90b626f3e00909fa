"""The roofline chart: log-log FLOP/s against FLOP per byte, each machine's two roofs, the ridge, the phases.

A machine's roof is min(peak FLOP/s, bandwidth x intensity): a slanted line (bandwidth-bound) that
bends flat at the ridge point. A machine without a published compute peak (Apple's GPUs) has only
its slanted line. Measured phases are filled marks; bounds that were not measured are hollow.
Nothing here calls Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import pandas as pd

from core.charts.base import RunView
from core.charts.palette import DECODE, PREFILL, SERIES
from core.engine.choice import EngineError, find_model
from core.experiments.phases import probe_phases
from core.experiments.roofline import BANDWIDTH, COMPUTE, RooflineRecord
from core.roofline.arithmetic import PhasePoint, place, roof_line
from core.roofline.model import ModelFacts, from_gguf
from core.roofline.peaks import Ceiling, Roof
from core.words import Words

LOW, HIGH = 0.3, 30_000.0


@dataclass(frozen=True)
class Marked:
    """A phase point drawn under one machine's name; ``measured`` False for a bound (hollow); ``chapter`` for one the
    chapter measured on its machine (filled, and named as the chapter's, never as measured here)."""

    machine: str
    point: PhasePoint
    measured: bool = True
    chapter: bool = False

    @property
    def kind(self) -> str:
        return "chapter" if self.chapter else "measured" if self.measured else "bound"


def roofline_chart(roofs: Sequence[Roof], points: Sequence[Marked], t: Words) -> alt.LayerChart:
    machines = [roof.machine for roof in roofs]
    colours = alt.Scale(domain=machines, range=SERIES[: len(machines)])
    lines = pd.DataFrame([{"machine": roof.machine, "intensity": x, "flops": y}
                          for roof in roofs for x, y in roof_line(roof, LOW, HIGH)])
    ridges = pd.DataFrame([{"machine": r.machine, "intensity": r.ridge, "flops": r.flops,
                            "label": t("roofline.ridge_label", ridge=r.ridge)} for r in roofs if r.ridge and r.flops])
    marks = pd.DataFrame([{"machine": m.machine, "phase": t(f"phase.{m.point.measurement.phase}"),
                           "run": m.point.measurement.label, "intensity": m.point.intensity,
                           "flops": m.point.flops_per_s, "tps": m.point.measurement.tps,
                           "kind": t(f"roofline.kind_{m.kind}")}
                          for m in points])
    x = alt.X("intensity:Q", title=t("roofline.x"), scale=alt.Scale(type="log", domain=[LOW, HIGH], nice=False))
    y = alt.Y("flops:Q", title=t("roofline.y"), scale=alt.Scale(type="log"), axis=alt.Axis(format="~s"))
    colour = alt.Color("machine:N", title=None, scale=colours, legend=alt.Legend(orient="bottom", columns=2))
    layers: list[alt.Chart] = [alt.Chart(lines).mark_line(strokeWidth=2).encode(
        x=x, y=y, color=colour, tooltip=["machine", alt.Tooltip("flops:Q", format=".3s")])]
    if not ridges.empty:
        layers.append(alt.Chart(ridges).mark_point(shape="diamond", size=90, filled=True).encode(
            x=x, y=y, color=alt.Color("machine:N", scale=colours, legend=None), tooltip=["machine", "label"]))
        layers.append(alt.Chart(ridges).mark_text(dy=-12, fontSize=11).encode(x=x, y=y, text="label"))
    if not marks.empty:
        phases = [t("phase.prefill"), t("phase.decode")]
        bound = t("roofline.kind_bound")
        layers.append(alt.Chart(marks).mark_point(size=120, strokeWidth=2).encode(
            x=x, y=y,
            color=alt.Color("phase:N", title=None, scale=alt.Scale(domain=phases, range=[PREFILL, DECODE]),
                            legend=alt.Legend(orient="bottom")),
            shape=alt.Shape("machine:N", title=None, legend=alt.Legend(orient="bottom", columns=1)),
            fill=alt.condition(alt.datum.kind != bound, alt.Color("phase:N", scale=alt.Scale(
                domain=phases, range=[PREFILL, DECODE]), legend=None), alt.value("transparent")),
            tooltip=["machine", "run", "phase", "kind", alt.Tooltip("tps:Q", title="tokens/s", format=",.1f"),
                     alt.Tooltip("intensity:Q", title="FLOP/byte", format=".3g"),
                     alt.Tooltip("flops:Q", title="FLOP/s", format=".3s")]))
    return alt.layer(*layers).resolve_scale(color="independent").properties(height=420)


def measured_roofs(runs: Sequence[RunView[Any]]) -> list[Roof]:
    """Each run's two measured roofs (experiment 5's records), named by the run."""
    roofs = []
    for run in runs:
        found = {r.kind: r for r in run.rows if isinstance(r, RooflineRecord) and r.value and not r.error}
        if BANDWIDTH in found:
            compute = found.get(COMPUTE)
            roofs.append(Roof(run.label, Ceiling(found[BANDWIDTH].value or 0.0, found[BANDWIDTH].how),
                              Ceiling(compute.value or 0.0, compute.how) if compute else None, ""))
    return roofs


def _engine_model() -> ModelFacts | None:
    """The embedded engine's model, which experiment 5's runs here measure (None where its GGUF is not installed)."""
    try:
        return from_gguf(find_model())
    except (EngineError, OSError, ValueError, ImportError):
        return None


def measured_phases(runs: Sequence[RunView[Any]], roofs: Sequence[Roof]) -> list[Marked]:
    """Each run's measured prefill and decode placed under its own roofs, as the page places them (with the
    embedded engine's model, the one its runs measure); none without the model's facts."""
    model = _engine_model()
    if model is None:
        return []
    by_run = {roof.machine: roof for roof in roofs}
    return [Marked(run.label, place(by_run[run.label], model, m)) for run in runs if run.label in by_run
            for m in probe_phases(run.rows, run.label)]


def charts(runs: Sequence[RunView[Any]], t: Words) -> list[alt.TopLevelMixin]:
    """Experiment 5's chart: every run's measured roofs and the prefill and decode it measured under them."""
    roofs = measured_roofs(runs)
    return [roofline_chart(roofs, measured_phases(runs, roofs), t)] if roofs else []
