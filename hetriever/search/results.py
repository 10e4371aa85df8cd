"""From fused rankings to results: the chunks that place or show a top page are fetched and
checked (`_Checker`, `_verify_top_pages`), pages or chunks are fused as the settings say (with
the dense weight of the search's language), scores are mapped into [0, 1], and each page
result gets its passages and the names of its other languages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hetriever.core.access import CollectionPlan
from hetriever.core.logs import get_logger
from hetriever.core.models import SearchResult
from hetriever.parse.links import LinkPrior, shown
from hetriever.search.candidates import (
    _fill_documents,
    _Hit,
    _passage,
    _trusted,
    bounded_passage,
    page_key,
)
from hetriever.search.fusion import FusedPage, fuse_pages, ordered, rrf_fuse, score_fuse
from hetriever.store.bm25.analyzer import tokenize
from hetriever.store.store_types import RetrievalStore

log = get_logger("hetriever.search")


class _Checker:
    """Fetches candidates' text and metadata from Chroma and checks them (`_trusted`), once."""

    def __init__(
        self,
        store: RetrievalStore,
        hits: dict[str, _Hit],
        plans: Mapping[str, CollectionPlan],
        levels: frozenset[str],
    ) -> None:
        self.store, self.hits, self.plans, self.levels = store, hits, plans, levels
        self.trusted: set[str] = set()
        self.dropped: set[str] = set()

    def verify(self, doc_ids: Sequence[str]) -> None:
        todo = [
            self.hits[d]
            for d in dict.fromkeys(doc_ids)
            if d not in self.trusted and d not in self.dropped
        ]
        _fill_documents(self.store, todo)
        for hit in todo:
            (self.trusted if _trusted(hit, self.plans, self.levels) else self.dropped).add(
                hit.doc_id
            )

    def label(self) -> None:
        """Hits without metadata (BM25's, and dense ones read without it) learn their page
        from BM25's copy of their metadata, without a Chroma fetch; those BM25 does not hold
        (written to Chroma, not yet to BM25) or cannot tell are fetched and checked at once."""
        by_collection: dict[str, list[str]] = {}
        for d, hit in self.hits.items():
            if hit.metadata is None and hit.label is None:
                by_collection.setdefault(hit.collection, []).append(d)
        unknown: list[str] = []
        for name, ids in by_collection.items():
            try:
                known = self.store.search_bm25(name).metadata_of(ids)
            except Exception as exc:  # unlabelled hits are then fetched like any other
                log.warning("bm25_metadata_failed", collection=name, error=str(exc))
                known = {}
            for d in ids:
                self.hits[d].label = known.get(d)
                if self.hits[d].label is None:
                    unknown.append(d)
        if unknown:
            self.verify(unknown)


PAGE_VERIFY_ROUNDS = 4  # a stale chunk dropped from a top page changes the pages: look again


def _verify_top_pages(
    check: _Checker,
    rankings: dict[str, list[str]],
    settings: Any,
    pages: int,
    prior: LinkPrior | None = None,
) -> dict[str, list[str]]:
    """Rankings in which every chunk that places or shows one of the top `pages` pages has
    been fetched from Chroma and checked; chunks that failed are removed.

    A page is placed by its best chunk in each ranking and shown with its first
    PASSAGES_PER_PAGE chunks; only those are fetched, not every candidate (a search asks each
    retriever for PAGE_CANDIDATE_FACTOR x top_k chunks, most of which never reach the top).
    """
    check.label()
    for _ in range(PAGE_VERIFY_ROUNDS):
        live = {name: [d for d in ids if d not in check.dropped] for name, ids in rankings.items()}
        page_of = _page_of(check.hits, live)
        needed: list[str] = []
        for page in _fuse_pages(settings, check.hits, live, page_of, prior)[:pages]:
            needed.extend(page.chunks[:PASSAGES_PER_PAGE])
            for ids in live.values():
                needed.extend(next(([d] for d in ids if page_of.get(d) == page.page), []))
        if all(d in check.trusted for d in needed):
            return live
        check.verify(needed)
    return {name: [d for d in ids if d in check.trusted] for name, ids in rankings.items()}


CJK_LANGUAGES = frozenset({"ja", "zh", "ko"})


def _english(lang: str) -> bool:
    """A search in English, the embedding model's language ("" and "all" included)."""
    return lang.split("-")[0] in ("", "en", "all")


def is_question(settings: Any, lang: str, query: str) -> bool:
    """An English query of more than `short_query_terms` distinct BM25 terms: a question in
    the asker's words; a shorter one is a look-up by name (a title, a heading)."""
    return _english(lang) and len(set(tokenize(query))) > settings.short_query_terms


