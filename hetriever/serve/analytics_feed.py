"""Served searches and the results readers open, into the analytics file, off the request path.

A search gets its id at once (`query_id` in the /search answer) and its row is written by a
background thread in batches (serve/batched_writer.py), so a request never waits on SQLite, and a full disk or a locked
file costs the row (logged), never the search. An open (`POST /analytics/open`) is checked
against the searches this process answered recently (`RECENT`, in memory): its id must be one
of them, its rank one of the results shown and its URL that result's (`url` or `link`). One
open per result is kept, so opens can never outgrow the searches answered.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from hetriever.core.config import Settings
from hetriever.core.logs import get_logger
from hetriever.core.models import RetrievalResult
from hetriever.search.analytics import (
    MAX_URL_CHARS,
    AnalyticsStore,
    OpenRecord,
    QueryRecord,
    new_query_id,
    open_store,
)
from hetriever.serve.batched_writer import BatchedWriter

log = get_logger(__name__)

RECENT = 4096  # searches whose results may still be reported opened (in memory)


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
        self._recent: OrderedDict[str, tuple[tuple[tuple[str, str], ...], set[int]]] = OrderedDict()
        self._lock = threading.Lock()
        self._writer: BatchedWriter[QueryRecord | OpenRecord, AnalyticsStore] | None = None
        if self.enabled:
            self._writer = BatchedWriter("analytics", self._open_store, _record)

    def search(
        self,
        result: RetrievalResult,
        answer: dict[str, Any],
        seconds: float,
        repositories: list[str] | None,
    ) -> str | None:
        """The search's id (None with analytics off); its row is written later."""
        if not self.enabled:
            return None
        shown = answer.get("results", [])
        record = QueryRecord.of(
            result,
            returned=len(shown),
            latency_ms=seconds * 1000.0,
            repositories=repositories,
            source=self.source,
            cold=False,  # the server searched before it served
            query_id=new_query_id(),
        )
        with self._lock:
            self._recent[record.id] = (
                tuple((str(r.get("url", "")), str(r.get("link", ""))) for r in shown),
                set(),
            )
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
                raise OpenRefused(
                    f"rank must be from 1 to {len(shown)} for this search"
                    if shown
                    else "this search showed no result"
                )
            if url not in shown[rank - 1]:
                raise OpenRefused(f"url is not that of result {rank} of this search")
            if rank in opened:
                return False
            opened.add(rank)
        self._put(OpenRecord(query_id, rank, shown[rank - 1][0] or url, time.time()))
        return True

    def _put(self, item: QueryRecord | OpenRecord) -> None:
        if self._writer is not None:
            self._writer.put(item)

    def _open_store(self) -> AnalyticsStore:
        return open_store(
            self._settings.resolved_state_dir, self._settings.analytics_retention_days
        )

    def flush(self) -> None:
        """Wait until every recorded search and open is written (or failed to be)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _record(store: AnalyticsStore, rows: list[QueryRecord | OpenRecord]) -> None:
    store.record(
        [r for r in rows if isinstance(r, QueryRecord)],
        [r for r in rows if isinstance(r, OpenRecord)],
    )
