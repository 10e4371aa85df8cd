"""Hybrid retrieval: dense kNN (Chroma) + BM25, fused over pages (or chunks).

For each collection in scope, both retrievers fetch `candidate_depth()` candidates under the same
normalised filter (for BM25 AND-ed with the collection's own `repository`; dense queries leave
that clause out for speed and rely on the per-result scope check below, so a caller's filter
can only narrow the scope; a filtered dense query reads unfiltered neighbours first, then the
matching ids the BM25 index lists, and only then Chroma's `where`, see `_dense_rows`). The two
lists are fused as `settings.fusion` says (`hetriever.fusion`): by default score fusion, the
weighted sum of each retriever's standardised (z) scores; or RRF, `sum 1 / (k + rank)`.

Scores:
- dense_score: cosine distance `d` (in [0, 2]) mapped to `1 - d / 2`, so 1.0 is identical,
  0.5 orthogonal, 0.0 opposite. Linear and never clamped for the cosine space.
- bm25_score: the raw BM25 score divided by the best raw score among the candidates.
- score: in hybrid mode the fused score mapped into [0, 1] keeping its order (score fusion:
  the logistic of the weighted z-sum, so 0.5 is an average candidate; RRF: divided by its
  maximum `2 / (k + 1)`); the dense or BM25 score when only one retriever ran (hybrid off, or
  the other failed). `similarity_threshold` applies to it.

Every result is checked before it is returned: its `repository` must be in scope, its text must
hash to its `content_hash`, and the caller must be allowed to see it (`hetriever.access`: the
collection's level and the chunk's own level, not soft-deleted); anything else is dropped and
logged. Collections the caller may not see are never queried.

Exact-match fast path: a query equal (trimmed, case-insensitive) to a page's title, linkTitle,
alias or function name returns that page's first chunk first (source "exact", score 1.0), looked
up in the catalog; the fused results follow, without duplicates.

Searches read the catalog's alias pointers; if a migration switches one while a search runs
(the catalog's alias epoch changed), the search runs again, so it never mixes two generations.

Chroma Cloud has a native sparse index and a Search API with RRF built in; local Chroma
(embedded or `chroma run`) does not. `native_sparse_available()` is the switch: when it is True
the Cloud path would be used. That path is not implemented, so the local one always runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from chromadb.errors import ChromaError

from hetriever.access import CollectionPlan, caller_levels, declared_level, denial
from hetriever.errors import BackendConnectionError, HetrieverError, InvalidLimitError, SearchError
from hetriever.filters import and_filters, matches, validate_filter
from hetriever.fusion import FusedPage, fuse_pages, ordered, rrf_fuse, score_fuse
from hetriever.logs import get_logger
from hetriever.models import RetrievalResult, SearchResult

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
CLOUD_HOST_SUFFIX = "trychroma.com"
EPOCH_RETRIES = 3  # a search re-runs at most this often when an alias switches under it


def native_sparse_available(client: Any) -> bool:
    """True only for Chroma Cloud, which has sparse indexes and the Search/Rrf API.

    Embedded (PersistentClient) and `chroma run` servers (HttpClient) have neither.
    """
    try:
        settings = client.get_settings()
    except Exception:
        return False
    host = str(getattr(settings, "chroma_server_host", "") or "")
    return host.endswith(CLOUD_HOST_SUFFIX)


def similarity(distance: float, space: str = "cosine") -> float:
    """Chroma distance -> similarity in [0, 1] for L2-normalised vectors."""
    if space == "l2":  # squared L2 of unit vectors = 2 - 2cos, in [0, 4]
        value = 1.0 - distance / 4.0
    else:  # cosine and ip: 1 - cos, in [0, 2]
        value = 1.0 - distance / 2.0
    return min(1.0, max(0.0, value))


def resolve_top_k(top_k: Any, default: int, maximum: int) -> int:
    if top_k is None:
        return default
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise InvalidLimitError(f"top_k must be an integer, got {top_k!r}")
    if top_k < 1:
        return default
    if top_k > maximum:
        raise InvalidLimitError(f"top_k {top_k} is above the maximum of {maximum}",
                                hint=f"ask for at most {maximum} results")
    return top_k


@dataclass
class _Hit:
    doc_id: str
    collection: str
    content: str | None = None
    metadata: dict[str, Any] | None = None
    dense_score: float | None = None
    bm25_raw: float | None = None
    # BM25's own copy of the metadata: enough to know a BM25-only hit's page before its text
    # and metadata are fetched from Chroma (the source of truth) for display.
    label: dict[str, Any] | None = None

    @property
    def page_metadata(self) -> dict[str, Any]:
        return self.metadata if self.metadata is not None else (self.label or {})


def _scope(store: Any, namespaces: Sequence[str] | None) -> list[str]:
    """Repositories in scope: the named ones (validated) that have a searchable collection."""
    from hetriever.names import validate_collection_name

    existing = store.repository_names()  # the catalog: answers while Chroma is down
    if namespaces is None:
        return existing
    if isinstance(namespaces, str):
        namespaces = [namespaces]
    wanted = list(dict.fromkeys(validate_collection_name(n) for n in namespaces))
    missing = [n for n in wanted if n not in existing]
    if missing:
        log.info("search_namespace_missing", namespaces=missing)
    return [n for n in wanted if n in existing]


def plan_collections(store: Any, names: list[str]) -> dict[str, CollectionPlan]:
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
        plans[name] = CollectionPlan(
            repository=name, collection=physical,
            declared=declared_level(store.settings, name, record.access_level if record else None),
            chunk_levels=set(collection.levels) if collection else set(),
            has_deleted=catalog.has_deleted(physical),
            languages=tuple(str(lang) for lang in languages))
    return plans


def _dense(store: Any, names: list[str], vector: Any, n: int,
           wheres: Mapping[str, dict | None], hits: dict[str, _Hit]) -> list[str]:
    found: list[tuple[float, str]] = []
    for name in names:
        col = store._chroma(name)
        if col is None:
            continue
        store.check_embedding_model(name, col)
        # No `repository` clause here, unlike BM25: any `where` makes Chroma pre-filter through
        # its metadata store, a cost growing with the collection (about 4x per query at 3k
        # chunks, see bench/bench_store.py). A collection only holds its repository's chunks
        # (the store checks on write) and `_trusted` drops any hit claiming another one. The
        # access and deletion clauses are added only to collections that need them.
        rows = _dense_rows(store, col, vector, n, wheres[name], lambda: store.search_bm25(name))
        for doc_id, doc, meta, dist in rows:
            hit = hits.setdefault(doc_id, _Hit(doc_id, name))
            hit.content, hit.metadata = doc, dict(meta or {})
            hit.dense_score = similarity(float(dist), store.settings.hnsw_space)
            found.append((hit.dense_score, doc_id))
    found.sort(key=lambda t: (-t[0], t[1]))
    return [doc_id for _, doc_id in found[:n]]


OVERFETCH = 4  # unfiltered candidates per wanted one before falling back to a `where` query
MIN_OVERFETCH = 50
# Most matching ids a dense query is restricted to by `ids=`; past it, Chroma's `where` runs.
# At 100k chunks an id list beat `where` at every size measured, up to 50k ids (4.6x embedded,
# 3.6x over HTTP to `chroma run`).
ID_FILTER_MAX = 50_000
# Up to this many, the matching chunks' vectors are fetched and ranked here instead, exactly.
# Fetching costs ~20 us per id embedded (~55 over HTTP); Chroma's kNN over a short id list
# walks its graph for few allowed neighbours: 3-4 ms at 10k chunks, 37-60 ms at 100k for up to
# 300 ids (bench_filter). At 200 ids ranking here is at most ~1 ms slower at 10k and 30-55 ms
# faster at 100k.
EXACT_IDS_MAX = 200

Row = tuple[str, str, dict, float]


def _dense_rows(store: Any, col: Any, vector: Any, n: int, where: dict | None,
                bm25: Callable[[], Any]) -> list[Row]:
    """The `n` nearest chunks matching `where`.

    A `where` makes Chroma pre-filter through its metadata store: about 25x the cost of a plain
    kNN at 10k chunks (bench_access). So filtered queries first fetch OVERFETCH x n neighbours
    unfiltered and apply the filter here (`filters.matches` mirrors Chroma's semantics, tested
    against it); that is exact whenever n of them survive, which is the common case for access
    and deletion clauses. A selective filter (a section, a file) leaves too few: then the
    query is restricted to the matching ids, which the BM25 index knows from its equality
    index (a few hundred are ranked here from their vectors), and only when that cannot answer
    does Chroma's filtered query run.
    """
    if where is None:
        return _knn(store, col, vector, n)
    wide = max(n * OVERFETCH, MIN_OVERFETCH)
    rows = _knn(store, col, vector, wide)
    kept = [row for row in rows if matches(where, row[2])]
    if len(kept) >= n or len(rows) < wide:  # enough, or the whole collection was seen
        return kept[:n]
    by_ids = _dense_rows_by_ids(store, col, vector, n, where, bm25)
    return by_ids if by_ids is not None else _knn(store, col, vector, n, where=where)


def _knn(store: Any, col: Any, vector: Any, n: int, **restrict: Any) -> list[Row]:
    """Chroma's `n` nearest, optionally restricted by `where=` or `ids=`; never retried."""
    got = store._call("query", lambda: col.query(
        query_embeddings=[vector], n_results=n, include=["documents", "metadatas", "distances"],
        **restrict), retry=False)
    return list(zip(got["ids"][0], got["documents"][0],
                    [dict(m or {}) for m in got["metadatas"][0]], got["distances"][0]))


