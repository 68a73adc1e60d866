"""A pass that fails with something other than an API error does not stop the controller.

The controller serves every team; a bug that one object's content triggers must cost a logged
traceback and a backoff, not the process. The bug is injected by wrapping the real Reconciler's
`reconcile` so that its first call raises; everything else (the API server, the loop, its
watches and backoff) is real.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.kube.cache import Observed
from controller.kube.client import KubeClient
from controller.reconcile.reconciler import ReconcileResult
from testenv.controlplane import ControlPlane
from tests.integration.conftest import new_client
from tests.integration.test_controller_faults import RunningController, options, wait_for
from tests.integration.test_reconcile import apply_doc, example_documents


def test_an_unexpected_error_in_a_pass_is_logged_and_the_next_pass_runs(
    kube: KubeClient, control_plane: ControlPlane
) -> None:
    for doc in example_documents():
        apply_doc(kube, doc)
    running = RunningController(new_client(control_plane), options(leader_election=False))
    real: Callable[[Observed | None], ReconcileResult] = running.controller.reconciler.reconcile
    calls = []

    def first_call_fails(observed: Observed | None = None) -> ReconcileResult:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug one object triggers")
        return real(observed)

    running.controller.reconciler.reconcile = first_call_fails  # type: ignore[method-assign]
    running.start()
    try:
        wait_for(lambda: bool(running.results), 60, "a pass after the failed one")
    finally:
        running.stop()

    assert [type(e) for _, e in running.errors] == [RuntimeError]
    assert running.crashed == []
    assert running.controller.metrics.reconcile_errors_total._value.get() == 1
    assert running.stopped_cleanly()
