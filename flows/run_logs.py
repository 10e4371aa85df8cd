"""Logs of a flow run as a person reads them in the Prefect UI.

Inside `prefect_run_logging()`:
- hetriever's structlog events go through stdlib loggers (`hetriever.*`) at their own level to
  Prefect's handlers: they appear in the run's logs with one timestamp, and a WARNING filter
  finds hetriever's warnings;
- the routine "Finished in state Completed()" line of every per-file task run is dropped (one
  per file, ~1,000 per full run, each also an API write); retries, failures and anything a task
  logs itself still show.

`ParentProgress` also writes a repository run's progress into the parent ingest run's log:
`prefect deployment run ... --watch` follows that run's logs only, not its subflows'.

`--watch` prints each log line as Rich markup: a line quoting the docs (`type[/name]`) would
stop it with a MarkupError, `[[menus.main]]` would lose its brackets. Lines that carry docs
text go through `watch_safe` (hetriever's own events do, in `configure_logging`'s stdlib
sink): `\\[` before what Rich would take for a tag, so `--watch` shows the text as written
(the UI's log view shows the backslash).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from hetriever.core.logs import configure_logging, logging_restored, watch_safe

__all__ = ["prefect_run_logging", "ParentProgress", "watch_safe"]
from hetriever.index.progress import LOG_EVERY

ROUTINE_TASK_LINES = ("Finished in state Completed",)


class DropRoutineTaskLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        return not str(record.msg).startswith(ROUTINE_TASK_LINES)


@contextmanager
def prefect_run_logging(level: str = "INFO", fmt: str = "console") -> Iterator[None]:
    target = logging.getLogger("hetriever")
    # Prefect attaches its API handler to `prefect.extra` for exactly this: extra loggers.
    added = [h for h in logging.getLogger("prefect.extra").handlers if h not in target.handlers]
    old_level = target.level
    task_runs = logging.getLogger("prefect.task_runs")
    quiet = DropRoutineTaskLines()
    with logging_restored():
        configure_logging(level, fmt, sink="stdlib")
        for handler in added:
            target.addHandler(handler)
        target.setLevel(level.upper())
        task_runs.addFilter(quiet)
        try:
            yield
        finally:
            task_runs.removeFilter(quiet)
            for handler in added:
                target.removeHandler(handler)
            target.setLevel(old_level)


class ParentProgress:
    """A repository run's progress as one line in the parent run's log: at the first news,
    then every `every` seconds (`on_progress` of `index_repository`, which the run's
    heartbeat calls in a quiet spell too)."""

    def __init__(
        self, parent_run_id: str, parent_run_name: str = "", every: float = LOG_EVERY
    ) -> None:
        from prefect.logging.loggers import flow_run_logger

        self.logger = flow_run_logger(
            flow_run_id=uuid.UUID(parent_run_id),
            flow_run_name=parent_run_name or "<unknown>",
            flow_name="ingest",
        )
        self.every = every
        self.last: float | None = None

    def __call__(self, snapshot) -> None:
        now = time.monotonic()
        if self.last is not None and now - self.last < self.every:
            return
        self.last = now
        self.logger.info("progress %s", snapshot.line())
