"""Accelerators an API may run on: their vendors' peaks, dated and cited.

Compute is dense 16-bit tensor throughput (BF16/FP16, no 2:4 sparsity: datasheets often print the
sparse figure, twice the dense one); bandwidth is the memory's peak. Apple publishes no FLOP/s
figure for its GPUs, so the M-series rows have ``compute`` None: they give an MBU, never an MFU.
A reader on other hardware picks none of these and gets no MFU rather than a guess.
"""

from __future__ import annotations

from core.roofline.peaks import Ceiling, Roof

READ_ON = "2026-12-01"
_TENSOR = "dense BF16 tensor peak (datasheet; sparse figure halved)"
_MEMORY = "memory bandwidth peak (datasheet)"


def _gpu(name: str, tflops: float | None, tbps: float, url: str) -> Roof:
    compute = Ceiling(tflops * 1e12, _TENSOR, source=url) if tflops else None
    return Roof(machine=name, memory=Ceiling(tbps * 1e12, _MEMORY, source=url), compute=compute, as_of=READ_ON)


ACCELERATORS: dict[str, Roof] = {roof.machine: roof for roof in (
    _gpu("NVIDIA H100 SXM", 989.4, 3.35, "https://www.nvidia.com/en-us/data-center/h100/"),
    _gpu("NVIDIA H200 SXM", 989.4, 4.8, "https://www.nvidia.com/en-us/data-center/h200/"),
    _gpu("NVIDIA A100 SXM 80GB", 312.0, 2.039, "https://www.nvidia.com/en-us/data-center/a100/"),
    _gpu("NVIDIA L4", 121.0, 0.300, "https://www.nvidia.com/en-us/data-center/l4/"),
    _gpu("NVIDIA GeForce RTX 4090", 165.2, 1.008,
         "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"),
    _gpu("Apple M3 Ultra", None, 0.8192, "https://www.apple.com/mac-studio/specs/"),
    _gpu("Apple M4 Max (16-core CPU)", None, 0.546, "https://www.apple.com/mac-studio/specs/"),
    _gpu("Apple M4 Pro", None, 0.273, "https://www.apple.com/mac-mini/specs/"),
)}
DATACENTER = "NVIDIA H100 SXM"
MAC_STUDIO = "Apple M3 Ultra"
