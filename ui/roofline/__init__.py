"""The roofline in the app: this machine's roofs, the backend's model, this session's phases, the predictions.

The probe runs only when the reader asks (the roofline page's or the home page's button); until
then the cached figures of an earlier probe on this machine are used, and pages without them say
how to get a prediction. For an API the reader names the hardware and the model's size on the
roofline page (kept in session state); unnamed hardware gives no roofs and no MFU.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import httpx
import streamlit as st

from core.backends import API, BACKENDS, ENGINE
from core.charts.roofline import Marked
from core.engine.choice import EngineError, find_model
from core.experiments import batch, input_length, output_length, roofline
from core.experiments.batch import BatchLevel
from core.experiments.phases import CHAPTER_MODEL, batch_of, chapter_points, decode_of, prefill_of, probe_phases
from core.experiments.roofline import RooflineRecord
from core.records import RoundResult
from core.roofline import peaks
from core.roofline.arithmetic import (
    DECODE,
    MIN_SHOWABLE_GAIN,
    PREFILL,
    RATIO_SPREAD,
    Measurement,
    PhasePoint,
    Prediction,
    place,
    predict,
)
from core.roofline.hardware import ACCELERATORS, DATACENTER, MAC_STUDIO
from core.roofline.model import ModelFacts, from_gguf, from_server, from_user
from core.roofline.peaks import Roof
from ui.runs import measured, rows_of
from ui.session import BACKEND_KEY
from ui.text import Texts

ACCELERATOR_KEY = "roofline_accelerator"  # an API's hardware, named by the reader ("" = not named)
PARAMS_KEY = "roofline_params_b"  # an API model's size in billions of weights
BYTES_KEY = "roofline_bytes_per_weight"


def local_backend() -> bool:
    return BACKENDS[st.session_state.get(BACKEND_KEY, "local")].needs != API


def machine_roof() -> Roof | None:
    """This machine's roofs from its latest probe (experiment 5, or a page's Measure button); None before one."""
    return peaks.cached()


def measure_machine() -> Roof:
    """Run the probe now (a few seconds) and keep it as this machine's figures."""
    return peaks.machine_roof(rerun=True)


def backend_roof() -> Roof | None:
    """The roofs the selected backend runs under: this machine's for a local server, the named accelerator's
    for an API (None until named)."""
    if local_backend():
        return machine_roof()
    return ACCELERATORS.get(st.session_state.get(ACCELERATOR_KEY) or "")


@st.cache_data(show_spinner=False, max_entries=8)
def _gguf_facts(path: str, mtime_ns: int) -> ModelFacts:
    return from_gguf(Path(path))


@st.cache_data(ttl=10, show_spinner=False)
def _server_facts(url: str) -> ModelFacts | None:
    try:
        return from_server(httpx.get(url.rstrip("/").removesuffix("/v1") + "/v1/models", timeout=3).json())
    except (httpx.HTTPError, ValueError):
        return None


def backend_model() -> ModelFacts | None:
    """The model's costs: the embedded engine's GGUF, a llama-server's /v1/models, or the reader's named size."""
    spec = BACKENDS[st.session_state.get(BACKEND_KEY, "local")]
    if spec.needs == ENGINE:
        try:
            path = find_model()
            return _gguf_facts(str(path), path.stat().st_mtime_ns)
        except (EngineError, OSError, ValueError, ImportError):
            return None
    if spec.needs != API:
        return _server_facts(st.session_state.get("llama_url", ""))
    billions = st.session_state.get(PARAMS_KEY)
    if not billions:
        return None
    return from_user(str(st.session_state.get("model", "")), float(billions),
                     float(st.session_state.get(BYTES_KEY, 2.0)))


def session_measurements() -> list[Measurement]:
    """Experiments 1, 2, 4 and 5 of this session (their newest runs, recorded ones labelled as such)."""
    found = [prefill_of(rows_of(input_length.ID, RoundResult)), decode_of(rows_of(output_length.ID, RoundResult))]
    return ([m for m in found if m is not None] + batch_of(rows_of(batch.ID, BatchLevel))
            + probe_phases(rows_of(roofline.ID, RooflineRecord)))


def session_points(roof: Roof, model: ModelFacts) -> list[PhasePoint]:
    return [place(roof, model, m) for m in session_measurements()]


def backend_prediction() -> Prediction | None:
    """What the roofs predict for the selected backend; G from this session's experiments 1 and 2 once run and not
    disturbed (`measured` with ``quiet``)."""
    roof, model = backend_roof(), backend_model()
    if roof is None or model is None:
        return None
    m = measured(quiet=True)
    return predict(roof, model, m.prefill_tps, m.decode_tps)


