"""The incremental indexing algorithm: one place turns a git change set into writes and deletes.

Modes (named, as in LangChain's indexing API):
- ``noop``: the repository's commit is the one last indexed; nothing happens.
- ``incremental``: only files changed between the last indexed commit and the new one are
  processed; deleted files and the old side of renames lose their chunks.
- ``full``: every content file is processed and files no longer in the tree lose their chunks.
  Unchanged chunks keep their ids, so the store reuses them without re-embedding.

Crash safety: the collection's metadata says ``index_status: indexing`` while a run writes and
records the new ``commit_hash`` only after every file is stored.

The catalog (`hetriever.catalog`) follows every file through DISCOVERED -> PROCESSED ->
INDEXED / SKIPPED / FAILED, records each run, and keeps the exact-match title index. Deleted
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
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import PurePosixPath
from typing import AsyncIterator, Callable, Iterable

from hetriever import faults
from hetriever.access import declared_level
from hetriever.catalog import DISCOVERED, FAILED, INDEXED, PROCESSED, SKIPPED, title_keys
from hetriever.chunk import chunk_page, display_chunk, page_record, page_summary_lines
from hetriever.config import Settings
from hetriever.errors import EmbeddingError, IndexingError
from hetriever.discover import (
    SkipFile,
    site_at,
    compute_change_set,
    list_content_files,
    read_content_file,
    read_content_files,
)
from hetriever.logs import get_logger
from hetriever.models import (
    ChangeKind,
    ChangeSet,
    Chunk,
    FileChange,
    IndexResult,
    Repository,
    Block,
    SkippedFile,
)
from hetriever.parse import parse_page, skip_reason
from hetriever.replica import publish_sync
from hetriever.clean import clean_page
from hetriever.tokenizer import load_token_counter

log = get_logger(__name__)

STATUS_KEY = "index_status"
STATUS_INDEXING = "indexing"
STATUS_COMPLETE = "complete"


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


# --- per-file work -------------------------------------------------------------------


@dataclass
class FileOutcome:
    """What processing one file produced: chunks to store, or why it was skipped."""

    path: str
    chunks: list[Chunk] = field(default_factory=list)
    skipped: SkippedFile | None = None
    lines: int = 0
    # Set when the per-file step itself gave up (e.g. a task out of retries): the file keeps
    # its old chunks, is filed under IndexResult.failed, and the commit is not recorded.
    failed: str | None = None


def is_snippet_path(path: str, content_dir: str) -> bool:
    """Files under a `_`-prefixed directory of the content dir are snippets, not pages."""
    parts = PurePosixPath(path).parts
    base = len(PurePosixPath(content_dir).parts)
    return any(part.startswith("_") for part in parts[base:-1])


class IncludeResolver:
    """Resolves `{{% include "x" %}}` and path-named partials to snippet files at one commit.

    Hugo sites look snippets up in several ways: an absolute path under the content dir
    (`/_common/x.md`), a path relative to the content dir, or a name looked up in `_includes/`
    folders from the page's directory upwards (Docsy sites). Reads are cached per run.
    """

    def __init__(self, repo: Repository, commit: str, settings: Settings) -> None:
        self.repo = repo
        self.commit = commit
        self.settings = settings
        self.content_root = PurePosixPath(repo.content_dir)
        self._languages = ["en"]
        self._cache: dict[str, str | None] = {}

    def for_page(self, page_path: str) -> Callable[[str], str | None]:
        return lambda name: self.resolve(name, page_path)

    def candidates(self, name: str, page_path: str) -> Iterable[str]:
        name = name.strip().strip("\"'")
        if not name:
            return
        with_ext = name if name.endswith((".md", ".markdown")) else f"{name}.md"
        roots = [self.content_root] + [self.content_root / lang for lang in self._languages]
        if self.repo.site is not None and self.repo.site.configured:
            roots += [PurePosixPath(r.source) for r in self.repo.site.roots]
        if name.startswith("/"):
            for root in roots:
                yield str(root / with_ext.lstrip("/"))
            return
        page_dir = PurePosixPath(page_path).parent
        # _includes/ folders from the page's directory up to the content root
        directory = page_dir
        while True:
            yield str(directory / "_includes" / with_ext)
            yield str(directory / with_ext)
            if directory == self.content_root or directory == directory.parent:
                break
            if not str(directory).startswith(str(self.content_root)):
                break
            directory = directory.parent
        for root in roots:
            yield str(root / with_ext)
            yield str(root / "_includes" / with_ext)

    def resolve(self, name: str, page_path: str) -> str | None:
        for candidate in self.candidates(name, page_path):
            if ".." in PurePosixPath(candidate).parts:
                continue
            if candidate not in self._cache:
                try:
                    text = read_content_file(self.repo, candidate, self.commit,
                                             max_bytes=self.settings.max_file_bytes)
                    self._cache[candidate] = parse_page(
                        self.repo.name, candidate, text, content_dir=self.repo.content_dir
                    ).body
                except SkipFile:
                    self._cache[candidate] = None
            if self._cache[candidate] is not None:
                return self._cache[candidate]
        return None


@lru_cache(maxsize=4)
def _counter(model: str, model_dir: str | None):
    from pathlib import Path

    return load_token_counter(model, Path(model_dir) if model_dir else None)


def token_counter(settings: Settings):
    return _counter(settings.embedding_model, str(settings.model_dir) if settings.model_dir else None)


def page_extras(page, access: str) -> dict:
    """Chunk metadata beyond the chunker's own: the access level, and the linkTitle and
    aliases the exact-match index (and result display) use."""
    extras: dict = {"access_level": access}
    for key in ("linkTitle", "aliases"):
        value = page.front_matter.get(key)
        if value not in (None, "", []):
            extras[key] = value
    return extras


def process_text(repo: Repository, path: str, text: str, settings: Settings, *,
                 include_resolver: Callable[[str], str | None] | None = None) -> FileOutcome:
    """parse -> skip rules -> clean -> chunk for one file's text."""
    lines = text.count("\n") + 1
    if is_snippet_path(path, repo.content_dir):
        return FileOutcome(path, skipped=SkippedFile(path, "snippet (not a page)"), lines=lines)
    page = parse_page(repo.name, path, text, content_dir=repo.content_dir, site=repo.site)
    reason = skip_reason(page, include_drafts=settings.include_drafts)
    if reason:
        return FileOutcome(path, skipped=SkippedFile(path, reason), lines=lines)
    blocks = clean_page(page.body, include_resolver=include_resolver, params=page.params,
                        path=path)
    access = settings.access_levels.get(repo.name, "PUBLIC").upper()
    if settings.page_record == "prefix" and page_summary_lines(page):
        blocks = [Block("paragraph", "\n".join(page_summary_lines(page))), *blocks]
    chunks = chunk_page(
        page,
        blocks,
        counter=token_counter(settings),
        max_tokens=settings.chunk_tokens,
        min_tokens=settings.min_chunk_tokens,
        extra_metadata=page_extras(page, access),
    )
    if settings.page_record == "chunk":
        record = page_record(page, counter=token_counter(settings),
                             max_tokens=settings.chunk_tokens,
                             extra_metadata=page_extras(page, access))
        chunks = [record, *chunks] if record is not None else chunks
    if not chunks:
        return FileOutcome(path, skipped=SkippedFile(path, "empty body"), lines=lines)
    return FileOutcome(path, chunks=chunks, lines=lines)


