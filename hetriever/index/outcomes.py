"""Storing a run's file outcomes: catalog states, windowed writes (progress: `progress.py`).

Outcomes are gathered into windows of about `write_window` chunks and stored in one write each,
so embedding works on large batches and a crash loses at most one window. Every file's catalog
state follows it (PROCESSED before the write; INDEXED, SKIPPED or FAILED after); a file whose
write fails keeps its old chunks and is reported, so the run leaves its commit unrecorded.
"""

from __future__ import annotations

from hetriever.chunk.page_records import display_chunk
from hetriever.core import faults
from hetriever.core.errors import EmbeddingError
from hetriever.core.logs import get_logger
from hetriever.core.models import IndexResult, SkippedFile
from hetriever.discover.repositories import Repository
from hetriever.index.process import FileOutcome
from hetriever.index.progress import RunProgress
from hetriever.store.catalog_records import FAILED, INDEXED, PROCESSED, SKIPPED
from hetriever.store.store_types import IndexingStore

# The run's events keep the logger they were always logged under.
log = get_logger("hetriever.index.indexing")


async def apply_outcomes(
    store: IndexingStore, repo: Repository, outcomes: list[FileOutcome], result: IndexResult
) -> None:
    """Store several files' chunks in one write; a skipped or empty file loses its old chunks."""
    if not outcomes:
        return
    catalog, physical = store.catalog, store.physical_name(repo.name, create=True)
    gave_up = [o for o in outcomes if o.failed is not None]
    for outcome in gave_up:  # not written: the file keeps its old chunks
        reason = str(outcome.failed)
        result.failed.append(SkippedFile(outcome.path, reason))
        catalog.set_files(physical, repo.name, [outcome.path], FAILED, reason=reason)
    outcomes = [o for o in outcomes if o.failed is None]
    if not outcomes:
        return
    catalog.set_files(
        physical,
        repo.name,
        [o.path for o in outcomes if o.chunks],
        PROCESSED,
        chunk_counts={o.path: len(o.chunks) for o in outcomes},
    )
    for outcome in outcomes:
        if outcome.skipped is not None:
            result.skipped.append(outcome.skipped)
        faults.check("write_file", outcome.path)
    failed_before = len(result.failed)
    await _write_outcomes(store, repo, outcomes, result)
    failed = {f.path: f.reason for f in result.failed[failed_before:]}
    for path, reason in failed.items():
        catalog.set_files(physical, repo.name, [path], FAILED, reason=reason)
    stored = [o for o in outcomes if o.path not in failed]
    # Dates that may change a page's fate with no commit: the next runs look at them.
    catalog.publish_windows.set_windows(physical, {o.path: o.window for o in stored})
    catalog.set_files(
        physical,
        repo.name,
        [o.path for o in stored if o.chunks],
        INDEXED,
        chunk_counts={o.path: len(o.chunks) for o in stored},
    )
    faults.check("catalog_files_updated", repo.name)
    for outcome in stored:
        if outcome.skipped is not None:
            # "error: ..." comes from a file that broke the pipeline; the rest are skip rules.
            state = FAILED if outcome.skipped.reason.startswith("error:") else SKIPPED
            catalog.set_files(
                physical, repo.name, [outcome.path], state, reason=outcome.skipped.reason
            )
            catalog.pages.set_page(physical, outcome.path)
        elif outcome.chunks:
            first = display_chunk(outcome.chunks)
            catalog.pages.set_page(
                physical,
                outcome.path,
                first.id,
                first.metadata,
                [(c.id, c.metadata) for c in outcome.chunks],
            )


async def _write_outcomes(
    store: IndexingStore, repo: Repository, outcomes: list[FileOutcome], result: IndexResult
) -> None:
    try:
        write = await store.upsert_files(repo.name, {o.path: o.chunks for o in outcomes})
    except EmbeddingError as exc:
        # Nothing of this write was stored. Find the file(s) at fault by writing one at a time;
        # each failing file keeps its old chunks and is reported.
        if len(outcomes) > 1:
            for outcome in outcomes:
                await _write_outcomes(store, repo, [outcome], result)
            return
        log.error("file_failed", repository=repo.name, path=outcomes[0].path, error=str(exc))
        result.failed.append(SkippedFile(outcomes[0].path, f"embedding failed: {exc}"))
        return
    result.files_indexed += sum(1 for o in outcomes if o.chunks)
    result.chunks_written += write.written
    result.chunks_reused += write.reused
    result.chunks_borrowed += write.borrowed
    result.chunks_deleted += write.deleted
    result.embedding_seconds += write.embedding_seconds


class OutcomeWriter:
    """Gathers file outcomes and writes them in windows of about `window` chunks (the
    run's `settings.write_window`)."""

    def __init__(
        self,
        store: IndexingStore,
        repo: Repository,
        result: IndexResult,
        window: int,
        progress: RunProgress | None = None,
    ):
        self.store, self.repo, self.result = store, repo, result
        self.window = window
        self.pending: list[FileOutcome] = []
        self.pending_chunks = 0
        self.progress = progress

    async def add(self, outcome: FileOutcome) -> None:
        self.pending.append(outcome)
        self.pending_chunks += len(outcome.chunks)
        if self.pending_chunks >= self.window:
            await self.flush()

    async def flush(self) -> None:
        pending, self.pending, self.pending_chunks = self.pending, [], 0
        await apply_outcomes(self.store, self.repo, pending, self.result)
        if self.progress and pending:
            self.progress.window_written(len(pending), self.result)
