"""Vectors by their text, so a version borrows them without opening another collection.

Every vector a write puts into Chroma is recorded here first, under the sha256 of its text and
the store's fingerprint (model, precision, chunking), in one SQLite file per repository and its
versions (`<state>/vectors/<base>.sqlite`). A version's write looks its texts up here instead
of reading its donor's collection through Chroma, which kept that collection's vector index
loaded beside the version's own for the rest of the run (bench/README.md, "bench_versions").

A vector depends on its text and the model alone (the int8 build too, since it quantizes per
token), so a row is never stale, and one ahead of Chroma (a crash between the two writes) is
as right as any. A collection is *covered* when every vector it holds went through here: one
that was empty at its first write with the ledger in place. A donor that is not covered (built
before the ledger, or whose ledger was lost) is still read through Chroma (`store/donors.py`).
A write deletes no row: the file holds each text the family embedded, ~2.2 KB a chunk for
MiniLM (a rowid table: without a rowid, SQLite gave each 1.5 KB vector a page of its own, 4.7 KB
a chunk). `purge`, `forget` (right to erasure), and a run that finds the ledger grown past twice
what the family holds prune it to the texts the family's collections still hold
(`donors.prune_ledger`): nothing forgotten lingers as a vector, not even an older text of a
forgotten file. A pruned row another collection still
needed, or a lost file, only costs a later version run the borrowing of that text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from hetriever.core.logs import get_logger
from hetriever.core.sqlite_files import connect, in_batches, is_damaged, set_aside

log = get_logger(__name__)
T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    fingerprint TEXT NOT NULL,
    hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (fingerprint, hash)
);
CREATE TABLE IF NOT EXISTS collections (
    physical TEXT PRIMARY KEY,
    covered INTEGER NOT NULL
);
"""


def ledger_path(state_dir: Path, family: str) -> Path:
    return Path(state_dir) / "vectors" / f"{family}.sqlite"


class VectorLedger:
    """One family's ledger under one fingerprint; a connection per use (a write window's
    lookups and records), so it holds nothing between windows and threads share nothing."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path = path
        self.fingerprint = fingerprint

    def _use(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` on a fresh connection. A damaged file is set aside and `work` runs on an
        empty one: it held copies only, and no collection is covered by an empty ledger."""
        for attempt in (1, 2):
            conn = None
            try:
                conn = connect(self.path)
                conn.executescript(SCHEMA)
                return work(conn)
            except sqlite3.DatabaseError as exc:
                if attempt == 2 or not is_damaged(exc) or not self.path.exists():
                    raise
                if conn is not None:
                    conn.close()
                    conn = None
                aside = set_aside(self.path)
                log.error("vector_ledger_damaged", path=str(self.path), moved_to=str(aside))
            finally:
                if conn is not None:
                    conn.close()
        raise AssertionError("unreachable")

    def lookup(self, hashes: Sequence[str], dimensions: int) -> dict[str, Any]:
        """Content hash -> vector (float32, `dimensions` long) for the hashes recorded."""
        if not hashes or not self.path.exists():
            return {}

        def read(conn: sqlite3.Connection) -> dict[str, Any]:
            found: dict[str, Any] = {}
            for part in in_batches(list(hashes)):
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT hash, vector FROM vectors WHERE fingerprint = ? AND hash IN ({marks})",
                    (self.fingerprint, *part),
                )
                for digest, blob in rows:
                    if len(blob) == 4 * dimensions:  # another model's size is not this one's
                        found[digest] = np.frombuffer(blob, dtype=np.float32).copy()
            return found

        return self._use(read)

    def record(self, hashes: Sequence[str], vectors: Any) -> None:
        """Keep each vector under its text's hash (a hash already held keeps its row)."""
        if not len(hashes):
            return
        rows = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))

        def write(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("BEGIN")
                conn.executemany(
                    "INSERT OR IGNORE INTO vectors (fingerprint, hash, vector) VALUES (?, ?, ?)",
                    ((self.fingerprint, h, rows[i].tobytes()) for i, h in enumerate(hashes)),
                )

        self._use(write)

    def covered(self, physical: str) -> bool | None:
        """Whether every vector of collection `physical` is here; None before its first
        write with a ledger (`note_first_write`)."""
        if not self.path.exists():
            return None
        row = self._use(
            lambda conn: conn.execute(
                "SELECT covered FROM collections WHERE physical = ?", (physical,)
            ).fetchone()
        )
        return None if row is None else bool(row[0])

    def note_first_write(self, physical: str, empty: bool) -> None:
        """Collection `physical` meets the ledger: covered if it holds nothing yet."""
        self._use(
            lambda conn: conn.execute(
                "INSERT OR IGNORE INTO collections (physical, covered) VALUES (?, ?)",
                (physical, int(empty)),
            )
        )

    def count(self) -> int:
        """Rows held, of every fingerprint."""
        if not self.path.exists():
            return 0
        return int(
            self._use(lambda conn: conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])
        )

    def prune(self, keep: set[str]) -> int:
        """Delete every row (any fingerprint) whose hash is not in `keep`; how many went."""
        if not self.path.exists():
            return 0

        def prune_rows(conn: sqlite3.Connection) -> int:
            held = [h for (h,) in conn.execute("SELECT DISTINCT hash FROM vectors")]
            gone = [h for h in held if h not in keep]
            with conn:
                conn.execute("BEGIN")
                for part in in_batches(gone):
                    marks = ",".join("?" * len(part))
                    conn.execute(f"DELETE FROM vectors WHERE hash IN ({marks})", tuple(part))
            return len(gone)

        return self._use(prune_rows)

    def drop(self) -> None:
        """Remove the file (its -wal and -shm too)."""
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
