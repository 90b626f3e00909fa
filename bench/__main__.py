"""``python -m bench [name ...]``: run the benchmarks (all by default) and write bench/results/*.json."""

import importlib
import sys

NAMES = ["client_overhead", "app_overhead", "experiment_wall", "cold_start", "doctor_scale", "capture_overhead",
         "engine_speed", "batch_curve", "sse_lines", "store_scale", "roofline_probe", "hosted_load", "hosted_replicas",
         "hosted_soak", "app_cpu_share", "doctor_traces", "import_scale", "doctor_page", "capture_concurrency",
         "kv_cache", "conversation", "roofline_memory"]

for name in sys.argv[1:] or NAMES:
    if name not in NAMES:
        raise SystemExit(f"unknown benchmark {name!r}; choose from {', '.join(NAMES)}")
    print(f"\n== {name} ==", flush=True)
    importlib.import_module(f"bench.{name}").main()