def _dense_rows_by_ids(store: Any, col: Any, vector: Any, n: int, where: dict,
                       bm25: Callable[[], Any]) -> list[Row] | None:
    """The `n` nearest among the ids the BM25 index says match `where`, or None.

    Up to EXACT_IDS_MAX ids, their records are fetched and ranked here by exact distance; more
    go to Chroma's kNN over the id list, which beat a `where` at every size measured
    (bench_filter). The two indexes are written window by window, BM25 committing last, so the
    list can be briefly behind Chroma: an id Chroma already deleted is skipped by the fetch
    and makes Chroma's kNN fail, a chunk whose metadata Chroma already changed is dropped by
    re-checking `where` on Chroma's metadata, and an answer shorter than asked is not given
    (None: the `where` query runs). A chunk Chroma has but BM25 has not committed yet is
    missed for that window, as the BM25 side misses it too.
    """
    try:
        ids = bm25().few_ids_where(where, ID_FILTER_MAX)
        if not ids:  # unknown, too many, or none: let Chroma's `where` decide
            return None
        if len(ids) <= EXACT_IDS_MAX:
            got = store._call("get", lambda: col.get(
                ids=ids, include=["embeddings", "documents", "metadatas"]), retry=False)
            rows = rank_records(got, vector, _space(store, col))
        else:
            rows = _knn(store, col, vector, min(n, len(ids)), ids=ids)
    except (HetrieverError, ChromaError) as exc:
        log.debug("dense_ids_query_fell_back", collection=col.name, error=str(exc))
        return None
    rows = [row for row in rows if matches(where, row[2])][:n]
    if len(rows) < min(n, len(ids)):  # a stale id list: do not answer with less
        return None
    return rows


