"""The run store: what saving costs per round, and listing and drawing 1,000 saved runs.

Per round: `RunStore.add` of a full experiment 3 round on a file store (WAL, synchronous=NORMAL),
as the worker does between two requests; goal < 1 ms, far below a round (tens of ms to seconds).
At scale: 1,000 saved runs of experiment 3 (12 rounds each) in one file; the page's work to list
them (query and the table it shows) and to draw them all ticked on its two charts (read every
round and build the specs the page sends, with Streamlit's own conversion: the data as Arrow, 12,000
rounds on each chart); goal < 1 s for each.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from streamlit.elements.vega_charts import _convert_altair_to_vega_lite_spec as to_vega_lite

from bench.common import finish, spread, table
from core.charts.base import RunView
from core.charts.cache import cache_token_chart, cache_ttft_chart
from core.experiments.prefix_cache import ID as CACHE
from core.records import RoundResult
from core.store import RunStore
from ui.runs.saved import runs_table
from ui.text import Texts

ROUNDS_PER_RUN, RUNS, ADDS, REPEATS = 12, 1000, 2000, 5
TICKED = (10, 100, 1000)  # saved runs ticked onto the charts


def full_round(n: int) -> RoundResult:
    """A round with every field filled, as a llama-server round is."""
    return RoundResult(CACHE, n % 6 + 1, strategy="append_only" if n % 12 < 6 else "timestamp_first",
                       prompt_tokens=2100 + n, recomputed_tokens=40, cached_tokens=2060 + n, prefill_ms=31.5,
                       ttft_ms=38.2, first_byte_ms=3.1, output_tokens=24, decode_ms=230.4, total_ms=270.9,
                       ms_per_output_token=10.02, usage_source="timings.cache_n", prefill_source="server",
                       decode_source="server")


def per_round(folder: Path) -> dict[str, float]:
    store = RunStore.open(str(folder / "per-round.sqlite"))
    run_id = store.begin(CACHE, {"backend": "local", "model": "bench"}, label="bench")
    costs = []
    for n in range(ADDS):
        row = full_round(n)
        start = time.perf_counter()
        store.add(run_id, row)
        costs.append((time.perf_counter() - start) * 1000)
    store.finish(run_id, "done")
    store.close()
    return spread(costs)


def fill(store: RunStore) -> None:
    for index in range(RUNS):
        run_id = store.begin(CACHE, {"backend": "local", "model": "bench"}, label=f"run {index:04d}",
                             machine={"cpu": "Bench CPU", "cores": 2}, started_at=1.7e9 + index)
        for n in range(ROUNDS_PER_RUN):
            store.add(run_id, full_round(n))
        store.finish(run_id, "done")


def at_scale(folder: Path) -> dict[str, Any]:
    path = folder / "scale.sqlite"
    fill(RunStore.open(str(path)))
    t = Texts("en")
    listing: list[float] = []
    drawing: dict[int, list[float]] = {n: [] for n in TICKED}
    for _ in range(REPEATS):
        store = RunStore.open(str(path))
        start = time.perf_counter()
        runs = store.runs(CACHE)
        frame = runs_table(t, runs)
        listing.append(time.perf_counter() - start)
        for ticked in TICKED:
            start = time.perf_counter()
            records = store.records_of([run.id for run in runs[:ticked]])  # as the page reads its ticked runs
            views = [RunView(run.label, records[run.id]) for run in runs[:ticked]]
            # what st.altair_chart does with a chart: its spec, the data as Arrow (not JSON rows, not capped)
            specs = [to_vega_lite(c) for c in (cache_token_chart(views, t), cache_ttft_chart(views, t)) if c]
            drawing[ticked].append(time.perf_counter() - start)
        store.close()
    assert len(frame) >= RUNS and len(specs) == 2
    return {"list_s": spread(listing), "draw_s": {str(n): spread(v) for n, v in drawing.items()},
            "db_mb": round(path.stat().st_size / 1e6, 1)}


def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="prefill-lab-bench-") as tmp:
        add = per_round(Path(tmp))
        scale = at_scale(Path(tmp))
    load = os.getloadavg()[0]  # this machine is shared: say how busy it was
    print(table([("add one round (ms)", add)], "ms"))
    print(table([(f"list {RUNS} runs (s)", scale["list_s"]),
                 *[(f"draw {n} ticked runs (s)", scale["draw_s"][str(n)]) for n in TICKED]], "s"))
    draw = scale["draw_s"][str(RUNS)]["median"]
    key = {"add_round_ms_median": add["median"], "add_round_ms_max": add["max"],
           "list_1000_s_median": scale["list_s"]["median"], "draw_1000_s_median": draw,
           "draw_10_s_median": scale["draw_s"]["10"]["median"], "load_average": round(load, 1),
           "goal_met": add["median"] < 1 and scale["list_s"]["median"] < 1 and draw < 1}
    return finish("store_scale", {"adds": ADDS, "runs": RUNS, "rounds_per_run": ROUNDS_PER_RUN, "add_ms": add,
                                  **scale}, key,
                  f"a round saved in {add['median']:.3f} ms median (max {add['max']:.2f} ms; goal < 1 ms); "
                  f"{RUNS} runs listed in {key['list_1000_s_median']:.3f} s and drawn in {draw:.3f} s "
                  f"(goal < 1 s; load average {load:.1f} on {os.cpu_count()} cores)")
