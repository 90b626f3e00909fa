"""The Anthropic breakpoint audit: for each ``cache_control``, what it caches and what keeps it from paying off."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from core.doctor.analysis import Analysis
from core.doctor.causes import RANDOM_ID_PATTERN, TIMESTAMP_PATTERN
from core.doctor.formats import STAND_IN
from core.doctor.model import ANTHROPIC
from core.doctor.rules import BILLING_RULES, BillingRule

# issues, named in content/*.toml under [audit]
UNSTABLE = "unstable_prefix"  # something before it changed since the previous round: it is written again
BELOW_MINIMUM = "below_minimum"  # shorter than the model's minimum: never cached
DYNAMIC_BEFORE = "dynamic_before"  # a timestamp or id sits before it
TTL_SHORT = "ttl_short"  # 5-minute TTL, but the next round came later
TOO_MANY = "too_many_breakpoints"  # more than 4 in one request: the API refuses it
LOOKBACK = "lookback_exceeded"  # more than 20 blocks past the previous round's breakpoint: its write is not found
NO_BREAKPOINT = "no_breakpoint"  # nothing marked: nothing is cached


@dataclass
class AuditItem:
    round: int
    where: str  # tools, system, message N, automatic, or "request" for a request-wide issue
    tokens: int
    ttl: str
    issues: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dynamic(text: str) -> bool:
    """A timestamp or id in the cached prefix; the doctor's own stand-ins for images and files (a digest of
    their bytes, or of a stable file id) are not content that changes, so they are left out."""
    body = STAND_IN.sub("", text.split("\n", 1)[1] if text.startswith("[model ") else text)
    return bool(TIMESTAMP_PATTERN.search(body) or RANDOM_ID_PATTERN.search(body))


def audit(analysis: Analysis, rule: BillingRule = BILLING_RULES["Anthropic"]) -> list[AuditItem]:
    """One item per breakpoint of every Anthropic round, plus request-wide issues."""
    items: list[AuditItem] = []
    for index, (round_, rendered) in enumerate(zip(analysis.rounds, analysis.rendered, strict=True)):
        if round_.format != ANTHROPIC:
            continue
        number, finding = index + 1, analysis.findings[index]
        minimum = rule.minimum_for(round_.model)
        if not rendered.breakpoints:
            items.append(AuditItem(number, "request", finding.prompt_tokens, "", [NO_BREAKPOINT]))
            continue
        if len(rendered.breakpoints) > rule.max_breakpoints:
            items.append(AuditItem(number, "request", finding.prompt_tokens, "", [TOO_MANY]))
        parent = analysis.parents[index] if index < len(analysis.parents) else None
        previous = analysis.rendered[parent] if parent is not None else None
        if previous is not None and previous.breakpoints:
            last_before = max(b.blocks for b in previous.breakpoints)
            later = [b.blocks - last_before for b in rendered.breakpoints if b.blocks >= last_before]
            if later and min(later) > rule.lookback_blocks:
                items.append(AuditItem(number, "request", finding.prompt_tokens, "", [LOOKBACK]))
        gap = None
        following = analysis.rounds[index + 1].time if index + 1 < len(analysis.rounds) else None
        if round_.time and following:
            gap = (following - round_.time).total_seconds()
        for point in rendered.breakpoints:
            tokens = analysis.counter.count(rendered.text[:point.end])
            issues = []
            if finding.breaks_cache and point.end > finding.common_prefix_chars:
                issues.append(UNSTABLE)
            if tokens < minimum:
                issues.append(BELOW_MINIMUM)
            if _dynamic(rendered.text[:point.end]):
                issues.append(DYNAMIC_BEFORE)
            if point.ttl != "1h" and gap is not None and gap > 300:
                issues.append(TTL_SHORT)
            items.append(AuditItem(number, point.where, tokens, point.ttl, issues))
    return items
