"""The explainer's figures: one request's timeline and the prefix a cache can reuse."""

from __future__ import annotations

import altair as alt
import pandas as pd

from core.charts.palette import CACHE_HIT, DECODE, PREFILL
from core.words import Words


def timeline_chart(
    prompt_tokens: int, output_tokens: int, prefill_tps: float, decode_tps: float, t: Words
) -> alt.Chart:
    """One request to scale: a single prefill block, then one thin block per output token."""
    prefill_ms = prompt_tokens / prefill_tps * 1000
    step = 1000 / decode_tps
    rows = [{"phase": t("phase.prefill"), "start": 0.0, "end": prefill_ms, "label": f"{prompt_tokens:,} tokens"}]
    rows += [
        {
            "phase": t("phase.decode"),
            "start": prefill_ms + i * step,
            "end": prefill_ms + (i + 1) * step - step * 0.15,
            "label": f"token {i + 1}",
        }
        for i in range(output_tokens)
    ]
    domain = [t("phase.prefill"), t("phase.decode")]
    return (
        alt.Chart(pd.DataFrame(rows))
        .mark_bar()
        .encode(
            x=alt.X("start:Q", title="ms"),
            x2="end:Q",
            y=alt.Y("phase:N", title=None, sort=domain),
            color=alt.Color("phase:N", scale=alt.Scale(domain=domain, range=[PREFILL, DECODE]), legend=None),
            tooltip=["phase", "label", alt.Tooltip("start:Q", format=",.1f"), alt.Tooltip("end:Q", format=",.1f")],
        )
        .properties(height=alt.Step(40))
    )


def prefix_diagram(t: Words, slices: int = 12) -> alt.Chart:
    """Round 2 of two conversations, slice by slice: reused (cache hit) or recomputed (prefill)."""
    reused, recomputed = t("cache.reused"), t("cache.recomputed")
    rows = []
    for strategy in ("append_only", "timestamp_first"):
        for i in range(slices + 1):
            new_tail = i == slices
            hit = strategy == "append_only" and not new_tail
            rows.append(
                {"strategy": t(f"strategy.{strategy}"), "slice": i, "state": reused if hit else recomputed}
            )
    return (
        alt.Chart(pd.DataFrame(rows))
        .mark_rect(stroke="white", strokeWidth=2)
        .encode(
            x=alt.X("slice:O", title=None, axis=None),
            y=alt.Y("strategy:N", title=None),
            color=alt.Color(
                "state:N",
                title=None,
                scale=alt.Scale(domain=[recomputed, reused], range=[PREFILL, CACHE_HIT]),
                legend=alt.Legend(orient="bottom"),
            ),
        )
        .properties(height=alt.Step(40))
    )
