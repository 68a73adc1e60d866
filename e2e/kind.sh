#!/usr/bin/env bash
# The e2e scenario on a kind cluster, for machines with Docker and internet access.
#
#   e2e/kind.sh            # create the cluster, install everything, run the scenario
#   e2e/kind.sh --keep     # leave the cluster running afterwards
#
# Installs, pinned: Kueue 0.19.2 (its release manifests, configured to copy our labels from Jobs
# to their Workloads: see below), KEDA (its release manifests), the
# Prometheus Operator with a Prometheus (the operator's bundle plus a small Prometheus object),
# Karpenter's NodePool/NodeClaim CRDs from third_party/crds (no Karpenter controller: there is no
# cloud provider behind kind, so NodePools are written and read but never provision a node),
# and Quartermaster itself: the image built here, loaded into kind, and `kubectl apply -k
# manifests/overlays/dev`. Then the same runner as CI, submitting batch/v1 Jobs as users do:
# `python -m e2e.scenario --kubeconfig ... --submit jobs`. Kueue makes their Workloads. The Jobs
# ask for nvidia.com/gpu, which no kind node has, so none of their pods ever runs.
#
# Kueue copies a Job's labels to its Workload only for the keys its configuration lists in
# `integrations.labelKeysToCopy` (and no annotations at all), so after installing Kueue this
# script adds quartermaster.dev/deadline, quartermaster.dev/expected-duration-seconds and
# quartermaster.dev/checkpoint-interval-seconds there: it edits the
# `controller_manager_config.yaml` of the `kueue-manager-config` ConfigMap the release ships
# (e2e/kueue_config.py), replaces the ConfigMap and restarts Kueue's controller, which reads
# its configuration only at start-up.
# A deadline that selects its Workloads with `matchLabels` needs those keys copied too: list them
# in KUEUE_EXTRA_LABEL_KEYS (space-separated), e.g.
#   KUEUE_EXTRA_LABEL_KEYS="example.com/paper" e2e/kind.sh
#
# Not run on the development machine (no Docker there); written to run as is.
set -euo pipefail

CLUSTER=${CLUSTER:-quartermaster-e2e}
KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}
KUEUE_EXTRA_LABEL_KEYS=${KUEUE_EXTRA_LABEL_KEYS:-}
KEDA_VERSION=${KEDA_VERSION:-2.17.2}
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.81.0}
KEEP=false
[ "${1:-}" = "--keep" ] && KEEP=true

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"  # `python -m e2e...` imports from the checkout
UPSTREAM_CRDS=${QUARTERMASTER_UPSTREAM_CRDS:-$REPO/third_party/crds}
KUBECONFIG_FILE=$REPO/out/e2e/kind.kubeconfig
PY=${PY:-$REPO/.venv/bin/python}
mkdir -p "$REPO/out/e2e"

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "e2e/kind.sh needs $tool on PATH" >&2; exit 2; }
done
docker info >/dev/null 2>&1 || { echo "no Docker engine answers: kind cannot run here" >&2; exit 2; }

log() { echo "[kind-e2e] $*"; }
cleanup() {
  if [ "$KEEP" = false ]; then log "deleting cluster $CLUSTER"; kind delete cluster --name "$CLUSTER" || true; fi
}
trap cleanup EXIT

log "creating cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE" --wait 120s
export KUBECONFIG=$KUBECONFIG_FILE

log "installing Kueue $KUEUE_VERSION"
kubectl apply --server-side -f "https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
kubectl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s

log "configuring Kueue to copy our labels from Jobs to Workloads (labelKeysToCopy)"
# shellcheck disable=SC2086 # the extra keys are meant to split into arguments
kubectl -n kueue-system get configmap kueue-manager-config -o json \
  | "$PY" -m e2e.kueue_config $KUEUE_EXTRA_LABEL_KEYS \
  | kubectl replace -f -
kubectl -n kueue-system rollout restart deployment/kueue-controller-manager
kubectl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s
kubectl -n kueue-system get configmap kueue-manager-config \
  -o jsonpath='{.data.controller_manager_config\.yaml}' | grep -A8 labelKeysToCopy

log "installing KEDA $KEDA_VERSION"
kubectl apply --server-side -f "https://github.com/kedacore/keda/releases/download/v$KEDA_VERSION/keda-$KEDA_VERSION.yaml"
kubectl -n keda rollout status deployment/keda-operator --timeout=300s

log "installing the Prometheus Operator $PROMETHEUS_OPERATOR_VERSION and a Prometheus"
kubectl create namespace monitoring --dry-run=client -o yaml | kubectl apply -f -
kubectl apply --server-side -f "https://github.com/prometheus-operator/prometheus-operator/releases/download/$PROMETHEUS_OPERATOR_VERSION/bundle.yaml"
kubectl -n default rollout status deployment/prometheus-operator --timeout=300s
kubectl apply -f - <<'YAML'
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: monitoring}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: prometheus-e2e}
rules:
  - apiGroups: [""]
    resources: [services, endpoints, pods]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: prometheus-e2e}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: monitoring}]
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: prometheus, namespace: monitoring}
spec:
  serviceAccountName: prometheus
  serviceMonitorNamespaceSelector: {}
  serviceMonitorSelector: {}
  ruleNamespaceSelector: {}
  ruleSelector: {}
  resources: {requests: {memory: 256Mi}}
YAML

log "installing Karpenter's CRDs (no Karpenter controller on kind)"
kubectl apply --server-side -f "$UPSTREAM_CRDS/karpenter"

log "building and loading the controller image"
docker build -t quartermaster:dev "$REPO"
kind load docker-image quartermaster:dev --name "$CLUSTER"

log "installing Quartermaster from manifests/overlays/dev"
"$PY" -c "from testenv.kustomize import kustomize_path; print(kustomize_path())" >/dev/null
KUSTOMIZE=$("$PY" -c "from testenv.kustomize import kustomize_path; print(kustomize_path())")
"$KUSTOMIZE" build "$REPO/manifests/overlays/dev" | kubectl apply --server-side -f -
kubectl -n quartermaster-system rollout status deployment/quartermaster --timeout=300s
for ns in llm; do kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -; done

log "running the scenario (batch/v1 Jobs; Kueue makes the Workloads)"
"$PY" -m e2e.scenario --kubeconfig "$KUBECONFIG_FILE" --submit jobs \
  --prometheus-url http://prometheus-operated.monitoring.svc:9090 \
  --step-timeout 300 --json "$REPO/out/e2e/kind-timeline.json"
