"""Planning a search: how many results, the repositories in scope (each in the version
asked for, `hetriever.search.version_scope`), how each one's collection is searched (its
access level, mixed levels, deletions, languages), and the language a query is written in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hetriever.core.access import CollectionPlan, declared_level
from hetriever.core.errors import InvalidLimitError
from hetriever.core.logs import get_logger
from hetriever.core.versions import version_from_settings
from hetriever.search.query_language import query_language
from hetriever.search.version_scope import VersionScope, version_scope
from hetriever.store.store_types import RetrievalStore

log = get_logger(__name__)


def resolve_top_k(top_k: Any, default: int, maximum: int) -> int:
    if top_k is None:
        return default
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise InvalidLimitError(f"top_k must be an integer, got {top_k!r}")
    if top_k < 1:
        return default
    if top_k > maximum:
        raise InvalidLimitError(
            f"top_k {top_k} is above the maximum of {maximum}",
            hint=f"ask for at most {maximum} results",
        )
    return top_k


def _scope(
    store: RetrievalStore, namespaces: Sequence[str] | None, version: str | None = None
) -> VersionScope:
    """Repositories in scope: the named ones (validated) that have a searchable collection,
    each in the version asked for (`version_scope`)."""
    existing = store.repository_names()  # the catalog: answers while Chroma is down
    return version_scope(
        store.catalog,
        _named(existing, namespaces),
        existing,
        named=namespaces is not None,
        version=version,
    )


def _named(existing: list[str], namespaces: Sequence[str] | None) -> list[str]:
    from hetriever.core.names import validate_collection_name

    if namespaces is None:
        return existing
    if isinstance(namespaces, str):
        namespaces = [namespaces]
    wanted = list(dict.fromkeys(validate_collection_name(n) for n in namespaces))
    missing = [n for n in wanted if n not in existing]
    if missing:
        log.info("search_namespace_missing", namespaces=missing)
    return [n for n in wanted if n in existing]


def plan_collections(store: RetrievalStore, names: list[str]) -> dict[str, CollectionPlan]:
    """How each repository's collection is searched: its level, mixed levels, deletions."""
    catalog = store.catalog
    plans: dict[str, CollectionPlan] = {}
    for name in names:
        physical = store.physical_name(name)
        if physical is None:
            continue
        record = catalog.repository(name)
        collection = catalog.collection(physical)
        languages = (record.settings.get("languages") if record else None) or []
        version = version_from_settings(record.settings if record else None)
        base = catalog.repository(version.base) if version else None
        plans[name] = CollectionPlan(
            repository=name,
            collection=physical,
            declared=declared_level(
                store.settings,
                name,
                record.access_level if record else None,
                base=version.base if version else None,
            ),
            chunk_levels=set(collection.levels) if collection else set(),
            has_deleted=catalog.has_deleted(physical),
            languages=tuple(str(lang) for lang in languages),
            base_level=declared_level(
                store.settings, version.base, base.access_level if base else None
            )
            if version
            else "",
        )
    return plans


def _for_query(store: RetrievalStore, plan: CollectionPlan, text: str) -> CollectionPlan:
    """`plan` with the language `text` is written in (a multilingual site's): by its script,
    else by its words, counted in the site's BM25 index."""
    if len(plan.languages) < 2:
        return plan
    try:
        found = query_language(
            text,
            plan.languages,
            lambda: store.search_bm25(plan.repository).language_counts(text, plan.languages),
        )
    except Exception as exc:  # a guess at the language must never fail a search
        log.debug("query_language_failed", repository=plan.repository, error=str(exc))
        return plan
    return replace(plan, query_language=found)
