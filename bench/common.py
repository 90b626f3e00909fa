"""What every benchmark shares: min/median/max, a printed table, and a JSON file of results."""

from __future__ import annotations

import json
import platform
import statistics
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def spread(values: Sequence[float]) -> dict[str, float]:
    values = [v for v in values if v is not None]
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3),
            "n": len(values)}


def table(rows: list[tuple[str, dict[str, float]]], unit: str) -> str:
    width = max(len(name) for name, _ in rows)
    lines = [f"{'':{width}}  {'min':>10} {'median':>10} {'max':>10}  ({unit}, n)"]
    lines += [
        f"{name:{width}}  {s['min']:>10.3f} {s['median']:>10.3f} {s['max']:>10.3f}  ({s['n']})" for name, s in rows
    ]
    return "\n".join(lines)


def finish(name: str, data: dict[str, Any], key: dict[str, Any], line: str) -> dict[str, Any]:
    """Save the results with their key figure and print the last line every benchmark ends with."""
    save(name, {**data, "key": key})
    verdict = "" if "goal_met" not in key else f": {'met' if key['goal_met'] else 'NOT met'}"
    print(f"KEY: {line}{verdict}")
    return key


def save(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    meta = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "command": f"python -m bench {name}",
    }
    path.write_text(json.dumps({**meta, **data}, indent=2))
    return path
