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
| ``PREFILL_LAB_MAX_CONCURRENT_RUNS`` | runs at once, all visitors together; more wait in line, in order | 4 |
| ``PREFILL_LAB_MAX_CONCURRENCY`` | requests open at once in one run (experiment 4's largest N, 8's open streams) | 4 |
| ``PREFILL_LAB_MAX_RATE`` | requests per second one run may schedule (experiment 8's highest rate) | 1 |
| ``PREFILL_LAB_MAX_WAITING_RUNS`` | runs that may wait in line; the next visitor is told to come back | 20 |
| ``PREFILL_LAB_MAX_RUNS_PER_VISITOR`` | runs one visitor may have going or waiting at once | 1 |
| ``PREFILL_LAB_MAX_TOKENS_PER_VISITOR`` | tokens one visitor may spend on the operator's key in 24 hours | 600000 |
| ``PREFILL_LAB_MAX_TOKENS_PER_HOUR`` | all visitors' tokens on the operator's key in an hour | 1000000 |
| ``PREFILL_LAB_MAX_DOCTOR_FILES`` | files in one doctor upload | 8 |
| ``PREFILL_LAB_ABANDON_GRACE_S`` | seconds a run goes on after its page is gone (a reconnect within it keeps it) | 10 |
| ``PREFILL_LAB_LEASE_S`` | seconds a run's place (running or waiting) outlives its replica's last heartbeat | 20 |

Outside hosted mode the limits are off, except the 5 MB upload limit, the doctor's file count and the
grace for an abandoned run (which apply everywhere: a closed tab's run is stopped in local use too).
The token budgets count every run that is not on the visitor's own key (the operator's key, or
none): a visitor with their own key pays for their own tokens (the per-run limits still apply). A
visitor is one browser (its cookie), so a reload is the same visitor; a visitor who clears cookies
starts afresh, which the hourly budget bounds.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol
from urllib.parse import urlsplit

import httpcore
import httpx

from core.backends.presets import PRESETS

Getter = Callable[[str], "str | None"]


class Refused(ValueError):
    """A request the hosted demo will not make; the message says why and what is allowed.

    ``key`` names the refusal and ``params`` fill its text. The English text is here, beside the rule
    (the CLI and the operator's log read it); the app shows a visitor's language from
    ``content/<lang>.toml``, ``[refused]``, where a translation has the same key and fields.
    """

    TEXTS: ClassVar[dict[str, str]] = {
        "concurrency": "This run sends {concurrency} requests at once; this demo allows {allowed}. "
                       "Choose smaller concurrency levels.",
        "rate": "This run schedules up to {rate:g} requests a second; this demo allows {allowed:g}. "
                "Choose lower rates.",
        "rounds": "This run has {rounds} requests; this demo allows {allowed} per run. "
                  "Choose fewer rounds, sizes or strategies.",
        "run_tokens": "This run would send about {tokens:,} tokens; this demo allows {allowed:,} per run. "
                      "Use a smaller document or fewer rounds.",
        "visitor_tokens": "You have used about {spent:,} of the {allowed:,} tokens a visitor may spend on this "
                          "demo's key in 24 hours, and this run needs about {tokens:,}. Enter your own API key "
                          "in the sidebar to go on, or come back tomorrow.",
        "hour_tokens": "This demo's key has spent about {spent:,} of its {allowed:,} tokens for this hour, and "
                       "this run needs about {tokens:,}. Budget frees up in about {minutes} min; or enter your "
                       "own API key in the sidebar.",
        "visitor_runs": "You already have {runs} run(s) going or waiting on this demo, the most it allows per "
                        "visitor. Wait for it to end, or stop it.",
        "line_full": "{waiting} runs are already waiting in line, the most this demo lets wait. Try again in a "
                     "few minutes.",
        "ledger_down": "This demo cannot read its token budget right now ({reason}), so it runs nothing on its own "
                       "key. Enter your own API key in the sidebar to go on, or try again in a minute.",
        "private_address": "{host} resolves to {address}, a loopback, private or link-local address; this demo "
                           "only calls public APIs.",
        "not_listed": "This demo only calls its listed APIs ({allowed}); {url} is not one of them.",
        "not_http": "{url} is not an http(s) URL.",
        "unresolved": "Cannot resolve {host}: {reason}",
    }

    def __init__(self, key: str, **params: Any) -> None:
        self.key, self.params = key, params
        super().__init__(self.TEXTS[key].format(**params))


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
    max_waiting_runs: int | None = None
    max_concurrency: int | None = None
    max_rate: float | None = None
    max_runs_per_visitor: int | None = None
    max_tokens_per_visitor: int | None = None
    max_tokens_per_hour: int | None = None
    max_doctor_files: int = 8
    abandon_grace_s: float = 10.0
    lease_s: float = 20.0

    def check_concurrency(self, concurrency: int) -> None:
        """Raise `Refused` when one run would send more requests at once than this demo allows."""
        if self.max_concurrency is not None and concurrency > self.max_concurrency:
            raise Refused("concurrency", concurrency=concurrency, allowed=self.max_concurrency)

    def check_run(self, planned_rounds: int, planned_tokens: int, at_once: int = 1,
                  per_second: float | None = None) -> None:
        """Raise `Refused` when a run would go over its limits: its requests, tokens, requests open at once (a
        stranger's run never opens more streams on the operator's key than allowed) and rate."""
        self.check_concurrency(at_once)
        if self.max_rate is not None and per_second is not None and per_second > self.max_rate:
            raise Refused("rate", rate=per_second, allowed=self.max_rate)
        if self.max_rounds is not None and planned_rounds > self.max_rounds:
            raise Refused("rounds", rounds=planned_rounds, allowed=self.max_rounds)
        if self.max_tokens_per_run is not None and planned_tokens > self.max_tokens_per_run:
            raise Refused("run_tokens", tokens=planned_tokens, allowed=self.max_tokens_per_run)


def load_settings(get: Getter) -> HostedSettings:
    files = _int(get("PREFILL_LAB_MAX_DOCTOR_FILES"), 8) or 8
    grace = _number(get("PREFILL_LAB_ABANDON_GRACE_S"), 10.0)
    if not _flag(get("PREFILL_LAB_HOSTED")):
        return HostedSettings(max_doctor_files=files, abandon_grace_s=grace)
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
        max_waiting_runs=_int(get("PREFILL_LAB_MAX_WAITING_RUNS"), 20),
        max_concurrency=_int(get("PREFILL_LAB_MAX_CONCURRENCY"), 4),
        max_rate=_number(get("PREFILL_LAB_MAX_RATE"), 1.0),
        max_runs_per_visitor=_int(get("PREFILL_LAB_MAX_RUNS_PER_VISITOR"), 1),
        max_tokens_per_visitor=_int(get("PREFILL_LAB_MAX_TOKENS_PER_VISITOR"), 600_000),
        max_tokens_per_hour=_int(get("PREFILL_LAB_MAX_TOKENS_PER_HOUR"), 1_000_000),
        max_doctor_files=files,
        abandon_grace_s=grace,
        lease_s=_number(get("PREFILL_LAB_LEASE_S"), 20.0),
    )


