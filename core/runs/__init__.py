"""Runs: one run through one call (`start_run`: admission, saving, the CPU meter, the conclusion and the
settlement, for the app and the CLI alike), a source of records (`Source`, an experiment's generator over a
`RunContext`) driven in a worker thread (`runner.BackgroundRun`, the queue that admits runs, their statuses), and
what the records pass through on the way (`recording`: the run store)."""

from core.experiments.base import RunContext, Source
from core.runs.runner import DONE, FAILED, QUEUED, RUNNING, STOPPED, WAITING, BackgroundRun, Snapshot
from core.runs.session import Events, NotStarted, RunOrder, Visit, start_run

__all__ = ["DONE", "FAILED", "QUEUED", "RUNNING", "STOPPED", "WAITING", "BackgroundRun", "Events", "NotStarted",
           "RunContext", "RunOrder", "Snapshot", "Source", "Visit", "start_run"]
