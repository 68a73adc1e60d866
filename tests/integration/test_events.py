"""Events written to a real API server: their shape, series for repeats, and best effort.

Event is a stand-in CRD here (testenv/standins): the test API server serves
`events.k8s.io/v1` Event as a custom resource without the built-in schema or validation, so
these tests read every field back and check it against what the real Event API requires.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.kube.events import EventRecorder, event_name, truncate_note
from controller.kube.leader import parse_microtime
from testenv.controlplane import ControlPlane
from tests.builders import policy_doc
from tests.clock import Clock
from tests.integration.conftest import ensure_namespaces, new_client

INSTANCE = "quartermaster-7d9f-abcde"
MICROTIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


FIXED_NOW = datetime(2026, 11, 21, 13, 4, 5, 123456, tzinfo=UTC)
"""The recorder's injected clock starts here; the server stores eventTime as given, so the
expected times below follow from it whatever the date."""


@pytest.fixture
def recorder_client(control_plane: ControlPlane, kube: KubeClient) -> Iterator[KubeClient]:
    """The recorder's own client, with a short retry deadline so an outage fails fast."""
    client = new_client(control_plane, max_delay_seconds=1.0)
    yield client
    client.close()


@pytest.fixture
def subject(kube: KubeClient) -> dict[str, Any]:
    """A live namespaced object to write Events about (a Lease: any kind will do), in a
    namespace created first where the server has namespaces."""
    ensure_namespaces(kube, "team-a")
    return kube.create(
        kinds.LEASE,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "subject", "namespace": "team-a"},
            "spec": {},
        },
    )


def events_in(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items, _ = kube.list(kinds.EVENT, namespace=namespace)
    return items


def test_emit_creates_an_event_shaped_as_the_events_api_requires(
    kube: KubeClient, recorder_client: KubeClient, subject: dict[str, Any]
) -> None:
    clock = Clock(FIXED_NOW)
    recorder = EventRecorder(recorder_client, reporting_instance=INSTANCE, wall_clock=clock)
    name = recorder.emit(
        subject,
        type="Warning",
        reason="QuotaExceeded",
        action="Reconcile",
        note="pool a100 is over its on-demand ceiling",
    )
    assert name is not None
    assert re.fullmatch(r"subject\.[0-9a-f]{16}", name)
    event = kube.get(kinds.EVENT, name, "team-a")
    assert event is not None
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["kind"] == "Event"
    assert event["metadata"]["namespace"] == "team-a"
    assert event["eventTime"] == "2026-11-21T13:04:05.123456Z"
    assert MICROTIME.fullmatch(event["eventTime"])
    assert event["reportingController"] == "quartermaster.dev/controller"
    assert event["reportingInstance"] == INSTANCE
    assert event["type"] == "Warning"
    assert event["reason"] == "QuotaExceeded"
    assert event["action"] == "Reconcile"
    assert event["note"] == "pool a100 is over its on-demand ceiling"
    assert event["regarding"] == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "name": "subject",
        "namespace": "team-a",
        "uid": subject["metadata"]["uid"],
    }
    assert "series" not in event


def test_a_repeat_counts_on_the_existing_event_instead_of_creating_another(
    kube: KubeClient, recorder_client: KubeClient, subject: dict[str, Any]
) -> None:
    clock = Clock(FIXED_NOW)
    recorder = EventRecorder(recorder_client, reporting_instance=INSTANCE, wall_clock=clock)

    def emit(note: str = "pool a100 is over its on-demand ceiling") -> str | None:
        return recorder.emit(
            subject, type="Warning", reason="QuotaExceeded", action="Reconcile", note=note
        )

    first = emit()
    clock.now += timedelta(minutes=4)
    second = emit()
    clock.now += timedelta(minutes=9)  # within ten minutes of the previous one
    third = emit()
    assert first == second == third
    events = events_in(kube, "team-a")
    assert len(events) == 1
    assert events[0]["series"] == {"count": 3, "lastObservedTime": "2026-11-21T13:17:05.123456Z"}
    assert events[0]["eventTime"] == "2026-11-21T13:04:05.123456Z", "the first time stays"
    assert recorder_client.stats.by_verb["POST"] == 1
    assert recorder_client.stats.by_verb["PATCH"] == 2

    other = emit(note="pool a100 is back under its ceiling")
    assert other != first, "a different note is a different Event"
    clock.now += timedelta(minutes=10, seconds=1)
    late = emit()
    assert late not in {first, other}, "a repeat after the window starts a new Event"
    assert len(events_in(kube, "team-a")) == 3


