"""Connections a client can cut from another thread, so Stop takes effect at once.

A read blocked on a silent server wakes only at its read timeout: closing the socket from another
thread does not wake it on Linux, ``shutdown`` does. `AbortableNetworkBackend` wraps httpcore's
network backend, keeps every stream it opens (the TLS stream too, which owns the socket once
wrapped) and `abort` shuts them all down: the blocked read returns at once with an error.
"""

from __future__ import annotations

import socket
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx


class _TrackedStream(httpcore.NetworkStream):
    """A network stream that registers itself, and the TLS stream it becomes, with its backend."""

    def __init__(self, inner: httpcore.NetworkStream, owner: AbortableNetworkBackend) -> None:
        self._inner, self._owner = inner, owner
        owner.track(self)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _TrackedStream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._owner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def shutdown(self) -> None:
        sock = self._inner.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed or never connected: nothing to wake
                pass


class AbortableNetworkBackend(httpcore.NetworkBackend):
    """Delegates to ``inner`` (e.g. hosted mode's address-checking backend) and can cut every stream."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner
        self._streams: weakref.WeakSet[_TrackedStream] = weakref.WeakSet()
        self._guard = threading.Lock()

    def track(self, stream: _TrackedStream) -> None:
        with self._guard:
            self._streams.add(stream)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _TrackedStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options), self)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _TrackedStream(self._inner.connect_unix_socket(path, timeout, socket_options), self)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)

    def abort(self) -> None:
        """Shut down every open stream: reads blocked in other threads return now."""
        with self._guard:
            streams = list(self._streams)
        for stream in streams:
            stream.shutdown()


def abortable(transport: httpx.BaseTransport | None) -> tuple[httpx.BaseTransport, AbortableNetworkBackend | None]:
    """``transport`` (a new default one when None) with its connections made abortable; the backend to
    abort, or None for a transport without a connection pool (a test's ``MockTransport``)."""
    if transport is None:
        transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)  # httpx exposes no public hook for the network backend
    if pool is None or not hasattr(pool, "_network_backend"):
        return transport, None
    backend = AbortableNetworkBackend(pool._network_backend)
    pool._network_backend = backend
    return transport, backend
