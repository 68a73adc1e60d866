"""Karpenter's capacity errors read from Events in both APIs, and folded into per-pool
shortages, hand-computed.

The prior: a shortage lasts 900 s, worth two episodes; one episode of length L learned with the
20-episode half-life: kept = 2 x 0.5^(1/20) = 1.93187, mean = (900 x kept + L) / (kept + 1).
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.risk.capacity_errors import (
    capacity_errors,
    claim_pools,
    event_times,
    pool_from_name,
    spot_launches,
)
from controller.risk.shortage import (
    PRIOR_SHORTAGE_SECONDS,
    CapacityError,
    Shortages,
    SpotLaunch,
    expected_waits,
    fold,
)

KEPT = 2 * 0.5 ** (1 / 20)
POOLS = frozenset({"a100", "h100"})
T0 = "2026-11-23T12:00:00Z"
"""A FIXED instant the Events below carry; every expectation is relative to it."""
T0_EPOCH = 1795435200.0


def learned(length: float) -> float:
    return (PRIOR_SHORTAGE_SECONDS * KEPT + length) / (KEPT + 1)


def core_event(
    claim: str,
    *,
    uid: str = "u1",
    first: str = T0,
    last: str = T0,
    count: int = 1,
    reason: str = "InsufficientCapacityError",
    kind: str = "NodeClaim",
    api_version: str = "karpenter.sh/v1",
) -> dict[str, Any]:
    """A core v1 Event as Karpenter's recorder writes it."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{claim}.187a", "namespace": "default", "uid": uid},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "name": claim},
        "reason": reason,
        "type": "Warning",
        "message": f"NodeClaim {claim} event: insufficient capacity",
        "firstTimestamp": first,
        "lastTimestamp": last,
        "count": count,
        "source": {"component": "karpenter"},
    }


