"""The roofline page on a probe cache that holds ``[]`` or ``null``: it says why the kept figures are not used
and offers the probe (AppTest, the real app)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.roofline import peaks
from tests.support.apptest import app


@pytest.fixture()
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "prefill-lab" / peaks.CACHE_FILE


@pytest.mark.slow
@pytest.mark.parametrize("text", ["[]", "null"])
def test_the_roofline_page_says_why_the_kept_figures_are_not_used(cache: Path, text: str) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_text(text)
    at = app()
    at.run()
    at.switch_page("app_pages/roofline.py").run()
    assert not at.exception, at.exception
    assert any("cannot be used" in w.value and str(cache) in w.value for w in at.warning)
    assert any("Not measured yet" in i.value for i in at.info)
