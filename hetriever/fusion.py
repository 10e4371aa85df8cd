"""Reciprocal rank fusion of ranked lists, over chunks or over the pages they belong to.

People look for pages: a page that is first for dense search through one chunk and first for
BM25 through another is the best answer, but fused chunk by chunk it gets only 1/(k+1) twice
on two different ids and can lose to a page one of whose chunks is 7th in both lists. So each
retriever's chunk ranking first becomes a page ranking (a page ranks where its best chunk
ranks), the page rankings are fused, and each page keeps its chunks in their own fused order,
the first being the passage shown. A long page with many chunks gets one place, like a short
one.

Everything here is pure: ids in, ids and scores out, ties broken by id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def rrf_fuse(rankings: Mapping[str, Sequence[str]], k: int,
             weights: Mapping[str, float] | None = None) -> dict[str, float]:
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


@dataclass(frozen=True)
class FusedPage:
    page: str
    fused: float  # the page's RRF score over the retrievers' page rankings
    chunks: tuple[str, ...]  # the page's candidate chunks, best (by chunk-level RRF) first


def fuse_pages(rankings: Mapping[str, Sequence[str]], page_of: Mapping[str, str],
               k: int, weights: Mapping[str, float] | None = None) -> list[FusedPage]:
    """Pages by RRF over each ranking's page ranking, best first, each with its chunks."""
    kept = {name: [c for c in ranking if c in page_of] for name, ranking in rankings.items()}
    page_scores = rrf_fuse({name: page_ranking(r, page_of) for name, r in kept.items()}, k,
                           weights)
    chunk_scores = rrf_fuse(kept, k, weights)
    members: dict[str, list[str]] = {}
    for chunk in ordered(chunk_scores):
        members.setdefault(page_of[chunk], []).append(chunk)
    return [FusedPage(page, page_scores[page], tuple(members[page]))
            for page in ordered(page_scores)]
