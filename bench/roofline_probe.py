"""The roofline probe against independent tools on the same machine, its own time, and the default's MFU/MBU.

- bandwidth: the probe's all-core read (`core.roofline.peaks.measure_bandwidth`) against
  ``likwid-bench -t load_avx`` (Debian ``likwid``: a read-only AVX kernel, the same kind of work)
  on the same working set and threads, and against STREAM's Triad where ``STREAM_SRC`` names a
  ``stream.c`` to compile (it is not shipped: fetch it from github.com/jeffhammond/STREAM);
- compute: the probe's numpy float32 matmul against ``likwid-bench -t peakflops_sp_avx_fma`` (an
  in-cache FMA loop: the machine's arithmetic peak, which a real matmul approaches from below);
- each pair is run alternately, PASSES times, so a change in the machine's load hits both; the
  ratio is of the medians. Other programs on the machine lower both (the load average is recorded).
- the probe's own time (goal < 10 s), and MFU/MBU of one engine-probe completion on the embedded
  default against the probe's roofs.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.common import finish, spread, table
from core.engine.choice import find_model
from core.engine.cpu import cpu_model
from core.engine.probe import measure_speed
from core.engine.server import LocalServer
from core.roofline import peaks
from core.roofline.arithmetic import DECODE, PREFILL, Measurement, place
from core.roofline.model import from_gguf

PASSES = 5
WORKING_SET = peaks.MIN_WORKING_SET


def likwid(test: str, working_set: str, threads: int) -> float | None:
    """likwid-bench's MByte/s (or MFlops/s for peakflops) in bytes or FLOP per second; None without it."""
    if shutil.which("likwid-bench") is None:
        return None
    proc = subprocess.run(["likwid-bench", "-t", test, "-w", f"N:{working_set}:{threads}"], capture_output=True,
                          text=True, timeout=300, check=False)
    unit = "MFlops/s" if test.startswith("peakflops") else "MByte/s"
    match = re.search(rf"^{re.escape(unit)}:\s+([\d.]+)", proc.stdout, re.MULTILINE)
    return float(match.group(1)) * 1e6 if match else None


def stream_binary(workdir: Path) -> Path | None:
    source = os.environ.get("STREAM_SRC")
    if not source or shutil.which("gcc") is None:
        return None
    binary = workdir / "stream"
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-DSTREAM_ARRAY_SIZE=40000000", "-DNTIMES=10",
                    source, "-o", str(binary)], check=True, capture_output=True)
    return binary


def stream_triad(binary: Path | None, threads: int) -> float | None:
    if binary is None:
        return None
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    match = re.search(r"^Triad:\s+([\d.]+)", proc.stdout, re.MULTILINE)
    return float(match.group(1)) * 1e6 if match else None


def load() -> float:
    return os.getloadavg()[0]


def main() -> dict[str, Any]:
    threads = peaks.cores()
    samples: dict[str, list[float]] = {k: [] for k in ("probe_bw", "likwid_load", "stream_triad", "probe_flops",
                                                        "likwid_peakflops", "probe_s")}
    loads = [load()]
    with tempfile.TemporaryDirectory(prefix="prefill-lab-stream-") as tmp:
        stream = stream_binary(Path(tmp))
        for _ in range(PASSES):
            roof = peaks.probe()
            samples["probe_s"].append(roof.seconds or 0.0)
            samples["probe_bw"].append(roof.bandwidth)
            samples["probe_flops"].append(roof.flops or 0.0)
            for key, value in (("likwid_load", likwid("load_avx", f"{WORKING_SET >> 20}MB", threads)),
                               ("likwid_peakflops", likwid("peakflops_sp_avx_fma", "32kB", threads)),
                               ("stream_triad", stream_triad(stream, threads))):
                if value is not None:
                    samples[key].append(value)
            loads.append(load())
    medians = {k: statistics.median(v) for k, v in samples.items() if v}
    rows = [(f"{k} ({'s' if k == 'probe_s' else 'G/s'})", spread([x if k == "probe_s" else x / 1e9 for x in v]))
            for k, v in samples.items() if v]
    print(table(rows, "GB/s, GFLOP/s or s"))

    model = from_gguf(find_model())
    with LocalServer(context=2048) as server:
        measure_speed(server.url, "warm up " * 20, 4)
        speed = max((measure_speed(server.url) for _ in range(3)), key=lambda s: s["decode_tps"])
    prompt = int(speed["prompt_tokens"])
    roof = peaks.probe()
    prefill = place(roof, model, Measurement(PREFILL, "engine probe", speed["prefill_tps"], prompt / 2,
                                             prompt_tokens=prompt))
    decode = place(roof, model, Measurement(DECODE, "engine probe", speed["decode_tps"],
                                            prompt + speed["answer_tokens"] / 2))
    ratios = {"bandwidth_vs_likwid_load": medians["probe_bw"] / medians["likwid_load"] if "likwid_load" in medians
              else None,
              "bandwidth_vs_stream_triad": medians["probe_bw"] / medians["stream_triad"] if "stream_triad" in medians
              else None,
              "compute_vs_likwid_peakflops": medians["probe_flops"] / medians["likwid_peakflops"]
              if "likwid_peakflops" in medians else None}
    key: dict[str, Any] = {k: round(v, 3) if v is not None else None for k, v in ratios.items()}
    key.update(probe_seconds=round(medians["probe_s"], 2), prefill_mfu=round(prefill.mfu or 0, 3),
               decode_mbu=round(decode.mbu, 3), prefill_tps=speed["prefill_tps"],
               decode_tps=speed["decode_tps"])
    bw_ratio = ratios["bandwidth_vs_likwid_load"] or ratios["bandwidth_vs_stream_triad"]
    key["goal_met"] = bool(bw_ratio is not None and bw_ratio >= 0.9 and medians["probe_s"] < 10)
    data = {"samples": samples, "load_average": loads, "threads": threads, "working_set_bytes": WORKING_SET,
            "roof": roof.to_dict(), "points": [prefill.to_dict(), decode.to_dict()], "cpu": cpu_model()}
    line = (f"probe bandwidth / likwid load {key['bandwidth_vs_likwid_load']}, / STREAM triad "
            f"{key['bandwidth_vs_stream_triad']} (goal >= 0.9); matmul / likwid peakflops "
            f"{key['compute_vs_likwid_peakflops']}; probe {key['probe_seconds']} s (goal < 10 s); default engine "
            f"prefill MFU {prefill.mfu or 0:.0%}, decode MBU {decode.mbu:.0%}")
    return finish("roofline_probe", data, key, line)


if __name__ == "__main__":
    main()
