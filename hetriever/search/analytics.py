"""Search analytics: what readers asked, what they found, which result they opened.

Off unless the `analytics` setting is on (`HETRIEVER_ANALYTICS=true`); then each served
search (`hetriever serve`'s /search, `hetriever mcp`'s search_docs, `hetriever search`, the
query flow) is one row of `analytics.sqlite3` in the state directory: its time, the query as
given (cut to `MAX_QUERY_CHARS`), the repositories it named, the result count, the top
result's score, how close the nearest page came (`similarity`), the latency, its source and
temperature (as `hetriever.search.metrics` records them). A reader opening a result of an
HTTP search adds an `opens` row: the query's id, the result's rank and URL. Rows older than
`analytics_retention_days` are dropped as new ones are written and before every report;
`purge()` drops them all.

Nothing here may slow or fail a search: callers write from a background thread (`serve`) or
catch every SQLite and OS error (`hetriever search`). With analytics off no file is created,
and reading a report where none exists reads an empty one.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetriever.core.logs import get_logger
from hetriever.core.models import RetrievalResult, SearchResult
from hetriever.core.sqlite_files import connect

log = get_logger(__name__)

ANALYTICS_FILE = "analytics.sqlite3"
MAX_QUERY_CHARS = 500  # a query is kept as given, up to this many characters
MAX_URL_CHARS = 2048
# Rows kept at most whatever the retention (a flood of searches cannot fill the disk).
KEEP_QUERIES = 500_000
# Waiting for a lock held by another writer: a search never waits longer than this on it.
WRITE_TIMEOUT = 0.5
DAY = 86_400.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS queries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    at REAL NOT NULL,
    query TEXT NOT NULL,
    repositories TEXT NOT NULL,
    results INTEGER NOT NULL,
    top_score REAL,
    similarity REAL,
    latency_ms REAL NOT NULL,
    source TEXT NOT NULL,
    cold INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS queries_at ON queries(at);
CREATE TABLE IF NOT EXISTS opens (
    query_id TEXT NOT NULL,
    rank INTEGER NOT NULL,
    url TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (query_id, rank)
);
CREATE INDEX IF NOT EXISTS opens_at ON opens(at);
"""


def new_query_id() -> str:
    """An id nobody can guess: an open is accepted only for a query the server answered."""
    return secrets.token_urlsafe(12)