def process_file(repo: Repository, path: str, commit: str, settings: Settings, *,
                 resolver: IncludeResolver | None = None,
                 processed_at: str | None = None,
                 text: str | SkipFile | None = None) -> FileOutcome:
    """Turn one file at `commit` into chunks; `text` is its content when already read
    (batch reads are several times cheaper than one git process per file), else it is read.

    Bad content never raises (it comes back as a skip); transient failures (I/O, git) do, so
    the caller can retry them. `processed_at` is accepted for older callers and unused: chunks
    carry no run time (it would rewrite every unchanged chunk on every run).
    """
    faults.check("process_file", path)
    try:
        if text is None:
            text = read_content_file(repo, path, commit, max_bytes=settings.max_file_bytes)
        elif isinstance(text, SkipFile):
            raise text
    except SkipFile as skip:
        log.warning("file_skipped", repository=repo.name, path=path, reason=skip.reason)
        return FileOutcome(path, skipped=SkippedFile(path, skip.reason))
    resolver = resolver or IncludeResolver(repo, commit, settings)
    return safe_process_text(repo, path, text, settings, resolver=resolver)


def safe_process_text(repo: Repository, path: str, text: str, settings: Settings, *,
                      resolver: IncludeResolver, processed_at: str | None = None) -> FileOutcome:
    """`process_text` that turns any error into a skip; `processed_at` is unused (see
    `process_file`)."""
    try:
        return process_text(repo, path, text, settings, include_resolver=resolver.for_page(path))
    except Exception as exc:  # a bad file is logged and skipped; it never stops the run
        log.error("file_failed", repository=repo.name, path=path,
                  error=f"{type(exc).__name__}: {exc}")
        return FileOutcome(path, skipped=SkippedFile(path, f"error: {type(exc).__name__}: {exc}"))


