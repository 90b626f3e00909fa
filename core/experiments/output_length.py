"""Experiment 2 (``output``): answers of growing length; total time and per-token decode time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.experiments.base import OUTPUT_PROMPT_TOKENS, Option, Plan, RunContext, ints
from core.experiments.prompts import nonce, output_length_messages
from core.records import RoundResult

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
