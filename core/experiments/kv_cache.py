"""Experiment 6 (``kv_cache``): the same answer written with and without the KV cache; time bought with memory.

After a fixed prompt of ``prompt_tokens`` token ids, a llama-server writes ``steps + 1`` tokens greedily, twice:

- **cached**: one streamed ``/completion`` (`LlamaServerBackend.completion_stream`). The prompt's prefill writes
  the first token (step 0); each later step computes one token's keys and values and reads the rest from the
  cache. Per-step times are the server's own: ``timings_per_token`` sends the running ``predicted_ms`` with every
  token, and its ``predicted_n`` counts one computed token per step.
- **recomputed**: ``steps + 1`` requests (`LlamaServerBackend.completion`) with the server's prompt cache off, step
  i sending the prompt plus the i tokens written so far as token ids and asking for one token: the server
  recomputes all ``prompt + i`` keys and values (its ``prompt_n``; ``cache_n`` 0) and ``prompt_ms`` is the step.

Both must write the same token ids (the cache changes the time, never the answer); `summarize` names the
first step where a server's numerics made them differ. The memory the cache held is the model's KV bytes
per token (from its GGUF, as the roofline reads it) times the context, with the slot's own token count
from ``/slots`` beside it (llama-server reports tokens, not bytes; ``/metrics`` has no KV figure).

Before the run, `predict` says how much slower the recomputed way will be from a prefill rate and a decode
rate, chosen in one place for the page and the CLI (`with_prediction`): experiments 1 and 2 of this session
where the page has both, else the roofline's bounds for this machine. The recomputed step i costs
``(prompt + i) / prefill rate``, the cached one a decode step. Each record carries the step time predicted for it
(``predicted_ms``), so a saved run, its export and its report keep the prediction it was compared with.

**The defaults, chosen from the prediction** (a 32-token prompt, N = 128): the recomputed way's total is a
constant part, ``(N + 1) x prompt`` tokens, plus a growing part, ``N (N + 1) / 2`` tokens, the parabola; its share
is ``N / (2 prompt + N)``. The chapter's 200-token prompt with N = 64 left it at 14 %, inside one prefill's
10-20 % noise from send to send on a 2-core CPU: the page drew two straight lines. At 32 and 128 it is 67 %,
and a recomputed step in the last quarter costs about ``(32 + 112) / (32 + 16)`` = 3x one in the first quarter.
At a 2-core Xeon's rates (about 300 prefill and 75 decode tokens/s, idle) the run takes about 45 s (12,384
tokens recomputed, 129 decode steps); at a quarter of those rates, on a busy machine, about 3 minutes.
`KvPrediction.growing_share`, `.rise` and `.seconds` state the same for the reader's own rates on the page.

**What a run concludes** (`conclude`): no data until both ways measured two steps; not shown when the answers
differ; disturbed when the cached steps show contention (at least `CONTENDED_SHARE` of them over `CONTENTION` x
their median: other work took the cores between two decode steps, which spares long prefills) or the meter
found the machine busy; not shown when the recomputed way was not slower, its last quarter's steps not at least
`MIN_RISE` x its first quarter's (medians: one noisy step does not decide), or its total bent downward; else
shown. Its claims carry the numbers: the slowdown, the cached steps' median and outliers, each way against the
prediction, the memory.

**Chat APIs: refused, by decision.** A chat API exposes no token ids, so the answer cannot be re-sent
token for token (re-tokenised text can split differently) nor compared step by step; the provider's
prefix cache cannot be turned off without a nonce that changes the prompt; every recomputed step bills
the whole context again (``(steps + 1) x prompt + steps (steps + 1) / 2`` input tokens: 12,384 for the defaults
against 32); and on a datacenter GPU a few hundred tokens' prefill takes milliseconds, well inside an
API's time-to-first-token jitter, so the parabola the page exists to show would not be visible in TTFT.
`prepare` says so and names what to use instead (the embedded engine or any llama-server).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from core.backends import LlamaServerBackend
from core.backends.base import DeadlinePassed
from core.backends.connect import Connection
from core.conclusions import DISTURBED, NO_DATA, NOT_SHOWN, SHOWN, Conclusion, Finding, MachineState, disturbed
from core.experiments.base import (
    DECODE_TPS,
    NO_WIDGET,
    PREFILL_TPS,
    PROMPT_TOKENS,
    Experiment,
    Option,
    Plan,
    RunContext,
    Table,
)
from core.experiments.samples import SAMPLES_DIR
from core.stats import QuadraticFit, quadratic_fit
from core.words import Sentence

ID = "kv_cache"
CACHED, RECOMPUTED = "cached", "recomputed"
WAYS = (CACHED, RECOMPUTED)
OPTIONS = (PROMPT_TOKENS, Option("--steps", "experiment 6: decode steps N written both ways", int), PREFILL_TPS,
           DECODE_TPS)
PREDICTION_SPREAD = 2.0  # a measured slowdown within [P / 2, 2 P] agrees with the prediction P
SLOWER = 10.0  # "the N at which the recomputed way passed the cached one by 10x"
MIN_RISE = 1.5  # the recomputed way's last-quarter median step over its first-quarter one: well above 10-20 % noise
CONTENTION = 3.0  # a cached step over this many times the cached median: another program had the cores
CONTENDED_SHARE = 0.05  # this share of the cached steps so hit (at least 2) disturbs the run
# The chapter (seeds, local_cache.py): Qwen3.5-2B Q4_K_M with a context of about 51,000 tokens, "keep about
# 2 GB more memory". A reference beside this machine's figure, not a measurement here.
CHAPTER_MODEL, CHAPTER_CONTEXT, CHAPTER_KV_BYTES = "Qwen3.5-2B Q4_K_M", 51_000, 2_000_000_000
TIMEOUT_S = 300.0
SAMPLE = SAMPLES_DIR / "embedded_kv_cache.json"  # a bench/kv_cache.py run at the defaults (its settings say where)
# Counting: greedy decoding has one clear best token at every step (the next digit, comma or space), far from
# any near-tie. On text the model is unsure of, a near-tie can flip between the ways (a prefill and a one-token
# decode step add in different orders): the Python reference text did at step 14 of 16, and a repeated sentence
# after a 32-token prompt did at step 63 of 128, once the model wandered off into prose of its own.
PROMPT = ", ".join(str(i) for i in range(1, 1000))  # about 3,900 tokens: a prompt of up to 2,000 and its answer


@dataclass(frozen=True)
class Settings:
    prompt_tokens: int = 32
    steps: int = 128
    # The rates the prediction is made from, filled before the run (`with_prediction`); exported with it.
    prefill_tps: float | None = field(default=None, metadata=NO_WIDGET)
    decode_tps: float | None = field(default=None, metadata=NO_WIDGET)
    predicted_from: str = field(default="", metadata=NO_WIDGET)  # "measured" (experiments 1 and 2) or "roofline"


@dataclass
class KvStep:
    """One step of one way: the token it wrote, what the server computed for it and how long that took."""

    round: int
    way: str  # CACHED or RECOMPUTED
    step: int  # 0: the prompt's prefill writes the first token; 1..N: one more token each
    context: int  # tokens before this step's token: prompt + step
    step_ms: float | None  # the server's time for this step
    computed_tokens: int | None = None  # keys and values computed: 1 (cached, after step 0) or prompt + step
    cached_tokens: int | None = None  # tokens read back from the cache (the server's cache_n; cached: context)
    token: int | None = None  # the token id written (greedy)
    piece: str = ""  # its text
    kv_bytes: int | None = None  # cached: what the cache holds after this step, bytes per token x context (the
    # token just written gets its keys and values at the next step)
    slot_tokens: int | None = None  # the server's own count (/slots n_prompt_tokens: the tokens its slot's cache
    # holds, answer included), on the last cached step
    slot_context: int | None = None  # the cells the server reserved for the slot (/slots n_ctx), same step
    predicted_ms: float | None = None  # what the prediction made before the run expected for this step
    experiment: str = ID
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KvStep:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


def quarters(times: Sequence[float]) -> tuple[float, float] | None:
    """The median of the first quarter of ``times`` and of the last (at least one each); None with fewer than 2.
    Medians, so that one step another program delayed does not move them."""
    if len(times) < 2:
        return None
    q = max(1, len(times) // 4)
    return statistics.median(times[:q]), statistics.median(times[-q:])


# -- the prediction -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KvPrediction:
    """What the rates say before the run: each way's step times, the slowdown at N and its stated spread."""

    cached_ms: tuple[float, ...]  # step 0..N
    recomputed_ms: tuple[float, ...]
    source: str

    @property
    def ratio(self) -> float:
        return sum(self.recomputed_ms) / sum(self.cached_ms)

    @property
    def low(self) -> float:
        return self.ratio / PREDICTION_SPREAD

    @property
    def high(self) -> float:
        return self.ratio * PREDICTION_SPREAD

    @property
    def passed_10x(self) -> int | None:
        return passed(self.cached_ms, self.recomputed_ms)

    @property
    def growing_share(self) -> float:
        """The share of the recomputed total that grows with the step (the parabola), the rest being the prompt's
        prefill repeated at every step."""
        return 1 - len(self.recomputed_ms) * self.recomputed_ms[0] / sum(self.recomputed_ms)

    @property
    def rise(self) -> float:
        """The recomputed way's last-quarter step over its first-quarter step (steps 1..N), as `quarters` reads a
        run."""
        found = quarters(self.recomputed_ms[1:])
        return found[1] / found[0] if found and found[0] > 0 else 1.0

    @property
    def seconds(self) -> float:
        """Both ways' time, about the run's length."""
        return (sum(self.cached_ms) + sum(self.recomputed_ms)) / 1000

    def agrees(self, measured: float) -> bool:
        return self.low <= measured <= self.high


