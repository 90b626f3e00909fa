"""A saved run's date as lists, pages and reports show it.

A value no clock can show (1e300, Infinity, NaN, -1e20: written by an older version, another program or
a hand-edited file) is named where the date would be, so one bad run never breaks a whole list.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any


def run_date(seconds: Any) -> str:
    """``YYYY-MM-DD HH:MM`` in local time, or ``not a date (<value>)``."""
    try:
        return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, ValueError, OSError, TypeError):
        return f"not a date ({seconds!r})"
