"""Self-contained HTML reports of stored runs (`html.build_report`): charts from `core.charts`, words from `words`."""

from __future__ import annotations

from core.report.html import VENDORED, build_report
from core.words import ContentWords, Words

__all__ = ["VENDORED", "ContentWords", "Words", "build_report"]
