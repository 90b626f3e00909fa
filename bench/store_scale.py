"""The run store: what saving costs per round, and listing and drawing 1,000 saved runs.

Per round: `RunStore.add` of a full experiment 3 round on a file store (WAL, synchronous=NORMAL),
as the worker does between two requests; goal < 1 ms, far below a round (tens of ms to seconds).
At scale: 1,000 saved runs of experiment 3 (12 rounds each) in one file; the page's work to list
them (query and the table it shows) and to draw them all ticked on its two charts (read every
round and build the specs the page sends, with Streamlit's own conversion: the data as Arrow, 12,000
rounds on each chart); goal < 1 s for each.

Both engines, the same work: a SQLite file, and PostgreSQL on loopback (a throwaway cluster as the
tests start it, tests/support/postgres.py: TCP on 127.0.0.1 with a password, as a team's URL; its
durability is off, as a test cluster's, so a round costs the round trip and the server's work, not
an fsync). Goal on PostgreSQL: a round < 5 ms; listing and drawing 1,000 runs within 2x of SQLite.
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
from tests.support.postgres import Cluster
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


def per_round(location: str) -> dict[str, float]:
    store = RunStore.open(location)
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


def at_scale(location: str) -> dict[str, Any]:
    fill(RunStore.open(location))
    t = Texts("en")
    listing: list[float] = []
    drawing: dict[int, list[float]] = {n: [] for n in TICKED}
    for _ in range(REPEATS):
        store = RunStore.open(location)
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
    return {"list_s": spread(listing), "draw_s": {str(n): spread(v) for n, v in drawing.items()}}


def engine(where: dict[str, str]) -> dict[str, Any]:
    add = per_round(where["per_round"])
    return {"add_ms": add, **at_scale(where["scale"])}


def main() -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="prefill-lab-bench-") as tmp, Cluster() as cluster:
        results["sqlite"] = engine({"per_round": str(Path(tmp) / "per-round.sqlite"),
                                    "scale": str(Path(tmp) / "scale.sqlite")})
        results["sqlite"]["db_mb"] = round((Path(tmp) / "scale.sqlite").stat().st_size / 1e6, 1)
        results["postgresql"] = engine({"per_round": cluster.url(cluster.database()),
                                        "scale": cluster.url(cluster.database())})
    load = os.getloadavg()[0]  # this machine is shared: say how busy it was
    for name, got in results.items():
        print(f"-- {name}")
        print(table([("add one round (ms)", got["add_ms"])], "ms"))
        print(table([(f"list {RUNS} runs (s)", got["list_s"]),
                     *[(f"draw {n} ticked runs (s)", got["draw_s"][str(n)]) for n in TICKED]], "s"))
    lite, pg = results["sqlite"], results["postgresql"]
    draw, pg_draw = lite["draw_s"][str(RUNS)]["median"], pg["draw_s"][str(RUNS)]["median"]
    key = {"add_round_ms_median": lite["add_ms"]["median"], "add_round_ms_max": lite["add_ms"]["max"],
           "list_1000_s_median": lite["list_s"]["median"], "draw_1000_s_median": draw,
           "draw_10_s_median": lite["draw_s"]["10"]["median"],
           "pg_add_round_ms_median": pg["add_ms"]["median"], "pg_add_round_ms_max": pg["add_ms"]["max"],
           "pg_list_1000_s_median": pg["list_s"]["median"], "pg_draw_1000_s_median": pg_draw,
           "pg_list_ratio": round(pg["list_s"]["median"] / lite["list_s"]["median"], 2),
           "pg_draw_ratio": round(pg_draw / draw, 2), "load_average": round(load, 1)}
    key["pg_goal_met"] = key["pg_add_round_ms_median"] < 5 and key["pg_list_ratio"] <= 2 and key["pg_draw_ratio"] <= 2
    key["goal_met"] = (key["add_round_ms_median"] < 1 and key["list_1000_s_median"] < 1 and draw < 1
                       and key["pg_goal_met"])
    return finish("store_scale", {"adds": ADDS, "runs": RUNS, "rounds_per_run": ROUNDS_PER_RUN, **results}, key,
                  f"SQLite: a round saved in {key['add_round_ms_median']:.3f} ms median; {RUNS} runs listed in "
                  f"{key['list_1000_s_median']:.3f} s, drawn in {draw:.3f} s. PostgreSQL on loopback: a round in "
                  f"{key['pg_add_round_ms_median']:.3f} ms median (max {key['pg_add_round_ms_max']:.2f} ms; goal < 5 "
                  f"ms); listed in {key['pg_list_1000_s_median']:.3f} s ({key['pg_list_ratio']}x), drawn in "
                  f"{pg_draw:.3f} s ({key['pg_draw_ratio']}x; goal <= 2x) (load average {load:.1f} on "
                  f"{os.cpu_count()} cores)")