def rank_records(got: Mapping[str, Any], vector: Any, space: str) -> list[Row]:
    """Every record of a Chroma `get` (with embeddings), nearest first, by exact distance."""
    if not len(got["ids"]):
        return []
    dist = vector_distances(np.asarray(got["embeddings"], dtype=np.float32),
                            np.asarray(vector, dtype=np.float32), space)
    order = np.lexsort((np.asarray(got["ids"]), dist))  # by distance, ties by id
    return [(got["ids"][i], got["documents"][i], dict(got["metadatas"][i] or {}),
             float(dist[i])) for i in order]


def vector_distances(matrix: np.ndarray, vector: np.ndarray, space: str) -> np.ndarray:
    """Chroma's distance from `vector` to each row: squared L2, 1 - dot, or 1 - cosine."""
    if space == "l2":
        diff = matrix - vector
        return np.einsum("ij,ij->i", diff, diff)
    dots = matrix @ vector
    if space == "ip":
        return 1.0 - dots
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(vector)
    return 1.0 - dots / np.where(norms == 0.0, 1.0, norms)


def _space(store: Any, col: Any) -> str:
    """The collection's own distance space (it was created with the store's setting)."""
    hnsw = (getattr(col, "configuration", None) or {}).get("hnsw") or {}
    return str(hnsw.get("space") or store.settings.hnsw_space)



