"""Query metrics kept beside the index (SQLite), so p50/p95 over recent queries can be reported.

Only the newest `KEEP_QUERIES` queries are kept: a long-lived server records every search.
Each query records its source (`cli`, `query-flow`, `http`, `mcp`) and whether it was cold,
its process's first search (the model, the store and the BM25 index loaded on the way: a CLI
search, the query flow's warm-up), so cold and warm latencies are reported apart: pooled, a
second of start-up hides a search of 12 ms. Rows written before sources were recorded read as
`http`/`mcp` by their mode's prefix, else `unrecorded` (a CLI or query-flow search).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hetriever.core.models import RetrievalResult, _Serialisable
from hetriever.core.sqlite_files import connect
from hetriever.store.catalog_schema import (
    CATALOG_FILE,
    METRICS_ADDED_COLUMNS,
    METRICS_SCHEMA,
)

KEEP_QUERIES = 100_000  # ~20 MB of rows; summaries read the last 1,000 by default

SOURCES = ("cli", "query-flow", "http", "mcp")
UNRECORDED = "unrecorded"
# A row's source: recorded, else the prefix servers gave their mode, else unknown.
SOURCE_SQL = (
    f"COALESCE(source, CASE WHEN mode LIKE 'http:%' THEN 'http' "
    f"WHEN mode LIKE 'mcp:%' THEN 'mcp' ELSE '{UNRECORDED}' END)"
)


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
    source: str | None = None  # one of SOURCES
    cold: bool | None = None  # the process's first search

    @classmethod
    def from_result(
        cls,
        result: RetrievalResult,
        repositories: list[str] | None = None,
        *,
        source: str | None = None,
        cold: bool | None = None,
    ) -> QueryMetric:
        return cls(
            query=result.query[:500],
            mode=result.mode,
            latency_ms=result.search_time_ms,
            results=result.total_results,
            top_score=result.matches[0].score if result.matches else None,
            retriever_counts=dict(result.retriever_counts),
            repositories=list(repositories or []),
            source=source,
            cold=cold,
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
    # per source and temperature: {"source", "temperature", "count", "p50_ms", "p95_ms", "p99_ms"}
    by_source: list[dict] = field(default_factory=list)
    # per temperature, every source pooled: {"temperature", "count", "p50_ms", "p95_ms", "p99_ms"}
    by_temperature: list[dict] = field(default_factory=list)


def _storable(text: str) -> str:
    """`text` as SQLite can store it: a lone surrogate (undecodable input) would fail the
    whole batch of metrics, so it becomes U+FFFD."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _percentiles(latencies: list[float]) -> tuple[float, float, float]:
    p50, p95, p99 = (float(np.percentile(np.array(latencies), q)) for q in (50, 95, 99))
    return round(p50, 2), round(p95, 2), round(p99, 2)


def temperature_of(cold: int | None) -> str:
    return "cold" if cold == 1 else "warm" if cold == 0 else "?"


class MetricsStore:
    def __init__(self, path: Path, *, keep: int = KEEP_QUERIES) -> None:
        self.path = path
        self.keep = keep
        self._db = connect(path)
        self._db.executescript(METRICS_SCHEMA)
        have = {row[1] for row in self._db.execute("PRAGMA table_info(query_metrics)")}
        for name, kind in METRICS_ADDED_COLUMNS.items():
            if name not in have:
                self._db.execute(f"ALTER TABLE query_metrics ADD COLUMN {name} {kind}")

    def record(self, metric: QueryMetric) -> None:
        self.record_many([metric])

    def record_many(self, metrics: list[QueryMetric]) -> None:
        with self._db:
            self._db.executemany(
                "INSERT INTO query_metrics (at, query, mode, latency_ms, results, top_score,"
                " retriever_counts, repositories, source, cold)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        m.at,
                        _storable(m.query),
                        m.mode,
                        m.latency_ms,
                        m.results,
                        m.top_score,
                        json.dumps(m.retriever_counts),
                        json.dumps(m.repositories),
                        m.source,
                        None if m.cold is None else int(m.cold),
                    )
                    for m in metrics
                ],
            )
            # Retention: the newest `keep` queries (ids only grow, so one indexed delete).
            self._db.execute(
                "DELETE FROM query_metrics WHERE id <= (SELECT MAX(id) FROM query_metrics) - ?",
                (self.keep,),
            )

    def summary(
        self, last: int = 1000, source: str | None = None, temperature: str | None = None
    ) -> MetricsSummary:
        """Over the last `last` queries (of `source` and of `temperature`, "cold" or "warm",
        when given), with a row per source and temperature among them."""
        clauses: list[str] = []
        params: list[str | int] = []
        if source:
            clauses.append(f"{SOURCE_SQL} = ?")
            params.append(source)
        if temperature:
            clauses.append("cold = ?")
            params.append(1 if temperature == "cold" else 0)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._db.execute(
            f"SELECT latency_ms, results, mode, {SOURCE_SQL}, cold FROM query_metrics {where} "
            "ORDER BY id DESC LIMIT ?",
            [*params, last],
        ).fetchall()
        if not rows:
            return MetricsSummary(0, None, None, None, None, None, {})
        results = np.array([r[1] for r in rows])
        by_mode: dict[str, int] = {}
        groups: dict[tuple[str, str], list[float]] = {}
        for latency, _, mode, origin, cold in rows:
            by_mode[mode] = by_mode.get(mode, 0) + 1
            groups.setdefault((origin, temperature_of(cold)), []).append(latency)
        p50, p95, p99 = _percentiles([r[0] for r in rows])
        order = {name: i for i, name in enumerate((*SOURCES, UNRECORDED))}
        by_source = [
            {
                "source": origin,
                "temperature": temp,
                "count": len(values),
                **dict(zip(("p50_ms", "p95_ms", "p99_ms"), _percentiles(values))),
            }
            for (origin, temp), values in sorted(
                groups.items(), key=lambda g: (order.get(g[0][0], 99), g[0][1])
            )
        ]
        temperatures: dict[str, list[float]] = {}
        for (_, temp), values in groups.items():
            temperatures.setdefault(temp, []).extend(values)
        by_temperature = [
            {
                "temperature": temp,
                "count": len(temperatures[temp]),
                **dict(zip(("p50_ms", "p95_ms", "p99_ms"), _percentiles(temperatures[temp]))),
            }
            for temp in ("warm", "cold", "?")
            if temp in temperatures
        ]
        return MetricsSummary(
            count=len(rows),
            p50_ms=p50,
            p95_ms=p95,
            p99_ms=p99,
            mean_results=round(float(results.mean()), 2),
            empty_rate=round(float((results == 0).mean()), 4),
            by_mode=by_mode,
            by_source=by_source,
            by_temperature=by_temperature,
        )

    def close(self) -> None:
        self._db.close()


def metrics_store(state_dir: Path) -> MetricsStore:
    """The query metrics: a table of the state directory's catalog file."""
    return MetricsStore(state_dir / CATALOG_FILE)
