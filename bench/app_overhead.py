"""Overhead inside the app: the same requests through the page's run loop (AppTest drives the real
page, which redraws its chart and table after every round) and through the core generator alone,
in alternating blocks so a drift of the machine hits both alike.

Two figures: TTFT minus the server's prefill time (larger through the app if a redraw leaked into a
timed request), and each block's wall time per request (larger through the app by what the page's
redraw costs: a watched run waits for the redraw before its next request, `core.runs.runner.REDRAW_WAIT_S`).
"""

from __future__ import annotations

import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from bench.common import finish, spread, table
from core.backends.connect import Target, open_connection
from core.engine.server import LocalServer
from core.experiments import output_length
from core.experiments.base import RunContext
from core.records import RoundResult

LENGTHS, REPEATS, BLOCKS = [16, 32, 64], 2, 4
ROOT = Path(__file__).resolve().parent.parent


def overheads(rows: list[RoundResult]) -> list[float]:
    return [
        r.ttft_ms - r.prefill_ms for r in rows if not r.error and r.ttft_ms is not None and r.prefill_ms is not None
    ]


def through_app(url: str) -> tuple[list[RoundResult], float]:
    """One block through the page; its rows and its wall time per request (ms), from Run to the last row."""
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=600)
    at.session_state["backend"] = "llama"
    at.session_state["llama_url"] = url
    at.run()
    at.switch_page("app_pages/output.py").run()
    at.multiselect(key="output_lengths").set_value(LENGTHS).run()
    at.number_input(key="output_repeats").set_value(REPEATS).run()
    start = time.perf_counter()
    at.button(key="run_output").click().run()  # returns when the run has ended and is drawn
    wall = time.perf_counter() - start
    rows = at.session_state["history"][output_length.ID][-1].rows
    return rows, wall * 1000 / (len(rows) + 1)  # + the warm-up


def through_cli(url: str) -> tuple[list[RoundResult], float]:
    with open_connection(Target("llama", url)) as conn:
        start = time.perf_counter()
        rows = list(output_length.rounds(RunContext(conn), output_length.Settings(tuple(sorted(LENGTHS * REPEATS)))))
        wall = time.perf_counter() - start
    return rows, wall * 1000 / (len(rows) + 1)


def main() -> dict:
    app_rows: list[RoundResult] = []
    cli_rows: list[RoundResult] = []
    app_walls: list[float] = []
    cli_walls: list[float] = []
    with LocalServer() as server:
        for block in range(BLOCKS):
            order = (through_app, through_cli) if block % 2 == 0 else (through_cli, through_app)
            for measure in order:
                rows, per_request = measure(server.url)
                (app_rows if measure is through_app else cli_rows).extend(rows)
                (app_walls if measure is through_app else cli_walls).append(per_request)
    ttft = [
        ("through the app's run loop", spread(overheads(app_rows))),
        ("core generator (CLI)", spread(overheads(cli_rows))),
    ]
    walls = [("through the app's run loop", spread(app_walls)), ("core generator (CLI)", spread(cli_walls))]
    print(table(ttft, "ms of TTFT - server prefill"))
    print(table(walls, "ms of block wall time per request"))
    difference = ttft[0][1]["median"] - ttft[1][1]["median"]
    redraw = walls[0][1]["median"] - walls[1][1]["median"]
    key = {
        "app_median_ms": ttft[0][1]["median"],
        "cli_median_ms": ttft[1][1]["median"],
        "app_minus_cli_ms": round(difference, 3),
        "redraw_ms_per_request": round(redraw, 1),
        "goal_met": abs(difference) <= 1.0,
    }
    return finish(
        "app_overhead",
        {"lengths": LENGTHS, "repeats": REPEATS, "blocks": BLOCKS, "ttft": dict(ttft), "wall_per_request": dict(walls)},
        key,
        f"TTFT overhead through the app {difference:+.2f} ms vs the CLI (medians, interleaved; goal: within "
        f"1 ms); the page's redraw adds {redraw:.0f} ms of wall time per request",
    )


if __name__ == "__main__":
    main()
