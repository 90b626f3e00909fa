"""The prompts each experiment sends.

Prefix-cache strategies (experiment 3) are small functions that turn the fixed parts of a system
prompt into the text sent in one round. Only what they put at the *start* matters to the cache.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from core.backends.tokens import TokenCounter
from core.documents import default_document

TEMPLATE_TOKENS = 24  # the chat template's framing of an `input_length_messages` prompt, rounded up


def nonce() -> str:
    """A short random tag; put at the start of a prompt, it makes the whole prompt new to any cache."""
    return uuid.uuid4().hex[:12]


def input_length_messages(document: str, run_nonce: str) -> list[dict[str, str]]:
    """A unique nonce first (so nothing is reused), then the document, then a one-word question."""
    return [
        {"role": "system", "content": f"Run {run_nonce}. Read the document and answer in one word."},
        {"role": "user", "content": f"{document}\n\nIn one word: what is this text about?"},
    ]


def prompt_overhead(counter: TokenCounter) -> int:
    """Tokens an `input_length_messages` prompt spends besides its document: instructions, question, template."""
    return counter.count(input_length_messages("", nonce())[0]["content"]) + TEMPLATE_TOKENS


def document_body(counter: TokenCounter, prompt_tokens: int) -> str:
    """The default document cut so that an `input_length_messages` prompt is about ``prompt_tokens`` tokens."""
    return counter.truncate(default_document()[: prompt_tokens * 8], max(prompt_tokens - prompt_overhead(counter), 1))


def output_length_messages(run_nonce: str) -> list[dict[str, str]]:
    """A unique nonce first, then a request for a long list that keeps the model talking."""
    return [
        {"role": "system", "content": f"Run {run_nonce}. You write long lists."},
        {"role": "user", "content": "Write a numbered list of everyday objects, one per line, and keep going."},
    ]


# -- experiment 3: a long context sent for several rounds -----------------------------------------
INSTRUCTIONS = (
    "You are a careful assistant for engineers. Answer questions about the reference "
    "document below in one short sentence."
)

TOOLS = [
    {"name": "search_docs", "description": "Full-text search over the reference document."},
    {"name": "open_section", "description": "Return one section of the document by its title."},
    {"name": "run_python", "description": "Run a short Python snippet and return its output."},
    {"name": "list_keywords", "description": "List the reserved keywords of the language."},
    {"name": "explain_error", "description": "Explain an exception message in plain words."},
    {"name": "compare_versions", "description": "Say how a feature changed between two versions."},
]

QUESTIONS = [
    "What does the assert statement do?",
    "How is a for loop with an else clause executed?",
    "What happens when a name is assigned inside a function?",
    "How are keyword arguments matched to parameters?",
    "What does the with statement guarantee?",
    "How are exceptions chained?",
    "What is the difference between is and ==?",
    "When is a class body executed?",
    "What does yield do inside a function?",
    "How does augmented assignment work?",
    "What is a slice?",
    "How are f-strings evaluated?",
]


@dataclass
class PromptParts:
    """The fixed parts of experiment 3's system prompt.

    ``conversation`` is a tag fixed for all rounds of one strategy in one run. It keeps each run's
    round 1 cold: a server that still holds an earlier run's prompt (llama-server also keeps
    recent prompts in host memory) cannot serve it from the cache.
    """

    document: str
    instructions: str = INSTRUCTIONS
    tools: list[dict[str, str]] = field(default_factory=lambda: list(TOOLS))
    conversation: str = field(default_factory=nonce)


def render_system(parts: PromptParts, tools: list[dict[str, str]] | None = None, header: str = "") -> str:
    tool_lines = "\n".join(f"- {t['name']}: {t['description']}" for t in (tools if tools is not None else parts.tools))
    return (
        f"{header}Conversation {parts.conversation}.\n{parts.instructions}\n\n# Tools\n{tool_lines}\n\n"
        f"# Reference document\n{parts.document}"
    )


def append_only(parts: PromptParts, round_no: int, rng: random.Random) -> str:
    """The same system prompt every round; each round only appends to the conversation."""
    return render_system(parts)


def timestamp_first(parts: PromptParts, round_no: int, rng: random.Random) -> str:
    """A fresh current time at the very start: everything after it must be recomputed."""
    now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    return render_system(parts, header=f"Current time: {now}\n")


def random_request_id(parts: PromptParts, round_no: int, rng: random.Random) -> str:
    """A new random request id at the very start, as some agent frameworks add."""
    return render_system(parts, header=f"Request id: {uuid.UUID(int=rng.getrandbits(128))}\n")


def reshuffled_tools(parts: PromptParts, round_no: int, rng: random.Random) -> str:
    """The tool list in a new order every round (e.g. tools kept in a set or dict of plugins)."""
    tools = list(parts.tools)
    original = list(tools)
    while tools == original:
        rng.shuffle(tools)
    return render_system(parts, tools=tools)


Strategy = Callable[[PromptParts, int, random.Random], str]

STRATEGIES: dict[str, Strategy] = {
    "append_only": append_only,
    "timestamp_first": timestamp_first,
    "random_request_id": random_request_id,
    "reshuffled_tools": reshuffled_tools,
}


class Conversation:
    """Experiment 3's conversation under one strategy: `next_messages()`, then `answered()`."""

    def __init__(self, document: str, strategy: str, seed: int = 0) -> None:
        self.parts = PromptParts(document)
        self.build_system = STRATEGIES[strategy]
        self.rng = random.Random(seed)
        self.history: list[tuple[str, str]] = []

    @property
    def question(self) -> str:
        return QUESTIONS[len(self.history) % len(QUESTIONS)]

    def next_messages(self) -> list[dict[str, str]]:
        """The request for the next round: the strategy's system prompt, the history, a new question."""
        return round_messages(
            self.build_system(self.parts, len(self.history) + 1, self.rng), self.history, self.question
        )

    def answered(self, answer: str) -> None:
        self.history.append((self.question, answer))


def round_messages(system: str, history: list[tuple[str, str]], question: str) -> list[dict[str, str]]:
    """System prompt, then every earlier question and answer, then this round's question."""
    messages = [{"role": "system", "content": system}]
    for asked, answered in history:
        messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
    messages.append({"role": "user", "content": question})
    return messages
