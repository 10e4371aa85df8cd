"""Who hears of each embedded batch: a run's progress moves with the embedding, not only
once per write window (a window of 1,024 chunks is a minute and more on a busy machine).

The listener is a context variable: the write path runs in a worker thread started with
`asyncio.to_thread`, which carries the run's context there, so only the run that set a
listener hears of its batches (a search embedding its query meanwhile is not counted).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_listener: contextvars.ContextVar[Callable[[int], None] | None] = contextvars.ContextVar(
    "embedding_listener", default=None
)


def embedded(count: int) -> None:
    """`count` more texts are embedded (called by an embedder per batch)."""
    listener = _listener.get()
    if listener is not None and count:
        listener(count)


@contextmanager
def listening(listener: Callable[[int], None]) -> Iterator[None]:
    """Within the block (and threads started from it by `asyncio.to_thread`), every embedded
    batch is passed to `listener`."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
