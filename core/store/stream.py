"""A JSON document read a value at a time from a file, so that importing an export holds one round in
memory, not the file (a 600 MB export read whole took 1.35 GB: BENCHMARKS.md).

`JsonStream` walks the top-level object member by member and a member's array element by element; each
value is parsed whole by the standard library's decoder (`json.JSONDecoder.raw_decode`), so a broken value
gets the same words as ``json.loads`` gives it, and its line is counted from the start of the file.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import Any, BinaryIO

from core.words import Sentence

CHUNK = 1 << 20  # bytes read at a time; a value longer than this is read in doubling steps
WHITESPACE = " \t\r\n"
NEAR_END = 16  # an error this close to the end of what was read may be the end of the read, not of the value


class Broken(ValueError):
    """The file is not JSON, or not UTF-8, at ``line``: ``reason`` says which (``json``'s own words quoted in it)."""

    def __init__(self, reason: Sentence, line: int) -> None:
        super().__init__(reason)
        self.reason, self.line = reason, line


class JsonStream:
    """One pass over a JSON file: `members` of the top-level object, `elements` of an array, `value`."""

    def __init__(self, raw: BinaryIO, decoder: json.JSONDecoder) -> None:
        self._raw, self._decoder = raw, decoder
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.text = ""  # what was read and not yet dropped
        self.pos = 0  # where reading is in `text`
        self.began = 0  # where the last value read starts in `text`
        self._first_line = 1  # the line of text[0]
        self._ended = False

    def line(self, offset: int | None = None) -> int:
        """The line of ``offset`` in `text` (default: where reading is)."""
        return self._first_line + self.text.count("\n", 0, self.pos if offset is None else offset)

    def _more(self, size: int = 0) -> bool:
        """Drop what was read, add the next ``size`` bytes of the file (at least `CHUNK`); False at its end."""
        if self._ended:
            return False
        self._first_line += self.text.count("\n", 0, self.pos)
        self.text, self.pos, self.began = self.text[self.pos:], 0, 0
        chunk = self._raw.read(max(size, CHUNK))
        try:
            self.text += self._utf8.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            lines = exc.object[:exc.start].count(b"\n")
            raise Broken(Sentence("import_refused.not_utf8", byte=f"0x{exc.object[exc.start]:02x}"),
                         self.line(len(self.text)) + lines) from None
        self._ended = not chunk
        return True

    def peek(self) -> str:
        """The next character that is not whitespace ("" at the end of the file)."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in WHITESPACE:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self._more():
                return ""

    def _expect(self, wanted: str, reason: str) -> None:
        if self.peek() != wanted:
            raise Broken(Sentence("import_refused.not_json", reason=reason), self.line())
        self.pos += 1

    def value(self) -> Any:
        """The next value, whole; `began` is where it starts. A value reaching the end of what was read may go
        on (a number), and an error there may be the read's end: both are read again with more of the file."""
        self.peek()
        while True:
            start = self.pos
            try:
                found, end = self._decoder.raw_decode(self.text, start)
            except json.JSONDecodeError as exc:
                cut = exc.msg.startswith("Unterminated string") or exc.pos >= len(self.text) - NEAR_END
                if self._ended or not cut:
                    raise Broken(Sentence("import_refused.not_json", reason=exc.msg), self.line(exc.pos)) from None
            else:
                if end < len(self.text) or self._ended:
                    self.pos, self.began = end, start
                    return found
            self._more(2 * (len(self.text) - start))  # a long value: doubling steps, linear

    def _items(self, close: str) -> Iterator[None]:
        """Stop at each item of the array or object just opened, until ``close``."""
        if self.peek() == close:
            self.pos += 1
            return
        while True:
            yield
            after = self.peek()
            if after == close:
                self.pos += 1
                return
            self._expect(",", "Expecting ',' delimiter")

    def members(self) -> Iterator[tuple[str, int]]:
        """The top-level object's keys, each with the line of its value, which the caller reads next."""
        self._expect("{", "Expecting value")
        for _ in self._items("}"):
            if self.peek() != '"':
                reason = "Expecting property name enclosed in double quotes"
                raise Broken(Sentence("import_refused.not_json", reason=reason), self.line())
            key = self.value()
            self._expect(":", "Expecting ':' delimiter")
            self.peek()
            yield key, self.line()

    def elements(self) -> Iterator[int]:
        """The number of each element of the array that starts here, which the caller reads next."""
        self._expect("[", "Expecting value")
        for index, _ in enumerate(self._items("]")):
            yield index

    def end(self) -> None:
        """Nothing but whitespace may follow the document."""
        if self.peek():
            raise Broken(Sentence("import_refused.not_json", reason="Extra data"), self.line())
