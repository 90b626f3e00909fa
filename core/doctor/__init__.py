"""Cache doctor: find what breaks the prefix cache in the prompts an agent really sent.

Organised by stage: `inputs` and `formats` read logs in every format agents write (Chat Completions,
OpenAI Responses, Anthropic Messages, Gemini, request/response wrappers) into `model.Round`s;
`render` turns each round into the text its provider caches, in the provider's order; `analysis`
compares consecutive rounds and `causes` says why they differ; `rules` (data in ``rules.toml``)
bills what each provider would cache; `audit` checks Anthropic breakpoints; `replay` sends the
rounds to a real server. With a llama-server, `template` renders every round with the server's chat
template and names the turn a template rewrote although the body kept its prefix; `fix` rewrites the
rounds for the causes that can be fixed mechanically and replays before and after (the proof).
"""

from core.doctor.analysis import (
    AGREE,
    END_TOLERANCE_TOKENS,
    PROVIDER_HIT_MORE,
    PROVIDER_MISSED,
    Analysis,
    RoundFinding,
    analyse,
    snippet,
)
from core.doctor.audit import AuditItem, audit
from core.doctor.causes import (
    CAUSES,
    END_OF_PROMPT,
    HISTORY_EDITED,
    HISTORY_TRUNCATED,
    IMAGE_REENCODED,
    JSON_KEY_ORDER,
    MODEL_CHANGED,
    NONE,
    OTHER,
    PARAMS_CHANGED,
    RANDOM_ID,
    SERVER_HISTORY,
    SYSTEM_PROMPT_CHANGED,
    TEMPLATE_REWROTE,
    THINKING_STRIPPED,
    TIMESTAMP,
    TOOL_ORDER,
    TOOLS_CHANGED,
    WHITESPACE,
    common_prefix_length,
)
from core.doctor.inputs import MAX_DOCTOR_BYTES, load_inputs, load_paths, parse_json_array, parse_jsonl
from core.doctor.model import ANTHROPIC, CHAT, GEMINI, RESPONSES, TEXT, Round, Transcript, TranscriptError
from core.doctor.replay import REPLAY_ANSWER_TOKENS, replay, replay_request, simulate
from core.doctor.rules import BILLING_RULES, BillingRule, billing, rule_for

__all__ = [
    "AGREE", "ANTHROPIC", "BILLING_RULES", "CAUSES", "CHAT", "END_OF_PROMPT", "END_TOLERANCE_TOKENS", "GEMINI",
    "HISTORY_EDITED", "HISTORY_TRUNCATED", "IMAGE_REENCODED", "JSON_KEY_ORDER", "MAX_DOCTOR_BYTES", "MODEL_CHANGED",
    "NONE", "OTHER", "PARAMS_CHANGED", "PROVIDER_HIT_MORE", "PROVIDER_MISSED", "RANDOM_ID", "REPLAY_ANSWER_TOKENS",
    "RESPONSES", "SERVER_HISTORY", "SYSTEM_PROMPT_CHANGED", "TEMPLATE_REWROTE",
    "TEXT", "THINKING_STRIPPED", "TIMESTAMP", "TOOLS_CHANGED",
    "TOOL_ORDER", "WHITESPACE", "Analysis", "AuditItem", "BillingRule", "Round", "RoundFinding", "Transcript",
    "TranscriptError", "analyse", "audit", "billing", "common_prefix_length", "load_inputs", "load_paths",
    "parse_json_array", "parse_jsonl", "replay", "replay_request", "rule_for", "simulate", "snippet",
]
