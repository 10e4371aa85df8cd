"""Bringing a collection's BM25 index back in line with Chroma, the source of truth for the
chunks: `repair` after a crash between the two writes (rows BM25 lacks, holds in another
version, or holds and Chroma does not), `rebuild_bm25` for a damaged file, set aside and
rebuilt from Chroma.
"""

from __future__ import annotations

import time
from pathlib import Path

from hetriever.core.errors import CollectionNotFoundError
from hetriever.core.logs import get_logger
from hetriever.store.store_types import RepairResult
from hetriever.store.views import RepositoryViews

log = get_logger(__name__)


class StoreRepair:
    """BM25 repaired or rebuilt from Chroma; holds nothing of its own but the views."""

    def __init__(self, views: RepositoryViews) -> None:
        self.views = views
        self.chroma = views.chroma

    def repair(self, collection: str) -> RepairResult:
        result = RepairResult(collection=collection)
        col = self.views.collection(collection)
        if col is None:
            raise CollectionNotFoundError(f"collection {collection!r} does not exist")
        with self.views.writer_lock(collection):
            records = self.chroma.all_records(col, ["documents", "metadatas"])
            index = self.views.bm25(collection)
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
            stale = [
                i
                for i, doc_id in enumerate(ids)
                if doc_id in held and held[doc_id] != (documents[i], metadatas[i])
            ]
            extra = sorted(in_bm25 - in_chroma)
            if missing or stale:
                rewrite = missing + stale
                index.upsert(
                    [ids[i] for i in rewrite],
                    [documents[i] for i in rewrite],
                    [metadatas[i] for i in rewrite],
                )
            if extra:
                index.delete(extra)
            result.added, result.removed = len(missing), len(extra)
            result.updated = len(stale)
            result.chunk_ids = in_chroma
            result.files = {
                str(m["file_path"]) for m in records["metadatas"] if m and "file_path" in m
            }
        log.info(
            "collection_repaired",
            collection=collection,
            added=result.added,
            removed=result.removed,
            updated=result.updated,
        )
        return result

    def rebuild_bm25(self, name: str) -> RepairResult:
        """Set a damaged BM25 file aside and rebuild the index from Chroma."""
        physical = self.views.physical_name(name)
        assert physical is not None
        path = self.views.bm25_file(physical)
        with self.views.writer_lock(name):
            self.views.forget(physical, bm25=True)
            if path.exists():
                aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
                path.replace(aside)
                log.warning("bm25_set_aside", path=str(path), moved_to=str(aside))
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return self.repair(name)
