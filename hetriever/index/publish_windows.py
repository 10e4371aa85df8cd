"""Publish rules that change without a commit: each run re-checks the dates.

A page whose expiry date passes must leave the index, and a page whose publish date comes
must enter it, on the next run, with no commit to say so. The catalog keeps each file's
window (`hetriever.store.catalog_windows`, written as outcomes are stored) and when the windows
were last checked; every run, one with an unchanged commit included, adds to its change set
the files whose window a date crossed in between (`with_crossed_windows`), and a complete run
records its clock as the new check time (`windows_checked`). Only those files are processed
again; the rest of the index is untouched.
"""

from __future__ import annotations

import datetime as dt
import posixpath
from typing import Any

from hetriever.core.clock import utc_text
from hetriever.core.logs import get_logger
from hetriever.core.models import ChangeKind, ChangeSet, FileChange
from hetriever.discover.changes import list_content_files
from hetriever.discover.git_objects import SkipFile, read_content_files
from hetriever.discover.repositories import Repository
from hetriever.parse.page import parse_page
from hetriever.parse.publish_pages import calls_glossary
from hetriever.store.store_types import IndexingStore

log = get_logger(__name__)


def with_crossed_windows(
    store: IndexingStore, repo: Repository, change_set: ChangeSet, now: dt.datetime
) -> tuple[ChangeSet, list[str]]:
    """The change set with the files whose publish window a date crossed since the last
    check added (as modified); a no-op run that finds some becomes an incremental run at the
    same commit. Also returns those files. A full run processes every file anyway."""
    physical = store.physical_name(repo.name)
    if change_set.mode == "full" or physical is None:
        return change_set, []
    since = store.catalog.publish_windows.windows_checked(physical)
    if not since:  # windows were never recorded for this collection: nothing to compare
        return change_set, []
    crossed = store.catalog.publish_windows.crossed(physical, since, utc_text(now))
    already = {c.path for c in change_set.changes}
    gone = set(change_set.paths_to_delete())
    added = [p for p in crossed if p not in already and p not in gone]
    if not added:
        return change_set, []
    log.info(
        "publish_windows_crossed",
        repository=repo.name,
        since=since,
        now=utc_text(now),
        files=len(added),
        first=added[:5],
    )
    change_set.changes.extend(FileChange(ChangeKind.MODIFIED, p) for p in added)
    if change_set.mode == "noop":
        change_set.mode = "incremental"
    return change_set, added


def windows_checked(store: IndexingStore, repo: Repository, now: dt.datetime) -> None:
    """Every window is up to date at `now` (the run that processed the crossed files is
    complete, or there were none)."""
    physical = store.physical_name(repo.name)
    if physical is not None:
        store.catalog.publish_windows.mark_windows_checked(physical, utc_text(now))


def showing_pages(repo: Repository, change_set: ChangeSet) -> list[str]:
    """Section pages that show a changed file's text (a glossary page and its terms) and are
    not in the change set: they must be processed again too."""
    changed = {p for c in change_set.changes for p in (c.path, c.old_path) if p}
    parents = {
        posixpath.join(posixpath.dirname(p), "_index.md")
        for p in changed
        if posixpath.basename(p) != "_index.md"
    }
    parents -= {c.path for c in change_set.changes}
    if not parents:
        return []
    tree = set(list_content_files(repo, change_set.new_commit))
    present = sorted(p for p in parents if p in tree)
    return [
        path
        for path, text in read_content_files(repo, present, change_set.new_commit, max_bytes=10**9)
        if not isinstance(text, SkipFile) and calls_glossary(text)
    ]


def below_changed_cascades(repo: Repository, change_set: ChangeSet) -> list[str]:
    """Pages below a changed section page whose cascade of publish keys (build options,
    drafts, dates) changed: whether Hugo publishes them may have changed too, so they are
    processed again (their unchanged chunks are reused)."""
    sections = [c for c in change_set.changes if posixpath.basename(c.path) == "_index.md"]
    if not sections:
        return []

    def cascades(commit: str | None, paths: list[str]) -> dict[str, Any]:
        if not commit:
            return {}
        try:
            texts = list(read_content_files(repo, paths, commit, max_bytes=10**9))
        except Exception:  # the old side may be gone (history rewritten): the new one counts
            return {}
        return {
            p: parse_page(repo.name, p, text).publish.cascade
            for p, text in texts
            if not isinstance(text, SkipFile)
        }

    new = cascades(change_set.new_commit, [c.path for c in sections])
    old = cascades(change_set.old_commit, [c.old_path or c.path for c in sections])
    changed = {
        posixpath.dirname(c.path) + "/"
        for c in sections
        if new.get(c.path, ()) != old.get(c.old_path or c.path, ())
    }
    if not changed:
        return []
    already = {c.path for c in change_set.changes}
    return [
        p
        for p in list_content_files(repo, change_set.new_commit)
        if p not in already and any(p.startswith(d) for d in changed)
    ]


def expand_publish_dependents(repo: Repository, change_set: ChangeSet) -> ChangeSet:
    """An incremental change set with the pages whose publishing depends on a changed file:
    a glossary page whose term changed, pages below a changed cascade. Counted with the
    include dependents (unchanged pages processed again)."""
    if change_set.mode != "incremental":
        return change_set
    added = sorted(
        set(showing_pages(repo, change_set)) | set(below_changed_cascades(repo, change_set))
    )
    if added:
        log.info("publish_dependents", repository=repo.name, pages=len(added))
        change_set.changes.extend(FileChange(ChangeKind.MODIFIED, p) for p in added)
        change_set.include_dependents.extend(added)
    return change_set
