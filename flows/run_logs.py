"""Logs of a flow run as a person reads them in the Prefect UI.

Inside `prefect_run_logging()`:
- hetriever's structlog events go through stdlib loggers (`hetriever.*`) at their own level to
  Prefect's handlers: they appear in the run's logs with one timestamp, and a WARNING filter
  finds hetriever's warnings;
- the routine "Finished in state Completed()" line of every per-file task run is dropped (one
  per file, ~1,000 per full run, each also an API write); retries, failures and anything a task
  logs itself still show.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

import structlog

from hetriever.core.logs import configure_logging

ROUTINE_TASK_LINES = ("Finished in state Completed",)


class DropRoutineTaskLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        return not str(record.msg).startswith(ROUTINE_TASK_LINES)


@contextmanager
def prefect_run_logging(level: str = "INFO", fmt: str = "console") -> Iterator[None]:
    previous = structlog.get_config()
    target = logging.getLogger("hetriever")
    # Prefect attaches its API handler to `prefect.extra` for exactly this: extra loggers.
    added = [h for h in logging.getLogger("prefect.extra").handlers if h not in target.handlers]
    old_level = target.level
    task_runs = logging.getLogger("prefect.task_runs")
    quiet = DropRoutineTaskLines()
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
        structlog.configure(**previous)
