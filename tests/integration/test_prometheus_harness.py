"""The Prometheus test harness itself: a real server scrapes a real exporter and answers
PromQL through the client library the controller uses, survives a stop and start with its
data, and writes a config promtool accepts. Later tests build on each of these."""

from __future__ import annotations

from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from urllib3.util.retry import Retry

from testenv import prometheus
from testenv.controlplane import free_ports
from testenv.prometheus import PrometheusServer, ScrapeTarget

QUERY = 'qm_harness_free_gpus{pool="a100"}'


class Exporter:
    """A prometheus_client exporter on loopback with one labelled gauge."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.gauge = Gauge(
            "qm_harness_free_gpus", "GPUs free in a pool", ["pool"], registry=self.registry
        )
        (self.port,) = free_ports(1)
        self._server: WSGIServer | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self._server, thread = start_http_server(self.port, "127.0.0.1", registry=self.registry)
        self._thread = thread

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    exp = Exporter()
    exp.start()
    try:
        yield exp
    finally:
        exp.stop()


@pytest.fixture
def server(exporter: Exporter) -> Iterator[PrometheusServer]:
    target = ScrapeTarget(exporter.address, job="harness", labels={"cluster": "test"})
    with PrometheusServer([target], scrape_interval=1.0) as prom:
        yield prom


def test_a_scraped_series_comes_back_with_its_value_and_labels(
    exporter: Exporter, server: PrometheusServer
) -> None:
    exporter.gauge.labels(pool="a100").set(3)
    [series] = server.wait_for_series(QUERY, timeout=10)
    assert series["metric"] == {
        "__name__": "qm_harness_free_gpus",
        "pool": "a100",
        "job": "harness",
        "instance": exporter.address,
        "cluster": "test",
    }
    assert float(series["value"][1]) == 3.0

    # The controller's own way of asking: PrometheusConnect with default retries.
    with server.connect() as client:
        [again] = client.custom_query(query=QUERY)
    assert again["metric"]["pool"] == "a100"

    exporter.gauge.labels(pool="a100").set(7.5)
    [changed] = server.wait_for_series(f"{QUERY} == 7.5", timeout=5)
    assert float(changed["value"][1]) == 7.5


def test_stopped_it_is_unreachable_and_restarted_it_keeps_its_data(
    exporter: Exporter, server: PrometheusServer
) -> None:
    exporter.gauge.labels(pool="a100").set(4)
    server.wait_for_series(QUERY, timeout=10)
    port = server.port

    server.stop()
    assert not server.running
    with server.connect(retry=Retry(total=0)) as client, pytest.raises(requests.ConnectionError):
        client.custom_query(query=QUERY)

    # The exporter goes away too, so whatever comes back was stored before the stop.
    exporter.stop()
    server.start()
    assert server.port == port
    [stored] = server.wait_for_series(f"max_over_time({QUERY}[5m])", timeout=10)
    assert float(stored["value"][1]) == 4.0
    assert stored["metric"]["pool"] == "a100"


def test_targets_can_change_on_reload(exporter: Exporter) -> None:
    with PrometheusServer() as prom:
        assert prom.query("up") == []
        exporter.gauge.labels(pool="h100").set(1)
        prom.set_targets([ScrapeTarget(exporter.address, job="late")])
        prom.reload()
        [up] = prom.wait_for_series('up{job="late"} == 1', timeout=10)
        assert up["metric"]["instance"] == exporter.address


def test_promtool_accepts_the_generated_config(exporter: Exporter) -> None:
    server = PrometheusServer(
        [
            ScrapeTarget(exporter.address, job="harness"),
            ScrapeTarget("127.0.0.1:1", job="other", metrics_path="/custom"),
        ]
    )
    try:
        result = prometheus.check_config(server.config_file)
    finally:
        server.close()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_a_job_with_two_metrics_paths_is_refused() -> None:
    with pytest.raises(ValueError, match="different jobs"):
        prometheus.render_config(
            [
                ScrapeTarget("127.0.0.1:1", job="j"),
                ScrapeTarget("127.0.0.1:2", job="j", metrics_path="/x"),
            ]
        )
