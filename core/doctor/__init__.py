"""Cache doctor: find what breaks the prefix cache in the prompts an agent really sent.

Organised by stage: `inputs` and `formats` read logs in every format agents write (Chat Completions,
OpenAI Responses, Anthropic Messages, Gemini, request/response wrappers) into `model.Round`s, and traces
as the tools export them (`spans` for the layouts, `traces` and `exports` for the conventions, `jsontext` for
JSON held in strings, `calls` for one round per call);
`render` turns each round into the text its provider caches, in the provider's order; `analysis`
compares consecutive rounds and `causes` says why they differ; `rules` (data in ``rules.toml``)
bills what each provider would cache; `diagnostics` reads the provider's own verdict off a response;
`audit` checks Anthropic breakpoints; `replay` sends the rounds to a real server; `decision` says what
is compared for one input, for the page and the CLI alike. With a llama-server, `template` renders
every round with the server's chat template and names the turn a template rewrote although the body
kept its prefix; `fix` rewrites the rounds for the causes that can be fixed mechanically and replays
before and after (the proof). `samples` holds the real recordings the page offers with one click.
"""

from core.doctor.analysis import (
    AGREE,
    BEFORE_LOG,
    BELOW_MINIMUM,
    EARLIER,
    END_TOLERANCE_TOKENS,
    EXTENDS,
    GAP_OVER_LIFETIME,
    NOT_COMPARED,
    NOT_PROMISED,
    PROVIDER_HIT_MORE,
    PROVIDER_MISSED,
    ROUTING_CHANGED,
    UNSEEN_TOKENS,
    Analysis,
    RoundFinding,
    analyse,
    snippet,
    where,
)
from core.doctor.audit import AuditItem, audit
from core.doctor.causes import (
    CAUSES,
    END_OF_PROMPT,
    FORMAT_CHANGED,
    HISTORY_COMPACTED,
    HISTORY_EDITED,
    HISTORY_TRUNCATED,
    IMAGE_REENCODED,
    JSON_KEY_ORDER,
    LAST_MESSAGE_REPLACED,
    MODEL_CHANGED,
    NEW_CONVERSATION,
    NONE,
    OTHER,
    PARAMS_CHANGED,
    RANDOM_ID,
    SERVER_HISTORY,
    SYSTEM_PROMPT_CHANGED,
    TEMPLATE_REWROTE,
    THINKING_DROPPED_BY_PROVIDER,
    THINKING_STRIPPED,
    TIMESTAMP,
    TOOL_ORDER,
    TOOLS_CHANGED,
    VARYING_PREFIX,
    WHITESPACE,
    common_prefix_length,
)
from core.doctor.decision import (
    COMPARE,
    OWN,
    SIMULATE,
    SIMULATED_STRATEGIES,
    SINGLE_ROUND,
    UNREAD,
    Comparison,
    comparison,
)
from core.doctor.formats import FORMATS
from core.doctor.inputs import (
    MAX_DOCTOR_BYTES,
    load_inputs,
    load_paths,
    looks_like_log,
    parse_json_array,
    parse_jsonl,
    read_path,
)
from core.doctor.model import ANTHROPIC, CHAT, GEMINI, RESPONSES, TEXT, Round, Transcript, TranscriptError
from core.doctor.replay import REPLAY_ANSWER_TOKENS, replay, replay_request, simulate
from core.doctor.rules import BILLING_RULES, BillingRule, billing, rule_for
from core.doctor.samples import READ_FORMATS, SAMPLES, Sample

__all__ = [
    "EARLIER", "EXTENDS", "HISTORY_COMPACTED", "NOT_COMPARED", "VARYING_PREFIX", "where",
    "BEFORE_LOG", "BELOW_MINIMUM", "FORMATS", "FORMAT_CHANGED", "GAP_OVER_LIFETIME", "NEW_CONVERSATION",
    "LAST_MESSAGE_REPLACED",
    "NOT_PROMISED", "ROUTING_CHANGED", "THINKING_DROPPED_BY_PROVIDER", "UNSEEN_TOKENS",
    "COMPARE", "OWN", "SIMULATE", "SIMULATED_STRATEGIES", "SINGLE_ROUND", "UNREAD", "Comparison", "comparison",
    "looks_like_log", "read_path", "READ_FORMATS", "SAMPLES", "Sample",
    "AGREE", "ANTHROPIC", "BILLING_RULES", "CAUSES", "CHAT", "END_OF_PROMPT", "END_TOLERANCE_TOKENS", "GEMINI",
    "HISTORY_EDITED", "HISTORY_TRUNCATED", "IMAGE_REENCODED", "JSON_KEY_ORDER", "MAX_DOCTOR_BYTES", "MODEL_CHANGED",
    "NONE", "OTHER", "PARAMS_CHANGED", "PROVIDER_HIT_MORE", "PROVIDER_MISSED", "RANDOM_ID", "REPLAY_ANSWER_TOKENS",
    "RESPONSES", "SERVER_HISTORY", "SYSTEM_PROMPT_CHANGED", "TEMPLATE_REWROTE",
    "TEXT", "THINKING_STRIPPED", "TIMESTAMP", "TOOLS_CHANGED",
    "TOOL_ORDER", "WHITESPACE", "Analysis", "AuditItem", "BillingRule", "Round", "RoundFinding", "Transcript",
    "TranscriptError", "analyse", "audit", "billing", "common_prefix_length", "load_inputs", "load_paths",
    "parse_json_array", "parse_jsonl", "replay", "replay_request", "rule_for", "simulate", "snippet",
]
