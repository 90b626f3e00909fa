"""A run's conclusion as data: computed once from its records and the machine's state, stored with the run, and
rendered by the page, the home page, the HTML report and the CLI from the same words.

Each experiment's module owns one function ``conclude(records, state) -> Conclusion``
(`core.experiments.base.Experiment.conclude`). Its status is one of `SHOWN`, `NOT_SHOWN`, `DISTURBED` or
`NO_DATA`; ``decided_by`` is the condition that decided it, with the number that decided it ("prefill did not
stay flat: 3.26x"); ``claims`` are the further sentences the run supports, each with its numbers. A `Finding` is a
content key below ``[<experiment>.conclusion]`` in content/*.toml and the values its sentence quotes, so a
consumer renders it in any language and never words a result of its own, and never tests a status to pick words.

Why data and not a sentence: the same run read back after a reload, an export and an import, or printed by the
CLI must say the same thing with the same numbers; a sentence built by each consumer drifted apart (three
sentences for one run, in the issue that asked for this).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.words import Words

SHOWN = "shown"  # the lesson is in the numbers
NOT_SHOWN = "not_shown"  # measured, and a named condition failed
DISTURBED = "disturbed"  # measured, but the machine's state (contention found in the steps or the meter) spoils it
NO_DATA = "no_data"  # too little measured to decide (fewer rounds than the rule needs, every round failed)
STATUSES = (SHOWN, NOT_SHOWN, DISTURBED, NO_DATA)

Value = float | int | str | None


@dataclass(frozen=True)
class Finding:
    """One sentence of a conclusion: ``key`` below ``[<experiment>.conclusion]`` and the numbers it quotes."""

    key: str
    values: Mapping[str, Value] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "values": dict(self.values)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        values = data.get("values") or {}
        if not isinstance(data.get("key"), str) or not isinstance(values, Mapping):
            raise ValueError(f"a finding needs a text key and a table of values, not {dict(data)!r}")
        return cls(data["key"], {str(k): v for k, v in values.items() if v is None or isinstance(v, int | float | str)})


@dataclass(frozen=True)
class Conclusion:
    """What one run showed: its status, the condition that decided it and the claims it supports."""

    experiment: str
    status: str
    decided_by: Finding | None = None
    claims: tuple[Finding, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"a conclusion's status is one of {', '.join(STATUSES)}, not {self.status!r}")

    @property
    def shown(self) -> bool | None:
        """True, False, or None where nothing decides it yet (`NO_DATA`): what a page colours by."""
        return None if self.status == NO_DATA else self.status == SHOWN

    def findings(self) -> Iterator[Finding]:
        if self.decided_by is not None:
            yield self.decided_by
        yield from self.claims

    def to_dict(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "status": self.status,
                "decided_by": self.decided_by.to_dict() if self.decided_by else None,
                "claims": [c.to_dict() for c in self.claims]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Conclusion:
        decided = data.get("decided_by")
        return cls(str(data.get("experiment", "")), str(data.get("status", "")),
                   Finding.from_dict(decided) if isinstance(decided, Mapping) else None,
                   tuple(Finding.from_dict(c) for c in data.get("claims") or () if isinstance(c, Mapping)))


@dataclass(frozen=True)
class MachineState:
    """The machine during a run, a field of the run (stored, exported, shown after a reload): the server's share of
    the CPU time used, other programs' CPU seconds, the load average, and whether the meter called it busy.
    Contention found in the records themselves (a step far above its run's median) is each experiment's
    ``conclude`` to find; this is what the meter saw. ``measured`` is False where nothing could be read (a remote
    API): then no figure is made up."""

    measured: bool = False
    server_share: float | None = None  # the server's CPU seconds over all CPU seconds used meanwhile
    others_s: float | None = None  # CPU seconds other programs used meanwhile
    load: float | None = None  # the 1-minute load average at the end
    cores: int | None = None
    busy: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"measured": self.measured, "server_share": self.server_share, "others_s": self.others_s,
                "load": self.load, "cores": self.cores, "busy": self.busy}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> MachineState:
        if not isinstance(data, Mapping):
            return cls()

        def num(name: str) -> float | None:
            value = data.get(name)
            return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

        cores = data.get("cores")
        return cls(bool(data.get("measured")), num("server_share"), num("others_s"), num("load"),
                   cores if isinstance(cores, int) and not isinstance(cores, bool) else None, bool(data.get("busy")))


def key_of(conclusion: Conclusion, finding: Finding) -> str:
    """Where a finding's words live: ``<experiment>.conclusion.<key>``."""
    return f"{conclusion.experiment}.conclusion.{finding.key}"


WORD = "_word"  # a value named ``<name>_word`` is a content key, quoted as ``{<name>}`` in the reader's language


def _values(values: Mapping[str, Value], words: Words) -> dict[str, Value]:
    """A finding's values as its sentence quotes them: ``other_word="strategy.timestamp_first"`` becomes
    ``other`` in the reader's words (a strategy's name), every other value as it is."""
    return {name.removesuffix(WORD): words(str(value)) if name.endswith(WORD) else value
            for name, value in values.items()}


def render(conclusion: Conclusion, words: Words) -> list[str]:
    """The conclusion's sentences in ``words``' language: the status's heading sentence first
    (``<experiment>.conclusion.<status>``, which may quote the deciding values), then every finding."""
    values = _values(conclusion.decided_by.values, words) if conclusion.decided_by else {}
    head = words(f"{conclusion.experiment}.conclusion.{conclusion.status}", **values)
    return [head, *(words(key_of(conclusion, f), **_values(f.values, words)) for f in conclusion.findings())]


class Concludes(Protocol):
    """What `conclusion_of` needs of an experiment (`core.experiments.base.Experiment`)."""

    @property
    def conclude(self) -> Callable[[Sequence[Any], MachineState | None], Conclusion]: ...


def conclusion_of(spec: Concludes, records: Sequence[Any], state: MachineState | None,
                  stored: Conclusion | Mapping[str, Any] | None) -> Conclusion:
    """A run's conclusion: the one stored with it where it has one (``SavedRun.summary["conclusion"]`` as
    `Conclusion.to_dict` wrote it, or the run's own), what it concluded as it ended on the machine state of then;
    else computed now from its records and state. Every consumer (page, home page, report, CLI) asks here, so a run
    reads the same wherever it is shown."""
    if isinstance(stored, Conclusion):
        return stored
    if isinstance(stored, Mapping) and stored.get("status") in STATUSES:
        return Conclusion.from_dict(stored)
    return spec.conclude(records, state)


def paragraph(conclusion: Conclusion, words: Words) -> str:
    """`render`'s sentences as one paragraph, as the page, the report and the CLI print it."""
    return " ".join(line for line in render(conclusion, words) if line)


def disturbed(state: MachineState | None) -> Finding | None:
    """The meter's verdict as a finding: ``busy`` with the server's share of the CPU time and the other programs'
    CPU seconds, ``busy_unmeasured`` where it read no figures (none is made up); None where it was not busy."""
    if state is None or not state.busy:
        return None
    if state.server_share is None or state.others_s is None:
        return Finding("busy_unmeasured")
    return Finding("busy", {"share": 100 * state.server_share, "others": state.others_s})


__all__ = ["DISTURBED", "NOT_SHOWN", "NO_DATA", "SHOWN", "STATUSES", "Concludes", "Conclusion", "Finding",
           "MachineState", "conclusion_of", "disturbed", "key_of", "paragraph", "render"]
