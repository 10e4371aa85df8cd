"""Dense retrieval: Chroma's kNN for each collection in scope, with the filtered-query
strategies (unfiltered over-fetch, kNN over the ids BM25's equality index lists, exact ranking
of a few fetched vectors, Chroma's `where` last) and the distance-to-similarity mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from chromadb.errors import ChromaError

from hetriever.core.errors import HetrieverError
from hetriever.core.logs import get_logger
from hetriever.search.candidates import _Hit
from hetriever.store.filters import matches
from hetriever.store.store_types import RetrievalStore

log = get_logger("hetriever.search")


def similarity(distance: float, space: str = "cosine") -> float:
    """Chroma distance -> similarity in [0, 1] for L2-normalised vectors."""
    if space == "l2":  # squared L2 of unit vectors = 2 - 2cos, in [0, 4]
        value = 1.0 - distance / 4.0
    else:  # cosine and ip: 1 - cos, in [0, 2]
        value = 1.0 - distance / 2.0
    return min(1.0, max(0.0, value))


def _dense(
    store: RetrievalStore,
    names: list[str],
    vector: Any,
    n: int,
    wheres: Mapping[str, dict | None],
    hits: dict[str, _Hit],
    *,
    ids_only: bool = False,
    each: bool = False,
) -> list[str]:
    """The `n` nearest chunks over `names`, recorded in `hits` with their similarity; with
    `each`, every collection's `n` nearest, best first (for `routing`, which cuts them).

    `ids_only`: an unfiltered kNN asks Chroma for ids and distances alone, leaving text and
    metadata to be fetched for the chunks a page search shows (`results._Checker`, which
    learns every candidate's page from BM25's copy of its metadata first). Chroma reads a
    row's metadata at ~0.1 ms each: at 50 candidates that was most of the kNN's time
    (bench/README.md). A filtered kNN still reads them, to apply its filter here."""
    found: list[tuple[float, str]] = []
    for name in names:
        col = store.collection(name)
        if col is None:
            continue
        store.check_embedding_model(name, col)
        # No `repository` clause here, unlike BM25: any `where` makes Chroma pre-filter through
        # its metadata store, a cost growing with the collection (about 4x per query at 3k
        # chunks, see bench/bench_store.py). A collection only holds its repository's chunks
        # (the store checks on write) and `_trusted` drops any hit claiming another one. The
        # access and deletion clauses are added only to collections that need them.
        if ids_only and wheres[name] is None:
            rows = _knn(store, col, vector, n, bare=True)
        else:
            rows = _dense_rows(store, col, vector, n, wheres[name], lambda: store.search_bm25(name))
        for doc_id, doc, meta, dist in rows:
            hit = hits.setdefault(doc_id, _Hit(doc_id, name))
            if meta is not None:
                hit.content, hit.metadata = doc, dict(meta)
            hit.dense_score = similarity(float(dist), store.settings.hnsw_space)
            found.append((hit.dense_score, doc_id))
    found.sort(key=lambda t: (-t[0], t[1]))
    return [doc_id for _, doc_id in (found if each else found[:n])]


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
# Chroma's kNN over a short id list slows down as the collection grows (its graph walk meets
# fewer allowed neighbours), fetching does not: at 100k chunks 1,000 ids took 24.6 ms by kNN
# and 22.1 by fetching, so a list of up to 1% of the collection is ranked here too.
EXACT_IDS_SHARE = 0.01


def exact_ids_max(live: int) -> int:
    """Most ids ranked here rather than by Chroma's kNN, in a collection of `live` chunks."""
    return max(EXACT_IDS_MAX, int(live * EXACT_IDS_SHARE))


Row = tuple[str, str, dict | None, float]  # None: not read (`_knn(bare=True)`)


def _dense_rows(
    store: RetrievalStore,
    col: Any,
    vector: Any,
    n: int,
    where: dict | None,
    bm25: Callable[[], Any],
) -> list[Row]:
    """The `n` nearest chunks matching `where`.

    A `where` makes Chroma pre-filter through its metadata store: about 25x the cost of a plain
    kNN at 10k chunks (bench_access). When the BM25 index lists the matching ids (its equality
    index: a section, a file, a language, access levels; at most ID_FILTER_MAX), the query
    searches just those ids (a short list is ranked here from its vectors): reading the
    metadata of an unfiltered look's neighbours to filter them cost more than Chroma's kNN
    over the list at every size measured, and a selective filter needed a second query
    after it (bench/README.md, "Filtered searches"). A filter the index cannot list fetches
    OVERFETCH x n neighbours unfiltered and applies the filter here (`filters.matches`
    mirrors Chroma's semantics, tested against it): exact whenever n of them survive. What
    neither answers goes to Chroma's filtered query.
    """
    if where is None:
        return _knn(store, col, vector, n)
    listed, live = _listed_ids(bm25, where)
    if listed:
        rows = _dense_rows_by_ids(store, col, vector, n, where, listed, live)
        return rows if rows is not None else _knn(store, col, vector, n, where=where)
    wide = max(n * OVERFETCH, MIN_OVERFETCH)
    rows = _knn(store, col, vector, wide)
    kept = [row for row in rows if matches(where, row[2])]
    if len(kept) >= n or len(rows) < wide:  # enough, or the whole collection was seen
        return kept[:n]
    return _knn(store, col, vector, n, where=where)


