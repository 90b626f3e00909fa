"""Experiment 6 (``kv_cache``): the same answer written with and without the KV cache; time bought with memory.

After a fixed prompt of ``prompt_tokens`` token ids, a llama-server writes ``steps + 1`` tokens greedily, twice:

- **cached**: one ``/completion`` request. The prompt's prefill writes the first token (step 0); each later
  step computes one token's keys and values and reads the rest from the cache. Per-step times are the
  server's own: ``timings_per_token`` sends the running ``predicted_ms`` with every token, and its
  ``predicted_n`` counts one computed token per step.
- **recomputed**: ``steps + 1`` requests with ``cache_prompt: false``, step i sending the prompt plus the i
  tokens written so far as token ids and asking for one token: the server recomputes all ``prompt + i``
  keys and values (its ``prompt_n``; ``cache_n`` 0) and its ``prompt_ms`` is the step's time.

Both must write the same token ids (the cache changes the time, never the answer); `summarize` names the
first step where a server's numerics made them differ. The memory the cache held is the model's KV bytes
per token (from its GGUF, as the roofline reads it) times the context, with the slot's own token count
from ``/slots`` beside it (llama-server reports tokens, not bytes; ``/metrics`` has no KV figure).

Before the run, `predict` says how much slower the recomputed way will be from a prefill rate and a decode
rate: experiments 1 and 2 of this session where the page has them, else the roofline's bounds for this
machine (their ratio is what matters: the recomputed step i costs ``(prompt + i) / prefill rate``, the
cached one decode step). Each record carries the step time predicted for it (``predicted_ms``), so a saved run, its
export and its report keep the prediction it was compared with.

**Chat APIs: refused, by decision.** A chat API exposes no token ids, so the answer cannot be re-sent
token for token (re-tokenised text can split differently) nor compared step by step; the provider's
prefix cache cannot be turned off without a nonce that changes the prompt; every recomputed step bills
the whole context again (``(steps + 1) x prompt + steps (steps + 1) / 2`` input tokens: 15,080 for the defaults
against 200); and on a datacenter GPU a few hundred tokens' prefill takes milliseconds, well inside an
API's time-to-first-token jitter, so the parabola the page exists to show would not be visible in TTFT.
`prepare` says so and names what to use instead (the embedded engine or any llama-server).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from core.backends import LlamaServerBackend
from core.backends.connect import Connection
from core.experiments.base import NO_WIDGET, Experiment, Option, Plan, RunContext, Table
from core.experiments.samples import SAMPLES_DIR
from core.stats import LinearFit, linear_fit
from core.words import Words

ID = "kv_cache"
CACHED, RECOMPUTED = "cached", "recomputed"
WAYS = (CACHED, RECOMPUTED)
OPTIONS = (Option("--prompt-tokens", "experiment 6: prompt tokens before the answer", int),
           Option("--steps", "experiment 6: decode steps N written both ways", int))
PREDICTION_SPREAD = 2.0  # a measured slowdown within [P / 2, 2 P] agrees with the prediction P
SLOWER = 10.0  # "the N at which the recomputed way passed the cached one by 10x"
MIN_R2 = 0.8  # the recomputed step time is a straight line in the context (R² at least this) on a quiet machine
# The chapter (seeds, local_cache.py): Qwen3.5-2B Q4_K_M with a context of about 51,000 tokens, "keep about
# 2 GB more memory". A reference beside this machine's figure, not a measurement here.
CHAPTER_MODEL, CHAPTER_CONTEXT, CHAPTER_KV_BYTES = "Qwen3.5-2B Q4_K_M", 51_000, 2_000_000_000
TIMEOUT_S = 300.0
SAMPLE = SAMPLES_DIR / "embedded_kv_cache.json"  # bench/kv_cache.py's N = 64 run (its settings say where and how)
# A sentence repeated: greedy decoding has one clear best token at every step. On a document the model is
# unsure of, a near-tie can flip between the ways (a 200-token prefill and a one-token decode step add in
# different orders): the Python reference text did at step 14 of 16 on the embedded default.
PROMPT = "The quick brown fox jumps over the lazy dog. "


@dataclass(frozen=True)
class Settings:
    prompt_tokens: int = 200
    steps: int = 64
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


# -- the prediction -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KvPrediction:
    """What the rates say before the run: each way's step times and the slowdown at N."""

    cached_ms: tuple[float, ...]  # step 0..N
    recomputed_ms: tuple[float, ...]
    source: str

    @property
    def ratio(self) -> float:
        return sum(self.recomputed_ms) / sum(self.cached_ms)

    @property
    def passed_10x(self) -> int | None:
        return passed(self.cached_ms, self.recomputed_ms)

    def agrees(self, measured: float) -> bool:
        return self.ratio / PREDICTION_SPREAD <= measured <= self.ratio * PREDICTION_SPREAD


