"""A per-file time budget: one file's processing may not hold up the run.

Every stage of the per-file step (parse, clean, chunk) is linear in its input, and inputs are
bounded (`max_file_bytes`, the chunker's limits), so the budget is a backstop: a file that
still runs past it fails alone with `FileBudgetExceeded`, the rest of the run goes on. The
check is cooperative (a thread cannot be stopped from outside): the stages call `check()` in
their loops, which costs one clock read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from hetriever.core.errors import HetrieverError

_deadline: ContextVar[tuple[float, float] | None] = ContextVar("file_deadline", default=None)


class FileBudgetExceeded(HetrieverError):
    """One file's processing ran past `file_seconds`."""


@contextmanager
def file_budget(seconds: float) -> Iterator[None]:
    """Within the block, `check()` raises once `seconds` have passed."""
    token = _deadline.set((time.monotonic() + seconds, seconds))
    try:
        yield
    finally:
        _deadline.reset(token)


def check() -> None:
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() > deadline[0]:
        raise FileBudgetExceeded(
            f"processing took longer than {deadline[1]:g} s",
            hint="the page is pathological (or the machine overloaded); raise "
            "HETRIEVER_FILE_SECONDS to give it longer",
        )
