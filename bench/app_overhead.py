"""Overhead inside the app: the same requests through the page's run loop (AppTest drives the real
page, which redraws its chart and table after every round) and through the core generator alone.
If redraws leaked into the timed section, TTFT minus the server's prefill time would be larger
through the app."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from bench.common import finish, spread, table
from core import experiments as ex
from core.connect import Target, open_connection
from core.engine import LocalServer
from core.results import RoundResult

LENGTHS, REPEATS = [16, 32, 64], 5
ROOT = Path(__file__).resolve().parent.parent


def overheads(rows: list[RoundResult]) -> list[float]:
    return [r.ttft_ms - r.prefill_ms for r in rows if not r.error and r.ttft_ms is not None and r.prefill_ms is not None]


def through_app(url: str) -> list[RoundResult]:
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=600)
    at.session_state["backend"] = "llama"
    at.session_state["llama_url"] = url
    at.run()
    at.switch_page("app_pages/output_length.py").run()
    at.multiselect(key="output_lengths").set_value(LENGTHS).run()
    at.number_input(key="output_repeats").set_value(REPEATS).run()
    at.button(key="run_output_length").click().run()
    return at.session_state["history"][ex.OUTPUT][-1].rows


def main() -> dict:
    with LocalServer() as server:
        app_rows = through_app(server.url)
        conn = open_connection(Target("llama", server.url))
        cli_rows = list(ex.output_length_sweep(conn.backend, LENGTHS * REPEATS))
        conn.backend.close()
    rows = [("through the app's run loop", spread(overheads(app_rows))), ("core generator (CLI)", spread(overheads(cli_rows)))]
    print(table(rows, "ms of TTFT - server prefill"))
    difference = rows[0][1]["median"] - rows[1][1]["median"]
    key = {"app_median_ms": rows[0][1]["median"], "cli_median_ms": rows[1][1]["median"],
           "app_minus_cli_ms": round(difference, 3), "goal_met": abs(difference) <= 1.0}
    return finish("app_overhead", {"lengths": LENGTHS, "repeats": REPEATS, "rows": dict(rows)}, key,
                  f"TTFT overhead through the app {difference:+.2f} ms vs the CLI (medians; goal: within 1 ms)")


if __name__ == "__main__":
    main()
