"""Cache doctor at scale: 100 rounds of 200,000 characters each, analysed without a model."""

from __future__ import annotations

import time

from bench.common import finish, spread, table
from core import doctor
from core.backends.tokens import EstimatingTokenCounter
from core.doctor.formats import chat_round
from core.documents import default_document

ROUNDS, CHARS, REPEATS = 100, 200_000, 5


def transcript() -> doctor.Transcript:
    """A conversation whose system prompt is 200k characters; every 10th round has a new timestamp."""
    base = (default_document() * 2)[:CHARS]
    rounds = []
    for index in range(ROUNDS):
        stamp = f"2026-11-29T10:{index // 10:02d}:00Z"
        messages = [{"role": "system", "content": f"Now: {stamp}\n{base}"},
                    {"role": "user", "content": f"Question {index}"}]
        rounds.append(chat_round({"messages": messages}, f"round {index + 1}"))
    return doctor.Transcript(rounds)


def main() -> dict:
    data = transcript()
    seconds = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        analysis = doctor.analyse(data, EstimatingTokenCounter())
        seconds.append(time.perf_counter() - start)
    breaks = sum(f.breaks_cache for f in analysis.findings)
    rows = [("analyse 100 x 200k chars", spread(seconds))]
    print(table(rows, "s"))
    key = {"median_s": rows[0][1]["median"], "breaks_found": breaks, "goal_met": rows[0][1]["median"] < 1.0}
    return finish("doctor_scale", {"rounds": ROUNDS, "chars_per_round": CHARS, "rows": dict(rows)}, key,
                  f"{ROUNDS} rounds x {CHARS:,} chars analysed in {key['median_s']:.3f} s median "
                  f"({breaks} breaks found; goal < 1 s)")


if __name__ == "__main__":
    main()