def dense_weight_for(settings: Any, lang: str, query: str = "") -> float:
    """Dense's share of score fusion for a search in `lang`. An English look-up by name
    (`is_question` false) leans on the words (`dense_weight_short`); a question, where meaning
    counts more, gets `dense_weight`; other languages less (the model is English)."""
    if _english(lang):
        if query and not is_question(settings, lang, query):
            return settings.dense_weight_short
        return settings.dense_weight
    return (
        settings.dense_weight_cjk
        if lang.split("-")[0] in CJK_LANGUAGES
        else settings.dense_weight_other
    )


def _search_language(wanted: str, plans: Mapping[str, CollectionPlan]) -> str:
    """The language a search runs in: the one asked for, else the one the sites keep to
    (the query's own, or their default) when they agree."""
    if wanted:
        return wanted
    defaults = {p.search_language for p in plans.values() if p.languages}
    return defaults.pop() if len(defaults) == 1 else ""


def _fusion_weights(settings: Any) -> dict[str, float]:
    return {"dense": settings.dense_weight, "bm25": 1.0 - settings.dense_weight}


def _retriever_scores(
    hits: Mapping[str, _Hit], rankings: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, float]]:
    """Each retriever's own score of its candidates: dense similarity, raw BM25."""
    return {
        "dense": {d: hits[d].dense_score or 0.0 for d in rankings["dense"]},
        "bm25": {d: hits[d].bm25_raw or 0.0 for d in rankings["bm25"]},
    }


def _fuse_pages(
    settings: Any,
    hits: Mapping[str, _Hit],
    rankings: Mapping[str, Sequence[str]],
    page_of: Mapping[str, str],
    prior: LinkPrior | None = None,
) -> list[FusedPage]:
    """Pages as `settings.fusion` fuses them (hetriever.search.fusion); with score fusion, a `prior`
    is a third score list: each candidate page's links prior, at `prior.weight`."""
    if settings.fusion == "rrf":
        return fuse_pages(rankings, page_of, settings.rrf_k)
    weights, scores = _fusion_weights(settings), _retriever_scores(hits, rankings)
    if prior is not None and page_of:
        values = prior.values(
            {page: (hits[d].collection, hits[d].page_metadata) for d, page in page_of.items()}
        )
        rankings = {**rankings, "links": list(page_of)}
        scores["links"] = {d: values[page] for d, page in page_of.items()}
        weights["links"] = prior.weight
    return fuse_pages(rankings, page_of, settings.rrf_k, weights, scores=scores)


def _page_of(hits: Mapping[str, _Hit], rankings: Mapping[str, Sequence[str]]) -> dict[str, str]:
    return {
        d: page_key(hits[d].page_metadata, hits[d].collection)
        for ids in rankings.values()
        for d in ids
        if hits[d].page_metadata
    }


class _Scored:
    """Each candidate chunk's scores: dense similarity, BM25 normalised by the best raw score
    among the candidates, and the final score (fused, or the one retriever's). Only `shown`
    chunks (fetched and checked) may become results; the others still count for ranks."""

    def __init__(
        self,
        rankings: dict[str, list[str]],
        hits: dict[str, _Hit],
        shown: set[str],
        mode: str,
        settings: Any,
        prior: LinkPrior | None = None,
    ) -> None:
        self.rankings, self.hits, self.mode, self.settings = rankings, hits, mode, settings
        self.prior = prior
        self.shown, self.threshold = shown, settings.similarity_threshold
        self.max_rrf = 2.0 / (settings.rrf_k + 1)
        in_bm25 = set(rankings["bm25"])
        best = max((hits[d].bm25_raw or 0.0 for d in in_bm25), default=0.0)
        self.dense = {d: hits[d].dense_score for d in rankings["dense"]}
        self.bm25 = {d: (hits[d].bm25_raw or 0.0) / best if best > 0 else 0.0 for d in in_bm25}

    def fuse_chunks(self) -> dict[str, float]:
        if self.settings.fusion == "rrf":
            return rrf_fuse(self.rankings, self.settings.rrf_k)
        return score_fuse(
            _retriever_scores(self.hits, self.rankings), _fusion_weights(self.settings)
        )

    def score(self, fused: float, dense: float | None, bm25: float | None) -> float:
        if self.mode == "hybrid" and self.settings.fusion == "rrf":
            return min(1.0, fused / self.max_rrf)
        if self.mode == "hybrid":  # weighted z-scores, mapped into (0, 1) keeping the order
            return 1.0 / (1.0 + math.exp(-fused))
        return (dense if self.mode == "dense" else bm25) or 0.0

    def result(
        self,
        doc_id: str,
        *,
        score: float,
        dense: float | None,
        bm25: float | None,
        rrf: float | None,
        passages: list[dict[str, Any]] | None = None,
    ) -> SearchResult:
        hit = self.hits[doc_id]
        source = (
            "hybrid"
            if dense is not None and bm25 is not None
            else ("dense" if dense is not None else "bm25")
        )
        return SearchResult(
            doc_id=doc_id,
            content=bounded_passage(hit.content or ""),
            metadata=shown(hit.metadata),
            score=score,
            source=source,
            dense_score=dense,
            bm25_score=bm25,
            rrf_score=rrf if self.mode == "hybrid" else None,
            passages=passages or [],
        )


