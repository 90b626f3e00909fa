"""Experiment 2 (``output``): answers of growing length; total time and per-token decode time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.conclusions import DISTURBED, NO_DATA, NOT_SHOWN, SHOWN, Conclusion, Finding, MachineState, disturbed
from core.experiments.base import (
    OUTPUT_PROMPT_TOKENS,
    REPEATS,
    Experiment,
    Option,
    Plan,
    RunContext,
    ints,
    measured_rows,
    timed_by,
    timed_word,
)
from core.experiments.prompts import nonce, output_length_messages
from core.experiments.samples import EMBEDDED_DEFAULT
from core.records import RoundResult
from core.stats import median, spike

ID = "output"
OPTIONS = (Option("--lengths", "experiment 2 output tokens, comma separated", ints),
           REPEATS)


@dataclass(frozen=True)
class Settings:
    lengths: tuple[int, ...] = (16, 32, 64, 128, 256)
    repeats: int = 1


def plan(settings: Settings) -> Plan:
    lengths, repeats = settings.lengths, settings.repeats
    return Plan(len(lengths) * repeats, (sum(lengths) + OUTPUT_PROMPT_TOKENS * len(lengths)) * repeats).warmed()


def prepare(settings: Settings, conn: Connection) -> Settings:
    return replace(settings, lengths=tuple(sorted(settings.lengths)))


def rounds(run: RunContext, settings: Settings) -> Iterator[RoundResult]:
    run.warm_up()
    round_no = 0
    for length in settings.lengths:
        for repeat in range(1, settings.repeats + 1):
            if run.stopped():
                return
            round_no += 1
            result = run.send(ChatRequest(output_length_messages(nonce()), max_tokens=length, ignore_eos=True))
            if run.stopped():
                return
            yield RoundResult.from_request(ID, round_no, result, repeat=repeat, target_tokens=length)
            if result.error:
                return


@dataclass
class OutputSummary:
    ms_per_output_token: float | None
    decode_tps: float | None
    decode_source: str | None = None  # "server" (llama-server's decode timings), "client" (the stream clock), both


def summarize_output(rows: Sequence[RoundResult]) -> OutputSummary:
    ok = measured_rows(rows, ID)
    per_token = median(r.ms_per_output_token for r in ok)
    return OutputSummary(
        per_token,
        1000 / per_token if per_token else None,
        timed_by([r for r in ok if r.ms_per_output_token is not None], "decode_source"),
    )


FLAT_SPREAD = 50  # per cent: the time per token may vary this much across lengths and still be flat
SPIKE = 2.0  # a round whose time per token is this many times the median waited on something else


def _claims(rows: Sequence[RoundResult]) -> tuple[Finding, ...]:
    """Its decode rate (the prefill:decode ratio needs experiment 1's run: the page says it beside, as a note)."""
    summary = summarize_output(rows)
    if not summary.decode_tps or not summary.ms_per_output_token:
        return ()
    return (Finding("decode_rate", {"speed": summary.decode_tps, "ms": summary.ms_per_output_token,
                                    "source_word": timed_word(summary.decode_source)}),)


def _per_token(ok: Sequence[RoundResult]) -> list[float]:
    """The rounds' ms per output token, without the answers too short to time it (under 8 tokens) when there are
    longer ones."""
    return ([r.ms_per_output_token for r in ok if (r.output_tokens or 0) >= 8 and r.ms_per_output_token]
            or [r.ms_per_output_token for r in ok if r.ms_per_output_token])


def _contention(per_token: Sequence[float], middle: float) -> Finding | None:
    """A round whose time per token stands `SPIKE` times above the median: its steps waited on another program."""
    found = spike(per_token, SPIKE)
    return None if found is None else Finding("slow_round", {"ms": per_token[found[0]], "median": middle,
                                                              "times": found[1]})


def conclude(rows: Sequence[RoundResult], state: MachineState | None) -> Conclusion:
    """Shown: total time rose with the answer's length while the time per token stayed within `FLAT_SPREAD`;
    decided by the one condition that failed, or by contention (a round `SPIKE` times the median, a busy meter)."""
    ok = sorted((r for r in measured_rows(rows, ID) if r.ms_per_output_token and r.total_ms is not None),
                key=lambda r: r.output_tokens or 0)
    per_token = _per_token(ok)
    middle = median(per_token)
    lengths = len({r.output_tokens for r in ok})
    claims = _claims(rows)
    if lengths < 2 or not middle:
        return Conclusion(ID, NO_DATA, Finding("too_few", {"lengths": lengths}), claims)
    if (trouble := disturbed(state) or _contention(per_token, middle)) is not None:
        return Conclusion(ID, DISTURBED, trouble, claims)
    first, last = ok[0], ok[-1]
    if last.total_ms <= first.total_ms:  # type: ignore[operator]
        ends = {"first_tokens": first.output_tokens, "first": first.total_ms, "last_tokens": last.output_tokens,
                "last": last.total_ms}
        return Conclusion(ID, NOT_SHOWN, Finding("total_fell", ends), claims)
    spread = (max(per_token) - min(per_token)) / middle * 100
    if spread >= FLAT_SPREAD:
        return Conclusion(ID, NOT_SHOWN, Finding("per_token_varied", {"spread": spread, "low": min(per_token),
                                                                      "high": max(per_token), "limit": FLAT_SPREAD}),
                          claims)
    return Conclusion(ID, SHOWN, Finding("total_rose", {"tokens": last.output_tokens, "total": last.total_ms,
                                                        "per_token": middle, "spread": spread}), claims)


EXPERIMENT = Experiment(
    id=ID, title="total and per-token time against answer length", icon=":material/output:", settings=Settings,
    rounds=rounds, plan=plan, prepare=prepare, summary=summarize_output, conclude=conclude,
    options=OPTIONS, sample=EMBEDDED_DEFAULT)
