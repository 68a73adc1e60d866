"""The health server's request errors go to the structured log, never bare to stderr.

A scrape or probe that times out hangs up before its answer is written; the standard server
prints each such error as a traceback on stderr, which in a cluster breaks the JSON log.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from controller.health import HealthServer


def boom() -> tuple[int, str, bytes]:
    raise RuntimeError("the handler failed")


@pytest.fixture
def server() -> Iterator[HealthServer]:
    started = HealthServer(
        "127.0.0.1",
        0,
        healthz=lambda: (True, "ok"),
        readyz=lambda: (False, "cache not synced"),
        extra={"/boom": boom},
    )
    started.start()
    yield started
    started.stop()


def get(server: HealthServer, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_probes_answer(server: HealthServer) -> None:
    assert get(server, "/healthz")[0] == 200
    assert get(server, "/readyz")[0] == 503
    assert get(server, "/nothing")[0] == 404


def test_a_failing_handler_is_a_logged_warning_not_a_traceback_on_stderr(
    server: HealthServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with capture_logs() as logs, pytest.raises(http.client.RemoteDisconnected):
        get(server, "/boom")
    # The server logs before it closes the connection the client saw closed.
    failed = [e for e in logs if e["event"] == "http_request_failed"]
    assert len(failed) == 1
    assert failed[0]["log_level"] == "warning"
    assert failed[0]["client"] == "127.0.0.1"
    assert failed[0]["exc_info"] is True
    assert "Exception occurred" not in capsys.readouterr().err


@pytest.mark.parametrize("error", [BrokenPipeError, ConnectionResetError, ConnectionAbortedError])
def test_a_client_that_hung_up_is_routine(
    server: HealthServer, capsys: pytest.CaptureFixture[str], error: type[OSError]
) -> None:
    """No warning and nothing on stderr: at most a debug line (which the controller's log
    level may drop before it is ever made, so its presence is not asserted)."""
    with capture_logs() as logs:
        try:
            raise error("the client went away")
        except OSError:
            server.server.handle_error(None, ("10.0.0.7", 51234))
    assert [e for e in logs if e["log_level"] != "debug"] == []
    assert all(e["event"] == "http_client_gone" for e in logs)
    assert capsys.readouterr().err == ""
