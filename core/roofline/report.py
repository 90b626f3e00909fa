"""One machine's roofline report: its roofs, the model's costs, the predictions and every measured phase.

`build` is what the roofline page draws and what ``python -m core roofline`` prints (`lines`) or
writes (``--json``): one computation for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.roofline.arithmetic import DECODE, PREFILL, Measurement, PhasePoint, Prediction, place, predict
from core.roofline.model import ModelFacts
from core.roofline.peaks import PROBE, Roof


@dataclass
class Report:
    roof: Roof
    model: ModelFacts
    prediction: Prediction | None
    points: list[PhasePoint] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"roof": self.roof.to_dict(), "model": self.model.to_dict(),
                "prediction": self.prediction.to_dict() if self.prediction else None,
                "points": [p.to_dict() for p in self.points]}


def build(roof: Roof, model: ModelFacts, measurements: Sequence[Measurement]) -> Report:
    """Place every measurement; G from the first single-stream prefill and decode measured, else the roofs."""
    prefill = next((m.tps for m in measurements if m.phase == PREFILL and m.streams == 1), None)
    decode = next((m.tps for m in measurements if m.phase == DECODE and m.streams == 1), None)
    return Report(roof, model, predict(roof, model, prefill, decode), [place(roof, model, m) for m in measurements])


def si(value: float | None, unit: str) -> str:
    """1.23e10 -> '12.3 G<unit>'."""
    if value is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def percent(value: float | None) -> str:
    """A ratio as a percentage, unclipped: above 100 % the roof undershot and the text says so."""
    if value is None:
        return "no peak"
    return f"{value * 100:.0f} %" + (" (probe undershot)" if value > 1 else "")


def lines(report: Report) -> list[str]:
    """The report as the CLI prints it."""
    roof, model, pred = report.roof, report.model, report.prediction
    took = f", {roof.seconds:.1f} s" if roof.seconds is not None else ""
    origin = (f"measured {roof.as_of}{took}" if roof.memory.source == PROBE
              else f"datasheet read {roof.as_of}: {roof.memory.source}")
    out = [f"Machine: {roof.machine} ({origin})",
           f"  compute   {si(roof.flops, 'FLOP/s'):>14}  {roof.compute.describe() if roof.compute else 'unknown'}",
           f"  bandwidth {si(roof.bandwidth, 'B/s'):>14}  {roof.memory.describe()}",
           f"  ridge     {roof.ridge:.1f} FLOP/byte" if roof.ridge else "  ridge     unknown (no compute peak)"]
    if roof.notes.get("busy"):
        share = 100 * float(roof.notes.get("cpu_share", 0))
        out.append(f"  the machine was busy while measuring: the probe had {share:.0f} % of the CPU time used, "
                   "so both figures are low; measure again when it is idle (--rerun)")
    tied = {True: "head tied to the embedding: read whole", False: "embedding looked up by row",
            None: "embedding use unknown"}[model.tied_embeddings]
    kv = f"{model.kv_bytes_per_token:,} B/token" if model.kv_bytes_per_token else "unknown"
    out.append(f"Model: {model.name} ({model.source}, {model.ftype or '?'}): {model.n_params:,} weights, "
               f"{model.size_bytes:,} bytes; a decode step reads {model.decode_bytes:,} bytes ({tied}); KV cache {kv}")
    if pred:
        source = "measured prefill / decode" if pred.gain_from == "measured" else "the roofs' bounds"
        can = "this machine can show it" if pred.can_show_batching else "below 2x: this machine cannot show it"
        out += [f"Bounds: prefill <= {pred.prefill_bound:,.0f} tokens/s, decode <= {pred.decode_bound:,.0f} tokens/s "
                f"({pred.decode_intensity:.1f} FLOP/byte)",
                f"Experiment 2: prefill about {pred.ratio:.1f}x faster than decode here",
                f"Experiment 4: batching can gain at most {pred.gain_bound:.1f}x ({source}): {can}"]
    if report.points:
        out.append(f"{'phase':<8} {'measured':<28} {'tokens/s':>9} {'FLOP/s':>12} {'bytes/s':>11} {'FLOP/B':>7} "
                   f"{'MFU':>6} {'MBU':>6}")
        for p in report.points:
            m = p.measurement
            out.append(f"{m.phase:<8} {m.label[:28]:<28} {m.tps:>9,.1f} {si(p.flops_per_s, 'FLOP/s'):>12} "
                       f"{si(p.bytes_per_s, 'B/s'):>11} {p.intensity:>7.1f} {percent(p.mfu):>6} {percent(p.mbu):>6}")
        out.append(f"MFU = FLOP/s / {si(roof.flops, 'FLOP/s')}; MBU = bytes/s / {si(roof.bandwidth, 'B/s')}")
    return out
