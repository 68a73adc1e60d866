"""A response whose body breaks off is a transient connection error, like a refused connection.

The API server restarting mid-answer sends the headers and part of the body, then closes: the
client read the body outside its transport-error handling, so urllib3's ProtocolError escaped
as neither a KubeError nor retried (seen in the fault test of a restart during a large
reconcile, with writes in flight at once). Real HTTP on loopback: a tiny server that announces
a longer body than it sends for the first `broken` requests, then answers in full.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes.client as k8s
import pytest

from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError, RetryPolicy

POLICY = {"apiVersion": "quartermaster.dev/v1alpha1", "kind": "CapacityPolicy"}


@contextmanager
def breaking_server(broken: int) -> Iterator[tuple[str, list[int]]]:
    """(url, answered): the first `broken` answers are cut short; `answered` counts all."""
    answered: list[int] = []
    counting = threading.Lock()  # the server answers each connection in its own thread

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({**POLICY, "metadata": {"name": "gpu-fleet"}}).encode()
            with counting:
                cut = len(answered) < broken
                answered.append(1)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:5] if cut else body)
            if cut:
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answered
    finally:
        server.shutdown()
        server.server_close()


def client(url: str, *, max_delay_seconds: float) -> KubeClient:
    configuration = k8s.Configuration()
    configuration.host = url
    configuration.retries = 0
    return KubeClient(
        k8s.ApiClient(configuration),
        retry=RetryPolicy(max_delay_seconds=max_delay_seconds, initial_seconds=0.01),
        request_timeout=10,
    )


def test_a_body_cut_short_is_a_connection_error_with_status_0() -> None:
    with (
        breaking_server(broken=1) as (url, answered),
        pytest.raises(KubeError, match="connection broken") as raised,
    ):
        client(url, max_delay_seconds=0).get(kinds.CAPACITY_POLICY, "gpu-fleet")
    assert raised.value.status == 0
    assert raised.value.retryable
    assert len(answered) == 1


def test_a_body_cut_short_is_retried_until_a_whole_answer() -> None:
    with breaking_server(broken=2) as (url, answered):
        got = client(url, max_delay_seconds=30).get(kinds.CAPACITY_POLICY, "gpu-fleet")
    assert got is not None and got["metadata"]["name"] == "gpu-fleet"
    assert len(answered) == 3
