"""The experiment registry: one id per experiment in the CLI, the content, the pages, the session and the exports;
and exports written with the old ids and field names still load."""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from typing import get_type_hints

import pytest

from core.charts import CHARTS
from core.cli.main import build_parser
from core.experiments import EXPERIMENTS, declared_options
from core.experiments.base import exported_settings
from core.experiments.batch import BatchLevel
from core.experiments.samples import EMBEDDED_DEFAULT
from core.export import from_json, to_json
from core.records import RoundResult
from core.store.transfer import own_settings
from core.words import load
from tests.support import ROOT
from ui.navigation import PAGES
from ui.session import PERSISTENT


@pytest.mark.parametrize("spec", EXPERIMENTS.values(), ids=list(EXPERIMENTS))
def test_each_experiment_has_its_page_text_and_navigation_under_its_id(spec):
    assert (ROOT / spec.page).is_file() and spec.page in [page.path for page in PAGES]
    for lang in ("en", "zh"):
        content = load(lang)
        assert content["nav"][spec.id] and content[spec.id]["title"], (lang, spec.id)


@pytest.mark.parametrize("spec", EXPERIMENTS.values(), ids=list(EXPERIMENTS))
def test_session_defaults_and_options_are_its_settings(spec):
    defaults = spec.settings()
    kept = spec.session_defaults()
    assert kept and all(PERSISTENT[key] == value for key, value in kept.items())
    assert {option.dest for option in spec.options} <= set(exported_settings(defaults))
    assert spec.plan(defaults).requests > 0


def test_the_cli_reads_only_and_the_options_from_the_registry():
    parser = build_parser()
    only = next(a for a in parser._actions if a.dest == "only")
    assert list(only.choices) == list(EXPERIMENTS)
    args = vars(parser.parse_args(["--sizes", "128,256", "--repeats", "3", "--strategies", "append_only",
                                   "--concurrency", "1,2"]))
    assert EXPERIMENTS["input"].from_args(args).sizes == (128, 256)
    assert EXPERIMENTS["output"].from_args(args).repeats == 3, "one --repeats for experiments 1 and 2"
    assert EXPERIMENTS["cache"].from_args(args).strategies == ("append_only",)
    assert EXPERIMENTS["batch"].from_args(args).concurrency == (1, 2)
    assert EXPERIMENTS["cache"].from_args(args).rounds == 6, "an option not given keeps the settings' default"


def test_one_flag_per_idea_across_the_registry():
    """A flag several experiments declare is one `Option` (one help, one type); an option sets its field in every
    experiment whose settings have that field (never silently left at its default there); a field name several
    experiments' settings share has one type; no two flags write one field."""
    declared = declared_options()
    for spec in EXPERIMENTS.values():
        for option in spec.options:
            assert option == declared[option.flag][0], (spec.id, option.flag, "one flag, two meanings")
    shared = {}
    for spec in EXPERIMENTS.values():
        hints = get_type_hints(spec.settings)
        for found in fields(spec.settings):
            if not found.metadata.get("internal"):
                shared.setdefault(found.name, {})[spec.id] = hints[found.name]
    for name, types in shared.items():
        assert len(set(types.values())) == 1, (name, types)
    dests = [option.dest for option, _ in declared.values()]
    assert len(dests) == len(set(dests))
    for option, specs in declared.values():
        assert {spec.id for spec in specs} == set(shared[option.dest]), option.flag
    args = vars(build_parser().parse_args(["--prompt-tokens", "200", "--prefill-tps", "900"]))
    for spec in (EXPERIMENTS["batch"], EXPERIMENTS["kv_cache"], EXPERIMENTS["arrivals"]):
        assert spec.from_args(args).prompt_tokens == 200, spec.id
    assert EXPERIMENTS["arrivals"].from_args(args).prefill_tps == EXPERIMENTS["conversation"].from_args(
        args).prefill_tps == 900.0


def test_each_experiment_reads_back_its_own_settings_from_a_cli_export_of_several():
    """The CLI writes each experiment's settings under its id (experiment 4's prompt is 600 tokens, 8's is 100);
    an import gives each run the shared settings and its own, and an older flat export stays as it was."""
    written = {"backend": "local", "model": "m", "batch": {"prompt_tokens": 600, "levels": [1, 2]},
               "arrivals": {"prompt_tokens": 100, "rates": [0.5]}}
    assert own_settings(written, "batch") == {"backend": "local", "model": "m", "prompt_tokens": 600,
                                              "concurrency": [1, 2]}
    assert own_settings(written, "arrivals")["prompt_tokens"] == 100
    assert own_settings({"backend": "local", "prompt_tokens": 32}, "kv_cache") == {"backend": "local",
                                                                                  "prompt_tokens": 32}


def test_recorded_samples_written_with_the_old_ids_load_under_the_new():
    raw = json.loads(EMBEDDED_DEFAULT.read_text())["rounds"]
    assert {r["experiment"] for r in raw} == {"input_length", "output_length", "prefix_cache"}, "the old spelling"
    for spec in EXPERIMENTS.values():
        settings, records = spec.recorded()
        assert records and settings["backend"] == "local", spec.id
        assert all(getattr(r, "experiment", spec.id) == spec.id for r in records)
    _, cache = EXPERIMENTS["cache"].recorded()
    assert [r.cached_tokens for r in cache] == [r["reused_tokens"] for r in raw if r["experiment"] == "prefix_cache"]


def test_an_old_export_loads_with_its_old_field_names():
    old = {"settings": {"levels": [1, 2], "model": "m"},
           "rounds": [{"experiment": "prefix_cache", "round": 2, "reused_tokens": 900, "gone_field": 1}],
           "levels": [{"concurrency": 2, "reused_tokens": 0, "streams": [
               {"phase": "decode", "start_s": 0.0, "first_token_s": 0.1, "end_s": 0.5, "output_tokens": 4,
                "prompt_tokens": 50, "reused_tokens": 0}]}]}
    settings, rounds = from_json(json.dumps(old), "rounds", RoundResult)
    assert settings["concurrency"] == [1, 2] and "levels" not in settings
    assert rounds == [RoundResult("cache", 2, cached_tokens=900)]
    _, levels = from_json(json.dumps(old), "levels", BatchLevel)
    assert levels[0].cached_tokens == 0 and levels[0].streams[0].cached_tokens == 0


def test_an_export_reads_back_what_it_wrote():
    rows = [RoundResult("output", 1, output_tokens=8, ms_per_output_token=12.5)]
    levels = [BatchLevel(1, aggregate_decode_tps=90.0)]
    text = to_json({"concurrency": [1]}, {"rounds": rows, "levels": levels})
    assert from_json(text, "rounds", RoundResult) == ({"concurrency": [1]}, rows)
    assert from_json(text, "levels", BatchLevel)[1] == levels
    assert list(json.loads(to_json({}, {"levels": []}))) == ["settings", "rounds", "summary"]


def test_every_experiment_has_its_charts():
    assert CHARTS.keys() == EXPERIMENTS.keys()


def test_each_experiment_declares_itself_in_its_own_module():
    for spec in EXPERIMENTS.values():
        module = sys.modules[spec.rounds.__module__]
        assert module.EXPERIMENT is spec and module.ID == spec.id
        assert spec.conclude.__module__ == module.__name__
