"""Every label, annotation, field manager and derived object name, defined once.

Rendered objects, the reconciler's pruning selector, the simulator and the dashboards all
refer to these; spelling one of them twice is how a controller starts orphaning objects.
"""

from __future__ import annotations

from controller import __version__

DOMAIN = "quartermaster.dev"
FIELD_MANAGER = "quartermaster"
# Fields we set only at creation (a warm pool's starting replicas) are shared with this manager
# right after the create, so our later applies can leave them to the autoscaler.
INITIAL_FIELD_MANAGER = "quartermaster-initial"
# On every request: the API server names the manager of a write without a fieldManager (Event
# and Lease creates and updates) after it, and audit logs show it.
USER_AGENT = f"quartermaster/{__version__}"
DEFAULT_NAMESPACE = "quartermaster-system"

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "quartermaster"
LABEL_POLICY = f"{DOMAIN}/policy"
LABEL_PROJECT = f"{DOMAIN}/project"
LABEL_POOL = f"{DOMAIN}/pool"
LABEL_TIER = f"{DOMAIN}/tier"
LABEL_COMPONENT = "app.kubernetes.io/component"

# Workloads opt in to a deadline with this label; annotations carry what the risk model needs.
LABEL_DEADLINE = f"{DOMAIN}/deadline"
ANNOTATION_EXPECTED_DURATION = f"{DOMAIN}/expected-duration-seconds"
ANNOTATION_CHECKPOINT_INTERVAL = f"{DOMAIN}/checkpoint-interval-seconds"
# The same keys as labels: Kueue copies no annotation from a Job to the Workload it makes, and
# copies a label only when its `integrations.labelKeysToCopy` names it, so for Jobs (JobSets,
# PyTorchJobs, RayJobs) the label is the way through. Plain seconds ("14400") are a valid label
# value. An annotation on the Workload wins over the label.
LABEL_EXPECTED_DURATION = ANNOTATION_EXPECTED_DURATION
LABEL_CHECKPOINT_INTERVAL = ANNOTATION_CHECKPOINT_INTERVAL
LABEL_KEYS_TO_COPY = (LABEL_DEADLINE, LABEL_EXPECTED_DURATION, LABEL_CHECKPOINT_INTERVAL)
"""What Kueue's `integrations.labelKeysToCopy` must list for Jobs to reach the risk model
(plus the keys of any deadline's `matchLabels`)."""
# Kueue's effective-priority adjustment, and our mark that we set it (so we only remove ours).
ANNOTATION_PRIORITY_BOOST = "kueue.x-k8s.io/priority-boost"
ANNOTATION_BOOSTED = f"{DOMAIN}/boosted"
BOOST_FIELD_MANAGER = "quartermaster-boost"
# A deadline workload's lane: the capacity type we put in its pending pod sets' node selector
# (`CAPACITY_TYPE_LABEL`), and why. A Workload whose pods select a capacity type without our
# lane annotation was placed by its owner and is never touched.
ANNOTATION_LANE = f"{DOMAIN}/lane"
ANNOTATION_LANE_REASON = f"{DOMAIN}/lane-reason"
LANE_FIELD_MANAGER = "quartermaster-lane"
# A workload admitted on spot whose pods wait for a node its deadline cannot wait for is moved
# to its on-demand lane in two writes: deactivated (`spec.active: false`, so Kueue evicts it
# and gives its spot quota back) with this annotation naming the lane it goes to, then, once
# Kueue holds no quota for it, put in that lane and activated again with the annotation
# removed. A Workload that carries it while inactive is always activated again, whatever the
# policy says by then: nothing this controller stops stays stopped.
ANNOTATION_MOVING_TO = f"{DOMAIN}/moving-to"
# The desired object as last applied, so fields the policy drops are noticed and removed.
ANNOTATION_LAST_APPLIED = f"{DOMAIN}/last-applied"

MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"
LEASE_NAME = "quartermaster-controller"
LEARNED_STATE_NAME = "quartermaster-learned"
"""The ConfigMap in the controller's namespace that keeps what it learned across restarts."""
REPORTING_CONTROLLER = f"{DOMAIN}/controller"

SPOT_TAINT_KEY = f"{DOMAIN}/spot"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

SPOT = "spot"
ON_DEMAND = "on-demand"
CAPACITY_TYPES = (SPOT, ON_DEMAND)
NODEPOOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_ERROR_REASON = "InsufficientCapacityError"
"""The reason of the Event Karpenter publishes on a NodeClaim whose launch the cloud could not
serve (just before it deletes the NodeClaim)."""

WARM_POOL_PRIORITY_CLASS = "quartermaster-warm-pool"
WARM_POOL_TARGET_METRIC = "quartermaster_warm_pool_target_gpus"


def flavor_name(pool: str, capacity_type: str) -> str:
    return f"{pool}-{capacity_type}"


def nodepool_name(pool: str, capacity_type: str) -> str:
    return f"{pool}-{capacity_type}"


def root_cohort_name(policy: str) -> str:
    return policy


def tier_cohort_name(policy: str, tier: str) -> str:
    return f"{policy}-tier-{tier}"


def warm_pool_name(pool: str) -> str:
    return f"warm-{pool}"
