"""Index lifecycle: purge soft-deleted chunks, forget a repository or file, migrate a schema.

- `purge()`: chunks soft-deleted (`retention_days > 0`) more than N days ago are removed from
  Chroma and BM25, and their files from the catalog.
- `forget_repository()` / `forget_file()`: right to erasure, at once: every generation's chunks
  in Chroma and BM25, and the catalog's rows (files, titles, runs, the repository itself),
  of the repository and of every version of it, and the vectors of the texts no collection of
  the repository's family holds any longer (`store/donors.prune_ledger`).
- `migrate_repository()`: when the chunking or the embedding model changed (the store's
  `fingerprint()` differs from the active collection's), a full index is built into a new
  physical collection beside the old one; only once it is complete does the catalog's alias
  switch to it (one UPDATE), and then the old collection is dropped. Searches read the alias, so
  they see the old index or the new one, never an empty or half-built one. A generation a
  killed migration left `building`, or switched away from without dropping, is dropped by the
  next migration or ingest of that repository (`drop_abandoned_builds`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hetriever.core import faults
from hetriever.core.clock import now_utc, utc_text
from hetriever.core.config import Settings
from hetriever.core.errors import IndexingError, RepositoryNotFoundError, UserError
from hetriever.core.logs import get_logger
from hetriever.core.models import IndexResult, _Serialisable
from hetriever.core.versions import versions_of_base
from hetriever.discover.repositories import Repository, check_usable
from hetriever.store.catalog_records import DELETED
from hetriever.store.donors import family_of, prune_ledger
from hetriever.store.generations import drop_abandoned_builds

log = get_logger(__name__)


@dataclass
class PurgeReport(_Serialisable):
    cutoff: str
    chunks: dict[str, int] = field(default_factory=dict)  # repository -> chunks removed
    files: dict[str, int] = field(default_factory=dict)  # repository -> catalog files removed

    @property
    def total_chunks(self) -> int:
        return sum(self.chunks.values())


@dataclass
class ForgetReport(_Serialisable):
    repository: str
    file: str | None
    chunks: int = 0  # removed from Chroma (BM25 holds the same ids)
    bm25_rows: int = 0
    collections: list[str] = field(default_factory=list)
    catalog_rows: dict[str, int] = field(default_factory=dict)
    versions: list[str] = field(default_factory=list)  # the base's versions, forgotten too

    def add(self, other: ForgetReport) -> None:
        """Count a version's erasure into its base's report."""
        self.versions.append(other.repository)
        self.chunks += other.chunks
        self.bm25_rows += other.bm25_rows
        self.collections += other.collections
        for table, rows in other.catalog_rows.items():
            self.catalog_rows[table] = self.catalog_rows.get(table, 0) + rows


@dataclass
class MigrateReport(_Serialisable):
    repository: str
    old_collection: str | None
    new_collection: str | None
    migrated: bool
    reason: str = ""
    index: IndexResult | None = None
    dropped_chunks: int = 0


def _parse(stamp: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def purge_sync(
    store, older_than_days: float | None = None, *, now: datetime | None = None
) -> PurgeReport:
    """Hard-delete chunks soft-deleted more than `older_than_days` (default: the setting) ago."""
    days = store.settings.retention_days if older_than_days is None else older_than_days
    cutoff = (now or now_utc()) - timedelta(days=days)
    report = PurgeReport(cutoff=utc_text(cutoff))
    catalog = store.catalog
    for name in store.repository_names():
        physical = store.physical_name(name)
        expired = [
            (doc_id, path)
            for doc_id, path, stamp in store.reads.deleted_chunks(name)
            if (when := _parse(stamp)) is None or when <= cutoff
        ]
        removed = store.writes.purge_ids(name, [doc_id for doc_id, _ in expired])
        # A file row goes once none of its chunks is left soft-deleted.
        still = {path for _, path, _ in store.reads.deleted_chunks(name)}
        gone = [
            f.path
            for f in catalog.files(physical, DELETED)
            if f.path not in still and (_parse(f.deleted_at) or cutoff) <= cutoff
        ]
        report.chunks[name] = removed
        report.files[name] = catalog.remove_files(physical, gone)
        if removed:
            store.replica.publish(name, sorted({path for _, path in expired}))
            log.info("purged", repository=name, chunks=removed, files=report.files[name])
    # Texts edited or deleted away since the last purge leave the ledger too.
    for family in sorted({family_of(store.views, name) for name in store.repository_names()}):
        prune_ledger(store.views, family)
    return report


async def purge(
    store, older_than_days: float | None = None, *, now: datetime | None = None
) -> PurgeReport:
    return await asyncio.to_thread(purge_sync, store, older_than_days, now=now)


def _with_versions(store, name: str, erase: Callable[[str, bool], ForgetReport]) -> ForgetReport:
    """`erase(name, missing_ok)` for `name`, then for each of its versions, in one report;
    a base that is not indexed itself is no error while a version of it is. Then the family's
    vector ledger keeps only what its collections still hold."""
    family = family_of(store.views, name)  # before its catalog record is gone
    versions = versions_of_base(store.catalog.version_settings(), name)
    report = erase(name, bool(versions))
    for version in versions:
        report.add(erase(version, True))
    prune_ledger(store.views, family)
    return report


def forget_repository_sync(store, name: str) -> ForgetReport:
    """Erase a repository: every physical collection (Chroma + BM25) and its catalog rows,
    and so every version of it (`hetriever.core.versions`): erasing hugo-docs leaves no
    page of hugo-docs behind, whatever version it was indexed at."""
    return _with_versions(store, name, lambda n, ok: _forget_one(store, n, missing_ok=ok))


def _forget_one(store, name: str, *, missing_ok: bool) -> ForgetReport:
    from hetriever.store.catalog_records import split_physical

    report = ForgetReport(repository=name, file=None)
    known = {c.name for c in store.catalog.collections(name)}
    # Collections the catalog lost track of (e.g. a crash mid-migration) go too.
    known |= {c for c in store.chroma.collection_names() if (split_physical(c) or ("",))[0] == name}
    if not known and store.catalog.repository(name) is None:
        if missing_ok:
            return report
        raise RepositoryNotFoundError(
            f"repository {name!r} is not indexed",
            hint="`hetriever status` lists the indexed repositories",
        )
    # Counted first: dropping a collection removes its file rows from the catalog too.
    files = sum(len(store.catalog.files(physical)) for physical in known)
    for physical in sorted(known):
        report.bm25_rows += store.views.bm25_physical(physical).count()
        report.chunks += store.writes.drop_physical(name, physical)
        report.collections.append(physical)
    report.catalog_rows = store.catalog.drop_repository(name)
    report.catalog_rows["files"] += files
    store.replica.publish(name)  # gone from the manifest: followers drop their copies
    log.info(
        "repository_forgotten",
        repository=name,
        chunks=report.chunks,
        collections=report.collections,
    )
    return report


def forget_file_sync(store, name: str, path: str) -> ForgetReport:
    """Erase one file of a repository from every generation, soft-deleted chunks included,
    and from every version of the repository."""
    return _with_versions(
        store, name, lambda n, ok: _forget_file_one(store, n, path, missing_ok=ok)
    )


def _forget_file_one(store, name: str, path: str, *, missing_ok: bool) -> ForgetReport:
    report = ForgetReport(repository=name, file=path)
    collections = store.catalog.collections(name)
    if not collections:
        if missing_ok:
            return report
        raise RepositoryNotFoundError(
            f"repository {name!r} is not indexed",
            hint="`hetriever status` lists the indexed repositories",
        )
    for record in collections:
        pinned = store.pinned(name, record.name)
        index = pinned.bm25(name)
        before = index.count()
        report.chunks += pinned.writes.delete_file(name, path)
        report.bm25_rows += before - index.count()
        report.catalog_rows["files"] = report.catalog_rows.get(
            "files", 0
        ) + store.catalog.remove_files(record.name, [path])
        report.collections.append(record.name)
    store.replica.publish(name, [path])
    log.info("file_forgotten", repository=name, path=path, chunks=report.chunks)
    return report


def check_forget_file(file: str | None) -> None:
    """An empty file is a mistake, not "no file": that would erase everything."""
    if file is not None and not file.strip():
        raise UserError(
            "the file to forget is empty",
            hint="give a repository-relative path, or leave out --file to "
            "forget the whole repository",
        )


async def forget(store, repository: str, file: str | None = None) -> ForgetReport:
    """Erase `repository`, or only its `file` when one is given."""
    check_forget_file(file)
    if file is not None:
        return await asyncio.to_thread(forget_file_sync, store, repository, file)
    return await asyncio.to_thread(forget_repository_sync, store, repository)


def needs_migration(store, repository: str) -> bool:
    physical = store.physical_name(repository)
    record = store.catalog.collection(physical) if physical else None
    return record is not None and record.fingerprint != store.fingerprint()


async def migrate_repository(
    repo: Repository, store, settings: Settings, *, force: bool = False
) -> MigrateReport:
    """Rebuild `repo` into a new generation with the store's settings, then switch and drop.

    `store` must be configured with the *new* settings (model, chunking). Without `force`,
    a repository whose active collection already matches them is left alone. Holds the
    repository's run lock throughout: no ingest writes the old generation while the new one
    is built, and a `building` generation found under it is abandoned, so it is dropped.
    """
    from hetriever.index.indexing import run_lock

    check_usable(repo)  # before a generation is allocated for a repository that cannot be read
    with run_lock(settings, repo.name):
        await drop_abandoned_builds(store, repo.name)
        return await _migrate(repo, store, settings, force)


async def _migrate(repo: Repository, store, settings: Settings, force: bool) -> MigrateReport:
    from hetriever.index.indexing import index_holding_lock

    catalog = store.catalog
    old = catalog.active(repo.name)
    if old is not None and not force and not needs_migration(store, repo.name):
        return MigrateReport(repo.name, old, old, migrated=False, reason="up to date")
    new = catalog.allocate(repo.name, store.fingerprint(), activate=old is None)
    builder = store.pinned(repo.name, new)
    log.info(
        "migration_started", repository=repo.name, old=old, new=new, fingerprint=store.fingerprint()
    )
    try:
        result = await index_holding_lock(repo, builder, settings, force_full=True)
    except BaseException:
        # The old collection stays active; the half-built one is dropped.
        if old is not None:
            await asyncio.to_thread(store.writes.drop_physical, repo.name, new)
        raise
    if not result.completed:
        if old is not None:
            await asyncio.to_thread(store.writes.drop_physical, repo.name, new)
        raise IndexingError(
            f"{repo.name}: the rebuild into {new} did not complete "
            f"({len(result.failed)} file(s) failed); searches still use {old}",
            hint="fix the failing files (see the log) and run migrate again",
        )
    report = MigrateReport(repo.name, old, new, migrated=True, index=result)
    if old is not None and old != new:
        catalog.switch(repo.name, new)
        await asyncio.to_thread(store.replica.publish, repo.name)
        faults.check("migration_switched", repo.name)
        report.dropped_chunks = await asyncio.to_thread(store.writes.drop_physical, repo.name, old)
    log.info(
        "migration_finished",
        repository=repo.name,
        old=old,
        new=new,
        chunks=result.chunks_written,
        dropped=report.dropped_chunks,
    )
    return report
