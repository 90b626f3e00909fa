"""Provider caching rules, read from ``rules.toml`` (a source URL and a date per rule, editable prices),
and what each would bill as cached for the rounds of an analysis."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from core.doctor.causes import common_prefix_length
from core.doctor.model import Round
from core.doctor.render import Rendered

RULES_FILE = Path(__file__).with_name("rules.toml")
DEEPSEEK_UNITS_LOOKBACK = 16  # earlier rounds whose cache prefix units are still considered


@dataclass(frozen=True)
class BillingRule:
    name: str
    kind: str  # steps | units | breakpoints
    minimum: int  # no caching below this many prompt tokens
    step: int  # cached tokens are counted in these units
    input_per_million: float
    cached_per_million: float
    source: str = ""
    checked: str = ""
    note: str = ""
    formats: tuple[str, ...] = ()
    usage_field: str = ""
    minimum_by_model: dict[str, int] = field(default_factory=dict)
    write_5m_multiplier: float = 1.0
    write_1h_multiplier: float = 1.0
    max_breakpoints: int = 0
    lookback_blocks: int = 0

    def minimum_for(self, model: str | None) -> int:
        """The longest model-family key contained in ``model`` decides; else the rule's minimum."""
        matches = [key for key in self.minimum_by_model if model and key in model]
        return self.minimum_by_model[max(matches, key=len)] if matches else self.minimum

    def cached(self, common_prefix_tokens: int, prompt_tokens: int, model: str | None = None) -> int:
        minimum = self.minimum_for(model)
        if prompt_tokens < minimum or common_prefix_tokens < minimum:
            return 0
        return (common_prefix_tokens // self.step) * self.step

    def cost(self, cached_tokens: int, prompt_tokens: int, written_tokens: int = 0, ttl: str = "5m") -> float:
        write = self.write_1h_multiplier if ttl == "1h" else self.write_5m_multiplier
        fresh = prompt_tokens - cached_tokens - written_tokens
        return (fresh * self.input_per_million + cached_tokens * self.cached_per_million
                + written_tokens * self.input_per_million * write) / 1e6

    def edited(self, **changes: Any) -> BillingRule:
        return replace(self, **changes)


def load_rules(path: Path = RULES_FILE) -> dict[str, BillingRule]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    rules = {}
    for item in data["rule"]:
        item = {**item, "formats": tuple(item.get("formats", ())),
                "minimum_by_model": dict(item.get("minimum_by_model", {}))}
        rules[item["name"]] = BillingRule(**item)
    return rules


BILLING_RULES = load_rules()
SOURCE_RULES = {rule.usage_field: name for name, rule in BILLING_RULES.items()}


def rule_for(round_: Round) -> BillingRule:
    """The provider a round was most likely sent to: from the usage field it reported, its model, its format."""
    if round_.measured and round_.measured.source in SOURCE_RULES:
        return BILLING_RULES[SOURCE_RULES[round_.measured.source]]
    if round_.model and "deepseek" in round_.model.lower():
        return BILLING_RULES["DeepSeek"]
    return next((r for r in BILLING_RULES.values() if round_.format in r.formats), BILLING_RULES["OpenAI"])


@dataclass
class Billed:
    cached: int
    written: int = 0
    ttl: str = "5m"


def _deepseek_units(rendered: list[Rendered], rounds: list[Round], index: int) -> int:
    """Characters of the longest stored cache prefix unit that round ``index`` fully matches. Round j
    stored units at the end of its input, at the end of its output (seen as the answer in round j+1),
    and at the prefix it was seen to share with round j-1."""
    current, best = rendered[index].text, 0
    for j in range(max(0, index - DEEPSEEK_UNITS_LOOKBACK), index):
        earlier = rendered[j].text
        units = [(earlier, len(earlier))]
        if j >= 1:
            units.append((earlier, common_prefix_length(rendered[j - 1].text, earlier)))
        follower, after_answer = rendered[j + 1], len(rounds[j].messages) + 1
        if after_answer < len(follower.message_starts) and follower.text.startswith(earlier):
            units.append((follower.text, follower.message_starts[after_answer]))
        for source, length in units:
            if length > best and common_prefix_length(current, source) >= length:
                best = length
    return best


def _anthropic(rule: BillingRule, previous: Rendered, current: Rendered, common: int) -> tuple[int, int, str]:
    """Characters read from the cache and characters written: a read is the previous round's breakpoint
    inside the common prefix and within the lookback of one of this round's breakpoints."""
    read = 0
    for earlier in previous.breakpoints:
        if earlier.end <= common and any(0 <= b.blocks - earlier.blocks <= rule.lookback_blocks and b.end >= earlier.end
                                         for b in current.breakpoints):
            read = max(read, earlier.end)
    last = max(current.breakpoints, key=lambda b: b.end, default=None)
    if last is None:
        return 0, 0, "5m"
    return read, max(last.end - read, 0), last.ttl


def bill_round(rule: BillingRule, analysis: Any, index: int) -> Billed:
    """Tokens a provider following ``rule`` would bill as cached (and written) in round ``index``."""
    finding, round_ = analysis.findings[index], analysis.rounds[index]
    count, text = analysis.counter.count, analysis.rendered[index].text
    minimum = rule.minimum_for(round_.model)
    if rule.kind == "units":
        chars = _deepseek_units(analysis.rendered, analysis.rounds, index)
        return Billed(min(count(text[:chars]), finding.prompt_tokens) if chars else 0)
    if rule.kind == "breakpoints":
        previous = analysis.rendered[index - 1] if index else Rendered("", [], "")
        read, written, ttl = _anthropic(rule, previous, analysis.rendered[index], finding.common_prefix_chars)
        read_tokens = count(text[:read]) if read else 0
        written_tokens = count(text[read:read + written]) if written else 0
        if read_tokens < minimum:
            read_tokens = 0
        if read_tokens + written_tokens < minimum:
            written_tokens = 0
        return Billed(read_tokens, written_tokens, ttl)
    return Billed(rule.cached(finding.common_prefix_tokens, finding.prompt_tokens, round_.model))


def billing(analysis: Any, rule: BillingRule) -> list[dict[str, Any]]:
    """Per round: tokens billed as cached (and written), and the cost as sent and as an append-only version."""
    rows = []
    for index, finding in enumerate(analysis.findings):
        billed = bill_round(rule, analysis, index)
        ideal_prefix = finding.prompt_tokens - finding.append_only_recomputed_tokens
        ideal_cached = rule.cached(ideal_prefix, finding.prompt_tokens, analysis.rounds[index].model)
        rows.append({"round": finding.round, "prompt_tokens": finding.prompt_tokens, "cached_tokens": billed.cached,
                     "written_tokens": billed.written,
                     "cost": rule.cost(billed.cached, finding.prompt_tokens, billed.written, billed.ttl),
                     "append_only_cached_tokens": ideal_cached,
                     "append_only_cost": rule.cost(ideal_cached, finding.prompt_tokens)})
    return rows
