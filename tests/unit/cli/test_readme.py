"""What the README says about the command line matches the code: every experiment `--only` takes, the app's port."""

from __future__ import annotations

import re

from core.experiments import EXPERIMENTS
from tests.support import ROOT

README = (ROOT / "README.md").read_text()


def test_the_readme_names_every_experiment_only_takes() -> None:
    listed = re.search(r"`--only ([a-z_|]+)`", README)
    assert listed is not None and listed.group(1).split("|") == list(EXPERIMENTS)


def test_the_readme_says_how_to_run_the_app_on_another_port() -> None:
    assert "make run PORT=" in README and "PORT ?=" in (ROOT / "Makefile").read_text()
