"""Many agents at once: a thread and a connection of its own for each, as separate agents have."""

from __future__ import annotations

import threading
from typing import Any

import httpx


def post_at_once(url: str, bodies: list[dict[str, Any]], timeout: float = 90) -> list[httpx.Response | str]:
    """POST each body to ``url`` from its own thread, all released together; each answer (read whole), or
    the error in words."""
    start = threading.Barrier(len(bodies))
    answers: list[httpx.Response | str] = ["not sent"] * len(bodies)

    def agent(number: int) -> None:
        start.wait()
        try:
            with httpx.Client(timeout=timeout) as client:
                answers[number] = client.post(url, json=bodies[number])
        except httpx.HTTPError as exc:
            answers[number] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 30)
    return answers
