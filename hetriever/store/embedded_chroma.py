"""Every workaround for embedded Chroma (1.5.x) in one place: what the store does around
Chroma's own behaviour, and why.

- **One system per path and process.** `chromadb.PersistentClient` shares one system per path
  within a process, and that system loads each collection's vector index once and never reads
  another process's later writes. `open_persistent` opens a path one process at a time (a
  fresh directory's tables are created by whoever comes first; the others failed with "table
  collections already exists") and says whether the system was already made here (its view
  may be stale); `forget_system` replaces the path's system (a private Chroma structure, used
  here and nowhere else) so the next client reads the directory anew; `forget_all_systems`
  lets every one go (their SQLite connections close with them).
- **Orphaned array metadata.** Chroma keeps list-valued metadata (`aliases`, `tags`,
  `links_to`) in a table keyed by the record's row id, and deleting a collection leaves those
  rows. Row ids are reused (the next record takes the highest id + 1), so the next records
  written, in any collection, read the dropped collection's lists as their own: after a
  migration, a page showed another page's aliases. `clear_orphan_arrays` follows every drop;
  a `chroma run` server has the same defect and only its operator can clean its file.

The import-time one (chromadb's signature checks skipped on first import) sits in
`hetriever.core.chroma_import`: it must run before the first `import chromadb` of a process,
which `hetriever.core.names` makes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import chromadb
from chromadb.api.shared_system_client import SharedSystemClient
from chromadb.config import Settings as ChromaSettings

from hetriever.core.locks import file_lock
from hetriever.core.logs import get_logger

log = get_logger(__name__)

OPEN_LOCK = "hetriever-open.lock"  # inside the Chroma directory, which is writable
CHROMA_FILE = "chroma.sqlite3"
ARRAY_TABLE = "embedding_metadata_array"


def _identifier(client: Any) -> str:
    """The key under which Chroma shares one system per path within a process."""
    return SharedSystemClient._get_identifier_from_settings(client.get_settings())


def open_persistent(
    path: Path, chroma_settings: ChromaSettings, *, timeout: float, what: str
) -> tuple[Any, bool]:
    """A PersistentClient of `path`, opened under the directory's open lock (a lock file of
    its own, so opening never waits for a writer holding the directory), and whether this
    process had made the path's system before (its collections may have been loaded before
    other processes' latest writes)."""
    with file_lock(path / OPEN_LOCK, timeout=timeout, what=what):
        before = set(SharedSystemClient._identifier_to_system)
        client = chromadb.PersistentClient(path=str(path), settings=chroma_settings)
    return client, _identifier(client) in before


def forget_system(client: Any) -> None:
    """Drop the shared system behind `client`'s path: every client of the path opened next
    reads the directory anew; handles already taken keep answering from the old one until
    dropped."""
    SharedSystemClient._identifier_to_system.pop(_identifier(client), None)


def forget_all_systems() -> None:
    """Let every shared system of this process go (a half-made one is cached by path too)."""
    SharedSystemClient.clear_system_cache()


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
        removed = conn.execute(
            f"DELETE FROM {ARRAY_TABLE} WHERE id NOT IN (SELECT id FROM embeddings)"
        ).rowcount
    finally:
        conn.close()
    if removed:
        log.info("chroma_orphan_arrays_removed", rows=removed, path=str(path))
    return removed
