"""Reciprocal rank fusion of ranked lists, over chunks or over the pages they belong to.

People look for pages: a page that is first for dense search through one chunk and first for
BM25 through another is the best answer, but fused chunk by chunk it gets only 1/(k+1) twice
on two different ids and can lose to a page one of whose chunks is 7th in both lists. So each
retriever's chunk ranking first becomes a page ranking (a page ranks where its best chunk
ranks), the page rankings are fused, and each page keeps its chunks in their own fused order,
the first being the passage shown. A long page with many chunks gets one place, like a short
one.

Two ways to fuse, both over pages: reciprocal rank fusion (`rrf`: ranks only) and score
fusion (`score`, the default): each retriever's page scores (a page scores its best chunk's
score) are standardised over the pages it returned (z-scores), a page it did not return takes
its lowest, and the weighted sum ranks the pages. Ranks throw away how far ahead a retriever's
first answer is; scores keep it: a title BM25 matches exactly stands far above the rest, a
chatty question spreads BM25 thinly and dense leads. Measured in bench/README.md (the sweep of
dense weight and depth, every query set).

Everything here is pure: ids in, ids and scores out, ties broken by id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def rrf_fuse(
    rankings: Mapping[str, Sequence[str]], k: int, weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Reciprocal rank fusion: doc -> sum over rankings of w / (k + rank), rank from 1
    (w = the ranking's weight, 1 unless given)."""
    fused: dict[str, float] = {}
    for name, ranking in rankings.items():
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + weight / (k + rank)
    return fused


def ordered(scores: Mapping[str, float]) -> list[str]:
    """Ids by score, best first; equal scores by id, so the order never depends on input order."""
    return sorted(scores, key=lambda d: (-scores[d], d))


def page_ranking(chunks: Sequence[str], page_of: Mapping[str, str]) -> list[str]:
    """A chunk ranking as a page ranking: each page where its best chunk ranks.

    Chunks without a page (not in `page_of`, e.g. dropped by a check) are passed over.
    """
    pages: dict[str, None] = {}
    for chunk in chunks:
        page = page_of.get(chunk)
        if page is not None:
            pages.setdefault(page)
    return list(pages)


def standardised(scores: Mapping[str, float]) -> dict[str, float]:
    """z-scores: (score - mean) / standard deviation; all 0 when the scores do not spread."""
    if not scores:
        return {}
    mean = sum(scores.values()) / len(scores)
    spread = math.sqrt(sum((v - mean) ** 2 for v in scores.values()) / len(scores))
    if spread <= 1e-12:
        return {d: 0.0 for d in scores}
    return {d: (v - mean) / spread for d, v in scores.items()}


def score_fuse(
    scores: Mapping[str, Mapping[str, float]], weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Score fusion: doc -> sum over retrievers of w * z, z the doc's standardised score in that
    retriever's list, or the list's lowest z when the retriever did not return it. A retriever
    that returned nothing adds nothing."""
    normed = {name: standardised(s) for name, s in scores.items()}
    docs = {d for s in normed.values() for d in s}
    fused = dict.fromkeys(docs, 0.0)
    for name, z in normed.items():
        if not z:
            continue
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        floor = min(z.values())
        for d in docs:
            fused[d] += weight * z.get(d, floor)
    return fused


def best_per_page(scores: Mapping[str, float], page_of: Mapping[str, str]) -> dict[str, float]:
    """Chunk scores as page scores: each page scores its best chunk (chunks without a page are
    passed over)."""
    pages: dict[str, float] = {}
    for chunk, value in scores.items():
        page = page_of.get(chunk)
        if page is not None and value > pages.get(page, -math.inf):
            pages[page] = value
    return pages


@dataclass(frozen=True)
class FusedPage:
    page: str
    fused: float  # the page's fused score (RRF, or weighted z-scores) over the retrievers
    chunks: tuple[str, ...]  # the page's candidate chunks, best (by chunk-level RRF) first


def fuse_pages(
    rankings: Mapping[str, Sequence[str]],
    page_of: Mapping[str, str],
    k: int,
    weights: Mapping[str, float] | None = None,
    scores: Mapping[str, Mapping[str, float]] | None = None,
) -> list[FusedPage]:
    """Pages best first, each with its chunks: by RRF over each ranking's page ranking, or,
    given each retriever's chunk `scores` (higher is better), by score fusion of the pages'
    best-chunk scores (`k` is then unused)."""
    kept = {name: [c for c in ranking if c in page_of] for name, ranking in rankings.items()}
    if scores is None:
        page_scores = rrf_fuse(
            {name: page_ranking(r, page_of) for name, r in kept.items()}, k, weights
        )
        chunk_scores = rrf_fuse(kept, k, weights)
    else:
        by_chunk = {name: {c: scores[name][c] for c in r} for name, r in kept.items()}
        page_scores = score_fuse(
            {name: best_per_page(s, page_of) for name, s in by_chunk.items()}, weights
        )
        chunk_scores = score_fuse(by_chunk, weights)
    members: dict[str, list[str]] = {}
    for chunk in ordered(chunk_scores):
        members.setdefault(page_of[chunk], []).append(chunk)
    return [
        FusedPage(page, page_scores[page], tuple(members[page])) for page in ordered(page_scores)
    ]
