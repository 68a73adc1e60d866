"""Where learning is kept, on the real test API server: the controller reads discovery, and
where core v1 is not served (this project's CRD-only server: no ConfigMaps) it keeps what it
learns in memory, says so once, and every pass runs as before. On a kube-apiserver
(`KUBEBUILDER_ASSETS`) the same test sees it kept in the ConfigMap beside the controller.

That what is kept survives a restart is tests/unit/reconcile/test_learned_store.py's part, on
the in-memory stand-in for a server that serves ConfigMaps.
"""

from __future__ import annotations

from structlog.testing import capture_logs

from controller.kube.client import KubeClient
from controller.reconcile.learned_store import StoreState
from testenv.controlplane import ControlPlane
from tests.integration.conftest import Server, new_client
from tests.integration.test_controller_faults import RunningController, options, wait_for
from tests.integration.test_reconcile import apply_doc, example_documents


def test_the_controller_says_where_what_it_learns_is_kept_and_reconciles(
    kube: KubeClient, control_plane: ControlPlane, server: Server
) -> None:
    for doc in example_documents():
        apply_doc(kube, doc)
    running = RunningController(new_client(control_plane), options(leader_election=False))
    store = running.controller.learned
    with capture_logs() as logs:
        running.start()
        try:
            wait_for(
                lambda: store.state is not StoreState.UNKNOWN and bool(running.results),
                60,
                "a pass that knows where learning is kept",
            )
            first = running.results[0][1]
        finally:
            running.stop()

    assert running.errors == []
    assert running.stopped_cleanly()
    assert first.policy == "gpu-fleet" and first.capacity is not None
    persisted = running.controller.metrics.registry.get_sample_value(
        "quartermaster_learned_state_persisted"
    )
    said = [e for e in logs if e["event"] == "learning_in_memory_only"]
    if server.core_v1:
        assert (store.state, persisted, said) == (StoreState.CONFIGMAP, 1.0, [])
    else:
        assert (store.state, persisted) == (StoreState.MEMORY, 0.0)
        assert [(e["log_level"], e["reason"]) for e in said] == [
            ("warning", "the API server serves no core v1 ConfigMaps")
        ], "said once, however many passes ran"
        assert not [e for e in logs if str(e["event"]).startswith("learned_state_")]
