"""What every experiment page shares: Run and Stop, the live loop, saved runs, the table and downloads."""

from ui.runs.controls import run_controls
from ui.runs.loop import explain, show_run

__all__ = ["explain", "run_controls", "show_run"]
