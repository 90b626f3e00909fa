"""An export imported from its file a value at a time (`core.store.stream`): the same runs whatever the size
of a read (a value, a UTF-8 character or a line split between two reads), more rounds than one batch in
their order, memory far below the file's size, and a cut, corrupt or changing file refused with its line and
nothing left half-stored. Every export is written by the app's own export code (`export_run`, `to_json`).
A test taking ``location`` runs on both engines: a SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import core.store.stream
import core.store.transfer
from core.experiments.prefix_cache import ID as CACHE
from core.experiments.samples import EMBEDDED_BATCH, EMBEDDED_DEFAULT
from core.export import to_json
from core.records import RoundResult
from core.store import ImportRefused, RunStore, export_run, import_export, open_store
from core.store.transfer import BATCH


def rounds(count: int) -> list[RoundResult]:
    return [RoundResult(CACHE, n % 6 + 1, strategy="append_only", prompt_tokens=2000 + n, cached_tokens=1990,
                        ttft_ms=31.5 + n / 7, total_ms=270.9, error="" if n % 5 else "timeout · 超时")
            for n in range(count)]


def exported(store: RunStore, tmp_path: Path) -> list[tuple[Path, Any]]:
    """Each sample run imported, labelled in two scripts, and written back out as `runs export` writes it."""
    files = []
    for sample in (EMBEDDED_DEFAULT, EMBEDDED_BATCH):
        for run_id in import_export(store, sample, sample.name):
            store.rename(run_id, "笔记本 · laptop «run»")
            saved = store.get(run_id)
            assert saved is not None
            path = tmp_path / f"{run_id}.json"
            path.write_text(export_run(saved, store.records(run_id)))
            files.append((path, saved))
    return files


@pytest.mark.parametrize("chunk", [1 << 20, 1, 7])
def test_a_real_export_comes_back_the_same_whatever_the_size_of_a_read(location: str, tmp_path: Path, chunk: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    source = RunStore.memory()
    files = exported(source, tmp_path)
    monkeypatch.setattr(core.store.stream, "CHUNK", chunk)
    store = open_store(location)
    for path, saved in files:
        (copy,) = import_export(store, path, path.name)
        got = store.get(copy)
        assert got is not None
        assert (got.label, got.experiment, got.settings, got.machine, got.status, got.summary) == (
            saved.label, saved.experiment, saved.settings, saved.machine, saved.status, saved.summary)
        assert store.records(copy) == source.records(saved.id)


@pytest.mark.slow
def test_more_rounds_than_a_batch_keep_their_order(location: str, tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(to_json({"backend": "local", "model": "m"}, {"rounds": rounds(2 * BATCH + 17)},
                            run={"format": 1, "label": "big"}))
    store = open_store(location)
    (run_id,) = import_export(store, path, path.name)
    assert store.records(run_id) == rounds(2 * BATCH + 17)
    assert import_export(store, path.read_bytes(), "uploaded.json")  # an upload's bytes, as the page gives them


@pytest.mark.slow
def test_memory_holds_a_batch_not_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core.store.stream, "CHUNK", 1 << 16)
    monkeypatch.setattr(core.store.transfer, "BATCH", 200)
    path = tmp_path / "big.json"
    path.write_text(to_json({"backend": "local", "model": "m"}, {"rounds": rounds(6000)}, run={"format": 1}))
    store = RunStore.open(str(tmp_path / "runs.sqlite"))
    tracemalloc.start()
    try:
        (run_id,) = import_export(store, path, path.name)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert store.records(run_id) == rounds(6000)
    assert peak < path.stat().st_size / 4, (peak, path.stat().st_size)  # read whole, it took 3x the file


def test_a_cut_or_corrupt_export_is_refused_by_its_line_and_nothing_is_stored(location: str, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core.store.stream, "CHUNK", 64)  # the faults fall in every part of a read
    whole = exported(RunStore.memory(), tmp_path)[0][0].read_bytes()
    lines = whole.count(b"\n") + 1
    store = open_store(location)
    before = [r.id for r in store.runs()]
    for cut in range(1, len(whole) - 1, len(whole) // 25):
        path = tmp_path / "cut.json"
        path.write_bytes(whole[:cut])
        with pytest.raises(ImportRefused) as refused:
            import_export(store, path, "cut.json")
        line = int(str(refused.value).split("line ")[1].split(":")[0])
        assert "not JSON" in str(refused.value) and 1 <= line <= whole[:cut].count(b"\n") + 1, refused.value
    middle = whole.index(b"\n", len(whole) // 2) + 3
    path.write_bytes(whole[:middle] + b"\xff" + whole[middle + 1:])
    with pytest.raises(ImportRefused) as refused:
        import_export(store, path, "corrupt.json")
    at = whole[:middle].count(b"\n") + 1
    assert f"corrupt.json, line {at}: not UTF-8 text (byte 0xff" in str(refused.value) and at < lines
    assert [r.id for r in store.runs()] == before


@pytest.mark.slow
def test_a_file_cut_while_it_is_stored_leaves_no_run(location: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core.store.stream, "CHUNK", 4096)
    path = tmp_path / "big.json"
    text = to_json({"backend": "local", "model": "m"}, {"rounds": rounds(3 * BATCH)}, run={"format": 1})
    path.write_text(text)
    store = open_store(location)
    before = [r.id for r in store.runs()]
    store_batch = store.add_all

    def cut_after_the_first(run_id: str, records: Any, first: int = 1) -> None:
        store_batch(run_id, records, first)
        path.write_text(text[: len(text) // 2])  # the file is replaced while its second reading goes on

    monkeypatch.setattr(store, "add_all", cut_after_the_first)
    with pytest.raises(ImportRefused, match="big.json, line [0-9]+: not JSON"):
        import_export(store, path, "big.json")
    assert [r.id for r in store.runs()] == before
