"""Counting the controller's requests: a proxy only the controller talks through.

A soak or a bench measures what the controller costs the API server (writes a minute by verb
and resource, LISTs after the initial sync, where a pass waits) from outside, as an audit log
would show it. The fault proxy (`faultproxy.py`) already sits between a client and the test
API server; `CountingProxy` counts what passes through it instead of keeping a record of each
request, so a run of hundreds of thousands of requests does not grow, and keeps its upstream
connections open and Nagle's algorithm off so it does not slow the passes it counts.
`ListCountingProxy` tells a LIST from a GET of one object, as the API server's authorizer does.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections import Counter

from controller.kube import kinds
from controller.kube.client import WRITE_VERBS
from testenv.controlplane import ControlPlane
from testenv.faultproxy import CONNECT_TIMEOUT_SECONDS, FaultProxy
from testenv.rbac import attributes

Counts = Counter[tuple[str, str]]
"""Requests by (verb, resource)."""
IDLE_SECONDS = 30.0
"""Upstream connections idle longer are closed rather than reused."""
BOOKKEEPING = frozenset({kinds.LEASE.plural, kinds.EVENT.plural})
"""Writes that are not about the policy's objects: Lease renewals and Events."""


def resource_of(path: str) -> str:
    """`/apis/g/v/namespaces/ns/plural/name/status` -> `plural/status`; discovery -> `discovery`."""
    parts = [p for p in path.split("?", maxsplit=1)[0].split("/") if p]
    parts = parts[3:] if parts[:1] == ["apis"] else parts[2:]  # drop /apis/g/v or /api/v
    if not parts:
        return "discovery"
    if parts[0] == "namespaces" and len(parts) > 2:
        parts = parts[2:]
    return f"{parts[0]}/{parts[2]}" if len(parts) > 2 else parts[0]


def method_verb(method: str, query: str) -> str:
    """What a request is counted as by `CountingProxy`: its method, or WATCH for a watch."""
    return "WATCH" if method == "GET" and "watch=true" in query else method


def authorized_verb(method: str, path: str, query: str) -> str:
    """What a request is counted as by `ListCountingProxy`: a GET as the API server's
    authorizer sees it (LIST of a collection, WATCH, GET of one object, or DISCOVERY when it is
    no resource request); any other request as its method."""
    found = attributes(method, path, query)
    if found is None:
        return "DISCOVERY"
    return found.verb.upper() if found.verb in ("list", "watch") else method


def writes_of(counts: Counts) -> Counts:
    """The counts of write requests only."""
    return Counter({key: n for key, n in counts.items() if key[0] in WRITE_VERBS})


class _Upstream(http.client.HTTPSConnection):
    """A connection to the API server that remembers its last response, so the proxy can tell
    whether it was read to the end (and the connection can carry the next request)."""

    last: http.client.HTTPResponse | None = None

    def getresponse(self) -> http.client.HTTPResponse:
        self.last = super().getresponse()
        return self.last

    @property
    def reusable(self) -> bool:
        last = self.last
        return (
            self.sock is not None and last is not None and last.isclosed() and not last.will_close
        )


class CountingProxy(FaultProxy):
    """The fault proxy, counting requests by (verb, resource) and by status instead of keeping
    a record of each: a soak sends hundreds of thousands, and the soak must not be what grows.
    It also sums the time to the response's headers, which says where a slow pass waits.

    Unlike the fault proxy, it keeps connections to the API server open between requests: a
    TLS handshake per request added about 10 ms to each, half as much again to a pass.
    """

    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(plane.server, token=plane.token, ca_file=plane.ca_file)
        self.counts: Counts = Counter()
        self.statuses: Counter[int] = Counter()
        self.seconds: dict[tuple[str, str], float] = {}
        self._count_lock = threading.Lock()
        self._idle: list[tuple[float, _Upstream]] = []
        """(when it was put back, connection), newest last."""

    def start(self) -> CountingProxy:
        """Start, with Nagle's algorithm off on every connection the controller opens.

        The fault proxy's handler writes a response's headers and its body in separate sends;
        with Nagle on, the body waits for the client's delayed ACK of the headers, some 40 ms a
        request. That tripled the pass time (p50 0.35 s direct, 1.46 s through the proxy) and
        so cut the passes and writes the soak set out to count. Accepted sockets inherit
        TCP_NODELAY from the listening socket, and no client has the address yet.
        """
        super().start()
        assert self._server is not None
        self._server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    def _record(
        self,
        method: str,
        path: str,
        status: int,
        received: float,
        query: str = "",
        *,
        body: bytes | None = None,
    ) -> None:
        del body  # counted, not kept
        key = (self._verb(method, path, query), resource_of(path))
        took = time.monotonic() - received
        with self._count_lock:
            self.counts[key] += 1
            self.statuses[status] += 1
            self.seconds[key] = self.seconds.get(key, 0.0) + took

    def _verb(self, method: str, path: str, query: str) -> str:
        """What a request is counted as: its method, or WATCH for a watch."""
        del path
        return method_verb(method, query)

    def _open_upstream(self) -> http.client.HTTPSConnection:
        now = time.monotonic()
        with self._count_lock:
            stale = [c for since, c in self._idle if now - since >= IDLE_SECONDS]
            self._idle = [(since, c) for since, c in self._idle if now - since < IDLE_SECONDS]
            reused = self._idle.pop()[1] if self._idle else None
        for connection in stale:
            connection.close()
        connection = reused or _Upstream(
            self.upstream_host,
            self.upstream_port,
            context=self.ssl_context,
            timeout=CONNECT_TIMEOUT_SECONDS,
        )
        connection.last = None  # reusable again only once this request's answer is read
        if connection.sock is not None:
            connection.sock.settimeout(CONNECT_TIMEOUT_SECONDS)  # the handler clears it
        with self._lock:  # as the fault proxy does: a closing proxy opens nothing
            if self._closing:
                connection.close()
                raise ConnectionAbortedError("the proxy is closing")
            self._upstreams.add(connection)
        return connection

    def _close_upstream(self, connection: http.client.HTTPSConnection) -> None:
        if isinstance(connection, _Upstream) and connection.reusable:
            with self._lock:
                self._upstreams.discard(connection)
                closing = self._closing
            if not closing:
                with self._count_lock:
                    self._idle.append((time.monotonic(), connection))
                return
        super()._close_upstream(connection)

    def close(self) -> None:
        super().close()
        with self._count_lock:
            idle, self._idle = self._idle, []
        for _, connection in idle:
            connection.close()

    def snapshot(
        self,
    ) -> tuple[Counts, Counter[int], dict[tuple[str, str], float]]:
        with self._count_lock:
            return Counter(self.counts), Counter(self.statuses), dict(self.seconds)


class ListCountingProxy(CountingProxy):
    """The counting proxy, with each GET counted as what the API server authorizes it as: a
    LIST of a collection, a GET of one object, or discovery."""

    def _verb(self, method: str, path: str, query: str) -> str:
        return authorized_verb(method, path, query)