# --- planning ------------------------------------------------------------------------


def expand_snippet_dependents(repo: Repository, change_set: ChangeSet) -> ChangeSet:
    """Pages that include a changed snippet must be re-indexed too (their text changed)."""
    if change_set.mode != "incremental":
        return change_set
    snippets = {
        PurePosixPath(p).stem
        for c in change_set.changes
        for p in (c.path, c.old_path)
        if p and is_snippet_path(p, repo.content_dir)
    }
    if not snippets:
        return change_set
    already = {c.path for c in change_set.changes}
    candidates = [p for p in list_content_files(repo, change_set.new_commit)
                  if p not in already and not is_snippet_path(p, repo.content_dir)]
    added: list[FileChange] = []
    for path, text in read_content_files(repo, candidates, change_set.new_commit,
                                         max_bytes=10**9):
        if isinstance(text, SkipFile):
            continue
        if ("{{%" in text or "{{<" in text) and any(name in text for name in snippets):
            added.append(FileChange(ChangeKind.MODIFIED, path))
    if added:
        log.info("snippet_dependents", repository=repo.name, snippets=sorted(snippets),
                 pages=len(added))
    change_set.changes.extend(added)
    change_set.include_dependents.extend(c.path for c in added)
    return change_set


def plan(repo: Repository, last_commit: str | None, last_status: str | None, *,
         force_full: bool = False) -> ChangeSet:
    """The change set that brings the index from `last_commit` to the checked-out commit."""
    unfinished = last_status == STATUS_INDEXING
    if unfinished:
        log.warning("previous_run_unfinished", repository=repo.name,
                    action="reconciling with a full pass")
    change_set = compute_change_set(repo, last_commit, force_full=force_full or unfinished)
    return expand_snippet_dependents(repo, change_set)


# --- the whole run, in-process ---------------------------------------------------------


def _count_changes(result: IndexResult, change_set: ChangeSet) -> None:
    counts = change_set.counts()
    result.files_added = counts["added"]
    result.files_include_dependent = len(change_set.include_dependents)
    result.files_modified = counts["modified"] - result.files_include_dependent
    result.files_deleted = counts["deleted"]
    result.files_renamed = counts["renamed"]


def blob_ids(repo: Repository, commit: str) -> dict[str, str]:
    """path -> git blob id of the content files at `commit` (one `git ls-tree`)."""
    from hetriever.discover import _tree_entries

    try:
        return {path: obj for path, (_, kind, obj) in _tree_entries(repo, commit).items()
                if kind == "blob"}
    except Exception as exc:  # the catalog's blob column is informative; never fail a run on it
        log.warning("blob_ids_failed", repository=repo.name, error=str(exc))
        return {}


def check_schema(store, repo: Repository) -> None:
    """Refuse to write chunks of another chunking or model into an existing collection."""
    physical = store.physical_name(repo.name)
    record = store.catalog.collection(physical) if physical else None
    if record is not None and record.fingerprint != store.fingerprint():
        raise IndexingError(
            f"{repo.name}: collection {physical} was built with {record.fingerprint}, the "
            f"settings now ask for {store.fingerprint()}",
            hint=f"run `hetriever migrate -r {repo.name}` to build the new version beside the "
                 "old one and switch searches over when it is complete")


