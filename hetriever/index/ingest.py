"""One ingest: the selected repositories, one after another, each fetched (when asked),
indexed and released, each with its outcome. The CLI runs it in this process; the Prefect
flow passes a per-repository step that runs `index_one` as a subflow (`flows/ingest.py`).

The error policy is one for both engines: a repository that fails (a bad remote, a broken
page, an unreadable checkout) fails alone and the others run; a full or read-only disk
(`StorageError`) stops the run, and every repository after it gets an outcome that says it
was not attempted and why (docs/lifecycle.md, "One ingest, two engines"). Nothing is
recorded as complete that was not: the failing repository's run is closed as failed, the
rest are not touched.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from hetriever.core.config import Settings
from hetriever.core.errors import HetrieverError, SourceError
from hetriever.core.logs import get_logger
from hetriever.core.models import IndexResult
from hetriever.core.redact import redact_text
from hetriever.core.storage import StorageError
from hetriever.core.versions import version_from_settings
from hetriever.discover.fetch import (
    accept_moved_back,
    check_out,
    fetch_target,
    followed_branch,
    moves_back,
    on_followed_branch,
)
from hetriever.discover.repositories import Repository, check_usable, with_versions
from hetriever.discover.upstream import Upstream, upstream
from hetriever.discover.versions import resolve_version
from hetriever.index.file_retry import failed_files_error
from hetriever.index.indexing import FileMapper, index_repository, map_in_process
from hetriever.index.progress import ProgressSnapshot
from hetriever.index.release import release_repository, tidy_vectors
from hetriever.index.run_record import last_indexed
from hetriever.index.vanished import drop_vanished_version, vanished_versions, was_indexed
from hetriever.store.store_types import IndexingStore

log = get_logger(__name__)

NOT_ATTEMPTED = "not attempted: "  # the outcome's error for a repository a full disk skipped


@dataclass
class RepositoryOutcome:
    """What one repository's part of an ingest came to; `to_dict` is the shape the CLI's
    JSON, the flow's summary and its artifact show."""

    repository: str
    ok: bool
    result: IndexResult | None = None  # the run's counts, when it got to run
    upstream: Upstream | None = None  # what waits upstream once the run is done
    error: str = ""  # why it failed, without credentials
    refused_commit: str = ""  # a fetched commit that moves the index back
    indexed_commit: str = ""  # ... and the commit the index stays at
    hint: str = ""  # ... and the command that accepts it
    run_id: str | None = None  # the flow's run of this repository
    # the disk is full or read-only: the run stops (not in to_dict; the CLI raises it)
    storage: StorageError | None = field(default=None, compare=False, repr=False)

    @property
    def mode(self) -> str:
        return "refused" if self.refused_commit else self.result.mode if self.result else ""

    def to_dict(self) -> dict[str, Any]:
        if self.refused_commit:
            return {
                "repository": self.repository,
                "ok": self.ok,
                "mode": "refused",
                "new_commit": self.indexed_commit,
                "refused_commit": self.refused_commit,
                "hint": self.hint,
            }
        out: dict[str, Any] = {"repository": self.repository, "ok": self.ok}
        if self.result is not None:
            out.update(self.result.to_dict())
        if self.upstream is not None:
            out.update(self.upstream.to_dict())
        if self.error:
            out["error"] = self.error
        if self.run_id is not None:
            out["run_id"] = self.run_id
        return out


def failed(repository: str, exc: BaseException, store: IndexingStore | None) -> RepositoryOutcome:
    """The outcome of a repository whose fetch or run raised `exc` (logged here); `store`:
    the index `exc` may have met a full or read-only disk of (None for a fetch, which
    writes into the checkout only)."""
    storage = store.chroma.storage_problem(exc) if store is not None else None
    if storage is not None:
        log.error("repository_failed", repository=repository, error=str(storage))
        return RepositoryOutcome(
            repository, False, error=redact_text(str(storage)), storage=storage
        )
    if isinstance(exc, (HetrieverError, OSError)):
        error = str(exc)
        log.error("repository_failed", repository=repository, error=redact_text(error))
    else:  # not a known condition: keep the traceback in the log
        error = f"{type(exc).__name__}: {exc}"
        log.exception("repository_failed", repository=repository, error=redact_text(error))
    # A git error names its remote: never with the remote's credentials.
    return RepositoryOutcome(repository, False, error=redact_text(error))