def predict(prompt_tokens: int, steps: int, prefill_tps: float, decode_tps: float, source: str) -> KvPrediction:
    """Step i without the cache: ``(prompt + i) / prefill_tps``; with it: one decode step (step 0 is the
    prompt's prefill both ways)."""
    first = prompt_tokens / prefill_tps * 1000
    cached = (first, *([1000 / decode_tps] * steps))
    recomputed = tuple((prompt_tokens + i) / prefill_tps * 1000 for i in range(steps + 1))
    return KvPrediction(cached, recomputed, source)


def prediction_of(settings: Settings) -> KvPrediction | None:
    """The prediction for ``settings`` from the rates `with_prediction` put in them (page, CLI and records)."""
    if not settings.prefill_tps or not settings.decode_tps:
        return None
    return predict(settings.prompt_tokens, settings.steps, settings.prefill_tps, settings.decode_tps,
                   settings.predicted_from)


def with_prediction(settings: Settings, measured: tuple[float | None, float | None] | None,
                    roof: tuple[float, float] | None) -> Settings:
    """The one choice of rates for the page and the CLI: the ones ``settings`` already carries (a run being
    repeated, a benchmark's probe), else this session's experiments 1 and 2 (``measured``) where both exist, else
    the roofline's bounds for this machine (``roof``); unchanged without any."""
    if settings.prefill_tps and settings.decode_tps:
        return settings
    if measured is not None and measured[0] and measured[1]:
        return replace(settings, prefill_tps=measured[0], decode_tps=measured[1], predicted_from="measured")
    if roof is not None:
        return replace(settings, prefill_tps=roof[0], decode_tps=roof[1], predicted_from="roofline")
    return settings


