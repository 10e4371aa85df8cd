"""Gathering a search's candidates: how deep each retriever reads, BM25's candidates over
the collections in scope (idf over all of them when there are several), and routing a search
over several sites to those the query is about (`hetriever.search.routing`), the others'
candidates set aside for the facets alone. Dense candidates are `hetriever.search.dense`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hetriever.core.access import CollectionPlan
from hetriever.core.logs import get_logger
from hetriever.search.candidates import _Hit
from hetriever.search.routing import routed
from hetriever.store.bm25.bm25_index import CorpusStats
from hetriever.store.store_types import RetrievalStore

log = get_logger(__name__)

CANDIDATE_FACTOR = 2  # chunk results: each retriever fetches this many times top_k chunks
# Page results: each retriever fetches PAGE_CANDIDATE_FACTOR x top_k chunks, at least
# PAGE_MIN_CANDIDATES, so that enough distinct pages reach the fusion. With score fusion,
# page MRR@10 rose from 20 to 40-75 chunks per retriever and was flat past that (sweep in
# bench/README.md); only the chunks that place or show a top page are fetched, so a deeper
# list costs little.
PAGE_CANDIDATE_FACTOR = 5
PAGE_MIN_CANDIDATES = 50


def candidate_depth(top_k: int, group_by: str) -> int:
    """Chunks each retriever returns for a search of `top_k` results."""
    if group_by == "page":
        return max(top_k * PAGE_CANDIDATE_FACTOR, PAGE_MIN_CANDIDATES)
    return top_k * CANDIDATE_FACTOR


def _bm25(
    store: RetrievalStore,
    names: list[str],
    query: str,
    n: int,
    wheres: Mapping[str, dict | None],
    hits: dict[str, _Hit],
) -> list[str]:
    found: list[tuple[float, str]] = []
    # Several sites: idf over all of them, so that their raw scores share one scale.
    corpus = (
        CorpusStats.of([store.search_bm25(name) for name in names], query)
        if len(names) > 1
        else None
    )
    for name in names:
        where = wheres[name]
        index = store.search_bm25(name)
        got = (
            index.search(query, n, where)
            if corpus is None
            else index.search(query, n, where, corpus=corpus)
        )
        for doc_id, raw in got:
            hit = hits.setdefault(doc_id, _Hit(doc_id, name))
            hit.bm25_raw = float(raw)
            found.append((hit.bm25_raw, doc_id))
    found.sort(key=lambda t: (-t[0], t[1]))
    return [doc_id for _, doc_id in found[:n]]


def _route(
    store: RetrievalStore,
    text: str,
    names: list[str],
    hits: dict[str, _Hit],
    dense_ids: list[str],
    vector: Any,
    n: int,
    plans: dict[str, CollectionPlan],
    wheres: Mapping[str, dict | None],
) -> tuple[list[str], list[str], dict[str, CollectionPlan], dict[str, _Hit]]:
    """The collections a search over several keeps (`routing.routed`), their dense
    candidates cut to `n`, and their plans; the other collections' hits are set aside (taken
    out of `hits` and returned: they rank nothing, and only the facets count them)."""
    margin = store.settings.route_margin
    keywords = _best_keyword_scores(store, text, names, wheres) if margin < 1 else {}
    kept = routed(store, names, hits, dense_ids, vector, margin, keywords)
    aside: dict[str, _Hit] = {}
    if len(kept) < len(names):
        log.debug("search_routed", kept=kept, left_out=[m for m in names if m not in kept])
        for doc_id in [d for d, hit in hits.items() if hit.collection not in kept]:
            aside[doc_id] = hits.pop(doc_id)
    return (
        kept,
        [d for d in dense_ids if d in hits][:n],
        {name: p for name, p in plans.items() if name in kept},
        aside,
    )


def _labelled(store: RetrievalStore, aside: dict[str, _Hit]) -> dict[str, _Hit]:
    """The hits routing set aside, each with its page from BM25's copy of its metadata (no
    Chroma read), so the facets say how many candidate pages the other sites had; a hit BM25
    cannot tell is left out of the count."""
    by_collection: dict[str, list[str]] = {}
    for doc_id, hit in aside.items():
        if hit.metadata is None and hit.label is None:
            by_collection.setdefault(hit.collection, []).append(doc_id)
    for name, ids in by_collection.items():
        try:
            known = store.search_bm25(name).metadata_of(ids)
        except Exception as exc:  # facets are an extra: the count just leaves them out
            log.debug("facet_labels_failed", collection=name, error=str(exc))
            known = {}
        for doc_id in ids:
            aside[doc_id].label = known.get(doc_id)
    return aside


def _best_keyword_scores(
    store: RetrievalStore, text: str, names: list[str], wheres: Mapping[str, dict | None]
) -> dict[str, float]:
    """Each site's best raw BM25 score for `text`, idf over all of them ({} if BM25 fails:
    routing then goes by dense alone)."""
    try:
        indexes = {name: store.search_bm25(name) for name in names}
        corpus = CorpusStats.of(indexes.values(), text)
        return {
            name: max(
                (s for _, s in index.search(text, 1, wheres[name], corpus=corpus)), default=0.0
            )
            for name, index in indexes.items()
        }
    except Exception as exc:  # routing's keyword evidence is an extra
        log.warning("route_keywords_failed", error=f"{type(exc).__name__}: {exc}")
        return {}
