"""Client overhead: the project's TTFT minus the server's own prefill time, against a minimal
stdlib client (urllib, reading the stream line by line, like the chapter's local script) sent
alternately in the same run; and the same for inter-token gaps against the server's ms per token."""

from __future__ import annotations

import json
import statistics
import time
import urllib.request

from bench.common import finish, spread, table
from core.backends import ChatRequest, LlamaServerBackend
from core.documents import default_document
from core.engine.server import LocalServer
from core.experiments.prompts import nonce

REQUESTS = 30
MAX_TOKENS = 16


def messages() -> list[dict[str, str]]:
    return [{"role": "system", "content": f"Run {nonce()}. Answer briefly."},
            {"role": "user", "content": default_document()[:800] + "\nSummarise in one line."}]


def minimal_client(url: str, body: dict) -> dict[str, float]:
    """The simplest honest client: urllib, perf_counter at the first content delta."""
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    ttft, arrivals, timings = None, [], {}
    with urllib.request.urlopen(request, timeout=120) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            now = time.perf_counter() - start
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    ttft = now if ttft is None else ttft
                    arrivals.append(now)
            timings = chunk.get("timings", timings)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    return {"ttft_ms": ttft * 1000, "prompt_ms": timings["prompt_ms"], "itl_ms": statistics.median(gaps) * 1000,
            "server_ms_per_token": timings["predicted_ms"] / timings["predicted_n"]}


def project_client(backend: LlamaServerBackend) -> dict[str, float]:
    result = backend.stream_chat(ChatRequest(messages(), max_tokens=MAX_TOKENS, ignore_eos=True))
    assert result.success, result.error
    return {"ttft_ms": result.ttft_s * 1000, "prompt_ms": result.server_prefill_ms,
            "itl_ms": statistics.median(result.inter_token_s) * 1000,
            "server_ms_per_token": result.server_decode_ms / result.server_decode_tokens}


def main() -> dict:
    with LocalServer() as server, LlamaServerBackend(server.url) as backend:
        body = {"messages": None, "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True, "cache_prompt": True,
                "temperature": 0}
        project_client(backend)  # warm-up, not counted
        project, minimal = [], []
        for _ in range(REQUESTS):
            project.append(project_client(backend))
            minimal.append(minimal_client(server.url, {**body, "messages": messages()}))
    rows = []
    for name, runs in (("project", project), ("minimal urllib", minimal)):
        rows.append((f"{name}: TTFT - server prefill", spread([r["ttft_ms"] - r["prompt_ms"] for r in runs])))
        rows.append((f"{name}: ITL - server ms/token", spread([r["itl_ms"] - r["server_ms_per_token"] for r in runs])))
    print(table(rows, "ms"))
    overhead = dict(rows)
    difference = (overhead["project: TTFT - server prefill"]["median"]
                  - overhead["minimal urllib: TTFT - server prefill"]["median"])
    key = {"project_median_ttft_overhead_ms": overhead["project: TTFT - server prefill"]["median"],
           "minimal_median_ttft_overhead_ms": overhead["minimal urllib: TTFT - server prefill"]["median"],
           "project_minus_minimal_ms": round(difference, 3),
           "goal_met": difference <= 1.0 and overhead["project: TTFT - server prefill"]["median"] < 5.0}
    return finish("client_overhead", {"requests_per_client": REQUESTS, "rows": dict(rows)}, key,
                  f"project TTFT overhead {key['project_median_ttft_overhead_ms']:.2f} ms median, "
                  f"{difference:+.2f} ms vs a minimal urllib client (goal: <= +1 ms and < 5 ms)")


if __name__ == "__main__":
    main()
