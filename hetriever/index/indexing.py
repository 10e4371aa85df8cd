"""The incremental indexing algorithm: one place turns a git change set into writes and deletes.

Modes (named, as in LangChain's indexing API):
- ``noop``: the repository's commit is the one last indexed; nothing happens.
- ``incremental``: only files changed between the last indexed commit and the new one are
  processed; deleted files and the old side of renames lose their chunks.
- ``full``: every content file is processed and files no longer in the tree lose their chunks.
  Unchanged chunks keep their ids, so the store reuses them without re-embedding.

Crash safety: the collection's index state in the catalog says ``index_status: indexing``
while a run writes and records the new ``commit_hash`` only after every file is stored.

The catalog (`hetriever.store.catalog`) follows every file through DISCOVERED -> PROCESSED ->
INDEXED / SKIPPED / FAILED (set past DISCOVERED as outcomes are stored in windows:
`hetriever.index.outcomes`), records each run, and keeps the exact-match title index. Deleted
files lose their chunks at once, or with `retention_days > 0` are soft-deleted (kept, hidden
from search) until `hetriever purge`. A run that finds a previous
run unfinished reconciles with a full pass, so a crash never leaves a partial index marked
complete.

The per-file work (`process_file`) is pure CPU over plain data, so the Prefect flow can fan it out
as tasks; `index_repository` runs the same steps in-process for the CLI and tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from hetriever.core import faults
from hetriever.core.clock import now_iso, now_utc
from hetriever.core.config import Settings
from hetriever.core.errors import IndexingError
from hetriever.core.logs import get_logger
from hetriever.core.models import ChangeSet, IndexResult
from hetriever.discover.changes import compute_change_set, site_at
from hetriever.discover.git_objects import SkipFile, read_content_files
from hetriever.discover.repositories import Repository, check_usable
from hetriever.embed import progress as embedding_progress
from hetriever.index.file_retry import retry_file
from hetriever.index.full_pass import content_dir_changed, rows_without_chunks_gone, site_changed
from hetriever.index.outcomes import OutcomeWriter
from hetriever.index.process import (
    FileOutcome,
    IncludeResolver,
    expand_snippet_dependents,
    process_file,
)
from hetriever.index.progress import ProgressSnapshot, RunProgress
from hetriever.index.publish_windows import (
    expand_publish_dependents,
    windows_checked,
    with_crossed_windows,
)
from hetriever.index.run_record import (
    STATUS_COMPLETE,
    STATUS_INDEXING,
    begin_run,
    close_run,
    finish_run,
    indexed_file_counts,
    last_indexed,
)
from hetriever.index.settle import settle_recorded_run
from hetriever.store.generations import drop_abandoned_builds
from hetriever.store.recovery import adopt_orphaned_collection
from hetriever.store.store_types import IndexingStore

log = get_logger(__name__)


# --- planning ------------------------------------------------------------------------


def plan(
    repo: Repository, last_commit: str | None, last_status: str | None, *, force_full: bool = False
) -> ChangeSet:
    """The change set that brings the index from `last_commit` to the checked-out commit."""
    unfinished = last_status == STATUS_INDEXING
    if unfinished:
        log.warning(
            "previous_run_unfinished", repository=repo.name, action="reconciling with a full pass"
        )
    change_set = compute_change_set(repo, last_commit, force_full=force_full or unfinished)
    return expand_publish_dependents(repo, expand_snippet_dependents(repo, change_set))


# --- the whole run, in-process ---------------------------------------------------------


def _count_changes(result: IndexResult, change_set: ChangeSet, timed: list[str]) -> None:
    counts = change_set.counts()
    result.files_added = counts["added"]
    result.files_include_dependent = len(change_set.include_dependents)
    result.files_republished = len(timed)
    result.files_modified = (
        counts["modified"] - result.files_include_dependent - result.files_republished
    )
    result.files_deleted = counts["deleted"]
    result.files_renamed = counts["renamed"]


def check_schema(store: IndexingStore, repo: Repository) -> None:
    """Refuse to write chunks of another chunking or model into an existing collection."""
    physical = store.physical_name(repo.name)
    record = store.catalog.collection(physical) if physical else None
    if record is not None and record.fingerprint != store.fingerprint():
        raise IndexingError(
            f"{repo.name}: collection {physical} was built with {record.fingerprint}, the "
            f"settings now ask for {store.fingerprint()}",
            hint=f"run `hetriever migrate -r {repo.name}` to build the new version beside the "
            "old one and switch searches over when it is complete",
        )


@contextmanager
def run_lock(settings: Settings, repository: str, *, timeout: float | None = None):
    """Held for a whole ingest run of one repository: a second run waits, then exits clearly."""
    from hetriever.core.locks import file_lock

    path = settings.resolved_state_dir / "locks" / f"{repository}.run.lock"
    wait = settings.run_lock_timeout if timeout is None else timeout
    with file_lock(path, timeout=wait, what=f"an ingest run of {repository!r}"):
        yield


async def remove_paths(
    store: IndexingStore,
    repo: Repository,
    paths: Iterable[str],
    result: IndexResult,
    settings: Settings,
) -> None:
    """Deleted files: hard delete, or soft delete (kept, hidden) when retention_days > 0."""
    paths = list(paths)
    catalog, physical = store.catalog, store.physical_name(repo.name)
    if settings.retention_days > 0:
        stamp = now_iso()
        for path in paths:
            result.chunks_deleted += await store.soft_delete_file(repo.name, path, stamp)
        if physical:
            catalog.mark_deleted(physical, paths, stamp)
        return
    if paths:
        result.chunks_deleted += await store.delete_files(repo.name, paths)
        faults.check("removed_files_deleted", repo.name)
    if physical:
        catalog.remove_files(physical, paths)


def check_mass_delete(
    repo: Repository, doomed: list[str], counts: dict[str, int], settings: Settings
) -> None:
    """Refuse a run that would delete more than half of the repository's chunks (`counts`:
    per file, as Chroma holds them), unless allowed: a typo must not silently wipe an index."""
    total = sum(counts.values())
    lost = sum(counts.get(path, 0) for path in doomed)
    if settings.allow_mass_delete or not total or lost * 2 <= total:
        return
    raise IndexingError(
        f"{repo.name}: this run would delete {lost} of {total} chunks ({len(doomed)} files); "
        "nothing was changed",
        hint="check content_dir and the checked-out commit; if the deletion is meant, run "
        "`hetriever ingest --full --allow-mass-delete` (or set allow_mass_delete)",
    )


# --- the whole run; the per-file step is pluggable ---------------------------------------


@dataclass
class FileWork:
    """What every file of one run is processed with; `process` is the per-file step.
    `files`: how many the run processes (0 when not known)."""

    repo: Repository
    commit: str
    settings: Settings
    resolver: IncludeResolver
    files: int = 0

    def process(self, path: str, text: str | SkipFile | None) -> FileOutcome:
        return process_file(
            self.repo, path, self.commit, self.settings, resolver=self.resolver, text=text
        )


# Turns (path, text) pairs into outcomes, in any order. In-process it is a loop; the Prefect
# flow passes one that submits a task per file (tasks/process.py).
FileMapper = Callable[
    [Iterable[tuple[str, "str | SkipFile"]], FileWork], AsyncIterator[FileOutcome]
]


async def map_in_process(
    files: Iterable[tuple[str, str | SkipFile]], work: FileWork
) -> AsyncIterator[FileOutcome]:
    """The per-file step in this process, retried as the flow's tasks are
    (`hetriever.index.file_retry`): a file out of retries is a failed outcome, not the run's."""
    for path, text in files:
        yield retry_file(work.repo.name, path, lambda: work.process(path, text))


