"""The analytics report `hetriever analytics`, `/stats` and the query flow's artifact show.

Over the queries kept (the last `days`, at most the retention): queries per day, the most
asked, those that found nothing, those that found only *weak* results, the HTTP searches whose
results nobody opened, the results readers opened, and latency percentiles by source and
temperature (cold: a process's first search, start-up included). Only the search page reports
opens, so "nobody opened" is said of queries asked over HTTP: found results every time, never
one opened.

A query is weak when it found results but the nearest of them came no closer in meaning than
`weak_below`: the best dense similarity among its results (cosine mapped into [0, 1], as
`SearchResult.dense_score`) under the `analytics_weak_similarity` setting. The fused score a
page shows is relative to the other candidates (the first is high whatever they are), so it
cannot say that all of them are far; the similarity can. A title or address matched exactly
is never weak; a BM25-only search has no similarity and is never called weak.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetriever.core.models import _Serialisable
from hetriever.search.analytics import existing_store
from hetriever.search.metrics import SOURCES, temperature_of

LISTED = 20  # rows of each list


@dataclass
class AnalyticsReport(_Serialisable):
    enabled: bool
    retention_days: int
    days: float  # the window reported
    weak_below: float
    queries: int = 0
    opened: int = 0  # queries with a result opened
    per_day: list[dict[str, Any]] = field(default_factory=list)  # day, queries, no_result, weak
    top_queries: list[dict[str, Any]] = field(default_factory=list)  # query, count, ...
    # query, count, last, scope (the repositories its searches named, "all" for none)
    no_result: list[dict[str, Any]] = field(default_factory=list)
    weak: list[dict[str, Any]] = field(default_factory=list)  # query, count, similarity
    # queries whose HTTP searches found results and none of them was ever opened
    unopened: list[dict[str, Any]] = field(default_factory=list)  # query, count
    opens: list[dict[str, Any]] = field(default_factory=list)  # query, rank, url, count
    latency: list[dict[str, Any]] = field(default_factory=list)  # source, temperature, ...


def _percentiles(values: list[float]) -> dict[str, float]:
    array = np.array(values)
    return {f"p{q}_ms": round(float(np.percentile(array, q)), 2) for q in (50, 95, 99)}


def _day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


def _scope(row: Any) -> list[str]:
    """The repositories a search named, or "all" for one that named none."""
    named = json.loads(row["repositories"] or "[]")
    return [str(name) for name in named] or ["all"]


def _is_weak(row: Any, weak_below: float) -> bool:
    return row["results"] > 0 and row["similarity"] is not None and row["similarity"] < weak_below


def _listed(counts: Counter[str], extra: dict[str, dict[str, Any]] | None = None) -> list[dict]:
    """The most frequent first, then by text, `LISTED` at most."""
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:LISTED]
    return [{"query": q, "count": n, **((extra or {}).get(q, {}))} for q, n in ordered]


def build_report(
    rows: list[Any],
    opens: list[tuple[str, int, str]],
    *,
    enabled: bool,
    retention_days: int,
    days: float,
    weak_below: float,
) -> AnalyticsReport:
    report = AnalyticsReport(
        enabled=enabled,
        retention_days=retention_days,
        days=days,
        weak_below=weak_below,
        queries=len(rows),
    )
    per_day: dict[str, Counter[str]] = defaultdict(Counter)
    asked: Counter[str] = Counter()
    empty: Counter[str] = Counter()
    weak: Counter[str] = Counter()
    unopened: Counter[str] = Counter()  # HTTP searches with results, by query
    opened_once: set[str] = set()  # queries with a result opened at least once
    last_empty: dict[str, dict[str, Any]] = {}
    nearest: dict[str, float] = {}
    latencies: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        day, query = per_day[_day(row["at"])], row["query"]
        day["queries"] += 1
        asked[query] += 1
        if row["results"] == 0:
            day["no_result"] += 1
            empty[query] += 1
            scopes = last_empty.get(query, {}).get("scope", [])
            last_empty[query] = {
                "last": time.strftime("%Y-%m-%d %H:%M", time.gmtime(row["at"])),
                "scope": sorted({*scopes, *_scope(row)}),
            }
        elif _is_weak(row, weak_below):
            day["weak"] += 1
            weak[query] += 1
            nearest[query] = max(nearest.get(query, 0.0), row["similarity"])
        if row["opened"]:
            report.opened += 1
            opened_once.add(query)
        if row["source"] == "http" and row["results"] > 0:  # only the page reports opens
            unopened[query] += 1
        latencies[(row["source"], temperature_of(row["cold"]))].append(row["latency_ms"])
    report.per_day = [
        {"day": d, "queries": c["queries"], "no_result": c["no_result"], "weak": c["weak"]}
        for d, c in sorted(per_day.items())
    ]
    report.top_queries = _listed(
        asked, {q: {"no_result": empty[q], "weak": weak[q]} for q in asked}
    )
    report.no_result = _listed(empty, last_empty)
    report.weak = _listed(weak, {q: {"similarity": round(s, 3)} for q, s in nearest.items()})
    report.unopened = _listed(Counter({q: n for q, n in unopened.items() if q not in opened_once}))
    opened = Counter((q, rank, url) for q, rank, url in opens)
    report.opens = [
        {"query": q, "rank": rank, "url": url, "count": n}
        for (q, rank, url), n in sorted(opened.items(), key=lambda kv: (-kv[1], kv[0]))[:LISTED]
    ]
    order = {name: i for i, name in enumerate(SOURCES)}
    report.latency = [
        {"source": s, "temperature": t, "count": len(v), **_percentiles(v)}
        for (s, t), v in sorted(latencies.items(), key=lambda g: (order.get(g[0][0], 99), g[0][1]))
    ]
    return report


def analytics_report(settings: Any, *, days: float | None = None) -> AnalyticsReport:
    """The report of `settings`' state directory; an empty one, creating nothing, where no
    analytics file exists (analytics off, or no search recorded yet)."""
    retention = settings.analytics_retention_days
    window = float(retention if days is None else min(days, retention))
    store = existing_store(Path(settings.resolved_state_dir), retention)
    rows: list[Any] = []
    opens: list[tuple[str, int, str]] = []
    if store is not None:
        try:
            store.drop_expired()
            rows, opens = store.rows(window), store.opens(window)
        finally:
            store.close()
    return build_report(
        rows,
        opens,
        enabled=settings.analytics,
        retention_days=retention,
        days=window,
        weak_below=settings.analytics_weak_similarity,
    )
