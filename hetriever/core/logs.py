"""structlog setup: readable console lines for people, JSON lines when asked.

Modules do `log = get_logger(__name__)` and log short snake_case events with fields:
`log.info("file_skipped", path=..., reason=...)`.

structlog (with the rich and colorama its console renderer imports: ~0.15 s of CPU) is
imported when the first line at or above the level is written, not when a module asks for its
logger: a quiet command, such as a search at the prompt, writes none and never imports it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, TextIO, cast

from hetriever.core.redact import redact_text
from hetriever.core.terminal import terminal_safe

_configured = False
_level, _format = "INFO", "console"  # as last configured, for libraries' loggers
_threshold = logging.INFO  # the level's number: a line below it is not written
_pending: tuple[str, str, str] | None = None  # asked for, applied when structlog is imported


def configure_logging(level: str = "INFO", fmt: str = "console", sink: str = "stderr") -> None:
    """Configure structlog. Idempotent.

    sink "stderr": one rendered line per event on stderr, with a timestamp and a level.
    sink "stdlib": events go to the stdlib logger named after the module (`hetriever.index.indexing`)
    at their own level, without a timestamp: the handlers there (Prefect's, inside a flow run)
    add theirs, so a line carries one timestamp and filtering on WARNING works.

    Where structlog is not imported yet, the configuration is applied when it first is.
    """
    global _configured, _level, _format, _threshold, _pending
    _level, _format = level.upper(), fmt
    number = logging.getLevelName(_level)
    _threshold = number if isinstance(number, int) else logging.INFO
    _configured = True
    _pending = (level, fmt, sink)
    if "structlog" in sys.modules:
        _structlog()


def _structlog() -> Any:
    """structlog, with the configuration asked for applied."""
    global _pending
    import structlog

    if _pending is not None:
        asked, _pending = _pending, None
        _apply(structlog, *asked)
    return structlog


def _apply(structlog: Any, level: str, fmt: str, sink: str) -> None:
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


def configured_structlog() -> Any:
    """structlog with hetriever's configuration applied now: for code that configures it further
    (a test's `structlog.testing.capture_logs`), which a configuration applied later would undo."""
    return _structlog()


@contextmanager
def logging_restored() -> Iterator[Any]:
    """structlog, configured as asked, for a block that changes its configuration: what was
    configured before (structlog's and the level lines are filtered at) is back after it."""
    global _level, _format, _threshold, _configured, _pending
    structlog = _structlog()
    saved, config = (_level, _format, _threshold, _configured), structlog.get_config()
    try:
        yield structlog
    finally:
        (_level, _format, _threshold, _configured), _pending = saved, None
        structlog.configure(**config)


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
    structlog = _structlog()
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
    structlog = _structlog()
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


class Logger:
    """`name`'s structlog logger, bound to `context`, taken when a line passes the level."""

    def __init__(self, name: str | None, context: dict[str, object]) -> None:
        self._name, self._context = name, context
        self._logger: Any = None  # structlog's proxy: it reads the configuration at each line

    def bind(self, **context: object) -> Logger:
        return Logger(self._name, {**self._context, **context})

    def _write(self, level: int, method: str, event: str, args: tuple, fields: dict) -> None:
        if level < _threshold:
            return
        if self._logger is None:
            self._logger = _structlog().get_logger(self._name)
        getattr(self._logger, method)(event, *args, **{**self._context, **fields})

    def debug(self, event: str, *args: Any, **fields: Any) -> None:
        self._write(logging.DEBUG, "debug", event, args, fields)

    def info(self, event: str, *args: Any, **fields: Any) -> None:
        self._write(logging.INFO, "info", event, args, fields)

    def warning(self, event: str, *args: Any, **fields: Any) -> None:
        self._write(logging.WARNING, "warning", event, args, fields)

    def error(self, event: str, *args: Any, **fields: Any) -> None:
        self._write(logging.ERROR, "error", event, args, fields)

    def exception(self, event: str, *args: Any, **fields: Any) -> None:
        self._write(logging.ERROR, "exception", event, args, fields)

    def critical(self, event: str, *args: Any, **fields: Any) -> None:
        self._write(logging.CRITICAL, "critical", event, args, fields)


def get_logger(name: str | None = None, **context: object) -> Logger:
    if not _configured:
        configure_logging()
    return Logger(name, context)
