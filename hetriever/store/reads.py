"""Reading a repository's chunks back out of Chroma: which files it holds and their chunk
counts, chunks by filter or id, the soft-deleted ones, one chunk by id in any repository,
and how many chunks a collection holds. Search's own reads (dense, BM25, exact titles) are
`hetriever.search`'s; these serve the ingest, the HTTP service's page views and the CLI.
"""

from __future__ import annotations

from typing import Any

from hetriever.core.models import Document
from hetriever.store.views import RepositoryViews


def _documents(got: Any) -> list[Document]:
    """A Chroma `get` answer (documents and metadatas included) as Documents."""
    return [
        Document(doc_id=i, content=d or "", metadata=dict(m or {}))
        for i, d, m in zip(got["ids"], got["documents"] or [], got["metadatas"] or [])
    ]


class StoreReads:
    """Reads of a repository's chunks; holds nothing of its own but the views it reads through."""

    def __init__(self, views: RepositoryViews) -> None:
        self.views = views
        self.chroma = views.chroma

    def list_files(self, collection: str, *, include_deleted: bool = False) -> list[str]:
        """Files with chunks in the collection; soft-deleted files only when asked."""
        return sorted(self.file_chunk_counts(collection, include_deleted=include_deleted))

    def file_chunk_counts(
        self, collection: str, *, include_deleted: bool = False
    ) -> dict[str, int]:
        """file_path -> chunks in Chroma (live ones, unless `include_deleted`)."""
        col = self.views.collection(collection)
        if col is None:
            return {}
        counts: dict[str, int] = {}
        for m in self.chroma.all_records(col, ["metadatas"])["metadatas"]:
            if m and "file_path" in m and (include_deleted or m.get("is_deleted") is not True):
                counts[str(m["file_path"])] = counts.get(str(m["file_path"]), 0) + 1
        return counts

    def chunks_where(self, collection: str, where: dict[str, Any]) -> list[Document]:
        """The collection's chunks matching an equality filter (e.g. one file, one URL),
        soft-deleted ones included (callers check access and deletion), unordered."""
        col = self.views.collection(collection)
        if col is None:
            return []
        return _documents(
            self.chroma.call(
                "get", lambda: col.get(where=where, include=["documents", "metadatas"])
            )
        )

    def chunks_by_ids(self, collection: str, ids: list[str]) -> list[Document]:
        """The collection's chunks with these ids (those it holds), unordered."""
        col = self.views.collection(collection)
        if col is None or not ids:
            return []
        return _documents(
            self.chroma.call("get", lambda: col.get(ids=ids, include=["documents", "metadatas"]))
        )

    def deleted_chunks(self, collection: str) -> list[tuple[str, str, str]]:
        """(id, file_path, deleted_at) of every soft-deleted chunk of the collection."""
        col = self.views.collection(collection)
        if col is None:
            return []
        got = self.chroma.call(
            "get", lambda: col.get(where={"is_deleted": True}, include=["metadatas"])
        )
        return [
            (i, str((m or {}).get("file_path", "")), str((m or {}).get("deleted_at", "")))
            for i, m in zip(got["ids"], got["metadatas"] or [])
        ]

    def get_by_id(self, doc_id: str) -> Document | None:
        """The chunk `doc_id` of whichever repository holds it, or None."""
        for name in self.views.repository_names():
            col = self.views.collection(name)
            if col is None:
                continue
            got = self.chroma.call(
                "get", lambda: col.get(ids=[doc_id], include=["documents", "metadatas"])
            )
            if got["ids"]:
                return Document(
                    doc_id=doc_id,
                    content=got["documents"][0],
                    metadata=dict(got["metadatas"][0] or {}),
                )
        return None

    def count(self, collection: str, *, live: bool = False) -> int:
        """Chunks in the collection; with `live`, soft-deleted chunks are not counted."""
        col = self.views.collection(collection)
        if col is None:
            return 0
        total = int(self.chroma.call("count", col.count))
        if live:
            total -= len(self.chroma.ids_where(col, {"is_deleted": True}))
        return total
