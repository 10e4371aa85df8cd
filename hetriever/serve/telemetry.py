"""Latency of served requests: Prometheus at /metrics, and the metrics store for `hetriever metrics`.

Searches are written to the metrics store (SQLite) by a background thread in batches
(serve/batched_writer.py), so a request never waits on a commit. Their mode is recorded as
`<origin>:<mode>` (`http:hybrid`, `mcp:hybrid`) and their source as `http` or `mcp`, warm (the
server searched once before it served), so `hetriever metrics --source http` reports the warm numbers of this process apart
from one-shot CLI searches. Latency is the whole request as the server saw it.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hetriever.core.models import RetrievalResult
from hetriever.search.metrics import MetricsStore, QueryMetric, metrics_store
from hetriever.serve.batched_writer import BatchedWriter

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST


class Telemetry:
    def __init__(self, state_dir: Path, origin: str) -> None:
        self.origin = origin
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "hetriever_request_seconds",
            "Served request latency",
            ["endpoint", "status"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.results = Counter(
            "hetriever_search_results_total", "Matches returned", registry=self.registry
        )
        self.empty = Counter(
            "hetriever_search_empty_total", "Searches that found nothing", registry=self.registry
        )
        self._writer: BatchedWriter[QueryMetric, MetricsStore] = BatchedWriter(
            "metrics",
            lambda: metrics_store(state_dir),
            lambda store, metrics: store.record_many(metrics),
        )

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).observe(seconds)

    def search(
        self, result: RetrievalResult, returned: int, seconds: float, repositories: list[str] | None
    ) -> None:
        self.results.inc(returned)
        if not returned:
            self.empty.inc()
        # Warm: the server ran its first search (DocsService.warm_up) before it served any.
        metric = QueryMetric.from_result(result, repositories, source=self.origin, cold=False)
        metric.mode = f"{self.origin}:{result.mode}"
        metric.latency_ms = seconds * 1000.0
        metric.results = returned
        self._writer.put(metric)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def flush(self) -> None:
        """Wait until every recorded search is in the metrics store."""
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
