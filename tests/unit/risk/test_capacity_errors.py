"""Karpenter's capacity errors read from Events in both APIs, and folded into per-pool, per-zone
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
    zones: list[str] | None = None,
    zone_label: str | None = None,
) -> dict[str, Any]:
    """A NodeClaim; `zones` its zone requirement (In), `zone_label` the zone Karpenter labels it
    with once launched."""
    conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}] if ready else []
    labels = {"karpenter.sh/nodepool": nodepool}
    if zone_label:
        labels["topology.kubernetes.io/zone"] = zone_label
    requirements: list[dict[str, Any]] = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
    ]
    if zones is not None:
        requirements.append(
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones}
        )
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": uid or name,
            "creationTimestamp": created,
            "labels": labels,
        },
        "spec": {"requirements": requirements},
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
        node_claim("a100-spot-zoned", "a100-spot", zones=["us-a", "us-b"]),
        node_claim("a100-spot-in-b", "a100-spot", zones=["us-b"]),
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


@pytest.mark.parametrize(
    ("events", "want"),
    [
        pytest.param(
            [core_event("a100-spot-zoned")],
            [(0.0, {"us-a", "us-b"})],
            id="the zones the NodeClaim's requirement allows",
        ),
        pytest.param(
            [core_event("a100-spot-in-b")], [(0.0, {"us-b"})], id="a NodeClaim held to one zone"
        ),
        pytest.param(
            [core_event("a100-spot-seen1")],
            [(0.0, set())],
            id="a NodeClaim naming no zone: any of the pool's (none named)",
        ),
        pytest.param(
            [core_event("a100-spot-gone9")],
            [(0.0, set())],
            id="a NodeClaim known only by its name: any of the pool's",
        ),
        pytest.param(
            [
                core_event("a100-spot-zoned", first=T0, last="2026-11-23T12:03:00Z", count=2),
                events_v1(
                    "a100-spot-zoned",
                    deprecatedFirstTimestamp=T0,
                    deprecatedLastTimestamp="2026-11-23T12:03:00Z",
                ),
            ],
            [(0.0, {"us-a", "us-b"}), (180.0, {"us-a", "us-b"})],
            id="one Event in both APIs counts once, with its NodeClaim's zones",
        ),
    ],
)
def test_the_zones_a_capacity_error_speaks_for(
    events: list[dict[str, Any]], want: list[tuple[float, set[str]]]
) -> None:
    errors = capacity_errors(events, SEEN, POOLS)
    assert [(e.at - T0_EPOCH, set(e.zones)) for e in errors] == want


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


@pytest.mark.parametrize(
    ("zones", "label", "want"),
    [
        pytest.param(["us-a", "us-b"], "us-b", "us-b", id="its zone label"),
        pytest.param(["us-b"], None, "us-b", id="no label: its requirement naming one zone"),
        pytest.param(["us-a", "us-b"], None, None, id="no label, two zones allowed: not known"),
        pytest.param(None, None, None, id="no label, no zone requirement: not known"),
    ],
)
def test_the_zone_a_spot_launch_ends_a_shortage_in(
    zones: list[str] | None, label: str | None, want: str | None
) -> None:
    claim = node_claim(
        "a", "a100-spot", ready="2026-11-23T12:05:00Z", zones=zones, zone_label=label
    )
    assert [launch.zone for launch in spot_launches([claim])] == [want]


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


ZONES = {"a100": ["us-a", "us-b"]}


@pytest.mark.parametrize(
    ("errors", "launches", "short", "waits"),
    [
        pytest.param(
            [CapacityError("a100", 100, "e1", frozenset({"us-a"}))],
            [],
            {"us-a"},
            {},
            id="one zone of two short: the pool is not, no wait",
        ),
        pytest.param(
            [
                CapacityError("a100", 100, "e1", frozenset({"us-a"})),
                CapacityError("a100", 120, "e2", frozenset({"us-b"})),
            ],
            [],
            {"us-a", "us-b"},
            {"a100": 450.0},
            id="both short: until the first comes back, 900 / 2",
        ),
        pytest.param(
            [err(100)],
            [],
            {"us-a", "us-b"},
            {"a100": 450.0},
            id="an error whose NodeClaim names no zone marks all the pool's",
        ),
        pytest.param(
            [err(100)],
            [SpotLaunch("a100", requested=400, ready=700, key="n1", zone="us-b")],
            {"us-a"},
            {},
            id="a launch in zone b ends b's shortage only",
        ),
    ],
)
def test_fold_per_zone(
    errors: list[CapacityError],
    launches: list[SpotLaunch],
    short: set[str],
    waits: dict[str, float],
) -> None:
    shortages = fold(Shortages(), errors, launches, now=700, zones=ZONES)
    assert set(shortages.state("a100").short) == short
    assert expected_waits(shortages, 700) == pytest.approx(waits)


def test_a_pools_zones_follow_the_policy() -> None:
    """A zone added to the pool is not short: the pool no longer is."""
    shortages = fold(Shortages(), [err(100)], [], now=200, zones=ZONES)
    assert expected_waits(shortages, 200) == {"a100": 450.0}
    grown = fold(shortages, [], [], now=210, zones={"a100": ["us-a", "us-b", "us-c"]})
    assert expected_waits(grown, 210) == {}


def test_a_launch_seen_again_after_a_new_shortage_does_not_end_it() -> None:
    """A live spot NodeClaim is in every snapshot: folded once, at its Ready time."""
    shortages = fold(Shortages(), [err(100)], [up(400, 700, key="n1")], now=800)
    shortages = fold(shortages, [err(900)], [up(400, 700, key="n1")], now=950)
    assert shortages.state("a100").started == 900
    assert expected_waits(shortages, 950) == pytest.approx({"a100": learned(300)})
