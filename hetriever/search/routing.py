"""Many sites as one ranking: which of the collections in scope a query is about.

Each site's BM25 scores sit on its own scale (its idf), and score fusion standardises each
retriever's list: searched together, a site that has nothing near a question still brings
its best keyword match, scored as if it were the best answer overall (bench/README.md, "Many
sites"). Dense similarities, from one model, do compare across sites. So a search over
several collections first asks each for its own dense candidates, and gives each collection
a relevance: the mean similarity of its `ROUTE_TOP` nearest chunks (a site with many pages
near the question beats one page of a small site that happens to share its words), plus a
little of the query's cosine to the site's mean vector (what the site as a whole is about:
a question about a blog's theme is Hugo's even when an OpenTelemetry blog post is near); a
near site with far more of the query's words (its best BM25 score, idf over all the sites)
takes the lead (`keyword_veto`). A
collection whose relevance is more than `settings.route_margin` below the best one's is left
out; the others' candidates are merged (dense by similarity; BM25 with idf over the kept
sites together, `CorpusStats`), as if they were one site.

A query plainly about one site is thus searched as in that site alone; one that two sites
answer alike keeps both. The sites left out only fill up a search the kept ones cannot
(fewer results than asked for: `hybrid._filling`), after every result of theirs. Without dense candidates (dense failed, or hybrid off with nothing
found) nothing is left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hetriever.core import caches
from hetriever.core.logs import get_logger
from hetriever.search.candidates import _Hit
from hetriever.store.store_types import RetrievalStore

log = get_logger("hetriever.search")

ROUTE_TOP = 5  # nearest chunks a collection's relevance averages (swept in bench/README.md)
CENTROID_WEIGHT = 0.3  # weight of the query's cosine to the site's mean vector (swept too)
CENTROID_BATCH = 5000  # vectors read from Chroma at a time for a site's mean
# A site within VETO_GAP of the most relevant one whose best BM25 score the most relevant
# does not reach VETO_SHARE of is kept instead (`keyword_veto`; swept in bench/README.md).
VETO_GAP, VETO_SHARE = 0.07, 0.5
_CENTROIDS: dict[tuple[str, int], np.ndarray | None] = {}
_CENTROIDS_MAX = 256
caches.register("site centroids", _CENTROIDS.clear)


def centroid(store: RetrievalStore, name: str) -> np.ndarray | None:
    """The unit mean of a collection's vectors: what the site as a whole is about. Read once
    per BM25 generation (it moves with every write), in batches; None when it cannot be read."""
    try:
        key = (str(store.physical_name(name)), store.search_bm25(name).generation())
        if key in _CENTROIDS:
            return _CENTROIDS[key]
        col = store.collection(name)
        total, count, offset = None, 0, 0
        while col is not None:
            got = col.get(include=["embeddings"], limit=CENTROID_BATCH, offset=offset)
            vectors = np.asarray(got["embeddings"], dtype=np.float64)
            if not len(vectors):
                break
            total = vectors.sum(axis=0) if total is None else total + vectors.sum(axis=0)
            count, offset = count + len(vectors), offset + CENTROID_BATCH
        value = None
        if total is not None and count:
            norm = float(np.linalg.norm(total))
            value = (total / norm).astype(np.float32) if norm > 0 else None
    except Exception as exc:  # routing is an extra: without a centroid the site counts 0
        log.warning("site_centroid_failed", repository=name, error=f"{type(exc).__name__}: {exc}")
        return None
    if len(_CENTROIDS) >= _CENTROIDS_MAX:
        _CENTROIDS.clear()
    _CENTROIDS[key] = value
    return value


def relevance(
    hits: Mapping[str, _Hit],
    dense_ids: Sequence[str],
    top: int = ROUTE_TOP,
    centroids: Mapping[str, np.ndarray | None] | None = None,
    vector: Any = None,
    centroid_weight: float = CENTROID_WEIGHT,
) -> dict[str, float]:
    """Collection -> mean dense similarity of its `top` nearest candidates (ids best first),
    plus `centroid_weight` x the query vector's cosine to the collection's centroid."""
    seen: dict[str, list[float]] = {}
    for doc_id in dense_ids:
        hit = hits[doc_id]
        sims = seen.setdefault(hit.collection, [])
        if len(sims) < top:
            sims.append(hit.dense_score or 0.0)
    out = {name: sum(s) / len(s) for name, s in seen.items() if s}
    if centroids and vector is not None:
        query = np.asarray(vector, dtype=np.float32)
        for name in out:
            mean = centroids.get(name)
            if mean is not None:
                out[name] += centroid_weight * float(query @ mean)
    return out


def keyword_veto(
    scores: Mapping[str, float],
    keywords: Mapping[str, float],
    gap: float = VETO_GAP,
    share: float = VETO_SHARE,
) -> dict[str, float]:
    """`scores` with the most relevant site giving way to a near one (within `gap`) whose
    best BM25 match (idf over all the sites) it does not reach `share` of: dense finds
    OpenTelemetry's telemetry pages near a question about Google Analytics, while only Hugo
    has the words."""
    if not scores or not keywords:
        return dict(scores)
    top = max(scores, key=lambda name: (scores[name], name))
    rivals = [
        name
        for name in scores
        if name != top
        and scores[top] - scores[name] < gap
        and keywords.get(top, 0.0) < share * keywords.get(name, 0.0)
    ]
    if not rivals:
        return dict(scores)
    winner = max(rivals, key=lambda name: (keywords.get(name, 0.0), name))
    return {**scores, winner: scores[top] + 1e-9}


def routed(
    store: RetrievalStore | None,
    names: Sequence[str],
    hits: Mapping[str, _Hit],
    dense_ids: Sequence[str] | None,
    vector: Any,
    margin: float,
    keywords: Mapping[str, float] | None = None,
) -> list[str]:
    """The collections of `names` a search keeps: those whose relevance is within `margin`
    of the best (all of them when there is one, or no dense evidence, or margin >= 1), after
    `keyword_veto` by each site's best BM25 score (`keywords`, when given)."""
    if len(names) < 2 or not dense_ids or margin >= 1:
        return list(names)
    centroids = (
        {name: centroid(store, name) for name in names}
        if store is not None and vector is not None
        else None
    )
    scores = relevance(hits, dense_ids, ROUTE_TOP, centroids, vector)
    if not scores:
        return list(names)
    scores = keyword_veto(scores, keywords or {})
    best = max(scores.values())
    return [name for name in names if scores.get(name, -1.0) >= best - margin]
