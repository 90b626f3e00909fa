"""Live replay: send the logged rounds to a backend and measure what it really recomputed; and the rounds
experiment 3 would send around a single system prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from core.backends import ChatRequest, LlamaServerBackend
from core.doctor.formats import chat_round
from core.doctor.model import CHAT, Round, Transcript
from core.experiments.prompts import Conversation
from core.records import RoundResult

REPLAY_ANSWER_TOKENS = 8  # a replayed round only needs its prefill measured


def simulate(system_prompt: str, strategy: str, rounds: int = 6) -> Transcript:
    """The rounds experiment 3 would send with ``system_prompt`` as its document, with stand-in answers."""
    conversation, out = Conversation(system_prompt, strategy), []
    for round_no in range(1, rounds + 1):
        out.append(chat_round({"messages": conversation.next_messages()}, strategy))
        conversation.answered(f"(answer {round_no})")
    return Transcript(out, [], "simulated")


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def replay_request(round_: Round, backend: Any, tag: str | None = None) -> ChatRequest:
    """The chat request that replays one logged round: chat-completions rounds as sent (tools as a system
    preamble for llama-server, whose small default model has no tool template), other formats as the same
    text in chat messages; a ``tag`` goes first, so nothing an earlier run left in the cache is reused."""
    messages = [dict(m) for m in round_.chat]
    extra: dict[str, Any] = {}
    if round_.raw_tools:
        if isinstance(backend, LlamaServerBackend) or round_.format != CHAT:
            preamble = "[tools]\n" + json.dumps(round_.raw_tools, ensure_ascii=False) + "\n"
            if messages and messages[0].get("role") == "system":
                messages[0]["content"] = preamble + _text(messages[0].get("content") or "")
            else:
                messages.insert(0, {"role": "system", "content": preamble})
        else:
            extra["tools"] = round_.raw_tools
    for message in messages:
        if not isinstance(message.get("content"), str):
            message["content"] = _text(message.get("content") or "")
    if tag and messages:
        messages[0]["content"] = f"[{tag}]\n{messages[0]['content']}"
    return ChatRequest(messages, max_tokens=REPLAY_ANSWER_TOKENS, extra=extra)


def replay(transcript: Transcript, backend: Any, cancel: Any = None, on_progress: Any = None,
           label: str | None = None, tag: str | None = None) -> Iterator[RoundResult]:
    """Send the rounds in order (each starting with ``tag``, if given); yield one `RoundResult` per round
    (experiment ``doctor``)."""
    for index, round_ in enumerate(transcript.rounds, start=1):
        if cancel is not None and cancel.is_set():
            return
        result = backend.stream_chat(replay_request(round_, backend, tag), on_progress=on_progress, cancel=cancel)
        if cancel is not None and cancel.is_set():
            return
        yield RoundResult.from_request("doctor", index, result, strategy=label or transcript.kind)
        if result.error:
            return
