"""The sweep's Ray executor: each cell a Ray task, on a cluster or on this machine.

Ray is an optional extra (`pip install 'quartermaster[ray]'`) and is imported only here, when a
sweep is asked to use it, so neither the controller nor the local executor ever needs it.

Each trace input (the trace as read, the policy's documents) is put in the object store once
and every task of that input is handed the reference, which Ray resolves on the worker: a
trace crosses to a node once, not once per cell. The cell itself runs `sweep.run_cell`, the
function the local executor runs, so a cell's record is the same whichever ran it; a task
whose worker died is reported as that cell's failure, and the others go on.

`auto` uses the Ray that is already running for this process (a test's `ray.init`), else the
cluster `ray.init()` finds (RAY_ADDRESS, or one started with `ray start` on this machine),
else a new local one; any other value is an address for `ray.init` (`ray://head:10001`,
`head:6379`). Ray is shut down afterwards only if this executor started it. The cluster's
nodes need quartermaster installed (the same version) to import the cells' code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from controller.sim.sweep import CellInputs, CellOutcome, CellTask, crashed_outcome, run_cell

AUTO = "auto"
INSTALL_HINT = "pip install 'quartermaster[ray]' (in a checkout, make setup installs it)"


class RayMissingError(RuntimeError):
    """Ray is not installed: say how to get it."""


def _ray() -> Any:
    """The ray module, untyped for mypy: its stubs do not cover the remote-function API."""
    try:
        import ray  # noqa: PLC0415 - optional: only a sweep with --ray imports it
    except ModuleNotFoundError as exc:
        raise RayMissingError(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from exc
    return ray


class RayExecutor:
    """Cells as Ray tasks of one CPU each, at most `jobs` at once (by default, all submitted
    and Ray schedules them on the cluster's CPUs)."""

    name = "ray"

    def __init__(self, address: str = AUTO, jobs: int | None = None) -> None:
        self.address = address
        self.jobs = jobs

    def run(
        self,
        inputs: Mapping[str, CellInputs],
        tasks: Sequence[CellTask],
        *,
        running: Callable[[int], None],
        note: Callable[[str], None],
    ) -> Iterator[CellOutcome]:
        ray = _ray()
        started_here = not ray.is_initialized()
        if started_here:
            ray.init(
                address=None if self.address == AUTO else self.address,
                include_dashboard=False,
                logging_level=logging.WARNING,
            )
        pending: dict[Any, CellTask] = {}
        try:
            cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
            note(
                f"Ray executor: {cpus} CPUs in the cluster"
                + (f", at most {self.jobs} cells at once" if self.jobs else "")
            )
            remote = ray.remote(num_cpus=1, max_retries=0)(run_cell)
            refs = {input_id: ray.put(value) for input_id, value in inputs.items()}
            queue = list(reversed(tasks))
            limit = self.jobs or len(tasks)

            def submit() -> None:
                while queue and len(pending) < limit:
                    task = queue.pop()
                    pending[remote.remote(refs[task.input_id], task)] = task

            submit()
            running(min(len(pending), cpus))
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(ready[0])
                try:
                    outcome: CellOutcome = ray.get(ready[0])
                except Exception as exc:  # ray.exceptions.RayError: the worker died, or the node
                    outcome = crashed_outcome(task, exc)
                submit()
                running(min(len(pending), cpus))
                yield outcome
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if started_here:
                ray.shutdown()
