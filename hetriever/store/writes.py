"""The write path: validate a batch, embed only what changed, write Chroma then BM25; and
the collection's administration (create, drop, change its metadata).

A write sorts chunks into unchanged (no write at all), metadata-only (an update, no
embedding) and new (embedded in one length-sorted pass). Chroma is written before BM25, batch
by batch under the writer lock, so a crash leaves BM25 behind and never ahead; the next write
of the same files (or `repair()`) heals it. Soft delete marks chunks in both; purge removes
them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from chromadb.api.types import validate_metadata

from hetriever.core import faults
from hetriever.core.backoff import retrying
from hetriever.core.errors import CollectionNotFoundError, EmbeddingError, IndexingError
from hetriever.core.logs import get_logger
from hetriever.core.models import Chunk, Metadata
from hetriever.core.names import content_hash, validate_collection_name
from hetriever.store.catalog_records import INDEX_STATE_KEYS
from hetriever.store.chunk_records import TEXT_KEY
from hetriever.store.donors import borrow, ledger_for
from hetriever.store.embedded_chroma import clear_orphan_arrays
from hetriever.store.store_types import CollectionInfo, FileWriteResult, _PreparedWrite
from hetriever.store.views import RepositoryViews

log = get_logger(__name__)

EMBED_ATTEMPTS = 3


class StoreWrites:
    """Upserts, deletes and soft deletes of a repository's chunks, in Chroma and BM25, and
    the collections they go into; holds nothing of its own but the views it writes through."""

    def __init__(self, views: RepositoryViews) -> None:
        self.views = views
        self.chroma = views.chroma
        self.settings = views.settings

    def _prepare(
        self, collection: str, ids: list[str], texts: list[str], metadatas: list[dict[str, Any]]
    ) -> None:
        """Validate a batch in place (fills repository and content_hash); IndexingError."""
        seen: set[str] = set()
        for i, (doc_id, text, meta) in enumerate(zip(ids, texts, metadatas)):
            if not isinstance(doc_id, str) or not doc_id:
                raise IndexingError(f"chunk #{i} of {collection!r} has an empty id")
            if doc_id in seen:
                raise IndexingError(
                    f"duplicate id {doc_id!r} in one write to {collection!r}",
                    hint="chunk ids must be unique; check the chunker's ids",
                )
            seen.add(doc_id)
            if not isinstance(text, str) or not text.strip():
                raise IndexingError(
                    f"chunk {doc_id!r} of {collection!r} has empty content",
                    hint="drop empty chunks before writing",
                )
            if TEXT_KEY in meta:
                raise IndexingError(
                    f"chunk {doc_id!r} has metadata key {TEXT_KEY!r}, which holds the chunk's text",
                    hint="rename that metadata key",
                )
            repo = meta.setdefault("repository", collection)
            if repo != collection:
                raise IndexingError(
                    f"chunk {doc_id!r} says repository {repo!r} but is written to {collection!r}",
                    hint="a chunk's `repository` metadata must name its collection",
                )
            digest = content_hash(text)
            if meta.setdefault("content_hash", digest) != digest:
                raise IndexingError(
                    f"chunk {doc_id!r}: content_hash does not match its text",
                    hint="compute content_hash as sha256 of the chunk text",
                )
            try:
                validate_metadata(meta)
            except (ValueError, TypeError) as exc:
                raise IndexingError(
                    f"chunk {doc_id!r} has metadata Chroma rejects: {exc}",
                    hint="use str/int/float/bool values or non-empty lists "
                    "of one of those; no None",
                ) from None

    def _existing(self, col: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        step = self.chroma.max_batch_size()
        for start in range(0, len(ids), step):
            part = ids[start : start + step]
            got = self.chroma.call("get", lambda: col.get(ids=part, include=["metadatas"]))
            for doc_id, meta in zip(got["ids"], got["metadatas"] or []):
                out[doc_id] = dict(meta or {})
        return out

    @staticmethod
    def _replacing(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        """Chroma merges metadata on update/upsert: None removes keys the new version lacks."""
        return {**{k: None for k in old if k not in new}, **new}

    def _prepare_write(
        self,
        collection: str,
        col: Any,
        ids: list[str],
        texts: list[str],
        metadatas: list[dict[str, Any]],
    ) -> _PreparedWrite:
        """Validate, sort chunks into unchanged / metadata-only / new, and embed the new ones.

        Writes nothing: an embedding failure leaves the files exactly as they were, and the
        caller opens its BM25 transaction only afterwards, so embedding (seconds per window)
        never holds the BM25 write lock.
        """
        self._prepare(collection, ids, texts, metadatas)
        self.views.check_embedding_model(collection, col)
        write = _PreparedWrite(ids, texts, metadatas, self._existing(col, ids))
        unchanged: list[int] = []
        for i, doc_id in enumerate(ids):
            old = write.existing.get(doc_id)
            if old is not None and old.get("content_hash") == metadatas[i]["content_hash"]:
                write.result.reused += 1  # unchanged content is not re-embedded
                (write.meta_only if old != metadatas[i] else unchanged).append(i)
            else:
                write.to_embed.append(i)
        if unchanged:  # an unchanged chunk is not written at all, unless BM25 lost it or
            # holds another version of it (a crash between a window's Chroma write and its
            # BM25 commit, when Chroma got a reused chunk's new metadata and BM25 did not)
            held = self.views.bm25(collection).rows([ids[i] for i in unchanged])
            write.bm25_only = [i for i in unchanged if held.get(ids[i]) != (texts[i], metadatas[i])]
        if write.to_embed:
            write.vectors = self._vectors(
                collection, col, [texts[i] for i in write.to_embed], write
            )
        return write

    def _vectors(self, collection: str, col: Any, texts: list[str], write: _PreparedWrite) -> Any:
        """Vectors of `texts`: another version's where it holds the same text (donors.py),
        the embedder's for the rest; every one recorded in the family's ledger before Chroma
        gets it, so a collection the ledger covers stays covered (vector_ledger.py)."""
        ledger = ledger_for(self.views, collection)
        physical = self.views.physical_name(collection)
        if physical is not None and ledger.covered(physical) is None:
            ledger.note_first_write(physical, empty=self.chroma.call("count", col.count) == 0)
        try:
            borrowed = borrow(self.views, collection, texts, ledger)
        except Exception as exc:  # a saving only: a donor that cannot be read lends nothing
            log.warning("vectors_not_borrowed", collection=collection, error=str(exc))
            borrowed = {}
        if not borrowed:
            vectors = self._embed(texts, write.result)
        else:
            rest = [i for i in range(len(texts)) if i not in borrowed]
            dims = int(self.views.embedder.dimensions)
            vectors = np.zeros((len(texts), dims), dtype=np.float32)
            if rest:
                vectors[rest] = self._embed([texts[i] for i in rest], write.result)
            for i, vector in borrowed.items():
                vectors[i] = vector
            write.result.borrowed += len(borrowed)
        ledger.record([content_hash(t) for t in texts], vectors)
        return vectors

    def _apply_write(self, collection: str, col: Any, write: _PreparedWrite) -> FileWriteResult:
        """Chroma first, then BM25, batch by batch (see `upsert_files` on crash order)."""
        ids, texts, metadatas, existing = write.ids, write.texts, write.metadatas, write.existing
        step = self.chroma.max_batch_size()
        index = self.views.bm25(collection)
        if write.bm25_only:
            log.info("bm25_healed", collection=collection, chunks=len(write.bm25_only))
            index.upsert(
                [ids[i] for i in write.bm25_only],
                [texts[i] for i in write.bm25_only],
                [metadatas[i] for i in write.bm25_only],
            )
        for start in range(0, len(write.meta_only), step):
            part = write.meta_only[start : start + step]
            p_ids = [ids[i] for i in part]
            p_meta = [self._replacing(existing[ids[i]], metadatas[i]) for i in part]
            self.chroma.call("update", lambda: col.update(ids=p_ids, metadatas=p_meta))
            index.upsert(p_ids, [texts[i] for i in part], [metadatas[i] for i in part])
        for start in range(0, len(write.to_embed), step):
            part = write.to_embed[start : start + step]
            p_ids = [ids[i] for i in part]
            p_texts = [texts[i] for i in part]
            p_meta = [self._replacing(existing.get(ids[i], {}), metadatas[i]) for i in part]
            p_vectors = write.vectors[start : start + step]
            self.chroma.call(
                "upsert",
                lambda: col.upsert(
                    ids=p_ids, embeddings=p_vectors, documents=p_texts, metadatas=p_meta
                ),
            )
            index.upsert(p_ids, p_texts, [metadatas[i] for i in part])
            write.result.written += len(part)
        return write.result

    def _embed(self, texts: list[str], result: FileWriteResult) -> Any:
        """Vectors for `texts`; a failing embedder is retried, then EmbeddingError."""

        def attempt() -> Any:
            began = time.perf_counter()
            try:
                vectors = self.views.embedder.embed(texts)
            finally:
                result.embedding_seconds += time.perf_counter() - began
            if vectors.shape != (len(texts), int(self.views.embedder.dimensions)):
                raise EmbeddingError(
                    f"the embedder returned shape {vectors.shape} for {len(texts)} texts"
                )
            return vectors

        try:
            return retrying(EMBED_ATTEMPTS, (Exception,), "embed_retry", texts=len(texts))(attempt)
        except Exception as exc:
            raise EmbeddingError(
                f"embedding {len(texts)} chunks failed after {EMBED_ATTEMPTS} attempts: {exc}",
                hint="check the embedding model (HETRIEVER_EMBEDDING_MODEL); the files keep "
                "their previous chunks until a run stores them",
            ) from exc

    def _delete_ids(self, collection: str, col: Any, ids: list[str]) -> int:
        self._delete_chroma_ids(col, ids)
        if ids:
            self.views.bm25(collection).delete(ids)
        return len(ids)

    def _delete_chroma_ids(self, col: Any, ids: list[str]) -> int:
        step = self.chroma.max_batch_size()
        for start in range(0, len(ids), step):
            part = ids[start : start + step]
            self.chroma.call("delete", lambda: col.delete(ids=part))
        return len(ids)

    def upsert_file_chunks(
        self, collection: str, file_path: str, chunks: list[Chunk]
    ) -> FileWriteResult:
        return self.upsert_files(collection, {file_path: chunks})

    def upsert_files(self, collection: str, files: dict[str, list[Chunk]]) -> FileWriteResult:
        """Replace several files' chunks as one unit of work.

        Every file's new chunks are embedded together (one length-sorted pass, so small files
        do not make small batches); a file given with no chunks loses all of its chunks.
        """
        ids: list[str] = []
        texts: list[str] = []
        metadatas: list[dict[str, Any]] = []
        for file_path, chunks in files.items():
            for c in chunks:
                meta = dict(c.metadata)
                if meta.get("file_path", file_path) != file_path:
                    raise IndexingError(
                        f"chunk {c.id!r} belongs to {meta['file_path']!r}, not {file_path!r}"
                    )
                meta["file_path"] = file_path
                ids.append(c.id)
                texts.append(c.text)
                metadatas.append(meta)
        if not files:
            return FileWriteResult()
        with self.views.writer_lock(collection):
            col = self.views.collection(collection, create=True)
            physical = self.views.physical_name(collection, create=True)
            # Before writing: a crash after it must never leave levels the catalog misses.
            self.views.catalog.note_levels(
                physical, {str(m["access_level"]) for m in metadatas if "access_level" in m}
            )
            old_ids = set(self._ids_of_files(col, list(files)))
            # One BM25 commit per call; Chroma is written first, so a crash leaves BM25 behind
            # (never ahead), which repair() fixes.
            index = self.views.bm25(collection)
            # Embedding happens here, before the BM25 transaction opens (see _prepare_write).
            prepared = self._prepare_write(collection, col, ids, texts, metadatas) if ids else None
            faults.check("window_write", collection)
            with index.transaction():
                result = (
                    self._apply_write(collection, col, prepared) if prepared else FileWriteResult()
                )
                faults.check("window_chroma_written", collection)
                vanished = sorted(old_ids - set(ids))
                result.deleted = self._delete_ids(collection, col, vanished)
                if vanished:
                    faults.check("replaced_chunks_deleted", collection)
                # BM25 rows of these files that Chroma no longer has (a crash between writes).
                stale = index.ids_of_files(files) - set(ids)
                if stale:
                    index.delete(stale)
            faults.check("window_bm25_committed", collection)
        log.debug(
            "files_written",
            collection=collection,
            files=len(files),
            written=result.written,
            reused=result.reused,
            borrowed=result.borrowed,
            deleted=result.deleted,
        )
        return result

    def _ids_of_files(self, col: Any, paths: list[str]) -> list[str]:
        out: list[str] = []
        step = 100  # keep each `$in` list small
        for start in range(0, len(paths), step):
            part = paths[start : start + step]
            where = {"file_path": part[0]} if len(part) == 1 else {"file_path": {"$in": part}}
            out += self.chroma.ids_where(col, where)
        return out

    def delete_file(self, collection: str, file_path: str) -> int:
        return self.delete_files(collection, [file_path])

    def delete_files(self, collection: str, file_paths: list[str]) -> int:
        """Every chunk of `file_paths`: Chroma first, then BM25 in one commit. A run's deleted
        files go together: Chroma's cost is mostly per call, so one file at a time made an
        incremental run with 40 removed files spend ~1.6 s here."""
        col = self.views.collection(collection)
        if col is None or not file_paths:
            return 0
        with self.views.writer_lock(collection):
            ids = self._ids_of_files(col, file_paths)
            removed = self._delete_chroma_ids(col, ids)
            faults.check("removed_file_chroma_deleted", file_paths[0])
            index = self.views.bm25(collection)
            with index.transaction():
                if ids:
                    index.delete(ids)
                # BM25 rows Chroma never had (a crash between the two writes) go too.
                index.delete(index.ids_of_files(file_paths))
        return removed

    def index_document(self, doc_id: str, content: str, metadata: Metadata) -> bool:
        meta = dict(metadata or {})
        collection = meta.get("repository")
        if not isinstance(collection, str) or not collection:
            raise IndexingError(
                f"document {doc_id!r} has no `repository` metadata",
                hint="set metadata['repository'] to the collection's name",
            )
        with self.views.writer_lock(collection):
            col = self.views.collection(collection, create=True)
            if "access_level" in meta:
                self.views.catalog.note_levels(
                    self.views.physical_name(collection, create=True), [str(meta["access_level"])]
                )
            self._apply_write(
                collection, col, self._prepare_write(collection, col, [doc_id], [content], [meta])
            )
        return True

    def soft_delete_file(self, collection: str, file_path: str, deleted_at: str) -> int:
        """Mark a file's live chunks `is_deleted=True, deleted_at=...` in Chroma and BM25.

        They stay stored (for audit) but every search excludes them; `lifecycle.purge`
        removes them later. Returns the number of chunks marked.
        """
        col = self.views.collection(collection)
        if col is None:
            return 0
        with self.views.writer_lock(collection):
            got = self.chroma.call(
                "get",
                lambda: col.get(
                    where={"$and": [{"file_path": file_path}, {"is_deleted": {"$ne": True}}]},
                    include=["documents", "metadatas"],
                ),
            )
            ids = list(got["ids"])
            if not ids:
                return 0
            metas = [
                {**dict(m or {}), "is_deleted": True, "deleted_at": deleted_at}
                for m in got["metadatas"]
            ]
            step = self.chroma.max_batch_size()
            index = self.views.bm25(collection)
            with index.transaction():
                for start in range(0, len(ids), step):
                    part = slice(start, start + step)
                    self.chroma.call(
                        "update", lambda: col.update(ids=ids[part], metadatas=metas[part])
                    )
                    index.upsert(ids[part], got["documents"][part], metas[part])
        log.info("file_soft_deleted", collection=collection, path=file_path, chunks=len(ids))
        return len(ids)

    def purge_ids(self, collection: str, ids: list[str]) -> int:
        col = self.views.collection(collection)
        if col is None or not ids:
            return 0
        with self.views.writer_lock(collection):
            return self._delete_ids(collection, col, ids)

    def delete(self, doc_id: str) -> bool:
        for name in self.views.repository_names():
            col = self.views.collection(name)
            if col is None:
                continue
            got = self.chroma.call("get", lambda: col.get(ids=[doc_id], include=[]))
            if got["ids"]:
                with self.views.writer_lock(name):
                    self._delete_ids(name, col, [doc_id])
                return True
        return False

    def ensure_collection(self, name: str) -> CollectionInfo:
        col = self.views.collection(name, create=True)
        self.views.check_embedding_model(name, col)
        info = self.views.info(name)
        assert info is not None
        return info

    def delete_collection(self, name: str) -> int:
        """Delete repository `name`'s current collection (Chroma, BM25, catalog rows)."""
        physical = self.views.physical_name(name)
        if physical is None:
            return 0
        return self.drop_physical(name, physical)

    def drop_physical(self, name: str, physical: str) -> int:
        """Delete one physical collection of repository `name`; returns its chunk count."""
        validate_collection_name(name)
        with self.views.writer_lock(name):
            col = self.views.physical_collection(physical, name)
            removed = int(self.chroma.call("count", col.count)) if col is not None else 0
            if col is not None:
                client = self.chroma.client
                self.chroma.call("delete_collection", lambda: client.delete_collection(physical))
                if not self.settings.chroma_host:  # embedded: its file is ours to clean
                    clear_orphan_arrays(self.settings.chroma_path)
            self.views.bm25_physical(physical).drop()
            self.views.forget(physical, bm25=True)
            self.views.catalog.drop_collection(physical)
        log.info("collection_deleted", collection=physical, repository=name, chunks=removed)
        return removed

    def update_collection_metadata(self, name: str, **fields: Any) -> dict[str, Any]:
        """Change collection metadata: index state (commit, status, totals) goes to the
        catalog, anything else to Chroma's collection metadata. None removes a key."""
        info = self.views.info(name)
        if info is None:
            raise CollectionNotFoundError(
                f"collection {name!r} does not exist", hint="index the repository first"
            )
        state = {k: v for k, v in fields.items() if k in INDEX_STATE_KEYS}
        other = {k: v for k, v in fields.items() if k not in INDEX_STATE_KEYS}
        present = {k: v for k, v in fields.items() if v is not None}
        try:
            if present:
                validate_metadata(present)
        except (ValueError, TypeError) as exc:
            raise IndexingError(f"collection metadata for {name!r} is invalid: {exc}") from None
        col = self.chroma.collections[info.physical]
        chroma_meta = dict(col.metadata or {})
        legacy = {k: v for k, v in chroma_meta.items() if k in INDEX_STATE_KEYS}
        with self.views.writer_lock(name):
            if legacy and not self.views.catalog.index_state(info.physical):
                state = {**legacy, **state}  # an older index: its state moves to the catalog
            if state:
                self.views.catalog.set_index_state(info.physical, **state)
            if other or legacy:
                merged = {
                    k: v
                    for k, v in {**chroma_meta, **other}.items()
                    if v is not None and k not in INDEX_STATE_KEYS
                }
                # Chroma replaces collection metadata as a whole, hence the merge above.
                self.chroma.call("modify", lambda: col.modify(metadata=merged))
        self.views.forget(info.physical)
        info = self.views.info(name)
        assert info is not None
        return info.metadata