def _storable(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, as SQLite can store it (a lone surrogate becomes
    `?` rather than failing the batch)."""
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


def nearest_similarity(matches: Sequence[SearchResult]) -> float | None:
    """How close the nearest page among the results came in meaning: the best dense
    similarity among them, 1.0 when one matched a title or address exactly, None when no
    result has a dense score (a BM25-only search)."""
    if any(m.source == "exact" for m in matches):
        return 1.0
    scores = [m.dense_score for m in matches if m.dense_score is not None]
    return max(scores) if scores else None


@dataclass
class QueryRecord:
    id: str
    at: float
    query: str
    repositories: list[str]
    results: int
    top_score: float | None
    similarity: float | None
    latency_ms: float
    source: str  # cli, query-flow, http, mcp
    cold: bool

    @classmethod
    def of(
        cls,
        result: RetrievalResult,
        *,
        returned: int | None = None,
        latency_ms: float | None = None,
        repositories: list[str] | None = None,
        source: str,
        cold: bool,
        query_id: str | None = None,
    ) -> QueryRecord:
        """`returned`: the results the caller was shown (a server cuts to its k)."""
        shown = result.matches if returned is None else result.matches[:returned]
        return cls(
            id=query_id or new_query_id(),
            at=time.time(),
            query=result.query,
            repositories=list(repositories or []),
            results=len(shown) if returned is not None else result.total_results,
            top_score=shown[0].score if shown else None,
            similarity=nearest_similarity(shown),
            latency_ms=result.search_time_ms if latency_ms is None else latency_ms,
            source=source,
            cold=cold,
        )


@dataclass(frozen=True)
class OpenRecord:
    query_id: str
    rank: int  # 1 = the first result
    url: str
    at: float


def analytics_path(state_dir: Path) -> Path:
    return state_dir / ANALYTICS_FILE


class AnalyticsStore:
    """The analytics file. `retention_days` bounds every write and every read."""

    def __init__(
        self,
        path: Path,
        *,
        retention_days: int,
        timeout: float = WRITE_TIMEOUT,
        keep: int = KEEP_QUERIES,
    ) -> None:
        self.path, self.retention_days, self.keep = path, retention_days, keep
        self._db = connect(path, timeout=timeout)
        self._db.executescript(SCHEMA)
        self._dropped_at = 0.0

    @property
    def cutoff(self) -> float:
        return time.time() - self.retention_days * DAY

    def record(self, queries: Sequence[QueryRecord], opens: Sequence[OpenRecord] = ()) -> None:
        """Queries, then opens (an open of a query not kept, or a second open of one rank, is
        dropped: the table holds at most one open per result shown)."""
        with self._db:
            self._db.executemany(
                "INSERT OR IGNORE INTO queries (id, at, query, repositories, results, "
                "top_score, similarity, latency_ms, source, cold) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        q.id,
                        q.at,
                        _storable(q.query, MAX_QUERY_CHARS),
                        json.dumps(q.repositories),
                        q.results,
                        q.top_score,
                        q.similarity,
                        q.latency_ms,
                        q.source,
                        int(q.cold),
                    )
                    for q in queries
                ],
            )
            self._db.executemany(
                "INSERT OR IGNORE INTO opens (query_id, rank, url, at) "
                "SELECT id, ?, ?, ? FROM queries WHERE id = ? AND ? BETWEEN 1 AND results",
                [
                    (o.rank, _storable(o.url, MAX_URL_CHARS), o.at, o.query_id, o.rank)
                    for o in opens
                ],
            )
        if time.time() - self._dropped_at > 60:  # retention: at most once a minute
            self.drop_expired()

    def drop_expired(self) -> int:
        """Rows past the retention (and queries beyond `keep`) deleted; how many queries."""
        cutoff = self.cutoff
        with self._db:
            gone = self._db.execute("DELETE FROM queries WHERE at < ?", (cutoff,)).rowcount
            gone += self._db.execute(
                "DELETE FROM queries WHERE seq <= (SELECT MAX(seq) FROM queries) - ?", (self.keep,)
            ).rowcount
            self._db.execute(
                "DELETE FROM opens WHERE at < ? OR query_id NOT IN (SELECT id FROM queries)",
                (cutoff,),
            )
        self._dropped_at = time.time()
        return gone

    def purge(self) -> int:
        """Every row deleted and the file rewritten, so no query text is left on disk;
        how many queries were deleted."""
        with self._db:
            count = self._db.execute("DELETE FROM queries").rowcount
            self._db.execute("DELETE FROM opens")
        self._db.execute("VACUUM")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return count

    def rows(self, days: float | None = None) -> list[sqlite3.Row]:
        """The queries of the last `days` (at most the retention), each with the ranks
        opened (`opened`: a comma-separated list, or None), oldest first."""
        since = max(self.cutoff, time.time() - days * DAY) if days is not None else self.cutoff
        self._db.row_factory = sqlite3.Row
        try:
            return self._db.execute(
                "SELECT q.*, (SELECT group_concat(rank) FROM opens o WHERE o.query_id = q.id)"
                " AS opened FROM queries q WHERE q.at >= ? ORDER BY q.at",
                (since,),
            ).fetchall()
        finally:
            self._db.row_factory = None

    def opens(self, days: float | None = None) -> list[tuple[str, int, str]]:
        """(query, rank, url) of each open in the window."""
        since = max(self.cutoff, time.time() - days * DAY) if days is not None else self.cutoff
        return self._db.execute(
            "SELECT q.query, o.rank, o.url FROM opens o JOIN queries q ON q.id = o.query_id "
            "WHERE q.at >= ? ORDER BY o.at",
            (since,),
        ).fetchall()

    def close(self) -> None:
        self._db.close()


def open_store(state_dir: Path, retention_days: int) -> AnalyticsStore:
    """The state directory's analytics file, created when absent."""
    return AnalyticsStore(analytics_path(state_dir), retention_days=retention_days)


def existing_store(state_dir: Path, retention_days: int) -> AnalyticsStore | None:
    """The analytics file, or None where there is none (reading creates nothing)."""
    path = analytics_path(state_dir)
    return AnalyticsStore(path, retention_days=retention_days) if path.exists() else None


def record_quietly(settings: Any, record: QueryRecord) -> bool:
    """One search's row, written now (`hetriever search`, the query flow); a failure to
    write it (a full disk, a locked file) is logged and costs the row, never the search."""
    try:
        store = open_store(settings.resolved_state_dir, settings.analytics_retention_days)
        try:
            store.record([record])
        finally:
            store.close()
    except (sqlite3.Error, OSError) as exc:
        log.warning("analytics_not_recorded", error=str(exc))
        return False
    return True
