"""How a chunk is kept in a Chroma collection: its text is a metadata value, not a document.

Chroma's local store (embedded, and `chroma run`) puts every document into a trigram
full-text index (SQLite FTS5) on each write, and takes it out again on each delete;
hetriever never queries it (BM25 is its own, `store/bm25/`). With the text as metadata instead,
hugo-docs' 3,792 chunks are written 1.40x and deleted 1.30x faster, and the index is a quarter
smaller on disk (bench/README.md, "bench_chroma_text.py"). A schema that disables the index does not help:
local Chroma 1.5 still fills it on every write and only refuses full-text queries.

`ChunkCollection` wraps a Chroma collection so the rest of the code keeps Chroma's own
shape: writes move `documents` into the `TEXT_KEY` metadata value; reads give it back as
`documents` and never show `TEXT_KEY` in `metadatas`. A record written before (text as a
Chroma document) reads the same: its document is used when it has no `TEXT_KEY`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TEXT_KEY = "hetriever:text"


def _with_text(
    metadatas: Sequence[Any] | None, documents: Sequence[Any], count: int
) -> list[dict[str, Any]]:
    metas = list(metadatas) if metadatas is not None else [{}] * count
    return [{**dict(meta or {}), TEXT_KEY: text} for meta, text in zip(metas, documents)]


def _split(
    documents: list[Any] | None, metadatas: list[Any] | None, want_documents: bool
) -> tuple[list[Any] | None, list[Any] | None]:
    """One list of records: (documents, metadatas) as the caller asked for them."""
    if metadatas is None:
        return documents, None
    texts, metas = [], []
    for i, meta in enumerate(metadatas):
        meta = dict(meta or {})
        text = meta.pop(TEXT_KEY, None)
        if text is None and documents is not None:
            text = documents[i]
        texts.append(text)
        metas.append(meta or None)
    return (texts if want_documents else None), metas


class ChunkCollection:
    """A Chroma collection whose chunk texts are kept as metadata (see the module docstring).
    Everything not overridden here goes to the collection itself."""

    def __init__(self, collection: Any) -> None:
        self._collection = collection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    @property
    def raw(self) -> Any:
        return self._collection

    def _write(
        self,
        method: str,
        ids: Sequence[str],
        documents: Sequence[Any] | None,
        metadatas: Sequence[Any] | None,
        **kwargs: Any,
    ) -> Any:
        if documents is not None:
            metadatas = _with_text(metadatas, documents, len(ids))
        if metadatas is not None:
            kwargs["metadatas"] = metadatas
        return getattr(self._collection, method)(ids=ids, **kwargs)

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[Any] | None = None,
        metadatas: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        return self._write("upsert", ids, documents, metadatas, **kwargs)

    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[Any] | None = None,
        metadatas: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        return self._write("add", ids, documents, metadatas, **kwargs)

    def update(
        self,
        ids: Sequence[str],
        documents: Sequence[Any] | None = None,
        metadatas: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        return self._write("update", ids, documents, metadatas, **kwargs)

    @staticmethod
    def _include(
        include: Sequence[str] | None, default: Sequence[str]
    ) -> tuple[list[str], bool, bool]:
        asked = list(include if include is not None else default)
        documents, metadatas = "documents" in asked, "metadatas" in asked
        if documents and not metadatas:
            asked.append("metadatas")
        return asked, documents, metadatas

    def get(self, *args: Any, include: Sequence[str] | None = None, **kwargs: Any) -> Any:
        asked, documents, metadatas = self._include(include, ("documents", "metadatas"))
        got = self._collection.get(*args, include=asked, **kwargs)
        got["documents"], got["metadatas"] = _split(
            got.get("documents"), got.get("metadatas"), documents
        )
        if not metadatas:
            got["metadatas"] = None
        return got

    def query(self, *args: Any, include: Sequence[str] | None = None, **kwargs: Any) -> Any:
        asked, documents, metadatas = self._include(
            include, ("documents", "metadatas", "distances")
        )
        got = self._collection.query(*args, include=asked, **kwargs)
        rows = got.get("metadatas")
        if rows is not None:
            docs = got.get("documents") or [None] * len(rows)
            pairs = [_split(d, m, documents) for d, m in zip(docs, rows)]
            got["documents"] = [d for d, _ in pairs] if documents else None
            got["metadatas"] = [m for _, m in pairs] if metadatas else None
        return got
