"""Hybrid retrieval: dense kNN (Chroma) + BM25, fused over pages (or chunks).

This module plans a search (scope, access, language, filters) and runs both retrievers; dense
retrieval is `hetriever.search.dense`, a candidate and the checks it passes `hetriever.search.candidates`,
and turning fused rankings into results `hetriever.search.results`.

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

Exact-match fast path: a query equal (trimmed, case-insensitive) to a page's title, linkTitle,
function name, URL or alias (a pasted address, with or without its host:
catalog_records.address_key), description (catalog_records.title_keys) or section heading
(catalog_records.heading_keys), or a function's name with the word for it ("where function",
`_NAMED_FUNCTION`), returns that page first (source "exact", score 1.0): its first
chunk, or the chunk where the heading's section starts; looked up in the catalog; the fused
results follow, without duplicates. A URL finds its page in the URL's language unless the
search names one, and shows the section its fragment names (a heading's anchor), if any; of
pages at one path (a multihost site's languages) the one published at its host, else the
site's default language's, as a page look-up by link (`hetriever.search.published.preference`).

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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hetriever.chunk.sections import ANCHORS_KEY, anchored_sections
from hetriever.core.access import CollectionPlan, caller_levels, declared_level
from hetriever.core.errors import (
    BackendConnectionError,
    HetrieverError,
    InvalidLimitError,
    SearchError,
)
from hetriever.core.logs import get_logger
from hetriever.core.models import RetrievalResult, SearchResult
from hetriever.core.versions import version_from_settings
from hetriever.parse.links import LinkPrior, shown
from hetriever.search.candidates import _fill_documents, _Hit, _trusted, bounded_passage, page_key
from hetriever.search.dense import _dense
from hetriever.search.facets import page_facets
from hetriever.search.published import preference, recorded_base_urls
from hetriever.search.query_language import query_language
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
from hetriever.search.routing import routed
from hetriever.search.version_scope import (
    GROUPED_DEPTH,
    VersionScope,
    group_versions,
    label_results,
    version_scope,
    wanted_version,
)
from hetriever.store.bm25.bm25_index import CorpusStats
from hetriever.store.catalog_records import (
    UNIQUE_KINDS,
    TitleHit,
    address_fragment,
    address_host,
    drop_shared,
)
from hetriever.store.filters import and_filters, matches, validate_filter
from hetriever.store.store_types import RetrievalStore

log = get_logger(__name__)

_LANG_CODE = re.compile(r"^(all|[a-z]{2,3}(-[a-z0-9]{2,8})*)$")
MAX_QUERY_CHARS = 10_000  # longer queries are truncated for embedding (not an error)
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


ADDRESS_KINDS = ("url", "alias")  # exact-match kinds a pasted address finds
# "where function", "function where", "range func", ".Site.Params method": a template
# function or method named by one identifier and the word for what it is. The name alone is
# an exact key; with the word, BM25 and dense see a common word ("function" is on every
# function page) beside a name that may be one too ("range", "in", "with").
_NAMED_FUNCTION = re.compile(
    r"^\s*(?:(?P<before>[.$]?[A-Za-z][\w.]*)\s+(?:function|func|method)"
    r"|(?:function|func|method)\s+(?P<after>[.$]?[A-Za-z][\w.]*))\s*$",
    re.IGNORECASE,
)
# What such a name matches: a function's name (`where` for `collections.Where`, a method's
# `.Site.Params`) or an alias's last segment (`/functions/range`), not any page's title
# ("markup function" is not the Markup configuration page); a namespaced name
# (`collections.Where`) also matches titles (`_exact`).
NAME_KINDS = ("function", "alias")
EPOCH_RETRIES = 3  # a search re-runs at most this often when an alias switches under it


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
            declared=declared_level(store.settings, name, record.access_level if record else None),
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


def _exact(
    store: RetrievalStore,
    query: str,
    plans: Mapping[str, CollectionPlan],
    levels: frozenset[str],
    user_filter: dict | None,
    wanted_lang: str = "",
) -> SearchResult | None:
    """The page whose title / linkTitle / function name / URL / alias / description / section
    heading equals the query, if any. A description or heading names a page only when no
    other page the search may return has it (a translation that kept an English heading
    does not hide the English page from an English search)."""
    by_physical = {p.collection: name for name, p in plans.items()}
    try:
        candidates = store.catalog.pages.lookup_title(query, list(by_physical))
        form = _NAMED_FUNCTION.match(query) if not candidates else None
        if form:  # "where function": the page named `where`, if a name is what it is
            name = form.group("before") or form.group("after")
            candidates = [
                c
                for c in store.catalog.pages.lookup_title(name, list(by_physical), NAME_KINDS)
                if not c.key.startswith("/")
            ]
            if not candidates and "." in name.strip("."):  # `collections.Where`
                candidates = store.catalog.pages.lookup_title(name, list(by_physical), ("title",))
    except Exception as exc:  # the fast path is an extra; it never fails a search
        log.warning("exact_lookup_failed", error=f"{type(exc).__name__}: {exc}")
        return None

    def in_scope(group: list[TitleHit]) -> list[tuple[TitleHit, _Hit]]:
        hits = [(c, _Hit(c.chunk_id, by_physical[c.collection])) for c in group]
        _fill_documents(store, [hit for _, hit in hits])  # one read per collection
        return [
            (c, hit)
            for c, hit in hits
            if hit.metadata is not None
            and matches(user_filter, hit.metadata)
            and matches(
                plans[hit.collection].language_clause(_language(c, wanted_lang)), hit.metadata
            )
            and _trusted(hit, plans, levels)
        ]

    for candidate in candidates:  # a name: the first the caller may see (one read, usually)
        if candidate.kind not in UNIQUE_KINDS and candidate.kind not in ADDRESS_KINDS:
            for _, hit in in_scope([candidate]):
                return _exact_result(hit)
    addressed = in_scope([c for c in candidates if c.kind in ADDRESS_KINDS])
    if addressed:  # a pasted address: of the pages at its path, the one it names
        hit = _addressed(store, query, [hit for _, hit in addressed], plans)
        return _exact_result(_section(store, hit, address_fragment(query), plans, levels))
    kept = in_scope([c for c in candidates if c.kind in UNIQUE_KINDS])
    named = drop_shared([c for c, _ in kept])
    return next((_exact_result(hit) for c, hit in kept if c in named), None)


def _addressed(
    store: RetrievalStore, query: str, pages: list[_Hit], plans: Mapping[str, CollectionPlan]
) -> _Hit:
    """The page a pasted address names among those at its path (a multihost site publishes
    each language's at the same path, two sites may share one): as a page look-up by link
    (`hetriever.serve.service`), the one published at the address's host, else its site's
    default language's, else the first (`published.preference`)."""
    if len(pages) < 2:
        return pages[0]
    host = address_host(query)
    sites = {
        name: recorded_base_urls(store.catalog, name, store.settings.site_urls)
        for name in {page.collection for page in pages}
    }
    return min(
        pages,
        key=lambda page: preference(
            page.metadata or {},
            host,
            sites[page.collection],
            plans[page.collection].languages,
            store.settings.content_dir,
        ),
    )


def _section(
    store: RetrievalStore,
    page: _Hit,
    anchor: str,
    plans: Mapping[str, CollectionPlan],
    levels: frozenset[str],
) -> _Hit:
    """The first chunk of `page` under the heading whose anchor a pasted URL's fragment
    names (`/content-management/menus/#define-in-front-matter`), else `page` itself."""
    if not anchor or page.metadata is None:
        return page
    try:
        index = store.search_bm25(page.collection)
        chunks = index.metadata_of(
            index.ids_where({"file_path": page.metadata["file_path"]}),
            keys=("heading_context", "merged_headings", "chunk_index", ANCHORS_KEY),
        )
    except Exception as exc:  # the section is an extra: the page is still the answer
        log.warning("exact_section_failed", error=f"{type(exc).__name__}: {exc}")
        return page
    doc_id = _anchored(
        anchored_sections(sorted(chunks.items(), key=lambda c: (c[1].get("chunk_index", 0), c[0]))),
        anchor,
    )
    if doc_id is None:
        return page
    section = _Hit(doc_id, page.collection)
    _fill_documents(store, [section])
    return section if section.metadata is not None and _trusted(section, plans, levels) else page


def _anchored(starts: Mapping[str, list[str]], anchor: str) -> str | None:
    """The chunk an anchor names: its heading's first section, or for `<anchor>-<n>` (Hugo
    numbers a repeated heading's anchors) its (n+1)th."""
    if anchor in starts:
        return starts[anchor][0]
    base, _, number = anchor.rpartition("-")
    if base and number.isdigit() and int(number) < len(starts.get(base, ())):
        return starts[base][int(number)]
    return None


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


def _language(hit: TitleHit, wanted: str) -> str:
    """The language an exact hit must be in: the search's, except that a pasted URL names its
    page in whatever language the URL is (`/ja/docs/`) unless the caller asked for one."""
    return "all" if hit.kind == "url" and not wanted else wanted


def _exact_result(hit: _Hit) -> SearchResult:
    return SearchResult(
        doc_id=hit.doc_id,
        content=bounded_passage(hit.content or ""),
        metadata=shown(hit.metadata or {}),
        score=1.0,
        source="exact",
    )


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
