"""The synchronous store: reads, collection administration and repair over Chroma and BM25.

Chroma is the source of truth for the chunks; `repair_sync` brings a collection's BM25 index
back in line after a crash between the two writes, and `rebuild_bm25_sync` rebuilds a damaged
one from Chroma. The async `KnowledgeStore` API (`hetriever.store`) runs these in a thread.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from chromadb.api.types import validate_metadata

from hetriever.store.catalog import INDEX_STATE_DEFAULTS, INDEX_STATE_KEYS
from hetriever.core.errors import CollectionNotFoundError, IndexingError
from hetriever.core.logs import get_logger
from hetriever.core.models import Document
from hetriever.core.names import validate_collection_name
from hetriever.store.store_types import CollectionInfo, RepairResult
from hetriever.store.writes import StoreWrites
from hetriever.store.chroma_orphans import clear_orphan_arrays

log = get_logger(__name__)


def _documents(got: Any) -> list[Document]:
    """A Chroma `get` answer (documents and metadatas included) as Documents."""
    return [Document(doc_id=i, content=d or "", metadata=dict(m or {}))
            for i, d, m in zip(got["ids"], got["documents"] or [], got["metadatas"] or [])]


class SyncStore(StoreWrites):
    """Every store operation, synchronous (tests, the CLI and worker threads call these)."""

    def list_files_sync(self, collection: str, *, include_deleted: bool = False) -> list[str]:
        """Files with chunks in the collection; soft-deleted files only when asked."""
        return sorted(self.file_chunk_counts_sync(collection, include_deleted=include_deleted))

    def file_chunk_counts_sync(self, collection: str, *,
                               include_deleted: bool = False) -> dict[str, int]:
        """file_path -> chunks in Chroma (live ones, unless `include_deleted`)."""
        col = self.collection(collection)
        if col is None:
            return {}
        counts: dict[str, int] = {}
        for m in self.all_records(col, ["metadatas"])["metadatas"]:
            if m and "file_path" in m and (include_deleted or m.get("is_deleted") is not True):
                counts[str(m["file_path"])] = counts.get(str(m["file_path"]), 0) + 1
        return counts

    def chunks_where_sync(self, collection: str, where: dict[str, Any]) -> list[Document]:
        """The collection's chunks matching an equality filter (e.g. one file, one URL),
        soft-deleted ones included (callers check access and deletion), unordered."""
        col = self.collection(collection)
        if col is None:
            return []
        return _documents(self.call("get", lambda: col.get(
            where=where, include=["documents", "metadatas"])))

    def chunks_by_ids_sync(self, collection: str, ids: list[str]) -> list[Document]:
        """The collection's chunks with these ids (those it holds), unordered."""
        col = self.collection(collection)
        if col is None or not ids:
            return []
        return _documents(self.call("get", lambda: col.get(
            ids=ids, include=["documents", "metadatas"])))

    def deleted_chunks_sync(self, collection: str) -> list[tuple[str, str, str]]:
        """(id, file_path, deleted_at) of every soft-deleted chunk of the collection."""
        col = self.collection(collection)
        if col is None:
            return []
        got = self.call("get", lambda: col.get(where={"is_deleted": True},
                                                include=["metadatas"]))
        return [(i, str((m or {}).get("file_path", "")), str((m or {}).get("deleted_at", "")))
                for i, m in zip(got["ids"], got["metadatas"] or [])]

    def get_by_id_sync(self, doc_id: str) -> Document | None:
        for name in self.repository_names():
            col = self.collection(name)
            if col is None:
                continue
            got = self.call("get", lambda: col.get(ids=[doc_id],
                                                    include=["documents", "metadatas"]))
            if got["ids"]:
                return Document(doc_id=doc_id, content=got["documents"][0],
                                metadata=dict(got["metadatas"][0] or {}))
        return None

    def info_sync(self, name: str) -> CollectionInfo | None:
        col = self.collection(name)
        if col is None:
            return None
        physical = self.physical_name(name)
        if physical is None:  # dropped since `collection()` looked
            return None
        # Fetched fresh: the cached object's metadata is a snapshot from when it was opened.
        fresh = self.open_collection(physical)
        with self._guard:
            self._collections[physical] = fresh
        return CollectionInfo(name=name, count=int(self.call("count", fresh.count)),
                              metadata=self._with_index_state(physical, fresh.metadata),
                              physical=physical)

    def _with_index_state(self, physical: str, chroma_meta: Any) -> dict[str, Any]:
        """Chroma's metadata of the collection (model, dimensions, schema) with the index
        state the catalog records. Collections indexed before the catalog kept that state
        carry it in their Chroma metadata: it counts until the catalog has its own."""
        meta = dict(chroma_meta or {})
        legacy = {k: meta.pop(k) for k in list(meta) if k in INDEX_STATE_KEYS}
        state = self.catalog.index_state(physical) or legacy
        return {**meta, **INDEX_STATE_DEFAULTS, **state}

    def ensure_collection_sync(self, name: str) -> CollectionInfo:
        col = self.collection(name, create=True)
        self.check_embedding_model(name, col)
        info = self.info_sync(name)
        assert info is not None
        return info

    def delete_collection_sync(self, name: str) -> int:
        """Delete repository `name`'s current collection (Chroma, BM25, catalog rows)."""
        physical = self.physical_name(name)
        if physical is None:
            return 0
        return self.drop_physical_sync(name, physical)

    def drop_physical_sync(self, name: str, physical: str) -> int:
        """Delete one physical collection of repository `name`; returns its chunk count."""
        validate_collection_name(name)
        with self.writer_lock(name):
            col = self.physical_collection(physical, name)
            removed = int(self.call("count", col.count)) if col is not None else 0
            if col is not None:
                self.call("delete_collection", lambda: self.client.delete_collection(physical))
                if not self.settings.chroma_host:  # embedded: its file is ours to clean
                    clear_orphan_arrays(self.settings.chroma_path)
            self.bm25_physical(physical).drop()
            self._forget(physical, bm25=True)
            self.catalog.drop_collection(physical)
        log.info("collection_deleted", collection=physical, repository=name, chunks=removed)
        return removed

    def update_collection_metadata_sync(self, name: str, **fields: Any) -> dict[str, Any]:
        """Change collection metadata: index state (commit, status, totals) goes to the
        catalog, anything else to Chroma's collection metadata. None removes a key."""
        info = self.info_sync(name)
        if info is None:
            raise CollectionNotFoundError(f"collection {name!r} does not exist",
                                          hint="index the repository first")
        state = {k: v for k, v in fields.items() if k in INDEX_STATE_KEYS}
        other = {k: v for k, v in fields.items() if k not in INDEX_STATE_KEYS}
        present = {k: v for k, v in fields.items() if v is not None}
        try:
            if present:
                validate_metadata(present)
        except (ValueError, TypeError) as exc:
            raise IndexingError(f"collection metadata for {name!r} is invalid: {exc}") from None
        col = self._collections[info.physical]
        chroma_meta = dict(col.metadata or {})
        legacy = {k: v for k, v in chroma_meta.items() if k in INDEX_STATE_KEYS}
        with self.writer_lock(name):
            if legacy and not self.catalog.index_state(info.physical):
                state = {**legacy, **state}  # an older index: its state moves to the catalog
            if state:
                self.catalog.set_index_state(info.physical, **state)
            if other or legacy:
                merged = {k: v for k, v in {**chroma_meta, **other}.items()
                          if v is not None and k not in INDEX_STATE_KEYS}
                # Chroma replaces collection metadata as a whole, hence the merge above.
                self.call("modify", lambda: col.modify(metadata=merged))
        self._forget(info.physical)
        info = self.info_sync(name)
        assert info is not None
        return info.metadata

    def count_sync(self, collection: str, *, live: bool = False) -> int:
        """Chunks in the collection; with `live`, soft-deleted chunks are not counted."""
        col = self.collection(collection)
        if col is None:
            return 0
        total = int(self.call("count", col.count))
        if live:
            total -= len(self._ids_where(col, {"is_deleted": True}))
        return total

    def repair_sync(self, collection: str) -> RepairResult:
        result = RepairResult(collection=collection)
        col = self.collection(collection)
        if col is None:
            raise CollectionNotFoundError(f"collection {collection!r} does not exist")
        with self.writer_lock(collection):
            records = self.all_records(col, ["documents", "metadatas"])
            index = self.bm25(collection)
            in_bm25 = set(index.ids())
            in_chroma = set(records["ids"])
            ids, documents = records["ids"], records["documents"]
            metadatas = [dict(m or {}) for m in records["metadatas"]]
            # Text and metadata compared field by field, not only ids: a window that died
            # between its Chroma write and its BM25 commit left rows BM25 holds with the
            # previous version's metadata (a reused chunk's new weight, aliases, position),
            # and the next write sees those chunks unchanged in Chroma and skips them.
            held = index.rows(ids)
            missing = [i for i, doc_id in enumerate(ids) if doc_id not in held]
            stale = [i for i, doc_id in enumerate(ids)
                     if doc_id in held and held[doc_id] != (documents[i], metadatas[i])]
            extra = sorted(in_bm25 - in_chroma)
            if missing or stale:
                rewrite = missing + stale
                index.upsert([ids[i] for i in rewrite], [documents[i] for i in rewrite],
                             [metadatas[i] for i in rewrite])
            if extra:
                index.delete(extra)
            result.added, result.removed = len(missing), len(extra)
            result.updated = len(stale)
            result.chunk_ids = in_chroma
            result.files = {str(m["file_path"]) for m in records["metadatas"]
                            if m and "file_path" in m}
        log.info("collection_repaired", collection=collection, added=result.added,
                 removed=result.removed, updated=result.updated)
        return result

    def rebuild_bm25_sync(self, name: str) -> RepairResult:
        """Set a damaged BM25 file aside and rebuild the index from Chroma."""
        physical = self.physical_name(name)
        assert physical is not None
        path = self.bm25_file(physical)
        with self.writer_lock(name):
            self._forget(physical, bm25=True)
            self._bm25_ok.discard(physical)
            if path.exists():
                aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
                path.replace(aside)
                log.warning("bm25_set_aside", path=str(path), moved_to=str(aside))
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return self.repair_sync(name)

    def close_sync(self) -> None:
        with self._guard:
            names = list(self._bm25)
        for name in names:
            self._forget(name, bm25=True)
        with self._guard:
            self._collections.clear()
            catalog, self._catalog = (self._catalog, None) if self._owns_catalog else (None,
                                                                                      self._catalog)
        if catalog is not None:
            catalog.close()
