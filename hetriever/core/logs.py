"""structlog setup: readable console lines for people, JSON lines when asked.

Modules do `log = get_logger(__name__)` and log short snake_case events with fields:
`log.info("file_skipped", path=..., reason=...)`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO, cast

import structlog

from hetriever.core.redact import redact_text
from hetriever.core.terminal import terminal_safe

_configured = False
_level, _format = "INFO", "console"  # as last configured, for libraries' loggers


def configure_logging(level: str = "INFO", fmt: str = "console", sink: str = "stderr") -> None:
    """Configure structlog. Idempotent.

    sink "stderr": one rendered line per event on stderr, with a timestamp and a level.
    sink "stdlib": events go to the stdlib logger named after the module (`hetriever.index.indexing`)
    at their own level, without a timestamp: the handlers there (Prefect's, inside a flow run)
    add theirs, so a line carries one timestamp and filtering on WARNING works.
    """
    global _configured, _level, _format
    _level, _format = level.upper(), fmt
    if sink == "stdlib":
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.StackInfoRenderer(),
                structlog.processors.format_exc_info,
                _redact,
                structlog.processors.JSONRenderer() if fmt == "json" else _render_event,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(
                logging.getLevelName(level.upper())
            ),
            logger_factory=structlog.stdlib.LoggerFactory(),
            cache_logger_on_first_use=False,
        )
        _configured = True
        return
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            _redact,
            *([] if fmt == "json" else [_printable]),  # JSON escapes control characters
            _renderer(fmt),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _STDERR)),
        cache_logger_on_first_use=False,
    )
    _configured = True


class _Stderr:
    """Whatever `sys.stderr` is when a line is written, not when logging was configured: a
    command run in-process under a test's captured stream (or a redirected one) must not
    leave the logger holding that stream after it is closed."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_STDERR = _Stderr()


def _renderer(fmt: str) -> Any:
    return (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )


def follow_level(*libraries: str) -> None:
    """Libraries' stdlib log records on stderr, rendered as hetriever's own lines: those of the
    loggers `libraries` names (and their children) from hetriever's level, any other library's
    from WARNING (their INFO lines, such as httpx's one per request, are noise). With a handler
    on the root logger, a library's own `logging.basicConfig` (the MCP SDK calls it, at INFO,
    with a handler of its own) does nothing."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                _redact,
                _renderer(_format),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    level = logging.getLevelName(_level)
    root.setLevel(max(level, logging.WARNING))
    for name in libraries:
        logging.getLogger(name).setLevel(level)


def _redact(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Credentials out of every URL a line holds (a repository's remote, a git error, a
    traceback), whatever field it is in."""
    for key, value in event_dict.items():
        if isinstance(value, str) and "@" in value:
            event_dict[key] = redact_text(value)
    return event_dict


def _printable(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A line on a terminal quotes the docs (a file's path, a title): their control
    characters shown, not obeyed."""
    for key, value in event_dict.items():
        if isinstance(value, str):
            event_dict[key] = terminal_safe(value)
    return event_dict


def _render_event(_logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> str:
    """`event key=value ...` for a handler that adds its own time and level."""
    event = event_dict.pop("event", "")
    exception = event_dict.pop("exception", None)
    fields = " ".join(f"{k}={v}" for k, v in event_dict.items())
    line = watch_safe(f"{event} {fields}".rstrip())
    return f"{line}\n{watch_safe(exception)}" if exception else line


def watch_safe(text: object) -> str:
    """A line for a Prefect run's log: `prefect deployment run --watch` prints log lines as
    Rich markup, so what Rich would take for a tag (`type[/name]`, `[[menus.main]]`, a
    path's `[lang]`) is escaped, and shown as written there."""
    from rich.markup import escape

    return escape(str(text))


def get_logger(name: str | None = None, **context: object) -> structlog.stdlib.BoundLogger:
    if not _configured:
        configure_logging()
    logger = structlog.get_logger(name)
    return logger.bind(**context) if context else logger
