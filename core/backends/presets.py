"""Known API endpoints. Each names its backend (a `core.backends.BACKENDS` name) and the environment
variable its key is read from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    base_url: str
    model: str
    key_env: str | None
    cache_report: str
    backend: str = "api"


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("AI Builder Space", "https://space.ai-builders.com/backend/v1", "deepseek", "AI_BUILDER_TOKEN",
               "not reported: the cache shows only in time"),
        Preset("DeepSeek", "https://api.deepseek.com/v1", "deepseek-chat", "DEEPSEEK_API_KEY",
               "usage.prompt_cache_hit_tokens (64-token units)"),
        Preset("OpenAI", "https://api.openai.com/v1", "gpt-4o-mini", "OPENAI_API_KEY",
               "usage.prompt_tokens_details.cached_tokens (from 1024 tokens, 128-token steps)"),
        Preset("OpenRouter", "https://openrouter.ai/api/v1", "deepseek/deepseek-chat", "OPENROUTER_API_KEY",
               "usage.prompt_tokens_details.cached_tokens"),
        Preset("llama-server /v1", "http://127.0.0.1:8080/v1", "", None, "usage.prompt_tokens_details.cached_tokens"),
        Preset("vLLM", "http://127.0.0.1:8000/v1", "", "VLLM_API_KEY",
               "usage.prompt_tokens_details.cached_tokens (needs --enable-prompt-tokens-details)"),
        Preset("Anthropic", "https://api.anthropic.com/v1", "claude-haiku-4-5", "ANTHROPIC_API_KEY",
               "usage.cache_read_input_tokens (explicit cache_control breakpoints; Haiku 4.5 caches from 4,096 tokens)",
               backend="anthropic"),
    )
}
