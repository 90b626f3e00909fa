"""The cache doctor and ``promptcachelint`` side by side on the doctor's fixtures (tests/data/doctor).

promptcachelint is not a project dependency. Install it in a scratch virtual environment outside the
repository and name its executable in ``PROMPTCACHELINT``:

    python3 -m venv /tmp/pcl-venv && /tmp/pcl-venv/bin/pip install promptcachelint
    PROMPTCACHELINT=/tmp/pcl-venv/bin/promptcachelint .venv/bin/python -m bench.doctor_vs_promptcachelint

Each fixture was written with a known answer (`BREAKS`: the rounds whose prefix loses what the round
before had built). Both tools read the same rounds: promptcachelint as its own trace format (provider,
body, time, usage; one explicit session per fixture, so its grouping heuristic is not in the way), the
doctor as the file itself. A tool *misses* a break it does not flag and *invents* one it flags on a clean
round; a file it cannot read is counted as such. Every fixture is run twice: as written (short rounds,
a few hundred tokens) and lengthened (`PAD` appended to every text part, so each break loses more than
OpenAI's 128-token step and promptcachelint's granularity rule does not excuse it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import finish
from core import doctor
from core.doctor.formats import detect
from core.doctor.inputs import REQUEST_KEYS

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "data" / "doctor"
# the rounds (from 1) that break the cache, by design of each fixture
BREAKS = {
    "clean": set(), "end_of_prompt": set(), "timestamp": {3, 4}, "random_id": {3, 4}, "tool_order": {3, 4},
    "json_key_order": {3}, "whitespace": {3}, "history_truncated": {3}, "history_edited": {3},
    "system_prompt_changed": {3, 4}, "model_changed": {3}, "params_changed": {3}, "tools_changed": {3},
    "thinking_stripped": {3}, "image_reencoded": {3}, "scenario_chat": {3}, "scenario_anthropic": {3},
    "scenario_responses": {3}, "scenario_gemini": {3}, "scenario_captured": {3},
}
# lengthened, the value that changes at the end of the last message has 600 tokens after it: a real break
BREAKS_LENGTHENED = {**BREAKS, "end_of_prompt": {2, 3, 4}}
BREAK_CODES = {"CL001", "CL002", "CL003"}
PCL_PROVIDERS = {doctor.CHAT: "openai", doctor.ANTHROPIC: "anthropic"}
PAD = "\n" + " ".join(f"Standing instruction {i}: answer precisely and cite the file you read." for i in range(40))


def lengthen(value: Any) -> Any:
    """Every text part of a request body (system, messages, instructions, parts) with `PAD` appended."""
    if isinstance(value, list):
        return [lengthen(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        text_key = key in ("content", "text", "system", "instructions")
        out[key] = item + PAD if text_key and isinstance(item, str) and item else lengthen(item)
    return out


def lengthened(path: Path, folder: Path) -> Path:
    target = folder / path.name
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    target.write_text("".join(json.dumps({k: lengthen(v) if k in REQUEST_KEYS or k not in ("response", "time",
                                                                                        "endpoint") else v
                                          for k, v in line.items()}) + "\n" for line in lines))
    return target


def _usage(response: Any) -> dict[str, int] | None:
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    if "cache_read_input_tokens" in usage:
        return {"input_tokens": usage.get("input_tokens", 0), "cache_read": usage["cache_read_input_tokens"],
                "cache_write": usage.get("cache_creation_input_tokens", 0)}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": usage.get("prompt_tokens", 0) - cached, "cache_read": cached, "cache_write": 0}


def to_trace(path: Path) -> list[dict[str, Any]] | None:
    """The fixture as promptcachelint's trace, or None when it holds a format promptcachelint does not read."""
    records = []
    for number, line in enumerate(path.read_text().splitlines()):
        data = json.loads(line)
        key = next((k for k in REQUEST_KEYS if isinstance(data.get(k), dict)), None)
        body = data[key] if key else data
        provider = PCL_PROVIDERS.get(detect(body, str(data.get("endpoint", ""))))
        if provider is None:
            return None
        at = 60.0 * number
        if "time" in data:
            at = datetime.fromisoformat(data["time"].replace("Z", "+00:00")).timestamp()
        records.append({"provider": provider, "body": body, "at": at, "model": body.get("model"),
                        "usage": _usage(data.get("response")), "session_id": path.stem, "session_explicit": True})
    return records


