"""The analysis: each round against the one before (where the cache breaks, why, what it costs), and,
where the log has the response's usage, the provider's measured hit beside the prediction.

A round *breaks the cache* when it loses prefix the previous round had built. A change inside the
previous round's final message that loses at most `END_TOLERANCE_TOKENS` (dynamic content at the
very end) is not a breaker; rounds given as whole prompts (one text file each) are judged by the
same tolerance.
"""

from __future__ import annotations

import dataclasses
import difflib
import html
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from core.backends.tokens import EstimatingTokenCounter, TokenCounter
from core.doctor import causes, template
from core.doctor.diagnostics import INCONCLUSIVE
from core.doctor.model import Round, Transcript
from core.doctor.render import Rendered, Span, can_use_template, render_with_template, serialize
from core.doctor.rules import BillingRule, bill_round, rule_for
from core.words import Sentence

END_TOLERANCE_TOKENS = 64  # a one-message round may change this much at its very end without "breaking"
AGREE, PROVIDER_MISSED, PROVIDER_HIT_MORE = "agree", "provider_missed", "provider_hit_more"
BEFORE_LOG = "before_log"  # round 1 read a cache written by requests before the log: nothing to predict from
NOT_COMPARED = "not_compared"  # a trace round that does not hold its whole prompt: no verdict, no cause
UNSEEN_TOKENS = "unseen_tokens"  # the provider counted far more than the body shows: not comparable
UNSEEN_FACTOR = 1.5  # measured prompt tokens beyond this multiple of the estimate: tokens the body does not show
PARENT_LOOKBACK = 16  # earlier rounds a round may continue (an interleaved log of several agents)
MAX_CALIBRATION = 3.0  # a log counting more than this many times the default estimate hides tokens in every round
SAME_TEMPLATE = 0.8  # two heads this similar (by words, after their first difference) are one template with values
TEMPLATE_VALUES = 3  # ... filled with at most this many different values (each may recur: "dog" thrice)
TEMPLATE_WINDOW = 20_000  # characters of each head compared for `SAME_TEMPLATE` (bounds the time on huge tool lists)
WORDS = re.compile(r"\w+|\s+|[^\w\s]")
# why a provider may read less although the prefix is intact (content/*.toml under [unexplained])
GAP_OVER_LIFETIME, BELOW_MINIMUM, ROUTING_CHANGED, NOT_PROMISED = (
    "gap_over_lifetime", "below_minimum", "routing_changed", "not_promised")


EXTENDS = (causes.NONE, causes.END_OF_PROMPT, causes.THINKING_DROPPED_BY_PROVIDER)
EARLIER = "earlier"  # a round that extends an earlier round than the one before (interleaved agents)
HEAD_PARTS = {"model": "the model", "params": "the request parameters", "tools": "the tool list"}


def where(finding: RoundFinding) -> str:
    """Where a break is, in words: a message, or the model, parameters or tools rendered before them."""
    if finding.message_index is not None:
        return f"message {finding.message_index}"
    return HEAD_PARTS.get(finding.field or "tools", "the tool list")


