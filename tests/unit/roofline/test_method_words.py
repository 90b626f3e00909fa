"""A ceiling's method in the reader's language: the probes' own text (kept in English by the cache and the runs)
said in Chinese phrase by phrase, numbers kept, and the same text in English."""

from __future__ import annotations

from core.roofline import peaks
from core.roofline.hardware import ACCELERATORS
from core.words import ContentWords
from tests.support.english import english

ZH, EN = ContentWords("zh"), ContentWords("en")


def test_every_method_the_probes_and_datasheets_write_is_said_in_chinese() -> None:
    measured = [peaks.measure_compute(n=64, budget_s=0.01), peaks.measure_bandwidth(16 << 20, 2, budget_s=0.01)]
    sized = [peaks.Ceiling(1.0, "numpy float64 sum, one slice per thread", f"{size >> 20} MiB ({why}), best of 3", 2)
             for size, why in (peaks.working_set_size(llc, available)
                               for llc, available in ((64 << 20, None), (8 << 20, None), (None, None),
                                                      (256 << 20, None), (32 << 20, 512 << 20)))]
    datasheets = [c for roof in ACCELERATORS.values() for c in (roof.memory, roof.compute) if c is not None]
    for ceiling in measured + sized + datasheets:
        said = ceiling.describe(ZH)
        assert english(said) == [], said
        assert ceiling.describe(EN) == ceiling.describe(), "English stays as the probe wrote it"
    assert "2 个线程" in measured[1].describe(ZH) and "次中最好的一次" in measured[0].describe(ZH)
