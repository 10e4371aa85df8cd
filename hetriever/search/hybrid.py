"""Hybrid retrieval: dense kNN (Chroma) + BM25, fused over pages (or chunks).

This module answers a search: it plans it (`hetriever.search.planning`: scope, access,
language; filters), runs both retrievers (dense is `hetriever.search.dense`; BM25 and routing
over several sites `hetriever.search.gathering`) and fuses them; a candidate and the checks it
passes are `hetriever.search.candidates`, turning fused rankings into results
`hetriever.search.results`.

For each collection in scope, both retrievers fetch `candidate_depth()` candidates under the same
normalised filter (for BM25 AND-ed with the collection's own `repository`; dense queries leave
that clause out for speed and rely on the per-result scope check below, so a caller's filter
can only narrow the scope; a filtered dense query searches the ids the BM25 index lists for
the filter, or, for a filter it cannot list, reads unfiltered neighbours first, and only then
Chroma's `where`, see `dense._dense_rows`). The two lists are fused as `settings.fusion` says
(`hetriever.search.fusion`): by default score fusion, the weighted sum of each retriever's
standardised (z) scores; or RRF, `sum 1 / (k + rank)`.

Scores:
- dense_score: cosine distance `d` (in [0, 2]) mapped to `1 - d / 2`, so 1.0 is identical,
  0.5 orthogonal, 0.0 opposite. Linear, clamped to [0, 1] only against float rounding.
- bm25_score: the raw BM25 score divided by the best raw score among the candidates.
- score: in hybrid mode the fused score mapped into [0, 1] keeping its order (score fusion:
  the logistic of the weighted z-sum, so 0.5 is an average candidate; RRF: divided by its
  maximum `2 / (k + 1)`); the dense or BM25 score when only one retriever ran (hybrid off, or
  the other failed). `similarity_threshold` applies to it.

Every result is checked before it is returned: its `repository` must be in scope, its text must
hash to its `content_hash`, and the caller must be allowed to see it (`hetriever.core.access`: the
collection's level and the chunk's own level, not soft-deleted); anything else is dropped and
logged. Collections the caller may not see are never queried.

Exact-match fast path (`hetriever.search.exact`): a query that names a page outright (its
title, function name, URL, alias, description or a section heading) returns that page first
(source "exact", score 1.0); the fused results follow, without duplicates.

The repositories in scope are read in the version the request names
(`hetriever.search.version_scope`): by default each one's checked-out tree, never its indexed
versions; `all` searches a repository and its versions as one site (no routing between them)
and shows each page once.

Searches read the catalog's alias pointers; if a migration switches one while a search runs
(the catalog's alias epoch changed), the search runs again, so it never mixes two generations.

Local Chroma (embedded or `chroma run`) has no sparse index and no Search/Rrf API (those are
Chroma Cloud's), so BM25 and fusion run here.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence

from hetriever.core.access import caller_levels
from hetriever.core.errors import (
    BackendConnectionError,
    HetrieverError,
    InvalidLimitError,
    SearchError,
)
from hetriever.core.logs import get_logger
from hetriever.core.models import RetrievalResult, SearchResult
from hetriever.parse.links import LinkPrior
from hetriever.search.candidates import _Hit, page_key
from hetriever.search.dense import _dense
from hetriever.search.exact import _exact
from hetriever.search.facets import page_facets
from hetriever.search.gathering import _bm25, _labelled, _route, candidate_depth
from hetriever.search.planning import _for_query, _scope, plan_collections, resolve_top_k
from hetriever.search.request import SearchRequest
from hetriever.search.results import (
    _add_translations,
    _Checker,
    _chunk_results,
    _page_results,
    _Scored,
    _search_language,
    _verify_top_pages,
    dense_weight_for,
    is_question,
)
from hetriever.search.version_scope import (
    GROUPED_DEPTH,
    group_versions,
    label_results,
    wanted_version,
)
from hetriever.store.filters import and_filters, validate_filter
from hetriever.store.store_types import RetrievalStore

log = get_logger(__name__)

_LANG_CODE = re.compile(r"^(all|[a-z]{2,3}(-[a-z0-9]{2,8})*)$")
MAX_QUERY_CHARS = 10_000  # longer queries are truncated for embedding (not an error)
EPOCH_RETRIES = 3  # a search re-runs at most this often when an alias switches under it


def _filling(
    store: RetrievalStore,
    text: str,
    k: int,
    shown: list[SearchResult],
    user_filter: dict | None,
    levels: frozenset[str],
    names: list[str],
    use_hybrid: bool,
    group_by: str,
    started: float,
    wanted_lang: str,
) -> list[SearchResult]:
    """Up to `k` results of the sites routing left out, after a search's own (which had fewer
    than asked for): searched as a search of their own, without the ones already shown."""
    more = _search_once(
        store,
        text,
        k + len(shown),
        user_filter,
        levels,
        names,
        use_hybrid,
        False,
        group_by,
        started,
        wanted_lang,
    )
    seen = {r.doc_id for r in shown} | {
        page_key(r.metadata, str(r.metadata.get("repository"))) for r in shown
    }
    return [
        r
        for r in more.matches
        if r.doc_id not in seen
        and page_key(r.metadata, str(r.metadata.get("repository"))) not in seen
    ][:k]


def hybrid_search(store: RetrievalStore, request: SearchRequest) -> RetrievalResult:
    """Answer one search against `store` (a Store). See the module docstring.

    A request's `lang` None takes `settings.search_language`; if the query's own language
    has nothing, the default's is searched; single-language sites are not filtered.
    """
    started = time.perf_counter()
    settings = store.settings
    k = resolve_top_k(request.top_k, settings.default_top_k, settings.max_top_k)
    user_filter = validate_filter(request.filters)
    levels = caller_levels(request.access_levels)
    use_hybrid = settings.use_hybrid_search if request.hybrid is None else bool(request.hybrid)
    group = settings.group_by if request.group_by is None else request.group_by
    if group not in ("page", "chunk"):
        raise InvalidLimitError(f"group_by must be 'page' or 'chunk', got {request.group_by!r}")
    text = request.query if isinstance(request.query, str) else ""
    lang = request.lang
    wanted = (settings.search_language if lang is None else lang).strip().lower()
    if wanted and not _LANG_CODE.match(wanted):
        raise InvalidLimitError(
            f"lang must be a language code such as 'en' or 'pt-br', or 'all', got {lang!r}"
        )
    namespaces, exact = request.repositories, request.exact
    version = wanted_version(request.version)
    if wanted and user_filter is not None and "lang" in json.dumps(user_filter):
        wanted = "all"  # the caller's own filter on `lang` decides

    def once(detect: bool = True) -> RetrievalResult:
        return _search_once(
            store,
            text,
            k,
            user_filter,
            levels,
            namespaces,
            use_hybrid,
            exact,
            group,
            started,
            wanted,
            detect=detect,
            version=version,
        )

    for attempt in range(1, EPOCH_RETRIES + 2):
        epoch = store.catalog.alias_epoch()
        try:
            result = once()
            if not wanted and not result.matches and result.query_language:
                # The language the query is written in has nothing for it: the default's.
                result = once(detect=False)
        except HetrieverError:
            if store.catalog.alias_epoch() == epoch or attempt > EPOCH_RETRIES:
                raise
            result = None
        if result is not None and store.catalog.alias_epoch() == epoch:
            return result
        if attempt > EPOCH_RETRIES:
            return result  # type: ignore[return-value]
        log.info("search_retried", reason="collection alias switched", attempt=attempt)
    raise AssertionError("unreachable")


def _search_once(
    store: RetrievalStore,
    text: str,
    k: int,
    user_filter: dict | None,
    levels: frozenset[str],
    namespaces: Sequence[str] | None,
    use_hybrid: bool,
    exact: bool,
    group_by: str,
    started: float,
    wanted_lang: str = "",
    detect: bool = True,
    version: str | None = None,
) -> RetrievalResult:
    settings = store.settings

    def done(matches: list[SearchResult], mode: str, counts: dict[str, int]) -> RetrievalResult:
        ms = (time.perf_counter() - started) * 1000.0
        told = sorted({p.query_language for p in plans.values() if p.query_language})
        return RetrievalResult(
            query=text,
            matches=matches,
            total_results=len(matches),
            search_time_ms=ms,
            mode=mode,
            retriever_counts=counts,
            query_language=",".join(told),
        )

    scope = _scope(store, namespaces, version)
    names, shown_k = scope.names, k
    grouped = scope.grouped and group_by == "page"
    if grouped:  # a page in several versions is one result: enough of them to group
        k = min(k * scope.widest, max(k, GROUPED_DEPTH))
    plans = plan_collections(store, names) if text.strip() else {}
    hidden = [name for name, p in plans.items() if not p.visible(levels)]
    if hidden:
        log.debug("search_collections_hidden", repositories=hidden, levels=sorted(levels))
    plans = {name: p for name, p in plans.items() if p.visible(levels)}
    if not wanted_lang and detect:  # told no language: the query's, if it says
        plans = {name: _for_query(store, p, text) for name, p in plans.items()}
    names = list(plans)
    if not text.strip() or not names:
        return done([], "hybrid" if use_hybrid else "dense", {"dense": 0, "bm25": 0, "merged": 0})
    # The caller's filter is AND-ed with the access and deletion clauses, so it can only narrow.
    wheres = {
        name: and_filters(and_filters(p.where(levels), p.language_clause(wanted_lang)), user_filter)
        for name, p in plans.items()
    }
    exact_hit = _exact(store, text, plans, levels, user_filter, wanted_lang) if exact else None

    language = _search_language(wanted_lang, plans)
    weight = dense_weight_for(settings, language, text)
    if weight != settings.dense_weight:  # both validated already: no second validation
        settings = settings.model_copy(update={"dense_weight": weight})
    n = candidate_depth(k, group_by)
    hits: dict[str, _Hit] = {}
    left_out: list[str] = []  # sites the query is not about (routing): they only fill up
    aside: dict[str, _Hit] = {}  # their candidates, counted by the facets alone
    all_plans = plans
    dense_ids: list[str] | None = None
    bm25_ids: list[str] | None = None
    try:
        vector = store.embedder.embed([text[:MAX_QUERY_CHARS]])[0]
        # A hybrid page search labels candidates from BM25 and fetches only what it shows.
        dense_ids = _dense(
            store,
            names,
            vector,
            n,
            wheres,
            hits,
            ids_only=use_hybrid and group_by == "page",
            each=len(names) > 1,
        )
        # Several sites: those the query is about (hetriever.search.routing); the versions
        # of a site are one site, so a search of every version reads them all.
        if len(names) > 1 and not scope.grouped:
            routed_from = names
            names, dense_ids, plans, aside = _route(
                store, text, names, hits, dense_ids, vector, n, plans, wheres
            )
            left_out = [name for name in routed_from if name not in names]
    except BackendConnectionError:
        if not use_hybrid:  # dense was asked for and its backend is down: say so
            raise
        log.error("dense_retrieval_failed", error="backend unreachable")
    except HetrieverError as exc:
        log.error("dense_retrieval_failed", error=str(exc))
    except Exception as exc:  # a retriever failing must not take the other down
        log.error("dense_retrieval_failed", error=f"{type(exc).__name__}: {exc}")
    if use_hybrid or dense_ids is None:
        try:
            bm25_ids = _bm25(store, names, text, n, wheres, hits)
        except Exception as exc:
            log.error("bm25_retrieval_failed", error=f"{type(exc).__name__}: {exc}")
    if dense_ids is None and bm25_ids is None:
        raise SearchError(
            f"both retrievers failed for query {text[:80]!r}",
            hint="see the log for each retriever's error",
        )
    if dense_ids is not None and bm25_ids is not None:
        mode = "hybrid"
    else:
        mode = "dense" if dense_ids is not None else "bm25"

    prior = None  # a question's links prior, for fused pages only (hetriever.parse.links)
    if (
        mode == "hybrid"
        and group_by == "page"
        and settings.fusion == "score"
        and settings.link_prior_weight > 0
        and is_question(settings, language, text)
    ):
        prior = LinkPrior(
            store.catalog.pages,
            {name: p.collection for name, p in plans.items()},
            settings.link_prior_weight,
        )
    rankings = {"dense": dense_ids or [], "bm25": bm25_ids or []}
    check = _Checker(store, hits, plans, levels)
    if group_by == "page":
        rankings = _verify_top_pages(check, rankings, settings, k + 1, prior)
    else:
        check.verify(list(dict.fromkeys(rankings["dense"] + rankings["bm25"])))
        rankings = {name: [d for d in ids if d in check.trusted] for name, ids in rankings.items()}
    scored = _Scored(rankings, hits, check.trusted, mode, settings, prior)
    if group_by == "page":
        results = _page_results(scored, exact_hit)
    else:
        results = _chunk_results(scored, exact_hit)
    results = results[:k]
    if left_out and len(results) < k:  # too few: the other sites' results follow
        results += _filling(
            store,
            text,
            k - len(results),
            results,
            user_filter,
            levels,
            left_out,
            use_hybrid,
            group_by,
            started,
            wanted_lang,
        )
    _add_translations(store, plans, results)
    label_results(results, scope)
    if grouped:
        collections = {name: p.collection for name, p in all_plans.items()}
        results = group_versions(store.catalog, collections, results, scope)[:shown_k]
    counts = {
        "dense": len(rankings["dense"]),
        "bm25": len(rankings["bm25"]),
        "merged": len(set(rankings["dense"]) | set(rankings["bm25"])),
    }
    out = done(results, mode, counts)
    aside = _labelled(store, aside) if aside else aside
    out.facets = page_facets(
        {**aside, **hits},
        [*rankings["dense"], *rankings["bm25"], *aside],
        check.dropped,
        all_plans,
        levels,
        settings.content_dir,
        [exact_hit] if exact_hit else [],
    )
    log.info(
        "search_done",
        mode=mode,
        group_by=group_by,
        dense=counts["dense"],
        bm25=counts["bm25"],
        merged=counts["merged"],
        results=len(results),
        collections=len(names),
        exact=exact_hit is not None,
        ms=round(out.search_time_ms, 1),
    )
    return out


async def retrieve(store: RetrievalStore, request: SearchRequest) -> RetrievalResult:
    """`hybrid_search` off the event loop (embedding and Chroma calls block)."""
    return await asyncio.to_thread(hybrid_search, store, request)