def predict(prompt_tokens: int, steps: int, prefill_tps: float, decode_tps: float, source: str) -> KvPrediction:
    """Step i without the cache: ``(prompt + i) / prefill_tps``; with it: one decode step (step 0 is the
    prompt's prefill both ways)."""
    first = prompt_tokens / prefill_tps * 1000
    cached = (first, *([1000 / decode_tps] * steps))
    recomputed = tuple((prompt_tokens + i) / prefill_tps * 1000 for i in range(steps + 1))
    return KvPrediction(cached, recomputed, source)


def prediction_of(settings: Settings) -> KvPrediction | None:
    if not settings.prefill_tps or not settings.decode_tps:
        return None
    return predict(settings.prompt_tokens, settings.steps, settings.prefill_tps, settings.decode_tps,
                   settings.predicted_from)


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


def with_rates(settings: Settings, prefill_tps: float, decode_tps: float, source: str) -> Settings:
    """``settings`` with the rates to predict from (``source``: "measured" or "roofline")."""
    return replace(settings, prefill_tps=prefill_tps, decode_tps=decode_tps, predicted_from=source)


# -- the run --------------------------------------------------------------------------------------------
def plan(settings: Settings) -> Plan:
    p, n = settings.prompt_tokens, settings.steps
    recomputed = sum(p + i for i in range(n + 1))
    return Plan(n + 2, p + recomputed + 2 * (n + 1), records=2 * (n + 1))


