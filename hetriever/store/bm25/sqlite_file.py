"""The on-disk side of the BM25 index: the SQLite tables, a document's row (its postings
packed as arrays), the generation and changelog each commit records for other readers, and
clearing the postings for a re-tokenise. `hetriever.store.bm25.bm25_index` owns the connections and the
transactions these run in, and reads the file back into memory.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter

import numpy as np

from hetriever.core.errors import IndexingError
from hetriever.core.sqlite_files import read_meta
from hetriever.store.bm25.analyzer import tokenize

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS terms(id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS docs(
    id TEXT PRIMARY KEY,
    length INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    term_ids BLOB NOT NULL,
    tfs BLOB NOT NULL,
    text TEXT NOT NULL  -- last, so loads that skip it need not read it
);
CREATE TABLE IF NOT EXISTS changelog(gen INTEGER NOT NULL, doc_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS changelog_gen ON changelog(gen);
"""
SCHEMA_VERSION = "1"
# Documents by file, for a writer: an index on an expression, added by the first write of an
# older file (readers never need it, and the schema is otherwise unchanged).
FILE_PATH = "json_extract(metadata, '$.file_path')"
FILE_INDEX = f"CREATE INDEX IF NOT EXISTS docs_file_path ON docs({FILE_PATH})"
# A write touching more ids than this is not logged; readers reload instead of replaying.
_LOG_MAX_IDS = 5000
# Changelog rows older than this many generations are trimmed.
_LOG_KEEP_GENERATIONS = 2000


def create_schema(conn: sqlite3.Connection, tokenizer: str) -> str:
    """Create the tables and defaults (idempotent); return the stored tokenizer id."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        defaults = {
            "generation": "0",
            "log_floor": "0",
            "vocab_epoch": "0",
            "schema": SCHEMA_VERSION,
            "tokenizer": tokenizer,
        }
        conn.executemany("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", defaults.items())
        stored = read_meta(conn, "tokenizer")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return stored


def existing_tokenizer(conn: sqlite3.Connection) -> str:
    """The tokenizer id of an index whose schema is complete, else "" (a plain read)."""
    try:
        return read_meta(conn, "tokenizer")
    except sqlite3.OperationalError:  # no tables yet
        return ""


def doc_row(
    doc_id: str, text: str, meta: dict, vocab: dict[str, int], new_terms: list[tuple[int, str]]
) -> tuple[str, int, str, bytes, bytes, str]:
    """The `docs` row of one document. A term `vocab` lacks gets the next id there and is
    appended to `new_terms`, for `insert_docs` to store."""
    tokens = tokenize(text)
    counts = Counter(tokens)
    term_ids = np.empty(len(counts), dtype="<i4")
    tfs = np.empty(len(counts), dtype="<u2")
    for i, (term, tf) in enumerate(counts.items()):
        term_id = vocab.get(term)
        if term_id is None:
            term_id = vocab[term] = len(vocab)
            new_terms.append((term_id, term))
        term_ids[i] = term_id
        tfs[i] = min(tf, 65535)
    try:
        meta_json = json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise IndexingError(
            f"metadata of {doc_id!r} is not storable: {exc}",
            hint="use str/int/float/bool values or lists of them",
        ) from None
    return (doc_id, len(tokens), meta_json, term_ids.tobytes(), tfs.tobytes(), text)


def insert_docs(
    conn: sqlite3.Connection,
    rows: list[tuple[str, int, str, bytes, bytes, str]],
    new_terms: list[tuple[int, str]],
) -> None:
    """Store the rows of `doc_row` and the terms they added (an existing id is replaced)."""
    conn.executemany("INSERT INTO terms(id, term) VALUES (?, ?)", new_terms)
    conn.executemany(
        "INSERT INTO docs(id, length, metadata, term_ids, tfs, text) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(id) DO UPDATE SET length = excluded.length,"
        " metadata = excluded.metadata, term_ids = excluded.term_ids, tfs = excluded.tfs,"
        " text = excluded.text",
        rows,
    )


def log_commit(conn: sqlite3.Connection, ids: set[str], *, reload_all: bool) -> None:
    """Within a write's transaction: bump the generation and log the ids it touched, for other
    indexes to replay (`reload_all`, or too many ids, makes them reload instead)."""
    gen = int(read_meta(conn, "generation")) + 1
    floor = int(read_meta(conn, "log_floor"))
    if len(ids) > _LOG_MAX_IDS or reload_all:
        conn.execute("DELETE FROM changelog")
        floor = gen
    else:
        conn.executemany(
            "INSERT INTO changelog(gen, doc_id) VALUES (?, ?)", ((gen, doc_id) for doc_id in ids)
        )
        cutoff = gen - _LOG_KEEP_GENERATIONS
        if cutoff > floor:
            conn.execute("DELETE FROM changelog WHERE gen <= ?", (cutoff,))
            floor = cutoff
    conn.executemany(
        "UPDATE meta SET value = ? WHERE key = ?",
        ((str(gen), "generation"), (str(floor), "log_floor")),
    )


def clear_postings(conn: sqlite3.Connection) -> tuple[list[str], list[str], list[dict], str]:
    """Empty `docs` and `terms` for a re-tokenise and bump the vocabulary epoch (every term id
    changes); return the documents' ids, texts and metadata, and the new epoch."""
    rows = conn.execute("SELECT id, text, metadata FROM docs").fetchall()
    conn.execute("DELETE FROM docs")
    conn.execute("DELETE FROM terms")
    epoch = str(int(read_meta(conn, "vocab_epoch") or 0) + 1)
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vocab_epoch', ?)", (epoch,))
    return [r[0] for r in rows], [r[1] for r in rows], [json.loads(r[2]) for r in rows], epoch


def set_tokenizer(conn: sqlite3.Connection, tokenizer: str) -> None:
    """Record that the postings are now those of `tokenizer`."""
    conn.execute("UPDATE meta SET value = ? WHERE key = 'tokenizer'", (tokenizer,))