def roofline_rates(model_path: Path | None) -> tuple[float, float] | None:
    """Prefill and decode tokens/s the roofs allow this machine for the model at ``model_path`` (its GGUF); None
    without a probe of this machine or without the file."""
    from core.roofline import peaks
    from core.roofline.arithmetic import predict as roof_predict
    from core.roofline.model import from_gguf

    roof = peaks.cached()
    if roof is None or model_path is None or not model_path.is_file():
        return None
    try:
        found = roof_predict(roof, from_gguf(model_path))
    except (ImportError, ValueError, OSError):
        return None
    return (found.prefill_bound, found.decode_bound) if found else None


# -- the run --------------------------------------------------------------------------------------------
def plan(settings: Settings) -> Plan:
    p, n = settings.prompt_tokens, settings.steps
    recomputed = sum(p + i for i in range(n + 1))
    return Plan(n + 2, p + recomputed + 2 * (n + 1), records=2 * (n + 1)).warmed()


def prepare(settings: Settings, conn: Connection) -> Settings:
    if not isinstance(conn.backend, LlamaServerBackend):
        raise ValueError(Sentence("settings_refused.kv_needs_llama"))
    if settings.steps < 2 or settings.prompt_tokens < 1:
        raise ValueError(Sentence("settings_refused.kv_steps"))
    if conn.context and settings.prompt_tokens + settings.steps + 8 > conn.context:
        raise ValueError(Sentence("settings_refused.kv_context", prompt=settings.prompt_tokens, steps=settings.steps,
                                  context=conn.context))
    if settings.prefill_tps and settings.decode_tps:  # the page's choice (`with_prediction`), or a benchmark's
        return settings
    return with_prediction(settings, None, roofline_rates(model_path(conn.backend)))


