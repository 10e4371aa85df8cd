"""Latency of served requests: Prometheus at /metrics, and the metrics store for `hetriever metrics`.

Searches are written to the metrics store (SQLite) by a background thread in batches, so a
request never waits on a commit. Their mode is recorded as `<origin>:<mode>` (`http:hybrid`,
`mcp:hybrid`) and their source as `http` or `mcp`, warm (the server searched once before it
served), so `hetriever metrics --source http` reports the warm numbers of this process apart
from one-shot CLI searches. Latency is the whole request as the server saw it.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hetriever.core.logs import get_logger
from hetriever.search.metrics import QueryMetric, metrics_store
from hetriever.core.models import RetrievalResult

log = get_logger(__name__)

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
FLUSH_EVERY = 64  # metrics written per transaction at most
PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST


class Telemetry:
    def __init__(self, state_dir: Path, origin: str) -> None:
        self.origin = origin
        self.registry = CollectorRegistry()
        self.requests = Histogram("hetriever_request_seconds", "Served request latency",
                                  ["endpoint", "status"], buckets=BUCKETS,
                                  registry=self.registry)
        self.results = Counter("hetriever_search_results_total", "Matches returned",
                               registry=self.registry)
        self.empty = Counter("hetriever_search_empty_total", "Searches that found nothing",
                             registry=self.registry)
        self._state_dir = state_dir
        self._queue: queue.Queue[QueryMetric | None] = queue.Queue(maxsize=10_000)
        self._writer = threading.Thread(target=self._write, name="metrics-writer", daemon=True)
        self._writer.start()

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).observe(seconds)

    def search(self, result: RetrievalResult, returned: int, seconds: float,
               repositories: list[str] | None) -> None:
        self.results.inc(returned)
        if not returned:
            self.empty.inc()
        # Warm: the server ran its first search (DocsService.warm_up) before it served any.
        metric = QueryMetric.from_result(result, repositories, source=self.origin, cold=False)
        metric.mode = f"{self.origin}:{result.mode}"
        metric.latency_ms = seconds * 1000.0
        metric.results = returned
        try:
            self._queue.put_nowait(metric)
        except queue.Full:  # the writer is stuck (disk?): drop the sample, never the request
            log.warning("metrics_dropped", reason="queue full")

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def _write(self) -> None:
        store = None
        while True:
            item = self._queue.get()
            batch = [item]
            while len(batch) < FLUSH_EVERY:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            metrics = [m for m in batch if m is not None]
            if metrics:
                try:
                    store = store or metrics_store(self._state_dir)
                    store.record_many(metrics)
                except Exception as exc:  # metrics must never take the server down
                    log.warning("metrics_write_failed", error=str(exc))
            for _ in batch:
                self._queue.task_done()
            if None in batch:
                if store is not None:
                    store.close()
                return

    def flush(self) -> None:
        """Wait until every recorded search is in the metrics store."""
        self._queue.join()

    def close(self) -> None:
        if self._writer.is_alive():
            self._queue.put(None)
            self._writer.join(timeout=10)
