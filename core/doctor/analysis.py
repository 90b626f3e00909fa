"""The analysis: each round against the one before (where the cache breaks, why, what it costs), and,
where the log has the response's usage, the provider's measured hit beside the prediction.

A round *breaks the cache* when it loses prefix the previous round had built. A change inside the
previous round's final message that loses at most `END_TOLERANCE_TOKENS` (dynamic content at the
very end) is not a breaker; rounds given as whole prompts (one text file each) are judged by the
same tolerance.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from typing import Any

from core.doctor import causes, template
from core.doctor.model import Round, Transcript
from core.doctor.render import Rendered, can_use_template, render_with_template, serialize
from core.doctor.rules import bill_round, rule_for
from core.experiments.prompts import EstimatingTokenCounter, TokenCounter

END_TOLERANCE_TOKENS = 64  # a one-message round may change this much at its very end without "breaking"
AGREE, PROVIDER_MISSED, PROVIDER_HIT_MORE = "agree", "provider_missed", "provider_hit_more"


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
    verdict: str | None = None  # agree | provider_missed | provider_hit_more, where the log has usage
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

    @property
    def first_break(self) -> RoundFinding | None:
        return next((f for f in self.findings if f.breaks_cache), None)

    @property
    def formats(self) -> list[str]:
        return sorted({f.format for f in self.findings})

    def totals(self) -> dict[str, int]:
        return {"recomputed": sum(f.recomputed_tokens for f in self.findings),
                "append_only": sum(f.append_only_recomputed_tokens for f in self.findings)}


def snippet(text: str, position: int, radius: int = 60) -> str:
    """HTML: ``radius`` characters either side of ``position``, the rest of the line marked."""
    lo, hi = max(0, position - radius), min(len(text), position + radius)
    before, after = html.escape(text[lo:position]), html.escape(text[position:hi])
    return f"{'…' if lo else ''}{before}<mark>{after}</mark>{'…' if hi < len(text) else ''}"


def _calibrated(transcript: Transcript, rendered: list[Rendered]) -> TokenCounter:
    """An estimate corrected by the prompt tokens the providers reported, where the log has them."""
    counter = EstimatingTokenCounter()
    pairs = [(len(r.text), round_.measured.prompt_tokens) for r, round_ in zip(rendered, transcript.rounds, strict=True)
             if round_.measured and round_.measured.prompt_tokens]
    if pairs:
        counter.observe(sum(c for c, _ in pairs), sum(t for _, t in pairs))
    return counter


def verdict(predicted: int, measured: int, prompt_tokens: int) -> str:
    """Whether the provider's own hit agrees with the prediction, within the error of a token estimate."""
    tolerance = max(128, 0.15 * prompt_tokens)
    if abs(measured - predicted) <= tolerance:
        return AGREE
    return PROVIDER_MISSED if measured < predicted else PROVIDER_HIT_MORE


def _compare(previous: Rendered, current: Rendered, prev_round: Round, cur_round: Round,
             counter: TokenCounter) -> tuple[int, bool, str, Any]:
    """Common prefix (characters), whether the round breaks, the cause, and the span of the first difference."""
    common = causes.common_prefix_length(previous.text, current.text)
    if cur_round.server_history:
        return common, False, causes.SERVER_HISTORY, None
    if common >= len(previous.text):
        return common, False, causes.NONE, None
    span_prev, span_cur = previous.locate(common), current.locate(common)
    last = len(prev_round.messages) - 1
    last_start = previous.message_starts[last] if last < len(previous.message_starts) else len(previous.text)
    in_last = span_prev is not None and span_prev.message_index == last and span_prev.field != "role"
    in_last = in_last or (span_prev is not None and span_prev.field == "template" and common >= last_start)
    whole_prompts = len(prev_round.messages) == 1 and not prev_round.tools
    if (in_last or whole_prompts) and counter.count(previous.text[common:]) <= END_TOLERANCE_TOKENS:
        return common, False, causes.END_OF_PROMPT, span_cur or span_prev
    cause = causes.classify(prev_round, cur_round, previous, current, span_prev, span_cur)
    return common, True, cause, span_cur or span_prev


def analyse(transcript: Transcript, counter: TokenCounter | None = None, backend: Any = None) -> Analysis:
    """Compare each round with the one before; one finding per round (round 1 has nothing before it)."""
    rendered = [render_with_template(r, backend) if backend is not None and can_use_template(r) else serialize(r)
                for r in transcript.rounds]
    counter = counter or _calibrated(transcript, rendered)
    how = sorted({r.how for r in rendered}) or ["stable serialization"]
    findings: list[RoundFinding] = []
    analysis = Analysis(findings, " and ".join(how), list(transcript.errors), transcript.rounds, rendered, counter,
                        list(transcript.notes))
    for index, (current, cur_round) in enumerate(zip(rendered, transcript.rounds, strict=True)):
        tokens = counter.count(current.text)
        finding = RoundFinding(index + 1, False, causes.NONE, None, None, None, 0, 0, tokens, tokens, tokens, 0.0,
                               counter.exact, cur_round.format)
        if index:
            previous, prev_round = rendered[index - 1], transcript.rounds[index - 1]
            common, breaks, cause, span = _compare(previous, current, prev_round, cur_round, counter)
            common_tokens = min(counter.count(current.text[:common]), tokens) if common else 0
            last = cur_round.messages[-1].text() if cur_round.messages else ""
            append_only = max(tokens - findings[-1].prompt_tokens, counter.count(last))
            diff = common if span is not None else None
            finding = RoundFinding(
                index + 1, breaks, cause, span.message_index if span else None, span.field if span else None, diff,
                common, common_tokens, tokens, max(tokens - common_tokens, 0), min(append_only, tokens),
                round(common_tokens / tokens, 4) if tokens else 0.0, counter.exact, cur_round.format,
                old_snippet=snippet(previous.text, diff) if diff is not None else "",
                new_snippet=snippet(current.text, diff) if diff is not None else "")
        findings.append(finding)
        rule = rule_for(cur_round)
        finding.provider = rule.name
        finding.predicted_cached_tokens = bill_round(rule, analysis, index).cached
        if cur_round.measured is not None:
            finding.measured_cached_tokens = cur_round.measured.cached_tokens
            finding.measured_prompt_tokens = cur_round.measured.prompt_tokens
            finding.verdict = verdict(finding.predicted_cached_tokens, cur_round.measured.cached_tokens,
                                      cur_round.measured.prompt_tokens or tokens)
    if backend is not None:  # a llama-server: breaks its chat template makes in a body that kept its prefix
        template.mark_rewrites(analysis, template.check(transcript, backend))
    return analysis