def _bm25(store: Any, names: list[str], query: str, n: int,
          wheres: Mapping[str, dict | None], hits: dict[str, _Hit]) -> list[str]:
    found: list[tuple[float, str]] = []
    for name in names:
        where = wheres[name]
        for doc_id, raw in store.search_bm25(name).search(query, n, where):
            hit = hits.setdefault(doc_id, _Hit(doc_id, name))
            hit.bm25_raw = float(raw)
            found.append((hit.bm25_raw, doc_id))
    # Raw BM25 of different collections share a scale well enough to interleave.
    found.sort(key=lambda t: (-t[0], t[1]))
    return [doc_id for _, doc_id in found[:n]]


def _fill_documents(store: Any, hits: list[_Hit]) -> None:
    """BM25-only hits get their text and metadata from Chroma; BM25's own copy is used only
    while Chroma cannot be reached. A row Chroma answered without is stale (left by a crash
    before BM25 caught up) and is never served."""
    by_collection: dict[str, list[_Hit]] = {}
    for hit in hits:
        if hit.content is None or hit.metadata is None:
            by_collection.setdefault(hit.collection, []).append(hit)
    for name, group in by_collection.items():
        ids = [h.doc_id for h in group]
        try:
            col = store._chroma(name)
            got = store._call("get", lambda: col.get(ids=ids, include=["documents", "metadatas"]),
                              retry=False) if col is not None else {"ids": []}
            fetched = {i: (d, m) for i, d, m in zip(got["ids"], got.get("documents") or [],
                                                     got.get("metadatas") or [])}
            chroma_answered = True
        except Exception as exc:
            log.warning("search_fetch_failed", collection=name, error=str(exc))
            fetched, chroma_answered = {}, False
        for hit in group:
            if hit.doc_id in fetched:
                hit.content, meta = fetched[hit.doc_id]
                hit.metadata = dict(meta or {})
                continue
            if chroma_answered:
                log.warning("result_missing_in_chroma", doc_id=hit.doc_id, collection=name)
                continue
            try:
                stored = store.search_bm25(name).get(hit.doc_id)
            except HetrieverError:  # Chroma down and BM25 damaged: nothing to show
                stored = None
            if stored is not None:
                hit.content, hit.metadata = _bm25_record(stored)


def _bm25_record(stored: Any) -> tuple[str | None, dict[str, Any] | None]:
    """(text, metadata) from whatever `BM25Index.get` returns (a tuple, dict or object)."""
    if isinstance(stored, tuple):
        text, meta = stored[0], stored[1]
    elif isinstance(stored, Mapping):
        text, meta = stored.get("text"), stored.get("metadata")
    else:
        text, meta = getattr(stored, "text", None), getattr(stored, "metadata", None)
    return text, dict(meta or {})


def _trusted(hit: _Hit, plans: Mapping[str, CollectionPlan], levels: frozenset[str]) -> bool:
    from hetriever.names import content_hash

    meta = hit.metadata or {}
    if hit.content is None:
        log.warning("result_without_content", doc_id=hit.doc_id, collection=hit.collection)
        return False
    if meta.get("repository") not in plans or meta.get("repository") != hit.collection:
        log.warning("result_out_of_scope", doc_id=hit.doc_id, collection=hit.collection,
                    repository=meta.get("repository"))
        return False
    if meta.get("content_hash") != content_hash(hit.content):
        log.warning("result_hash_mismatch", doc_id=hit.doc_id, collection=hit.collection)
        return False
    why = denial(plans[hit.collection], meta, levels)
    if why is not None:
        # The store-side filter should have kept it out: this is the second layer at work.
        log.warning("result_access_denied", doc_id=hit.doc_id, collection=hit.collection,
                    reason=why)
        return False
    return True


def _exact(store: Any, query: str, plans: Mapping[str, CollectionPlan],
           levels: frozenset[str], user_filter: dict | None,
           wanted_lang: str = "") -> SearchResult | None:
    """The page whose title / linkTitle / alias / function name equals the query, if any."""
    by_physical = {p.collection: name for name, p in plans.items()}
    try:
        candidates = store.catalog.lookup_title(query, list(by_physical))
    except Exception as exc:  # the fast path is an extra; it never fails a search
        log.warning("exact_lookup_failed", error=f"{type(exc).__name__}: {exc}")
        return None
    for candidate in candidates:
        name = by_physical[candidate.collection]
        hit = _Hit(candidate.chunk_id, name)
        _fill_documents(store, [hit])
        if hit.metadata is None or not matches(user_filter, hit.metadata):
            continue
        if not matches(plans[name].language_clause(wanted_lang), hit.metadata):
            continue
        if not _trusted(hit, plans, levels):
            continue
        return SearchResult(doc_id=hit.doc_id, content=hit.content or "", metadata=hit.metadata,
                            score=1.0, source="exact")
    return None


