"""structlog set-up: JSON lines in a cluster (or when asked), readable console output locally."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(*, json: bool | None = None, level: str = "info") -> None:
    """`json=None` picks JSON unless standard error is a terminal."""
    use_json = json if json is not None else not sys.stderr.isatty()
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    # Libraries (urllib3, kubernetes) log through the standard library: give them the same
    # renderer, so a JSON log stays JSON.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # A traceback as structured data in JSON; the console renderer prints its own (and
            # fails on one already made a dict).
            *([structlog.processors.dict_tracebacks] if use_json else []),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
