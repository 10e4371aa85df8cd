"""The knowledge store: chunks in ChromaDB (dense vectors) kept in step with a BM25 index,
behind the async `KnowledgeStore` API.

The store is built in layers, one idea each:

- `hetriever.store.chroma_access`: the Chroma client, one backend call with retries, reopening;
- `hetriever.store.views`: repository -> physical collection and BM25 index, the writer lock;
- `hetriever.store.writes`: the write path (Chroma first, then BM25);
- `hetriever.store.sync_store`: reads, collection administration, repair;
- this module: the async API (each method runs its sync twin in a worker thread), `search()`
  through `hetriever.search`, and one shared store per settings.

Vectors are always computed by our embedder and passed explicitly: collections are created
with `embedding_function=None`, so Chroma never loads (or tries to download) its default model.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from hetriever.core import caches
from hetriever.core.config import Settings, load_settings
from hetriever.core.errors import ConfigurationError
from hetriever.core.models import Chunk, Document, Metadata, SearchResult
from hetriever.core.names import content_hash, validate_collection_name  # noqa: F401 (re-exported)
from hetriever.store.store_types import (  # noqa: F401 (re-exported)
    CollectionInfo,
    FileWriteResult,
    KnowledgeStore,
    RepairResult,
)
from hetriever.store.sync_store import SyncStore


class ChromaKnowledgeStore(SyncStore):
    """KnowledgeStore on ChromaDB (embedded PersistentClient, or HttpClient in server mode)."""

    async def index_document(self, doc_id: str, content: str, metadata: Metadata) -> bool:
        return await asyncio.to_thread(self.index_document_sync, doc_id, content, metadata)

    async def search(self, query: str, top_k: int | None = None,
                     filters: dict[str, Any] | None = None, *,
                     namespaces: Sequence[str] | None = None,
                     hybrid: bool | None = None,
                     access_levels: Sequence[str] | None = None,
                     group_by: str | None = None,
                     lang: str | None = None) -> list[SearchResult]:
        from hetriever.search.hybrid import retrieve
        from hetriever.search.request import SearchRequest

        result = await retrieve(self, SearchRequest(
            query, top_k, filters, repositories=namespaces, hybrid=hybrid,
            access_levels=access_levels, group_by=group_by, lang=lang))
        return result.matches

    async def get_by_id(self, doc_id: str) -> Document | None:
        return await asyncio.to_thread(self.get_by_id_sync, doc_id)

    async def delete(self, doc_id: str) -> bool:
        return await asyncio.to_thread(self.delete_sync, doc_id)

    async def health_check(self) -> bool:
        return await asyncio.to_thread(self.health_check_sync)

    async def ensure_collection(self, name: str) -> CollectionInfo:
        return await asyncio.to_thread(self.ensure_collection_sync, name)

    async def upsert_file_chunks(self, collection: str, file_path: str,
                                 chunks: list[Chunk]) -> FileWriteResult:
        return await asyncio.to_thread(self.upsert_file_chunks_sync, collection, file_path,
                                       list(chunks))

    async def upsert_files(self, collection: str,
                           files: dict[str, list[Chunk]]) -> FileWriteResult:
        return await asyncio.to_thread(self.upsert_files_sync, collection,
                                       {path: list(chunks) for path, chunks in files.items()})

    async def delete_file(self, collection: str, file_path: str) -> int:
        return await asyncio.to_thread(self.delete_file_sync, collection, file_path)

    async def delete_files(self, collection: str, file_paths: list[str]) -> int:
        return await asyncio.to_thread(self.delete_files_sync, collection, list(file_paths))

    async def file_chunk_counts(self, collection: str) -> dict[str, int]:
        return await asyncio.to_thread(self.file_chunk_counts_sync, collection)

    async def list_files(self, collection: str) -> list[str]:
        return await asyncio.to_thread(self.list_files_sync, collection)

    async def list_collections(self) -> list[CollectionInfo]:
        def run() -> list[CollectionInfo]:
            infos = (self.info_sync(n) for n in self.repository_names())
            return [i for i in infos if i is not None]

        return await asyncio.to_thread(run)

    async def get_collection_info(self, name: str) -> CollectionInfo | None:
        return await asyncio.to_thread(self.info_sync, name)

    async def delete_collection(self, name: str) -> int:
        return await asyncio.to_thread(self.delete_collection_sync, name)

    async def update_collection_metadata(self, name: str, **fields: Any) -> dict[str, Any]:
        return await asyncio.to_thread(self.update_collection_metadata_sync, name, **fields)

    async def get_collection_metadata(self, name: str) -> dict[str, Any]:
        info = await asyncio.to_thread(self.info_sync, name)
        return info.metadata if info is not None else {}

    async def count(self, collection: str, *, live: bool = False) -> int:
        return await asyncio.to_thread(lambda: self.count_sync(collection, live=live))

    async def soft_delete_file(self, collection: str, file_path: str, deleted_at: str) -> int:
        return await asyncio.to_thread(self.soft_delete_file_sync, collection, file_path,
                                       deleted_at)

    async def repair(self, collection: str) -> RepairResult:
        return await asyncio.to_thread(self.repair_sync, collection)

    async def rebuild_bm25(self, collection: str) -> RepairResult:
        return await asyncio.to_thread(self.rebuild_bm25_sync, collection)

    async def close(self) -> None:
        self.close_sync()

    async def __aenter__(self) -> ChromaKnowledgeStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --- shared instances ----------------------------------------------------------------

_stores: dict[str, ChromaKnowledgeStore] = {}
_stores_guard = threading.Lock()


def get_knowledge_store(settings: Settings | None = None) -> ChromaKnowledgeStore:
    """One shared store per settings (from the environment when not given)."""
    if settings is None:
        settings = load_settings()
    if not isinstance(settings, Settings):
        raise ConfigurationError(f"expected Settings, got {type(settings).__name__}")
    key = repr(settings)  # Settings holds dicts, so it is not hashable itself
    with _stores_guard:
        store = _stores.get(key)
        if store is None:
            store = ChromaKnowledgeStore(settings)
            _stores[key] = store
        return store


def clear_store_cache() -> None:
    with _stores_guard:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        store.close_sync()


caches.register("stores", clear_store_cache)
