"""The lanes webhook over a real local HTTP(S) server: an AdmissionReview in, one out.

The bodies are AdmissionReviews as the API server sends them (admission.k8s.io/v1, a Workload
CREATE); the answer's base64 JSON Patch is decoded and applied to the Workload, and the result
must carry the on-demand node selector and our lane annotations. The API server of the
integration tests runs no admission webhooks (see testenv/controlplane.py), so nothing
here goes through an API server: the MutatingWebhookConfiguration is checked in
tests/unit/test_manifests.py, and the decision itself in tests/unit/reconcile/test_admission.py.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from controller import names
from controller.reconcile.admission import LaneDecision, LaneHolder
from controller.webhook import PATH, WebhookServer, holder_decide
from tests.unit.reconcile.test_admission import FIXED_NOW, apply_patch, state, workload

Decide = Any


def review(obj: Mapping[str, Any], *, operation: str = "CREATE", **request: Any) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "kueue.x-k8s.io", "version": "v1beta2", "kind": "Workload"},
                "resource": {
                    "group": "kueue.x-k8s.io",
                    "version": "v1beta2",
                    "resource": "workloads",
                },
                "requestKind": {
                    "group": "kueue.x-k8s.io",
                    "version": "v1beta2",
                    "kind": "Workload",
                },
                "name": obj["metadata"].get("name"),
                "namespace": "vision",
                "operation": operation,
                "userInfo": {"username": "system:serviceaccount:kueue-system:kueue-controller"},
                "object": obj,
                "oldObject": None,
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
                **request,
            },
        }
    ).encode()


def serve(decide: Decide, cert_dir: Path | None = None) -> WebhookServer:
    server = WebhookServer("127.0.0.1", 0, decide=decide, cert_dir=cert_dir)
    server.start()
    return server


@pytest.fixture
def holder() -> LaneHolder:
    made = LaneHolder()
    made.publish(state(room=8))
    return made


@pytest.fixture
def server(holder: LaneHolder) -> Iterator[WebhookServer]:
    started = serve(holder_decide(holder, clock=lambda: FIXED_NOW))
    yield started
    started.stop()


def post(
    server: WebhookServer, body: bytes, path: str = PATH, context: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    if context is None:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    else:
        connection = http.client.HTTPSConnection(
            "localhost", server.port, timeout=10, context=context
        )
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def answer(server: WebhookServer, body: bytes) -> dict[str, Any]:
    status, raw = post(server, body)
    assert status == 200, raw
    got: dict[str, Any] = json.loads(raw)
    assert (got["apiVersion"], got["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert got["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    response: dict[str, Any] = got["response"]
    assert response["allowed"] is True
    return response


def test_a_workload_created_with_a_deadline_spot_would_miss_is_patched_onto_on_demand(
    server: WebhookServer,
) -> None:
    obj = workload(hours=7.5)

    response = answer(server, review(obj))

    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    patched = apply_patch(json.loads(json.dumps(obj)), patch)
    template = patched["spec"]["podSets"][0]["template"]["spec"]
    assert template["nodeSelector"] == {names.CAPACITY_TYPE_LABEL: names.ON_DEMAND}
    notes = patched["metadata"]["annotations"]
    assert notes[names.ANNOTATION_LANE] == names.ON_DEMAND
    assert notes[names.ANNOTATION_LANE_REASON].startswith("43140s to its deadline")


def test_the_namespace_comes_from_the_request_when_the_object_has_none(
    server: WebhookServer,
) -> None:
    obj = workload(hours=7.5)
    del obj["metadata"]["namespace"]

    assert "patch" in answer(server, review(obj))


@pytest.mark.parametrize(
    ("why", "body"),
    [
        ("spot makes it in time", review(workload(hours=1))),
        (
            "the owner chose spot",
            review(workload(node_selector={names.CAPACITY_TYPE_LABEL: "spot"})),
        ),
        ("an update, not a creation", review(workload(), operation="UPDATE")),
        (
            "not a Workload",
            review(workload(), kind={"group": "batch", "version": "v1", "kind": "Job"}),
        ),
    ],
)
def test_allowed_unchanged(server: WebhookServer, why: str, body: bytes) -> None:
    response = answer(server, body)

    assert "patch" not in response and "patchType" not in response, why


def test_a_dry_run_is_answered_but_takes_no_room(server: WebhookServer) -> None:
    assert "patch" in answer(server, review(workload(), dryRun=True))
    assert "patch" in answer(server, review(workload()))
    other = workload()
    other["metadata"]["name"] = "job-other"
    assert "patch" not in answer(server, review(other))  # the 8 GPUs went to the real one


def test_a_decision_that_fails_never_blocks_the_workload() -> None:
    def broken(_workload: Mapping[str, Any], _dry_run: bool) -> LaneDecision | None:
        raise RuntimeError("a bug")

    started = serve(broken)
    try:
        response = answer(started, review(workload()))
    finally:
        started.stop()

    assert "patch" not in response


def test_before_the_first_pass_nothing_is_patched() -> None:
    started = serve(holder_decide(LaneHolder(), clock=lambda: FIXED_NOW))
    try:
        assert "patch" not in answer(started, review(workload()))
    finally:
        started.stop()


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [(PATH, b"not json", 400), (PATH, b"", 400), ("/mutate-other", b"{}", 404)],
)
def test_what_is_no_review_is_refused(
    server: WebhookServer, path: str, body: bytes, status: int
) -> None:
    assert post(server, body, path)[0] == status


def test_over_tls_with_the_certificate_of_the_directory(tmp_path: Path, holder: LaneHolder) -> None:
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
            "-keyout", str(tmp_path / "tls.key"), "-out", str(tmp_path / "tls.crt"),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
    started = serve(holder_decide(holder, clock=lambda: FIXED_NOW), cert_dir=tmp_path)
    try:
        status, raw = post(started, review(workload()), context=context)
        with pytest.raises(OSError):  # plain HTTP to a TLS port gets no answer
            post(started, review(workload()))
    finally:
        started.stop()

    assert status == 200
    assert json.loads(raw)["response"]["patchType"] == "JSONPatch"