def hybrid_search(store: Any, query: str, top_k: int | None = None,
                  filters: dict[str, Any] | None = None, *,
                  namespaces: Sequence[str] | None = None,
                  hybrid: bool | None = None,
                  access_levels: Sequence[str] | str | None = None,
                  exact: bool = True, group_by: str | None = None,
                  lang: str | None = None) -> RetrievalResult:
    """Run one search against `store` (a ChromaKnowledgeStore). See the module docstring.

    `access_levels`: the levels the caller may see (default PUBLIC only).
    `exact`: use the exact-title fast path.
    `group_by`: "page" (one result per page, its best chunk first; the default from settings)
    or "chunk".
    `lang`: a language code, "all", or None for `settings.search_language` ("" = each
    multilingual site's default language; single-language sites are not filtered).
    """
    started = time.perf_counter()
    settings = store.settings
    k = resolve_top_k(top_k, settings.default_top_k, settings.max_top_k)
    user_filter = validate_filter(filters)
    levels = caller_levels(access_levels)
    use_hybrid = settings.use_hybrid_search if hybrid is None else bool(hybrid)
    group = settings.group_by if group_by is None else group_by
    if group not in ("page", "chunk"):
        raise InvalidLimitError(f"group_by must be 'page' or 'chunk', got {group_by!r}")
    text = query if isinstance(query, str) else ""
    wanted = (settings.search_language if lang is None else lang).strip().lower()
    if wanted and not _LANG_CODE.match(wanted):
        raise InvalidLimitError(f"lang must be a language code such as 'en' or 'pt-br', or "
                                f"'all', got {lang!r}")
    if wanted and user_filter is not None and "lang" in json.dumps(user_filter):
        wanted = "all"  # the caller's own filter on `lang` decides
    for attempt in range(1, EPOCH_RETRIES + 2):
        epoch = store.catalog.alias_epoch()
        try:
            result = _search_once(store, text, k, user_filter, levels, namespaces, use_hybrid,
                                  exact, group, started, wanted)
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


def _search_once(store: Any, text: str, k: int, user_filter: dict | None,
                 levels: frozenset[str], namespaces: Sequence[str] | None, use_hybrid: bool,
                 exact: bool, group_by: str, started: float,
                 wanted_lang: str = "") -> RetrievalResult:
    settings = store.settings

    def done(matches: list[SearchResult], mode: str, counts: dict[str, int]) -> RetrievalResult:
        ms = (time.perf_counter() - started) * 1000.0
        return RetrievalResult(query=text, matches=matches, total_results=len(matches),
                               search_time_ms=ms, mode=mode, retriever_counts=counts)

    names = _scope(store, namespaces)
    plans = plan_collections(store, names) if text.strip() else {}
    hidden = [name for name, p in plans.items() if not p.visible(levels)]
    if hidden:
        log.debug("search_collections_hidden", repositories=hidden, levels=sorted(levels))
    plans = {name: p for name, p in plans.items() if p.visible(levels)}
    names = list(plans)
    if not text.strip() or not names:
        return done([], "hybrid" if use_hybrid else "dense", {"dense": 0, "bm25": 0, "merged": 0})
    # The caller's filter is AND-ed with the access and deletion clauses, so it can only narrow.
    wheres = {name: and_filters(and_filters(p.where(levels), p.language_clause(wanted_lang)),
                                user_filter) for name, p in plans.items()}
    exact_hit = _exact(store, text, plans, levels, user_filter, wanted_lang) if exact else None
    if native_sparse_available(store.client):
        log.info("native_sparse_not_used", reason="Cloud search path not implemented")

    weight = dense_weight_for(settings, _search_language(wanted_lang, plans))
    if weight != settings.dense_weight:  # both validated already: no second validation
        settings = dataclasses.replace(settings, dense_weight=weight)
    n = candidate_depth(k, group_by)
    hits: dict[str, _Hit] = {}
    dense_ids: list[str] | None = None
    bm25_ids: list[str] | None = None
    try:
        vector = store.embedder.embed([text[:MAX_QUERY_CHARS]])[0]
        dense_ids = _dense(store, names, vector, n, wheres, hits)
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
        raise SearchError(f"both retrievers failed for query {text[:80]!r}",
                          hint="see the log for each retriever's error")
    if dense_ids is not None and bm25_ids is not None:
        mode = "hybrid"
    else:
        mode = "dense" if dense_ids is not None else "bm25"

    rankings = {"dense": dense_ids or [], "bm25": bm25_ids or []}
    check = _Checker(store, hits, plans, levels)
    if group_by == "page":
        rankings = _verify_top_pages(check, rankings, settings, k + 1)
    else:
        check.verify(list(dict.fromkeys(rankings["dense"] + rankings["bm25"])))
        rankings = {name: [d for d in ids if d in check.trusted] for name, ids in rankings.items()}
    scored = _Scored(rankings, hits, check.trusted, mode, settings)
    if group_by == "page":
        results = _page_results(scored, exact_hit)
    else:
        results = _chunk_results(scored, exact_hit)
    results = results[:k]
    _add_translations(store, plans, results)
    counts = {"dense": len(rankings["dense"]), "bm25": len(rankings["bm25"]),
              "merged": len(set(rankings["dense"]) | set(rankings["bm25"]))}
    out = done(results, mode, counts)
    log.info("search_done", mode=mode, group_by=group_by, dense=counts["dense"],
             bm25=counts["bm25"], merged=counts["merged"], results=len(results),
             collections=len(names), exact=exact_hit is not None,
             ms=round(out.search_time_ms, 1))
    return out