def run_promptcachelint(executable: str, records: list[dict[str, Any]]) -> list[set[str]]:
    """The finding codes promptcachelint gives each request."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as handle:
        handle.write("\n".join(json.dumps(r) for r in records))
    try:
        proc = subprocess.run([executable, "report", "--json", handle.name], capture_output=True, text=True,
                              timeout=120)
    finally:
        os.unlink(handle.name)
    report = json.loads(proc.stdout)
    requests = [r for session in report["sessions"] for r in session["requests"]]
    codes = [{f["code"] for f in r["findings"]} | ({"CL001"} if (r.get("diff") or {}).get("broken") else set())
             for r in sorted(requests, key=lambda r: r["index"])]
    return codes


def score(flagged: set[int], truth: set[int]) -> str:
    missed, invented = sorted(truth - flagged), sorted(flagged - truth)
    if not missed and not invented:
        return "right"
    parts = (f"misses {missed}" if missed else "", f"invents {invented}" if invented else "")
    return "; ".join(part for part in parts if part)


def compare(executable: str, name: str, path: Path, truth: set[int], length: str) -> dict[str, Any]:
    analysis = doctor.analyse(doctor.load_paths([path]))
    ours = {f.round for f in analysis.findings if f.breaks_cache}
    causes = sorted({f.cause for f in analysis.findings if f.breaks_cache})
    trace = to_trace(path)
    codes = run_promptcachelint(executable, trace) if trace is not None else None
    theirs = {i + 1 for i, c in enumerate(codes) if c & BREAK_CODES} if codes is not None else None
    return {"fixture": name, "length": length, "format": ", ".join(analysis.formats), "breaks": sorted(truth),
            "doctor": score(ours, truth), "doctor_causes": causes,
            "promptcachelint": score(theirs, truth) if theirs is not None else "cannot read this format",
            "promptcachelint_codes": sorted(set().union(*codes)) if codes else []}


def main() -> dict:
    executable = os.environ.get("PROMPTCACHELINT")
    if not executable or not Path(executable).exists():
        raise SystemExit(__doc__)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, truth in BREAKS.items():
            path = FIXTURES / f"{name}.jsonl"
            rows.append(compare(executable, name, path, truth, "as written"))
            longer = lengthened(path, Path(folder))
            rows.append(compare(executable, name, longer, BREAKS_LENGTHENED[name], "lengthened"))
    print("| fixture | rounds | format | breaks in rounds | doctor | doctor's cause | promptcachelint | its codes |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['fixture']} | {r['length']} | {r['format']} | {', '.join(map(str, r['breaks'])) or '—'} | "
              f"{r['doctor']} | {', '.join(r['doctor_causes']) or '—'} | {r['promptcachelint']} | "
              f"{', '.join(r['promptcachelint_codes']) or '—'} |")
    right = {tool: sum(r[tool] == "right" for r in rows) for tool in ("doctor", "promptcachelint")}
    key = {"fixtures": len(rows), "doctor_right": right["doctor"], "promptcachelint_right": right["promptcachelint"],
           "goal_met": right["doctor"] == len(rows)}
    return finish("doctor_vs_promptcachelint", {"rows": rows}, key,
                  f"on {len(rows)} fixture runs the doctor is right on {right['doctor']}, promptcachelint on "
                  f"{right['promptcachelint']} (goal: the doctor right on all)")


if __name__ == "__main__":
    sys.exit(0 if main()["goal_met"] else 1)
