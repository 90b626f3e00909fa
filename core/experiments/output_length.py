"""Experiment 2 (``output``): answers of growing length; total time and per-token decode time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.experiments import input_length
from core.experiments.base import (
    OUTPUT_PROMPT_TOKENS,
    Experiment,
    Option,
    Plan,
    RunContext,
    ints,
    measured_rows,
    timed_by,
)
from core.experiments.prompts import nonce, output_length_messages
from core.experiments.samples import EMBEDDED_DEFAULT
from core.records import RoundResult
from core.stats import median
from core.words import Words

ID = "output"
OPTIONS = (Option("--lengths", "experiment 2 output tokens, comma separated", ints),
           Option("--repeats", "repeats per size/length (medians are reported)", int))


@dataclass(frozen=True)
class Settings:
    lengths: tuple[int, ...] = (16, 32, 64, 128, 256)
    repeats: int = 1


def plan(settings: Settings) -> Plan:
    lengths, repeats = settings.lengths, settings.repeats
    return Plan(len(lengths) * repeats, (sum(lengths) + OUTPUT_PROMPT_TOKENS * len(lengths)) * repeats)


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


def prefill_decode_ratio(input_summary: input_length.InputSummary, output_summary: OutputSummary) -> float | None:
    """How many times faster prefill processes a token than decode produces one."""
    if input_summary.prefill_tps and output_summary.decode_tps:
        return input_summary.prefill_tps / output_summary.decode_tps
    return None


def output_verdict(rows: Sequence[RoundResult]) -> tuple[bool, dict[str, Any]]:
    """Shown: total time rose with the answer's length while the time per token stayed within 50 %."""
    ok = sorted((r for r in measured_rows(rows, ID) if r.ms_per_output_token and r.total_ms is not None),
                key=lambda r: r.output_tokens or 0)
    if len({r.output_tokens for r in ok}) < 2:
        return False, {}
    per_token = ([r.ms_per_output_token for r in ok if (r.output_tokens or 0) >= 8]
                 or [r.ms_per_output_token for r in ok])
    middle = median(per_token)
    if not middle:
        return False, {}
    spread = (max(per_token) - min(per_token)) / middle * 100  # type: ignore[type-var, operator]
    first, last = ok[0], ok[-1]
    shown = last.total_ms > first.total_ms and spread < 50  # type: ignore[operator]
    return shown, {"tokens": last.output_tokens, "total": last.total_ms, "per_token": middle, "spread": spread}


def verdict_text(rows: Sequence[RoundResult], t: Words) -> tuple[bool, str]:
    shown, values = output_verdict(rows)
    return shown, t("output.shown", **values) if shown else t("output.not_shown")


def cli_lines(rows: Sequence[RoundResult]) -> Iterator[str]:
    """Its decode speed; with experiment 1's rounds in the same run, how much faster prefill is."""
    summary = summarize_output(rows)
    if summary.ms_per_output_token and summary.decode_tps:
        yield (f"Experiment 2: decode {summary.decode_tps:,.1f} tokens/s "
               f"({summary.ms_per_output_token:.1f} ms per output token, timed by the {summary.decode_source})")
    ratio = prefill_decode_ratio(input_length.summarize_input(rows), summary)
    if ratio:
        yield f"Prefill processes a token {ratio:.0f}x faster than decode produces one."


EXPERIMENT = Experiment(
    id=ID, title="total and per-token time against answer length", icon=":material/output:", settings=Settings,
    rounds=rounds, plan=plan, prepare=prepare, summary=summarize_output, verdict=output_verdict,
    verdict_text=verdict_text, cli_lines=cli_lines, options=OPTIONS, sample=EMBEDDED_DEFAULT)