class _Checker:
    """Fetches candidates' text and metadata from Chroma and checks them (`_trusted`), once."""

    def __init__(self, store: Any, hits: dict[str, _Hit], plans: Mapping[str, CollectionPlan],
                 levels: frozenset[str]) -> None:
        self.store, self.hits, self.plans, self.levels = store, hits, plans, levels
        self.trusted: set[str] = set()
        self.dropped: set[str] = set()

    def verify(self, doc_ids: Sequence[str]) -> None:
        todo = [self.hits[d] for d in dict.fromkeys(doc_ids)
                if d not in self.trusted and d not in self.dropped]
        _fill_documents(self.store, todo)
        for hit in todo:
            (self.trusted if _trusted(hit, self.plans, self.levels) else self.dropped).add(
                hit.doc_id)

    def label(self) -> None:
        """BM25-only hits learn their page from BM25's metadata, without a Chroma fetch."""
        by_collection: dict[str, list[str]] = {}
        for d, hit in self.hits.items():
            if hit.metadata is None and hit.label is None:
                by_collection.setdefault(hit.collection, []).append(d)
        for name, ids in by_collection.items():
            try:
                known = self.store.search_bm25(name).metadata_of(ids)
            except Exception as exc:  # unlabelled hits are then fetched like any other
                log.warning("bm25_metadata_failed", collection=name, error=str(exc))
                known = {}
            for d in ids:
                self.hits[d].label = known.get(d)


PAGE_VERIFY_ROUNDS = 4  # a stale chunk dropped from a top page changes the pages: look again


def _verify_top_pages(check: _Checker, rankings: dict[str, list[str]], settings: Any,
                      pages: int) -> dict[str, list[str]]:
    """Rankings in which every chunk that places or shows one of the top `pages` pages has
    been fetched from Chroma and checked; chunks that failed are removed.

    A page is placed by its best chunk in each ranking and shown with its first
    PASSAGES_PER_PAGE chunks; only those are fetched, not every candidate (a search asks each
    retriever for PAGE_CANDIDATE_FACTOR x top_k chunks, most of which never reach the top).
    """
    check.label()
    for _ in range(PAGE_VERIFY_ROUNDS):
        live = {name: [d for d in ids if d not in check.dropped] for name, ids in
                rankings.items()}
        page_of = _page_of(check.hits, live)
        needed: list[str] = []
        for page in _fuse_pages(settings, check.hits, live, page_of)[:pages]:
            needed.extend(page.chunks[:PASSAGES_PER_PAGE])
            for ids in live.values():
                needed.extend(next(([d] for d in ids if page_of.get(d) == page.page), []))
        if all(d in check.trusted for d in needed):
            return live
        check.verify(needed)
    return {name: [d for d in ids if d in check.trusted] for name, ids in rankings.items()}


