"""A search candidate (`_Hit`) and the checks every result passes before it is shown: text
and metadata fetched from Chroma (the source of truth; BM25's copy only while Chroma cannot be
reached), scope, integrity hash and access level. Shared by the retrievers (`dense`,
`hetriever.search`) and the result building (`results`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hetriever.core.access import CollectionPlan, denial
from hetriever.core.errors import HetrieverError
from hetriever.core.logs import get_logger
from hetriever.store.store_types import RetrievalStore

log = get_logger("hetriever.search")


@dataclass
class _Hit:
    doc_id: str
    collection: str
    content: str | None = None
    metadata: dict[str, Any] | None = None
    dense_score: float | None = None
    bm25_raw: float | None = None
    # BM25's own copy of the metadata: enough to know a BM25-only hit's page before its text
    # and metadata are fetched from Chroma (the source of truth) for display.
    label: dict[str, Any] | None = None

    @property
    def page_metadata(self) -> dict[str, Any]:
        return self.metadata if self.metadata is not None else (self.label or {})


def _fill_documents(store: RetrievalStore, hits: list[_Hit]) -> None:
    """BM25-only hits get their text and metadata from Chroma; BM25's own copy is used only
    while Chroma cannot be reached. A row Chroma answered without is stale (left by a crash
    before BM25 caught up) and is never served."""
    by_collection: dict[str, list[_Hit]] = {}
    for hit in hits:
        if hit.content is None or hit.metadata is None:
            by_collection.setdefault(hit.collection, []).append(hit)
    for name, group in by_collection.items():
        ids = [h.doc_id for h in group]
        try:
            col = store.collection(name)
            got = (
                store.call(
                    "get", lambda: col.get(ids=ids, include=["documents", "metadatas"]), retry=False
                )
                if col is not None
                else {"ids": []}
            )
            fetched = {
                i: (d, m)
                for i, d, m in zip(
                    got["ids"], got.get("documents") or [], got.get("metadatas") or []
                )
            }
            chroma_answered = True
        except Exception as exc:
            log.warning("search_fetch_failed", collection=name, error=str(exc))
            fetched, chroma_answered = {}, False
        for hit in group:
            if hit.doc_id in fetched:
                hit.content, meta = fetched[hit.doc_id]
                hit.metadata = dict(meta or {})
                continue
            if chroma_answered:
                log.warning("result_missing_in_chroma", doc_id=hit.doc_id, collection=name)
                continue
            try:
                stored = store.search_bm25(name).get(hit.doc_id)
            except HetrieverError:  # Chroma down and BM25 damaged: nothing to show
                stored = None
            if stored is not None:  # (text, metadata)
                hit.content, hit.metadata = stored[0], dict(stored[1] or {})


def _trusted(hit: _Hit, plans: Mapping[str, CollectionPlan], levels: frozenset[str]) -> bool:
    from hetriever.core.names import content_hash

    meta = hit.metadata or {}
    if hit.content is None:
        log.warning("result_without_content", doc_id=hit.doc_id, collection=hit.collection)
        return False
    if meta.get("repository") not in plans or meta.get("repository") != hit.collection:
        log.warning(
            "result_out_of_scope",
            doc_id=hit.doc_id,
            collection=hit.collection,
            repository=meta.get("repository"),
        )
        return False
    if meta.get("content_hash") != content_hash(hit.content):
        log.warning("result_hash_mismatch", doc_id=hit.doc_id, collection=hit.collection)
        return False
    why = denial(plans[hit.collection], meta, levels)
    if why is not None:
        # The store-side filter should have kept it out: this is the second layer at work.
        log.warning(
            "result_access_denied", doc_id=hit.doc_id, collection=hit.collection, reason=why
        )
        return False
    return True


def page_key(metadata: Mapping[str, Any], collection: str) -> str:
    """The page a chunk belongs to: its repository and file."""
    return f"{collection}\x1f{metadata.get('file_path', '')}"


# A returned passage's length: ingest cuts chunks to 8,000 characters (plus their prefix), but
# an index built before that may hold a chunk of a whole 2 MB page.
MAX_PASSAGE_CHARS = 10_000


def bounded_passage(text: str) -> str:
    """`text`, or its start with a line saying it was cut and why, when over the bound."""
    if len(text) <= MAX_PASSAGE_CHARS:
        return text
    return (
        text[:MAX_PASSAGE_CHARS] + f"\n[passage cut: {len(text):,} characters, the first "
        f"{MAX_PASSAGE_CHARS:,} shown; `hetriever ingest --full` re-cuts it into chunks]"
    )


def _passage(hit: _Hit) -> dict[str, Any]:
    meta = hit.metadata or {}
    return {
        "doc_id": hit.doc_id,
        "heading_context": meta.get("heading_context", ""),
        "content": bounded_passage(hit.content or ""),
    }
