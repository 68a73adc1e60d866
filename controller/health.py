"""The controller's HTTP endpoints: /healthz, /readyz (and /metrics once it exists).

Kubelet probes must get an answer even while a reconcile is slow, so the server runs on its own
threads and only reads flags the loop sets.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

log = structlog.get_logger(__name__)

Probe = Callable[[], tuple[bool, str]]
Handler = Callable[[], tuple[int, str, bytes]]
"""Returns (status, content type, body)."""


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        healthz: Probe,
        readyz: Probe,
        extra: dict[str, Handler] | None = None,
    ) -> None:
        routes: dict[str, Handler] = {
            "/healthz": _probe_handler(healthz),
            "/readyz": _probe_handler(readyz),
            **(extra or {}),
        }

        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                handler = routes.get(self.path.split("?", 1)[0])
                if handler is None:
                    status, content_type, body = 404, "text/plain", b"not found\n"
                else:
                    status, content_type, body = handler()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Probes every few seconds would drown the structured log."""

        self.server = _Server((host, port), _Handler)
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="health", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Server(ThreadingHTTPServer):
    """Request errors go to the structured log, never as a bare traceback on stderr: a client
    that hangs up before its answer is written (a scrape or probe that timed out) is routine
    and logged at debug; anything else is a warning with its traceback."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        client = str(client_address[0]) if isinstance(client_address, tuple) else ""
        if isinstance(error, ConnectionError):
            log.debug("http_client_gone", client=client, error=type(error).__name__)
            return
        log.warning("http_request_failed", client=client, exc_info=True)


def _probe_handler(probe: Probe) -> Handler:
    def handle() -> tuple[int, str, bytes]:
        ok, detail = probe()
        return (200 if ok else 503), "text/plain; charset=utf-8", f"{detail}\n".encode()

    return handle
