"""The mutating admission webhook: a lane put on a Workload as it is created.

The API server POSTs an AdmissionReview (admission.k8s.io/v1) for each Workload CREATE to
`/mutate-workload-lanes`; the answer is an AdmissionReview with `allowed: true` always, and,
when the last pass's figures give the Workload an on-demand lane
(`controller.reconcile.admission`), a base64 JSON Patch (`patchType: JSONPatch`) that sets its
pod sets' node selector and our lane annotations. A webhook that cannot decide must never block
a Workload: the MutatingWebhookConfiguration says `failurePolicy: Ignore`, and this server
answers allowed even when the review is odd or the decision fails (the pass still writes the
lane later if the Workload is still pending).

HTTPS from a certificate directory (`tls.crt`, `tls.key`, as a Secret of type kubernetes.io/tls
mounts them): the files are read again when they change, so a certificate cert-manager renews
is served without a restart. Without a directory the server speaks plain HTTP (tests only: the
API server calls webhooks over HTTPS). It runs on its own threads, like the health server.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import structlog

from controller.health import _Server
from controller.reconcile.admission import LaneDecision, LaneHolder

log = structlog.get_logger(__name__)

PATH = "/mutate-workload-lanes"
MAX_BODY_BYTES = 3 * 1024 * 1024
"""An AdmissionReview carries one object, which etcd limits to 1.5 MiB; twice that and more is
no review."""
REVIEW_API_VERSION = "admission.k8s.io/v1"
CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
HANDSHAKE_SECONDS = 5.0
"""A connection's TLS handshake and request must come within this (the API server gives the
webhook 2 s in all)."""

Decide = Callable[[Mapping[str, Any], bool], LaneDecision | None]
"""(a Workload being created, whether the request is a dry run) -> its lane, or None."""


def _is_workload(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    kind = kind if isinstance(kind, Mapping) else {}
    return kind.get("group") == "kueue.x-k8s.io" and kind.get("kind") == "Workload"


def review_response(review: Any, decide: Decide) -> dict[str, Any]:
    """The AdmissionReview answering `review`: allowed, with the lane's patch when there is
    one. A CREATE of a Workload is decided on; anything else is let through unchanged. The
    object gets the request's namespace when it has none (the API server fills it in from the
    path, but only after it asked us)."""
    request = review.get("request") if isinstance(review, Mapping) else None
    request = request if isinstance(request, Mapping) else {}
    response: dict[str, Any] = {"uid": str(request.get("uid") or ""), "allowed": True}
    answer = {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response}
    obj = request.get("object")
    if request.get("operation") != "CREATE" or not _is_workload(request):
        return answer
    if not isinstance(obj, Mapping):
        return answer
    meta = obj.get("metadata")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    if not meta.get("namespace") and request.get("namespace"):
        meta["namespace"] = request["namespace"]
    workload = {**obj, "metadata": meta}
    try:
        decision = decide(workload, request.get("dryRun") is True)
    except Exception:  # never block a Workload on our bug: log it, let it through
        log.exception("webhook_decision_failed", namespace=meta.get("namespace"))
        return answer
    if decision is None:
        return answer
    patch = json.dumps(decision.operations, separators=(",", ":")).encode()
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(patch).decode()
    log.info(
        "lane_at_creation",
        namespace=meta.get("namespace"),
        name=meta.get("name") or meta.get("generateName"),
        project=decision.project,
        lane=decision.lane.capacity_type,
        reason=decision.lane.reason,
        dry_run=bool(request.get("dryRun")),
    )
    return answer


def holder_decide(holder: LaneHolder, clock: Callable[[], float] = time.time) -> Decide:
    """The webhook's decision: the holder's, at the clock's time. A dry run's lane takes no
    room: no Workload will be created."""

    def decide(workload: Mapping[str, Any], dry_run: bool) -> LaneDecision | None:
        return holder.decide(workload, now=clock(), take_room=not dry_run)

    return decide


class CertificateReloader:
    """A server TLS context from `tls.crt` and `tls.key` in a directory, made again when either
    file changes (a renewed Secret is remounted in place): each connection asks for the
    current one, at the cost of two stats."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._context = self._load()

    def _stat(self) -> tuple[int, ...]:
        return tuple(os.stat(self.directory / name).st_mtime_ns for name in (CERT_FILE, KEY_FILE))

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.directory / CERT_FILE, self.directory / KEY_FILE)
        return context

    def current(self) -> ssl.SSLContext:
        """The context of the files as they are now (the last good one while they are half
        written or gone)."""
        with self._lock:
            try:
                stamp = self._stat()
                if stamp != self._stamp:
                    self._context = self._load()
                    self._stamp = stamp
                    log.info("webhook_certificate_reloaded", directory=str(self.directory))
            except (OSError, ssl.SSLError) as error:
                log.warning("webhook_certificate_unreadable", error=str(error)[:200])
            return self._context


class _WebhookHTTPServer(_Server):
    """The TLS handshake is made on the request's own thread, with a timeout: made in `accept`,
    as a wrapped listening socket does, one slow client would hold up every other."""

    tls: CertificateReloader | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_SECONDS)
        try:
            connection = self.tls.current().wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as error:
            log.debug("webhook_handshake_failed", error=str(error)[:200])
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            connection.close()


class WebhookServer:
    """Serves `PATH` over HTTPS (plain HTTP without a certificate directory)."""

    def __init__(
        self, host: str, port: int, *, decide: Decide, cert_dir: Path | None = None
    ) -> None:
        class _Handler(BaseHTTPRequestHandler):
            timeout = HANDSHAKE_SECONDS

            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] != PATH:
                    self._send(404, b"not found\n", "text/plain")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 < length <= MAX_BODY_BYTES:
                    self._send(400, b"an AdmissionReview body is required\n", "text/plain")
                    return
                try:
                    review = json.loads(self.rfile.read(length))
                except ValueError:
                    self._send(400, b"the body is not JSON\n", "text/plain")
                    return
                body = json.dumps(review_response(review, decide)).encode()
                self._send(200, body, "application/json")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Every Workload creation would be a line: the decisions are logged instead."""

        self.server = _WebhookHTTPServer((host, port), _Handler)
        if cert_dir is not None:
            self.server.tls = CertificateReloader(cert_dir)
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="webhook", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("webhook_serving", port=self.port, path=PATH, tls=self.server.tls is not None)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


__all__ = [
    "PATH",
    "CertificateReloader",
    "WebhookServer",
    "holder_decide",
    "review_response",
]
