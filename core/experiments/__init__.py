"""The experiments, one module each, and their one registry `EXPERIMENTS` (as `core.backends.BACKENDS` is of
backends).

Each experiment's module owns all of its knowledge: its settings and options, its plan, its generator
``rounds(run, settings)`` (one record per request or level), its summary, its conclusion
(``conclude(records, machine state) -> core.conclusions.Conclusion``), its table (the CLI's and the page's), and
its own declaration by keyword,
``EXPERIMENT = Experiment(id=ID, ...)`` (`core.experiments.base.Experiment`). Everything else iterates
`EXPERIMENTS` and never tests an id: the CLI's ``--only``, options, table and summary (`core.cli.main`), the app's
navigation (`ui.navigation.PAGES`) and session defaults (`ui.session`), the page smoke test
(tests/pages/test_pages.py), the run loop, the exports' record key (`records_key`), the run store, the HTML report
(`core.report`), and the charts registry `core.charts.CHARTS`, which has the same keys.

The id (``input``, ``output``, ...) is the CLI's ``--only`` choice, the records' ``experiment``, the content key
(``[input]``, ``nav.input`` in content/*.toml), the page's URL (``/input``), the session history key and the
prefix of its widgets' session keys (``cache_rounds``).

How to add an experiment with id ``ID`` (module ``NAME``):

1. ``core/experiments/NAME.py``: ``ID``, ``Settings`` (a frozen dataclass), ``OPTIONS``, ``plan``, ``prepare``,
   ``rounds``, its summary, ``conclude(records, state) -> Conclusion`` (the one condition that decided it, with its
   number, and its claims; `core.conclusions`) and,
   when its records are not `core.records.RoundResult` rounds, its record type (``to_dict``, ``from_dict``,
   ``error``, ``experiment``) and its ``Table``; then ``EXPERIMENT = Experiment(id=ID, ...)``.
2. ``core/charts/NAME.py``: ``charts(runs, words) -> list of Altair charts`` (what the report shows).
3. ``app_pages/ID.py``: its widgets, ``ExperimentPlan.of(EXPERIMENTS[ID], settings)``, ``run_controls`` and
   ``show_run`` with a ``draw`` that shows its charts and ``explain(t, ID, runs[0])`` (its conclusion).
4. Its tests: ``tests/unit/experiments/test_NAME.py`` (and a page test if the page does more than the smoke
   test checks).
5. One line here (``NAME.EXPERIMENT`` in `EXPERIMENTS`, in navigation order) and one in `core.charts.CHARTS`.
6. Three TOML sections: ``[ID]`` (``title``, ``idea``, ``expect``, its chart words), ``[ID.conclusion]`` (a heading
   per status and a sentence per finding key) and ``nav.ID`` in content/en.toml and content/zh.toml.

A recorded sample (``samples/*.json``, named by ``sample=``) is optional. Nothing else changes.
"""

from __future__ import annotations

from core.experiments import (
    arrivals,
    batch,
    conversation,
    input_length,
    kv_cache,
    output_length,
    prefix_cache,
    roofline,
)
from core.experiments.base import Experiment, Option, Plan, RunContext

EXPERIMENTS: dict[str, Experiment] = {spec.id: spec for spec in (
    input_length.EXPERIMENT,
    output_length.EXPERIMENT,
    prefix_cache.EXPERIMENT,
    batch.EXPERIMENT,
    roofline.EXPERIMENT,
    kv_cache.EXPERIMENT,
    conversation.EXPERIMENT,
    arrivals.EXPERIMENT,
)}


def declared_options() -> dict[str, tuple[Option, list[Experiment]]]:
    """Each command-line flag once, with the experiments that declare it (a shared one, such as
    ``--prompt-tokens``, is one `Option` object: one meaning, one type)."""
    found: dict[str, tuple[Option, list[Experiment]]] = {}
    for spec in EXPERIMENTS.values():
        for option in spec.options:
            found.setdefault(option.flag, (option, []))[1].append(spec)
    return found


def records_key(experiment: str) -> str:
    """Where an export keeps ``experiment``'s records (``rounds`` for anything not registered, e.g. the doctor)."""
    spec = EXPERIMENTS.get(experiment)
    return spec.records if spec else "rounds"


__all__ = ["EXPERIMENTS", "Experiment", "Option", "Plan", "RunContext", "declared_options", "records_key"]