DAY_S, HOUR_S = 24 * 3600.0, 3600.0


@dataclass
class Spend:
    """Tokens one run takes from the operator's budgets: reserved at Run, settled to what it sent."""

    visitor: str
    tokens: int
    at: float
    id: str = field(default_factory=lambda: uuid.uuid4().hex)


def check_budgets(settings: HostedSettings, tokens: int, now: float, mine: int, hour: int,
                  oldest_in_hour: float | None) -> None:
    """Raise `Refused` when ``tokens`` more would take a visitor past what they spent in 24 hours (``mine``) or
    everyone past what the last hour spent (``hour``; its oldest spend says when budget frees up)."""
    if settings.max_tokens_per_visitor is not None and mine + tokens > settings.max_tokens_per_visitor:
        raise Refused("visitor_tokens", spent=mine, allowed=settings.max_tokens_per_visitor, tokens=tokens)
    if settings.max_tokens_per_hour is not None and hour + tokens > settings.max_tokens_per_hour:
        minutes = max(1, round(((oldest_in_hour or now) + HOUR_S - now) / 60))
        raise Refused("hour_tokens", spent=hour, allowed=settings.max_tokens_per_hour, tokens=tokens, minutes=minutes)


class Ledger(Protocol):
    """The operator's token budgets: `TokenLedger` in one process, `core.store.ledger.StoreLedger` in the store."""

    def reserve(self, visitor: str, tokens: int, settings: HostedSettings) -> Spend: ...

    def settle(self, spend: Spend, tokens: int) -> None: ...


