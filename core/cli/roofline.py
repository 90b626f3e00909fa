"""This machine's limits (compute peak, memory bandwidth) and where prefill and decode sit under them.

``python -m core roofline [--json FILE] [--rerun] [--measure] [--model GGUF]``: the probe's figures
(cached per machine; ``--rerun`` measures again), the model's costs read from its GGUF, the bounds
the roofs put on prefill and decode, what experiments 2 and 4 can show here, and with ``--measure``
one uncached completion on the embedded server placed on the roofline with its MFU and MBU.
For an API: ``--accelerator "NVIDIA H100 SXM" --params 70 --bytes-per-weight 2`` (its datasheet roofs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from core.engine.choice import EngineError, find_model
from core.engine.probe import measure_speed
from core.engine.server import LocalServer
from core.roofline.arithmetic import DECODE, PREFILL, Measurement
from core.roofline.hardware import ACCELERATORS
from core.roofline.model import ModelFacts, from_gguf, from_user
from core.roofline.peaks import Roof, cache_problem, machine_roof
from core.roofline.report import build, lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    parser.add_argument("--rerun", action="store_true", help="measure the machine again instead of the cached figures")
    parser.add_argument("--measure", action="store_true",
                        help="also time one completion on the embedded server and place it on the roofline")
    parser.add_argument("--model-file", type=Path, help="GGUF to read (default: the embedded engine's model)")
    parser.add_argument("--accelerator", choices=sorted(ACCELERATORS),
                        help="an API's hardware, from the cited table, instead of this machine")
    parser.add_argument("--params", type=float, help="with --accelerator: the model's size in billions of weights")
    parser.add_argument("--bytes-per-weight", type=float, default=2.0, help="with --accelerator: 2 for BF16, 1 for FP8")


def _measured(model_path: Path) -> list[Measurement]:
    with LocalServer(model=model_path, context=2048) as server:
        speed = measure_speed(server.url)
    prompt, answer = int(speed["prompt_tokens"]), int(speed["answer_tokens"])
    return [Measurement(PREFILL, "engine probe", speed["prefill_tps"], prompt / 2, prompt_tokens=prompt),
            Measurement(DECODE, "engine probe", speed["decode_tps"], prompt + answer / 2)]


def run(args: argparse.Namespace) -> int:
    measurements: list[Measurement] = []
    roof: Roof
    model: ModelFacts
    if args.accelerator:
        if not args.params:
            print("error: --accelerator needs --params, the model's size in billions of weights.", file=sys.stderr)
            return 2
        roof = ACCELERATORS[args.accelerator]
        model = from_user(f"{args.params:g}B weights", args.params, args.bytes_per_weight)
    else:
        try:
            path = args.model_file or find_model()
            model = from_gguf(path)
        except (EngineError, OSError, ValueError) as exc:
            print(f"error: cannot read the model: {exc}", file=sys.stderr)
            return 2
        print("measuring this machine..." if args.rerun else "this machine's roofs (cached, else measured now)...",
              file=sys.stderr)
        if problem := cache_problem():
            print(f"warning: {problem}", file=sys.stderr)
        roof = machine_roof(rerun=args.rerun)
        if args.measure:
            try:
                measurements = _measured(path)
            except (EngineError, httpx.HTTPError, KeyError) as exc:
                print(f"error: the embedded server did not answer: {exc}", file=sys.stderr)
                return 1
    report = build(roof, model, measurements)
    for line in lines(report):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=2))
    return 0
