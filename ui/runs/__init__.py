"""What every experiment page shares: Run and Stop, the live loop, saved runs, the table and downloads.

A page describes its run (`ExperimentPlan`, and `Records` when its records are not rounds), may show what will
be sent (`preview`), then calls `run_controls` and `show_run` with its ``draw``; `explain` sets what to expect
beside what the run showed.
"""

from ui.runs.contract import ExperimentPlan, Records
from ui.runs.controls import preview, run_controls
from ui.runs.loop import explain, show_run

__all__ = ["ExperimentPlan", "Records", "explain", "preview", "run_controls", "show_run"]