CJK_LANGUAGES = frozenset({"ja", "zh", "ko"})


def dense_weight_for(settings: Any, lang: str) -> float:
    """Dense's share of score fusion for a search in `lang` ("" or "en": English, the
    embedding model's language)."""
    base = lang.split("-")[0]
    if not base or base == "en" or base == "all":
        return settings.dense_weight
    return settings.dense_weight_cjk if base in CJK_LANGUAGES else settings.dense_weight_other


def _search_language(wanted: str, plans: Mapping[str, CollectionPlan]) -> str:
    """The language a search runs in: the one asked for, else the sites' common default."""
    if wanted:
        return wanted
    defaults = {p.languages[0] for p in plans.values() if p.languages}
    return defaults.pop() if len(defaults) == 1 else ""


def _fusion_weights(settings: Any) -> dict[str, float]:
    return {"dense": settings.dense_weight, "bm25": 1.0 - settings.dense_weight}


def _retriever_scores(hits: Mapping[str, _Hit], rankings: Mapping[str, Sequence[str]]
                      ) -> dict[str, dict[str, float]]:
    """Each retriever's own score of its candidates: dense similarity, raw BM25."""
    return {"dense": {d: hits[d].dense_score or 0.0 for d in rankings["dense"]},
            "bm25": {d: hits[d].bm25_raw or 0.0 for d in rankings["bm25"]}}


def _fuse_pages(settings: Any, hits: Mapping[str, _Hit], rankings: Mapping[str, Sequence[str]],
                page_of: Mapping[str, str]) -> list[FusedPage]:
    """Pages as `settings.fusion` fuses them (hetriever.fusion)."""
    if settings.fusion == "rrf":
        return fuse_pages(rankings, page_of, settings.rrf_k)
    return fuse_pages(rankings, page_of, settings.rrf_k, _fusion_weights(settings),
                      scores=_retriever_scores(hits, rankings))


def _page_of(hits: Mapping[str, _Hit], rankings: Mapping[str, Sequence[str]]) -> dict[str, str]:
    return {d: page_key(hits[d].page_metadata, hits[d].collection)
            for ids in rankings.values() for d in ids if hits[d].page_metadata}


class _Scored:
    """Each candidate chunk's scores: dense similarity, BM25 normalised by the best raw score
    among the candidates, and the final score (fused, or the one retriever's). Only `shown`
    chunks (fetched and checked) may become results; the others still count for ranks."""

    def __init__(self, rankings: dict[str, list[str]], hits: dict[str, _Hit], shown: set[str],
                 mode: str, settings: Any) -> None:
        self.rankings, self.hits, self.mode, self.settings = rankings, hits, mode, settings
        self.shown, self.threshold = shown, settings.similarity_threshold
        self.max_rrf = 2.0 / (settings.rrf_k + 1)
        in_bm25 = set(rankings["bm25"])
        best = max((hits[d].bm25_raw or 0.0 for d in in_bm25), default=0.0)
        self.dense = {d: hits[d].dense_score for d in rankings["dense"]}
        self.bm25 = {d: (hits[d].bm25_raw or 0.0) / best if best > 0 else 0.0 for d in in_bm25}

    def fuse_chunks(self) -> dict[str, float]:
        if self.settings.fusion == "rrf":
            return rrf_fuse(self.rankings, self.settings.rrf_k)
        return score_fuse(_retriever_scores(self.hits, self.rankings),
                          _fusion_weights(self.settings))

    def score(self, fused: float, dense: float | None, bm25: float | None) -> float:
        if self.mode == "hybrid" and self.settings.fusion == "rrf":
            return min(1.0, fused / self.max_rrf)
        if self.mode == "hybrid":  # weighted z-scores, mapped into (0, 1) keeping the order
            return 1.0 / (1.0 + math.exp(-fused))
        return (dense if self.mode == "dense" else bm25) or 0.0

    def result(self, doc_id: str, *, score: float, dense: float | None, bm25: float | None,
               rrf: float | None, passages: list[dict[str, Any]] | None = None) -> SearchResult:
        hit = self.hits[doc_id]
        source = "hybrid" if dense is not None and bm25 is not None else (
            "dense" if dense is not None else "bm25")
        return SearchResult(doc_id=doc_id, content=hit.content or "", metadata=hit.metadata or {},
                            score=score, source=source, dense_score=dense, bm25_score=bm25,
                            rrf_score=rrf if self.mode == "hybrid" else None,
                            passages=passages or [])


