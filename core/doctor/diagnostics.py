"""The provider's own cache verdict, where a logged response carries one, in the doctor's terms.

Anthropic (``diagnostics.cache_miss_reason`` on a Messages response, asked for with
``diagnostics.previous_message_id``) names the first part of the request that differs from the
previous one; OpenAI's Responses API (``prompt_cache_diagnostics``, asked for with
``prompt_cache_options.comparison_response_id``) says whether the prefix could be reused and why not.
The fields and their sources are documented in ``rules.toml`` under ``[diagnostics]``. Each reason is
mapped to the part of the request it names (model, system, tools, messages, params), so the doctor's
own cause can be compared with it; reasons that say nothing about the request (the baseline was not
found, the comparison is unavailable or still running) are ``inconclusive``.
"""

from __future__ import annotations

import tomllib
from typing import Any

from core.doctor.model import ProviderDiagnosis
from core.doctor.rules import RULES_FILE

INCONCLUSIVE = "inconclusive"
NO_CHANGE = "none"


DIAGNOSTICS: dict[str, dict[str, Any]] = tomllib.loads(RULES_FILE.read_text(encoding="utf-8"))["diagnostics"]
SECTIONS = {name: dict(entry["sections"]) for name, entry in DIAGNOSTICS.items()}


def _section(provider: str, reason: str) -> str:
    return str(SECTIONS[provider].get(reason, INCONCLUSIVE))


def provider_diagnosis(response: Any) -> ProviderDiagnosis | None:
    """The diagnostics a response (or its ``body``, or a streamed ``message``) carries, else None."""
    if not isinstance(response, dict):
        return None
    holders = [response] + [response[k] for k in ("body", "message", "response") if isinstance(response.get(k), dict)]
    for holder in holders:
        anthropic = holder.get("diagnostics")
        if isinstance(anthropic, dict) and "cache_miss_reason" in anthropic:
            reason = anthropic["cache_miss_reason"]
            if reason is None:  # the comparison was still running when the response was sent
                return ProviderDiagnosis("pending", INCONCLUSIVE, None, "diagnostics.cache_miss_reason")
            kind = str(reason.get("type", "")) if isinstance(reason, dict) else str(reason)
            missed = reason.get("cache_missed_input_tokens") if isinstance(reason, dict) else None
            return ProviderDiagnosis(kind, _section("anthropic", kind), missed if isinstance(missed, int) else None,
                                     "diagnostics.cache_miss_reason")
        openai = holder.get("prompt_cache_diagnostics")
        if isinstance(openai, dict):
            kind = str(openai.get("type", ""))
            reason = str(openai.get("reason") or kind)
            section = _section("openai", reason) if kind == "cache_miss" else _section("openai", kind)
            missed = openai.get("cache_missed_tokens")
            return ProviderDiagnosis(reason, section, missed if isinstance(missed, int) else None,
                                     "prompt_cache_diagnostics")
    return None
