"""Capture proxy overhead: the same minimal client straight to the embedded llama-server and through
`core.capture.proxy` to it, alternately in one run; TTFT and inter-token gaps less the server's own times."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.client_overhead import MAX_TOKENS, messages, minimal_client
from bench.common import finish, spread, table
from core.capture.proxy import CaptureServer
from core.engine.server import LocalServer

REQUESTS = 30


def main() -> dict:
    body = {"max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True, "cache_prompt": True, "temperature": 0}
    with tempfile.TemporaryDirectory() as scratch, LocalServer() as server:
        log = Path(scratch) / "capture.jsonl"
        with CaptureServer(server.url, log) as proxy:
            minimal_client(proxy.base_url, {**body, "messages": messages()})  # warm-up, not counted
            direct, proxied = [], []
            for _ in range(REQUESTS):
                direct.append(minimal_client(server.url, {**body, "messages": messages()}))
                proxied.append(minimal_client(proxy.base_url, {**body, "messages": messages()}))
        logged = len(log.read_text().splitlines())
    rows = []
    for name, runs in (("direct", direct), ("through the proxy", proxied)):
        rows.append((f"{name}: TTFT - server prefill", spread([r["ttft_ms"] - r["prompt_ms"] for r in runs])))
        rows.append((f"{name}: ITL - server ms/token", spread([r["itl_ms"] - r["server_ms_per_token"] for r in runs])))
    print(table(rows, "ms"))
    medians = {name: s["median"] for name, s in rows}
    added_ttft = medians["through the proxy: TTFT - server prefill"] - medians["direct: TTFT - server prefill"]
    added_itl = medians["through the proxy: ITL - server ms/token"] - medians["direct: ITL - server ms/token"]
    key = {"added_ttft_ms": round(added_ttft, 3), "added_itl_ms": round(added_itl, 3), "logged_lines": logged,
           "goal_met": added_ttft <= 5.0 and added_itl <= 1.0 and logged == REQUESTS + 1}
    return finish("capture_overhead", {"requests_per_path": REQUESTS, "rows": dict(rows)}, key,
                  f"the capture proxy adds {added_ttft:+.2f} ms to TTFT and {added_itl:+.2f} ms per token (median), "
                  f"{logged} of {REQUESTS + 1} calls logged (goal: <= 5 ms, <= 1 ms, every call)")