async def begin_run(store, repo: Repository, change_set: ChangeSet) -> None:
    await store.ensure_collection(repo.name)
    await store.update_collection_metadata(repo.name, **{STATUS_KEY: STATUS_INDEXING,
                                                         "indexing_commit": change_set.new_commit})
    catalog, physical = store.catalog, store.physical_name(repo.name)
    settings = store.settings
    catalog.upsert_repository(
        repo.name, url=repo.url, access_level=declared_level(settings, repo.name),
        settings={"embedding_model": settings.embedding_model,
                  "chunk_tokens": settings.chunk_tokens, "content_dir": repo.content_dir,
                  "retention_days": settings.retention_days,
                  # default first: what a search without a language keeps to
                  "languages": list(repo.site.languages) if repo.site else []})
    catalog.start_run(repo.name, physical, mode=change_set.mode, old_commit=change_set.old_commit,
                      new_commit=change_set.new_commit)
    paths = change_set.paths_to_index()
    catalog.set_files(physical, repo.name, paths, DISCOVERED, commit=change_set.new_commit,
                      blobs=blob_ids(repo, change_set.new_commit) if paths else {})
    for skipped in change_set.skipped:
        catalog.set_files(physical, repo.name, [skipped.path], SKIPPED, reason=skipped.reason,
                          commit=change_set.new_commit)


async def apply_outcomes(store, repo: Repository, outcomes: list[FileOutcome],
                         result: IndexResult) -> None:
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
    catalog.set_files(physical, repo.name, [o.path for o in outcomes if o.chunks], PROCESSED,
                      chunk_counts={o.path: len(o.chunks) for o in outcomes})
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
    catalog.set_files(physical, repo.name, [o.path for o in stored if o.chunks], INDEXED,
                      chunk_counts={o.path: len(o.chunks) for o in stored})
    faults.check("catalog_files_updated", repo.name)
    for outcome in stored:
        if outcome.skipped is not None:
            # "error: ..." comes from a file that broke the pipeline; the rest are skip rules.
            state = FAILED if outcome.skipped.reason.startswith("error:") else SKIPPED
            catalog.set_files(physical, repo.name, [outcome.path], state,
                              reason=outcome.skipped.reason)
            catalog.set_titles(physical, outcome.path, "", [])
        elif outcome.chunks:
            first = display_chunk(outcome.chunks)
            catalog.set_titles(physical, outcome.path, first.id, title_keys(first.metadata))


async def _write_outcomes(store, repo: Repository, outcomes: list[FileOutcome],
                          result: IndexResult) -> None:
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
    result.chunks_deleted += write.deleted
    result.embedding_seconds += write.embedding_seconds


class OutcomeWriter:
    """Gathers file outcomes and writes them in windows of about `settings.write_window` chunks."""

    def __init__(self, store, repo: Repository, result: IndexResult,
                 progress: RunProgress | None = None):
        self.store, self.repo, self.result = store, repo, result
        self.window = store.settings.write_window
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


@contextmanager
def run_lock(settings: Settings, repository: str, *, timeout: float | None = None):
    """Held for a whole ingest run of one repository: a second run waits, then exits clearly."""
    from hetriever.store import file_lock

    path = settings.resolved_state_dir / "locks" / f"{repository}.run.lock"
    wait = settings.run_lock_timeout if timeout is None else timeout
    with file_lock(path, timeout=wait, what=f"an ingest run of {repository!r}"):
        yield


async def remove_paths(store, repo: Repository, paths: Iterable[str], result: IndexResult) -> None:
    """Deleted files: hard delete, or soft delete (kept, hidden) when retention_days > 0."""
    paths = list(paths)
    catalog, physical = store.catalog, store.physical_name(repo.name)
    if store.settings.retention_days > 0:
        stamp = now_iso()
        for path in paths:
            result.chunks_deleted += await store.soft_delete_file(repo.name, path, stamp)
        if physical:
            catalog.mark_deleted(physical, paths, stamp)
        return
    for path in paths:
        result.chunks_deleted += await store.delete_file(repo.name, path)
    if paths:
        faults.check("removed_files_deleted", repo.name)
    if physical:
        catalog.remove_files(physical, paths)


