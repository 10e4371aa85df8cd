"""Opening the SQLite files beside the index one way: the catalog, each BM25 index, query
metrics and webhook deliveries.

Autocommit (transactions are explicit `BEGIN`s where a write spans several statements), WAL so
readers never wait for a writer, `synchronous=NORMAL` (durable at checkpoints, never corrupt),
and a connection threads may share under their owner's lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# Ids per `IN (...)` list: well under SQLite's limit on bound parameters.
IN_BATCH = 500


def connect(path: Path, *, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection to the SQLite file at `path` (created, with its folder, when absent)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        str(path), timeout=timeout, check_same_thread=False, isolation_level=None
    )
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def read_meta(conn: sqlite3.Connection, key: str) -> str:
    """The value under `key` in a `meta(key, value)` table, or "" when absent."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else ""


def in_batches(items: Sequence[T], size: int = IN_BATCH) -> Iterator[Sequence[T]]:
    """`items` in slices of at most `size`, one `IN (...)` query each."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def is_damaged(exc: sqlite3.DatabaseError) -> bool:
    """Whether `exc` says the file is no SQLite database or a malformed one (not a lock or
    an I/O error, which are `OperationalError`s and pass)."""
    return not isinstance(exc, sqlite3.OperationalError)


def set_aside(path: Path) -> Path:
    """Move a damaged SQLite file to `<name>.damaged-<time>` (its -wal and -shm removed), so
    the next connection starts an empty one; returns where it went."""
    import time

    aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
    path.replace(aside)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return aside
