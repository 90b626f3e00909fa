"""The largest CPU cache, which sizes the bandwidth probe's working set: sysfs on Linux, ``sysctl`` on macOS, and
without either (Windows, a Linux without /sys) no size at all, so the probe uses its floor, never a guess."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from core.engine import cpu
from core.roofline import peaks


def test_without_sys_and_sysctl_no_size_is_made_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peaks, "CACHE_SYSFS", tmp_path / "no-sys")
    monkeypatch.setattr(platform, "system", lambda: "Windows")
    assert cpu.sysctl("hw.l2cachesize") == "" and peaks.last_level_cache() is None


def test_linux_sysfs_sizes_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for index, size in enumerate(("32K", "1024K", "32M")):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(f"{size}\n")
    monkeypatch.setattr(peaks, "CACHE_SYSFS", tmp_path)
    assert peaks.last_level_cache() == 32 << 20


def test_macos_sizes_come_from_sysctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An Apple Silicon Mac answers no L3, and its performance cores' L2 (16 MiB on an M3 Ultra)."""
    answers = {"hw.perflevel0.l2cachesize": "16777216", "hw.l2cachesize": "4194304"}
    monkeypatch.setattr(peaks, "CACHE_SYSFS", tmp_path / "no-sys")
    monkeypatch.setattr(peaks, "sysctl", lambda name: answers.get(name, ""))
    assert peaks.last_level_cache() == 16 << 20