def model_path(backend: LlamaServerBackend) -> Path | None:
    """The server's model file, where it is on this machine (the embedded engine; a llama-server started here)."""
    try:
        path = Path(str(backend.props().get("model_path") or ""))
    except (httpx.HTTPError, ValueError):
        return None
    return path if path.name and path.is_file() else None


def kv_bytes_per_token(backend: LlamaServerBackend) -> int | None:
    """The model's KV-cache bytes per token from its GGUF (as the roofline reads it); None without the file."""
    path = model_path(backend)
    if path is None:
        return None
    from core.roofline.model import from_gguf

    try:
        return from_gguf(path).kv_bytes_per_token
    except (ImportError, ValueError, OSError):
        return None


def prompt_ids(backend: LlamaServerBackend, tokens: int) -> list[int]:
    """The first ``tokens`` token ids of `PROMPT`, as the server tokenises it."""
    ids = backend.tokenize(PROMPT)[:tokens]
    if len(ids) < tokens:
        raise ValueError(Sentence("settings_refused.kv_prompt_short", n=len(ids)))
    return ids


def _failed(way: str, step: int, context: int, exc: Exception) -> KvStep:
    what = "the streamed answer" if way == CACHED else f"step {step}"
    return KvStep(0, way, step, context, None, error=f"{what} failed: {type(exc).__name__}: {exc}")


FAULTS = (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError, DeadlinePassed)  # a step's own failure


def cached_steps(run: RunContext, backend: LlamaServerBackend, prompt: list[int], steps: int,
                 kv_per_token: int | None) -> Iterator[KvStep]:
    """The cached way: one streamed completion, one record per token as it arrives."""
    last_ms, last_n, step = 0.0, 0, 0
    try:
        for chunk in backend.completion_stream(prompt, steps + 1, timeout=TIMEOUT_S):
            if run.stopped():
                return
            timings, tokens = chunk.get("timings") or {}, chunk.get("tokens") or []
            if not tokens:
                continue
            n, context = int(timings["predicted_n"]), len(prompt) + step
            if step == 0:
                ms, computed = float(timings["prompt_ms"]), int(timings["prompt_n"])
                reused = int(timings["cache_n"])
            else:
                ms, computed, reused = float(timings["predicted_ms"]) - last_ms, n - last_n, context
            last_ms, last_n = float(timings["predicted_ms"]), n
            kv = kv_per_token * context if kv_per_token else None
            yield KvStep(0, CACHED, step, context, round(ms, 3), computed, reused, int(tokens[0]),
                         str(chunk.get("content", "")), kv)
            step += 1
    except FAULTS as exc:
        yield _failed(CACHED, step, len(prompt) + step, exc)
        return
    if step != steps + 1:
        yield KvStep(0, CACHED, step, len(prompt) + step, None,
                     error=f"the server wrote {step} tokens of the {steps + 1} asked for")


