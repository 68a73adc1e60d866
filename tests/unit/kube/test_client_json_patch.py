"""The client's JSON Patch: sent as a JSON Patch, retried while the server is unavailable, and
not retried on a conflict (a patch guarded by a resourceVersion would only fail its test again).
A local HTTP server stands in for the API server and answers with the statuses given."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from controller.kube import kinds
from controller.kube.client import KubeError
from tests.unit.kube.test_client_transport import client

PATCH: list[dict[str, Any]] = [
    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
    {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
]


@contextmanager
def answering(*statuses: int) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(url, requests): each PATCH is answered with the next status (200 after the last)."""
    seen: list[dict[str, Any]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                status = statuses[len(seen)] if len(seen) < len(statuses) else 200
                seen.append({"path": self.path, "type": self.headers["Content-Type"], "body": body})
            answer = json.dumps(
                {"metadata": {"name": "w"}} if status == 200 else {"reason": "Conflict"}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_json_patch_is_sent_as_one_with_our_field_manager() -> None:
    with answering(200) as (url, seen):
        got = client(url, max_delay_seconds=5).json_patch(
            kinds.WORKLOAD, "w", "llm", PATCH, field_manager="quartermaster-lane"
        )
    assert got == {"metadata": {"name": "w"}}
    [request] = seen
    assert request["type"] == "application/json-patch+json"
    assert request["body"] == PATCH
    assert request["path"] == (
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/llm/workloads/w?fieldManager=quartermaster-lane"
    )


@pytest.mark.parametrize("status", [409, 422])
def test_a_conflict_or_a_failed_test_is_not_retried(status: int) -> None:
    with answering(status) as (url, seen), pytest.raises(KubeError) as raised:
        client(url, max_delay_seconds=5).json_patch(
            kinds.WORKLOAD, "w", "llm", PATCH, field_manager="m"
        )
    assert raised.value.status == status
    assert len(seen) == 1


def test_an_unavailable_server_is_retried() -> None:
    with answering(503, 503) as (url, seen):
        got = client(url, max_delay_seconds=5).json_patch(
            kinds.WORKLOAD, "w", "llm", PATCH, field_manager="m"
        )
    assert got["metadata"]["name"] == "w"
    assert len(seen) == 3
