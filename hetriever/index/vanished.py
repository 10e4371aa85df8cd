"""A followed version whose ref is gone (a tag or branch deleted; a remote branch after its
remote-tracking ref went) is dropped by the rules deletes follow (docs/versions.md): with
`retention_days` its pages are soft-deleted, hidden from every search and erased by
`hetriever purge` after the retention; without, the version is erased at once. Either way
the mass-delete guard holds: dropping a whole index is refused unless `allow_mass_delete`,
so a ref mistyped in the settings, or a fetch that went wrong, never wipes a version
silently. A ref that never named a commit (a version not indexed yet) is a failure, not this.
"""

from __future__ import annotations

import asyncio

from hetriever.core.config import Settings
from hetriever.core.errors import SourceError
from hetriever.core.logs import get_logger
from hetriever.core.models import IndexResult
from hetriever.core.versions import version_from_settings
from hetriever.discover.repositories import Repository, version_repository
from hetriever.discover.versions import ref_commit
from hetriever.index.indexing import check_mass_delete, remove_paths, run_lock
from hetriever.index.lifecycle import forget_repository_sync
from hetriever.store.store_types import IndexingStore

log = get_logger(__name__)


def vanished_versions(
    base: Repository, store: IndexingStore, listed: list[Repository]
) -> list[Repository]:
    """The indexed versions of `base` the run does not list (a followed tag deleted, so
    `tags` no longer finds it) whose ref names no commit any more: to be dropped. One
    whose ref is still there (a tag past the last N) stays indexed as it was."""
    known = {r.name for r in listed}
    out = []
    for name, settings in store.catalog.version_settings().items():  # versions alone
        version = version_from_settings(settings)
        if version is None or version.base != base.name or name in known:
            continue
        repo = version_repository(base, version)
        try:
            ref_commit(repo)
        except SourceError:
            out.append(repo)
    return out


def was_indexed(store: IndexingStore, repo: Repository) -> bool:
    """Whether the version has an index to drop (a commit recorded, or a collection)."""
    record = store.catalog.repository(repo.name)
    return bool(record and record.last_commit) or store.physical_name(repo.name) is not None


async def drop_vanished_version(
    repo: Repository, store: IndexingStore, settings: Settings, why: str
) -> IndexResult:
    """Drop `repo`, a version whose ref names no commit any more; IndexingError when the
    mass-delete guard refuses (nothing is touched then)."""
    record = store.catalog.repository(repo.name)
    result = IndexResult(
        repository=repo.name,
        mode="dropped",
        old_commit=record.last_commit if record else None,
        new_commit="",
    )
    with run_lock(settings, repo.name):
        live = await store.file_chunk_counts(repo.name)
        doomed = sorted(live)
        check_mass_delete(repo, doomed, live, settings)
        if settings.retention_days > 0:  # hidden now, erased by `purge` after the retention
            await remove_paths(store, repo, doomed, result, settings)
        else:
            report = await asyncio.to_thread(forget_repository_sync, store, repo.name)
            result.chunks_deleted = report.chunks
    result.files_deleted = len(doomed)
    result.completed = True
    log.warning(
        "version_dropped",
        repository=repo.name,
        reason=why,
        files=len(doomed),
        chunks=result.chunks_deleted,
        soft=settings.retention_days > 0,
    )
    return result
