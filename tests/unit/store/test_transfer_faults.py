"""Hostile exports: values out of range, NaN and Infinity, deep nesting, key-named settings fields, and a
bad value already in the store. Each import is refused with the file's line, or stored scrubbed; a bad
stored value is named where it shows, never a crash of the list, the report or a page."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.experiments.prefix_cache import ID as CACHE
from core.export import to_json
from core.records import RoundResult
from core.store import ImportRefused, RunStore, export_run, import_export, read_export
from core.store.dates import run_date
from tests.support.apptest import ROOT, app

SECRET = "sk-imported-secret-4242424242"


def export(**run: Any) -> dict[str, Any]:
    """A small real export of experiment 3, with ``run`` fields set."""
    rounds = [RoundResult(CACHE, n, strategy="append_only", prompt_tokens=100 + n, cached_tokens=90, ttft_ms=30.5,
                          total_ms=80.0) for n in (1, 2, 3)]
    data: dict[str, Any] = json.loads(to_json({"backend": "api", "model": "m"}, {"rounds": rounds}))
    data["run"] = {"format": 1, "experiment": CACHE, "label": "hostile", "status": "done", "started_at": 1.7e9,
                   **run}
    return data


def refused(text: str) -> str:
    store = RunStore.memory()
    with pytest.raises(ImportRefused) as caught:
        import_export(store, text, "hostile.json")
    assert store.runs() == []  # nothing was stored
    return str(caught.value)


@pytest.mark.parametrize("value", ["1e300", "Infinity", "-Infinity", "-1e20", "NaN", "1e400", '"yesterday"', "true"])
def test_a_start_no_clock_can_show_is_refused_with_its_line(value: str) -> None:
    text = json.dumps(export(), indent=2).replace('"started_at": 1700000000.0', f'"started_at": {value}')
    assert value in text
    lines = text.splitlines()
    started = next(n for n, ln in enumerate(lines, start=1) if '"started_at"' in ln)
    run = next(n for n, ln in enumerate(lines, start=1) if ln.startswith('  "run"'))
    message = refused(text)
    assert message.startswith((f"hostile.json, line {started}: ", f"hostile.json, line {run}: ")), message
    assert '"run".started_at is' in message or f"{value} is not a number a run can hold" in message, message


@pytest.mark.parametrize(("field", "value", "says"), [
    ("ttft_ms", "NaN", "NaN is not a number a run can hold"),
    ("prompt_tokens", "-5", "'prompt_tokens' is -5; a measure is from 0"),
    ("total_ms", "1e300", "'total_ms' is 1e+300; a measure is from 0"),
    ("cached_tokens", "1e999", "1e999 is not a number a run can hold"),
])
def test_a_round_value_out_of_range_is_refused_with_the_round_s_line(field: str, value: str, says: str) -> None:
    text = json.dumps(export(), indent=2)
    lines = text.splitlines()
    at = [n for n, ln in enumerate(lines) if f'"{field}"' in ln][1]  # round 2's
    lines[at] = lines[at].split(":")[0] + f": {value}" + ("," if lines[at].rstrip().endswith(",") else "")
    message = refused("\n".join(lines))
    assert says in message and message.startswith("hostile.json, line ")
    assert f"line {at + 1}" in message or "round 2" in message


def test_a_file_nested_5000_deep_and_settings_900_deep_are_refused_without_a_traceback() -> None:
    deep_file = '{"rounds": ' + "[" * 5000 + "]" * 5000 + "}"
    assert "nested deeper than Python can read" in refused(deep_file)
    data = export()
    settings: dict[str, Any] = {}
    data["settings"]["extra"] = settings
    for _ in range(900):
        settings["x"] = {}
        settings = settings["x"]
    message = refused(json.dumps(data))
    assert '"settings" is nested more than 32 levels deep' in message
    data = export()
    data["rounds"][0] = {**data["rounds"][0], "error": [[[["not text"]]]]}
    assert "'error' should be str" in refused(json.dumps(data))


def test_key_named_settings_fields_are_dropped_on_import_like_the_store_s_own_writes(tmp_path: Path) -> None:
    data = export(machine={"cpu": "Bench CPU", "cores": 2, "api_token": SECRET},
                  summary={"note": "kept", "x-api-key": SECRET})
    data["settings"].update({"OPENAI_API_KEY": SECRET, "apiKey": SECRET, "max_tokens": 64,
                             "headers": {"Authorization": f"Bearer {SECRET}", "x-api-key": SECRET, "Accept": "*/*"},
                             "prompt_cache_key": "route-7", "clients": [{"access_token": SECRET, "name": "a"}]})
    db = tmp_path / "runs.sqlite"
    store = RunStore.open(str(db))
    (run_id,) = import_export(store, json.dumps(data), "keys.json")
    saved = store.get(run_id)
    assert saved is not None
    assert saved.settings == {"backend": "api", "model": "m", "max_tokens": 64, "headers": {"Accept": "*/*"},
                              "prompt_cache_key": "route-7", "clients": [{"name": "a"}]}
    assert saved.machine == {"cpu": "Bench CPU", "cores": 2} and saved.summary == {"note": "kept"}
    exported = export_run(saved, store.records(run_id))
    store.close()
    assert SECRET not in exported
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())


@pytest.mark.slow
def test_100000_rounds_import_whole_and_a_bad_last_round_is_named_by_its_line(tmp_path: Path) -> None:
    rounds = [RoundResult(CACHE, n % 6 + 1, strategy="append_only", prompt_tokens=2000 + n, cached_tokens=1990,
                          ttft_ms=31.5, total_ms=270.9) for n in range(100_000)]
    text = to_json({"backend": "local", "model": "m"}, {"rounds": rounds}, run={"format": 1, "label": "big"})
    store = RunStore.open(str(tmp_path / "runs.sqlite"))
    (run_id,) = import_export(store, text, "big.json")
    assert store.get(run_id).rounds == 100_000  # type: ignore[union-attr]
    assert store.records(run_id)[-1].prompt_tokens == 2000 + 99_999  # type: ignore[attr-defined]
    store.close()
    bad = text[: text.rindex('"prompt_tokens"')] + '"prompt_tokens": -1' + text[text.rindex('"prompt_tokens"') + 23:]
    assert json.loads(bad)["rounds"][-1]["prompt_tokens"] == -1
    line = bad[: bad.rindex('"prompt_tokens"')].count("\n") + 1
    with pytest.raises(ImportRefused) as caught:
        read_export(bad, "big.json")
    # the round's line: where its object starts, a few lines above the field
    said = int(str(caught.value).split("line ")[1].split()[0])
    assert "(round 100000)" in str(caught.value) and line - 20 < said <= line


def test_a_bad_date_already_stored_is_named_where_it_shows() -> None:
    assert run_date(1.7e9).startswith("2023-11-")
    for value in (1e300, float("inf"), float("nan"), -1e20, None):
        assert run_date(value) == f"not a date ({value!r})"


def core(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PREFILL_LAB_DB": str(db)})


@pytest.fixture()
def bad_dates(tmp_path: Path) -> Path:
    """A store holding runs whose start no clock can show (as an older version's import left them)."""
    db = tmp_path / "runs.sqlite"
    store = RunStore.open(str(db))
    good = export()
    for started in (1e300, float("inf"), -1e20):
        data = copy.deepcopy(good)
        data["run"]["started_at"] = 1.7e9
        (run_id,) = import_export(store, json.dumps(data), "old.json")
        store.begin(CACHE, {"backend": "api"}, label=f"bad {started}", started_at=started, status="done",
                    machine={"cpu": "x"})
        assert run_id
    store.close()
    return db


@pytest.mark.slow
def test_runs_list_show_and_report_go_on_past_a_bad_stored_date(bad_dates: Path, tmp_path: Path) -> None:
    listing = core(bad_dates, "runs", "list")
    assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
    assert listing.stdout.count("not a date (") == 3 and "hostile" in listing.stdout
    run_ids = [line.split()[0] for line in listing.stdout.splitlines() if "not a date" in line]
    shown = core(bad_dates, "runs", "show", run_ids[0])
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    report = core(bad_dates, "report", *run_ids, "--html", str(tmp_path / "r.html"))
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    assert "not a date (1e+300)" in (tmp_path / "r.html").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("page", ["app_pages/runs.py", "app_pages/cache.py"])
def test_the_saved_runs_page_and_experiment_3_list_past_a_bad_stored_date(bad_dates: Path, page: str) -> None:
    at = app()
    at.secrets["PREFILL_LAB_DB"] = str(bad_dates)
    at.switch_page(page).run()
    assert not at.exception
    dates = [v for frame in at.dataframe for column in ("date",) if column in frame.value
             for v in frame.value[column]]
    assert sum(str(v).startswith("not a date (") for v in dates) == 3, dates


def test_the_store_s_own_scrubber_takes_any_depth_and_any_spelling() -> None:
    """The store's writes scrub keys too (a measured run's settings): 900 levels, the issue's settings, was a
    RecursionError in the scrubber (which now walks without recursion; JSON itself stops near 1,000)."""
    settings: dict[str, Any] = {"backend": "api", "apiKey": SECRET}
    inner = settings
    for _ in range(900):
        inner["deeper"] = {"OPENAI_API_KEY": SECRET}
        inner = inner["deeper"]
    store = RunStore.memory()
    run_id = store.begin(CACHE, settings, label="deep")
    saved = store.get(run_id)
    assert saved is not None and SECRET not in json.dumps(saved.settings) and "deeper" in saved.settings
    assert store.begin(CACHE, {"x-api-key": SECRET, "model": "m"}, label="k") and SECRET not in json.dumps(
        [r.settings for r in store.runs()])


def test_an_export_of_a_bad_stored_date_imports(bad_dates: Path) -> None:
    """``runs export`` of such a run writes null where the date was (no clock can show it): ``runs import`` takes it."""
    store = RunStore.open(str(bad_dates))
    bad = [saved for saved in store.runs() if saved.label.startswith("bad ")]
    assert len(bad) == 3
    for saved in bad:
        store.add(saved.id, RoundResult(CACHE, 1, strategy="append_only", prompt_tokens=1000, ttft_ms=10.0))
        text = export_run(saved, store.records(saved.id))
        assert json.loads(text)["run"]["started_at"] is None  # strict JSON: no Infinity either
        assert import_export(store, text, "exported.json")
