"""A roofline cache that holds ``[]``, ``null``, broken JSON, or a negative or NaN bandwidth: treated as absent
with a sentence, and replaced by the next probe (``--rerun`` included), never a crash of every later run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.roofline import peaks


@pytest.fixture()
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "prefill-lab" / peaks.CACHE_FILE


def _roof(**memory: object) -> dict[str, object]:
    return {"machine": "this one", "memory": {"value": 2.0e10, "kernel": "copy", **memory},
            "compute": {"value": 1.0e11, "kernel": "matmul"}, "as_of": "2026-12-01"}


@pytest.mark.parametrize(("text", "says"), [
    ("[]", "is not a JSON object of figures"), ("null", "is not a JSON object of figures"),
    ("{", "is not a JSON object of figures"),
    (None, "its bandwidth -5.0 is not a positive number"), ("nan", "its bandwidth nan is not a positive number"),
    ("inf", "its bandwidth inf is not a positive number"), ("zero", "its bandwidth 0 is not a positive number"),
    ("partial", "its figures are incomplete"),
])
def test_an_unusable_cache_is_absent_with_a_sentence_and_a_probe_replaces_it(cache: Path, text: str | None,
                                                                            says: str) -> None:
    cache.parent.mkdir(parents=True)
    value = {None: -5.0, "nan": float("nan"), "inf": float("inf"), "zero": 0}.get(text)
    if text in (None, "nan", "inf", "zero"):
        cache.write_text(json.dumps({peaks.machine_key(): _roof(value=value)}))
    elif text == "partial":
        cache.write_text(json.dumps({peaks.machine_key(): {"machine": "this one"}}))
    else:
        cache.write_text(text or "")
    assert peaks.cached() is None
    assert says in peaks.cache_problem() and str(cache) in peaks.cache_problem()
    roof = peaks.Roof.from_dict(_roof())
    peaks.save(roof)  # as the probe's next figures are kept: they replace the unusable ones
    assert peaks.cached() == roof and peaks.cache_problem() == ""


@pytest.mark.slow
def test_rerun_on_a_cache_holding_a_list_measures_and_keeps_the_figures(cache: Path) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_text("[]")  # save() indexed the list: every later run, --rerun included, crashed
    roof = peaks.machine_roof(rerun=True)
    assert roof.bandwidth > 0 and peaks.cached() == roof and peaks.cache_problem() == ""


def test_a_good_cache_is_read_and_says_nothing(cache: Path) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({peaks.machine_key(): _roof()}))
    roof = peaks.cached()
    assert roof is not None and roof.bandwidth == 2.0e10 and peaks.cache_problem() == ""

