"""What the doctor compares for one input: the one decision the page and the CLI both follow.

- Two or more rounds (a log, or several text files): each round against the one before (`COMPARE`).
- A single text file: read as a system prompt; the doctor builds the rounds experiment 3 would send
  around it for *append only* and *timestamp first* and compares those (`SIMULATE`). These are not
  the user's own rounds, so a CI gate (``--fail-on-break``) has nothing to pass or fail on them.
- A single round from a log (`SINGLE_ROUND`) and an input where no round could be read (`UNREAD`):
  nothing to compare, so no verdict, never "no round breaks the cache".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.doctor.model import Transcript
from core.doctor.replay import simulate

COMPARE, SIMULATE, SINGLE_ROUND, UNREAD = "compare", "simulate", "single_round", "unread"
SIMULATED_STRATEGIES = ("append_only", "timestamp_first")
OWN = "transcript"  # the key of the user's own rounds in `Comparison.transcripts`


@dataclass(frozen=True)
class Comparison:
    """``kind`` (one of the constants above) and the transcripts to analyse, by name."""

    kind: str
    name: str
    transcripts: dict[str, Transcript] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """Why there is nothing to compare, in English (the page says it in the visitor's language)."""
        if self.kind == UNREAD:
            return f"no round could be read from {self.name}"
        if self.kind == SINGLE_ROUND:
            return (f"only one round in {self.name}: nothing to compare. Give the requests of two or more rounds "
                    "(or a single text file, read as a system prompt: experiment 3's strategies are compared "
                    "around it).")
        if self.kind == SIMULATE:
            return (f"{self.name} is a single text file, read as a system prompt: the doctor compares experiment 3's "
                    "strategies around it, which are not rounds of yours, so there is only one round of yours "
                    "to gate: give the logged requests of two or more rounds.")
        return ""


def comparison(transcript: Transcript, name: str) -> Comparison:
    """The decision for one input (see the module's docstring)."""
    if not transcript.rounds:
        return Comparison(UNREAD, name)
    if transcript.kind == "system_prompt":
        prompt = transcript.rounds[0].messages[0].text()
        return Comparison(SIMULATE, name, {s: simulate(prompt, s) for s in SIMULATED_STRATEGIES})
    if len(transcript.rounds) < 2:
        return Comparison(SINGLE_ROUND, name)
    return Comparison(COMPARE, name, {OWN: transcript})