def _chunk_results(scored: _Scored, exact_hit: SearchResult | None) -> list[SearchResult]:
    """One result per chunk, by chunk-level RRF."""
    fused = scored.fuse_chunks()
    results = []
    for doc_id in ordered(fused):
        dense, bm25 = scored.dense.get(doc_id), scored.bm25.get(doc_id)
        results.append(
            scored.result(
                doc_id,
                score=scored.score(fused[doc_id], dense, bm25),
                dense=dense,
                bm25=bm25,
                rrf=fused[doc_id],
            )
        )
    results.sort(key=lambda r: (-r.score, r.doc_id))
    results = [r for r in results if r.score >= scored.threshold]
    if exact_hit is not None:
        results = [exact_hit] + [r for r in results if r.doc_id != exact_hit.doc_id]
    return results


PASSAGES_PER_PAGE = 3  # chunks shown for a page result: the best one and up to two more


def _page_results(scored: _Scored, exact_hit: SearchResult | None) -> list[SearchResult]:
    """One result per page (see `hetriever.search.fusion`): the page's best chunk is the result's
    text, its next chunks are `passages`, its scores are the best of its chunks'."""
    page_of = _page_of(scored.hits, scored.rankings)
    results = []
    for page in _fuse_pages(scored.settings, scored.hits, scored.rankings, page_of, scored.prior):
        shown = [c for c in page.chunks[:PASSAGES_PER_PAGE] if c in scored.shown]
        if not shown:  # below the verified top: not shown
            continue
        dense = max(
            (d for c in page.chunks if (d := scored.dense.get(c)) is not None), default=None
        )
        bm25 = max((scored.bm25[c] for c in page.chunks if c in scored.bm25), default=None)
        passages = [_passage(scored.hits[c]) for c in shown[1:]]
        results.append(
            scored.result(
                shown[0],
                score=scored.score(page.fused, dense, bm25),
                dense=dense,
                bm25=bm25,
                rrf=page.fused,
                passages=passages,
            )
        )
    if scored.mode != "hybrid":  # one retriever: its own score orders the pages
        results.sort(key=lambda r: (-r.score, r.doc_id))
    results = [r for r in results if r.score >= scored.threshold]
    if exact_hit is not None:
        exact_page = page_key(exact_hit.metadata, str(exact_hit.metadata.get("repository")))
        rest = [
            r
            for r in results
            if page_key(r.metadata, str(r.metadata.get("repository"))) != exact_page
        ]
        results = [exact_hit] + rest
    return results


def _add_translations(
    store: RetrievalStore, plans: Mapping[str, CollectionPlan], results: list[SearchResult]
) -> None:
    """Name each result's other languages: the pages sharing its `translation_key`, looked up
    in BM25's in-memory metadata (no Chroma call). Only for multilingual sites."""
    for result in results:
        meta = result.metadata
        name = str(meta.get("repository", ""))
        key = meta.get("translation_key")
        plan = plans.get(name)
        if not key or plan is None or len(plan.languages) < 2:
            continue
        try:
            index = store.search_bm25(name)
            others = index.metadata_of(
                index.ids_where({"translation_key": key}), keys=("lang", "url", "title")
            )
        except Exception as exc:  # naming translations is an extra; never fail a search
            log.warning("translations_lookup_failed", repository=name, error=str(exc))
            continue
        seen: dict[str, dict[str, Any]] = {}
        for other in others.values():
            lang = str(other.get("lang", ""))
            if lang and lang != meta.get("lang") and lang not in seen:
                seen[lang] = {
                    "lang": lang,
                    "url": other.get("url", ""),
                    "title": other.get("title", ""),
                }
        result.translations = [seen[lang] for lang in sorted(seen)]
