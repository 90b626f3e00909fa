"""What a closed session leaves behind: its uploads are freed once it can no longer reconnect."""

from __future__ import annotations

import time

import pytest

from ui.runs import visitor


class FakeFiles:
    def __init__(self) -> None:
        self.removed: list[str] = []

    def remove_session_files(self, session_id: str) -> None:
        self.removed.append(session_id)


class FakeRuntime:
    def __init__(self) -> None:
        self.active = {"open-tab", "closed-tab"}
        self.uploaded_file_mgr = FakeFiles()

    @staticmethod
    def exists() -> bool:
        return True

    def instance(self) -> FakeRuntime:
        return self

    def is_active_session(self, session_id: str) -> bool:
        return session_id in self.active


@pytest.mark.slow
def test_a_closed_sessions_uploads_are_freed_after_the_reconnect_window(monkeypatch: pytest.MonkeyPatch):
    runtime = FakeRuntime()
    monkeypatch.setattr(visitor, "Runtime", runtime)
    monkeypatch.setattr(visitor, "SWEEP_S", 0.05)
    monkeypatch.setattr(visitor, "RECONNECT_S", 0.5)
    janitor = visitor.UploadJanitor()
    janitor.watch("open-tab")
    janitor.watch("closed-tab")
    runtime.active.discard("closed-tab")
    time.sleep(0.3)
    assert runtime.uploaded_file_mgr.removed == [], "within the reconnect window the files stay"
    deadline = time.monotonic() + 60
    while not runtime.uploaded_file_mgr.removed and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert runtime.uploaded_file_mgr.removed == ["closed-tab"], "freed once, and only the closed session's"
