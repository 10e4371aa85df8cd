"""The catalog's SQLite database: every table its file holds, defined here and nowhere else, and
the one connection to it that `Catalog` and its parts (`catalog_pages`, `catalog_windows`) share.

The catalog's tables: `meta` (version, alias epoch, notes), `repositories`, `collections`,
`files`, `runs`, `titles` and `links` (the page keys), `windows` (publish windows). The same
file holds search's `query_metrics` and the webhook's `webhook_deliveries`, created by their
owners from the definitions here. The connection is
opened once, behind a lock (safe to share between threads); every write is one short
`BEGIN IMMEDIATE` transaction, and WAL lets searches read while an ingest writes. A damaged
file is set aside and an empty catalog started: it is derived state, and the next ingest
rebuilds it from Chroma (`hetriever.store.recovery`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hetriever.core.logs import get_logger
from hetriever.core.sqlite_files import connect, is_damaged, set_aside

log = get_logger(__name__)

CATALOG_FILE = "catalog.sqlite"
CATALOG_VERSION = 2  # 2: collections.index_state

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS repositories (
    name TEXT PRIMARY KEY,
    url TEXT NOT NULL DEFAULT '',
    access_level TEXT NOT NULL DEFAULT 'PUBLIC',
    settings TEXT NOT NULL DEFAULT '{}',
    active_collection TEXT,
    next_generation INTEGER NOT NULL DEFAULT 1,
    last_commit TEXT NOT NULL DEFAULT '',
    last_run_at TEXT NOT NULL DEFAULT '',
    last_run_outcome TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    repository TEXT NOT NULL,
    generation INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL,
    levels TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL,
    index_state TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS files (
    collection TEXT NOT NULL,
    repository TEXT NOT NULL,
    path TEXT NOT NULL,
    blob TEXT NOT NULL DEFAULT '',
    last_commit TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    chunk_count INTEGER NOT NULL DEFAULT 0,
    deleted_at TEXT NOT NULL DEFAULT '',
    updated_at TEXT NOT NULL,
    PRIMARY KEY (collection, path)
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    repository TEXT NOT NULL,
    collection TEXT NOT NULL,
    mode TEXT NOT NULL DEFAULT '',
    old_commit TEXT NOT NULL DEFAULT '',
    new_commit TEXT NOT NULL DEFAULT '',
    started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL DEFAULT '',
    outcome TEXT NOT NULL DEFAULT 'running',
    counts TEXT NOT NULL DEFAULT '{}',
    error TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS titles (
    collection TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    priority INTEGER NOT NULL,
    path TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    PRIMARY KEY (collection, key, path, kind)
);
CREATE INDEX IF NOT EXISTS titles_by_key ON titles (key, priority);
-- Every stored file replaces its rows: without this, a scan of the collection's titles
-- (6 ms per file at 100k chunks).
CREATE INDEX IF NOT EXISTS titles_by_path ON titles (collection, path);
CREATE INDEX IF NOT EXISTS files_by_state ON files (collection, state);
CREATE TABLE IF NOT EXISTS links (
    collection TEXT NOT NULL,
    path TEXT NOT NULL,
    key TEXT NOT NULL,
    PRIMARY KEY (collection, path, key)
);
CREATE INDEX IF NOT EXISTS links_by_key ON links (collection, key);
CREATE TABLE IF NOT EXISTS windows (
    collection TEXT NOT NULL,
    path TEXT NOT NULL,
    publish_at TEXT NOT NULL DEFAULT '',
    expire_at TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (collection, path)
);
"""
# Tables whose rows belong to one file of a collection.
PER_FILE_TABLES = ("titles", "links", "windows")

# Tables others keep in the catalog's file, each created by its owner on first use.
# Search's query metrics (`hetriever.search.metrics`):
METRICS_SCHEMA = """
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
# Added to a table made before them; NULL in its old rows.
METRICS_ADDED_COLUMNS = {"source": "TEXT", "cold": "INTEGER"}
# The webhook's deliveries seen (`webhooks.deliveries`), to refuse a replay:
DELIVERIES_SCHEMA = """
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    delivery_id TEXT PRIMARY KEY, received_at REAL NOT NULL,
    repository TEXT NOT NULL, flow_run_id TEXT);
CREATE INDEX IF NOT EXISTS webhook_deliveries_received ON webhook_deliveries (received_at);
"""
DELIVERIES_ADDED_COLUMNS = {"body_digest": "TEXT"}  # NULL in rows an earlier version wrote
DELIVERIES_INDEXES = (
    "CREATE INDEX IF NOT EXISTS webhook_deliveries_body ON webhook_deliveries (body_digest)"
)


class CatalogDatabase:
    """The catalog's one SQLite connection: opened (or set aside when damaged and started
    anew), its tables created or brought up to date, transactions, reads, and the meta notes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            if not is_damaged(exc):
                raise
            # Derived state: the next ingest finds its collections in Chroma again
            # (hetriever.store.recovery); run history and metrics start over.
            aside = set_aside(self.path)
            log.warning(
                "catalog_damaged",
                path=str(self.path),
                moved_to=str(aside),
                error=str(exc),
                action="started an empty catalog; the next ingest "
                "rebuilds it from Chroma with a full pass",
            )
            self._open()

    def _open(self) -> None:
        self._conn = connect(self.path)
        self._conn.row_factory = sqlite3.Row
        try:
            self._create()
        except sqlite3.DatabaseError:
            self._conn.close()
            raise

    def _create(self) -> None:
        with self._lock:
            self._conn.executescript(SCHEMA)
            columns = {r[1] for r in self._conn.execute("PRAGMA table_info(collections)")}
            if "index_state" not in columns:  # a version 1 catalog
                self._conn.execute(
                    "ALTER TABLE collections ADD COLUMN index_state TEXT NOT NULL DEFAULT '{}'"
                )
                self._conn.execute(
                    "UPDATE meta SET value = ? WHERE key = 'version'", (str(CATALOG_VERSION),)
                )
            self._conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('version', ?)",
                (str(CATALOG_VERSION),),
            )
            self._conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('alias_epoch', '0')")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, tuple(args)).fetchall()

    def noted(self, key: str) -> str | None:
        """A value kept in the meta table by `note` (None when never noted)."""
        rows = self.rows("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0]["value"]) if rows else None

    def note(self, key: str, value: str | None) -> None:
        with self.transaction() as conn:
            if value is None:
                conn.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
