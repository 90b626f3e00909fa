"""Provider caching rules, read from ``rules.toml`` (a source URL and a date per rule, editable prices),
and what each would bill as cached for the rounds of an analysis."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from core.doctor.causes import common_prefix_length
from core.doctor.model import CHAT, RESPONSES, Round
from core.doctor.render import Rendered
from core.words import Sentence, load

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
    note: str = ""  # a rule added to rules.toml by hand; the shipped rules' words are in content/ (`described`)
    formats: tuple[str, ...] = ()
    usage_field: str = ""
    minimum_by_model: dict[str, int] = field(default_factory=dict)
    write_5m_multiplier: float = 1.0
    write_1h_multiplier: float = 1.0
    max_breakpoints: int = 0
    lookback_blocks: int = 0
    hosts: tuple[str, ...] = ()
    marks: tuple[str, ...] = ()  # keys only this provider writes in a response (usage, body, headers)
    models: tuple[str, ...] = ()
    lifetimes: dict[str, int] = field(default_factory=dict)  # seconds an unused prefix is kept, per option
    lifetime_source: str = ""
    thinking: dict[str, str] = field(default_factory=dict)  # model family -> "dropped" | "kept"

    def _family(self, table: dict[str, Any], model: str | None) -> Any:
        matches = [key for key in table if key == "" or model and key in model]
        return table[max(matches, key=len)] if matches else None

    def drops_earlier_thinking(self, model: str | None) -> bool:
        """Whether this provider drops earlier turns' thinking itself for ``model`` (then a client that drops
        it loses no cached prefix); unknown families are assumed to keep it, the case where it costs."""
        return bool(self._family(self.thinking, model) == "dropped")

    def lifetime(self, ttl: str | None = None) -> int | None:
        """Seconds an unused cached prefix lives: for ``ttl`` (an Anthropic TTL, an OpenAI retention), else
        the shortest option; None where the provider publishes none."""
        if ttl and ttl in self.lifetimes:
            return self.lifetimes[ttl]
        return min(self.lifetimes.values()) if self.lifetimes else None

    def minimum_for(self, model: str | None) -> int:
        """The longest model-family key contained in ``model`` decides; else the rule's minimum."""
        found = self._family(self.minimum_by_model, model)
        return int(found) if found is not None else self.minimum

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

    def described(self) -> str:
        """What the provider documents: the words under ``[doctor_rules]`` named after the rule (both languages),
        else the rule's own ``note``."""
        key = re.sub(r"[^a-z0-9]+", "_", self.name.lower()).strip("_")
        return Sentence(f"doctor_rules.{key}") if key in load("en")["doctor_rules"] else self.note

    def edited(self, **changes: Any) -> BillingRule:
        return replace(self, **changes)


def load_rules(path: Path = RULES_FILE) -> dict[str, BillingRule]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    rules = {}
    for item in data["rule"]:
        item = {**item, "formats": tuple(item.get("formats", ())), "hosts": tuple(item.get("hosts", ())),
                "marks": tuple(item.get("marks", ())),
                "models": tuple(item.get("models", ())), "minimum_by_model": dict(item.get("minimum_by_model", {})),
                "lifetimes": dict(item.get("lifetimes", {})), "thinking": dict(item.get("thinking", {}))}
        rules[item["name"]] = BillingRule(**item)
    return rules


BILLING_RULES = load_rules()
SOURCE_RULES = {rule.usage_field: name for name, rule in BILLING_RULES.items() if rule.usage_field}
OTHER_SERVER = "OpenAI-compatible"


def _host(endpoint: str) -> str:
    return urlsplit(endpoint).hostname or "" if "://" in endpoint else ""


def served_by(response: Any, headers: Any = None) -> str | None:
    """The provider whose own keys (`BillingRule.marks`) a response carries: in its body, its usage, or the
    headers the log kept."""
    if not isinstance(response, Mapping):
        return None
    body: Mapping[str, Any] = response["body"] if isinstance(response.get("body"), Mapping) else response
    usage: Mapping[str, Any] = body["usage"] if isinstance(body.get("usage"), Mapping) else {}
    headers = headers if isinstance(headers, Mapping) else response.get("headers")
    named: Mapping[str, Any] = headers if isinstance(headers, Mapping) else {}
    keys = {*body, *usage, *(str(k).lower() for k in named)}
    return next((name for name, rule in BILLING_RULES.items() if keys & set(rule.marks)), None)


def rule_for(round_: Round) -> BillingRule:
    """The provider a round was most likely sent to: the host of its endpoint, else the marks its response
    carries (`served_by`), else its model, else the usage field it reported, else its format. A URL whose host no
    rule names is another OpenAI-compatible server, whose minimum is unknown (not OpenAI's)."""
    host = _host(round_.endpoint)
    if host:
        named = [r for r in BILLING_RULES.values() if any(host == h or host.endswith("." + h) for h in r.hosts)]
        if named:
            return named[0]
    if round_.served_by in BILLING_RULES:  # the response's own marks (Groq's usage timings) name it
        return BILLING_RULES[round_.served_by]
    model = (round_.model or "").lower().rsplit("/", 1)[-1]
    by_model = [r for r in BILLING_RULES.values() if any(model.startswith(m) for m in r.models)]
    if by_model and not host:
        return by_model[0]
    if host and round_.format in (CHAT, RESPONSES):
        return BILLING_RULES[OTHER_SERVER]
    if round_.measured and round_.measured.source in SOURCE_RULES:
        return BILLING_RULES[SOURCE_RULES[round_.measured.source]]
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
    """Characters read from the cache and characters written. A read ends at a block boundary of this round
    inside the common prefix and inside an entry the previous round wrote (at or before one of its
    breakpoints), within the lookback of one of this round's breakpoints: the provider looks for hits at
    earlier block boundaries, and a logged Anthropic response (tests/data/doctor/cassettes, crewAI) reads
    the system prompt of an entry written at a later breakpoint."""
    written_to = max((b.end for b in previous.breakpoints), default=0)
    read = 0
    for number, end in enumerate(current.block_ends, start=1):
        if end <= min(common, written_to) and any(0 <= b.blocks - number <= rule.lookback_blocks and b.end >= end
                                                  for b in current.breakpoints):
            read = max(read, end)
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
        parent = analysis.parents[index] if index < len(analysis.parents) else None
        previous = analysis.rendered[parent] if parent is not None else Rendered("", [], "")
        read, written, ttl = _anthropic(rule, previous, analysis.rendered[index], finding.common_prefix_chars)
        read_tokens = count(text[:read]) if read else 0
        written_tokens = count(text[read:read + written]) if written else 0
        if read_tokens < minimum:
            read_tokens = 0
        if read_tokens + written_tokens < minimum:
            written_tokens = 0
        return Billed(read_tokens, written_tokens, ttl)
    parent = analysis.parents[index] if index < len(analysis.parents) else None
    if parent is not None and _written(analysis, parent) < minimum:
        return Billed(0)  # the round it continues was below the minimum: nothing of it was cached to read
    return Billed(rule.cached(finding.common_prefix_tokens, finding.prompt_tokens, round_.model))


def _written(analysis: Any, index: int) -> int:
    """Prompt tokens of round ``index`` as its provider counted them (else as estimated): below the
    provider's minimum, that round wrote nothing to the cache."""
    measured = analysis.rounds[index].measured
    if measured is not None and measured.prompt_tokens:
        return int(measured.prompt_tokens)
    return int(analysis.findings[index].prompt_tokens)


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