def recomputed_step(backend: LlamaServerBackend, prompt: list[int], step: int) -> KvStep:
    """The recomputed way's step ``step``: the prompt plus ``step`` tokens sent again, one token back."""
    context = len(prompt)
    try:
        data = backend.completion(prompt, 1, timeout=TIMEOUT_S)
        timings, tokens = data["timings"], data.get("tokens") or []
        ms = float(timings["prompt_ms"]) + float(timings["predicted_ms"])
        return KvStep(0, RECOMPUTED, step, context, round(ms, 3),
                      int(timings["prompt_n"]), int(timings["cache_n"]), int(tokens[0]) if tokens else None,
                      str(data.get("content", "")))
    except FAULTS as exc:
        return _failed(RECOMPUTED, step, context, exc)


def rounds(run: RunContext, settings: Settings) -> Iterator[KvStep]:
    """The cached way step by step, then the recomputed way step by step, each step with its prediction."""
    number = 0
    expected = prediction_of(settings)

    def numbered(record: KvStep) -> KvStep:
        nonlocal number
        number += 1
        record.round = number
        if expected is not None and not record.error and record.step < len(expected.cached_ms):
            times = expected.cached_ms if record.way == CACHED else expected.recomputed_ms
            record.predicted_ms = round(times[record.step], 3)
        return record

    backend = run.backend
    if not isinstance(backend, LlamaServerBackend):
        yield numbered(KvStep(0, CACHED, 0, 0, None, error="Experiment 6 needs a llama-server."))
        return
    run.warm_up()
    try:
        prompt = prompt_ids(backend, settings.prompt_tokens)
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        yield numbered(_failed(CACHED, 0, 0, exc))
        return
    kv_per_token = kv_bytes_per_token(backend)
    last: KvStep | None = None  # held back until the answer is done, for the slot's own count
    for record in cached_steps(run, backend, prompt, settings.steps, kv_per_token):
        if last is not None:
            yield numbered(last)
        last = record
        if record.error:
            yield numbered(record)
            return
    if run.stopped() or last is None:
        return
    last.slot_tokens, last.slot_context = backend.slot_figures()  # the slot still holds the answer
    yield numbered(last)
    written: list[int] = []
    for step in range(settings.steps + 1):
        if run.stopped():
            return
        record = recomputed_step(backend, prompt + written, step)
        if run.stopped():
            return
        yield numbered(record)
        if record.error or record.token is None:
            return
        written.append(record.token)


# -- what a run measured ----------------------------------------------------------------------------------
def cumulative(times: Sequence[float]) -> list[float]:
    out, total = [], 0.0
    for t in times:
        total += t
        out.append(total)
    return out


def passed(cached_ms: Sequence[float], recomputed_ms: Sequence[float], times: float = SLOWER) -> int | None:
    """The first step N at which the recomputed way's total passed ``times`` x the cached way's; None if never."""
    for n, (a, b) in enumerate(zip(cumulative(cached_ms), cumulative(recomputed_ms), strict=False)):
        if a > 0 and b >= times * a:
            return n
    return None


@dataclass(frozen=True)
class KvSummary:
    """Both ways side by side, over the steps both measured (0..steps); step times are steps 1..N (step 0 is the
    prompt's prefill both ways)."""

    steps: int  # N: the last step both ways measured
    prompt_tokens: int
    same_answer: bool
    first_difference: int | None  # the first step whose token ids differ
    cached_ms: tuple[float, ...]  # steps 1..N
    recomputed_ms: tuple[float, ...]
    cached_total_ms: float  # steps 0..N
    recomputed_total_ms: float
    passed_10x: int | None
    recomputed_curve: QuadraticFit | None  # cumulative ms against the step: a parabola
    computed_cached: tuple[int, ...]  # tokens computed per step 1..N, the server's counts
    computed_recomputed: tuple[int, ...]
    kv_bytes_per_token: int | None
    kv_bytes: int | None  # what the cache held at the end
    slot_tokens: int | None
    slot_context: int | None
    prediction: KvPrediction | None

    @property
    def ratio(self) -> float:
        """How many times slower the recomputed way wrote the same N + 1 tokens."""
        return self.recomputed_total_ms / self.cached_total_ms

    @property
    def cached_median(self) -> float:
        return statistics.median(self.cached_ms)

    @property
    def contended(self) -> tuple[float, ...]:
        """The cached steps over `CONTENTION` x their median: a decode step is milliseconds, so another program
        taking the cores shows there first (a prefill of hundreds of milliseconds absorbs it)."""
        limit = CONTENTION * self.cached_median
        return tuple(ms for ms in self.cached_ms if ms > limit)

    @property
    def disturbed(self) -> bool:
        return len(self.contended) >= max(2, math.ceil(CONTENDED_SHARE * len(self.cached_ms)))

    @property
    def quarters(self) -> tuple[float, float]:
        """The recomputed way's first-quarter and last-quarter median steps."""
        found = quarters(self.recomputed_ms)
        return found if found is not None else (0.0, 0.0)

    @property
    def rise(self) -> float:
        first, last = self.quarters
        return last / first if first > 0 else 1.0