def events_v1(claim: str, *, uid: str = "u1", **times: Any) -> dict[str, Any]:
    """An events.k8s.io/v1 Event: as the API shows a core one (deprecated* fields, no
    eventTime), or written in the new shape (eventTime and series)."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{claim}.187a", "namespace": "default", "uid": uid},
        "regarding": {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim},
        "reason": "InsufficientCapacityError",
        "type": "Warning",
        "note": f"NodeClaim {claim} event: insufficient capacity",
        "eventTime": None,
        **times,
    }


def node_claim(
    name: str,
    nodepool: str,
    *,
    created: str = T0,
    ready: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}] if ready else []
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": uid or name,
            "creationTimestamp": created,
            "labels": {"karpenter.sh/nodepool": nodepool},
        },
        "status": {"conditions": conditions},
    }


# ---------------------------------------------------------------------------- reading Events
@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("a100-spot-x7k2p", ("a100", "spot")),
        ("a100-on-demand-x7k2p", ("a100", "on-demand")),
        ("h100-spot-abcde", ("h100", "spot")),
        ("a100-spot", None),  # no suffix: not a generated name
        ("a100-spot-x7-k2p", None),  # the suffix has no dash
        ("v100-spot-x7k2p", None),  # not one of the policy's pools
    ],
)
def test_a_node_claims_pool_from_its_generated_name(name: str, want: Any) -> None:
    assert pool_from_name(name, POOLS) == want


def test_the_longest_pool_name_wins_a_generated_name() -> None:
    assert pool_from_name("big-a100-spot-x7k2p", {"a100", "big-a100"}) == ("big-a100", "spot")


@pytest.mark.parametrize(
    ("event", "want"),
    [
        pytest.param(core_event("c", first=T0), (0.0, 0.0), id="core v1, once"),
        pytest.param(
            core_event("c", first=T0, last="2026-11-23T12:05:00Z", count=3),
            (0.0, 300.0),
            id="core v1, repeated: first and last timestamps",
        ),
        pytest.param(
            events_v1(
                "c",
                deprecatedFirstTimestamp=T0,
                deprecatedLastTimestamp="2026-11-23T12:03:00Z",
                deprecatedCount=2,
            ),
            (0.0, 180.0),
            id="events.k8s.io/v1 showing a core Event: the deprecated timestamps",
        ),
        pytest.param(
            events_v1(
                "c",
                eventTime="2026-11-23T12:00:00.500000Z",
                series={"count": 2, "lastObservedTime": "2026-11-23T12:04:00.000000Z"},
            ),
            (0.5, 240.0),
            id="events.k8s.io/v1 in the new shape: eventTime and series",
        ),
        pytest.param(
            {"metadata": {"name": "e", "creationTimestamp": T0}},
            (0.0, 0.0),
            id="no time of its own: its creation",
        ),
        pytest.param({"metadata": {"name": "e"}}, None, id="no time at all"),
    ],
)
def test_an_events_first_and_last_occurrence(event: dict[str, Any], want: Any) -> None:
    times = event_times(event)
    assert (None if times is None else (times[0] - T0_EPOCH, times[1] - T0_EPOCH)) == want


SEEN = claim_pools(
    [
        node_claim("a100-spot-seen1", "a100-spot"),
        node_claim("odd-name", "h100-spot"),
        node_claim("a100-od-1", "a100-on-demand"),
        node_claim("foreign-1", "someone-elses-pool"),
    ]
)


@pytest.mark.parametrize(
    ("events", "want"),
    [
        pytest.param(
            [core_event("a100-spot-seen1")],
            [("a100", 0.0)],
            id="core v1 Event on a spot NodeClaim the watch saw",
        ),
        pytest.param(
            [core_event("odd-name")],
            [("h100", 0.0)],
            id="the label, not the name, gives the pool of a NodeClaim seen",
        ),
        pytest.param(
            [core_event("h100-spot-gone1")],
            [("h100", 0.0)],
            id="a NodeClaim never seen: its pool from its generated name",
        ),
        pytest.param([core_event("a100-od-1")], [], id="an on-demand NodeClaim: not spot's"),
        pytest.param([core_event("a100-on-demand-gone2")], [], id="an on-demand name: not spot's"),
        pytest.param([core_event("foreign-1")], [], id="a NodeClaim of no pool of ours"),
        pytest.param([core_event("mystery")], [], id="a name that says no pool"),
        pytest.param([core_event("a100-spot-seen1", reason="Launched")], [], id="another reason"),
        pytest.param([core_event("a100-spot-seen1", kind="Pod")], [], id="about another kind"),
        pytest.param(
            [core_event("a100-spot-seen1", api_version="other.example.com/v1")],
            [],
            id="a NodeClaim of another group",
        ),
        pytest.param(
            [
                core_event("a100-spot-seen1", first=T0, last="2026-11-23T12:06:00Z", count=3),
                events_v1(
                    "a100-spot-seen1",
                    deprecatedFirstTimestamp=T0,
                    deprecatedLastTimestamp="2026-11-23T12:06:00Z",
                ),
            ],
            [("a100", 0.0), ("a100", 360.0)],
            id="one Event in both APIs counts once, its first and last occurrence",
        ),
        pytest.param(
            [core_event("a100-spot-seen1", first=T0, last="2026-11-23T12:20:00Z", count=2)],
            [("a100", 1200.0)],
            id="first and last further apart than the quiet time: only the last",
        ),
        pytest.param(
            [
                core_event("a100-spot-seen1", uid="u1"),
                core_event(
                    "h100-spot-gone1",
                    uid="u2",
                    first="2026-11-23T12:01:00Z",
                    last="2026-11-23T12:01:00Z",
                ),
            ],
            [("a100", 0.0), ("h100", 60.0)],
            id="two Events, two pools",
        ),
    ],
)
def test_capacity_errors_of_spot_node_claims(
    events: list[dict[str, Any]], want: list[tuple[str, float]]
) -> None:
    errors = capacity_errors(events, SEEN, POOLS)
    assert [(e.pool, e.at - T0_EPOCH) for e in errors] == want
    assert len({e.key for e in errors}) == len(errors)


def test_spot_launches_are_the_ready_spot_node_claims() -> None:
    launches = spot_launches(
        [
            node_claim("a", "a100-spot", ready="2026-11-23T12:05:00Z"),
            node_claim("b", "a100-spot"),  # not Ready yet
            node_claim("c", "a100-on-demand", ready="2026-11-23T12:05:00Z"),
            node_claim("d", "elsewhere", ready="2026-11-23T12:05:00Z"),
        ]
    )
    assert launches == [SpotLaunch("a100", requested=T0_EPOCH, ready=T0_EPOCH + 300, key="a")]


# ---------------------------------------------------------------------------------- folding
def err(at: float, key: str = "", pool: str = "a100") -> CapacityError:
    return CapacityError(pool=pool, at=at, key=key or f"e@{at}")


def up(requested: float, ready: float, key: str = "", pool: str = "a100") -> SpotLaunch:
    return SpotLaunch(pool=pool, requested=requested, ready=ready, key=key or f"n@{ready}")


Step = tuple[list[CapacityError], list[SpotLaunch], float]


@pytest.mark.parametrize(
    ("steps", "started", "last_error", "mean", "waits"),
    [
        pytest.param(
            [([err(100)], [], 150)],
            100,
            100,
            PRIOR_SHORTAGE_SECONDS,
            {"a100": 900.0},
            id="an error starts a shortage: the prior's 900 s",
        ),
        pytest.param(
            [([err(100)], [], 150), ([err(100)], [], 200), ([err(100)], [], 250)],
            100,
            100,
            PRIOR_SHORTAGE_SECONDS,
            {"a100": 900.0},
            id="the same error seen on every pass is folded once",
        ),
        pytest.param(
            [([err(100)], [], 150), ([err(100), err(280)], [], 300)],
            100,
            280,
            PRIOR_SHORTAGE_SECONDS,
            {"a100": 900.0},
            id="a later error keeps it on from the first",
        ),
        pytest.param(
            [([err(100)], [], 150), ([err(100)], [up(400, 700)], 800)],
            None,
            None,
            learned(300),
            {},
            id="a spot node asked for at 400 and Ready at 700 ends it: 300 s learned",
        ),
        pytest.param(
            [([err(100)], [], 150), ([err(100)], [up(50, 150)], 200)],
            100,
            100,
            PRIOR_SHORTAGE_SECONDS,
            {"a100": 900.0},
            id="a node asked for before the shortage says nothing of it",
        ),
        pytest.param(
            [([err(100)], [], 150), ([], [], 100 + 601)],
            None,
            None,
            learned(0),
            {},
            id="no error for ten minutes: over, lasting until its last error",
        ),
        pytest.param(
            [([err(100), err(500)], [], 550), ([err(300)], [up(350, 480)], 560)],
            100,
            500,
            PRIOR_SHORTAGE_SECONDS,
            {"a100": 900.0},
            id="what arrives after something later was folded is left out",
        ),
        pytest.param(
            [([err(280), err(100)], [up(300, 600), up(20, 60, key="old")], 650)],
            None,
            None,
            learned(200),
            {},
            id="a restart folds all the cluster shows in time order",
        ),
        pytest.param(
            [([err(100), err(100, pool="h100")], [up(400, 700)], 700)],
            None,
            None,
            learned(300),
            {"h100": 900.0},
            id="pools are apart: a100's launch ends a100's shortage only",
        ),
    ],
)
def test_fold(
    steps: list[Step],
    started: float | None,
    last_error: float | None,
    mean: float,
    waits: dict[str, float],
) -> None:
    shortages = Shortages()
    now = 0.0
    for errors, launches, now in steps:
        shortages = fold(shortages, errors, launches, now=now)
    state = shortages.state("a100")
    assert (state.started, state.last_error) == (started, last_error)
    assert state.mean_seconds == pytest.approx(mean)
    assert expected_waits(shortages, now) == pytest.approx(waits)


def test_a_launch_seen_again_after_a_new_shortage_does_not_end_it() -> None:
    """A live spot NodeClaim is in every snapshot: folded once, at its Ready time."""
    shortages = fold(Shortages(), [err(100)], [up(400, 700, key="n1")], now=800)
    shortages = fold(shortages, [err(900)], [up(400, 700, key="n1")], now=950)
    assert shortages.state("a100").started == 900
    assert expected_waits(shortages, 950) == pytest.approx({"a100": learned(300)})
