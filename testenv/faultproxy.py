"""A fault-injecting reverse proxy in front of the test API server.

The client's retry rules (Retry-After on 429, backoff on 5xx and conflicts, no retry on 4xx,
retrying a dropped connection) only mean something against real HTTP: a mocked API would test
the mock. The test API server cannot be told to answer 503 or to drop a connection, so this
proxy stands in front of it: plain HTTP on loopback, forwarding every request to the real
HTTPS server with the control plane's bearer token, and answering the requests a test
programs it to answer itself. Responses are streamed chunk by chunk as they arrive, so a watch
through the proxy sees events as the server sends them.

Usage::

    with FaultProxy.for_control_plane(plane) as proxy:
        client = client_for(proxy)
        proxy.inject(lambda method, path: method == "PATCH", status=429, times=2, retry_after=1)
        client.apply(...)  # two 429s from the proxy, then the server's answer
        assert [r.status for r in proxy.requests] == [429, 429, 200]

`ControlledProxy` adds what tests of watches need: faults chosen by the query string too (a
LIST and a WATCH share a path and differ only in `?watch=true`), cutting one kind's open watch,
holding a request until the test lets it go (then answering it, or forwarding it), and
answering a watch with a 200 stream of chosen lines: an `ERROR` event (410 Expired), as the API
server sends when a watch's resourceVersion has been compacted away, or a line that is not a
watch event at all.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlsplit

from kubernetes import client as k8s

from controller.kube.client import KubeClient, RetryPolicy
from controller.kube.kinds import Kind
from testenv.controlplane import ControlPlane

Match = Callable[[str, str], bool]
"""Chooses the requests a fault answers, from the method and the path (without the query)."""
QueryMatch = Callable[[str, str, Mapping[str, str]], bool]
"""Chooses requests from the method, the path and the query string's parameters."""

# Headers that describe one HTTP hop, not the message (RFC 9110 section 7.6.1): the proxy
# frames each side of the connection itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

# The `reason` the API server puts in a Status for each code (k8s.io/apimachinery
# pkg/apis/meta/v1 StatusReason), so injected answers classify as the real ones would.
STATUS_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

CHUNK_SIZE = 64 * 1024
CONNECT_TIMEOUT_SECONDS = 10.0


class ProxiedRequest(NamedTuple):
    """One request the proxy received: status 0 when it closed the connection unanswered."""

    method: str
    path: str
    status: int
    time: float
    """`time.monotonic()` when the request arrived."""
    query: str = ""
    """The query string, without the `?` (`watch=true`, `dryRun=All`, ...)."""
    body: bytes | None = None
    """What the client sent (a PATCH's patch, say), as sent."""


def status_body(status: int, reason: str | None = None, message: str = "") -> dict[str, Any]:
    """A Kubernetes `Status` object as the API server sends with an error code."""
    reason = reason if reason is not None else default_reason(status)
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message or f"injected by the fault proxy: {status} {reason}",
        "reason": reason,
        "code": status,
    }


def default_reason(status: int) -> str:
    if status in STATUS_REASONS:
        return STATUS_REASONS[status]
    try:
        return HTTPStatus(status).phrase.replace(" ", "")
    except ValueError:
        return ""


@dataclass
class Fault:
    """An answer the proxy gives instead of the server, to the next `remaining` matches."""

    match: Match | None
    status: int
    remaining: int
    retry_after: float | None = None
    body: dict[str, Any] | None = None
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return self.remaining > 0 and (self.match is None or self.match(method, path))

    def payload(self) -> bytes:
        return json.dumps(self.body if self.body is not None else status_body(self.status)).encode()

    def retry_after_header(self) -> str | None:
        """Whole seconds as the API server writes them, fractions kept when a test asks."""
        if self.retry_after is None:
            return None
        if float(self.retry_after).is_integer():
            return str(int(self.retry_after))
        return repr(float(self.retry_after))


