"""One corpus's retrievers as the question benches use them (bench_families, bench_learned):
the quality bench's cached store, its dense and BM25 lists fetched once per query, the product's
page fusion over them offline, and the look-up sets sampled the same way every run."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.common import CorpusChunks, bm25_only, load_corpus_chunks
from bench.quality.bench_quality import DEEP, K, build_queries, index_corpus, offline_pages
from hetriever.parse.links import LinkPrior
from hetriever.search import hybrid as search
from hetriever.search.candidates import _fill_documents
from hetriever.search.gathering import candidate_depth
from hetriever.search.results import is_question

LOOKUP_SETS = ("title", "description", "heading", "section", "url", "function")
ROCCHIO_DOCS, ROCCHIO_BETA = 5, 0.5

Hit = tuple[str, dict, float, str]  # (chunk id, metadata, score, text)


class Lists:
    """One corpus's retrievers, each list [(chunk id, metadata, score, text)]."""

    def __init__(self, store: Any, name: str) -> None:
        self.store, self.name = store, name
        self.col = store.collection(name)

    def dense_vector(self, vector: Any) -> list[Hit]:
        hits: dict = {}
        ids = search._dense(self.store, [self.name], vector, DEEP, {self.name: None}, hits)
        _fill_documents(self.store, [hits[d] for d in ids])
        return [
            (d, hits[d].metadata or {}, hits[d].dense_score or 0.0, hits[d].content or "")
            for d in ids
        ]

    def dense(self, query: str) -> tuple[Any, list[Hit]]:
        vector = self.store.embedder.embed([query[: search.MAX_QUERY_CHARS]])[0]
        return vector, self.dense_vector(vector)

    def bm25(self, query: str) -> list[Hit]:
        return [
            (h.doc_id, h.metadata or {}, h.bm25_raw or 0.0, h.content or "")
            for h in bm25_only(self.store, query, DEEP, namespaces=[self.name])
        ]

    def rocchio(self, vector: Any, dense: list[Hit]) -> list[Hit]:
        ids = [d for d, _, _, _ in dense[:ROCCHIO_DOCS]]
        if not ids:
            return dense
        got = self.col.get(ids=ids, include=["embeddings"])
        mean = np.asarray(got["embeddings"], dtype=np.float32).mean(axis=0)
        moved = np.asarray(vector, dtype=np.float32) + ROCCHIO_BETA * mean
        return self.dense_vector(moved / np.linalg.norm(moved))


@dataclass
class CorpusRetrieval:
    """A corpus opened for offline fusion: its store, lists, links prior and query sets."""

    name: str
    corpus: CorpusChunks
    store: Any
    lists: Lists
    prior: LinkPrior
    depth: int
    queries: dict[str, list] = field(default_factory=dict)

    @property
    def settings(self) -> Any:
        return self.store.settings

    def fuse(self, query: str, dense: list[Hit], bm25: list[Hit]) -> list[str]:
        """The product's page fusion of these lists (the links prior for questions only)."""
        s = self.settings
        return offline_pages(
            [(x, m, sc) for x, m, sc, _ in dense],
            [(x, m, sc) for x, m, sc, _ in bm25],
            self.depth,
            fusion=s.fusion,
            k=s.rrf_k,
            dense_weight=search.dense_weight_for(s, "", query),
            prior=self.prior if is_question(s, "", query) else None,
            corpus=self.name,
        )

    def lookups(self, set_name: str, limit: int) -> list[tuple[str, Any]]:
        """At most `limit` queries of a look-up set, the same ones every run."""
        qs = self.queries.get(set_name) or []
        if len(qs) > limit:
            qs = random.Random(0).sample(qs, limit)
        return [(q, rel) for q, rel in qs]

    def close(self) -> None:
        self.store.close_sync()


def open_corpus(name: str, embedder: Any) -> CorpusRetrieval | None:
    """The quality bench's chunk-record store of `name` v2, or None without the corpus."""
    corpus = load_corpus_chunks(name)
    if corpus is None:
        return None
    store, _ = index_corpus(corpus, embedder, "chunk")
    prior = LinkPrior(
        store.catalog.pages, {name: store.physical_name(name)}, store.settings.link_prior_weight
    )
    return CorpusRetrieval(
        name,
        corpus,
        store,
        Lists(store, name),
        prior,
        candidate_depth(K, "page"),
        build_queries(corpus),
    )