@dataclass
class TokenLedger:
    """What the operator's key has spent, per visitor (24 hours) and for everyone (the last hour).

    A run reserves its estimate before it starts, so runs in line cannot together go over a budget,
    and `settle` replaces the estimate by what the run sent once it ends (a stopped run gives the
    rest back). This one lives in one process's memory (a store kept in memory); a store on disk or on
    a server keeps the budgets in its tables, for every process and replica (`StoreLedger`).
    """

    clock: Callable[[], float] = time.time
    _spends: list[Spend] = field(default_factory=list)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def _spent(self, since: float, visitor: str | None = None) -> int:
        return sum(s.tokens for s in self._spends if s.at >= since and (visitor is None or s.visitor == visitor))

    def reserve(self, visitor: str, tokens: int, settings: HostedSettings) -> Spend:
        """Reserve ``tokens`` for ``visitor``'s run, or raise `Refused` saying which budget is spent and when
        it frees up."""
        now = self.clock()
        with self._guard:
            self._spends = [s for s in self._spends if s.at >= now - DAY_S]
            oldest = min((s.at for s in self._spends if s.at >= now - HOUR_S), default=None)
            check_budgets(settings, tokens, now, self._spent(now - DAY_S, visitor), self._spent(now - HOUR_S), oldest)
            spend = Spend(visitor, tokens, now)
            self._spends.append(spend)
            return spend

    def settle(self, spend: Spend, tokens: int) -> None:
        with self._guard:
            spend.tokens = tokens


RUN_LOG = logging.getLogger("prefill_lab.runs")  # the operator's log: stderr, whatever Streamlit's logging says
if not RUN_LOG.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    RUN_LOG.addHandler(_handler)
    RUN_LOG.setLevel(logging.INFO)
    RUN_LOG.propagate = False


def log_run(experiment: str, backend: str, model: str, base_url: str, key_source: str, visitor: str,
            tokens: int, outcome: str, seconds: float | None, rows: int) -> None:
    """One line per run for the operator's log (stderr): never the key, only where it came from."""
    took = "-" if seconds is None else f"{seconds:.1f}s"
    RUN_LOG.info("run experiment=%s backend=%s model=%s base_url=%s key=%s visitor=%s tokens=%d rows=%d "
                 "outcome=%s time=%s", experiment, backend, model, base_url, key_source or "none", visitor,
                 tokens, rows, outcome, took)


def _check_address(host: str, address_text: str, settings: HostedSettings) -> None:
    address = ipaddress.ip_address(address_text.split("%", 1)[0])
    if address.is_loopback and settings.allow_loopback:
        return
    if not address.is_global or address.is_multicast:
        raise Refused("private_address", host=host, address=str(address))


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
        raise Refused("not_listed", allowed=", ".join(settings.allowed_base_urls), url=normalized or "''")
    parts = urlsplit(normalized)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("not_http", url=normalized)
    try:
        infos = resolve(
            parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), proto=socket.IPPROTO_TCP
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused("unresolved", host=parts.hostname, reason=str(exc)) from None
    for info in infos:
        _check_address(parts.hostname, info[4][0], settings)
