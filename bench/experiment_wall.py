"""Experiment wall time: each experiment with default settings on the embedded default, end to end,
split into where the time went. The server's own compute (``prompt_ms + predicted_ms``) is the part
the experiment is about; everything else is the project's share, reported per request:

- *in-request*: a request's wall time (sent to last byte, the client's ``total_ms``) minus the
  server's compute for it: HTTP on loopback, the server's per-request floor before prompt
  evaluation (see BENCHMARKS.md §1), reading the stream;
- *tokenizer*: the ``/tokenize`` and ``/detokenize`` calls the experiment makes to size its prompts;
- *warm-up*: the one request each experiment sends first and throws away;
- *other*: the rest (building prompts, the generator itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from statistics import median

from bench.common import finish
from core.backends.connect import Target, open_connection
from core.backends.tokens import TokenCounter
from core.documents import default_document, fit_document
from core.engine.server import LocalServer
from core.experiments import input_length, output_length, prefix_cache
from core.experiments.base import RunContext, warm_up
from core.records import RoundResult


@dataclass
class TimedCounter:
    """A token counter that keeps the time spent in it."""

    inner: TokenCounter
    calls: int = 0
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return self.inner.exact

    def _add(self, start: float) -> None:
        self.calls += 1
        self.seconds += time.perf_counter() - start

    def count(self, text: str) -> int:
        start = time.perf_counter()
        count = self.inner.count(text)
        self._add(start)
        return count

    def truncate(self, text: str, tokens: int) -> str:
        start = time.perf_counter()
        cut = self.inner.truncate(text, tokens)
        self._add(start)
        return cut


def server_ms(row: RoundResult) -> float:
    return (row.prefill_ms or 0) + (row.decode_ms or 0)


def measure(name: str, conn, counter: TimedCounter, make: Callable[[], Iterator[RoundResult]]) -> tuple[dict, list]:
    start = time.perf_counter()
    warm = warm_up(conn.backend)
    warm_ms = (warm.end_s or 0) * 1000
    rows = list(make())
    wall = (time.perf_counter() - start) * 1000
    compute = sum(server_ms(r) for r in rows)
    in_request = [r.total_ms - server_ms(r) for r in rows if r.total_ms is not None]
    tokenizer_ms = counter.seconds * 1000
    other = wall - warm_ms - sum(r.total_ms or 0 for r in rows) - tokenizer_ms
    requests = len(rows)
    return {"requests": requests, "wall_ms": round(wall), "server_compute_ms": round(compute),
            "project_share": round((wall - compute) / wall, 4),
            "project_ms_per_request": round((wall - compute) / requests, 1),
            "in_request_ms_median": round(median(in_request), 1), "in_request_ms_total": round(sum(in_request)),
            "tokenizer_calls": counter.calls, "tokenizer_ms": round(tokenizer_ms), "warm_up_ms": round(warm_ms),
            "other_ms": round(other)}, rows


def main() -> dict:
    document = default_document()
    results, cache_rows = {}, []
    with LocalServer() as server, open_connection(Target("llama", server.url)) as conn:
        cache = prefix_cache.Settings()
        plans = {  # the defaults, as `python -m core` runs them; tokenizer calls timed through the counter
            input_length.ID: lambda run: input_length.rounds(run, input_length.Settings()),
            output_length.ID: lambda run: output_length.rounds(run, output_length.Settings()),
            prefix_cache.ID: lambda run: prefix_cache.rounds(
                run, replace(cache, fitted=fit_document(document, cache.doc_tokens, run.counter))),
        }
        for name, plan in plans.items():
            counter = TimedCounter(conn.counter)
            run = RunContext(replace(conn, counter=counter), warm=False)
            results[name], rows = measure(name, conn, counter, lambda p=plan, r=run: p(r))
            if name == prefix_cache.ID:
                cache_rows = rows
    columns = ["requests", "wall_ms", "server_compute_ms", "project_share", "project_ms_per_request",
               "in_request_ms_median", "tokenizer_calls", "tokenizer_ms", "warm_up_ms", "other_ms"]
    print(f"{'experiment':14} " + " ".join(f"{c:>14}" for c in columns))
    for name, r in results.items():
        print(f"{name:14} " + " ".join(f"{r[c]:>14}" for c in columns))
    print("\nExperiment 3 per round (default document, compare with the chapter's table):")
    print(f"{'strategy':16} {'round':>5} {'prompt':>7} {'recomputed':>10} {'reused':>7} {'prefill ms':>10} "
          f"{'TTFT ms':>8}")
    for row in cache_rows:
        print(f"{row.strategy:16} {row.round:>5} {row.prompt_tokens:>7} {row.recomputed_tokens:>10} "
              f"{row.cached_tokens:>7} {row.prefill_ms:>10.1f} {row.ttft_ms:>8.1f}")
    total_wall = sum(r["wall_ms"] for r in results.values())
    total_compute = sum(r["server_compute_ms"] for r in results.values())
    requests = sum(r["requests"] for r in results.values())
    share, per_request = (total_wall - total_compute) / total_wall, (total_wall - total_compute) / requests
    key = {"total_wall_ms": total_wall, "total_server_compute_ms": total_compute, "project_share": round(share, 4),
           "project_ms_per_request": round(per_request, 1), "goal_met": share < 0.05}
    return finish("experiment_wall", {"experiments": results, "cache_rounds": [r.to_dict() for r in cache_rows]}, key,
                  f"project's own share {share:.1%} of the wall time, {per_request:.0f} ms per request "
                  "(goal: share < 5%)")


if __name__ == "__main__":
    main()
