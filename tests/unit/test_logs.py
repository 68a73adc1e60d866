"""Logging set-up: an exception logged with its traceback renders in both formats.

The console renderer prints a traceback itself and fails on one already made structured
data (which JSON lines want), so a local run once crashed where a cluster would have logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from controller.logs import configure


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    """`configure` sets structlog and the root logger for the process: put both back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers, root.level = handlers, level


@pytest.mark.parametrize("as_json", [True, False])
def test_an_exception_is_logged_with_its_traceback(
    as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(json=as_json)
    log = structlog.get_logger("test")
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        log.exception("decision_failed", namespace="vision")
    err = capsys.readouterr().err
    assert "decision_failed" in err
    assert "a bug" in err
    if as_json:
        line = json.loads(err.strip().splitlines()[-1])
        assert line["exception"][0]["exc_type"] == "RuntimeError"
    else:
        assert "Traceback" in err
