"""Query metrics kept beside the index (SQLite), so p50/p95 over recent queries can be reported.

Only the newest `KEEP_QUERIES` queries are kept: a long-lived server records every search.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hetriever.store.catalog_records import CATALOG_FILE
from hetriever.core.models import RetrievalResult, _Serialisable
from hetriever.core.sqlite_files import connect

KEEP_QUERIES = 100_000  # ~20 MB of rows; summaries read the last 1,000 by default

SCHEMA = """
CREATE TABLE IF NOT EXISTS query_metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    query TEXT NOT NULL,
    mode TEXT NOT NULL,
    latency_ms REAL NOT NULL,
    results INTEGER NOT NULL,
    top_score REAL,
    retriever_counts TEXT NOT NULL,
    repositories TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS query_metrics_at ON query_metrics(at);
"""


@dataclass
class QueryMetric(_Serialisable):
    query: str
    mode: str
    latency_ms: float
    results: int
    top_score: float | None
    retriever_counts: dict[str, int] = field(default_factory=dict)
    repositories: list[str] = field(default_factory=list)
    at: float = field(default_factory=time.time)

    @classmethod
    def from_result(cls, result: RetrievalResult, repositories: list[str] | None = None) -> QueryMetric:
        return cls(
            query=result.query[:500],
            mode=result.mode,
            latency_ms=result.search_time_ms,
            results=result.total_results,
            top_score=result.matches[0].score if result.matches else None,
            retriever_counts=dict(result.retriever_counts),
            repositories=list(repositories or []),
        )


@dataclass
class MetricsSummary(_Serialisable):
    count: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_results: float | None
    empty_rate: float | None
    by_mode: dict[str, int]


def _storable(text: str) -> str:
    """`text` as SQLite can store it: a lone surrogate (undecodable input) would fail the
    whole batch of metrics, so it becomes U+FFFD."""
    return text.encode("utf-8", "replace").decode("utf-8")


class MetricsStore:
    def __init__(self, path: Path, *, keep: int = KEEP_QUERIES) -> None:
        self.path = path
        self.keep = keep
        self._db = connect(path)
        self._db.executescript(SCHEMA)

    def record(self, metric: QueryMetric) -> None:
        self.record_many([metric])

    def record_many(self, metrics: list[QueryMetric]) -> None:
        with self._db:
            self._db.executemany(
                "INSERT INTO query_metrics (at, query, mode, latency_ms, results, top_score,"
                " retriever_counts, repositories) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(m.at, _storable(m.query), m.mode, m.latency_ms, m.results, m.top_score,
                  json.dumps(m.retriever_counts), json.dumps(m.repositories)) for m in metrics],
            )
            # Retention: the newest `keep` queries (ids only grow, so one indexed delete).
            self._db.execute("DELETE FROM query_metrics WHERE id <= (SELECT MAX(id) FROM query_metrics) - ?",
                             (self.keep,))

    def summary(self, last: int = 1000, source: str | None = None) -> MetricsSummary:
        """Over the last `last` queries; `source` ("http", "mcp") keeps only those a server
        recorded, whose mode reads `<source>:<mode>`."""
        where = ""
        params: list[int | str] = [last]
        if source:
            where, params = "WHERE mode LIKE ?", [f"{source}:%", last]
        rows = self._db.execute(
            f"SELECT latency_ms, results, mode FROM query_metrics {where} ORDER BY id DESC LIMIT ?",
            params,
        ).fetchall()
        if not rows:
            return MetricsSummary(0, None, None, None, None, None, {})
        latencies = np.array([r[0] for r in rows])
        results = np.array([r[1] for r in rows])
        by_mode: dict[str, int] = {}
        for _, _, mode in rows:
            by_mode[mode] = by_mode.get(mode, 0) + 1
        p50, p95, p99 = (float(np.percentile(latencies, q)) for q in (50, 95, 99))
        return MetricsSummary(
            count=len(rows),
            p50_ms=round(p50, 2),
            p95_ms=round(p95, 2),
            p99_ms=round(p99, 2),
            mean_results=round(float(results.mean()), 2),
            empty_rate=round(float((results == 0).mean()), 4),
            by_mode=by_mode,
        )

    def close(self) -> None:
        self._db.close()


def metrics_store(state_dir: Path) -> MetricsStore:
    """The query metrics: a table of the state directory's catalog file."""
    return MetricsStore(state_dir / CATALOG_FILE)
