"""structlog setup: readable console lines for people, JSON lines when asked.

Modules do `log = get_logger(__name__)` and log short snake_case events with fields:
`log.info("file_skipped", path=..., reason=...)`.
"""

from __future__ import annotations

import logging
import sys

import structlog

_configured = False


def configure_logging(level: str = "INFO", fmt: str = "console") -> None:
    """Configure structlog (and the stdlib root logger it renders through). Idempotent."""
    global _configured
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelName(level.upper())
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str | None = None, **context: object) -> structlog.stdlib.BoundLogger:
    if not _configured:
        configure_logging()
    logger = structlog.get_logger(name)
    return logger.bind(**context) if context else logger
