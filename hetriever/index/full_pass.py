"""Why an ingest re-reads every file when the commit's diff names only some.

Pages depend on more than their own files: the content directory they are read from and the
site configuration (languages, content mounts, baseURL, permalinks) decide which files are
pages and at which URL each is published. When either changed since the repository's last
run, the run is a full pass: every file is read again, chunks whose text is unchanged are not
re-embedded (their metadata, such as a URL, is updated), and a pass that would delete most
of the index is refused as any full pass is.
"""

from __future__ import annotations

from hetriever.core.logs import get_logger
from hetriever.core.models import ChangeSet
from hetriever.discover.repositories import Repository
from hetriever.discover.site import Site
from hetriever.store.catalog_records import DISCOVERED, FAILED, PROCESSED, SKIPPED
from hetriever.store.store_types import IndexingStore

log = get_logger(__name__)


def _recorded(store: IndexingStore, repo: Repository, key: str) -> object:
    """The repository setting `key` its last run with a recorded commit wrote; None if none."""
    record = store.catalog.repository(repo.name)
    return record.settings.get(key) if record and record.last_commit else None


def content_dir_changed(store: IndexingStore, repo: Repository) -> bool:
    """Whether the repository was last indexed from another content directory: then the
    commit says nothing about what is indexed, so the run is a full pass (which refuses a
    content directory the commit does not have, and a mass delete)."""
    before = _recorded(store, repo, "content_dir")
    if before is None or before == repo.content_dir:
        return False
    log.warning(
        "content_dir_changed",
        repository=repo.name,
        before=before,
        now=repo.content_dir,
        action="a full pass",
    )
    return True


def site_changed(store: IndexingStore, repo: Repository, site: Site) -> bool:
    """Whether the site configuration differs from the one the last run recorded (an index
    whose runs recorded none keeps its incremental runs: the next one records it)."""
    before = _recorded(store, repo, "site")
    if not before or before == site.signature():
        return False
    log.warning(
        "site_config_changed",
        repository=repo.name,
        action="a full pass",
        reason="languages, content mounts, baseURL or permalinks may move every page",
    )
    return True


def rows_without_chunks_gone(
    store: IndexingStore, repo: Repository, change_set: ChangeSet, doomed: list[str]
) -> list[str]:
    """Catalog rows of files that hold no chunks (skipped, failed, never finished) and are
    absent from the new tree. Chroma's list, which a full pass deletes by, never names them,
    so `status` counted them (and listed a deleted file as failed) for good."""
    physical = store.physical_name(repo.name)
    if physical is None:
        return []
    present = set(change_set.paths_to_index()) | {s.path for s in change_set.skipped}
    present.update(doomed)
    return sorted(
        f.path
        for f in store.catalog.files(physical)
        if f.state in (SKIPPED, FAILED, DISCOVERED, PROCESSED) and f.path not in present
    )
