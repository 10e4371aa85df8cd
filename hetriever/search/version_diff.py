"""What changed in a repository's published pages between two of its indexed versions
(`hetriever.core.versions`): pages added, removed, changed and renamed, for `hetriever diff`
and `GET /diff`.

git answers what changed between the two versions' indexed commits (`git diff-tree -M`, as
an incremental ingest asks it, `discover.changes._diff`); a page counts only where Hugo
publishes it: a file the version's index holds as INDEXED (a draft, a headless or an
expired page is SKIPPED there, and never a page). A file published in one version only is
added or removed, whatever git says of its text; a file whose publishing alone changed
(a cascade, a date) is added or removed too. Each change carries the page's URL and title
from the chunks of the version that holds it, and only pages the caller may see are named.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from hetriever.core.access import caller_levels, denial
from hetriever.core.errors import SourceError, UnknownVersionError
from hetriever.core.models import ChangeKind, _Serialisable
from hetriever.core.versions import CURRENT
from hetriever.discover.changes import _diff, _resolve_commit
from hetriever.discover.repositories import Repository, configured_repositories
from hetriever.search.planning import plan_collections
from hetriever.search.version_scope import is_label, versions_of, wanted_version
from hetriever.store.catalog_records import INDEXED
from hetriever.store.filters import and_filters
from hetriever.store.store_types import RetrievalStore

_PAGE_KEYS = ("file_path", "url", "title", "chunk_index", "access_level", "is_deleted")


@dataclass
class PageChange(_Serialisable):
    kind: str  # "A", "M", "D" or "R" (a rename: `old_path` is where it was)
    path: str  # in the newer version (the older one's for a removed page)
    old_path: str = ""
    url: str = ""  # the page's URL where it is published (the older one's if removed)
    title: str = ""
    old_url: str = ""  # a renamed page's URL in the older version


@dataclass
class VersionDiff(_Serialisable):
    repository: str
    from_version: str
    to_version: str
    from_commit: str
    to_commit: str
    changes: list[PageChange] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        out = {kind.value: 0 for kind in ChangeKind}
        for change in self.changes:
            out[change.kind] += 1
        return out


def version_repository(store: RetrievalStore, base: str, label: Any) -> str:
    """The repository holding version `label` of `base` (`current`: `base` itself)."""
    wanted = wanted_version(label)
    known = versions_of(store.catalog)
    if base in known:
        raise UnknownVersionError(
            f"{base} is a version of {known[base].base}",
            hint=f"name the repository itself: {known[base].base}",
        )
    existing = store.repository_names()
    if wanted is None:
        if base not in existing:
            raise UnknownVersionError(f"no repository {base!r} is indexed")
        return base
    mine = sorted(n for n, v in known.items() if v.base == base and n in existing)
    found = next((n for n in mine if is_label(known[n], wanted)), None)
    if found is None:
        labels = ", ".join(known[n].label for n in mine) or "none"
        raise UnknownVersionError(
            f"repository {base} has no version {label!r}",
            hint=f"indexed versions: {labels} (or 'current')",
        )
    return found


def version_diff(
    store: RetrievalStore,
    repository: str,
    old: str,
    new: str,
    *,
    levels: Any = None,
    repo: Repository | None = None,
) -> VersionDiff:
    """The published pages that differ from version `old` of `repository` to version `new`
    (labels, or `current`), as the caller's `levels` may see them. `repo`: the git checkout
    holding both commits (the configured repository of that name by default)."""
    allowed = caller_levels(levels)
    own = plan_collections(store, [repository]).get(repository)
    if own is None or not own.visible(allowed):  # its versions' labels are not for this caller
        raise UnknownVersionError(f"no repository {repository!r} is indexed")
    names = [version_repository(store, repository, label) for label in (old, new)]
    plans = plan_collections(store, names)
    if any(n not in plans or not plans[n].visible(allowed) for n in names):
        # one the caller may not see reads as one that is not there
        raise UnknownVersionError(f"no repository {repository!r} is indexed")
    commits = []
    for name, label in zip(names, (old, new)):
        record = store.catalog.repository(name)
        if record is None or not record.last_commit:
            raise UnknownVersionError(
                f"version {label!r} of {repository} has no complete index yet",
                hint="run `hetriever ingest` first",
            )
        commits.append(record.last_commit)
    checkout = repo or _checkout(store, repository)
    for commit, label in zip(commits, (old, new)):
        if _resolve_commit(checkout, commit) is None:
            raise SourceError(
                f"commit {commit[:12]} of version {label!r} is not in {repository}'s checkout",
                hint="fetch the repository's tags and branches (`git fetch --tags`)",
            )
    published = [{f.path for f in store.catalog.files(plans[n].collection, INDEXED)} for n in names]
    changes = _page_changes(_diff(checkout, commits[0], commits[1]), published)
    shown = _pages(store, plans, names, changes, allowed)
    return VersionDiff(
        repository=repository,
        from_version=str(old or CURRENT),
        to_version=str(new or CURRENT),
        from_commit=commits[0],
        to_commit=commits[1],
        changes=shown,
    )


def _checkout(store: RetrievalStore, repository: str) -> Repository:
    try:
        (found,) = configured_repositories(store.settings, [repository])
    except (SourceError, ValueError) as exc:
        raise SourceError(
            f"the checkout of {repository} is not here, and the diff is git's",
            hint="run the diff where the docs root is (the docs_root setting)",
        ) from exc
    record = store.catalog.repository(repository)
    content_dir = record.settings.get("content_dir") if record else None
    return replace(found, content_dir=content_dir or found.content_dir)


def _page_changes(git_changes: list[Any], published: list[set[str]]) -> list[PageChange]:
    """git's content-file changes as changes of published pages (`published`: the older
    version's and the newer's), and the files whose publishing alone changed."""
    before, after = published
    out: list[PageChange] = []
    seen: set[str] = set()
    for change in git_changes:
        path, old_path = change.path, change.old_path or change.path
        seen.update((path, old_path))
        was, now = old_path in before, path in after
        if was and now:
            renamed = change.kind == ChangeKind.RENAMED
            out.append(PageChange("R" if renamed else "M", path, old_path if renamed else ""))
        elif now:
            out.append(PageChange("A", path))
        elif was:
            out.append(PageChange("D", old_path))
    out += [PageChange("A", p) for p in sorted(after - before - seen)]
    out += [PageChange("D", p) for p in sorted(before - after - seen)]
    return sorted(out, key=lambda c: (c.path, c.kind))


def _pages(
    store: RetrievalStore,
    plans: dict[str, Any],
    names: list[str],
    changes: list[PageChange],
    allowed: frozenset[str],
) -> list[PageChange]:
    """`changes` with their pages' URLs and titles, less those the caller may not see."""
    old, new = names
    wanted = {
        old: [c.old_path or c.path for c in changes if c.kind in "DR"],
        new: [c.path for c in changes if c.kind in "AMR"],
    }
    if old == new:
        wanted = {old: wanted[old] + wanted[new]}
    pages = {
        name: _visible_pages(store, plans[name], paths, allowed) for name, paths in wanted.items()
    }
    pages.setdefault(new, pages[old])
    out = []
    for change in changes:
        if change.kind == "D":
            page = pages[old].get(change.path)
        else:
            page = pages[new].get(change.path)
        if page is None:
            continue
        if change.kind == "R":
            before = pages[old].get(change.old_path)
            if before is None:  # its older page is not the caller's: a page of its own
                change = PageChange("A", change.path)
            else:
                change.old_url = str(before.get("url", ""))
        change.url, change.title = str(page.get("url", "")), str(page.get("title", ""))
        out.append(change)
    return out


def _visible_pages(
    store: RetrievalStore, plan: Any, paths: list[str], allowed: frozenset[str]
) -> dict[str, dict[str, Any]]:
    """path -> the metadata of its first chunk the caller may see, for those of `paths`."""
    if not paths:
        return {}
    index = store.search_bm25(plan.repository)
    ids = index.ids_where(and_filters(plan.where(allowed), {"file_path": {"$in": sorted(paths)}}))
    best: dict[str, dict[str, Any]] = {}
    for meta in index.metadata_of(ids, keys=_PAGE_KEYS).values():
        if denial(plan, meta, allowed) is not None:
            continue
        path = str(meta.get("file_path", ""))
        if path not in best or int(meta.get("chunk_index", 0)) < int(
            best[path].get("chunk_index", 0)
        ):
            best[path] = meta
    return best
