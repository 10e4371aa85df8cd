"""The store: chunks in ChromaDB (dense vectors) kept in step with a BM25 index, behind the
async `KnowledgeStore` API, made of peers that each own one part:

- `chroma` (`hetriever.store.chroma_access.ChromaAccess`): the shared handle every peer
  receives: the Chroma client, its collection handles, one backend call with retries;
- `views` (`hetriever.store.views.RepositoryViews`): repository -> physical collection and
  BM25 index, the embedder, the catalog, the writer lock, what a collection is (`info`);
- `reads` (`hetriever.store.reads.StoreReads`): chunks and files read back out of Chroma;
- `writes` (`hetriever.store.writes.StoreWrites`): the write path (Chroma first, then BM25)
  and collection administration;
- `bm25_repair` (`hetriever.store.repair.StoreRepair`): BM25 repaired or rebuilt from Chroma;
- `replica` (`hetriever.store.replica.Replica`): the manifest the ingest publishes and
  followers copy.

`Store` composes them (no store class inherits another) and gives the async API (each method
runs its peer's sync method in a worker thread; searching is `hetriever.search.hybrid.retrieve`
over a store, since search sits above the store), the narrow faces search and the ingest use
(`RetrievalStore`, `IndexingStore`), and one shared store per settings. Code that needs
anything else reaches the peer: `store.writes.drop_physical(...)`, `store.reads.count(...)`.

Vectors are always computed by our embedder and passed explicitly: collections are created
with `embedding_function=None`, so Chroma never loads (or tries to download) its default model.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar, overload

from hetriever.core import caches
from hetriever.core.config import Settings, load_settings
from hetriever.core.errors import ConfigurationError
from hetriever.core.models import Chunk, Document, Metadata
from hetriever.store.bm25.bm25_index import BM25Index
from hetriever.store.catalog import Catalog
from hetriever.store.chroma_access import ChromaAccess
from hetriever.store.donors import prune_ledger_if_grown
from hetriever.store.reads import StoreReads
from hetriever.store.repair import StoreRepair
from hetriever.store.replica import Replica
from hetriever.store.store_types import CollectionInfo, FileWriteResult, RepairResult
from hetriever.store.views import RepositoryViews
from hetriever.store.writes import StoreWrites

T = TypeVar("T")


class Store:
    """KnowledgeStore on ChromaDB (embedded PersistentClient, or HttpClient in server mode),
    composed of its peers (see the module's docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Any | None = None,
        lock_timeout: float | None = None,
        client: Any | None = None,
        pins: dict[str, str] | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        self.settings = settings
        self.chroma = ChromaAccess(settings, lock_timeout=lock_timeout, client=client)
        self.views = RepositoryViews(self.chroma, embedder=embedder, pins=pins, catalog=catalog)
        self.reads = StoreReads(self.views)
        self.writes = StoreWrites(self.views)
        self.bm25_repair = StoreRepair(self.views)
        self.replica = Replica(self.views)
        if settings.follow:  # a follower reads the manifest before it lists repositories
            self.views.before_listing = self.replica.follow_quietly

    def pinned(self, repository: str, physical: str) -> Store:
        """A store sharing this one's client, embedder and catalog, but reading and writing
        `physical` for `repository` whatever the alias says."""
        return Store(
            self.settings,
            embedder=self.views._embedder,
            lock_timeout=self.chroma.lock_timeout,
            client=self.chroma.client,
            pins={**self.views.pins, repository: physical},
            catalog=self.views.catalog,
        )

    def embedding_with(self, embedder: Any) -> Store:
        """A store sharing this one's client, pins and catalog, with another embedder (the
        workers of a cluster: hetriever.embed.cluster)."""
        return Store(
            self.settings,
            embedder=embedder,
            lock_timeout=self.chroma.lock_timeout,
            client=self.chroma.client,
            pins=self.views.pins,
            catalog=self.views.catalog,
        )

    # -- what search (RetrievalStore) and the ingest (IndexingStore) use -----------------

    @property
    def catalog(self) -> Catalog:
        return self.views.catalog

    @property
    def embedder(self) -> Any:
        return self.views.embedder

    def repository_names(self) -> list[str]:
        return self.views.repository_names()

    @overload
    def physical_name(self, name: str, *, create: Literal[True]) -> str: ...

    @overload
    def physical_name(self, name: str, *, create: bool = False) -> str | None: ...

    def physical_name(self, name: str, *, create: bool = False) -> str | None:
        return self.views.physical_name(name, create=create)

    def collection(self, name: str, *, create: bool = False) -> Any | None:
        return self.views.collection(name, create=create)

    def call(self, what: str, fn: Callable[[], T], *, retry: bool = True) -> T:
        return self.chroma.call(what, fn, retry=retry)

    def check_embedding_model(self, name: str, col: Any) -> None:
        self.views.check_embedding_model(name, col)

    def search_bm25(self, name: str) -> BM25Index:
        return self.views.search_bm25(name)

    def fingerprint(self) -> str:
        return self.views.fingerprint()

    def bm25(self, name: str, *, create: bool = False) -> BM25Index:
        return self.views.bm25(name, create=create)

    def bm25_problem(self, name: str) -> str | None:
        return self.views.bm25_problem(name)

    def release(self, name: str) -> None:
        self.views.release(name)

    def tidy_vectors(self, name: str) -> int:
        """Prune the vector ledger of `name`'s family if it has grown (`store/donors.py`)."""
        return prune_ledger_if_grown(self.views, name)

    # -- the async KnowledgeStore API ---------------------------------------------------

    async def index_document(self, doc_id: str, content: str, metadata: Metadata) -> bool:
        return await asyncio.to_thread(self.writes.index_document, doc_id, content, metadata)

    async def get_by_id(self, doc_id: str) -> Document | None:
        return await asyncio.to_thread(self.reads.get_by_id, doc_id)

    async def delete(self, doc_id: str) -> bool:
        return await asyncio.to_thread(self.writes.delete, doc_id)

    async def health_check(self) -> bool:
        return await asyncio.to_thread(self.chroma.health_check)

    async def ensure_collection(self, name: str) -> CollectionInfo:
        return await asyncio.to_thread(self.writes.ensure_collection, name)

    async def upsert_file_chunks(
        self, collection: str, file_path: str, chunks: list[Chunk]
    ) -> FileWriteResult:
        return await asyncio.to_thread(
            self.writes.upsert_file_chunks, collection, file_path, list(chunks)
        )

    async def upsert_files(self, collection: str, files: dict[str, list[Chunk]]) -> FileWriteResult:
        return await asyncio.to_thread(
            self.writes.upsert_files,
            collection,
            {path: list(chunks) for path, chunks in files.items()},
        )

    async def delete_file(self, collection: str, file_path: str) -> int:
        return await asyncio.to_thread(self.writes.delete_file, collection, file_path)

    async def delete_files(self, collection: str, file_paths: list[str]) -> int:
        return await asyncio.to_thread(self.writes.delete_files, collection, list(file_paths))

    async def file_chunk_counts(self, collection: str) -> dict[str, int]:
        return await asyncio.to_thread(self.reads.file_chunk_counts, collection)

    async def list_files(self, collection: str) -> list[str]:
        return await asyncio.to_thread(self.reads.list_files, collection)

    async def list_collections(self) -> list[CollectionInfo]:
        def run() -> list[CollectionInfo]:
            infos = (self.views.info(n) for n in self.views.repository_names())
            return [i for i in infos if i is not None]

        return await asyncio.to_thread(run)

    async def get_collection_info(self, name: str) -> CollectionInfo | None:
        return await asyncio.to_thread(self.views.info, name)

    async def delete_collection(self, name: str) -> int:
        return await asyncio.to_thread(self.writes.delete_collection, name)

    async def update_collection_metadata(self, name: str, **fields: Any) -> dict[str, Any]:
        return await asyncio.to_thread(self.writes.update_collection_metadata, name, **fields)

    async def get_collection_metadata(self, name: str) -> dict[str, Any]:
        info = await asyncio.to_thread(self.views.info, name)
        return info.metadata if info is not None else {}

    async def count(self, collection: str, *, live: bool = False) -> int:
        return await asyncio.to_thread(lambda: self.reads.count(collection, live=live))

    async def soft_delete_file(self, collection: str, file_path: str, deleted_at: str) -> int:
        return await asyncio.to_thread(
            self.writes.soft_delete_file, collection, file_path, deleted_at
        )

    async def repair(self, collection: str) -> RepairResult:
        return await asyncio.to_thread(self.bm25_repair.repair, collection)

    async def rebuild_bm25(self, collection: str) -> RepairResult:
        return await asyncio.to_thread(self.bm25_repair.rebuild_bm25, collection)

    def close_sync(self) -> None:
        self.views.close()

    async def close(self) -> None:
        self.close_sync()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --- shared instances ----------------------------------------------------------------

_stores: dict[str, Store] = {}
_stores_guard = threading.Lock()


def get_knowledge_store(settings: Settings | None = None) -> Store:
    """One shared store per settings (from the environment when not given)."""
    if settings is None:
        settings = load_settings()
    if not isinstance(settings, Settings):
        raise ConfigurationError(f"expected Settings, got {type(settings).__name__}")
    key = repr(settings)  # Settings holds dicts, so it is not hashable itself
    with _stores_guard:
        store = _stores.get(key)
        if store is None:
            store = Store(settings)
            _stores[key] = store
        return store


def clear_store_cache() -> None:
    with _stores_guard:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        store.close_sync()


caches.register("stores", clear_store_cache)
