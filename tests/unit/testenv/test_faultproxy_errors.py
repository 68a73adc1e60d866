"""The fault proxy does not print the connection errors its own faults cause.

Cutting a connection is what the proxy is for; the standard server prints a traceback for
each one, which buried the test run's output. Other errors are still printed.
"""

from __future__ import annotations

import pytest

from testenv.faultproxy import _Server


def handled(error: Exception) -> None:
    server = _Server.__new__(_Server)  # handle_error reads nothing the constructor sets
    try:
        raise error
    except Exception:  # the server is handed whatever the handler raised
        server.handle_error(None, ("127.0.0.1", 40000))


@pytest.mark.parametrize(
    "error",
    [ConnectionResetError(), BrokenPipeError(), ConnectionAbortedError(), TimeoutError()],
    ids=lambda e: type(e).__name__,
)
def test_a_cut_connection_is_not_printed(
    error: Exception, capsys: pytest.CaptureFixture[str]
) -> None:
    handled(error)
    assert capsys.readouterr().err == ""


def test_any_other_error_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    handled(ValueError("a bug in the handler"))
    err = capsys.readouterr().err
    assert "Exception occurred during processing of request from ('127.0.0.1', 40000)" in err
    assert "ValueError: a bug in the handler" in err