def measured(records: Sequence[KvStep], way: str) -> list[KvStep]:
    """One way's measured steps, in order, up to the first failure (other experiments' records left out: the
    command line passes every record of a run to every experiment)."""
    out: list[KvStep] = []
    for r in sorted((r for r in records if isinstance(r, KvStep) and r.way == way), key=lambda r: r.round):
        if r.error or r.step_ms is None:
            break
        out.append(r)
    return out


def prediction_in(cached: Sequence[KvStep], recomputed: Sequence[KvStep]) -> KvPrediction | None:
    """The prediction a run carried (its steps' ``predicted_ms``), over the steps it measured both ways."""
    a = [r.predicted_ms for r in cached]
    b = [r.predicted_ms for r in recomputed]
    if not a or None in a or None in b:
        return None
    return KvPrediction(tuple(x or 0.0 for x in a), tuple(x or 0.0 for x in b), "recorded")


def summarize(records: Sequence[KvStep]) -> KvSummary | None:
    """None until both ways have measured steps 0 and 1."""
    cached, recomputed = measured(records, CACHED), measured(records, RECOMPUTED)
    n = min(len(cached), len(recomputed)) - 1
    if n < 1:
        return None
    cached, recomputed = cached[: n + 1], recomputed[: n + 1]
    first_difference = next((a.step for a, b in zip(cached, recomputed, strict=True) if a.token != b.token), None)
    a_ms = [r.step_ms or 0.0 for r in cached]
    b_ms = [r.step_ms or 0.0 for r in recomputed]
    last = measured(records, CACHED)[-1]
    return KvSummary(
        steps=n, prompt_tokens=cached[0].context, same_answer=first_difference is None,
        first_difference=first_difference, cached_ms=tuple(a_ms[1:]), recomputed_ms=tuple(b_ms[1:]),
        cached_total_ms=sum(a_ms), recomputed_total_ms=sum(b_ms), passed_10x=passed(a_ms, b_ms),
        recomputed_curve=quadratic_fit([float(r.step) for r in recomputed], cumulative(b_ms)),
        computed_cached=tuple(r.computed_tokens or 0 for r in cached[1:]),
        computed_recomputed=tuple(r.computed_tokens or 0 for r in recomputed[1:]),
        kv_bytes_per_token=cached[-1].kv_bytes // cached[-1].context if cached[-1].kv_bytes else None,
        kv_bytes=cached[-1].kv_bytes, slot_tokens=last.slot_tokens, slot_context=last.slot_context,
        prediction=prediction_in(cached, recomputed))