async def index_repository(
    repo: Repository,
    store: IndexingStore,
    settings: Settings,
    *,
    force_full: bool = False,
    progress: Callable[[int, int], None] | None = None,
    map_files: FileMapper = map_in_process,
    now: datetime | None = None,
    on_progress: Callable[[ProgressSnapshot], None] | None = None,
) -> IndexResult:
    """Bring one repository's collection to its checked-out commit. Returns the counts.

    Holds the repository's run lock from planning to the recorded commit; `map_files` runs
    the per-file step (in-process by default); `progress(done, total)` is called per file,
    `on_progress(snapshot)` per file and per embedded batch (chunks, rate, ETA);
    `now` is the run's clock for publish and expiry dates (the current time by default).
    """
    check_usable(repo)  # a submodule not checked out, a bad name: this repository fails alone
    with run_lock(settings, repo.name):
        # A lost or replaced catalog names no collection while Chroma holds one: adopted,
        # so this run is a full pass against it rather than a fresh build over old chunks.
        await asyncio.to_thread(adopt_orphaned_collection, store, repo.name)
        # Writing the active generation (not a migration's pinned one): under this lock,
        # another generation left building is abandoned.
        if store.physical_name(repo.name) == store.catalog.active(repo.name):
            await drop_abandoned_builds(store, repo.name)
        return await index_holding_lock(
            repo,
            store,
            settings,
            force_full=force_full,
            progress=progress,
            map_files=map_files,
            now=now,
            on_progress=on_progress,
        )