def not_attempted(repository: str, storage: StorageError) -> RepositoryOutcome:
    return RepositoryOutcome(
        repository, False, error=NOT_ATTEMPTED + redact_text(str(storage)), storage=storage
    )


async def index_one(
    repo: Repository,
    store: IndexingStore,
    settings: Settings,
    *,
    force_full: bool = False,
    map_files: FileMapper = map_in_process,
    on_progress: Callable[[ProgressSnapshot], None] | None = None,
    release: Callable[[], None] | None = None,
) -> RepositoryOutcome:
    """Index one repository and release its working set; never raises for a failure of its
    own (`failed`), only for Ctrl-C, SIGTERM or a cancelled run. `release`: what else the
    caller lets go of (a cluster's store)."""

    def let_go() -> None:
        if release is not None:
            release()
        release_repository(store, repo.name)

    # One repository's working set at a time; not on Ctrl-C or SIGTERM (they pass through
    # here): the run is still finishing the window under way, and releasing reopens Chroma.
    try:
        result = await index_repository(
            repo,
            store,
            settings,
            force_full=force_full,
            map_files=map_files,
            on_progress=on_progress,
        )
    except Exception as exc:  # one failing repository does not stop the others
        let_go()
        return failed(repo.name, exc, store)
    let_go()
    if result.completed and result.mode != "noop":
        tidy_vectors(store, repo.name)
    # What waits upstream once this run is done (as of the last fetch): against the commit
    # the index holds now, the new one only if it was recorded
    record = None if result.completed else store.catalog.repository(repo.name)
    held = result.new_commit if result.completed else (record.last_commit if record else "")
    waiting = await asyncio.to_thread(upstream, repo, held or "")
    return RepositoryOutcome(
        repo.name,
        result.completed,
        result,
        waiting,
        error="" if result.completed else failed_files_error(result.failed),
    )


async def fetch_step(
    repo: Repository, store: IndexingStore, settings: Settings, ref: str | None
) -> RepositoryOutcome | None:
    """Fetch `origin` and check out `ref` (default: the branch the repository follows);
    a refused outcome when that commit is an ancestor of the indexed one (the index only
    moves forward), else None and the commit is checked out."""
    sha = await asyncio.to_thread(fetch_target, repo, ref, timeout=settings.fetch_timeout)
    indexed, _ = await last_indexed(store, repo)
    if moves_back(repo, sha, indexed):  # e.g. an old push replayed
        assert indexed is not None
        hint = accept_moved_back(repo, sha)
        log.warning(
            "commit_refused",
            repository=repo.name,
            reason=f"refused commit {sha[:12]}: it is an ancestor of the indexed commit "
            f"{indexed[:12]}, and the index only moves forward ({hint})",
        )
        return RepositoryOutcome(
            repo.name, True, refused_commit=sha, indexed_commit=indexed, hint=hint
        )
    check_out(repo, sha)
    log.info("repository_fetched", repository=repo.name, commit=sha[:12])
    if ref and not on_followed_branch(repo, sha):  # e.g. a webhook's other branch
        log.warning(
            "commit_off_followed_branch",
            repository=repo.name,
            reason=f"commit {sha[:12]} is not on {followed_branch(repo)}, the branch "
            "scheduled runs check out: the next scheduled run indexes that "
            "branch again (set the submodule's `branch` in .gitmodules to the "
            "branch the webhook route names)",
        )
    return None


IndexStep = Callable[[Repository], Awaitable[RepositoryOutcome]]


