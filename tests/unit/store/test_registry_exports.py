"""The run store reads what the registry says: an export of any registered experiment, its records under its own
key (``rounds``, ``levels``, ``roofline``...), imports as a run of that experiment."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.experiments import EXPERIMENTS
from core.export import to_json
from core.store import import_export, open_store


@pytest.mark.parametrize("experiment", [spec.id for spec in EXPERIMENTS.values() if spec.sample])
def test_each_experiments_recorded_export_imports(experiment: str, tmp_path: Path) -> None:
    spec = EXPERIMENTS[experiment]
    assert spec.sample is not None
    store = open_store(str(tmp_path / "runs.sqlite"))
    try:
        settings, records = spec.recorded()
        import_export(store, to_json(settings, {spec.records: records}), f"{experiment}.json")  # its own key alone
        saved = store.runs(experiment)
        assert saved and len(store.records(saved[0].id)) == len(records)
    finally:
        store.close()
