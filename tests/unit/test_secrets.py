"""Keys where no field name says so (core/secrets.py): inside a URL's user information, or echoed in a provider's
error. Neither may reach the store, an export or a report."""

from __future__ import annotations

import json

from core.backends.base import ChatRequest
from core.backends.openai_compat import OpenAICompatBackend
from core.engine.server import free_port
from core.export import to_csv, to_json
from core.records import RoundResult
from core.report import ContentWords, build_report
from core.secrets import redact, scrubbed, without_keys
from core.store import open_store
from core.store.transfer import read_export
from core.words import Sentence, in_words
from tests.support.stores import contents

KEY = "sk-in-a-url-0123456789abcdef"
URL = f"https://user:{KEY}@api.example.test/v1"
ECHO = f"Incorrect API key provided: {KEY}. You can find your API key at https://platform.example.test."


def test_a_key_in_a_urls_user_information_or_in_an_error_is_masked() -> None:
    assert scrubbed(URL) == "https://user:***@api.example.test/v1"
    assert scrubbed(f"https://user:Pa@ss-{KEY}@host/v1") == "https://user:***@host/v1"  # an unencoded @ too
    assert KEY not in scrubbed(ECHO) and "Incorrect API key provided: ***" in scrubbed(ECHO)
    assert KEY not in scrubbed(f"Authorization: Bearer {KEY[3:]}")  # a bearer token of any shape
    assert scrubbed("https://api.example.test/v1 task-scheduler 1,024 tokens") == \
        "https://api.example.test/v1 task-scheduler 1,024 tokens"  # nothing else changes
    assert KEY not in redact(ECHO) and KEY not in json.dumps(without_keys({"settings": {"base_url": URL}}))


def records_with_the_echo() -> list[RoundResult]:
    return [RoundResult("output", 2, error=ECHO)]  # a record from the page, never through the store


def test_no_key_in_a_url_or_an_error_reaches_the_store_or_an_export(tmp_path) -> None:
    location = str(tmp_path / "runs.sqlite")
    store = open_store(location)
    settings = {"backend": "api", "model": "m", "base_url": URL}
    run_id = store.begin("output", settings, label=f"api · m · {URL}")  # no key given: it is not known as one
    store.add(run_id, RoundResult("output", 1, error=ECHO))
    store.finish(run_id, "done")
    saved = store.get(run_id)
    assert saved is not None
    report = build_report([(saved, [*store.records(run_id), *records_with_the_echo()])], ContentWords("en"), "en")
    assert KEY not in report
    store.close()
    assert KEY.encode() not in contents(location)
    records = [RoundResult("output", 1, error=ECHO)]
    for text in (to_json(settings, {"rounds": records}), to_csv(settings, records)):
        assert KEY not in text and "***" in text
    assert read_export(to_json(settings, {"rounds": records}), "x.json")  # still an export that reads back


def test_a_backend_with_a_key_in_its_url_neither_describes_nor_reports_it() -> None:
    with OpenAICompatBackend(f"http://user:{KEY}@127.0.0.1:{free_port()}/v1", "m") as backend:  # nothing listens
        result = backend.stream_chat(ChatRequest([{"role": "user", "content": "hi"}]))
        assert result.error and KEY not in result.error and KEY not in json.dumps(backend.describe())


def test_a_sentence_redacted_stays_a_sentence_in_every_language() -> None:
    """A server's body that echoes the key is masked in the sentence's value, and the page still says it in its
    language; a secret across a value's edge leaves the masked English text."""
    key = "sk-" + "a1b2c3d4" * 3
    said = Sentence("backend_error.server_said", message=Sentence("backend_error.http_5xx"), body=f"bad key {key}")
    masked = redact(said, key)
    assert isinstance(masked, Sentence) and masked == str(said).replace(key, "***")
    assert key not in in_words(masked, ContentWords("zh")) and "服务器" in in_words(masked, ContentWords("zh"))
    across = redact(Sentence("backend_error.cannot_connect", url="http://h", error="x"), "http://h: is")
    assert not isinstance(across, Sentence) and "***" in across
