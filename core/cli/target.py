"""The backend options shared by the command-line tools, read from the one registry `BACKENDS`."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack

from core.backends import API, BACKENDS, ENGINE, PRESETS
from core.backends.base import DEFAULT_DEADLINE_S
from core.backends.connect import Connection, Target, engine_target, open_connection
from core.engine.server import DEFAULT_CONTEXT, LocalServer
from core.experiments.batch import server_slots
from core.secrets import key_from_env

DEFAULT_LLAMA_URL = "http://127.0.0.1:8080"


def add_target_arguments(parser: argparse.ArgumentParser, names: list[str], default: str | None,
                         context: bool = True) -> None:
    """``--backend`` (one of ``names``), ``--url``, and for APIs ``--preset``, ``--model``, ``--key-env``."""
    lines = "; ".join(f"{name}: {BACKENDS[name].summary}" for name in names)
    parser.add_argument("--backend", choices=names, default=default, help=lines)
    parser.add_argument("--url", help=f"llama-server URL (default {DEFAULT_LLAMA_URL}), or an API base URL")
    if any(BACKENDS[name].needs == API for name in names):
        parser.add_argument("--preset", choices=sorted(PRESETS), help="API preset: base URL, model, key variable")
        parser.add_argument("--model", help="model name for an API backend")
        parser.add_argument(
            "--key-env", help="environment variable holding the API key (keys never go on the command line)"
        )
    if context:
        parser.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help="context size of the embedded server")
    parser.add_argument("--deadline", type=_seconds, default=DEFAULT_DEADLINE_S, metavar="SECONDS",
                        help=f"the longest one request may take (default {DEFAULT_DEADLINE_S:g} s): a stream that "
                             "never ends, or sends only keep-alive comments, is ended there with what it sent kept")


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def apply_deadline(conn: Connection, args: argparse.Namespace) -> Connection:
    """Give the connection's client the ``--deadline`` of the command line."""
    conn.backend.deadline_s = args.deadline
    return conn


def target_from_args(args: argparse.Namespace, stack: ExitStack, slots: int = 1) -> Target:
    """The target the options name; ``local`` starts the embedded engine (``slots`` sequences) until
    ``stack`` closes.

    A ``--preset`` implies its backend. Raises ``SystemExit`` with a message for missing settings.
    """
    preset = PRESETS.get(getattr(args, "preset", None) or "")
    name = args.backend or (preset.backend if preset else "local")
    if preset and name != preset.backend:
        raise SystemExit(f"--preset {preset.name} is a {preset.backend} backend, not {name}")
    spec = BACKENDS[name]
    if spec.needs == ENGINE:
        return engine_target(stack, getattr(args, "context", DEFAULT_CONTEXT), slots, on_start=lambda: print(
            "Starting the embedded llama-server...", file=sys.stderr))
    if spec.needs != API:
        return Target(name, url=args.url or DEFAULT_LLAMA_URL)
    base_url = args.url or (preset.base_url if preset else "")
    model = args.model or (preset.model if preset else "")
    if not base_url or not model:
        raise SystemExit(f"--backend {name} needs --preset, or both --url and --model")
    key = key_from_env(args.key_env or (preset.key_env if preset else None))
    return Target(name, url=base_url, model=model, api_key=key)


def connection_with_slots(conn: Connection, stack: ExitStack, slots: int, context: int = DEFAULT_CONTEXT) -> Connection:
    """``conn``, or for the embedded engine with fewer than ``slots`` parallel sequences a second server with
    them (stopped with ``stack``): one server per setting, so a one-slot run keeps its server."""
    if conn.name != "local" or slots <= 1 or (server_slots(conn.backend) or 1) >= slots:
        return conn
    print(f"Starting an embedded llama-server with {slots} slots...", file=sys.stderr)
    server = stack.enter_context(LocalServer(context=context, slots=slots))
    return stack.enter_context(open_connection(Target("local", url=server.url)))