def prepare(settings: Settings, conn: Connection) -> Settings:
    if not isinstance(conn.backend, LlamaServerBackend):
        raise ValueError("Experiment 6 needs a llama-server (the embedded engine or one at a URL): a chat API "
                         "gives no token ids to re-send the same answer, its own prompt cache cannot be turned "
                         "off, and it would bill the whole context at every step.")
    if settings.steps < 2 or settings.prompt_tokens < 1:
        raise ValueError("Choose at least 2 steps and a prompt of at least 1 token.")
    if conn.context and settings.prompt_tokens + settings.steps + 8 > conn.context:
        raise ValueError(f"{settings.prompt_tokens} prompt tokens and {settings.steps} steps do not fit this "
                         f"server's {conn.context}-token context: choose fewer.")
    if not settings.prefill_tps:  # no rates measured in this session: the roofs', where this machine has them
        rates = roofline_rates(model_path(conn.backend))
        if rates is not None:
            return with_rates(settings, *rates, source="roofline")
    return settings


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
    """The first ``tokens`` token ids of `PROMPT` repeated, as the server tokenises it."""
    ids = backend.tokenize(PROMPT * (tokens // 8 + 1))[:tokens]
    if len(ids) < tokens:
        raise ValueError(f"The prompt gave only {len(ids)} tokens; choose at most that many.")
    return ids


def completion_body(prompt: list[int], n_predict: int, cached: bool) -> dict[str, Any]:
    """Greedy, exactly ``n_predict`` tokens, token ids back; the cached way streams with per-token timings."""
    body: dict[str, Any] = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
                            "ignore_eos": True, "cache_prompt": False, "return_tokens": True}
    if cached:
        body.update(stream=True, timings_per_token=True)
    return body


def _failed(way: str, step: int, context: int, exc: Exception) -> KvStep:
    what = "the streamed answer" if way == CACHED else f"step {step}"
    return KvStep(0, way, step, context, None, error=f"{what} failed: {type(exc).__name__}: {exc}")


def cached_steps(run: RunContext, backend: LlamaServerBackend, prompt: list[int], steps: int,
                 kv_per_token: int | None) -> Iterator[KvStep]:
    """The cached way: one streamed request, one record per token as it arrives."""
    last_ms, last_n, step = 0.0, 0, 0
    try:
        body = completion_body(prompt, steps + 1, True)
        with backend.client.stream("POST", backend.origin + "/completion", json=body, timeout=TIMEOUT_S) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if run.stopped():
                    return
                if not line.startswith("data: "):
                    continue
                chunk = json.loads(line[len("data: "):])
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
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        yield _failed(CACHED, step, len(prompt) + step, exc)
        return
    if step != steps + 1:
        yield KvStep(0, CACHED, step, len(prompt) + step, None,
                     error=f"the server wrote {step} tokens of the {steps + 1} asked for")


def recomputed_step(backend: LlamaServerBackend, prompt: list[int], step: int) -> KvStep:
    """The recomputed way's step ``step``: the prompt plus ``step`` tokens sent again, one token back."""
    context = len(prompt)
    try:
        response = backend.client.post(backend.origin + "/completion", json=completion_body(prompt, 1, False),
                                       timeout=TIMEOUT_S)
        response.raise_for_status()
        data = response.json()
        timings, tokens = data["timings"], data.get("tokens") or []
        ms = float(timings["prompt_ms"]) + float(timings["predicted_ms"])
        return KvStep(0, RECOMPUTED, step, context, round(ms, 3),
                      int(timings["prompt_n"]), int(timings["cache_n"]), int(tokens[0]) if tokens else None,
                      str(data.get("content", "")))
    except (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError) as exc:
        return _failed(RECOMPUTED, step, context, exc)


def slot_figures(backend: LlamaServerBackend) -> tuple[int | None, int | None]:
    """``(tokens the slot's cache holds, cells reserved for it)`` from ``/slots``; Nones where the server does not
    say (``--no-slots``, an old build). Its ``n_prompt_tokens`` counts the answer too (30 prompt ids and 4 answer
    tokens: 33, the last token's keys and values not yet computed)."""
    try:
        slot = backend.client.get(backend.origin + "/slots", timeout=30.0).json()[0]
        return int(slot["n_prompt_tokens"]), int(slot["n_ctx"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError):
        return None, None


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
    last.slot_tokens, last.slot_context = slot_figures(backend)  # the slot still holds the answer
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
@dataclass(frozen=True)
class QuadraticFit:
    """y = a + b x + c x²."""

    a: float
    b: float
    c: float
    r2: float

    def at(self, x: float) -> float:
        return self.a + self.b * x + self.c * x * x


def quadratic_fit(xs: Sequence[float], ys: Sequence[float]) -> QuadraticFit | None:
    """Least squares through the normal equations (3 x 3, Cramer's rule); None with fewer than 3 distinct x."""
    if len(set(xs)) < 3 or len(xs) != len(ys):
        return None
    s = [sum(x ** k for x in xs) for k in range(5)]
    t = [sum(y * x ** k for x, y in zip(xs, ys, strict=True)) for k in range(3)]
    m = [[s[0], s[1], s[2]], [s[1], s[2], s[3]], [s[2], s[3], s[4]]]

    def det(q: list[list[float]]) -> float:
        return (q[0][0] * (q[1][1] * q[2][2] - q[1][2] * q[2][1]) - q[0][1] * (q[1][0] * q[2][2] - q[1][2] * q[2][0])
                + q[0][2] * (q[1][0] * q[2][1] - q[1][1] * q[2][0]))

    d = det(m)
    if d == 0:
        return None
    coeffs = [det([[t[r] if col == k else m[r][col] for col in range(3)] for r in range(3)]) / d for k in range(3)]
    fit = QuadraticFit(coeffs[0], coeffs[1], coeffs[2], 0.0)
    mean = sum(ys) / len(ys)
    ss_tot = sum((y - mean) ** 2 for y in ys)
    ss_res = sum((y - fit.at(x)) ** 2 for x, y in zip(xs, ys, strict=True))
    return QuadraticFit(fit.a, fit.b, fit.c, 1.0 - ss_res / ss_tot if ss_tot else 1.0)


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
    """Both ways side by side, over the steps both measured (0..steps)."""

    steps: int  # N: the last step both ways measured
    prompt_tokens: int
    same_answer: bool
    first_difference: int | None  # the first step whose token ids differ
    cached_total_ms: float
    recomputed_total_ms: float
    passed_10x: int | None
    cached_line: LinearFit | None  # cumulative ms against the step: a straight line
    recomputed_curve: QuadraticFit | None  # cumulative ms against the step: a parabola
    cached_per_context: LinearFit | None  # a step's ms against its context (steps 1..N): flat
    recomputed_per_context: LinearFit | None  # the same without the cache: rising
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
    def cached_rise(self) -> float | None:
        """How much the cached step time grew over the run, by its fitted line, as a share of its mean."""
        return _rise(self.cached_per_context, self.prompt_tokens + 1, self.prompt_tokens + self.steps)

    @property
    def recomputed_rise(self) -> float | None:
        return _rise(self.recomputed_per_context, self.prompt_tokens + 1, self.prompt_tokens + self.steps)

    @property
    def rising(self) -> bool:
        """The recomputed step time is a straight line rising with the context (R² >= `MIN_R2`). Other work on
        the machine scatters single steps (a load average of 8 on 2 cores: R² 0.1-0.3), so the verdict asks only
        for `bending`."""
        fit = self.recomputed_per_context
        return fit is not None and fit.slope > 0 and fit.r2 >= MIN_R2

    @property
    def bending(self) -> bool:
        """The recomputed way's total bends upward (a parabola: c > 0, R² >= `MIN_R2`) and its steps grow with
        the context: the sums smooth what scatters single steps (R² 0.998 at that load)."""
        curve, fit = self.recomputed_curve, self.recomputed_per_context
        return curve is not None and curve.c > 0 and curve.r2 >= MIN_R2 and fit is not None and fit.slope > 0


def _rise(fit: LinearFit | None, low: int, high: int) -> float | None:
    if fit is None:
        return None
    mid = fit.at((low + high) / 2)
    return (fit.at(high) - fit.at(low)) / mid if mid > 0 else None


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
    steps = [float(r.step) for r in cached]
    prompt = cached[0].context
    last = measured(records, CACHED)[-1]
    return KvSummary(
        steps=n, prompt_tokens=prompt, same_answer=first_difference is None, first_difference=first_difference,
        cached_total_ms=sum(a_ms), recomputed_total_ms=sum(b_ms), passed_10x=passed(a_ms, b_ms),
        cached_line=linear_fit(steps, cumulative(a_ms)), recomputed_curve=quadratic_fit(steps, cumulative(b_ms)),
        cached_per_context=linear_fit([r.context for r in cached[1:]], a_ms[1:]),
        recomputed_per_context=linear_fit([r.context for r in recomputed[1:]], b_ms[1:]),
        computed_cached=tuple(r.computed_tokens or 0 for r in cached[1:]),
        computed_recomputed=tuple(r.computed_tokens or 0 for r in recomputed[1:]),
        kv_bytes_per_token=cached[-1].kv_bytes // cached[-1].context if cached[-1].kv_bytes else None,
        kv_bytes=cached[-1].kv_bytes, slot_tokens=last.slot_tokens, slot_context=last.slot_context,
        prediction=prediction_in(cached, recomputed))


def verdict(records: Sequence[KvStep]) -> tuple[bool | None, dict[str, Any]]:
    """Shown: the same answer both ways, the recomputed way slower and its total a parabola (`KvSummary.bending`).
    Values: the slowdown, its 10x step, and the prediction's slowdown where the run had one."""
    found = summarize(records)
    if found is None:
        return None, {}
    values: dict[str, Any] = {"ratio": found.ratio, "steps": found.steps, "passed": found.passed_10x,
                              "same": found.same_answer, "first_difference": found.first_difference}
    if found.prediction is not None:
        values.update(predicted=found.prediction.ratio, agrees=found.prediction.agrees(found.ratio),
                      spread=PREDICTION_SPREAD)
    return found.same_answer and found.ratio > 1 and found.bending, values


def verdict_text(records: Sequence[KvStep], t: Words) -> tuple[bool | None, str]:
    """The sentence (page and report): what the run showed, and how it compares with its prediction."""
    found = summarize(records)
    shown, _ = verdict(records)
    if found is None:
        return None, t("kv_cache.not_shown")
    if shown:
        sentence = t("kv_cache.shown" if found.passed_10x is not None else "kv_cache.shown_never", n=found.steps + 1,
                     ratio=found.ratio, recomputed=found.recomputed_total_ms / 1000,
                     cached=found.cached_total_ms / 1000, passed=found.passed_10x)
    elif not found.same_answer:
        sentence = t("kv_cache.different", step=found.first_difference)
    else:
        sentence = t("kv_cache.not_shown")
    if found.prediction is not None:
        key = "kv_cache.agrees" if found.prediction.agrees(found.ratio) else "kv_cache.disagrees"
        sentence += " " + t(key, predicted=found.prediction.ratio, spread=PREDICTION_SPREAD)
    return shown, sentence


def cli_lines(records: Sequence[KvStep]) -> Iterator[str]:
    """Its summary lines on the command line (none for a run without experiment 6)."""
    if not any(isinstance(r, KvStep) for r in records):
        return
    found = summarize(records)
    if found is None:
        yield "Experiment 6: too few steps measured both ways to compare."
        return
    if found.same_answer:
        yield f"Same answer both ways: {found.steps + 1} token ids identical."
    else:
        yield f"WARNING: the answers differ from step {found.first_difference} (this server's numerics)."
    yield (f"Cached {found.cached_total_ms / 1000:.2f} s, recomputed {found.recomputed_total_ms / 1000:.2f} s: "
           f"{found.ratio:.1f}x slower without the cache for N = {found.steps}"
           + (f", past {SLOWER:.0f}x from N = {found.passed_10x}." if found.passed_10x is not None else "."))
    if found.prediction is not None:
        yield (f"Predicted {found.prediction.ratio:.1f}x: "
               + ("agrees" if found.prediction.agrees(found.ratio) else "outside")
               + f" within {PREDICTION_SPREAD:.0f}x.")
    if found.recomputed_per_context is not None:
        fit = found.recomputed_per_context
        yield f"Recomputed step: {fit.slope:+.2f} ms per context token (R² {fit.r2:.2f})."
    if found.kv_bytes is not None:
        yield (f"KV cache held {found.kv_bytes / 1e6:.2f} MB at the end ({found.kv_bytes_per_token:,} B/token); "
               f"the chapter's {CHAPTER_MODEL} at {CHAPTER_CONTEXT:,} tokens: keep about "
               f"{CHAPTER_KV_BYTES / 1e9:.0f} GB.")


TABLE = Table((("way", "way", 10), ("step", "step", 4), ("context", "context", 7),
               ("computed_tokens", "computed", 8), ("cached_tokens", "cached", 6), ("step_ms", "step_ms", 9),
               ("predicted_ms", "predicted", 9), ("token", "token", 6), ("kv_bytes", "kv_bytes", 9)))

EXPERIMENT = Experiment(
    id=ID, title="the same answer with and without the KV cache: time bought with memory", icon=":material/memory:",
    settings=Settings, rounds=rounds, plan=plan, prepare=prepare, summary=summarize, verdict=verdict,
    verdict_text=verdict_text, cli_lines=cli_lines, table=TABLE, record=KvStep, records="steps", options=OPTIONS,
    sample=SAMPLE, default=False)
