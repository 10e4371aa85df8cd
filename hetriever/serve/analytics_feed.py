"""Served searches and the results readers open, into the analytics file, off the request path.

A search gets its id at once (`query_id` in the /search answer) and its row is written by a
background thread in batches, so a request never waits on SQLite, and a full disk or a locked
file costs the row (logged), never the search. An open (`POST /analytics/open`) is checked
against the searches this process answered recently (`RECENT`, in memory): its id must be one
of them, its rank one of the results shown and its URL that result's (`url` or `link`). One
open per result is kept, so opens can never outgrow the searches answered.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from typing import Any

from hetriever.core.config import Settings
from hetriever.core.logs import get_logger
from hetriever.core.models import RetrievalResult
from hetriever.search.analytics import (MAX_URL_CHARS, OpenRecord, QueryRecord,
                                        new_query_id, open_store)

log = get_logger(__name__)

RECENT = 4096  # searches whose results may still be reported opened (in memory)
FLUSH_EVERY = 64
QUEUE_SIZE = 10_000


class OpenRefused(ValueError):
    """An open that names no result this server showed (HTTP 400/404)."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.unknown = unknown


class AnalyticsFeed:
    """Records searches of one `source` (http, mcp) when `settings.analytics` is on."""

    def __init__(self, settings: Settings, source: str, *, enabled: bool | None = None) -> None:
        self.enabled = settings.analytics if enabled is None else enabled
        self.source = source
        self._settings = settings
        # query id -> each shown result's (url, link), and the ranks already reported opened
        self._recent: OrderedDict[str, tuple[tuple[tuple[str, str], ...], set[int]]] = \
            OrderedDict()
        self._lock = threading.Lock()
        self._queue: queue.Queue[QueryRecord | OpenRecord | None] = queue.Queue(QUEUE_SIZE)
        self._writer: threading.Thread | None = None
        if self.enabled:
            self._writer = threading.Thread(target=self._write, name="analytics-writer",
                                            daemon=True)
            self._writer.start()

    def search(self, result: RetrievalResult, answer: dict[str, Any], seconds: float,
               repositories: list[str] | None) -> str | None:
        """The search's id (None with analytics off); its row is written later."""
        if not self.enabled:
            return None
        shown = answer.get("results", [])
        record = QueryRecord.of(result, returned=len(shown), latency_ms=seconds * 1000.0,
                                repositories=repositories, source=self.source,
                                cold=False,  # the server searched before it served
                                query_id=new_query_id())
        with self._lock:
            self._recent[record.id] = (tuple((str(r.get("url", "")), str(r.get("link", "")))
                                             for r in shown), set())
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        self._put(record)
        return record.id

    def open(self, query_id: Any, rank: Any, url: Any) -> bool:
        """Record that the reader opened result `rank` (1 = first) of search `query_id`;
        False when it was already recorded. Raises OpenRefused for anything else."""
        if not isinstance(query_id, str) or not 1 <= len(query_id) <= 64:
            raise OpenRefused("query_id must be the query_id of a /search answer")
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise OpenRefused("rank must be an integer: the result's position, 1 for the first")
        if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
            raise OpenRefused("url must be the opened result's url or link")
        with self._lock:
            recent = self._recent.get(query_id)
            if recent is None:
                raise OpenRefused("no recent search has this query_id", unknown=True)
            shown, opened = recent
            if not 1 <= rank <= len(shown):
                raise OpenRefused(f"rank must be from 1 to {len(shown)} for this search"
                                  if shown else "this search showed no result")
            if url not in shown[rank - 1]:
                raise OpenRefused(f"url is not that of result {rank} of this search")
            if rank in opened:
                return False
            opened.add(rank)
        self._put(OpenRecord(query_id, rank, shown[rank - 1][0] or url, time.time()))
        return True

    def _put(self, item: QueryRecord | OpenRecord) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:  # the writer is stuck (disk?): drop the row, never the request
            log.warning("analytics_dropped", reason="queue full")

    def _write(self) -> None:
        store = None
        while True:
            batch = [self._queue.get()]
            while len(batch) < FLUSH_EVERY:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            queries = [i for i in batch if isinstance(i, QueryRecord)]
            opens = [i for i in batch if isinstance(i, OpenRecord)]
            if queries or opens:
                try:
                    store = store or open_store(self._settings.resolved_state_dir,
                                                self._settings.analytics_retention_days)
                    store.record(queries, opens)
                except Exception as exc:  # analytics must never take the server down
                    log.warning("analytics_write_failed", error=str(exc),
                                queries=len(queries), opens=len(opens))
                    if store is not None:  # a fresh connection next time (file replaced?)
                        store.close()
                        store = None
            for _ in batch:
                self._queue.task_done()
            if None in batch:
                if store is not None:
                    store.close()
                return

    def flush(self) -> None:
        """Wait until every recorded search and open is written (or failed to be)."""
        if self._writer is not None:
            self._queue.join()

    def close(self) -> None:
        if self._writer is not None and self._writer.is_alive():
            self._queue.put(None)
            self._writer.join(timeout=10)
