"""Array metadata a dropped Chroma collection leaves behind, removed.

Embedded Chroma (1.5.x) keeps list-valued metadata (`aliases`, `tags`, `links_to`) in a table
of its SQLite file keyed by the record's row id, and deleting a collection leaves those rows.
Row ids are reused (the next record takes the highest id + 1), so the next records written,
in any collection, read the dropped collection's lists as their own: after a migration, a
page showed another page's aliases, and a forgotten repository's tags could surface on
another repository's chunks. Every drop is followed by this clean-up; a `chroma run` server
has the same defect and only its operator can clean its file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hetriever.core.logs import get_logger

log = get_logger(__name__)

CHROMA_FILE = "chroma.sqlite3"
ARRAY_TABLE = "embedding_metadata_array"


def clear_orphan_arrays(chroma_path: Path, *, timeout: float = 30.0) -> int:
    """Delete array metadata rows whose record is gone; how many. One statement, so a record
    written meanwhile (its row and its arrays in one transaction) is never touched."""
    path = chroma_path / CHROMA_FILE
    if not path.exists():
        return 0
    conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if ARRAY_TABLE not in tables:  # another Chroma version: nothing of this kind to clean
            return 0
        removed = conn.execute(f"DELETE FROM {ARRAY_TABLE} WHERE id NOT IN "
                               "(SELECT id FROM embeddings)").rowcount
    finally:
        conn.close()
    if removed:
        log.info("chroma_orphan_arrays_removed", rows=removed, path=str(path))
    return removed