@dataclass
class RoundFinding:
    round: int
    breaks_cache: bool
    cause: str
    message_index: int | None
    field: str | None
    first_diff_char: int | None
    common_prefix_chars: int
    common_prefix_tokens: int
    prompt_tokens: int
    recomputed_tokens: int
    append_only_recomputed_tokens: int
    cacheable_fraction: float
    tokens_exact: bool
    format: str = ""
    provider: str = ""
    predicted_cached_tokens: int | None = None
    measured_cached_tokens: int | None = None
    measured_prompt_tokens: int | None = None
    verdict: str | None = None  # agree | provider_missed | provider_hit_more | before_log | unseen_tokens
    unseen_tokens: int | None = None  # prompt tokens the provider counted that the body does not show
    compared_with: int | None = None  # the earlier round it continues (the one sharing the longest prefix)
    gap_seconds: float | None = None  # time since that round, where the log has timestamps
    lifetime_seconds: int | None = None  # the provider's cache lifetime that applies to this round
    unexplained: list[str] = dataclasses.field(default_factory=list)  # what could explain a miss not in the body
    provider_reason: str | None = None  # the provider's own diagnostics: its reason, as it names it
    provider_section: str | None = None  # ... the part of the request it names (model, system, tools, ...)
    provider_missed_tokens: int | None = None
    diagnosis_agrees: bool | None = None  # the doctor's cause names the same part (None: nothing to compare)
    lost_tokens: int | None = None  # tokens of the round it continues that this round no longer starts with
    old_value: str | None = None  # varying_prefix: the value in the round it continues ...
    new_value: str | None = None  # ... and in this one, where the two first differ
    shareable_tokens: int | None = None  # varying_prefix: tokens both share after the value (cached if it moved)
    not_compared: str | None = None  # why this round gets no verdict (a trace that does not hold the whole prompt)
    field_char: int | None = None  # where the first difference is within the named message's field (or the tools)
    minimum_tokens: int | None = None  # the provider's minimum for this model, where a measured count was judged
    provider_side: bool = False  # prefix kept, minimum met, still missed, nothing in the payload: the provider's side
    parameter: str | None = None  # params_changed: the parameter (dotted, thinking.budget_tokens); old/new_value
    old_snippet: str = ""
    new_snippet: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Analysis:
    findings: list[RoundFinding]
    rendering: str
    errors: list[str]
    rounds: list[Round] = field(default_factory=list)
    rendered: list[Rendered] = field(default_factory=list)
    counter: Any = None
    notes: list[str] = field(default_factory=list)
    parents: list[int | None] = field(default_factory=list)  # per round, the index of the round it continues

    @property
    def first_break(self) -> RoundFinding | None:
        return next((f for f in self.findings if f.breaks_cache), None)

    @property
    def formats(self) -> list[str]:
        return sorted({f.format for f in self.findings})

    def continuations(self) -> dict[str, int]:
        """From round 2 on, how each round that does not break the cache relates to the one it continues: it
        extends the round before (``none``: also reasoning its provider drops itself), extends an earlier round
        (`EARLIER`), replaces or edits the last message (``end_of_prompt``), or its cause (another conversation,
        a change of format, history on the server, not compared)."""
        counts: dict[str, int] = {}
        for f in self.findings[1:]:
            if not f.breaks_cache:
                key = "none" if f.cause in EXTENDS else f.cause
                if f.cause == causes.END_OF_PROMPT:
                    key = causes.END_OF_PROMPT  # it replaced (or edited) the last message: said so
                elif key == "none" and f.compared_with is not None and f.compared_with != f.round - 1:
                    key = EARLIER
                counts[key] = counts.get(key, 0) + 1
        return counts

    def totals(self) -> dict[str, int]:
        return {"recomputed": sum(f.recomputed_tokens for f in self.findings),
                "append_only": sum(f.append_only_recomputed_tokens for f in self.findings)}


def snippet(text: str, position: int, radius: int = 60) -> str:
    """HTML: ``radius`` characters either side of ``position``, the rest of the line marked."""
    lo, hi = max(0, position - radius), min(len(text), position + radius)
    before, after = html.escape(text[lo:position]), html.escape(text[position:hi])
    return f"{'…' if lo else ''}{before}<mark>{after}</mark>{'…' if hi < len(text) else ''}"


