"""Access levels: which collections and chunks a caller may see.

Every repository has one declared level (PUBLIC, TEAM, PRIVATE or SYSTEM; `Settings.access_levels`,
else what the catalog recorded at its last ingest, else PUBLIC), and indexing copies it into every
chunk's `access_level`. A caller states the levels it may see; the default is PUBLIC only, so
nothing else is ever returned to a caller that did not ask for it. Levels are a set, not a
ladder: a caller with PRIVATE does not see TEAM unless it names TEAM too.

Two layers:
1. Planning, per collection (cheap): a collection whose declared level the caller lacks is not
   queried at all. A collection whose chunks all carry its declared level is queried without a
   chunk-level filter (a plain kNN); only a collection that mixes levels (a level changed and
   not yet re-indexed, or chunks written by hand) gets `access_level $in <caller's levels>`,
   AND-ed with the caller's own filter, which therefore cannot widen it.
2. Verification, per result (in Python, after retrieval): the collection's declared level *and*
   the chunk's own `access_level` (when present) must both be among the caller's levels, and the
   chunk must not be soft-deleted; anything else is dropped and logged. So a chunk that claims
   PUBLIC inside a PRIVATE collection is never shown to a PUBLIC caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hetriever.core.config import ACCESS_LEVELS, Settings
from hetriever.core.errors import InvalidFilterError

DEFAULT_CALLER_LEVELS: tuple[str, ...] = ("PUBLIC",)
DEFAULT_LEVEL = "PUBLIC"
NOT_DELETED: dict[str, Any] = {"is_deleted": {"$ne": True}}


def caller_levels(levels: Iterable[str] | str | None) -> frozenset[str]:
    """The caller's levels, validated; None means the default (PUBLIC only)."""
    if levels is None:
        return frozenset(DEFAULT_CALLER_LEVELS)
    if isinstance(levels, str):
        levels = [p for p in levels.split(",") if p.strip()]
    out = set()
    for level in levels:
        word = str(level).strip().upper()
        if word not in ACCESS_LEVELS:
            raise InvalidFilterError(
                f"unknown access level {level!r}",
                hint=f"use one or more of {', '.join(ACCESS_LEVELS)}",
            )
        out.add(word)
    if not out:
        raise InvalidFilterError(
            "no access level given", hint=f"use one or more of {', '.join(ACCESS_LEVELS)}"
        )
    return frozenset(out)


def declared_level(
    settings: Settings, repository: str, recorded: str | None = None, *, base: str | None = None
) -> str:
    """A repository's level: configuration first (a version's own, else its `base`'s), then
    the catalog's record, then PUBLIC. The one rule: indexing stamps it on chunks, search
    plans by it, status and /repositories show it."""
    for name in (repository, base):
        if name and name in settings.access_levels:
            return settings.access_levels[name].upper()
    return (recorded or DEFAULT_LEVEL).upper()


@dataclass
class CollectionPlan:
    """How one repository's active collection is searched for one caller."""

    repository: str
    collection: str  # physical name
    declared: str
    chunk_levels: set[str] = field(default_factory=set)  # levels seen on its chunks
    has_deleted: bool = False  # soft-deleted chunks present (need the is_deleted filter)
    # The site's languages, default first, as the last ingest read them; empty when unknown
    # (an index built before languages were recorded).
    languages: tuple[str, ...] = ()
    # The site language a search's query is written in (`hetriever.search.query_language`): a
    # search told no language keeps to it instead of the default. "" when the query does not
    # name one of `languages`.
    query_language: str = ""
    # A version's (`hetriever.core.versions`): the level of the repository it is a version
    # of. A caller must be allowed both, so indexing a version never widens who reads it.
    base_level: str = ""

    @property
    def search_language(self) -> str:
        """The language a search told none keeps to: the query's, else the site's default."""
        return self.query_language or (self.languages[0] if self.languages else "")

    def language_clause(self, wanted: str) -> dict[str, Any] | None:
        """The `lang` filter a search asks of this collection: `wanted` ("" = the language
        the query is written in, else the site's default; "all" = any). A single-language
        site needs none."""
        if wanted == "all" or (not wanted and len(self.languages) < 2):
            return None
        return {"lang": {"$eq": wanted or self.search_language}}

    def visible(self, allowed: frozenset[str]) -> bool:
        return self.declared in allowed and (not self.base_level or self.base_level in allowed)

    @property
    def mixed(self) -> bool:
        return bool(self.chunk_levels - {self.declared})

    def where(self, allowed: frozenset[str]) -> dict[str, Any] | None:
        """The store-side filter this collection needs (None: a plain kNN)."""
        parts: list[dict[str, Any]] = []
        if self.mixed:
            parts.append({"access_level": {"$in": sorted(allowed)}})
        if self.has_deleted:
            parts.append(NOT_DELETED)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else {"$and": parts}


def denial(
    plan: CollectionPlan, metadata: Mapping[str, Any], allowed: frozenset[str]
) -> str | None:
    """Why a result must not be returned to this caller, or None when it may."""
    if plan.declared not in allowed:
        return f"collection level {plan.declared}"
    if plan.base_level and plan.base_level not in allowed:
        return f"level {plan.base_level} of the repository it is a version of"
    level = metadata.get("access_level")
    if level is not None and str(level).upper() not in allowed:
        return f"chunk level {level}"
    if metadata.get("is_deleted") is True:
        return "soft-deleted"
    return None