def roof_prediction() -> Prediction | None:
    """What the two roofs alone predict for the selected backend (its G is the roofs' ratio, never a measured one):
    what a sentence that says "the roofline predicts" quotes."""
    roof, model = backend_roof(), backend_model()
    return None if roof is None or model is None else predict(roof, model)


def points_table(points: Sequence[PhasePoint]) -> list[dict[str, object]]:
    return [{"phase": p.measurement.phase, "run": p.measurement.label, "N": p.measurement.streams,
             "tokens/s": round(p.measurement.tps, 1), "FLOP/s": p.flops_per_s, "bytes/s": p.bytes_per_s,
             "FLOP/byte": round(p.intensity, 2), "MFU": p.mfu, "MBU": p.mbu, "bound": p.bound_by} for p in points]


def chart_marks(t: Texts, roof: Roof | None, model: ModelFacts | None
                ) -> tuple[list[Roof], list[Marked], list[PhasePoint], ModelFacts]:
    """The roofline chart's roofs and marks: this machine with this session's phases, the chapter's Mac Studio
    with its measured phases, a datacenter GPU with the bounds for this model (hollow). Also this machine's points
    (for the table) and the model the GPU's bounds are for."""
    mac, gpu = ACCELERATORS[MAC_STUDIO], ACCELERATORS[DATACENTER]
    roofs, marks, mine = [], [], []
    if roof is not None and model is not None:
        mine = session_points(roof, model)
        roofs.append(roof)
        marks += [Marked(roof.machine, p) for p in mine]
    if roof is not mac:
        roofs.append(mac)
    marks += [Marked(mac.machine, place(mac, CHAPTER_MODEL, m), chapter=True)
              for m in chapter_points(t("roofline.mac_label"))]
    if roof is not gpu:
        roofs.append(gpu)
    gpu_model, gpu_label = model or CHAPTER_MODEL, t("roofline.gpu_label")
    for phase, context, prompt in ((PREFILL, 250.0, 500), (DECODE, 500.0, None)):
        bound = place(gpu, gpu_model, Measurement(phase, gpu_label, 1.0, context, prompt_tokens=prompt))
        marks.append(Marked(gpu.machine, place(gpu, gpu_model, Measurement(
            phase, gpu_label, bound.bound_tps, context, prompt_tokens=prompt)), measured=False))
    return roofs, marks, mine, gpu_model


def show_prediction(t: Texts, experiment: str) -> None:
    """Before a run: what the roofs say experiment 2 (``output``) or 4 (``batch``) can show on this backend."""
    p = backend_prediction()
    if p is None:
        if not local_backend():
            st.caption(t("roofline.need_hardware"))
            return
        left, right = st.columns([3, 1])
        left.caption(t("roofline.need_probe"))
        if right.button(t("roofline.measure"), key=f"roofline_measure_{experiment}", icon=":material/speed:"):
            with st.spinner(t("roofline.measuring")):
                measure_machine()
            st.rerun()
        return
    if experiment == batch.ID:
        key = "roofline.exp4_predict_yes" if p.can_show_batching else "roofline.exp4_predict_no"
        text = t.rich(key, gain=p.gain_bound, threshold=MIN_SHOWABLE_GAIN,
                      source=t(f"roofline.gain_from_{p.gain_from}"))
    else:
        text = t.rich("roofline.exp2_predict", ratio=p.ratio, low=p.ratio / RATIO_SPREAD, high=p.ratio * RATIO_SPREAD)
    roof = backend_roof()
    if roof is not None and roof.notes.get("busy"):  # a busy probe understates both roofs, so R and G too
        text += " " + t("roofline.prediction_busy", share=100 * float(roof.notes.get("cpu_share", 0)))
    st.markdown(f"**{t('roofline.prediction')}** " + text, unsafe_allow_html=True)


def ratio_verdict(t: Texts, measured_ratio: float) -> str:
    """After experiment 2: the measured prefill:decode ratio against the prediction ("" without one)."""
    p = backend_prediction()
    if p is None:
        return ""
    key = "roofline.exp2_agrees" if p.ratio_agrees(measured_ratio) else "roofline.exp2_disagrees"
    return t(key, ratio=p.ratio, measured=measured_ratio, spread=RATIO_SPREAD)


def batch_bound_note(t: Texts, gain: float | None) -> str:
    """After experiment 4: its measured decode gain beside the most the roofs allow here ("" without a prediction),
    chosen by those two numbers alone. A gain above the bound is no batching the roofs allow: a level was slowed."""
    p = backend_prediction()
    if p is None or gain is None:
        return ""
    if gain > p.gain_bound:
        key = "roofline.exp4_above"
    else:
        key = "roofline.exp4_verdict" if p.can_show_batching else "roofline.exp4_cannot"
    return t(key, gain=gain, bound=p.gain_bound, threshold=MIN_SHOWABLE_GAIN,
             source=t(f"roofline.gain_from_{p.gain_from}"))
