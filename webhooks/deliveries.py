"""Delivery ids (and signed bodies' digests) already acted on: a table of the catalog file.

The catalog is shared with ingest runs, which hold its write lock while they write, so every
call here waits at most `busy_timeout` seconds (then `CatalogBusy`), and the table is made on
first use: the webhook service starts, and answers, while another process holds the lock.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hetriever.core.sqlite_files import connect
from hetriever.store.catalog_schema import (
    DELIVERIES_ADDED_COLUMNS,
    DELIVERIES_INDEXES,
    DELIVERIES_SCHEMA,
)

DELIVERY_RETENTION_SECONDS = 30 * 24 * 3600  # GitHub keeps deliveries redeliverable for less


class CatalogBusy(Exception):
    """The catalog's write lock was not had within `catalog_timeout`: another process (an
    ingest) holds it."""


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


class DeliveryStore:
    """Delivery ids already acted on, in SQLite so that a restart still dedupes. Every call
    waits at most `busy_timeout` seconds for the catalog (then `CatalogBusy`); the table is
    made on first use, so the service starts while another process holds the lock."""

    def __init__(
        self,
        path: Path,
        retention_seconds: float = DELIVERY_RETENTION_SECONDS,
        busy_timeout: float = 30.0,
    ) -> None:
        self.path = path
        self.retention = retention_seconds
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        if not self._lock.acquire(timeout=self.busy_timeout):
            raise CatalogBusy("another delivery is waiting for the catalog")
        try:
            if self._connection is None:
                self._connection = self._open()
            yield self._connection
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise CatalogBusy(str(exc)) from None
            raise
        finally:
            self._lock.release()

    def _open(self) -> sqlite3.Connection:
        db = connect(self.path, timeout=self.busy_timeout)
        try:
            db.executescript(DELIVERIES_SCHEMA)
            columns = {r[1] for r in db.execute("PRAGMA table_info(webhook_deliveries)")}
            for name, kind in DELIVERIES_ADDED_COLUMNS.items():
                if name not in columns:  # a table an earlier version created
                    db.execute(f"ALTER TABLE webhook_deliveries ADD COLUMN {name} {kind}")
            db.execute(DELIVERIES_INDEXES)
        except BaseException:
            db.close()
            raise
        return db

    def claim(self, delivery_id: str, repository: str, body_digest: str | None = None) -> bool:
        """Record the id (and the body's digest); False if either was already there within
        the retention window: the same delivery again, or the same signed body replayed under
        another id."""
        now = time.time()
        with self._db() as db:
            db.execute(
                "DELETE FROM webhook_deliveries WHERE received_at < ?", (now - self.retention,)
            )
            if (
                body_digest is not None
                and db.execute(
                    "SELECT 1 FROM webhook_deliveries WHERE body_digest = ?", (body_digest,)
                ).fetchone()
            ):
                return False
            cur = db.execute(
                "INSERT OR IGNORE INTO webhook_deliveries (delivery_id, received_at, repository,"
                " body_digest) VALUES (?, ?, ?, ?)",
                (delivery_id, now, repository, body_digest),
            )
            return cur.rowcount == 1

    def complete(self, delivery_id: str, flow_run_id: str) -> None:
        with self._db() as db:
            db.execute(
                "UPDATE webhook_deliveries SET flow_run_id = ? WHERE delivery_id = ?",
                (flow_run_id, delivery_id),
            )

    def release(self, delivery_id: str) -> None:
        """Forget a claimed id whose run could not be started, so a redelivery is honoured."""
        with self._db() as db:
            db.execute("DELETE FROM webhook_deliveries WHERE delivery_id = ?", (delivery_id,))

    def get(self, delivery_id: str, body_digest: str | None = None) -> dict[str, Any] | None:
        """The delivery with this id, else the one with this body digest."""
        with self._db() as db:
            row = db.execute(
                "SELECT delivery_id, received_at, repository, flow_run_id"
                " FROM webhook_deliveries WHERE delivery_id = ? OR body_digest = ?"
                " ORDER BY delivery_id = ? DESC LIMIT 1",
                (delivery_id, body_digest, delivery_id),
            ).fetchone()
        if row is None:
            return None
        return dict(zip(("delivery_id", "received_at", "repository", "flow_run_id"), row))

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
