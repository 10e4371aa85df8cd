"""A run's record: what a repository's index says of the last run, and the run's rows in the
catalog from its start (`begin_run`: the collection marked `indexing`, the repository's settings,
every file DISCOVERED) to its end (`finish_run`: the new commit recorded only once every file
is stored; `close_run`: the run's outcome and counts). `hetriever.index.indexing` drives them.
"""

from __future__ import annotations

import asyncio
import time

from hetriever.core import faults
from hetriever.core.access import declared_level
from hetriever.core.clock import now_iso
from hetriever.core.config import Settings
from hetriever.core.logs import get_logger
from hetriever.core.models import ChangeSet, IndexResult
from hetriever.discover.repositories import Repository
from hetriever.store.catalog_records import DISCOVERED, SKIPPED
from hetriever.store.store_types import IndexingStore

log = get_logger(__name__)

STATUS_KEY = "index_status"
STATUS_INDEXING = "indexing"
STATUS_COMPLETE = "complete"


def blob_ids(repo: Repository, commit: str) -> dict[str, str]:
    """path -> git blob id of the content files at `commit` (one `git ls-tree`)."""
    from hetriever.discover.git_objects import tree_entries

    try:
        return {
            path: obj
            for path, (_, kind, obj) in tree_entries(repo, commit).items()
            if kind == "blob"
        }
    except Exception as exc:  # the catalog's blob column is informative; never fail a run on it
        log.warning("blob_ids_failed", repository=repo.name, error=str(exc))
        return {}


async def begin_run(
    store: IndexingStore, repo: Repository, change_set: ChangeSet, settings: Settings
) -> None:
    physical = (await store.ensure_collection(repo.name)).physical
    await store.update_collection_metadata(
        repo.name, **{STATUS_KEY: STATUS_INDEXING, "indexing_commit": change_set.new_commit}
    )
    catalog = store.catalog
    catalog.upsert_repository(
        repo.name,
        url=repo.url,
        access_level=declared_level(settings, repo.name, base=_base_of(repo)),
        settings={
            # what makes it a version (hetriever.core.versions): base, label, ref
            **(repo.version.to_settings() if repo.version else {}),
            "embedding_model": settings.embedding_model,
            "chunk_tokens": settings.chunk_tokens,
            "content_dir": repo.content_dir,
            "retention_days": settings.retention_days,
            # default first: what a search without a language keeps to
            "languages": list(repo.site.languages) if repo.site else [],
            # where the site is published: served results get full links
            "base_urls": repo.site.absolute_base_urls() if repo.site else {},
            "site": repo.site.signature() if repo.site else "",
        },
    )
    catalog.start_run(
        repo.name,
        physical,
        mode=change_set.mode,
        old_commit=change_set.old_commit,
        new_commit=change_set.new_commit,
    )
    paths = change_set.paths_to_index()
    catalog.set_files(
        physical,
        repo.name,
        paths,
        DISCOVERED,
        commit=change_set.new_commit,
        blobs=blob_ids(repo, change_set.new_commit) if paths else {},
    )
    for skipped in change_set.skipped:
        catalog.set_files(
            physical,
            repo.name,
            [skipped.path],
            SKIPPED,
            reason=skipped.reason,
            commit=change_set.new_commit,
        )


def _base_of(repo: Repository) -> str | None:
    return repo.version.base if repo.version else None


async def finish_run(
    store: IndexingStore,
    repo: Repository,
    change_set: ChangeSet,
    result: IndexResult,
    started: float,
) -> None:
    """Record the new commit, only now that every file is stored (`started`: see close_run)."""
    total_chunks = await store.count(repo.name, live=True)
    files = await indexed_file_counts(store, repo)
    faults.check("commit_record", repo.name)
    await store.update_collection_metadata(
        repo.name,
        commit_hash=change_set.new_commit,
        repository_url=repo.url,
        last_updated=now_iso(),
        total_documents=len(files),
        total_chunks=total_chunks,
        **{STATUS_KEY: STATUS_COMPLETE},
    )
    result.completed = True
    faults.check("commit_recorded", repo.name)
    close_run(store, repo, result, "ok", started, commit=change_set.new_commit)
    # For searchers elsewhere: after an incremental run, only these files' chunks changed.
    changed = (
        None
        if change_set.mode == "full"
        else change_set.paths_to_index() + change_set.paths_to_delete()
    )
    await asyncio.to_thread(store.replica.publish, repo.name, changed)


async def indexed_file_counts(store: IndexingStore, repo: Repository) -> dict[str, int]:
    """file_path -> live chunks of the repository, from its BM25 index in memory.

    Outside a run BM25 holds exactly Chroma's chunks: writes go to Chroma, then BM25; a run
    that died is followed by a full one that repairs BM25 from Chroma (`reconcile_derived`);
    a damaged or missing index is rebuilt first (`heal_bm25`). Reading every chunk's metadata
    from Chroma instead costs seconds per 10k chunks, twice per incremental run.
    """
    if store.physical_name(repo.name) is None:
        return {}
    return await asyncio.to_thread(lambda: store.bm25(repo.name).file_counts())


def close_run(
    store: IndexingStore,
    repo: Repository,
    result: IndexResult,
    outcome: str,
    started: float,
    *,
    commit: str | None = None,
    error: str = "",
) -> None:
    """Close the repository's open catalog run with its outcome and counts; `started` is the
    run's `time.perf_counter()` at its start, for the seconds the record shows (the result's
    are set again when `index_repository` returns)."""
    result.total_seconds = time.perf_counter() - started
    catalog, physical = store.catalog, store.physical_name(repo.name)
    runs = [
        r
        for r in catalog.runs(repo.name, limit=5)
        if r["collection"] == physical and r["outcome"] == "running"
    ]
    if not runs:
        return
    counts = {
        k: v
        for k, v in result.to_dict().items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    counts["files_failed"] = len(result.failed)
    catalog.finish_run(runs[0]["id"], outcome=outcome, counts=counts, commit=commit, error=error)


async def last_indexed(store: IndexingStore, repo: Repository) -> tuple[str | None, str | None]:
    """(commit_hash, index_status) recorded for the repository, or (None, None)."""
    meta = await store.get_collection_metadata(repo.name)
    if not meta:
        return None, None
    return meta.get("commit_hash") or None, meta.get(STATUS_KEY) or None
