"""English sentences where a Chinese page should have none, for the page tests.

How a sentence is read (`english`): the text of every element the page sends (markdown, captions, alerts, metric
labels and values, button and widget labels, help and options, tab and expander labels, table headers and
cells) is cut into words at whitespace and at every non-ASCII character (a Chinese character ends a run), each
word's surrounding punctuation dropped; a run of three or more consecutive plain ASCII words (letters, an
apostrophe inside) is English. Not read as words: code spans in backticks, text quoted in “…” or '…' (the
visitor's own data, a parser's own message), the doctor's quoted prompt excerpts (``<pre>``), and names from
`NAMES` (formats, providers, presets, accelerators). A file name, a field name (``gen_ai.input.messages``), a
number with its unit or a model name holds a digit, a dot, a slash, a hyphen or an underscore, so it is no word.
"""

from __future__ import annotations

import re

from core.backends.presets import PRESETS
from core.roofline.hardware import ACCELERATORS

NAMES = ["Anthropic Messages API", "Anthropic Messages", "Chat Completions", "OpenAI Responses", "Vercel AI SDK",
         "OpenTelemetry SDK", "OpenTelemetry GenAI", "chat completions", "anthropic messages",
         "gemini generateContent", "Mac Studio", *PRESETS, *ACCELERATORS]
QUOTED = re.compile(r"`[^`]*`|“[^”]*”|'[^'\n]*'")
WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


def english(text: str) -> list[str]:
    """The runs of three or more English words in ``text`` (see the module's docstring)."""
    if text.lstrip().startswith("<pre"):
        return []
    text = QUOTED.sub(" · ", text)
    for name in sorted(NAMES, key=len, reverse=True):
        text = text.replace(name, " · ")
    text = re.sub(r"[^\x00-\x7f]", " · ", text.replace("’", "'"))  # a Chinese character ends a run
    runs, run = [], []
    for token in text.split():
        word = token.strip(".,;:!?()[]{}\"*")
        if WORD.fullmatch(word):
            run.append(word)
            continue
        if len(run) >= 3:
            runs.append(" ".join(run))
        run = []
    return runs + ([" ".join(run)] if len(run) >= 3 else [])
