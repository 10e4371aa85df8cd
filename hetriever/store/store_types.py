"""What the store returns (write counts, collection info, repair results), the
`KnowledgeStore` protocol its async methods implement, and the narrower protocols that name
what retrieval (`RetrievalStore`) and the ingest run (`IndexingStore`) use of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, overload, runtime_checkable

from hetriever.core.config import Settings
from hetriever.core.models import Chunk, Document, Metadata
from hetriever.store.bm25.bm25_index import BM25Index
from hetriever.store.catalog import Catalog

T = TypeVar("T")


@dataclass
class FileWriteResult:
    written: int = 0  # new or changed chunks, embedded and written
    reused: int = 0  # unchanged chunks kept without re-embedding
    borrowed: int = 0  # of `written`, vectors copied from another version (store/donors.py)
    deleted: int = 0  # the file's old chunks that are gone from the new version
    embedding_seconds: float = 0.0


@dataclass
class _PreparedWrite:
    """Chunks sorted and embedded by `_prepare_write`, for `_apply_write` (indexes into ids)."""

    ids: list[str]
    texts: list[str]
    metadatas: list[dict[str, Any]]
    existing: dict[str, dict[str, Any]]  # id -> stored metadata, for chunks already stored
    to_embed: list[int] = field(default_factory=list)
    meta_only: list[int] = field(default_factory=list)  # same text, new metadata
    # Unchanged in Chroma but absent from BM25: a crash fell between the two writes.
    bm25_only: list[int] = field(default_factory=list)
    vectors: Any = None  # embeddings of `to_embed`, in that order
    result: FileWriteResult = field(default_factory=FileWriteResult)


@dataclass
class CollectionInfo:
    name: str  # the repository (logical) name
    count: int
    metadata: dict[str, Any] = field(default_factory=dict)
    physical: str = ""  # the Chroma collection behind it


@dataclass
class RepairResult:
    collection: str
    added: int = 0  # chunks in Chroma that BM25 lacked
    removed: int = 0  # BM25 rows with no chunk in Chroma
    updated: int = 0  # BM25 rows whose text or metadata differed from Chroma's
    chunk_ids: set[str] = field(default_factory=set)  # what Chroma holds, for the catalog
    files: set[str] = field(default_factory=set)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.updated)


@runtime_checkable
class KnowledgeStore(Protocol):
    async def index_document(self, doc_id: str, content: str, metadata: Metadata) -> bool: ...

    async def get_by_id(self, doc_id: str) -> Document | None: ...

    async def delete(self, doc_id: str) -> bool: ...

    async def health_check(self) -> bool: ...

    async def ensure_collection(self, name: str) -> CollectionInfo: ...

    async def upsert_file_chunks(
        self, collection: str, file_path: str, chunks: list[Chunk]
    ) -> FileWriteResult: ...

    async def upsert_files(
        self, collection: str, files: dict[str, list[Chunk]]
    ) -> FileWriteResult: ...

    async def delete_file(self, collection: str, file_path: str) -> int: ...

    async def delete_files(self, collection: str, file_paths: list[str]) -> int: ...

    async def file_chunk_counts(self, collection: str) -> dict[str, int]: ...

    async def list_files(self, collection: str) -> list[str]: ...

    async def list_collections(self) -> list[CollectionInfo]: ...

    async def get_collection_info(self, name: str) -> CollectionInfo | None: ...

    async def delete_collection(self, name: str) -> int: ...

    async def update_collection_metadata(self, name: str, **fields: Any) -> dict[str, Any]: ...

    async def get_collection_metadata(self, name: str) -> dict[str, Any]: ...

    async def count(self, collection: str, *, live: bool = False) -> int: ...

    async def soft_delete_file(self, collection: str, file_path: str, deleted_at: str) -> int: ...

    async def repair(self, collection: str) -> RepairResult: ...

    async def close(self) -> None: ...


class _Resolving(Protocol):
    """Repository names -> collections, shared by the protocols below."""

    settings: Settings

    @property
    def catalog(self) -> Catalog: ...

    def repository_names(self) -> list[str]: ...

    @overload
    def physical_name(self, name: str, *, create: Literal[True]) -> str: ...

    @overload
    def physical_name(self, name: str, *, create: bool = False) -> str | None: ...


class RetrievalStore(_Resolving, Protocol):
    """What search (`search`, `dense`, `candidates`, `results`) uses of a store."""

    @property
    def embedder(self) -> Any: ...

    def collection(self, name: str, *, create: bool = False) -> Any | None: ...

    def call(self, what: str, fn: Callable[[], T], *, retry: bool = True) -> T: ...

    def check_embedding_model(self, name: str, col: Any) -> None: ...

    def search_bm25(self, name: str) -> BM25Index: ...


class _StorageAware(Protocol):
    def storage_problem(self, exc: BaseException) -> Any: ...  # a StorageError, or None


class Publishing(Protocol):
    """What the ingest uses of the store's replica peer (`hetriever.store.replica.Replica`)."""

    def publish(self, repository: str, changed: list[str] | None = None) -> None: ...


class IndexingStore(KnowledgeStore, _Resolving, Protocol):
    """What an ingest run (`indexing`) uses of a store: the async API plus the BM25 side
    and the manifest it publishes to."""

    @property
    def replica(self) -> Publishing: ...

    @property
    def chroma(self) -> _StorageAware: ...  # the handle that tells a full or read-only disk

    def fingerprint(self) -> str: ...

    def tidy_vectors(self, name: str) -> int: ...

    def bm25(self, name: str, *, create: bool = False) -> BM25Index: ...

    def bm25_problem(self, name: str) -> str | None: ...

    async def rebuild_bm25(self, collection: str) -> RepairResult: ...
