"""A background thread that writes queued rows in batches, off the request path.

Served searches feed two SQLite files this way (the metrics store, serve/telemetry.py, and
the analytics file, serve/analytics_feed.py): a request only queues its row and never waits on
a commit, and a full disk or a locked file costs rows (logged), never the request or the
server. After a failed write the file is opened afresh (it may have been replaced).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from hetriever.core.logs import get_logger

log = get_logger(__name__)

FLUSH_EVERY = 64  # rows written per transaction at most
QUEUE_SIZE = 10_000


class Closable(Protocol):
    def close(self) -> None: ...


Row = TypeVar("Row")
Sink = TypeVar("Sink", bound=Closable)


class BatchedWriter(Generic[Row, Sink]):
    """`put` queues a row; a daemon thread opens the sink on first use (`open_sink`) and
    hands it each batch (`write`). `what` names the rows in log lines (`<what>_dropped`,
    `<what>_write_failed`)."""

    def __init__(
        self, what: str, open_sink: Callable[[], Sink], write: Callable[[Sink, list[Row]], None]
    ) -> None:
        self._what = what
        self._open_sink = open_sink
        self._write_batch = write
        self._queue: queue.Queue[Row | None] = queue.Queue(QUEUE_SIZE)
        self._thread = threading.Thread(target=self._run, name=f"{what}-writer", daemon=True)
        self._thread.start()

    def put(self, row: Row) -> None:
        try:
            self._queue.put_nowait(row)
        except queue.Full:  # the writer is stuck (disk?): drop the row, never the request
            log.warning(f"{self._what}_dropped", reason="queue full")

    def flush(self) -> None:
        """Wait until every queued row is written (or failed to be)."""
        self._queue.join()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout=10)

    def _run(self) -> None:
        sink: Sink | None = None
        while True:
            batch = [self._queue.get()]
            while len(batch) < FLUSH_EVERY:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            rows = [row for row in batch if row is not None]
            if rows:
                try:
                    sink = sink or self._open_sink()
                    self._write_batch(sink, rows)
                except Exception as exc:  # a side record must never take the server down
                    log.warning(f"{self._what}_write_failed", error=str(exc), rows=len(rows))
                    if sink is not None:
                        sink.close()
                        sink = None
            for _ in batch:
                self._queue.task_done()
            if None in batch:
                if sink is not None:
                    sink.close()
                return