def check_mass_delete(repo: Repository, doomed: list[str], counts: dict[str, int],
                      settings: Settings) -> None:
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
             "`hetriever ingest --full --allow-mass-delete` (or set allow_mass_delete)")


async def finish_run(store, repo: Repository, change_set: ChangeSet, result: IndexResult) -> None:
    """Record the new commit, only now that every file is stored."""
    total_chunks = await store.count(repo.name, live=True)
    files = await store.list_files(repo.name)
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
    close_run(store, repo, result, "ok", commit=change_set.new_commit)
    # For searchers elsewhere: after an incremental run, only these files' chunks changed.
    changed = None if change_set.mode == "full" else \
        change_set.paths_to_index() + change_set.paths_to_delete()
    await asyncio.to_thread(publish_sync, store, repo.name, changed)


def close_run(store, repo: Repository, result: IndexResult, outcome: str, *,
              commit: str | None = None, error: str = "") -> None:
    """Close the repository's open catalog run with its outcome and counts."""
    catalog, physical = store.catalog, store.physical_name(repo.name)
    runs = [r for r in catalog.runs(repo.name, limit=5)
            if r["collection"] == physical and r["outcome"] == "running"]
    if not runs:
        return
    counts = {k: v for k, v in result.to_dict().items()
              if isinstance(v, (int, float)) and not isinstance(v, bool)}
    counts["files_failed"] = len(result.failed)
    catalog.finish_run(runs[0]["id"], outcome=outcome, counts=counts, commit=commit, error=error)


async def last_indexed(store, repo: Repository) -> tuple[str | None, str | None]:
    """(commit_hash, index_status) recorded for the repository, or (None, None)."""
    meta = await store.get_collection_metadata(repo.name)
    if not meta:
        return None, None
    return meta.get("commit_hash") or None, meta.get(STATUS_KEY) or None


# --- the whole run; the per-file step is pluggable ---------------------------------------


@dataclass
class FileWork:
    """What every file of one run is processed with; `process` is the per-file step."""

    repo: Repository
    commit: str
    settings: Settings
    resolver: IncludeResolver
    processed_at: str

    def process(self, path: str, text: str | SkipFile | None) -> FileOutcome:
        return process_file(self.repo, path, self.commit, self.settings, resolver=self.resolver,
                            processed_at=self.processed_at, text=text)


# Turns (path, text) pairs into outcomes, in any order. In-process it is a loop; the Prefect
# flow passes one that submits a task per file (tasks/process.py).
FileMapper = Callable[[Iterable[tuple[str, "str | SkipFile"]], FileWork],
                      AsyncIterator[FileOutcome]]


async def map_in_process(files: Iterable[tuple[str, str | SkipFile]],
                         work: FileWork) -> AsyncIterator[FileOutcome]:
    for path, text in files:
        yield work.process(path, text)


class RunProgress:
    """Counts files as they come back and logs each written window with a rate and an ETA."""

    def __init__(self, repository: str, total_files: int,
                 on_file: Callable[[int, int], None] | None = None) -> None:
        self.repository, self.total, self.on_file = repository, total_files, on_file
        self.done = 0
        self.started = time.perf_counter()

    def file_done(self) -> None:
        self.done += 1
        if self.on_file:
            self.on_file(self.done, self.total)

    def window_written(self, files: int, result: IndexResult) -> None:
        elapsed = max(time.perf_counter() - self.started, 1e-6)
        chunks = result.chunks_written + result.chunks_reused
        remaining = self.total - self.done
        log.info("index_progress", repository=self.repository,
                 files=f"{self.done}/{self.total}", chunks_stored=chunks,
                 chunks_embedded=result.chunks_written,
                 chunks_per_s=round(chunks / elapsed, 1),
                 eta_s=round(elapsed / max(self.done, 1) * remaining, 1))


