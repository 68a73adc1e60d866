"""One retry controller per client, shared by every request and every thread.

A `Retrying` made per request is a reference cycle (its pending actions are its own bound
methods): some 19 unreachable objects a request, hundreds a minute in a controller under churn,
each left for the cyclic collector. tenacity keeps a call's state per thread, so one serves
them all. Real HTTP on loopback (the breaking server of `test_client_transport`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from controller.kube import kinds
from tests.unit.kube.test_client_transport import breaking_server, client


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("collector_off")
def test_requests_leave_no_cyclic_garbage() -> None:
    with breaking_server(broken=0) as (url, _):
        kube = client(url, max_delay_seconds=0)
        kube.get(kinds.CAPACITY_POLICY, "gpu-fleet")
        gc.collect()
        for _ in range(50):
            kube.get(kinds.CAPACITY_POLICY, "gpu-fleet")
        assert gc.collect() == 0


def test_requests_in_several_threads_each_retry_until_answered() -> None:
    # The first six answers are cut short, whichever thread's request they belong to: every
    # request still ends with the whole object, its retries its own.
    with breaking_server(broken=6) as (url, answered):
        kube = client(url, max_delay_seconds=30)
        with ThreadPoolExecutor(max_workers=4) as pool:
            got = list(pool.map(lambda _: kube.get(kinds.CAPACITY_POLICY, "gpu-fleet"), range(12)))
    assert all(g is not None and g["metadata"]["name"] == "gpu-fleet" for g in got)
    assert len(answered) == 12 + 6
    assert kube.stats.retries == 6
