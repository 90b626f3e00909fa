"""Documents, budgets, strategies and statistics: pure functions, no server."""

from __future__ import annotations

import random

import pytest

from core.backends.tokens import EstimatingTokenCounter
from core.documents import DocumentError, default_document, fit_document, read_document
from core.experiments.prompts import STRATEGIES, PromptParts, input_length_messages, round_messages
from core.stats import linear_fit, median


def test_default_document_is_long_varied_prose():
    doc = default_document()
    assert len(doc) > 300_000
    lines = [line for line in doc.splitlines() if line.strip()]
    assert len(set(lines)) > 0.7 * len(lines), "not one sentence repeated"


@pytest.mark.parametrize("data,needle", [
    (b"", "empty"), (b"   \n", "empty"), (b"\x00\x01\x02binary", "binary"),
    ("caf\u00e9".encode("latin-1"), "not valid UTF-8"), (b"x" * 101, "limit"),
])
def test_bad_uploads_are_refused_clearly(data, needle):
    with pytest.raises(DocumentError, match=needle):
        read_document(data, "notes.txt", max_bytes=100)


def test_utf8_upload_with_bom_and_crlf():
    assert read_document("\ufeffline one\r\n第二行".encode("utf-8")) == "line one\n第二行"


def test_fit_document_truncates_with_a_note():
    counter = EstimatingTokenCounter(chars_per_token=4)
    fitted = fit_document("a" * 4000, 100, counter)
    assert fitted.truncated and fitted.tokens == 100 and len(fitted.text) == 400
    assert (fitted.original_tokens, fitted.exact) == (1000, False)
    whole = fit_document("abcd" * 10, 100, counter)
    assert not whole.truncated and whole.tokens == whole.original_tokens == 10


def test_estimator_learns_from_usage():
    counter = EstimatingTokenCounter()
    counter.observe(chars=3000, prompt_tokens=1000)
    assert counter.count("x" * 300) == 100


def _rounds(strategy: str, n: int = 3) -> list[str]:
    parts = PromptParts("The document. " * 50)
    rng = random.Random(1)
    history: list[tuple[str, str]] = []
    prompts = []
    for round_no in range(1, n + 1):
        messages = round_messages(STRATEGIES[strategy](parts, round_no, rng), history, f"Question {round_no}?")
        prompts.append("\n".join(m["content"] for m in messages))
        history.append((f"Question {round_no}?", f"Answer {round_no}."))
    return prompts


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_append_only_rounds_extend_the_previous_prompt():
    prompts = _rounds("append_only")
    for earlier, later in zip(prompts, prompts[1:], strict=False):
        # everything up to the previous question is kept; only the end changes
        assert later.startswith(earlier.rsplit("Question", 1)[0])
        assert _common_prefix(earlier, later) > 0.95 * len(earlier)


@pytest.mark.parametrize(
    "strategy,limit", [("timestamp_first", 40), ("random_request_id", 20), ("reshuffled_tools", 400)]
)
def test_breaking_strategies_differ_near_the_start(strategy, limit):
    prompts = _rounds(strategy)
    for earlier, later in zip(prompts, prompts[1:], strict=False):
        assert _common_prefix(earlier, later) < limit


def test_input_prompt_starts_with_its_nonce():
    assert input_length_messages("doc", "abc123")[0]["content"].startswith("Run abc123.")


def test_linear_fit_and_median():
    fit = linear_fit([1, 2, 3, None], [3, 5, 7, 100])
    assert fit.slope == pytest.approx(2) and fit.intercept == pytest.approx(1) and fit.r2 == pytest.approx(1)
    assert linear_fit([1, 1], [2, 3]) is None
    assert median([None, 3, 1, 2]) == 2 and median([None]) is None
