"""Server-sent events, read exactly as the SSE specification splits them: the one SSE splitter, used by
the clients' stream loop and by the capture proxy.

A line ends only at CR, LF or CRLF. `str.splitlines` and httpx's ``iter_lines`` also split at
U+2028, U+0085 and other Unicode line breaks, which JSON allows raw inside strings (llama-server
writes non-ASCII text unescaped): a token containing one would cut a valid chunk in two.

The splitter keeps the pieces of an unfinished line in a list and joins them once, when the line
ends, so its time is linear in the line's length (appending to one string and scanning it again
after every network chunk was quadratic: a 40 MB line took 2.5 s). A line longer than
`MAX_LINE_CHARS` is dropped as it arrives, never held whole in memory.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator

# The longest SSE line kept. The largest real events are whole responses (``response.completed``) and
# streamed images in base64, a few MB; a stream that sends more on one line is broken or hostile.
MAX_LINE_CHARS = 16 * 1024 * 1024


class LineTooLong(ValueError):
    """A stream line was longer than the cap; the message says how long the cap is."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"a line of the stream was longer than {limit / 1e6:g} MB (the most one event may hold)")
        self.limit = limit


class SSELineSplitter:
    """Push bytes in with `feed`, get whole lines out; `finish` at the end of the stream.

    A CRLF split across two network chunks is one line end; a last line without an end is kept.
    Invalid UTF-8 becomes U+FFFD. A line over ``max_line_chars`` comes out as ``None``.
    """

    def __init__(self, max_line_chars: int = MAX_LINE_CHARS) -> None:
        self.max_line_chars = max_line_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []
        self._size = 0
        self._overflow = False
        self._skip_lf = False  # the previous text ended in CR: a LF that follows belongs to it

    def _add(self, piece: str) -> None:
        if self._overflow or not piece:
            return
        self._size += len(piece)
        if self._size > self.max_line_chars:
            self._overflow, self._parts = True, []
        else:
            self._parts.append(piece)

    def _take(self) -> str | None:
        line = None if self._overflow else "".join(self._parts)
        self._parts, self._size, self._overflow = [], 0, False
        return line

    def feed(self, data: bytes) -> list[str | None]:
        """The lines that ``data`` completes (``None`` for one that was too long)."""
        text = self._decoder.decode(data)
        if self._skip_lf and text:
            self._skip_lf = False
            if text.startswith("\n"):
                text = text[1:]
        lines: list[str | None] = []
        start, size = 0, len(text)
        cr, lf = text.find("\r"), text.find("\n")  # each searched again only once passed: linear
        while cr >= 0 or lf >= 0:
            end = lf if cr < 0 else cr if lf < 0 else min(cr, lf)
            self._add(text[start:end])
            lines.append(self._take())
            if text[end] == "\r":
                if end + 1 == size:
                    self._skip_lf = True
                elif text[end + 1] == "\n":
                    end += 1
            start = end + 1
            if 0 <= cr < start:
                cr = text.find("\r", start)
            if 0 <= lf < start:
                lf = text.find("\n", start)
        self._add(text[start:])
        return lines

    def finish(self) -> list[str | None]:
        """The last line, if the stream ended without a line end."""
        self._add(self._decoder.decode(b"", final=True))
        return [self._take()] if self._size or self._overflow else []


def iter_sse_lines(chunks: Iterable[bytes], max_line_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    """The lines of a byte stream, split at CR, LF and CRLF only; raises `LineTooLong` at a line over the cap."""
    splitter = SSELineSplitter(max_line_chars)
    for chunk in chunks:
        for line in splitter.feed(chunk):
            if line is None:
                raise LineTooLong(max_line_chars)
            yield line
    for line in splitter.finish():
        if line is None:
            raise LineTooLong(max_line_chars)
        yield line


def sse_field(line: str) -> tuple[str, str]:
    """``(field, value)`` of one SSE line: ``event: x`` gives ``("event", "x")``; a comment gives ``("", text)``."""
    if line.startswith(":"):
        return "", line[1:]
    name, colon, value = line.partition(":")
    if colon and value.startswith(" "):
        value = value[1:]
    return name, value