async def ingest_repositories(
    repos: list[Repository],
    store: IndexingStore,
    settings: Settings,
    *,
    force_full: bool = False,
    fetch: bool = False,
    ref: str | None = None,
    index_step: IndexStep | None = None,
    progress_for: Callable[[Repository], Callable[[ProgressSnapshot], None]] | None = None,
) -> list[RepositoryOutcome]:
    """Bring each of `repos` (discovered by the caller, once) to its checked-out commit, or
    with `fetch` to `ref` fetched first; one outcome per repository, in order.

    `index_step(repo)` indexes one repository (default: `index_one` in this process, with
    `progress_for(repo)` as its progress callback); the flow passes one that runs it as a
    subflow. A step's exception is that repository's failure, as `index_one`'s own are.
    """

    def in_process(repo: Repository) -> Awaitable[RepositoryOutcome]:
        return index_one(
            repo,
            store,
            settings,
            force_full=force_full,
            on_progress=progress_for(repo) if progress_for else None,
        )

    step = index_step or in_process
    outcomes: list[RepositoryOutcome] = []
    full: StorageError | None = None
    pending = list(repos)
    while pending:
        repo = pending.pop(0)
        if full is not None:  # the disk that stopped the run holds every repository's index
            outcomes.append(not_attempted(repo.name, full))
            continue
        try:
            check_usable(repo)  # git would run in its placeholder path, and say less
            if repo.version is not None:
                # Never fetched or checked out: its ref is resolved after the base's fetch
                # (a base sorts before its versions), so a moved branch is indexed anew.
                try:
                    repo, refused = await asyncio.to_thread(resolve_version, repo), None
                except SourceError as exc:
                    if not was_indexed(store, repo):  # never named a commit: a failure
                        raise
                    gone = await drop_vanished_version(repo, store, settings, str(exc))
                    refused = RepositoryOutcome(repo.name, True, gone)
            else:
                refused = await fetch_step(repo, store, settings, ref) if fetch else None
                if fetch and refused is None:  # a tag the fetch brought in is followed now
                    pending += fetched_versions(repo, settings, repos, store)
                # versions no longer listed (a tag deleted) whose ref is gone: dropped
                pending += vanished_versions(repo, store, [*repos, *pending])
        except Exception as exc:
            outcome = failed(repo.name, exc, None)
        else:
            try:
                outcome = refused or await step(repo)
            except Exception as exc:
                outcome = failed(repo.name, exc, store)
        outcomes.append(outcome)
        full = outcome.storage
    return outcomes


def fetched_versions(
    base: Repository, settings: Settings, selected: list[Repository], store: IndexingStore
) -> list[Repository]:
    """The versions of `base` its settings follow that appear only after its fetch (a tag
    matching `tags` that the fetch brought in): found with the repositories, before the
    fetch, they would wait for the next run. A run that indexes `base` indexes its versions
    (`select_repositories`); a name that another repository's index holds is left alone."""
    spec = settings.versions.get(base.name)
    if spec is None:
        return []
    known = {r.name for r in selected}
    fresh = []
    for repo in with_versions([base], {base.name: spec}):
        if repo.version is None or repo.name in known:
            continue
        record = store.catalog.repository(repo.name)
        owner = version_from_settings(record.settings) if record else None
        if record is not None and (owner is None or owner.base != base.name):
            log.error("version_name_taken", repository=repo.name, base=base.name)
            continue
        fresh.append(repo)
    return fresh


def summary_of(outcomes: list[RepositoryOutcome]) -> dict[str, Any]:
    """The run's summary: every outcome as a dict, with how many are ok and failed."""
    rows = [o.to_dict() for o in outcomes]
    return {
        "repositories": rows,
        "ok": sum(o.ok for o in outcomes),
        "failed": sum(not o.ok for o in outcomes),
    }


def with_run(outcome: RepositoryOutcome, run_id: str) -> RepositoryOutcome:
    return dataclasses.replace(outcome, run_id=run_id)