# -- what a run concludes ---------------------------------------------------------------------------------
def conclude(records: Sequence[KvStep], state: MachineState | None) -> Conclusion:
    """The run's one conclusion (the module's docstring gives the order of the conditions)."""
    found = summarize(records)
    if found is None:
        steps = min(len(measured(records, CACHED)), len(measured(records, RECOMPUTED)))
        return Conclusion(ID, NO_DATA, Finding("too_few", {"steps": steps}))
    claims = _claims(found)
    if not found.same_answer:
        return Conclusion(ID, NOT_SHOWN, Finding("different", {"step": found.first_difference}), claims)
    contention = _disturbance(found, state)
    if contention is not None:
        return Conclusion(ID, DISTURBED, contention, (_rise_finding(found), *claims))
    first, last = found.quarters
    curve = found.recomputed_curve
    if found.ratio <= 1:
        decided = Finding("not_slower", {"ratio": found.ratio})
    elif found.rise < MIN_RISE:
        decided = _rise_finding(found)
    elif curve is None or curve.c <= 0:
        decided = Finding("bent_down", {"c": -curve.c if curve else 0.0, "r2": curve.r2 if curve else 0.0})
    else:
        return Conclusion(ID, SHOWN, Finding("parabola", {"rise": found.rise, "first": first, "last": last,
                                                          "c": curve.c, "r2": curve.r2}), claims)
    return Conclusion(ID, NOT_SHOWN, decided, claims)


def _disturbance(found: KvSummary, state: MachineState | None) -> Finding | None:
    """Contention seen in the cached steps themselves, else the meter's busy machine; None for a quiet run."""
    if found.disturbed:
        return Finding("contended", {"count": len(found.contended), "steps": len(found.cached_ms),
                                     "times": CONTENTION, "median": found.cached_median,
                                     "low": min(found.contended), "high": max(found.contended)})
    return disturbed(state)


def _rise_finding(found: KvSummary) -> Finding:
    """The recomputed steps from the first quarter to the last, worded as what they did (rose, stayed, fell)."""
    first, last = found.quarters
    key = "steps_rose" if found.rise >= MIN_RISE else "steps_flat" if found.rise >= 1 else "steps_fell"
    return Finding(key, {"rise": found.rise, "first": first, "last": last, "min_rise": MIN_RISE})


def _claims(found: KvSummary) -> tuple[Finding, ...]:
    """What the run measured, each with its numbers: the slowdown, the cached steps, the prediction, the memory."""
    out = [Finding("slower" if found.passed_10x is not None else "slower_never",
                   {"n": found.steps + 1, "ratio": found.ratio, "recomputed": found.recomputed_total_ms / 1000,
                    "cached": found.cached_total_ms / 1000, "passed": found.passed_10x})]
    if found.same_answer:
        out.insert(0, Finding("same", {"n": found.steps + 1}))
    out.append(Finding("cached_steps", {"median": found.cached_median, "count": len(found.contended),
                                        "steps": len(found.cached_ms), "times": CONTENTION}))
    expected = found.prediction
    if expected is not None:
        out.append(Finding("agrees" if expected.agrees(found.ratio) else "disagrees",
                           {"predicted": expected.ratio, "ratio": found.ratio, "low": expected.low,
                            "high": expected.high}))
        out.append(Finding("ways_predicted", {
            "recomputed": statistics.median(found.recomputed_ms), "recomputed_predicted":
            statistics.median(expected.recomputed_ms[1:]), "cached": found.cached_median,
            "cached_predicted": statistics.median(expected.cached_ms[1:])}))
    if found.kv_bytes is not None and found.kv_bytes_per_token is not None:
        out.append(Finding("memory", {"mb": found.kv_bytes / 1e6, "per_token": found.kv_bytes_per_token,
                                      "model": CHAPTER_MODEL, "context": CHAPTER_CONTEXT,
                                      "gb": CHAPTER_KV_BYTES / 1e9}))
    return tuple(out)


TABLE = Table((("way", "way", 10), ("step", "step", 4), ("context", "context", 7),
               ("computed_tokens", "computed", 8), ("cached_tokens", "cached", 6), ("step_ms", "step_ms", 9),
               ("predicted_ms", "predicted", 9), ("token", "token", 6), ("kv_bytes", "kv_bytes", 9)))

EXPERIMENT = Experiment(
    id=ID, title="the same answer with and without the KV cache: time bought with memory", icon=":material/memory:",
    settings=Settings, rounds=rounds, plan=plan, prepare=prepare, summary=summarize, conclude=conclude, table=TABLE,
    record=KvStep, records="steps", options=OPTIONS, sample=SAMPLE, default=False)
