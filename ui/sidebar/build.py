"""Offer `make engine` in the sidebar when the embedded engine cannot run on this CPU.

The build (`core.engine.build.build_native`, minutes) runs in one worker thread per Streamlit
process, since its result is one shared cache; the worker only appends progress lines, and a
fragment that reruns every second draws them (no ``st.*`` call ever leaves the script thread).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from core.engine import build as engine_build
from core.engine.server import EngineError
from ui.text import Texts

_PERCENT = re.compile(r"^\[\s*(\d+)%\]")


@dataclass
class BuildJob:
    """One native build: its last progress lines, percent done, and how it ended."""

    lines: deque[str] = field(default_factory=lambda: deque(maxlen=8))
    percent: int = 0
    result: Path | None = None
    error: str = ""
    thread: threading.Thread | None = None

    def progress(self, line: str) -> None:
        self.lines.append(line)
        match = _PERCENT.match(line)
        if match:
            self.percent = int(match.group(1))

    def work(self) -> None:
        try:
            self.result = engine_build.build_native(self.progress)
        except EngineError as exc:
            self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a worker thread: any failure (a bad download too) is shown
            self.error = f"{type(exc).__name__}: {exc}"

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


@st.cache_resource(show_spinner=False)
def _job() -> BuildJob:
    return BuildJob()


def _start(job: BuildJob) -> None:
    job.error, job.result, job.percent = "", None, 0
    job.thread = threading.Thread(target=job.work, name="engine-build", daemon=True)
    job.thread.start()


@st.fragment(run_every=1.0)
def _progress(t: Texts) -> None:
    job = _job()
    if job.running():
        st.progress(job.percent / 100, text=t("engine.building", percent=job.percent))
        st.code("\n".join(job.lines) or "…", language=None)
    else:
        st.rerun()  # finished: redraw the whole sidebar once, without this fragment's timer


def offer_native_build(t: Texts) -> None:
    """A button that builds llama-server for this CPU, its live progress, and how it ended."""
    job = _job()
    if job.running():
        _progress(t)
        return
    if job.result is not None:
        st.success(t("engine.built", path=job.result))
        return
    if job.error:
        st.error(t("engine.build_failed"))
        st.code(job.error, language=None)
    st.caption(t("engine.build_intro"))
    if st.button(t("engine.build_button"), key="build_engine", type="primary"):
        _start(job)
        st.rerun()
