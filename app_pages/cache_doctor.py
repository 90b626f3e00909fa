"""Cache doctor: which round of your own transcript broke the prefix cache, where, why, and the cost."""

from collections.abc import Iterator, Sequence

import streamlit as st

from core import doctor
from core.backends import BACKENDS
from core.backends.connect import Connection
from core.charts.base import RunView
from core.charts.doctor import doctor_chart
from core.experiments.base import Plan, RunContext, Source
from core.records import RoundResult
from core.words import in_words
from ui.doctor.findings import analysed, read_inputs, show_analysis
from ui.doctor.fix import proven_fix_section
from ui.doctor.samples import CHOSEN_KEY, sample_inputs
from ui.runs import ExperimentPlan, bounded_uploads, free_uploads_when_gone, run_controls, show_run
from ui.session import BACKEND_KEY, hosted
from ui.text import Texts, texts

t = texts()
st.title(t("doctor.title"))
st.markdown(t.rich("doctor.idea"), unsafe_allow_html=True)
with st.expander(t("doctor_input.capture_title")):
    st.markdown(t("doctor_input.capture"))

limits = hosted()
most_bytes = limits.max_doc_bytes if limits.hosted else doctor.MAX_DOCTOR_BYTES
files = st.file_uploader(t("doctor.upload"), accept_multiple_files=True, key="doctor_files",
                         max_upload_size=max(1, round(most_bytes / 2**20)) if limits.hosted else None)
free_uploads_when_gone()
files, uploaded = bounded_uploads(files or [], limits.max_doctor_files, most_bytes)
if len(files) < uploaded:
    st.error(t("doctor.too_many_files", n=uploaded, most=limits.max_doctor_files) if uploaded > limits.max_doctor_files
             else t("doctor.too_large_total", mb=sum(f.size for f in files) / 2**20, most=most_bytes / 2**20),
             icon=":material/error:")
pasted = st.text_area(t("doctor.paste"), key="doctor_paste", height=100)
server_ready = BACKENDS[st.session_state.get(BACKEND_KEY, "local")].is_llama_server
use_server = st.toggle(t("doctor.use_server"), value=server_ready, disabled=not server_ready, key="doctor_use_server",
                       help=t("doctor.use_server_help"))

formats = [None, *doctor.FORMATS]
log_format = st.selectbox(t("doctor_input.format_select"), formats, key="doctor_format",
                          help=t("doctor_input.format_help"),
                          format_func=lambda f: t("doctor_input.format_auto") if f is None else f)
inputs = [(f.name, f.getvalue()) for f in files or []]
if not inputs and pasted.strip():
    inputs = [("pasted.jsonl", pasted.encode())]
if inputs:
    st.session_state.pop(CHOSEN_KEY, None)  # the visitor's own input replaces a sample
else:
    inputs = sample_inputs(t)
if not inputs:
    st.info(t("doctor.empty"))
    st.stop()
kept = read_inputs(t, inputs, most_bytes, log_format)
transcript, digest = kept["transcript"], kept["digest"]
decision = doctor.comparison(transcript, ", ".join(n for n, _ in inputs))  # what is compared: the CLI's call too
if decision.kind == doctor.UNREAD:
    st.error(t("doctor_input.unread") + "\n\n" + "\n".join(f"- {in_words(e, t)}" for e in transcript.errors[:20]),
             icon=":material/error:")
    st.stop()
for problem in transcript.errors:
    st.warning(t("doctor.skipped", error=in_words(problem, t)), icon=":material/warning:")
for problem in transcript.unused:
    st.warning(t("doctor.not_used", problem=in_words(problem, t)), icon=":material/warning:")
st.caption(t("doctor_input.formats", name=", ".join(n for n, _ in inputs), formats=", ".join(transcript.formats),
             rounds=len(transcript.rounds)))
for note in transcript.notes:  # what was read and how (a trace's conventions, what its spans lack, gzip)
    st.caption(in_words(note, t))
if transcript.mixed:
    st.warning(t("doctor_input.mixed", mixed=in_words(transcript.mixed, t)), icon=":material/call_split:")

if decision.kind == doctor.SINGLE_ROUND:
    st.error(t("doctor.single_round", name=decision.name), icon=":material/error:")
    st.stop()
if decision.kind == doctor.SIMULATE:
    st.subheader(t("doctor.compare_title"))
    st.caption(t("doctor.compare_caption"))
transcripts = decision.transcripts


analyses: dict[str, doctor.Analysis] = {}
tabs = st.tabs([t(f"strategy.{name}") if name in doctor.SIMULATED_STRATEGIES else t("nav.doctor")
                for name in transcripts])
for tab, (name, item) in zip(tabs, transcripts.items(), strict=True):
    with tab:
        result = analysed(t, kept, name, item, use_server)
        if isinstance(result, str):
            st.error(result)
            result = doctor.analyse(item)
        analyses[name] = result
        show_analysis(t, name, result)

if len(inputs) == 1 and (original := next((n for n, item in transcripts.items() if item is transcript), None)):
    proven_fix_section(inputs[0][0], inputs[0][1], transcript, analyses[original], digest, t, log_format)

st.subheader(t("doctor.replay"))
st.caption(t("doctor.replay_help"))


def make_source(conn: Connection) -> Source:
    def rows(run: RunContext) -> Iterator[RoundResult]:
        for name, item in transcripts.items():
            yield from doctor.replay(item, run.backend, run.cancel, run.progress, label=name)
    return rows


def draw(runs: Sequence[RunView[RoundResult]], t: Texts, key: str) -> None:
    """Measured against predicted, per transcript, redrawn after every replayed round."""
    rows = runs[0].rows
    for name, analysis in analyses.items():
        mine, slot = [r for r in rows if r.strategy == name], st.empty()
        if mine:
            chart = doctor_chart([f.to_dict() for f in analysis.findings], t, mine)
            slot.altair_chart(chart, width="stretch", key=f"doctor-replay-{name}-{key}")


replay_plan = Plan(sum(len(item.rounds) for item in transcripts.values()),
                   sum(f.prompt_tokens + doctor.REPLAY_ANSWER_TOKENS for a in analyses.values() for f in a.findings))
plan = ExperimentPlan("doctor", {"inputs": [n for n, _ in inputs], "rounds": replay_plan.requests}, replay_plan,
                      make_source)
show_run(run_controls(plan, recorded=False), draw, "doctor")
