from __future__ import annotations

import json

from hetriever.core.models import RetrievalResult, SearchResult
from hetriever.search.metrics import MetricsStore, QueryMetric


def test_percentiles_over_recorded_queries(tmp_path):
    store = MetricsStore(tmp_path / "m.sqlite")
    for i in range(1, 101):
        store.record(
            QueryMetric(
                query=f"q{i}",
                mode="hybrid" if i % 2 else "dense",
                latency_ms=float(i),
                results=0 if i <= 10 else 5,
                top_score=0.5,
            )
        )
    summary = store.summary()
    assert summary.count == 100
    assert 49 <= summary.p50_ms <= 52
    assert 94 <= summary.p95_ms <= 96
    assert summary.empty_rate == 0.1
    assert summary.by_mode == {"hybrid": 50, "dense": 50}
    # only the most recent N
    assert store.summary(last=10).p50_ms > 90
    store.close()
    # persisted
    again = MetricsStore(tmp_path / "m.sqlite")
    assert again.summary().count == 100


def test_metric_from_retrieval_result(tmp_path):
    result = RetrievalResult(
        query="where",
        total_results=1,
        search_time_ms=3.5,
        mode="hybrid",
        retriever_counts={"dense": 4, "bm25": 3, "merged": 5},
        matches=[SearchResult("a", "text", {}, 0.8, "hybrid")],
    )
    metric = QueryMetric.from_result(result, ["hugo-docs"])
    assert metric.top_score == 0.8 and metric.results == 1
    store = MetricsStore(tmp_path / "m.sqlite")
    store.record(metric)
    assert store.summary().p50_ms == 3.5
    empty = MetricsStore(tmp_path / "e.sqlite").summary()
    assert empty.count == 0 and empty.p50_ms is None


def test_only_the_newest_queries_are_kept(tmp_path):
    store = MetricsStore(tmp_path / "m.sqlite", keep=25)
    store.record_many(
        [
            QueryMetric(query=f"q{i}", mode="hybrid", latency_ms=float(i), results=1, top_score=0.5)
            for i in range(1, 41)
        ]
    )
    for i in range(41, 61):
        store.record(
            QueryMetric(query=f"q{i}", mode="hybrid", latency_ms=float(i), results=1, top_score=0.5)
        )
    summary = store.summary(last=1000)
    assert summary.count == 25  # a long-lived server does not grow the file without bound
    assert store.summary(last=25).p50_ms == 48.0  # the newest 25: latencies 36..60
    store.close()


def test_metrics_and_webhook_deliveries_live_in_the_catalog_file(tmp_path):
    from hetriever.search.metrics import metrics_store
    from hetriever.store.catalog import Catalog
    from webhooks.deliveries import DeliveryStore

    catalog = Catalog.for_state_dir(tmp_path)
    metrics = metrics_store(tmp_path)
    deliveries = DeliveryStore(catalog.path)
    metrics.record(QueryMetric(query="q", mode="hybrid", latency_ms=2.0, results=1, top_score=1.0))
    assert deliveries.claim("delivery-1", "hugo-docs")
    catalog.note("checked", "yes")  # the catalog's own writes go on beside them
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".sqlite") == ["catalog.sqlite"]
    tables = {r[0] for r in catalog.db.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"collections", "query_metrics", "webhook_deliveries"} <= tables
    assert metrics.summary().count == 1 and not deliveries.claim("delivery-1", "hugo-docs")
    for handle in (metrics, deliveries, catalog):
        handle.close()


def test_a_query_that_is_not_valid_text_does_not_lose_the_batch(tmp_path):
    # Undecodable input reaches Python as lone surrogates, which SQLite cannot store.
    store = MetricsStore(tmp_path / "m.sqlite")
    store.record_many(
        [
            QueryMetric(query="caf\udce9", mode="bm25", latency_ms=2.0, results=1, top_score=0.1),
            QueryMetric(query="where", mode="hybrid", latency_ms=3.0, results=2, top_score=0.5),
        ]
    )
    assert store.summary().count == 2
    store.close()


