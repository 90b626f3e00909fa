"""Charts as Altair objects, with no Streamlit: the pages draw them and the HTML report embeds them.

`CHARTS` has one entry per registered experiment (`core.experiments.EXPERIMENTS`, the same keys): its
``charts(runs, words)``, every run on each chart, the current run first. A page lays them out and may add
charts of its own (experiment 4's streams of one level); the report embeds ``chart.to_dict()``. One palette
(`palette`) colours prefill, decode and cache hits everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import altair as alt

from core.charts import batch, cache, conversation, input, kv_cache, output, roofline
from core.charts.base import RunView
from core.words import Words

ChartsOf = Callable[[Sequence[RunView[Any]], Words], list[alt.TopLevelMixin]]

CHARTS: dict[str, ChartsOf] = {
    "input": input.charts,
    "output": output.charts,
    "cache": cache.charts,
    "batch": batch.charts,
    "roofline": roofline.charts,
    "kv_cache": kv_cache.charts,
    "conversation": conversation.charts,
}

__all__ = ["CHARTS", "ChartsOf", "RunView"]
