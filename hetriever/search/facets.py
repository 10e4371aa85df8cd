"""Facets: how many of a search's candidate pages each repository, language and section has,
so a caller can narrow the search (`repository`, `lang`, a `{"section": ...}` filter).

Counted over every page the search fused, not only the top k it returns: each candidate
chunk's page from the metadata the search already holds (Chroma's for the chunks it fetched
and checked, BM25's copy, the `label`, for the others), so counting costs no store read.
Candidates are what both retrievers found under the search's own filters (access, deletion,
language, the caller's filter), each retriever `candidate_depth()` deep; every one is checked
here against the caller's levels too, and a chunk the search dropped (stale, out of scope,
denied) is not counted. So the counts say "pages among this search's candidates", never how
many pages of the whole index match.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from hetriever.core.access import CollectionPlan, denial
from hetriever.core.models import SearchResult
from hetriever.search.candidates import _Hit, page_key
from hetriever.search.published import language

FACETS = ("repository", "lang", "section")
MAX_VALUES = 20  # values shown per facet, most pages first


def page_facets(
    hits: Mapping[str, _Hit],
    doc_ids: Iterable[str],
    dropped: set[str],
    plans: Mapping[str, CollectionPlan],
    levels: frozenset[str],
    content_dir: str = "content",
    extra: Iterable[SearchResult] = (),
) -> dict[str, list[dict[str, Any]]]:
    """{facet: [{"value", "count"}, ...]}: distinct candidate pages per value, most first.
    `extra`: results that are no candidate of the fused lists (the exact-match page)."""
    pages: dict[str, Mapping[str, Any]] = {}
    for doc_id in doc_ids:
        hit = hits.get(doc_id)
        if hit is None or doc_id in dropped:
            continue
        meta = hit.page_metadata
        plan = plans.get(hit.collection)
        if not meta or plan is None or denial(plan, meta, levels) is not None:
            continue
        pages.setdefault(page_key(meta, hit.collection), meta)
    for result in extra:
        name = str(result.metadata.get("repository", ""))
        pages.setdefault(page_key(result.metadata, name), result.metadata)
    counts: dict[str, Counter[str]] = {facet: Counter() for facet in FACETS}
    for page in pages.values():
        counts["repository"][str(page.get("repository", ""))] += 1
        counts["lang"][language(page, content_dir)] += 1
        section = str(page.get("section", "") or "")
        if section:
            counts["section"][section] += 1
    return {
        facet: [
            {"value": value, "count": n}
            for value, n in sorted(found.items(), key=lambda item: (-item[1], item[0]))[:MAX_VALUES]
            if value
        ]
        for facet, found in counts.items()
    }
