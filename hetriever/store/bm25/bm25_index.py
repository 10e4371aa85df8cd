"""Persistent, incremental BM25 (Okapi) per collection, kept in SQLite beside the Chroma data.

Local Chroma has no sparse index, so this module keeps one:

- SQLite (WAL) is the durable copy: `docs(id, length, metadata, term_ids, tfs, text)`, a
  `terms` vocabulary with dense integer ids, a `meta` table holding a generation counter, and a
  short `changelog` of the ids each committed write touched; `hetriever.store.bm25.sqlite_file` holds
  their layout, a document's row and a commit's log entry.
- Queries run on an in-memory inverted index (CSR arrays per segment: a large main segment
  plus a small delta segment for recent writes; deleted/replaced docs are tombstoned and
  compacted away once they pile up). It is loaded lazily on the first read; a writer's own
  lookups by file (`ids_of_files`, `file_counts`) read the file, so an ingest never loads it.
- Every committed write bumps the generation. Before each read an index compares its in-memory
  generation with the file's and catches up by replaying the changelog (or reloads when it is
  too far behind), so several `BM25Index` objects, in any process, see each other's commits.

Scores: raw Okapi BM25, idf = ln(1 + (N - df + 0.5) / (df + 0.5)), plus a bonus for query word
pairs in a candidate's headings (`hetriever.store.bm25.phrases`); terms come from `hetriever.store.bm25.analyzer`.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hetriever.core.errors import (
    DerivedIndexError,
    IndexingError,
    InvalidLimitError,
    KnowledgeStoreError,
)
from hetriever.core.logs import get_logger
from hetriever.core.sqlite_files import connect, in_batches, read_meta
from hetriever.store.bm25.analyzer import (  # noqa: F401  (STEM_DEFAULT, STOPWORDS re-exported)
    STEM_DEFAULT,
    STOPWORDS,
    TOKENIZER_VERSION,
    tokenize,
)
from hetriever.store.bm25.memory import _State, equality_matcher
from hetriever.store.bm25.phrases import PHRASE_CANDIDATES, PHRASE_WEIGHT, with_phrases
from hetriever.store.bm25.sqlite_file import (  # noqa: F401  (SCHEMA_VERSION re-exported)
    FILE_INDEX,
    FILE_PATH,
    SCHEMA_VERSION,
    clear_postings,
    create_schema,
    doc_row,
    existing_tokenizer,
    insert_docs,
    log_commit,
    set_tokenizer,
)
from hetriever.store.filters import matches, only_equalities, validate_filter

log = get_logger(__name__)

# --- persistent index --------------------------------------------------------------


class CorpusStats:
    """Document counts of a query's terms summed over several BM25 indexes (sites searched
    together), and the Okapi idf they give: each site's own idf puts its best keyword match
    at the top of its own scale, so raw scores of sites with different vocabularies do not
    compare (a word rare in one site and common in another)."""

    def __init__(self, documents: int, frequencies: Mapping[str, int]) -> None:
        self.documents, self.frequencies = documents, dict(frequencies)

    @classmethod
    def of(cls, indexes: Iterable[BM25Index], query: str) -> CorpusStats:
        documents, frequencies = 0, dict[str, int]()
        for index in indexes:
            n, counts = index.term_counts(query)
            documents += n
            for term, df in counts.items():
                frequencies[term] = frequencies.get(term, 0) + df
        return cls(documents, frequencies)

    def idf(self, term: str) -> float:
        df = self.frequencies.get(term, 0)
        if not df:
            return 0.0
        return math.log(1.0 + (self.documents - df + 0.5) / (df + 0.5))


class BM25Index:
    """One collection's BM25 index, persisted in the SQLite file at `path`.

    Thread-safe (one lock per object). Writes are transactional; group several with
    `with index.transaction(): ...`. Inside a transaction, `ids()`, `count()`, `get()`,
    `ids_where()` and `delete_where()` see its uncommitted writes; `search()` committed state.
    """

    def __init__(
        self, path: Path, *, k1: float = 1.2, b: float = 0.75, phrase_weight: float = PHRASE_WEIGHT
    ):
        if k1 < 0 or not 0.0 <= b <= 1.0 or phrase_weight < 0:
            raise KnowledgeStoreError(
                f"invalid BM25 parameters {k1=}, {b=}, {phrase_weight=}",
                hint="use k1 >= 0, 0 <= b <= 1 and phrase_weight >= 0",
            )
        self.path = Path(path)
        self.k1 = float(k1)
        self.b = float(b)
        self.phrase_weight = float(phrase_weight)  # hetriever.store.bm25.phrases; 0 = words only
        self._lock = threading.RLock()
        self._state: _State | None = None
        self._vocab: dict[str, int] | None = None
        self._vocab_epoch = ""
        self._depth = 0
        self._txn_ids: set[str] = set()
        self._pending: dict[str, dict | None] = {}
        self._force_reload = False  # the next commit makes every reader reload
        self._file_index_ready = False
        self._closed = True
        try:
            self._wconn = connect(self.path, timeout=60.0)
            self._rconn = connect(self.path, timeout=60.0)
            self._closed = False
            self._init_schema()
        except sqlite3.Error as exc:
            for name in ("_rconn", "_wconn"):
                conn = getattr(self, name, None)
                if conn is not None:
                    conn.close()
            self._closed = True
            if isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc):
                raise KnowledgeStoreError(
                    f"cannot open BM25 index {self.path}: {exc}",
                    hint="check the state directory is writable",
                ) from None
            raise DerivedIndexError(
                f"the BM25 index file {self.path} is damaged ({exc})",
                hint="searches run dense-only; the next `hetriever ingest` rebuilds it from Chroma",
            ) from None

    # -- connection and schema --

    def _init_schema(self) -> None:
        with self._lock:
            # Already set up: a plain read, so opening never waits for a writer's transaction.
            stored = existing_tokenizer(self._rconn) or create_schema(
                self._wconn, self._tokenizer_id()
            )
        if stored != self._tokenizer_id():
            self._retokenize(stored)

    @staticmethod
    def _tokenizer_id() -> str:
        # Reads this module's names, not the analyzer's: tests and benches set them here.
        return f"{TOKENIZER_VERSION}{'s' if STEM_DEFAULT else ''}"

    def _retokenize(self, old: str) -> None:
        """The tokenizer changed since this file was written: rebuild postings from texts."""
        log.warning("bm25_retokenize", path=str(self.path), old=old, new=self._tokenizer_id())
        with self.transaction():
            ids, texts, metas, epoch = clear_postings(self._wconn)
            self._vocab, self._vocab_epoch = {}, epoch
            self._write_docs(ids, texts, metas)
            set_tokenizer(self._wconn, self._tokenizer_id())
            self._force_reload = True

    def _check_open(self) -> None:
        if self._closed:
            raise KnowledgeStoreError(
                f"BM25 index {self.path} is closed", hint="open a new BM25Index"
            )

    def _sync_vocab(self, conn: sqlite3.Connection) -> None:
        # Term ids are dense and append-only, except that a retokenize renumbers them all
        # and bumps the epoch: then start over.
        epoch = read_meta(conn, "vocab_epoch")
        if self._vocab is None or epoch != self._vocab_epoch:
            self._vocab = {}
            self._vocab_epoch = epoch
        rows = conn.execute(
            "SELECT id, term FROM terms WHERE id >= ? ORDER BY id", (len(self._vocab),)
        ).fetchall()
        for term_id, term in rows:
            self._vocab[term] = term_id

    # -- transactions --

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes into one atomic commit; an exception rolls all of them back."""
        with self._lock:
            self._check_open()
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self._wconn.execute("BEGIN IMMEDIATE")  # waits for other writers (timeout)
            self._depth = 1
            try:
                if not self._file_index_ready:
                    self._wconn.execute(FILE_INDEX)
                self._sync_vocab(self._wconn)
                yield
                self._commit()
                self._file_index_ready = True
            except BaseException:
                self._wconn.execute("ROLLBACK")
                self._vocab = None  # it may hold ids of terms that were never committed
                raise
            finally:
                self._depth = 0
                self._force_reload = False
                self._txn_ids = set()
                self._pending = {}
            if self._state is not None:
                self._refresh()

    def _commit(self) -> None:
        if self._txn_ids:
            log_commit(self._wconn, self._txn_ids, reload_all=self._force_reload)
        self._wconn.execute("COMMIT")

    # -- writes --

    def upsert(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Insert or replace documents (an existing id's text and metadata are replaced)."""
        ids = list(ids)
        texts = list(texts)
        metas = [dict(m or {}) for m in (metadatas if metadatas is not None else [None] * len(ids))]
        if not len(ids) == len(texts) == len(metas):
            raise IndexingError(
                f"upsert got {len(ids)} ids, {len(texts)} texts and {len(metas)} metadatas",
                hint="pass one of each per document",
            )
        if len(set(ids)) != len(ids):
            raise IndexingError("upsert got duplicate ids", hint="pass each id once per call")
        for doc_id, text in zip(ids, texts):
            if not isinstance(doc_id, str) or not doc_id:
                raise IndexingError(f"invalid document id {doc_id!r}", hint="use non-empty strings")
            if not isinstance(text, str):
                raise IndexingError(f"text of {doc_id!r} is {type(text).__name__}, not str")
        if not ids:
            return
        with self.transaction():
            self._write_docs(ids, texts, metas)

    def _write_docs(self, ids: list[str], texts: list[str], metas: list[dict]) -> None:
        assert self._vocab is not None
        rows = []
        new_terms: list[tuple[int, str]] = []
        for doc_id, text, meta in zip(ids, texts, metas):
            rows.append(doc_row(doc_id, text, meta, self._vocab, new_terms))
            self._pending[doc_id] = meta
        insert_docs(self._wconn, rows, new_terms)
        self._txn_ids.update(ids)

    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id; returns how many existed."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return 0
        removed = 0
        with self.transaction():
            for part in in_batches(ids):
                marks = ",".join("?" * len(part))
                found = [
                    r[0]
                    for r in self._wconn.execute(f"SELECT id FROM docs WHERE id IN ({marks})", part)
                ]
                if found:
                    self._wconn.execute(f"DELETE FROM docs WHERE id IN ({marks})", part)
                removed += len(found)
                for doc_id in found:
                    self._pending[doc_id] = None
                self._txn_ids.update(found)
        return removed

    def delete_where(self, where: Mapping | None) -> list[str]:
        """Delete every document matching `where` (e.g. {"file_path": p}); returns their ids."""
        normalised = validate_filter(where)
        if normalised is None:
            raise IndexingError(
                "delete_where needs a filter",
                hint="to empty the index, use drop() or delete(ids())",
            )
        with self.transaction():
            doomed = sorted(self.ids_where(normalised))
            self.delete(doomed)
        return doomed

    # -- reads --

    def ids(self) -> set[str]:
        with self._lock:
            self._check_open()
            return {r[0] for r in self._wconn.execute("SELECT id FROM docs")}

    def missing(self, ids: Sequence[str]) -> list[str]:
        """Those of `ids` the index does not hold (in order): one indexed lookup per 500."""
        with self._lock:
            self._check_open()
            present: set[str] = set()
            for part in in_batches(list(ids)):
                marks = ",".join("?" * len(part))
                present.update(
                    r[0]
                    for r in self._wconn.execute(f"SELECT id FROM docs WHERE id IN ({marks})", part)
                )
        return [doc_id for doc_id in ids if doc_id not in present]

    def count(self) -> int:
        with self._lock:
            self._check_open()
            return int(self._wconn.execute("SELECT COUNT(*) FROM docs").fetchone()[0])

    def get(self, doc_id: str) -> tuple[str, dict] | None:
        return self.rows([doc_id]).get(doc_id)

    def rows(self, ids: Sequence[str]) -> dict[str, tuple[str, dict]]:
        """(text, metadata) as committed, of those of `ids` the index holds."""
        with self._lock:
            self._check_open()
            out: dict[str, tuple[str, dict]] = {}
            for part in in_batches(list(ids)):
                marks = ",".join("?" * len(part))
                for doc_id, text, meta in self._wconn.execute(
                    f"SELECT id, text, metadata FROM docs WHERE id IN ({marks})", part
                ):
                    out[doc_id] = (text, json.loads(meta))
        return out

    def metadata_of(
        self, doc_ids: Iterable[str], keys: Sequence[str] | None = None
    ) -> dict[str, dict]:
        """The committed metadata of those of `doc_ids` this index holds, from memory: all of
        it, or only `keys` (those a chunk has)."""
        with self._lock:
            state = self._current()
            out = {}
            for doc_id in doc_ids:
                slot = state.id_to_slot.get(doc_id)
                if slot is not None and state.alive[slot]:
                    out[doc_id] = (
                        state.metas.dict_of(slot)
                        if keys is None
                        else state.metas.fields_of(slot, keys)
                    )
            return out

    def ids_where(self, where: Mapping | None) -> set[str]:
        normalised = validate_filter(where)
        with self._lock:
            found = self._current().ids_matching(normalised)
            if self._pending:  # this object's own uncommitted writes
                # A filter of $eq/$in only (a file's or a window's chunks) is tested by value
                # keys, not by comparing each row with every value of a `$in` in turn.
                test = (
                    equality_matcher(normalised)
                    if only_equalities(normalised)
                    else lambda meta: matches(normalised, meta)
                )
                found -= self._pending.keys()
                found |= {
                    doc_id
                    for doc_id, meta in self._pending.items()
                    if meta is not None and test(meta)
                }
            return found

    def ids_of_files(self, paths: Iterable[str]) -> set[str]:
        """Ids of the documents whose `file_path` is one of `paths`, soft-deleted ones and
        this object's uncommitted writes included: `ids_where({"file_path": {"$in": paths}})`
        read from the file (the write connection sees its own transaction) rather than from
        the in-memory index, which a process that only writes then never loads (a full
        opentelemetry-io ingest peaked ~25 MB lower; bench/README.md)."""
        paths = list(dict.fromkeys(paths))
        found: set[str] = set()
        with self._lock:
            self._check_open()
            for part in in_batches(paths):
                found.update(
                    r[0]
                    for r in self._wconn.execute(
                        f"SELECT id FROM docs WHERE {FILE_PATH} IN ({','.join('?' * len(part))})",
                        part,
                    )
                )
        return found

    def file_counts(self) -> dict[str, int]:
        """file_path -> committed live chunks (soft-deleted ones left out): from the in-memory
        index where this object has loaded it (a searching process), else one pass over the
        file's metadata, so an ingest's checks do not load that index (at 100k chunks: +117
        MB for a count)."""
        with self._lock:
            if self._state is not None:
                return self._current().file_counts()
            self._check_open()
            return {
                path: count
                for path, count in self._rconn.execute(
                    f"SELECT {FILE_PATH}, COUNT(*) FROM docs "
                    "WHERE json_type(metadata, '$.file_path') = 'text' "
                    "AND json_type(metadata, '$.is_deleted') IS NOT 'true' GROUP BY 1"
                )
            }

    def few_ids_where(self, where: Mapping, limit: int) -> list[str] | None:
        """Committed ids matching `where` when its equality constraints narrow them to at most
        `limit` (None otherwise): lets a dense query search just those vectors."""
        normalised = validate_filter(where)
        if normalised is None:
            return None
        with self._lock:
            return self._current().few_ids(normalised, limit)

    def live_count(self) -> int:
        """Committed live documents, read from memory (no count query)."""
        with self._lock:
            return self._current().n_live

    def generation(self) -> int:
        """The file's committed generation: it moves with every write, from any process."""
        with self._lock:
            self._check_open()
            return int(read_meta(self._rconn, "generation"))

    def search(
        self, query: str, k: int, where: Mapping | None = None, *, corpus: CorpusStats | None = None
    ) -> list[tuple[str, float]]:
        """Top `k` (id, raw BM25 score) among documents matching `where`; only scores > 0.

        `corpus`: document counts over several indexes (`CorpusStats.of`), whose idf then
        replaces this index's own, so that raw scores of different sites share one scale."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidLimitError(f"k must be a positive integer, got {k!r}")
        normalised = validate_filter(where)
        with self._lock:
            state = self._current()
            vocab = self._vocab or {}
            n_terms = len(vocab)
            terms = tokenize(query)
            term_ids = sorted({vocab[t] for t in terms if t in vocab})
            if not term_ids or not state.n_live:
                return []

            def idf(term: str) -> float:
                if corpus is not None:
                    return corpus.idf(term)
                return state.term_idf(vocab.get(term), n_terms)

            idfs = (
                None if corpus is None else {vocab[t]: corpus.idf(t) for t in terms if t in vocab}
            )
            phrases = bool(self.phrase_weight) and len(terms) > 1
            top, scores = state.search(
                term_ids,
                n_terms,
                self.k1,
                self.b,
                max(k, PHRASE_CANDIDATES) if phrases else k,
                normalised,
                idfs,
            )
            top.sort(key=lambda s: (-scores[s], state.doc_ids[s]))
            hits = [(state.doc_ids[s], float(scores[s])) for s in top]
            if phrases and hits:
                hits = with_phrases(
                    hits, terms, [state.metas[s] for s in top], self.phrase_weight, idf
                )
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits[:k]

    def term_counts(self, query: str) -> tuple[int, dict[str, int]]:
        """Live documents, and for each analysed query term the live documents holding it."""
        with self._lock:
            state = self._current()
            vocab = self._vocab or {}
            n_terms = len(vocab)
            return state.n_live, {
                t: len(state.live_postings(vocab[t], n_terms)[0])
                for t in set(tokenize(query))
                if t in vocab
            }

    def language_counts(
        self, query: str, languages: Sequence[str]
    ) -> tuple[dict[str, int], list[dict[str, int]]]:
        """For telling a query's language by its words (`hetriever.search.query_language.by_words`):
        each language's live docs, and for each query term the index holds, its docs in each."""
        with self._lock:
            state = self._current()
            vocab = self._vocab or {}
            masks = {lang: state.allowed_mask({"lang": {"$eq": lang}}) for lang in languages}
            alive = {
                lang: (m & state.alive) if m is not None else state.alive
                for lang, m in masks.items()
            }
            sizes = {lang: int(m.sum()) for lang, m in alive.items()}
            per_term = []
            for term in dict.fromkeys(tokenize(query)):
                if term in vocab:
                    docs, _ = state.live_postings(vocab[term], len(vocab))
                    per_term.append({lang: int(m[docs].sum()) for lang, m in alive.items()})
        return sizes, per_term

    # -- keeping the in-memory index current --

    def _current(self) -> _State:
        self._check_open()
        self._refresh()
        assert self._state is not None
        return self._state

    def _refresh(self) -> None:
        """Bring the in-memory index to the file's committed generation."""
        conn = self._rconn
        conn.execute("BEGIN")  # one consistent snapshot for everything read below
        try:
            gen = int(read_meta(conn, "generation"))
            state = self._state
            if state is not None and state.generation == gen and self._vocab is not None:
                return
            epoch_changed = read_meta(conn, "vocab_epoch") != self._vocab_epoch
            self._sync_vocab(conn)
            if (
                state is None
                or epoch_changed
                or state.generation < int(read_meta(conn, "log_floor"))
            ):
                self._state = self._load(conn, gen)
                return
            changed = [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT doc_id FROM changelog WHERE gen > ?", (state.generation,)
                )
            ]
            if len(changed) > max(2000, state.n_live // 3):
                self._state = self._load(conn, gen)
                return
            for part in in_batches(changed):
                state.replay(
                    part,
                    conn.execute(
                        "SELECT id, length, metadata, term_ids, tfs FROM docs WHERE id IN "
                        f"({','.join('?' * len(part))})",
                        part,
                    ),
                )
            state.generation = gen
            state.changed(len(self._vocab or {}))
        finally:
            conn.execute("COMMIT")

    def _load(self, conn: sqlite3.Connection, gen: int) -> _State:
        state = _State.from_rows(
            gen,
            conn.execute("SELECT id, length, metadata, term_ids, tfs FROM docs ORDER BY rowid"),
            len(self._vocab or {}),
        )
        log.debug(
            "bm25_loaded", path=str(self.path), docs=len(state.doc_ids), postings=len(state.main)
        )
        return state

    # -- lifecycle --

    def stats(self) -> dict[str, Any]:
        with self._lock:
            state = self._current()
            return {
                "docs": state.n_live,
                "terms": len(self._vocab or {}),
                "generation": state.generation,
                "postings": len(state.main) + state.delta_postings,
                "tombstones": state.dead,
            }

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._state = None
            self._vocab = None
            for conn in (self._rconn, self._wconn):
                conn.close()

    def drop(self) -> None:
        """Close the index and delete its files."""
        self.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def __enter__(self) -> BM25Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BM25Index({str(self.path)!r}, k1={self.k1}, b={self.b})"