def _chunk_results(scored: _Scored, exact_hit: SearchResult | None) -> list[SearchResult]:
    """One result per chunk, by chunk-level RRF."""
    fused = scored.fuse_chunks()
    results = []
    for doc_id in ordered(fused):
        dense, bm25 = scored.dense.get(doc_id), scored.bm25.get(doc_id)
        results.append(scored.result(doc_id, score=scored.score(fused[doc_id], dense, bm25),
                                     dense=dense, bm25=bm25, rrf=fused[doc_id]))
    results.sort(key=lambda r: (-r.score, r.doc_id))
    results = [r for r in results if r.score >= scored.threshold]
    if exact_hit is not None:
        results = [exact_hit] + [r for r in results if r.doc_id != exact_hit.doc_id]
    return results


PASSAGES_PER_PAGE = 3  # chunks shown for a page result: the best one and up to two more


def _page_results(scored: _Scored, exact_hit: SearchResult | None) -> list[SearchResult]:
    """One result per page (see `hetriever.fusion`): the page's best chunk is the result's
    text, its next chunks are `passages`, its scores are the best of its chunks'."""
    page_of = _page_of(scored.hits, scored.rankings)
    results = []
    for page in _fuse_pages(scored.settings, scored.hits, scored.rankings, page_of):
        shown = [c for c in page.chunks[:PASSAGES_PER_PAGE] if c in scored.shown]
        if not shown:  # below the verified top: not shown
            continue
        dense = max((d for c in page.chunks if (d := scored.dense.get(c)) is not None),
                    default=None)
        bm25 = max((scored.bm25[c] for c in page.chunks if c in scored.bm25), default=None)
        passages = [_passage(scored.hits[c]) for c in shown[1:]]
        results.append(scored.result(shown[0], score=scored.score(page.fused, dense, bm25),
                                     dense=dense, bm25=bm25, rrf=page.fused, passages=passages))
    if scored.mode != "hybrid":  # one retriever: its own score orders the pages
        results.sort(key=lambda r: (-r.score, r.doc_id))
    results = [r for r in results if r.score >= scored.threshold]
    if exact_hit is not None:
        exact_page = page_key(exact_hit.metadata, str(exact_hit.metadata.get("repository")))
        rest = [r for r in results
                if page_key(r.metadata, str(r.metadata.get("repository"))) != exact_page]
        results = [exact_hit] + rest
    return results


def _add_translations(store: Any, plans: Mapping[str, CollectionPlan],
                      results: list[SearchResult]) -> None:
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
            others = index.metadata_of(index.ids_where({"translation_key": key}))
        except Exception as exc:  # naming translations is an extra; never fail a search
            log.warning("translations_lookup_failed", repository=name, error=str(exc))
            continue
        seen: dict[str, dict[str, Any]] = {}
        for other in others.values():
            lang = str(other.get("lang", ""))
            if lang and lang != meta.get("lang") and lang not in seen:
                seen[lang] = {"lang": lang, "url": other.get("url", ""),
                              "title": other.get("title", "")}
        result.translations = [seen[lang] for lang in sorted(seen)]


def page_key(metadata: Mapping[str, Any], collection: str) -> str:
    """The page a chunk belongs to: its repository and file."""
    return f"{collection}\x1f{metadata.get('file_path', '')}"


def _passage(hit: _Hit) -> dict[str, Any]:
    meta = hit.metadata or {}
    return {"doc_id": hit.doc_id, "heading_context": meta.get("heading_context", ""),
            "content": hit.content or ""}


async def retrieve(store: Any, query: str, top_k: int | None = None,
                   filters: dict[str, Any] | None = None, *,
                   namespaces: Sequence[str] | None = None,
                   hybrid: bool | None = None,
                   access_levels: Sequence[str] | str | None = None,
                   exact: bool = True, group_by: str | None = None,
                   lang: str | None = None) -> RetrievalResult:
    """`hybrid_search` off the event loop (embedding and Chroma calls block)."""
    return await asyncio.to_thread(hybrid_search, store, query, top_k, filters,
                                   namespaces=namespaces, hybrid=hybrid,
                                   access_levels=access_levels, exact=exact, group_by=group_by,
                                   lang=lang)