class FaultProxy:
    """Plain HTTP on 127.0.0.1 in front of an HTTPS API server; a context manager.

    Every request is forwarded (method, path, query, headers, body) with the upstream's bearer
    token added, unless a fault injected with `inject` answers it, or the proxy is refusing
    connections (`refuse_connections`), in which case the connection is closed without an
    answer, as a crashed server or a dropped load balancer would. When the upstream cannot be
    reached the client's connection is closed unanswered too, so the client sees what it would
    see connecting directly, not a 502 the real server never sends.
    """

    def __init__(self, upstream: str, *, token: str, ca_file: Path | str) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"upstream must be an https:// URL, not {upstream!r}")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 443
        self.upstream_netloc = parts.netloc
        self.token = token
        self.ssl_context = ssl.create_default_context(cafile=str(ca_file))
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._requests: list[ProxiedRequest] = []
        self._refuse_until = 0.0
        self._upstreams: set[http.client.HTTPSConnection] = set()
        self._closing = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def for_control_plane(cls, plane: ControlPlane) -> FaultProxy:
        return cls(plane.server, token=plane.token, ca_file=plane.ca_file)

    # ----------------------------------------------------------------- addresses
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the proxy is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> FaultProxy:
        if self._server is not None:
            raise RuntimeError("the proxy is already running")
        self._closing = False
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"faultproxy-{self.port}",
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, cut every open connection (watches included), join all threads."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        server.abort_connections()
        with self._lock:
            self._closing = True  # a handler between request and upstream opens none now
            upstreams = list(self._upstreams)
        for connection in upstreams:
            _shutdown(connection.sock)
        server.server_close()  # joins the handler threads (daemon_threads is False)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ----------------------------------------------------------------- programming
    def inject(
        self,
        match: Match | None,
        *,
        status: int,
        times: int,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> Fault:
        """Answer the next `times` requests that `match` accepts (all when None) with `status`.

        The body is a Kubernetes Status with the reason the API server gives that code
        (TooManyRequests, ServiceUnavailable, Conflict, ...) unless `body` replaces it, e.g.
        `status_body(409, "AlreadyExists")`. Faults are tried in the order injected; the
        returned Fault's `hits` and `remaining` show how many it answered.
        """
        fault = Fault(match, status, times, retry_after, body)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def refuse_connections(self, seconds: float) -> None:
        """For `seconds` from now, close every connection without answering (0 ends it)."""
        with self._lock:
            self._refuse_until = time.monotonic() + seconds

    @property
    def refusing(self) -> bool:
        with self._lock:
            return time.monotonic() < self._refuse_until

    @property
    def requests(self) -> list[ProxiedRequest]:
        """A snapshot of every request received so far, in order of arrival."""
        with self._lock:
            return list(self._requests)

    # ----------------------------------------------------------------- for the handler
    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.remaining -= 1
                    fault.hits += 1
                    return fault
        return None

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
        with self._lock:
            self._requests.append(ProxiedRequest(method, path, status, received, query, body=body))

    def _open_upstream(self) -> http.client.HTTPSConnection:
        connection = http.client.HTTPSConnection(
            self.upstream_host,
            self.upstream_port,
            context=self.ssl_context,
            timeout=CONNECT_TIMEOUT_SECONDS,
        )
        with self._lock:
            if self._closing:
                raise ConnectionAbortedError("the proxy is closing")
            self._upstreams.add(connection)
        return connection

    def _close_upstream(self, connection: http.client.HTTPSConnection) -> None:
        with self._lock:
            self._upstreams.discard(connection)
        connection.close()


def _shutdown(sock: socket.socket | None) -> None:
    """Wake whatever thread is blocked reading `sock`; the owner closes it."""
    if sock is None:
        return
    with contextlib.suppress(OSError):  # already closed, or never connected
        sock.shutdown(socket.SHUT_RDWR)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handlers: nothing outlives the proxy
    block_on_close = True

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection the proxy or its client cut is the fault being injected, not an
        error: it is not printed. Anything else is, as the standard server prints it."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def abort_connections(self) -> None:
        """End idle keep-alive connections and streams so their handler threads return."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            _shutdown(connection)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked responses, as the client expects
    disable_nagle_algorithm = True  # else every small response waits ~40 ms for a delayed ACK
    server: _Server

    # BaseHTTPRequestHandler dispatches on `do_<METHOD>`; every verb is proxied the same way.
    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_OPTIONS(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the proxy's own log (`FaultProxy.requests`) is what tests read."""

    # ----------------------------------------------------------------- per request
    def _handle(self) -> None:
        proxy = self.server.proxy
        received = time.monotonic()
        method = self.command
        path, _, query = self.path.partition("?")
        body = self._read_body()
        if proxy.refusing:
            proxy._record(method, path, 0, received, query, body=body)
            self.close_connection = True
            return
        fault = proxy._take_fault(method, path)
        if fault is not None:
            proxy._record(method, path, fault.status, received, query, body=body)
            self._answer(fault)
            return
        self._forward(method, path, body, received)

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked_body()
        length = self.headers.get("Content-Length")
        return self.rfile.read(int(length)) if length else None

    def _read_chunked_body(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _answer(self, fault: Fault) -> None:
        payload = fault.payload()
        self.send_response(fault.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        retry_after = fault.retry_after_header()
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _upstream_headers(self) -> dict[str, str]:
        named_hop_by_hop = {
            name.strip().lower() for name in self.headers.get("Connection", "").split(",")
        }
        headers = {
            name: value
            for name, value in self.headers.items()
            if name.lower() not in HOP_BY_HOP | named_hop_by_hop
            and name.lower() not in {"host", "authorization", "content-length"}
        }
        headers["Host"] = self.server.proxy.upstream_netloc
        headers["Authorization"] = f"Bearer {self.server.proxy.token}"
        return headers

    def _forward(self, method: str, path: str, body: bytes | None, received: float) -> None:
        proxy = self.server.proxy
        query = self.path.partition("?")[2]
        upstream: http.client.HTTPSConnection | None = None
        try:
            try:
                upstream = proxy._open_upstream()
                upstream.request(method, self.path, body=body, headers=self._upstream_headers())
                response = upstream.getresponse()
                if upstream.sock is not None:
                    upstream.sock.settimeout(None)  # a watch may be silent for minutes
            except (OSError, http.client.HTTPException):
                # Unreachable upstream: drop the client's connection as the server would.
                proxy._record(method, path, 0, received, query, body=body)
                self.close_connection = True
                return
            proxy._record(method, path, response.status, received, query, body=body)
            self._relay(method, response)
        finally:
            if upstream is not None:
                proxy._close_upstream(upstream)

    def _relay(self, method: str, response: http.client.HTTPResponse) -> None:
        """Headers, then the body as it arrives: re-chunked when the length is unknown."""
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        has_body = not (
            method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
        )
        chunked = has_body and response.getheader("Content-Length") is None
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        try:
            self.end_headers()
            if not has_body:
                return
            while True:
                data = response.read1(CHUNK_SIZE)
                if not data:
                    break
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                else:
                    self.wfile.write(data)
                self.wfile.flush()
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except (OSError, http.client.HTTPException):
            # Either side went away mid-response: cut the client off without the final chunk,
            # so it sees a broken stream, not a complete one.
            self.close_connection = True


# --------------------------------------------------------------------- a proxy that sees queries
@dataclass
class QueryFault:
    """An answer the proxy gives, instead of the server, to the next `remaining` matches."""

    match: QueryMatch
    status: int
    remaining: int
    retry_after: float | None = None
    watch_error: bool = False
    """Answer 200 with one `ERROR` watch event carrying `status`, as the API server does."""
    hold: threading.Event | None = None
    """When given, the request waits for it (the test decides when the answer goes out)."""
    lines: tuple[bytes, ...] = ()
    """When given, answer 200 with these lines as the watch stream, then end it."""
    forward: bool = False
    """Only hold the request: once `hold` is set, it goes on to the server."""
    answered: list[tuple[str, float]] = field(default_factory=list)
    """The path of each request it answered, and when that request arrived."""
    arrived: threading.Event = field(default_factory=threading.Event)

    @property
    def hits(self) -> int:
        return len(self.answered)


class Logged(NamedTuple):
    method: str
    path: str
    watch: bool
    time: float
    query: Mapping[str, str] = {}


class ControlledProxy(FaultProxy):
    """The fault proxy, plus faults chosen by query, cutting watches, and held answers.

    The watch requests that pass through are tracked, so a test can cut one kind's watch and
    leave the others streaming. Every request is logged with its parsed query (`log`).
    """

    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(plane.server, token=plane.token, ca_file=plane.ca_file)
        self._query_faults: list[QueryFault] = []
        self._open_watches: dict[socket.socket, str] = {}
        self._log: list[Logged] = []
        self._control_lock = threading.Lock()

    def start(self) -> ControlledProxy:
        super().start()
        assert self._server is not None
        # Nothing has connected yet: every request is handled by the query-aware handler.
        self._server.RequestHandlerClass = _ControlledHandler
        return self

    def close(self) -> None:
        """Let held requests go first: closing joins every handler thread."""
        with self._control_lock:
            holds = [f.hold for f in self._query_faults if f.hold is not None]
        for hold in holds:
            hold.set()
        super().close()

    def inject_query(
        self,
        match: QueryMatch,
        *,
        status: int = 200,
        times: int,
        retry_after: float | None = None,
        watch_error: bool = False,
        hold: threading.Event | None = None,
        lines: tuple[bytes, ...] = (),
        forward: bool = False,
    ) -> QueryFault:
        if forward and hold is None:
            raise ValueError("forward only makes sense with a hold")
        fault = QueryFault(match, status, times, retry_after, watch_error, hold, lines, forward)
        with self._control_lock:
            self._query_faults.append(fault)
        return fault

    def cut_watches(self, path: str) -> int:
        """Close the client side of every open watch on `path`; how many were cut."""
        with self._control_lock:
            sockets = [s for s, p in self._open_watches.items() if p == path]
        for sock in sockets:
            _shutdown(sock)
        return len(sockets)

    def arrivals(self, method: str, path: str, *, watch: bool) -> list[float]:
        """When each request of `method` on `path` (a watch or not) arrived, in order."""
        return [r.time for r in self.log(method, path, watch=watch)]

    def log(self, method: str, path: str, *, watch: bool) -> list[Logged]:
        """Each request of `method` on `path` (a watch or not), in order of arrival."""
        return [r for r in self.logged() if (r.method, r.path, r.watch) == (method, path, watch)]

    def logged(self) -> list[Logged]:
        """Every request received so far, in order of arrival."""
        with self._control_lock:
            return list(self._log)

    # ----------------------------------------------------------------- for the handler
    def _take_query_fault(
        self, method: str, path: str, query: Mapping[str, str], received: float
    ) -> QueryFault | None:
        with self._control_lock:
            self._log.append(
                Logged(method, path, query.get("watch") == "true", received, dict(query))
            )
            for fault in self._query_faults:
                if fault.remaining > 0 and fault.match(method, path, query):
                    fault.remaining -= 1
                    fault.answered.append((path, received))
                    fault.arrived.set()
                    return fault
        return None

    @contextmanager
    def _tracked_watch(self, connection: socket.socket, path: str) -> Iterator[None]:
        with self._control_lock:
            self._open_watches[connection] = path
        try:
            yield
        finally:
            with self._control_lock:
                self._open_watches.pop(connection, None)


class _ControlledHandler(_Handler):
    def _handle(self) -> None:
        proxy = self.server.proxy
        assert isinstance(proxy, ControlledProxy)
        received = time.monotonic()
        path, _, raw_query = self.path.partition("?")
        query = dict(parse_qsl(raw_query))
        fault = proxy._take_query_fault(self.command, path, query, received)
        if fault is not None and fault.forward:
            assert fault.hold is not None
            fault.hold.wait()
            fault = None
        if fault is None:
            if query.get("watch") == "true":
                with proxy._tracked_watch(self.connection, path):
                    super()._handle()
            else:
                super()._handle()
            return
        self._read_body()
        if fault.hold is not None:
            fault.hold.wait()
        if fault.watch_error:
            proxy._record(self.command, path, 200, received)
            event = {
                "type": "ERROR",
                "object": status_body(fault.status, message="too old resource version: 1 (2)"),
            }
            self._answer_stream((json.dumps(event).encode(),))
        elif fault.lines:
            proxy._record(self.command, path, 200, received)
            self._answer_stream(fault.lines)
        else:
            proxy._record(self.command, path, fault.status, received)
            self._answer(Fault(None, fault.status, 0, fault.retry_after))

    def _answer_stream(self, lines: tuple[bytes, ...]) -> None:
        """200, the lines (each a chunk), end of stream: how a watch ends that the server ends."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        for line in lines:
            chunk = line + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True


def watch_of(kind: Kind, namespace: str | None = None) -> QueryMatch:
    collection = kind.path(namespace=namespace)
    return lambda method, path, query: (
        method == "GET" and path == collection and query.get("watch") == "true"
    )


def list_of(kind: Kind, namespace: str | None = None) -> QueryMatch:
    collection = kind.path(namespace=namespace)
    return lambda method, path, query: (
        method == "GET" and path == collection and query.get("watch") != "true"
    )


# --------------------------------------------------------------------- clients of the proxy
def configuration_for(proxy: FaultProxy) -> Any:
    """Plain HTTP, no credentials (the proxy adds the token), no urllib3 retries."""
    configuration = k8s.Configuration()
    configuration.host = proxy.url
    configuration.retries = 0  # tenacity retries, as in KubeClient.from_kubeconfig
    return configuration


def client_for(
    proxy: FaultProxy, *, max_delay_seconds: float = 30.0, request_timeout: float = 30.0
) -> KubeClient:
    """A KubeClient whose every request goes through `proxy`."""
    return KubeClient(
        k8s.ApiClient(configuration_for(proxy)),
        retry=RetryPolicy(max_delay_seconds=max_delay_seconds),
        request_timeout=request_timeout,
    )


def kubeconfig_for(proxy: FaultProxy, directory: Path) -> Path:
    """A kubeconfig for the proxy, for code that takes a path (the CLI, `from_kubeconfig`)."""
    path = directory / f"faultproxy-{proxy.port}.kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: faultproxy
  cluster:
    server: {proxy.url}
users:
- name: anonymous
  user: {{}}
contexts:
- name: faultproxy
  context: {{cluster: faultproxy, user: anonymous}}
current-context: faultproxy
"""
    )
    return path
