"""One colour per idea, shared by the charts and the text: prefill, decode, cache hits.

Recomputed prompt tokens are prefill work, so they wear the prefill colour; reused tokens are
cache hits. Strategies and compared runs get their own neutral scale, never these three.
"""

from __future__ import annotations

PREFILL = "#2563eb"   # blue: reading the prompt, one parallel pass
DECODE = "#ea580c"    # orange: one forward pass per output token
CACHE_HIT = "#16a34a"  # green: prompt tokens reused from the KV cache

PHASES = {"prefill": PREFILL, "decode": DECODE, "cache_hit": CACHE_HIT}

SERIES = ["#4b5563", "#9333ea", "#0891b2", "#be185d", "#a16207", "#64748b"]
