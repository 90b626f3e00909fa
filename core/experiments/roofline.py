"""Experiment 5 (``roofline``): this machine's two roofs, then one request's prefill and decode under them.

A run measures the compute peak and the memory bandwidth with `core.roofline.peaks.probe` (and
caches them for this machine, so every page's predictions use them from then on), then sends one
uncached request: a ``prompt_tokens`` prompt answered with ``answer_tokens`` tokens, whose prefill
and decode tokens/s the roofline page places under the roofs. Each figure is one `RooflineRecord`.
The arithmetic is `core.roofline`; this module only runs it as an experiment.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from core.backends.base import ChatRequest
from core.backends.connect import Connection
from core.conclusions import DISTURBED, NO_DATA, NOT_SHOWN, SHOWN, Conclusion, Finding, MachineState, disturbed
from core.experiments.base import Experiment, Option, Plan, RunContext, Table
from core.experiments.prompts import document_body, input_length_messages, nonce
from core.experiments.samples import SAMPLES_DIR
from core.records import RoundResult
from core.roofline import peaks
from core.roofline.report import si
from core.words import Sentence

ID = "roofline"
OPTIONS = (Option("--matmul-n", "experiment 5: the probe's matrix size (n x n float32)", int),
           Option("--probe-prompt-tokens", "experiment 5: prompt tokens of its one request", int))
BANDWIDTH, COMPUTE, PREFILL, DECODE = "bandwidth", "compute", "prefill", "decode"
# Recorded on this project's 2-core AMD EPYC (Zen 3) while idle; its settings say how (`recorded_with`).
SAMPLE = SAMPLES_DIR / "embedded_roofline.json"


@dataclass(frozen=True)
class Settings:
    matmul_n: int = peaks.MATMUL_N
    probe_prompt_tokens: int = 500
    answer_tokens: int = 32


@dataclass
class RooflineRecord:
    """One figure of the run: a roof (FLOP/s, bytes/s) or a phase's tokens/s, and how it was measured."""

    round: int
    kind: str  # BANDWIDTH, COMPUTE, PREFILL or DECODE
    value: float | None  # FLOP/s, bytes/s or tokens/s
    unit: str
    how: str
    context: float | None = None  # a phase: the tokens attended on average
    prompt_tokens: int | None = None
    experiment: str = ID
    error: str = ""

    @property
    def figure(self) -> str:
        """Its value as a table shows it (``8.09 GB/s``, never 8092695617.426293)."""
        return si(self.value, self.unit)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RooflineRecord:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


def plan(settings: Settings) -> Plan:
    return Plan(1, settings.probe_prompt_tokens + settings.answer_tokens, records=4).warmed()


def prepare(settings: Settings, conn: Connection) -> Settings:
    if conn.context and settings.probe_prompt_tokens + settings.answer_tokens + 64 > conn.context:
        raise ValueError(Sentence("settings_refused.roofline_context", tokens=settings.probe_prompt_tokens,
                                  context=conn.context))
    return settings


def rounds(run: RunContext, settings: Settings) -> Iterator[RooflineRecord]:
    roof = peaks.probe(settings.matmul_n)
    peaks.save(roof)
    yield RooflineRecord(1, BANDWIDTH, roof.bandwidth, "B/s", roof.memory.describe())
    assert roof.compute is not None
    yield RooflineRecord(2, COMPUTE, roof.flops, "FLOP/s", roof.compute.describe())
    if run.stopped():
        return
    run.warm_up()
    body = document_body(run.counter, settings.probe_prompt_tokens)
    result = run.send(ChatRequest(input_length_messages(body, nonce()), max_tokens=settings.answer_tokens,
                                  ignore_eos=True))
    if run.stopped():
        return
    row = RoundResult.from_request(ID, 3, result)
    prompt = row.prompt_tokens or settings.probe_prompt_tokens
    computed = row.recomputed_tokens if row.recomputed_tokens is not None else prompt
    prefill_ms = row.prefill_ms if row.prefill_ms is not None else row.ttft_ms
    how = f"one uncached request, {prompt} prompt tokens, {row.output_tokens or 0} answer tokens"
    yield RooflineRecord(3, PREFILL, computed / prefill_ms * 1000 if computed and prefill_ms else None, "tokens/s",
                         how, prompt / 2, prompt, error=row.error)
    if row.error:
        return
    per_token = row.ms_per_output_token
    yield RooflineRecord(4, DECODE, 1000 / per_token if per_token else None, "tokens/s", how,
                         prompt + (row.output_tokens or 0) / 2, prompt)


def summarize(records: Sequence[Any]) -> dict[str, float] | None:
    """Each figure the run measured by kind; None when it measured none."""
    found = {r.kind: r.value for r in records
             if isinstance(r, RooflineRecord) and r.value is not None and not r.error}
    return found or None


def conclude(records: Sequence[Any], state: MachineState | None) -> Conclusion:
    """Shown: both roofs and both phases were measured; its claims are the ridge point and the two phases' ratio,
    this machine's figures. A busy meter disturbs it (the probe and the request both share the CPU)."""
    found = summarize(records) or {}
    if BANDWIDTH not in found or COMPUTE not in found:
        return Conclusion(ID, NO_DATA, Finding("no_roofs"))
    roofs = Finding("roofs", {"compute": found[COMPUTE] / 1e9, "bandwidth": found[BANDWIDTH] / 1e9,
                              "ridge": found[COMPUTE] / found[BANDWIDTH]})
    if PREFILL not in found or DECODE not in found:
        return Conclusion(ID, NOT_SHOWN, Finding("no_phases"), (roofs,))
    phases = Finding("phases", {"prefill": found[PREFILL], "decode": found[DECODE],
                                "ratio": found[PREFILL] / found[DECODE]})
    if (trouble := disturbed(state)) is not None:
        return Conclusion(ID, DISTURBED, trouble, (roofs, phases))
    return Conclusion(ID, SHOWN, Finding("measured", {"ratio": found[PREFILL] / found[DECODE]}), (roofs, phases))


TABLE = Table((("round", "round", 5), ("kind", "kind", 9), ("figure", "value", 18), ("how", "how", 60)))


EXPERIMENT = Experiment(
    id=ID, title="this machine's compute and bandwidth roofs; one request's prefill and decode",
    icon=":material/roofing:", settings=Settings, rounds=rounds, plan=plan, prepare=prepare, summary=summarize,
    conclude=conclude, table=TABLE, record=RooflineRecord,
    records="roofline", options=OPTIONS, sample=SAMPLE, default=False)
