"""``make replicas``: the hosted demo as many replicas on one machine, to try it: a PostgreSQL cluster in a temporary
folder, N ``streamlit run`` replicas (default 3) on it, and nginx in front with sticky sessions, all on 127.0.0.1.
Ctrl-C (or SIGTERM) stops everything and removes the folder.

    python scripts/replicas.py [--replicas 3] [--port 8080] [--local]

The README's "Many replicas" section gives the nginx config and the settings a real deploy needs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.postgres import Cluster  # noqa: E402 - after the checkout is on the path
from tests.support.replicas import Replicas  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3, help="streamlit processes (default 3)")
    parser.add_argument("--port", type=int, default=8080, help="nginx's port on 127.0.0.1 (default 8080)")
    parser.add_argument("--local", action="store_true", help="not in hosted mode: a team's store, every backend")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="prefill-lab-replicas-"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with Cluster() as cluster:
            env = {**os.environ, "PREFILL_LAB_DB": cluster.url(cluster.database()), "HOME": str(folder)}
            if not args.local:
                env["PREFILL_LAB_HOSTED"] = "true"
            ports = [args.port + 1 + i for i in range(args.replicas)]
            print(f"PostgreSQL runs in {cluster.root}; starting {args.replicas} replicas "
                  f"(ports {ports[0]}-{ports[-1]}) "
                  "and nginx ...", flush=True)
            with Replicas(folder / "replicas", args.replicas, env, listen=args.port, ports=ports):
                print(f"Open http://127.0.0.1:{args.port} . Logs: {folder / 'replicas'}. Ctrl-C stops everything.",
                      flush=True)
                try:
                    while not stop.wait(1):
                        pass
                except KeyboardInterrupt:
                    pass
                print("Stopping nginx, the replicas and PostgreSQL ...", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