def _metric(latency: float, **kw) -> QueryMetric:
    return QueryMetric(
        query="q", mode=kw.pop("mode", "hybrid"), latency_ms=latency, results=1, top_score=0.5, **kw
    )


def test_cold_and_warm_by_source_are_reported_apart(tmp_path):
    store = MetricsStore(tmp_path / "m.sqlite")
    store.record_many(
        [_metric(900.0 + i, source="cli", cold=True) for i in range(5)]
        + [_metric(1100.0, source="query-flow", cold=True)]
        + [_metric(12.0 + i, source="query-flow", cold=False) for i in range(3)]
        + [_metric(15.0, mode="http:hybrid", source="http", cold=False)]
        + [_metric(20.0, mode="mcp:hybrid", source="mcp", cold=False)]
    )
    rows = {(r["source"], r["temperature"]): r for r in store.summary().by_source}
    assert [key for key in rows] == [
        ("cli", "cold"),
        ("query-flow", "cold"),
        ("query-flow", "warm"),
        ("http", "warm"),
        ("mcp", "warm"),
    ]
    assert rows[("cli", "cold")]["count"] == 5 and rows[("cli", "cold")]["p50_ms"] == 902.0
    assert rows[("query-flow", "warm")]["p50_ms"] == 13.0  # not pooled with its cold search
    warm_flow = store.summary(source="query-flow", temperature="warm")
    assert warm_flow.count == 3 and warm_flow.p95_ms < 15
    assert store.summary(temperature="cold").count == 6
    assert store.summary(source="http").p50_ms == 15.0
    store.close()


def test_rows_from_before_sources_keep_what_their_mode_says(tmp_path):
    import sqlite3

    old = sqlite3.connect(tmp_path / "m.sqlite")  # the table as an older version made it
    old.executescript("""
        CREATE TABLE query_metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,
            query TEXT NOT NULL, mode TEXT NOT NULL, latency_ms REAL NOT NULL,
            results INTEGER NOT NULL, top_score REAL, retriever_counts TEXT NOT NULL,
            repositories TEXT NOT NULL);
        INSERT INTO query_metrics (at, query, mode, latency_ms, results, top_score,
            retriever_counts, repositories) VALUES
            (1, 'a', 'hybrid', 800, 1, 0.5, '{}', '[]'),
            (2, 'b', 'http:hybrid', 14, 1, 0.5, '{}', '[]');
    """)
    old.commit()
    old.close()
    store = MetricsStore(tmp_path / "m.sqlite")
    store.record(_metric(10.0, source="cli", cold=True))
    rows = [(r["source"], r["temperature"], r["count"]) for r in store.summary().by_source]
    assert rows == [("cli", "cold", 1), ("http", "?", 1), ("unrecorded", "?", 1)]
    assert store.summary(source="http").count == 1
    store.close()


def test_the_metrics_headline_says_cold_and_warm_apart_in_plain_words(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    state = tmp_path / "state"
    from hetriever.search.metrics import metrics_store

    store = metrics_store(state)
    store.record_many(
        [_metric(900.0 + i, source="cli", cold=True) for i in range(3)]
        + [_metric(12.0 + i, mode="http:hybrid", source="http", cold=False) for i in range(5)]
    )
    store.close()
    env = {
        **os.environ,
        "HETRIEVER_STATE_DIR": str(state),
        "HETRIEVER_CHROMA_PATH": str(tmp_path / "chroma"),
    }
    out = subprocess.run(
        [str(Path(sys.executable).parent / "hetriever"), "metrics"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    head = out.stdout.splitlines()[:4]
    assert head[1] == "warm: 5 queries, p50 14.0 ms, p95 15.8 ms, p99 15.96 ms"
    assert head[2].startswith("cold (start-up included): 3 queries, p50 901.0 ms")
    assert head[3] == "by mode: http:hybrid 5, hybrid 3"
    assert not any(c in "\n".join(head) for c in "{}[]'")  # no Python structure printed
    summary = json.loads(
        subprocess.run(
            [str(Path(sys.executable).parent / "hetriever"), "metrics", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )
    assert [(r["temperature"], r["count"]) for r in summary["by_temperature"]] == [
        ("warm", 5),
        ("cold", 3),
    ]