async def index_holding_lock(
    repo: Repository,
    store: IndexingStore,
    settings: Settings,
    *,
    force_full: bool = False,
    progress: Callable[[int, int], None] | None = None,
    map_files: FileMapper = map_in_process,
    now: datetime | None = None,
    on_progress: Callable[[ProgressSnapshot], None] | None = None,
) -> IndexResult:
    """`index_repository` for a caller that holds the repository's run lock (a migration
    holds it from before it allocates its generation until the switch)."""
    started = time.perf_counter()
    now = now or now_utc()
    last_commit, last_status = await last_indexed(store, repo)
    if last_status == STATUS_COMPLETE and last_commit:
        await settle_recorded_run(store, repo, last_commit)
    change_set = plan(
        repo, last_commit, last_status, force_full=force_full or content_dir_changed(store, repo)
    )
    # Dates passed since the last run: their files join the run, even at the same commit.
    change_set, timed = with_crossed_windows(store, repo, change_set, now)
    site = site_at(repo, change_set.new_commit) if change_set.mode != "noop" else None
    if change_set.mode == "incremental" and site is not None and site_changed(store, repo, site):
        change_set, timed = plan(repo, last_commit, last_status, force_full=True), []
    result = IndexResult(
        repository=repo.name,
        mode=change_set.mode,
        old_commit=last_commit,
        new_commit=change_set.new_commit,
        skipped=list(change_set.skipped),
    )
    _count_changes(result, change_set, timed)
    bound = log.bind(
        repository=repo.name,
        mode=change_set.mode,
        old_commit=(last_commit or "")[:12],
        new_commit=change_set.new_commit[:12],
    )
    await heal_bm25(store, repo, settings)
    if change_set.mode == "noop":
        bound.info("index_noop")
        windows_checked(store, repo, now)
        result.completed = True
        result.total_seconds = time.perf_counter() - started
        return result
    if change_set.dirty:
        bound.warning("uncommitted_changes_ignored")

    check_schema(store, repo)
    repo = dataclasses.replace(repo, site=site)
    if repo.site is not None and repo.site.configured:
        bound.info(
            "site_config",
            languages=list(repo.site.languages),
            default=repo.site.default_lang,
            roots=[f"{r.source}:{r.lang or '*'}" for r in repo.site.roots],
        )
    bound.info(
        "index_started",
        include_dependents=len(change_set.include_dependents),
        **change_set.counts(),
    )
    try:
        await _run(
            store,
            repo,
            settings,
            change_set,
            result,
            progress,
            map_files,
            started,
            now,
            on_progress,
        )
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, SIGTERM (the CLI takes it
        # as Ctrl-C), a cancelled flow: stopped, not broken
        close_run(store, repo, result, "interrupted", started, error="stopped before the end")
        raise
    except BaseException as exc:
        close_run(store, repo, result, "failed", started, error=f"{type(exc).__name__}: {exc}")
        raise
    result.total_seconds = time.perf_counter() - started
    bound.info(
        "index_finished",
        files_indexed=result.files_indexed,
        files_skipped=result.files_skipped,
        files_failed=len(result.failed),
        chunks_written=result.chunks_written,
        chunks_reused=result.chunks_reused,
        chunks_borrowed=result.chunks_borrowed,
        chunks_deleted=result.chunks_deleted,
        seconds=round(result.total_seconds, 2),
    )
    return result


async def heal_bm25(store, repo: Repository, settings: Settings) -> None:
    """A BM25 index that is damaged, or missing or empty beside a filled collection, is
    rebuilt from Chroma before anything else (even when the commit is already indexed).
    The caller holds the repository's run lock."""
    problem = await asyncio.to_thread(store.bm25_problem, repo.name)
    if not problem:
        return
    log.warning("bm25_rebuild", repository=repo.name, reason=problem)
    repaired = await store.rebuild_bm25(repo.name)
    log.info("bm25_rebuilt", repository=repo.name, rows=repaired.added)


async def reconcile_derived(store: IndexingStore, repo: Repository) -> None:
    """Make BM25 and the catalog agree with Chroma, the source of truth.

    A run that died between its Chroma write and the BM25 commit or the catalog update left
    rows of chunks Chroma no longer holds (or lacks rows of chunks it does). A full pass alone
    cannot see them: it compares the new tree with what Chroma holds.
    """
    physical = store.physical_name(repo.name)
    if physical is None or await store.get_collection_info(repo.name) is None:
        return
    repair = await store.repair(repo.name)
    pruned = store.catalog.prune(physical, repair.chunk_ids, repair.files)
    if repair.changed or pruned:
        log.warning(
            "derived_state_repaired",
            repository=repo.name,
            bm25_added=repair.added,
            bm25_removed=repair.removed,
            bm25_updated=repair.updated,
            catalog_rows_removed=pruned,
        )


async def start_run(
    store: IndexingStore,
    repo: Repository,
    settings: Settings,
    change_set: ChangeSet,
    result: IndexResult,
) -> None:
    """Everything before the files are written: guards, repair, the run marked, deletes."""
    doomed = change_set.paths_to_delete()
    gone: list[str] = []
    if change_set.mode == "full":  # chosen after an unfinished run, or asked for
        # Chroma's own list: files indexed before, absent from the new tree
        counts = await store.file_chunk_counts(repo.name)
        doomed += sorted(set(counts) - set(change_set.paths_to_index()))
        check_mass_delete(repo, doomed, counts, settings)
        await reconcile_derived(store, repo)
        gone = rows_without_chunks_gone(store, repo, change_set, doomed)
    elif doomed:
        check_mass_delete(repo, doomed, await indexed_file_counts(store, repo), settings)
    await begin_run(store, repo, change_set, settings)
    await remove_paths(store, repo, doomed, result, settings)
    if gone:
        store.catalog.remove_files(store.physical_name(repo.name) or "", gone)


async def _run(
    store: IndexingStore,
    repo: Repository,
    settings: Settings,
    change_set: ChangeSet,
    result: IndexResult,
    progress: Callable[[int, int], None] | None,
    map_files: FileMapper,
    started: float,
    now: datetime,
    on_progress: Callable[[ProgressSnapshot], None] | None = None,
) -> None:
    await start_run(store, repo, settings, change_set, result)

    paths = change_set.paths_to_index()
    work = FileWork(
        repo,
        change_set.new_commit,
        settings,
        IncludeResolver(repo, change_set.new_commit, settings, now=now),
        files=len(paths),
    )
    tracker = RunProgress(repo.name, len(paths), progress, on_progress)
    writer = OutcomeWriter(store, repo, result, settings.write_window, tracker)
    # One batched git read for every file (a git process per file cost 5x the parse work).
    files = read_content_files(
        repo, paths, change_set.new_commit, max_bytes=settings.max_file_bytes
    )
    # ticks per embedded batch, and a line in the log at least every LOG_EVERY seconds
    with embedding_progress.listening(tracker.embedded), tracker.heartbeat():
        try:
            async for outcome in map_files(files, work):
                await writer.add(outcome)
                tracker.file_done(len(outcome.chunks))
        finally:
            work.resolver.close()
        await writer.flush()
    if result.failed:  # the commit stays unrecorded: the next run reconciles and retries
        log.error("index_incomplete", repository=repo.name, failed=len(result.failed))
        close_run(
            store,
            repo,
            result,
            "failed",
            started,
            error=f"{len(result.failed)} file(s) could not be stored",
        )
        return
    await finish_run(store, repo, change_set, result, started)
    windows_checked(store, repo, now)
