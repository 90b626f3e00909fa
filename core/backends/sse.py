"""Server-sent events, read exactly as the SSE specification splits them.

A line ends only at CR, LF or CRLF. `str.splitlines` and httpx's ``iter_lines`` also split at
U+2028, U+0085 and other Unicode line breaks, which JSON allows raw inside strings (llama-server
writes non-ASCII text unescaped): a token containing one would cut a valid chunk in two.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator


def iter_sse_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a byte stream, split at CR, LF and CRLF only, decoding UTF-8 incrementally.

    A CRLF split across two network chunks is one line end; a last line without an end is kept.
    Invalid UTF-8 becomes U+FFFD rather than ending the round.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buffer = ""
    skip_lf = False  # the previous text ended in CR: a LF that follows belongs to it
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


def sse_field(line: str) -> tuple[str, str]:
    """``(field, value)`` of one SSE line: ``event: x`` gives ``("event", "x")``; a comment gives ``("", text)``."""
    if line.startswith(":"):
        return "", line[1:]
    name, colon, value = line.partition(":")
    if colon and value.startswith(" "):
        value = value[1:]
    return name, value
