"""SSE line reader: time and memory for one very long line (10, 20, 40 MB) fed in 64 KiB network chunks.

``before`` is the reader of commit 8060254 (one string, appended to and scanned again after every
chunk); ``now`` is `core.backends.sse.iter_sse_lines` with its cap raised above the line, so the whole
line is read; ``capped`` is the default cap, which drops the line as it arrives and says so.
"""

from __future__ import annotations

import codecs
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator

from bench.common import finish, spread, table
from core.backends.sse import MAX_LINE_CHARS, LineTooLong, iter_sse_lines

SIZES_MB = (10, 20, 40)
CHUNK = 64 * 1024
REPEATS = 5


def before(chunks: Iterable[bytes]) -> Iterator[str]:
    """The quadratic reader as it was (kept here only to measure against)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buffer, skip_lf = "", False
    for chunk in chunks:
        text = decoder.decode(chunk)
        if not text:
            continue
        if skip_lf and text.startswith("\n"):
            text = text[1:]
        skip_lf = False
        buffer += text
        start = 0
        while True:
            cr, lf = buffer.find("\r", start), buffer.find("\n", start)
            if cr < 0 and lf < 0:
                break
            end = lf if cr < 0 else cr if lf < 0 else min(cr, lf)
            yield buffer[start:end]
            if buffer[end] == "\r":
                if end + 1 == len(buffer):
                    skip_lf = True
                elif buffer[end + 1] == "\n":
                    end += 1
            start = end + 1
        buffer = buffer[start:]
    buffer += decoder.decode(b"", final=True)
    if buffer:
        yield buffer


def _chunks(size: int) -> list[bytes]:
    data = b"data: " + b"x" * size + b"\n\n"
    return [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]


def _seconds(read: Callable[[list[bytes]], object], chunks: list[bytes]) -> float:
    started = time.perf_counter()
    read(chunks)
    return time.perf_counter() - started


def _peak_mb(read: Callable[[list[bytes]], object], chunks: list[bytes]) -> float:
    """Peak MB allocated while reading (a separate run: tracing slows the reader down)."""
    tracemalloc.start()
    read(chunks)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return round(peak, 1)


def _capped(chunks: list[bytes]) -> str:
    """The default cap: a line under it is read, a longer one refused with `LineTooLong`."""
    try:
        list(iter_sse_lines(chunks))
    except LineTooLong:
        return "refused"
    return "read"


def main() -> None:
    rows, peaks = [], {}
    for mb in SIZES_MB:
        chunks = _chunks(mb * 1_000_000)
        readers: dict[str, Callable[[list[bytes]], object]] = {
            "before": lambda c: list(before(c)),
            "now": lambda c: list(iter_sse_lines(c, max_line_chars=200_000_000)),
            "capped": _capped,
        }
        for name, read in readers.items():
            rows.append((f"{name} {mb} MB", spread([_seconds(read, chunks) for _ in range(REPEATS)])))
            peaks[f"{name} {mb} MB"] = _peak_mb(read, chunks)
    print(table(rows, "s"))
    print("peak MB allocated while reading:", peaks)
    times = dict(rows)
    now, then = times["now 40 MB"]["median"], times["before 40 MB"]["median"]
    key = {"before_40mb_s": then, "now_40mb_s": now, "now_per_mb_ms": round(now / 40 * 1000, 2),
           "cap_chars": MAX_LINE_CHARS, "goal_met": now < 0.5 and peaks["capped 40 MB"] < 40}
    finish("sse_lines", {"chunk_bytes": CHUNK, "repeats": REPEATS, "rows": dict(rows), "peak_mb": peaks}, key,
           f"a 40 MB line: {then} s before, {now} s now; over the cap it is refused holding "
           f"{peaks['capped 40 MB']} MB (goal: under 0.5 s, and under the line's size when refused)")


if __name__ == "__main__":
    main()