async def index_repository(repo: Repository, store, settings: Settings, *,
                           force_full: bool = False,
                           progress: Callable[[int, int], None] | None = None,
                           map_files: FileMapper = map_in_process) -> IndexResult:
    """Bring one repository's collection to its checked-out commit. Returns the counts.

    Holds the repository's run lock from planning to the recorded commit; `map_files` runs
    the per-file step (in-process by default); `progress(done, total)` is called per file.
    """
    started = time.perf_counter()
    with run_lock(settings, repo.name):
        last_commit, last_status = await last_indexed(store, repo)
        change_set = plan(repo, last_commit, last_status, force_full=force_full)
        result = IndexResult(repository=repo.name, mode=change_set.mode, old_commit=last_commit,
                             new_commit=change_set.new_commit, skipped=list(change_set.skipped))
        _count_changes(result, change_set)
        bound = log.bind(repository=repo.name, mode=change_set.mode,
                         old_commit=(last_commit or "")[:12],
                         new_commit=change_set.new_commit[:12])
        await heal_bm25(store, repo, settings)
        if change_set.mode == "noop":
            bound.info("index_noop")
            result.completed = True
            result.total_seconds = time.perf_counter() - started
            return result
        if change_set.dirty:
            bound.warning("uncommitted_changes_ignored")

        check_schema(store, repo)
        repo = dataclasses.replace(repo, site=site_at(repo, change_set.new_commit))
        if repo.site is not None and repo.site.configured:
            bound.info("site_config", languages=list(repo.site.languages),
                       default=repo.site.default_lang,
                       roots=[f"{r.source}:{r.lang or '*'}" for r in repo.site.roots])
        bound.info("index_started", include_dependents=len(change_set.include_dependents),
                   **change_set.counts())
        try:
            await _run(store, repo, settings, change_set, result, progress, map_files)
        except BaseException as exc:
            close_run(store, repo, result, "failed", error=f"{type(exc).__name__}: {exc}")
            raise
    result.total_seconds = time.perf_counter() - started
    bound.info("index_finished", files_indexed=result.files_indexed,
               files_skipped=result.files_skipped, files_failed=len(result.failed),
               chunks_written=result.chunks_written, chunks_reused=result.chunks_reused,
               chunks_deleted=result.chunks_deleted, seconds=round(result.total_seconds, 2))
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


async def reconcile_derived(store, repo: Repository) -> None:
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
        log.warning("derived_state_repaired", repository=repo.name, bm25_added=repair.added,
                    bm25_removed=repair.removed, catalog_rows_removed=pruned)


async def start_run(store, repo: Repository, settings: Settings, change_set: ChangeSet,
                    result: IndexResult) -> None:
    """Everything before the files are written: guards, repair, the run marked, deletes."""
    doomed = change_set.paths_to_delete()
    if doomed or change_set.mode == "full":
        counts = await store.file_chunk_counts(repo.name)
        if change_set.mode == "full":  # files indexed before, absent from the new tree
            doomed += sorted(set(counts) - set(change_set.paths_to_index()))
        check_mass_delete(repo, doomed, counts, settings)
    if change_set.mode == "full":  # chosen after an unfinished run, or asked for
        await reconcile_derived(store, repo)
    await begin_run(store, repo, change_set)
    await remove_paths(store, repo, doomed, result)


async def _run(store, repo: Repository, settings: Settings, change_set: ChangeSet,
               result: IndexResult, progress: Callable[[int, int], None] | None,
               map_files: FileMapper) -> None:
    await start_run(store, repo, settings, change_set, result)

    paths = change_set.paths_to_index()
    work = FileWork(repo, change_set.new_commit, settings,
                    IncludeResolver(repo, change_set.new_commit, settings), now_iso())
    tracker = RunProgress(repo.name, len(paths), progress)
    writer = OutcomeWriter(store, repo, result, tracker)
    # One batched git read for every file (a git process per file cost 5x the parse work).
    files = read_content_files(repo, paths, change_set.new_commit,
                               max_bytes=settings.max_file_bytes)
    async for outcome in map_files(files, work):
        await writer.add(outcome)
        tracker.file_done()
    await writer.flush()
    if result.failed:  # the commit stays unrecorded: the next run reconciles and retries
        log.error("index_incomplete", repository=repo.name, failed=len(result.failed))
        close_run(store, repo, result, "failed",
                  error=f"{len(result.failed)} file(s) could not be stored")
        return
    await finish_run(store, repo, change_set, result)
