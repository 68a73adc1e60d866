"""The harness's own logs: the controller's code run in-process, and the clients it uses.

The demo and `bench_reconcile` run the controller's loop in a thread; every harness uses
`KubeClient`, which logs its retries. Their structlog output goes to a file (the demo) or to
stderr, warnings only and as console lines (the benches, the soak), so the figures stay
readable. Once a harness starts tearing down (`QUIET` set), the watches fail as the server
goes away, by design: those lines are left out, and not counted as problems.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import structlog

QUIET = threading.Event()
"""Set once teardown starts: the controller's watches fail as the server goes away, by design."""


EXPECTED = frozenset({"kind_not_served", "learning_in_memory_only"})
"""Warnings the demo explains itself: the CRD server serves no apps/v1 (kind_not_served) and no
core v1, so no ConfigMap for what the controller learns (learning_in_memory_only)."""


@dataclass
class LogSummary:
    """Where the controller's logs went, and the warnings and errors among them."""

    path: Path | None = None
    problems: list[str] = field(default_factory=list)

    def count(self, _logger: Any, _method: str, event: Any) -> Any:
        """A structlog processor: note warnings and errors logged before the teardown."""
        level = event.get("level")
        if (
            level in ("warning", "error", "critical")
            and not QUIET.is_set()
            and event.get("event") not in EXPECTED
        ):
            self.problems.append(f"{level} {event.get('event')}")
        return event


LOGS = LogSummary()


def _drop_when_quiet(_logger: Any, _method: str, event: Any) -> Any:
    if QUIET.is_set() or event.get("event") in EXPECTED:
        raise structlog.DropEvent
    return event


def configure_logging(*, verbose: bool, log_file: TextIO | None = None) -> None:
    """The controller's logs: into `log_file`, info and up (the demo), or with -v on stderr.

    Without a file (the benchmarks and the soak), on stderr: warnings only unless
    `verbose`, the expected ones and those of the teardown left out.
    """
    to_file = log_file is not None and not verbose
    quiet = not to_file and not verbose
    structlog.configure(
        processors=[
            *([_drop_when_quiet] if quiet else []),
            structlog.processors.add_log_level,
            LOGS.count,
            structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=False),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.WARNING if quiet else logging.INFO
        ),
        logger_factory=structlog.PrintLoggerFactory(file=log_file if to_file else sys.stderr),
        cache_logger_on_first_use=True,
    )
