"""Your machine's limits, and where prefill and decode sit under them (the roofline).

- `core.roofline.peaks`: the two roofs of a machine: measured here by a probe (numpy matmul, a
  multi-threaded read), cached per machine; or read from a dated, cited table of accelerators.
- `core.roofline.model`: what one token costs a model: FLOPs, bytes a decode step reads, KV-cache
  bytes per token (from the GGUF's tensor list, else the server's ``/v1/models``).
- `core.roofline.arithmetic`: measured tokens/s turned into FLOP/s, bytes/s, MFU, MBU and intensity;
  the bounds the roofs put on prefill and decode, and what each experiment can show here.
- `core.engine.meter`: how much of the CPU the server got during a run (psutil: Linux, macOS, Windows).
- `core.engine.models`: GGUF files local runners already keep (nothing is downloaded).
"""