def _calibrated(transcript: Transcript, rendered: list[Rendered]) -> TokenCounter:
    """An estimate corrected by the prompt tokens the providers reported. Rounds whose count is far from the
    log's usual ratio (web search results, images or files counted server-side) are left out, and a log
    whose every round counts several times what its text could hold is not calibrated from at all."""
    counter = EstimatingTokenCounter()
    pairs = [(len(r.text), round_.measured.prompt_tokens / max(counter.count(r.text), 1), round_.measured.prompt_tokens)
             for r, round_ in zip(rendered, transcript.rounds, strict=True)
             if round_.measured and round_.measured.prompt_tokens]
    if not pairs:
        return counter
    usual = sorted(ratio for _, ratio, _ in pairs)[(len(pairs) - 1) // 2]  # the lower median: extras only add
    plain = [(chars, tokens) for chars, ratio, tokens in pairs
             if usual / UNSEEN_FACTOR <= ratio <= usual * UNSEEN_FACTOR]
    if usual <= MAX_CALIBRATION:
        counter.observe(sum(c for c, _ in plain), sum(t for _, t in plain))
    return counter


def verdict(predicted: int, measured: int, prompt_tokens: int) -> str:
    """Whether the provider's own hit agrees with the prediction: within one 128-token cache step, or 5 % of the
    prompt for the calibrated estimate's error (15 % let a long prompt hide a miss of thousands of tokens)."""
    tolerance = max(128, 0.05 * prompt_tokens)
    if abs(measured - predicted) <= tolerance:
        return AGREE
    return PROVIDER_MISSED if measured < predicted else PROVIDER_HIT_MORE


def doctor_section(finding: RoundFinding, round_: Round) -> str:
    """The part of the request the doctor's cause names, in the providers' diagnostics' terms."""
    if not finding.breaks_cache:
        return "none"
    if finding.cause == causes.MODEL_CHANGED:
        return "model"
    if finding.field == "params":
        return "params"
    if finding.field == "tools" or finding.message_index is None:
        return "tools"
    first = round_.messages[finding.message_index] if finding.message_index < len(round_.messages) else None
    return "system" if finding.message_index == 0 and first is not None and first.role in causes.SYSTEM_ROLES \
        else "messages"


def _compare(previous: Rendered, current: Rendered, prev_round: Round, cur_round: Round,
             counter: TokenCounter) -> tuple[int, bool, str, Any]:
    """Common prefix (characters), whether the round breaks, the cause, and the span of the first difference."""
    common = causes.common_prefix_length(previous.text, current.text)
    if cur_round.server_history:
        return common, False, causes.SERVER_HISTORY, None
    if prev_round.format != cur_round.format:  # a mixed log: two formats are never one cache
        return common, False, causes.FORMAT_CHANGED, None
    if common >= len(previous.text):
        return common, False, causes.NONE, None
    span_prev, span_cur = previous.locate(common), current.locate(common)
    last = len(prev_round.messages) - 1
    last_start = previous.message_starts[last] if last < len(previous.message_starts) else len(previous.text)
    in_last = span_prev is not None and span_prev.message_index == last and span_prev.field != "role"
    in_last = in_last or (span_prev is not None and span_prev.field == "template" and common >= last_start)
    whole_prompts = len(prev_round.messages) == 1 and not prev_round.tools
    head = _head_span(span_prev, span_cur)  # model, parameters, tools: keyed, never a tail edit
    if causes.compacted(prev_round, cur_round):  # a compaction replaced the history: never a tail edit either
        return common, True, causes.HISTORY_COMPACTED, span_cur or span_prev
    if head is None and (in_last or whole_prompts) and counter.count(previous.text[common:]) <= END_TOLERANCE_TOKENS:
        return common, False, causes.END_OF_PROMPT, span_cur or span_prev
    cause = causes.classify(prev_round, cur_round, previous, current, span_prev, span_cur)
    if cause == causes.THINKING_STRIPPED and rule_for(cur_round).drops_earlier_thinking(cur_round.model):
        return common, False, causes.THINKING_DROPPED_BY_PROVIDER, span_cur or span_prev
    return common, True, cause, head or span_cur or span_prev


def _head_span(span_prev: Span | None, span_cur: Span | None) -> Span | None:
    """The span in the model, parameters or tools where either round's first difference falls: a tool list
    removed shows in the new round as its first message, yet the change is at the tools."""
    return next((s for s in (span_prev, span_cur) if s is not None and s.message_index is None
                 and s.field in causes.HEAD_FIELDS), None)


def analyse(transcript: Transcript, counter: TokenCounter | None = None, backend: Any = None) -> Analysis:
    """Compare each round with the earlier round it continues (`_parent`: usually the one before); one finding
    per round (round 1 has nothing before it)."""
    rendered = [render_with_template(r, backend) if backend is not None and can_use_template(r) else serialize(r)
                for r in transcript.rounds]
    counter = counter or _calibrated(transcript, rendered)
    how = sorted({r.how for r in rendered}) or ["stable serialization"]
    findings: list[RoundFinding] = []
    analysis = Analysis(findings, " and ".join(how), list(transcript.errors), transcript.rounds, rendered, counter,
                        list(transcript.notes))
    for index, (current, cur_round) in enumerate(zip(rendered, transcript.rounds, strict=True)):
        tokens = counter.count(current.text)
        finding = RoundFinding(round=index + 1, breaks_cache=False, cause=causes.NONE, message_index=None, field=None,
                               first_diff_char=None, common_prefix_chars=0, common_prefix_tokens=0,
                               prompt_tokens=tokens, recomputed_tokens=tokens, append_only_recomputed_tokens=tokens,
                               cacheable_fraction=0.0, tokens_exact=counter.exact, format=cur_round.format)
        gap = _gap(transcript.rounds, index)
        if gap is not None:  # the input does not hold this round (or the one before) whole: named, no verdict
            findings.append(_not_compared(finding, gap, cur_round))
            analysis.parents.append(None)
            continue
        parent = index - 1 if index else None
        if parent is not None:
            parent, compared, varying = _continues(transcript.rounds, rendered, index, counter)
        analysis.parents.append(parent)
        if parent is not None:
            finding = _against(finding, findings[parent], rendered[parent], current, cur_round, counter, compared)
            _name_change(finding, transcript.rounds[parent], cur_round, varying, counter)
        findings.append(finding)
        finding.compared_with = parent + 1 if parent is not None else None
        rule = rule_for(cur_round)
        finding.provider = rule.name
        billed = bill_round(rule, analysis, index)
        finding.predicted_cached_tokens = billed.cached
        previous_time = transcript.rounds[parent].time if parent is not None else None
        if cur_round.time and previous_time:
            finding.gap_seconds = (cur_round.time - previous_time).total_seconds()
        retention = _retention(transcript.rounds[parent], billed.ttl) if parent is not None else None
        finding.lifetime_seconds = rule.lifetime(retention)
        if cur_round.measured is not None:
            _judge(finding, cur_round, rule, analysis, index)
        if cur_round.diagnosis is not None:
            finding.provider_reason = cur_round.diagnosis.reason
            finding.provider_section = cur_round.diagnosis.section
            finding.provider_missed_tokens = cur_round.diagnosis.missed_tokens
            if cur_round.diagnosis.section != INCONCLUSIVE and index:
                finding.diagnosis_agrees = cur_round.diagnosis.section == doctor_section(finding, cur_round)
    if backend is not None:  # a llama-server: breaks its chat template makes in a body that kept its prefix
        parents = [f.compared_with for f in findings]
        mark_rewrites(analysis, template.check(transcript, backend, parents))
    return analysis


def _continues(rounds: list[Round], rendered: list[Rendered], index: int, counter: TokenCounter
               ) -> tuple[int, tuple[int, bool, str, Any], tuple[str, str, str] | None]:
    """The earlier round that round ``index`` continues (the last whole one before, else `_parent` where that one
    breaks), what `_compare` found against it, and for another conversation built from the same prompt, the value
    that changes early in it (`_varying_prefix`); another agent's or task's round is `NEW_CONVERSATION`."""
    parent, current, cur_round = _whole_before(rounds, index) or 0, rendered[index], rounds[index]
    common, breaks, cause, span = _compare(rendered[parent], current, rounds[parent], cur_round, counter)
    better = _parent(rendered, index, rounds) if breaks else parent  # searched only where the round before breaks
    if better != parent:
        parent = better
        common, breaks, cause, span = _compare(rendered[parent], current, rounds[parent], cur_round, counter)
    previous, prev_round = rendered[parent], rounds[parent]
    varying = None
    if breaks and cause != causes.HISTORY_COMPACTED and not _shares_turn(prev_round, cur_round):
        varying = _varying_prefix(prev_round, cur_round, previous, current, span)
        if varying is None and _unrelated(prev_round, cur_round, previous, current, span):
            breaks, cause = False, causes.NEW_CONVERSATION
        elif varying is None and cause in (causes.HISTORY_EDITED, causes.OTHER) \
                and rewrites_last(prev_round, cur_round, span.message_index if span is not None else None):
            breaks, cause = False, causes.LAST_MESSAGE_REPLACED
        elif varying is not None and cause not in (causes.TIMESTAMP, causes.RANDOM_ID):
            cause = causes.VARYING_PREFIX
    return parent, (common, breaks, cause, span), varying


def _whole_before(rounds: list[Round], index: int) -> int | None:
    """The latest round before ``index`` (within `PARENT_LOOKBACK`) that the input holds whole."""
    return next((j for j in range(index - 1, max(-1, index - 1 - PARENT_LOOKBACK), -1) if not rounds[j].gap), None)


def _gap(rounds: list[Round], index: int) -> str | None:
    """Why round ``index`` cannot be compared: what its input lacks, or, when no round before it is whole, what
    the round before it lacks (a round after a cut one is compared with the last whole round instead)."""
    if rounds[index].gap:
        return rounds[index].gap
    if index and _whole_before(rounds, index) is None:
        return Sentence("doctor_read.before_not_whole", gap=rounds[index - 1].gap)
    return None


def _not_compared(finding: RoundFinding, gap: str, round_: Round) -> RoundFinding:
    """A round the input does not hold whole: its reason, no tokens, no cause and no verdict."""
    return dataclasses.replace(finding, cause=NOT_COMPARED, not_compared=gap, prompt_tokens=0, recomputed_tokens=0,
                               append_only_recomputed_tokens=0, provider=rule_for(round_).name)


def _against(alone: RoundFinding, parent: RoundFinding, previous: Rendered, current: Rendered, cur_round: Round,
             counter: TokenCounter, compared: tuple[int, bool, str, Any]) -> RoundFinding:
    """A round's finding against the earlier round it continues: ``compared`` is what `_compare` found."""
    common, breaks, cause, span = compared
    tokens = alone.prompt_tokens
    common_tokens = min(counter.count(current.text[:common]), tokens) if common else 0
    last = cur_round.messages[-1].text() if cur_round.messages else ""
    append_only = max(tokens - parent.prompt_tokens, counter.count(last))
    diff = common if span is not None else None
    start = _block_start(current, span) if span is not None else None
    start = start if start is not None or span is None else _block_start(previous, span)
    return dataclasses.replace(
        alone, breaks_cache=breaks, cause=cause, message_index=span.message_index if span else None,
        field=span.field if span else None, first_diff_char=diff, common_prefix_chars=common,
        common_prefix_tokens=common_tokens, recomputed_tokens=max(tokens - common_tokens, 0),
        append_only_recomputed_tokens=min(append_only, tokens),
        cacheable_fraction=round(common_tokens / tokens, 4) if tokens else 0.0,
        lost_tokens=max(parent.prompt_tokens - common_tokens, 0),
        field_char=diff - start if diff is not None and start is not None and start <= diff else diff,
        old_snippet=snippet(previous.text, diff) if diff is not None else "",
        new_snippet=snippet(current.text, diff) if diff is not None else "")


def _block_start(rendered: Rendered, span: Span) -> int | None:
    """Where the named part starts: a message's block (its content, a tool call), or the whole tool list, the
    parameters, the model."""
    if span.message_index is None:
        return next((s.start for s in rendered.spans if s.message_index is None and s.field == span.field), None)
    return next((s.start for s in rendered.spans
                 if (s.message_index, s.field, s.block) == (span.message_index, span.field, span.block)), None)


def _flat(value: Any, name: str = "") -> dict[str, Any]:
    """Nested parameters as dotted names (``thinking.budget_tokens``)."""
    if isinstance(value, dict):
        return {key: v for k, item in value.items() for key, v in _flat(item, f"{name}.{k}" if name else k).items()}
    return {name: value}


def changed_parameter(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first cache-keyed parameter whose value differs, with both values (None where a round has none)."""
    old, new = _flat(before), _flat(after)
    name = next((k for k in [*old, *(k for k in new if k not in old)] if old.get(k) != new.get(k)), None)
    return None if name is None else (name, old.get(name), new.get(name))


def _name_change(finding: RoundFinding, prev_round: Round, cur_round: Round, varying: tuple[str, str, str] | None,
                 counter: TokenCounter) -> None:
    """What the finding names of its change: a varying value early in another conversation, the parameter that
    changed (and both values)."""
    if varying is not None:
        finding.old_value, finding.new_value = varying[0], varying[1]
        finding.shareable_tokens = counter.count(varying[2])
    if finding.cause == causes.PARAMS_CHANGED:
        change = changed_parameter(prev_round.keyed, cur_round.keyed)
        if change is not None:
            finding.parameter = change[0]
            finding.old_value, finding.new_value = (json.dumps(v, ensure_ascii=False) for v in change[1:])


def mark_rewrites(analysis: Analysis, result: template.TemplateCheck) -> None:
    """Name the template as the cause of each round where it rewrote an earlier turn, with exact tokens."""
    for row in result.rewrites:
        finding = analysis.findings[row.round - 1]
        previous = result.rounds[(row.compared_with or row.round - 1) - 1]
        common = row.common_tokens or 0
        at = row.first_diff_char or 0
        finding.breaks_cache, finding.cause = True, causes.TEMPLATE_REWROTE
        finding.message_index, finding.field, finding.first_diff_char = row.rewrote_message, row.field, at
        finding.prompt_tokens, finding.common_prefix_tokens = row.tokens, common
        finding.recomputed_tokens = row.tokens - common
        finding.cacheable_fraction = round(common / row.tokens, 4) if row.tokens else 0.0
        finding.old_snippet, finding.new_snippet = snippet(previous.text, at), snippet(row.text, at)
        analysis.notes.append(f"round {row.round}: the chat template rewrote turn {row.rewrote_message} "
                              f"({row.field}) although the body only appended; {finding.recomputed_tokens:,} tokens "
                              "are recomputed")
    analysis.notes += [row.error for row in result.rounds if row.error]


def _parent(rendered: list[Rendered], index: int, rounds: list[Round]) -> int:
    """Among the last `PARENT_LOOKBACK` rounds before round ``index`` (from 1), the one sharing the longest
    prefix with it (the latest of equals): a log of several agents interleaves their conversations, and a
    provider keeps each one's cache, so the round before in the log is not always the one that matters."""
    current = rendered[index].text
    candidates = [j for j in range(index - 1, max(-1, index - 1 - PARENT_LOOKBACK), -1) if not rounds[j].gap]
    return max(candidates, key=lambda j: (causes.common_prefix_length(rendered[j].text, current), j))


def _head(rendered: Rendered, round_: Round) -> str:
    """The text before the round's first message after the system prompt: model, tools, system prompt."""
    first = next((i for i, m in enumerate(round_.messages) if m.role not in causes.SYSTEM_ROLES), None)
    starts = rendered.message_starts
    return rendered.text[:starts[first]] if first is not None and first < len(starts) else rendered.text


def _shares_turn(parent: Round, current: Round) -> bool:
    """Whether the two rounds share a message after the system prompt (then they are one conversation)."""
    keys = {m.key() for m in parent.messages if m.role not in causes.SYSTEM_ROLES}
    return bool(keys & {m.key() for m in current.messages if m.role not in causes.SYSTEM_ROLES})


def _varying_prefix(parent: Round, current: Round, old: Rendered, new: Rendered,
                    span: Any) -> tuple[str, str, str] | None:
    """Another conversation built from the same prompt with a value that changes early in it (crewAI's
    kickoff_for_each puts each input into the agent's role): the first difference lies before the first
    message after the system prompt, and the heads (model, tools, system prompt) after it are the same
    template (`SAME_TEMPLATE` of their words match, and every difference is one of `TEMPLATE_VALUES` values
    replaced: two agents with their own roles and backstories are two prompts, not one template). Returns the
    value in each round (the words where they first differ) and the text both share after it, else None."""
    first = next((i for i, m in enumerate(current.messages) if m.role not in causes.SYSTEM_ROLES),
                 len(current.messages))
    at = span.message_index if span is not None else None
    if at is not None and at >= first:
        return None
    head_old, head_new = _head(old, parent), _head(new, current)
    start = causes.common_prefix_length(head_old, head_new)
    if start >= min(len(head_old), len(head_new)):
        return None
    lo = start - len(re.findall(r"\w*$", head_old[:start])[0])  # back to the start of the word
    words_old = WORDS.findall(head_old[lo:lo + TEMPLATE_WINDOW])
    words_new = WORDS.findall(head_new[lo:lo + TEMPLATE_WINDOW])
    matcher = difflib.SequenceMatcher(None, words_old, words_new, autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    values = {("".join(words_old[i1:i2]).strip(), "".join(words_new[j1:j2]).strip()) for _, i1, i2, j1, j2 in changes}
    if matcher.ratio() < SAME_TEMPLATE or len(values) > TEMPLATE_VALUES:
        return None
    _, i1, i2, j1, j2 = changes[0]
    while (i1 == i2 or j1 == j2) and i1 and j1:  # an insertion or deletion: shown with the word before it
        i1, j1 = i1 - 1, j1 - 1
        if not words_old[i1].isspace() and words_old[i1] == words_new[j1] and words_old[i1][0].isalnum():
            break
    shared = "".join("".join(words_new[b.b:b.b + b.size]) for b in matcher.get_matching_blocks() if b.b >= j2)
    return "".join(words_old[i1:i2]).strip(), "".join(words_new[j1:j2]).strip(), shared


def _unrelated(parent: Round, current: Round, old: Rendered, new: Rendered, span: Any) -> bool:
    """Another agent's or task's request, not a continuation: the two share no message after the system
    prompt, and differ either in that first message itself or in a head (model, tools, system prompt)
    that is not the same one edited (less than half of it shared at its start and end). Its cache is its
    own (what it shares, such as the system prompt, is still read): no break. Rounds given as whole prompts
    (one message each) are one conversation by construction."""
    if len(parent.messages) == 1 and len(current.messages) == 1:
        return False
    keys = {m.key() for m in parent.messages if m.role not in causes.SYSTEM_ROLES}
    if keys & {m.key() for m in current.messages if m.role not in causes.SYSTEM_ROLES}:
        return False
    first = next((i for i, m in enumerate(current.messages) if m.role not in causes.SYSTEM_ROLES),
                 len(current.messages))
    at = span.message_index if span is not None else None
    if at is not None and at > first:
        return False
    if at == first:
        return not rewrites_last(parent, current, at)
    head_old, head_new = _head(old, parent), _head(new, current)
    start = causes.common_prefix_length(head_old, head_new)
    end = causes.common_prefix_length(head_old[start:][::-1], head_new[start:][::-1])
    return start + end < 0.5 * min(len(head_old), len(head_new))


def rewrites_last(parent: Round, current: Round, at: int | None) -> bool:
    """A step that rewrites the last message of the same conversation (a ReAct agent's scratchpad grown in its
    one user message): the first difference is in the earlier round's last message, and the two share at least
    half of that message from its start. Not another conversation: the same one, its last message replaced."""
    if at is None or at != len(parent.messages) - 1 or at >= len(current.messages):
        return False
    old, new = parent.messages[at].text(), current.messages[at].text()
    return bool(old) and causes.common_prefix_length(old, new) >= 0.5 * len(old)


def _retention(previous: Round, ttl: str) -> str | None:
    """The cache lifetime option the previous round asked for: OpenAI's prompt_cache_retention, else the
    Anthropic TTL of its breakpoints."""
    retention = previous.routing.get("prompt_cache_retention")
    return str(retention) if retention else ttl


def _judge(finding: RoundFinding, round_: Round, rule: BillingRule, analysis: Analysis, index: int) -> None:
    """The provider's measured hit beside the prediction, the prediction scaled to the prompt tokens the
    provider reported; and where the provider read less although the prefix is intact, what could explain it."""
    measured = round_.measured
    assert measured is not None
    finding.measured_cached_tokens = measured.cached_tokens
    finding.measured_prompt_tokens = measured.prompt_tokens
    reported = measured.prompt_tokens or finding.prompt_tokens
    estimate = finding.prompt_tokens
    if reported > UNSEEN_FACTOR * estimate and reported - estimate > 128:
        finding.unseen_tokens = reported - estimate
        finding.verdict = UNSEEN_TOKENS
        return
    scale = reported / estimate if estimate else 1.0
    predicted = finding.predicted_cached_tokens or 0
    if scale != 1.0 and predicted:  # the same cut, in the provider's tokens
        prefix = round(finding.common_prefix_tokens * scale) if rule.kind == "steps" else round(predicted * scale)
        predicted = rule.cached(prefix, reported, round_.model) if rule.kind == "steps" else min(prefix, reported)
        finding.predicted_cached_tokens = predicted
    if index == 0 and measured.cached_tokens > predicted:
        finding.verdict = BEFORE_LOG
        return
    finding.verdict = verdict(predicted, measured.cached_tokens, reported)
    if finding.verdict == PROVIDER_MISSED and not finding.breaks_cache:
        parent = analysis.parents[index]
        finding.unexplained = _unexplained(finding, round_, analysis.rounds[parent] if parent is not None else None,
                                           rule, reported)
        finding.minimum_tokens = rule.minimum_for(round_.model)
        finding.provider_side = bool(finding.unexplained) and set(finding.unexplained) <= {GAP_OVER_LIFETIME,
                                                                                            NOT_PROMISED}


def _unexplained(finding: RoundFinding, round_: Round, previous: Round | None, rule: BillingRule,
                 reported: int) -> list[str]:
    """What the payload cannot show that could explain a smaller hit: the cache's lifetime running out
    between the rounds, a prompt below the model's minimum, a different cache key or user (another machine)."""
    reasons = []
    if finding.gap_seconds is not None and finding.lifetime_seconds is not None \
            and finding.gap_seconds > finding.lifetime_seconds:
        reasons.append(GAP_OVER_LIFETIME)
    if reported < rule.minimum_for(round_.model):
        reasons.append(BELOW_MINIMUM)
    if previous is not None and any(previous.routing.get(k) != round_.routing.get(k)
                                    for k in ("prompt_cache_key", "user", "safety_identifier", "metadata.user_id")):
        reasons.append(ROUTING_CHANGED)
    return reasons or [NOT_PROMISED]