def _listed_ids(bm25: Callable[[], Any], where: dict) -> tuple[list[str] | None, int]:
    """The ids the BM25 index lists for `where` (None: unknown or more than ID_FILTER_MAX)
    and, when it lists some, how many live chunks it holds; (None, 0) if it cannot tell."""
    try:
        index = bm25()
        listed = index.few_ids_where(where, ID_FILTER_MAX)
        return listed, index.live_count() if listed else 0
    except (HetrieverError, ChromaError) as exc:
        log.debug("dense_ids_unlisted", error=str(exc))
        return None, 0


def _knn(
    store: RetrievalStore, col: Any, vector: Any, n: int, *, bare: bool = False, **restrict: Any
) -> list[Row]:
    """Chroma's `n` nearest, optionally restricted by `where=` or `ids=`; never retried.
    `bare`: ids and distances only (rows with no text and None for metadata)."""
    include = ["distances"] if bare else ["documents", "metadatas", "distances"]
    got = store.call(
        "query",
        lambda: col.query(query_embeddings=[vector], n_results=n, include=include, **restrict),
        retry=False,
    )
    ids, distances = got["ids"][0], got["distances"][0]
    if bare:
        return [(doc_id, "", None, dist) for doc_id, dist in zip(ids, distances)]
    return list(
        zip(ids, got["documents"][0], [dict(m or {}) for m in got["metadatas"][0]], distances)
    )


def _dense_rows_by_ids(
    store: RetrievalStore, col: Any, vector: Any, n: int, where: dict, ids: list[str], live: int
) -> list[Row] | None:
    """The `n` nearest among `ids`, which the BM25 index says match `where` (of `live`
    chunks), or None.

    A short list (`exact_ids_max`) is ranked here by exact distance from the fetched vectors;
    a longer one goes to Chroma's kNN over the id list, which beat a `where` at every size
    measured (bench_filter). The two indexes are written window by window, BM25 committing
    last, so the list can be briefly behind Chroma: an id Chroma already deleted is skipped by
    the fetch and makes Chroma's kNN fail, a chunk whose metadata Chroma already changed is
    dropped by re-checking `where` on Chroma's metadata, and an answer shorter than asked is
    not given (None: the `where` query runs). A chunk Chroma has but BM25 has not committed
    yet is missed for that window, as the BM25 side misses it too.
    """
    try:
        if len(ids) <= exact_ids_max(live):
            rows = exact_nearest(
                lambda **kw: store.call("get", lambda: col.get(**kw), retry=False),
                vector,
                ids,
                n,
                _space(store, col),
            )
        else:
            rows = _knn(store, col, vector, min(n, len(ids)), ids=ids)
    except (HetrieverError, ChromaError) as exc:
        log.debug("dense_ids_query_fell_back", collection=col.name, error=str(exc))
        return None
    rows = [row for row in rows if matches(where, row[2])][:n]
    if len(rows) < min(n, len(ids)):  # a stale id list: do not answer with less
        return None
    return rows


def exact_nearest(
    get: Callable[..., Any], vector: Any, ids: list[str], n: int, space: str
) -> list[Row]:
    """The `n` nearest of `ids` by exact distance, through `get` (Chroma's `col.get`): their
    vectors first, then the text and metadata of the nearest only. A real chunk's text and
    metadata cost ~4x its vector to read (hugo-docs at 100k chunks: 864 records 91 ms with
    them, 26 ms without). An id Chroma no longer holds is skipped."""
    got = get(ids=ids, include=["embeddings"])
    if not len(got["ids"]):
        return []
    dist = vector_distances(
        np.asarray(got["embeddings"], dtype=np.float32), np.asarray(vector, dtype=np.float32), space
    )
    order = np.lexsort((np.asarray(got["ids"]), dist))[:n]  # by distance, ties by id
    nearest = {got["ids"][i]: float(dist[i]) for i in order}
    rows = get(ids=list(nearest), include=["documents", "metadatas"])
    found = {
        doc_id: (doc, dict(meta or {}))
        for doc_id, doc, meta in zip(rows["ids"], rows["documents"], rows["metadatas"])
    }
    return [(doc_id, *found[doc_id], dist) for doc_id, dist in nearest.items() if doc_id in found]


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


def _space(store: RetrievalStore, col: Any) -> str:
    """The collection's own distance space (it was created with the store's setting)."""
    hnsw = (getattr(col, "configuration", None) or {}).get("hnsw") or {}
    return str(hnsw.get("space") or store.settings.hnsw_space)
