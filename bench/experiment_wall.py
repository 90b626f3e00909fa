"""Experiment wall time: all three experiments with default settings on the embedded default,
end to end, against the sum of the server's own prefill and decode time for the same requests
(warm-ups included). The rest is the project's share: waiting, prompts, tokenizing, parsing."""

from __future__ import annotations

import time

from bench.common import finish
from core import experiments as ex
from core.connect import Target, open_connection
from core.engine import LocalServer
from core.prompts import default_document, fit_document
from core.results import RequestResult, RoundResult


def server_ms(item: RequestResult | RoundResult) -> float:
    if isinstance(item, RequestResult):
        return (item.server_prefill_ms or 0) + (item.server_decode_ms or 0)
    return (item.prefill_ms or 0) + (item.decode_ms or 0)


def main() -> dict:
    document = default_document()
    results = {}
    with LocalServer() as server:
        conn = open_connection(Target("llama", server.url))
        runs = {
            ex.INPUT: lambda: ex.input_length_sweep(conn.backend, document, conn.counter, warm=False),
            ex.OUTPUT: lambda: ex.output_length_sweep(conn.backend, warm=False),
            ex.CACHE: lambda: ex.prefix_cache_rounds(conn.backend, fit_document(document, ex.DEFAULT_CACHE_DOC_TOKENS, conn.counter), warm=False),
        }
        cache_rows: list[RoundResult] = []
        for name, make in runs.items():
            start = time.perf_counter()
            warm = ex.warm_up(conn.backend)
            rows = list(make())
            wall = (time.perf_counter() - start) * 1000
            busy = server_ms(warm) + sum(server_ms(r) for r in rows)
            results[name] = {"rounds": len(rows), "wall_ms": round(wall), "server_ms": round(busy),
                             "project_share": round((wall - busy) / wall, 4)}
            if name == ex.CACHE:
                cache_rows = rows
        conn.backend.close()
    total_wall = sum(r["wall_ms"] for r in results.values())
    total_server = sum(r["server_ms"] for r in results.values())
    print(f"{'experiment':15} {'rounds':>6} {'wall ms':>9} {'server ms':>10} {'project share':>14}")
    for name, r in results.items():
        print(f"{name:15} {r['rounds']:>6} {r['wall_ms']:>9,} {r['server_ms']:>10,} {r['project_share']:>14.1%}")
    print("\nExperiment 3 per round (default document, compare with the chapter's table):")
    print(f"{'strategy':16} {'round':>5} {'prompt':>7} {'recomputed':>10} {'reused':>7} {'prefill ms':>10} {'TTFT ms':>8}")
    for row in cache_rows:
        print(f"{row.strategy:16} {row.round:>5} {row.prompt_tokens:>7} {row.recomputed_tokens:>10} {row.reused_tokens:>7} "
              f"{row.prefill_ms:>10.1f} {row.ttft_ms:>8.1f}")
    share = (total_wall - total_server) / total_wall
    key = {"total_wall_ms": total_wall, "total_server_ms": total_server, "project_share": round(share, 4),
           "goal_met": share < 0.05}
    return finish("experiment_wall", {"experiments": results, "cache_rounds": [r.to_dict() for r in cache_rows]}, key,
                  f"project's own share of the wall time {share:.1%} (goal < 5%)")


if __name__ == "__main__":
    main()