def test_a_repeat_of_an_event_deleted_from_the_server_creates_it_again(
    kube: KubeClient, recorder_client: KubeClient, subject: dict[str, Any]
) -> None:
    recorder = EventRecorder(
        recorder_client, reporting_instance=INSTANCE, wall_clock=Clock(FIXED_NOW)
    )
    first = recorder.emit(subject, type="Normal", reason="Applied", action="Apply", note="ok")
    assert first is not None
    assert kube.delete(kinds.EVENT, first, "team-a")  # as the server's one-hour TTL would
    again = recorder.emit(subject, type="Normal", reason="Applied", action="Apply", note="ok")
    assert again is not None and again != first
    event = kube.get(kinds.EVENT, again, "team-a")
    assert event is not None
    assert "series" not in event


def test_events_about_a_cluster_scoped_object_go_to_the_default_namespace(
    kube: KubeClient, recorder_client: KubeClient
) -> None:
    policy = kube.apply(kinds.CAPACITY_POLICY, policy_doc(), field_manager="test")
    recorder = EventRecorder(recorder_client, reporting_instance=INSTANCE)
    long_note = "é" * 600  # 1200 bytes of UTF-8
    name = recorder.emit(
        policy, type="Normal", reason="PolicyAccepted", action="Validate", note=long_note
    )
    assert name is not None and name.startswith("fleet.")
    event = kube.get(kinds.EVENT, name, "default")
    assert event is not None
    assert event["regarding"] == {
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "CapacityPolicy",
        "name": "fleet",
        "uid": policy["metadata"]["uid"],
    }
    assert event["note"] == "é" * 512
    assert len(event["note"].encode()) == 1024
    event_time = parse_microtime(event["eventTime"])
    assert event_time is not None
    assert abs((datetime.now(UTC) - event_time).total_seconds()) < 60


def test_a_failure_to_emit_is_logged_and_never_raised(
    control_plane: ControlPlane, recorder_client: KubeClient, subject: dict[str, Any]
) -> None:
    recorder = EventRecorder(
        recorder_client, reporting_instance=INSTANCE, wall_clock=Clock(FIXED_NOW)
    )
    first = recorder.emit(subject, type="Normal", reason="Applied", action="Apply", note="ok")
    assert first is not None
    control_plane.stop_apiserver()
    started = time.monotonic()
    with capture_logs() as logs:
        created = recorder.emit(
            subject, type="Warning", reason="ApplyFailed", action="Apply", note="down"
        )
        repeated = recorder.emit(
            subject, type="Normal", reason="Applied", action="Apply", note="ok"
        )
    elapsed = time.monotonic() - started
    assert created is None and repeated is None
    failures = [entry for entry in logs if entry["event"] == "event_emit_failed"]
    assert [f["reason"] for f in failures] == ["ApplyFailed", "Applied"]
    assert elapsed < 10, "bounded by the client's retry deadline"
    control_plane.start_apiserver()


@pytest.mark.parametrize(
    ("regarding", "fields"),
    [
        ({"kind": "Lease", "metadata": {"name": "x"}}, {}),
        ({"apiVersion": "v1", "kind": "Lease", "metadata": {}}, {}),
        (None, {"reason": "not camel case"}),
        (None, {"action": ""}),
        (None, {"reason": "R" * 129}),
        (None, {"type": "Error"}),
    ],
)
def test_an_invalid_event_is_dropped_with_a_log_line_not_an_exception(
    recorder_client: KubeClient,
    subject: dict[str, Any],
    regarding: dict[str, Any] | None,
    fields: dict[str, Any],
) -> None:
    recorder = EventRecorder(recorder_client, reporting_instance=INSTANCE)
    arguments: dict[str, Any] = {
        "type": "Normal",
        "reason": "Applied",
        "action": "Apply",
        "note": "ok",
        **fields,
    }
    with capture_logs() as logs:
        assert recorder.emit(regarding or subject, **arguments) is None
    assert [entry["event"] for entry in logs] == ["event_emit_failed"]
    assert recorder_client.stats.writes == 0


@pytest.mark.parametrize(
    "arguments",
    [
        {"reporting_instance": ""},
        {"reporting_instance": INSTANCE, "reporting_controller": "not a name!"},
        {"reporting_instance": INSTANCE, "namespace_for_cluster_scoped": "team-a"},
    ],
)
def test_the_recorder_refuses_settings_the_api_server_would_reject(
    arguments: dict[str, Any],
) -> None:
    with pytest.raises(ValueError):
        EventRecorder(cast(KubeClient, object()), **arguments)


def test_names_and_notes_are_cut_to_the_server_limits() -> None:
    name = event_name("a" * 240 + "-b", "0123456789abcdef")
    assert len(name) <= 253
    assert name == "a" * 236 + ".0123456789abcdef"
    assert event_name("x" * 235 + "-yy", "0" * 16) == "x" * 235 + "." + "0" * 16
    assert truncate_note("short") == "short"
    assert truncate_note("a" * 1023 + "é") == "a" * 1023, "never half a character"
    assert truncate_note("a" * 2000) == "a" * 1024
