"""Which versions of the repositories in scope a search reads (`hetriever.core.versions`).

A version is a repository of its own (`<base>--<slug>`) whose catalog settings say so. A
search that names no version reads each repository's checked-out tree only, so indexing
versions never changes its answer; a label (`v0.139.0`, or its slug `v0-139-0`) reads, for
each repository in scope, its version of that label instead; `all` reads the tree and every
version, and shows each page once, with the versions that hold it (`group_versions`).

A version repository the caller names itself is searched as itself. One catalog read gives
every repository's settings, so a search costs one query more, however many versions exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hetriever.core.errors import UnknownVersionError
from hetriever.core.logs import get_logger
from hetriever.core.models import SearchResult
from hetriever.core.versions import ALL, CURRENT, VersionOf, version_from_settings, version_slug

log = get_logger(__name__)

MAX_LABEL_CHARS = 200
GROUPED_DEPTH = 100  # a search of every version asks for at most this many results to group


def versions_of(catalog: Any) -> dict[str, VersionOf]:
    """repository -> the version it is, for every repository that is one (one read)."""
    found: dict[str, VersionOf] = {}
    for name, settings in catalog.version_settings().items():
        version = version_from_settings(settings)
        if version is not None:
            found[name] = version
    return found


def wanted_version(raw: Any) -> str | None:
    """A request's `version` as search reads it: None for the checked-out tree (not given,
    "" or `current`), `all`, or a label, trimmed."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise UnknownVersionError(f"version must be a string, got {raw!r}")
    text = raw.strip()
    if len(text) > MAX_LABEL_CHARS:
        raise UnknownVersionError(f"version is longer than {MAX_LABEL_CHARS} characters")
    if not text or text.lower() == CURRENT:
        return None
    return ALL if text.lower() == ALL else text


def is_label(version: VersionOf, wanted: str) -> bool:
    """Whether `wanted` names `version`: its label, or its label's slug (any case)."""
    return version.label == wanted or version_slug(version.label) == version_slug(wanted)


@dataclass(frozen=True)
class VersionScope:
    names: list[str]  # the repositories searched
    labels: dict[str, str] = field(default_factory=dict)  # repository -> label ("" a tree)
    bases: dict[str, str] = field(default_factory=dict)  # repository -> its base repository
    grouped: bool = False  # every version: a page's versions are one result

    def family(self, base: str) -> list[str]:
        """The repositories searched that are `base` or a version of it, the tree first."""
        return [n for n in self.names if self.bases.get(n, n) == base]

    @property
    def widest(self) -> int:
        return max((len(self.family(b)) for b in set(self.bases.values())), default=1)


def version_scope(
    catalog: Any,
    names: Sequence[str],
    existing: Sequence[str],
    *,
    named: bool,
    version: str | None,
) -> VersionScope:
    """The repositories a search of `version` reads, from the `names` in scope (`named`:
    the caller named them) and the `existing` searchable ones (where versions are found)."""
    known = versions_of(catalog)
    direct = [n for n in names if n in known] if named else []
    bases = [n for n in names if n not in known]
    labels = {n: known[n].label for n in direct}
    if version is None:
        return _scope(bases + direct, labels, known)
    have = set(existing)
    children: dict[str, list[str]] = {}
    for name, of in sorted(known.items()):
        # a version whose first ingest never completed is not read (as `serve` reads none)
        if of.base in bases and name in have and (version == ALL or is_label(of, version)):
            if catalog.complete(name):
                children.setdefault(of.base, []).append(name)
    if version == ALL:
        picked = [n for base in bases for n in [base, *children.get(base, [])]]
        labels.update({n: known[n].label for n in picked if n in known})
        return _scope(list(dict.fromkeys(picked + direct)), labels, known, grouped=True)
    found, missing = [], []
    for base in bases:
        hit = next((n for n in children.get(base, []) if is_label(known[n], version)), None)
        if hit is None:
            missing.append(base)
        else:
            found.append(hit)
            labels[hit] = known[hit].label
    if bases and not found and not direct:
        raise UnknownVersionError(
            f"no repository searched has a version {version!r}",
            hint=_known(known, have, bases),
        )
    if missing and named:
        raise UnknownVersionError(
            f"repository {missing[0]} has no version {version!r}",
            hint=_known(known, have, missing[:1]),
        )
    if missing:
        log.info("search_version_missing", version=version, repositories=missing)
    return _scope(found + direct, labels, known)


def _scope(
    names: list[str], labels: dict[str, str], known: dict[str, VersionOf], grouped: bool = False
) -> VersionScope:
    bases = {n: known[n].base if n in known else n for n in names}
    return VersionScope(names, {n: labels.get(n, "") for n in names}, bases, grouped)


def _known(known: dict[str, VersionOf], have: set[str], bases: list[str]) -> str:
    labels = sorted({v.label for n, v in known.items() if v.base in bases and n in have})
    if not labels:
        return "no version of it is indexed; search without a version for the checked-out tree"
    return f"indexed versions: {', '.join(labels)} (or 'current', or 'all')"


def label_results(results: list[SearchResult], scope: VersionScope) -> None:
    """Each result says the version it is from."""
    for result in results:
        result.version = scope.labels.get(str(result.metadata.get("repository", "")), "")


def group_versions(
    catalog: Any, collections: dict[str, str], results: list[SearchResult], scope: VersionScope
) -> list[SearchResult]:
    """One result per page of a repository, whichever versions it was found in: the best
    one, with `versions` naming each searched version that holds the page and whether its
    source differs from the shown one's (the file's git blob, from the catalog)."""
    shown: dict[tuple[str, str], SearchResult] = {}
    for result in results:
        repository = str(result.metadata.get("repository", ""))
        key = (scope.bases.get(repository, repository), str(result.metadata.get("file_path", "")))
        shown.setdefault(key, result)
    paths: dict[str, set[str]] = {}
    for base, path in shown:
        for name in scope.family(base):
            paths.setdefault(name, set()).add(path)
    blobs = {
        name: catalog.file_blobs(collections[name], wanted) if name in collections else {}
        for name, wanted in paths.items()
    }
    for (base, path), result in shown.items():
        own = blobs.get(str(result.metadata.get("repository", "")), {}).get(path)
        result.versions = [
            {
                "version": scope.labels.get(name) or CURRENT,
                "repository": name,
                "differs": blobs[name][path] != own,
            }
            for name in scope.family(base)
            if path in blobs.get(name, {})
        ]
    return list(shown.values())
