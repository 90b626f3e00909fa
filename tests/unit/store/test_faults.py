"""The store's faults (issue 25, issue 27 item 5): a database that does not answer at the start or stops mid-run, and a
disk that fills mid-run. Measuring goes on; what was measured waits in memory and is written when the database works
again, or the CLI says, at the end and with a non-zero exit, that it was not saved. Never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.experiments.prefix_cache import ID as CACHE
from core.export import to_json
from core.records import RoundResult
from core.runs.runner import DONE
from core.store import REFERENCE_ID, RunStore, import_export, open_store
from tests.support import ROOT
from tests.support.apptest import api_state, app, rendered
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.postgres import Cluster, _free_port


@pytest.fixture()
def own_cluster() -> Iterator[Cluster]:
    """A cluster of the test's own, to stop and start (the session's serves every other test)."""
    with Cluster() as cluster:
        yield cluster


def wait_written(store: RunStore, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while store.unsaved and time.monotonic() < deadline:
        store.flush()
        time.sleep(0.2)


def cli(location: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "core", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PREFILL_LAB_DB": location})


def test_a_server_that_does_not_answer_at_the_start_is_a_sentence_and_runs_wait_for_it() -> None:
    url = f"postgresql://team:pw-never-shown-42@127.0.0.1:{_free_port()}/runs"
    store = open_store(url)
    assert "cannot be used now (cannot connect: connection failed" in store.problem and "refused" in store.problem
    assert "Start the database server, or check PREFILL_LAB_DB" in store.problem
    assert "pw-never-shown-42" not in store.problem + store.location
    run_id = store.begin(CACHE, {}, label="measured while the server is down")
    store.add(run_id, RoundResult(CACHE, 1, ttft_ms=5.0))
    assert store.runs() == [] and store.get(run_id) is None and store.records(run_id) == []
    assert store.unsaved == 2 and "2 writes of what is being measured are kept in memory" in store.problem


def test_what_waits_in_memory_is_bounded_and_what_is_dropped_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("core.store.db.MAX_WAITING", 3)
    store = open_store(f"postgresql://team@127.0.0.1:{_free_port()}/runs")
    run_id = store.begin(CACHE, {}, label="a long outage")
    for i in range(1, 5):
        store.add(run_id, RoundResult(CACHE, i))
    assert store.unsaved == 5 and store.lost == 2
    assert "3 writes of what is being measured are kept in memory" in store.problem
    assert "2 more could not be kept (memory) and are lost" in store.problem


@pytest.mark.slow
def test_the_cli_says_so_when_the_server_cannot_be_reached() -> None:
    done = subprocess.run([sys.executable, "-m", "core", "runs", "list"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ,
                                           "PREFILL_LAB_DB": f"postgresql://u:pw-x-1234@127.0.0.1:{_free_port()}/d"})
    assert "warning: The run store postgresql://u:***@127.0.0.1" in done.stderr and "cannot connect" in done.stderr
    assert "Traceback" not in done.stderr and "pw-x-1234" not in done.stderr + done.stdout


@pytest.mark.slow
def test_a_database_stopped_mid_run_gets_every_round_when_it_returns(own_cluster: Cluster) -> None:
    url = own_cluster.url(own_cluster.database())
    store = open_store(url)
    run_id = store.begin(CACHE, {}, label="through an outage")
    store.add(run_id, RoundResult(CACHE, 1, ttft_ms=1.0))
    own_cluster.stop()
    for i in range(2, 6):  # measured while the server is down: kept in memory, in order
        store.add(run_id, RoundResult(CACHE, i, ttft_ms=float(i)))
    assert store.unsaved == 4 and "cannot be used now (the connection was lost: terminating connection" in store.problem
    own_cluster.start()
    time.sleep(1.1)  # past the pause between attempts to connect
    store.add(run_id, RoundResult(CACHE, 6, ttft_ms=6.0))
    store.finish(run_id, DONE)
    assert store.unsaved == 0 and store.problem == ""
    saved = open_store(url).get(run_id)
    assert saved is not None and saved.status == DONE and saved.rounds == 6
    assert [r.round for r in open_store(url).records(run_id)] == [1, 2, 3, 4, 5, 6]  # type: ignore[attr-defined]


@pytest.mark.slow
def test_an_import_while_the_server_is_down_waits_and_goes_in_whole_when_it_returns(own_cluster: Cluster) -> None:
    url = own_cluster.url(own_cluster.database())
    store = open_store(url)
    rounds = [RoundResult(CACHE, i, ttft_ms=float(i)) for i in range(1, 51)]
    text = to_json({"backend": "api", "model": "m"}, {"rounds": rounds},
                   run={"format": 1, "experiment": CACHE, "label": "laptop", "status": DONE})
    own_cluster.stop()
    (run_id,) = import_export(store, text, "laptop.json")  # one transaction of 50 rounds (add_all), kept in memory
    assert store.unsaved == 52 and "cannot be used now" in store.problem  # the run, its 50 rounds, its end
    own_cluster.start()
    wait_written(store)
    assert store.unsaved == 0 and store.problem == ""
    assert [r.round for r in open_store(url).records(run_id)] == list(range(1, 51))  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_server_down_at_the_start_gets_the_runs_and_the_reference_when_it_comes_up(own_cluster: Cluster) -> None:
    url = own_cluster.url(own_cluster.database())
    own_cluster.stop()
    store = open_store(url)
    assert "cannot connect" in store.problem
    run_id = store.begin(CACHE, {}, label="before the server was up")
    store.add(run_id, RoundResult(CACHE, 1, ttft_ms=1.0))
    own_cluster.start()
    time.sleep(1.1)  # past the pause between attempts to connect
    store.finish(run_id, DONE)
    assert store.problem == "" and store.unsaved == 0
    fresh = RunStore.open(url)  # RunStore.open seeds nothing: what is there, the first store put there
    assert {r.id for r in fresh.runs()} == {run_id, REFERENCE_ID} and fresh.get(run_id).rounds == 1  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_cli_goes_on_through_an_outage_and_says_so(own_cluster: Cluster) -> None:
    url = own_cluster.url(own_cluster.database())
    with FakeOpenAIServer(token_delay=0.1) as server:
        proc = cli(url, "--backend", "api", "--url", server.base_url, "--model", "ok", "--only", "output",
                   "--lengths", "4,5,6", "--repeats", "4")
        assert proc.stdout is not None
        rows = 0
        for line in proc.stdout:
            rows += line.strip().startswith("output")
            if rows == 2 and own_cluster.running():
                own_cluster.stop()
            if rows == 6 and not own_cluster.running():
                own_cluster.start()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and rows == 12, err
    assert "warning: The run store postgresql://prefill:***@127.0.0.1" in err and "connection was lost" in err
    assert "The run store works again: every round measured so far is written." in err
    assert "Traceback" not in err and own_cluster.password not in err
    (saved,) = [r for r in open_store(url).runs() if r.source == "measured"]
    assert saved.rounds == 12 and saved.status == DONE


@pytest.mark.slow
def test_a_disk_full_mid_run_is_said_when_it_happens_and_the_cli_exits_non_zero(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("mounting a small tmpfs needs root (CI runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        db = disk / "runs.sqlite"
        open_store(str(db)).close()
        free = shutil.disk_usage(disk).free
        (disk / "filler").write_bytes(b"\0" * max(0, free - 64 * 1024))  # the WAL index and a few rounds
        with FakeOpenAIServer() as server:
            proc = cli(str(db), "--backend", "api", "--url", server.base_url, "--model", "ok", "--only", "output",
                       "--lengths", "4,5,6,7,8", "--repeats", "6")
            out, err = proc.communicate(timeout=120)
        assert sum(line.strip().startswith("output") for line in out.splitlines()) == 30  # measuring went on
        assert proc.returncode == 1 and "Traceback" not in err
        assert "warning: The run store" in err and "database or disk is full" in err
        assert "writes of the runs measured here (rounds, their start or end) were not saved" in err
        assert err.index("warning: The run store") < err.index("error: ")  # said when it happened, then at the end
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


@pytest.mark.slow
def test_the_page_says_the_database_stopped_mid_run_and_loses_no_round(own_cluster: Cluster) -> None:
    url = own_cluster.url(own_cluster.database())
    with FakeOpenAIServer(token_delay=0.1) as fake:  # a round takes about 0.6 s
        at = app(**api_state(fake))
        at.secrets["PREFILL_LAB_DB"] = url
        at.switch_page("app_pages/output.py").run()
        at.multiselect(key="output_lengths").set_value([8, 16, 32, 64]).run()
        stopper = threading.Timer(1.0, own_cluster.stop)
        stopper.start()
        at.button(key="run_output").click().run()
        stopper.join()
    assert not at.exception and len(at.dataframe[0].value) == 4  # measured to the end, all on the page
    said = [w.value for w in at.warning if "Runs are not being saved" in w.value]
    assert said and "Start the database server" in said[0] and "kept in memory" in said[0]
    assert own_cluster.password not in str(said)
    own_cluster.start()
    time.sleep(1.1)  # past the pause between attempts to connect
    at.run()  # the next view of the page writes what waited
    assert not [w for w in at.warning if "Runs are not being saved" in w.value]
    (saved,) = open_store(url).runs("output")
    assert saved.rounds == 4 and saved.status == DONE


@pytest.mark.slow
@pytest.mark.parametrize("page", ["app_pages/runs.py", "app_pages/cache.py"])
def test_the_pages_say_so_when_the_server_cannot_be_reached(page: str) -> None:
    at = app()
    at.secrets["PREFILL_LAB_DB"] = f"postgresql://team:pw-page-4321@127.0.0.1:{_free_port()}/runs"
    at.switch_page(page).run()
    said = [w.value for w in at.warning if "Runs are not being saved" in w.value]
    assert not at.exception and said and "cannot connect" in said[0] and "postgresql://team:***@127.0.0.1" in said[0]
    assert "pw-page-4321" not in rendered(at)  # nowhere in what the page sent
