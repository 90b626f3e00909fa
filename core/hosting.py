"""Hosted, API-only mode: who may call what, and how much, on a demo open to strangers.

Every setting is read through one function (``st.secrets`` first, then the environment, in the
app; the environment alone elsewhere), so an operator configures a deploy in one place:

| name | meaning | hosted default |
|---|---|---|
| ``PREFILL_LAB_HOSTED`` | ``true`` hides the local backends and never starts a process | off |
| ``PREFILL_LAB_ALLOWED_BASE_URLS`` | comma-separated base URLs a visitor may call | the presets' https URLs |
| ``PREFILL_LAB_ALLOW_LOOPBACK`` | ``true`` lets allowed URLs resolve to 127.0.0.1 (testing a deploy locally) | off |
| ``PREFILL_LAB_MAX_ROUNDS`` | rounds (requests) in one run | 16 |
| ``PREFILL_LAB_MAX_DOC_MB`` | size of an uploaded document | 1 |
| ``PREFILL_LAB_MAX_TOKENS_PER_RUN`` | estimated prompt + output tokens in one run | 300000 |
| ``PREFILL_LAB_MAX_CONCURRENT_RUNS`` | runs at once, all visitors together | 4 |
| ``PREFILL_LAB_MAX_CONCURRENCY`` | requests at once in one run (experiment 4's largest N) | 4 |

Outside hosted mode the limits are off, except the 5 MB upload limit.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from core.backends.presets import PRESETS

Getter = Callable[[str], "str | None"]


class Refused(ValueError):
    """A request the hosted demo will not make; the message says why and what is allowed."""


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _number(value: str | None, default: float) -> float:
    """A setting like ``0.5``; a value that is not a number (``2MB``) falls back to the default, as for ints."""
    try:
        return float(value) if value not in (None, "") else default
    except ValueError:
        return default


def _int(value: str | None, default: int | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


@dataclass(frozen=True)
class HostedSettings:
    hosted: bool = False
    allowed_base_urls: tuple[str, ...] = ()
    allow_loopback: bool = False
    max_rounds: int | None = None
    max_doc_bytes: int = 5 * 1024 * 1024
    max_tokens_per_run: int | None = None
    max_concurrent_runs: int | None = None
    max_concurrency: int | None = None

    def check_concurrency(self, concurrency: int) -> None:
        """Raise `Refused` when one run would send more requests at once than this demo allows."""
        if self.max_concurrency is not None and concurrency > self.max_concurrency:
            raise Refused(f"This run sends {concurrency} requests at once; this demo allows {self.max_concurrency}. "
                          "Choose smaller concurrency levels.")

    def check_run(self, planned_rounds: int, planned_tokens: int) -> None:
        """Raise `Refused` when a run would go over its budget (concurrency: `BackgroundRun.start`)."""
        if self.max_rounds is not None and planned_rounds > self.max_rounds:
            raise Refused(f"This run has {planned_rounds} requests; this demo allows {self.max_rounds} per run. "
                          "Choose fewer rounds, sizes or strategies.")
        if self.max_tokens_per_run is not None and planned_tokens > self.max_tokens_per_run:
            raise Refused(f"This run would send about {planned_tokens:,} tokens; this demo allows "
                          f"{self.max_tokens_per_run:,} per run. Use a smaller document or fewer rounds.")


def load_settings(get: Getter) -> HostedSettings:
    if not _flag(get("PREFILL_LAB_HOSTED")):
        return HostedSettings()
    default_urls = ",".join(p.base_url for p in PRESETS.values() if p.base_url.startswith("https://"))
    urls = tuple(
        u.strip().rstrip("/") for u in (get("PREFILL_LAB_ALLOWED_BASE_URLS") or default_urls).split(",") if u.strip()
    )
    return HostedSettings(
        hosted=True,
        allowed_base_urls=urls,
        allow_loopback=_flag(get("PREFILL_LAB_ALLOW_LOOPBACK")),
        max_rounds=_int(get("PREFILL_LAB_MAX_ROUNDS"), 16),
        max_doc_bytes=int(_number(get("PREFILL_LAB_MAX_DOC_MB"), 1.0) * 1024 * 1024),
        max_tokens_per_run=_int(get("PREFILL_LAB_MAX_TOKENS_PER_RUN"), 300_000),
        max_concurrent_runs=_int(get("PREFILL_LAB_MAX_CONCURRENT_RUNS"), 4),
        max_concurrency=_int(get("PREFILL_LAB_MAX_CONCURRENCY"), 4),
    )


def _check_address(host: str, address_text: str, settings: HostedSettings) -> None:
    address = ipaddress.ip_address(address_text.split("%", 1)[0])
    if address.is_loopback and settings.allow_loopback:
        return
    if not address.is_global or address.is_multicast:
        raise Refused(
            f"{host} resolves to {address}, a loopback, private or link-local address; "
            "this demo only calls public APIs."
        )


class GuardedNetworkBackend(httpcore.SyncBackend):
    """Resolves each connection itself, checks every address, then connects to a checked one.

    This closes the window between `check_base_url` and the request (DNS rebinding): httpx never
    resolves the host on its own. TLS still verifies the original host name.
    """

    def __init__(self, settings: HostedSettings) -> None:
        self.settings = settings

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
            for address in addresses:
                _check_address(host, address, self.settings)
        except (OSError, Refused) as exc:
            raise httpcore.ConnectError(str(exc)) from None
        return super().connect_tcp(addresses[0], port, timeout, local_address, socket_options)


def guarded_transport(settings: HostedSettings) -> httpx.HTTPTransport:
    """An httpx transport whose every connection goes through `GuardedNetworkBackend`."""
    transport = httpx.HTTPTransport()
    transport._pool._network_backend = GuardedNetworkBackend(settings)  # httpx exposes no public hook
    return transport


def check_base_url(url: str, settings: HostedSettings, resolve: Callable[..., list[Any]] = socket.getaddrinfo) -> None:
    """In hosted mode, allow only listed base URLs whose host resolves to public addresses."""
    if not settings.hosted:
        return
    normalized = url.strip().rstrip("/")
    if normalized not in settings.allowed_base_urls:
        raise Refused(
            f"This demo only calls its listed APIs ({', '.join(settings.allowed_base_urls)}); "
            f"{normalized or 'an empty URL'} is not one of them."
        )
    parts = urlsplit(normalized)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused(f"{normalized} is not an http(s) URL.")
    try:
        infos = resolve(
            parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), proto=socket.IPPROTO_TCP
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused(f"Cannot resolve {parts.hostname}: {exc}") from None
    for info in infos:
        _check_address(parts.hostname, info[4][0], settings)
