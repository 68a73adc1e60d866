"""How often a repeated Event is written (`EventRecorder` series, `flush`).

The client is a stand-in that records requests (a fake, said so): what is checked here is
which writes the recorder makes and with what count, on a clock moved by hand. That the real
API server accepts those writes is `tests/integration/test_events.py`'s part.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from controller.kube.client import KubeClient
from controller.kube.events import SERIES_REFRESH, SERIES_WINDOW, EventRecorder

FIXED_NOW = datetime(2026, 11, 21, 13, 4, 5, tzinfo=UTC)
SUBJECT = {"apiVersion": "v1", "kind": "Lease", "metadata": {"name": "s", "namespace": "ns"}}


class Recording:
    def __init__(self) -> None:
        self.creates: list[dict[str, Any]] = []
        self.patches: list[dict[str, Any]] = []

    def create(self, kind: Any, body: dict[str, Any]) -> dict[str, Any]:
        self.creates.append(body)
        return body

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        assert method == "PATCH"
        self.patches.append(kwargs["body"]["series"])
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = FIXED_NOW

    def __call__(self) -> datetime:
        return self.now


def recorder() -> tuple[EventRecorder, Recording, Clock]:
    client, clock = Recording(), Clock()
    return (
        EventRecorder(cast(KubeClient, client), reporting_instance="test", wall_clock=clock),
        client,
        clock,
    )


def emit(events: EventRecorder) -> str | None:
    return events.emit(SUBJECT, type="Warning", reason="ShiftWaiting", action="Shift", note="n")


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_condition_repeated_every_pass_is_written_once_per_refresh() -> None:
    events, client, clock = recorder()
    names = set()
    for _ in range(60):  # a pass every 2 s for two minutes
        names.add(emit(events))
        events.flush()
        clock.now += timedelta(seconds=2)
    assert len(names) == 1
    assert len(client.creates) == 1
    # The first repeat at once (the Event becomes a series), the rest held back.
    assert client.patches == [
        {"count": 2, "lastObservedTime": stamp(FIXED_NOW + timedelta(seconds=2))}
    ]

    clock.now = FIXED_NOW + SERIES_REFRESH + timedelta(seconds=2)
    assert events.flush() == 1
    last = FIXED_NOW + timedelta(seconds=118)
    assert client.patches[-1] == {"count": 60, "lastObservedTime": stamp(last)}
    assert events.flush() == 0  # nothing new


def test_a_repeat_after_the_refresh_is_written_at_once() -> None:
    events, client, clock = recorder()
    emit(events)
    clock.now += timedelta(minutes=4)
    emit(events)
    clock.now += timedelta(minutes=9)  # within the window, past the refresh
    emit(events)
    assert [p["count"] for p in client.patches] == [2, 3]


def test_after_the_window_a_repeat_starts_a_new_event() -> None:
    events, client, clock = recorder()
    first = emit(events)
    clock.now += SERIES_WINDOW + timedelta(seconds=1)
    assert emit(events) != first
    assert len(client.creates) == 2
    assert client.patches == []


def test_events_differing_in_any_part_are_series_of_their_own() -> None:
    # The recorder keeps an identity as a digest of its parts; parts run together ("a" + "bc"
    # and "ab" + "c") must still be told apart.
    events, client, _ = recorder()

    def subject(name: str, namespace: str, uid: str = "") -> dict[str, Any]:
        meta = {"name": name, "namespace": namespace} | ({"uid": uid} if uid else {})
        return {"apiVersion": "v1", "kind": "Lease", "metadata": meta}

    cases: list[tuple[dict[str, Any], str, str, str, str]] = [
        (SUBJECT, "Warning", "ShiftWaiting", "Shift", "n"),
        (SUBJECT, "Normal", "ShiftWaiting", "Shift", "n"),
        (SUBJECT, "Warning", "ShiftDone", "Shift", "n"),
        (SUBJECT, "Warning", "ShiftWaiting", "Lower", "n"),
        (SUBJECT, "Warning", "ShiftWaiting", "Shift", "n2"),
        (SUBJECT, "Warning", "ShiftWaiting", "Shift", ""),
        (subject("a", "bc"), "Warning", "ShiftWaiting", "Shift", "n"),
        (subject("ab", "c"), "Warning", "ShiftWaiting", "Shift", "n"),
        (subject("ab", "c", uid="u1"), "Warning", "ShiftWaiting", "Shift", "n"),
        (subject("ab", "c", uid="u2"), "Warning", "ShiftWaiting", "Shift", "n"),
    ]
    names = [
        events.emit(obj, type=kind, reason=reason, action=action, note=note)  # type: ignore[arg-type]
        for obj, kind, reason, action, note in cases
    ]
    assert len(set(names)) == len(cases)
    assert len(client.creates) == len(cases) and client.patches == []

    again = [
        events.emit(obj, type=kind, reason=reason, action=action, note=note)  # type: ignore[arg-type]
        for obj, kind, reason, action, note in cases
    ]
    assert again == names  # each one a repeat of its own series
    assert len(client.creates) == len(cases)
    assert [p["count"] for p in client.patches] == [2] * len(cases)
