"""The controller's HTTP endpoints: /healthz, /readyz (and /metrics once it exists).

Kubelet probes must get an answer even while a reconcile is slow, so the server runs on its own
threads and only reads flags the loop sets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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

        self.server = ThreadingHTTPServer((host, port), _Handler)
        self.server.daemon_threads = True
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


def _probe_handler(probe: Probe) -> Handler:
    def handle() -> tuple[int, str, bytes]:
        ok, detail = probe()
        return (200 if ok else 503), "text/plain; charset=utf-8", f"{detail}\n".encode()

    return handle
