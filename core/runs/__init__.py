"""Runs: a source of records (`Source`, an experiment's generator over a `RunContext`) driven in a worker thread
(`runner.BackgroundRun`, the queue that admits runs, their statuses), and what the records pass through on the
way (`recording`: the run store, the CPU meter)."""

from core.experiments.base import RunContext, Source
from core.runs.runner import DONE, FAILED, QUEUED, RUNNING, STOPPED, WAITING, BackgroundRun, Snapshot

__all__ = ["DONE", "FAILED", "QUEUED", "RUNNING", "STOPPED", "WAITING", "BackgroundRun", "RunContext", "Snapshot",
           "Source"]
