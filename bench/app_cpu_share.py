"""The app's own CPU share during a run in headless Chromium: experiment 4 (and experiment 2) at their default
settings, the streamlit process and Chromium measured apart from the server, against the machine's total.

Each run: the real app (`tests.support.browser.running_app`) on the embedded engine, one Chromium page opened on the
experiment, Run clicked, and CPU read from Linux ``/proc`` between the click and the page going idle with the
run done. The streamlit process's own time (``/proc/<pid>/stat``: its threads, not the llama-server it started),
Chromium's (every Chromium process under this one) and the machine's (``/proc/stat``) give the shares; app CPU
per round drawn stands beside the round's mean wall time (a redraw must cost less than the round it draws).
With ``BEFORE`` set to a checkout of an older commit, the same runs alternate between it and this tree (paired).
Load on a 2-core machine shared with a test suite moves every figure: the 1-minute load is recorded with each.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import expect, sync_playwright

from bench.common import finish
from bench.streamlit_client import cpu_seconds, load_average
from core.engine.meter import _machine
from tests.browser.test_app import idle
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, running_app

PAGES = {"batch": ("/batch", re.compile(r"^Done: \d+ levels?")),
         "output": ("/output", re.compile(r"^Done: \d+ rounds"))}
DONE_JS = """pattern => [...document.querySelectorAll(
    "[data-testid='stAlertContentSuccess'] [data-testid='stMarkdownContainer']")]
    .some(e => new RegExp(pattern).test(e.innerText.trim()))"""
REPEATS = int(os.environ.get("REPEATS", "3"))
GOAL = 0.10  # the app (streamlit + Chromium) at most this share of the machine during experiment 4


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rfind(")") + 2:].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _chromium_s() -> float:
    total = 0.0
    for pid in _children(os.getpid()):
        try:
            if "chrom" in os.readlink(f"/proc/{pid}/exe"):
                total += cpu_seconds(pid)
        except OSError:
            continue
    return total


def one_run(root: Path, experiment: str) -> dict[str, Any]:
    path, done = PAGES[experiment]
    with running_app(root=root) as (url, proc), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        page.goto(url + path)
        idle(page, timeout=300)  # the embedded engine has started
        main = page.get_by_test_id("stMainBlockContainer")
        load = load_average()[0]
        machine0, app0, chromium0, start = _machine(), cpu_seconds(proc.pid), _chromium_s(), time.monotonic()
        main.get_by_role("button", name="Run", exact=True).click()
        expect(main.get_by_role("button", name="Stop", exact=True)).to_be_enabled(timeout=60_000)  # this run began
        # Waiting costs Chromium's CPU too, and is counted as the app's: Playwright's expect() polls a text search
        # over the whole page up to ten times a second (it doubled Chromium's share); here one query every 2 s.
        page.wait_for_function(DONE_JS, arg=done.pattern, polling=2000, timeout=600_000)  # (not the saved run's)
        idle(page, timeout=120)
        wall = time.monotonic() - start
        machine1, app1, chromium1 = _machine(), cpu_seconds(proc.pid), _chromium_s()
        rounds = int(re.findall(r"\d+", page.get_by_text(done).inner_text())[0])
        browser.close()
    assert machine0 and machine1
    capacity, busy = machine1[1] - machine0[1], machine1[0] - machine0[0]  # CPU seconds
    app, chromium = app1 - app0, chromium1 - chromium0
    return {"experiment": experiment, "wall_s": round(wall, 2), "rounds": rounds, "load_1min": load,
            "app_s": round(app, 2), "chromium_s": round(chromium, 2), "machine_busy_s": round(busy, 2),
            "machine_capacity_s": round(capacity, 2), "app_share": round(app / capacity, 4),
            "chromium_share": round(chromium / capacity, 4), "both_share": round((app + chromium) / capacity, 4),
            "app_ms_per_round": round(app * 1000 / rounds), "round_ms": round(wall * 1000 / rounds)}


def main() -> dict[str, Any]:
    roots = {"after": Path(__file__).resolve().parent.parent}
    if os.environ.get("BEFORE"):
        roots["before"] = Path(os.environ["BEFORE"]).resolve()
    experiments = (os.environ.get("EXPERIMENTS") or "batch,output").split(",")
    runs: list[dict[str, Any]] = []
    for repeat in range(REPEATS):
        for experiment in experiments:
            for version in sorted(roots, reverse=repeat % 2 == 1):  # alternate which goes first
                row = {"version": version, **one_run(roots[version], experiment)}
                print(row, flush=True)
                runs.append(row)

    def median(version: str, experiment: str, field: str) -> float | None:
        values = [r[field] for r in runs if r["version"] == version and r["experiment"] == experiment]
        return statistics.median(values) if values else None

    summary = {f"{v}_{e}_{f}": median(v, e, f) for v in roots for e in experiments
               for f in ("app_share", "chromium_share", "both_share", "app_ms_per_round", "round_ms", "load_1min")}
    share = summary.get("after_batch_both_share")
    key = {**summary, "goal_met": share is not None and share <= GOAL}
    line = (f"experiment 4 in Chromium: streamlit {summary.get('after_batch_app_share', 0):.1%} + Chromium "
            f"{summary.get('after_batch_chromium_share', 0):.1%} of the machine (medians of {REPEATS}; goal <= 10 %)")
    return finish("app_cpu_share", {"repeats": REPEATS, "runs": runs, "python": sys.version.split()[0]}, key, line)


if __name__ == "__main__":
    main()
