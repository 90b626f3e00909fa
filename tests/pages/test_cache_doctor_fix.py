"""The cache doctor page's "Prove the fix" section through AppTest: the fix described and offered for
download without a server, and proven on the real llama-server, drawn before and after per round."""

from __future__ import annotations

from tests.support.apptest import ROOT, api_state, app, chart_values
from tests.unit.doctor.test_fix import _timestamp_first_log

FIXTURES = ROOT / "tests" / "data" / "doctor"


def _upload(at, name: str, data: bytes):
    at.switch_page("app_pages/cache_doctor.py").run()
    at.file_uploader(key="doctor_files").upload(name, data, "application/json").run()
    assert not at.exception
    return at


def test_the_fix_is_described_and_offered_without_a_server(fake_api):
    at = _upload(app(**api_state(fake_api)), "agent.jsonl", (FIXTURES / "tool_order.jsonl").read_bytes())
    assert "Prove the fix" in [h.value for h in at.subheader]
    assert "- Sorted every round's tools by name." in [m.value for m in at.markdown]
    assert "The fixed log has no cache break." in [s.value for s in at.success]
    assert [d.proto.label for d in at.get("download_button")] == ["Download the fixed log"]
    assert any("choose the embedded server or a llama-server URL" in i.value for i in at.info)


def test_nothing_fixable_says_so(fake_api):
    at = _upload(app(**api_state(fake_api)), "agent.jsonl", (FIXTURES / "history_edited.jsonl").read_bytes())
    assert any(i.value.startswith("Nothing here can be fixed mechanically") for i in at.info)


def test_the_fix_is_proven_on_the_llama_server(local_server):
    log = _timestamp_first_log(3, 800).encode()
    at = _upload(app(backend="llama", llama_url=local_server.url), "agent.jsonl", log)
    run = next(b.key for b in at.button if b.key and b.key.startswith("doctor_fix_run_"))
    at.button(key=run).click().run(timeout=600)  # two replays of three rounds, on 2 busy cores
    assert not at.exception and not at.error[1:], [e.value for e in at.error]
    metrics = {m.label: int(m.value.replace(",", "")) for m in at.metric if "ecomputed from round 2" in m.label
               or m.label == "Tokens saved"}
    before, after = metrics["Recomputed from round 2, as logged"], metrics["Recomputed from round 2, fixed"]
    assert before > 4 * after and metrics["Tokens saved"] == before - after
    bars = [v for v in chart_values(at) if v.get("series") in ("as logged", "fixed")]
    expected = [(r, s) for r in (1, 2, 3) for s in ("as logged", "fixed")]
    assert sorted((v["round"], v["series"]) for v in bars) == expected
