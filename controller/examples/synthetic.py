"""Synthetic policies of a chosen size, for scale tests and `make bench`.

They follow the shape of real fleets (a few tiers, projects spread over pools, a share of them
with deadlines and budgets) and are deterministic for a given size, so benchmark figures and
schema checks are repeatable. The deadlines recur (`release` monthly on the 15th at 17:00 UTC,
`weekly` on Fridays), so a controller running on the real clock always has a cutoff ahead.
"""

from __future__ import annotations

from typing import Any

from controller.api.types import API_VERSION

TIERS = (
    ("production", 100000, "LowerPriority"),
    ("research", 1000, "LowerPriority"),
    ("exploratory", 100, "Never"),
)


def synthetic_documents(*, projects: int, pools: int) -> list[dict[str, Any]]:
    """One CapacityPolicy and `projects` TrainingProjects spread round-robin over `pools`."""
    per_project = 8
    pool_size = per_project * ((projects + pools - 1) // pools) * 2 + 64
    policy = {
        "apiVersion": API_VERSION,
        "kind": "CapacityPolicy",
        "metadata": {"name": "synthetic"},
        "spec": {
            "tiers": [
                {"name": name, "priority": priority, "preemption": preemption}
                for name, priority, preemption in TIERS
            ],
            "pools": [
                {
                    "name": f"pool-{i}",
                    "zones": [f"zone-{i % 3}"],
                    "instanceTypes": ["p4d.24xlarge"],
                    "gpusPerNode": 8,
                    "maxGpus": pool_size,
                    "onDemand": {"floorGpus": 8, "ceilingGpus": pool_size // 2},
                    "nodeClass": {"name": f"gpu-{i}"},
                    "prices": {"spotPerGpuHour": 1.2, "onDemandPerGpuHour": 4.1},
                    "warmPool": {"minGpus": 0, "maxGpus": 16},
                }
                for i in range(pools)
            ],
        },
    }
    documents: list[dict[str, Any]] = [policy]
    for i in range(projects):
        tier = TIERS[i % len(TIERS)][0]
        spec: dict[str, Any] = {
            "tier": tier,
            "namespaces": [f"team-{i}", f"team-{i}-batch"],
            "quotas": [
                {
                    "pool": f"pool-{(i + j) % pools}",
                    "nominalGpus": per_project // 2,
                    "borrowingLimitGpus": 4,
                }
                for j in range(min(2, pools))
            ],
            "allowSpot": i % 5 != 0,
        }
        if i % 2 == 0:
            spec["deadlines"] = [
                {"name": "release", "schedule": "0 17 15 * *", "timeZone": "UTC"},
                {"name": "weekly", "schedule": "0 18 * * FRI", "timeZone": "Europe/Berlin"},
            ]
        if i % 3 == 0:
            spec["budget"] = {"dollarsPerMonth": 50000}
        documents.append(
            {
                "apiVersion": API_VERSION,
                "kind": "TrainingProject",
                "metadata": {"name": f"project-{i:05d}"},
                "spec": spec,
            }
        )
    return documents
