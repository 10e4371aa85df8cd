"""Recall of Chroma's HNSW against exact search, by `ef_search`, at 10k and 100k chunks.

    python -m bench.search_speed.bench_recall [--sizes 10000,100000] [--queries 200] [--json]

Vectors: the real chunk vectors of the cached bench_quality stores (hugo-docs and
opentelemetry-io v2, ~12k), then copies of them with noise until each size is reached (as
bench_memory pads an index). Queries: real query texts of bench_quality's sets, embedded by the
offline model. One embedded Chroma collection per size with hetriever's HNSW settings
(cosine, ef_construction and M from Settings); `ef_search` is changed in place
(`collection.modify`) and each value is measured on the same graph: recall@10 and recall@50
against numpy brute force (the exact nearest by cosine; a returned vector counts as found when
it is at least as near as the exact k-th, so identical vectors in another order are not
misses), and the median query time.
Run bench_quality.py once first: this bench reads its stores.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time

import numpy as np

from bench.common import (
    RESULTS_DIR,
    bench_settings,
    load_corpus_chunks,
    make_embedder,
    make_store,
    percentile,
)  # noqa: E402,E501
from bench.quality.bench_quality import build_queries  # noqa: E402
from hetriever.core.config import Settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402

EF_VALUES = (50, 100, 200, 400, 800, 1600)
DEPTHS = (10, 50)


def real_vectors() -> tuple[np.ndarray, list[str]]:
    """The stored chunk vectors and some real query texts of the bench_quality stores."""
    vecs, queries = [], []
    for name in ("hugo-docs", "opentelemetry-io"):
        corpus = load_corpus_chunks(name)
        if corpus is None:
            continue
        root = RESULTS_DIR / f"quality-{name}-chunk-{corpus.commit[:12]}"
        if not root.exists():
            continue
        store = make_store(root, None)
        got = store.collection(name).get(include=["embeddings"])
        vecs.append(np.asarray(got["embeddings"], dtype=np.float32))
        store.close_sync()
        for items in build_queries(corpus).values():
            queries.extend(q for q, _ in items)
    if not vecs:
        raise SystemExit("no bench_quality store found: run bench/quality/bench_quality.py first")
    return np.concatenate(vecs), queries


def padded(base: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    out = [base[:size]]
    have = len(out[0])
    while have < size:
        n = min(len(base), size - have)
        v = base[:n] + rng.normal(0.0, 0.35 / np.sqrt(base.shape[1]), (n, base.shape[1]))
        out.append(v.astype(np.float32))
        have += n
    vecs = np.concatenate(out)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def measure(vecs: np.ndarray, queries: np.ndarray, settings: Settings) -> list[dict]:
    import chromadb
    from chromadb.api.client import SharedSystemClient

    sims = queries @ vecs.T
    kth = {d: -np.partition(-sims, d - 1, axis=1)[:, d - 1] for d in DEPTHS}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
        client = chromadb.PersistentClient(path=tmp)
        col = client.create_collection(
            "recall",
            configuration={
                "hnsw": {
                    "space": "cosine",
                    "ef_construction": settings.hnsw_construction_ef,
                    "ef_search": EF_VALUES[0],
                    "max_neighbors": settings.hnsw_m,
                }
            },
        )
        step = client.get_max_batch_size()
        ids = [str(i) for i in range(len(vecs))]
        for start in range(0, len(vecs), step):
            col.add(ids=ids[start : start + step], embeddings=vecs[start : start + step])
        for ef in EF_VALUES:
            col.modify(configuration={"hnsw": {"ef_search": ef}})
            # The loaded HNSW segment keeps the ef it was opened with: reopen.
            SharedSystemClient.clear_system_cache()
            client = chromadb.PersistentClient(path=tmp)
            col = client.get_collection("recall")
            hits = {d: 0 for d in DEPTHS}
            ms = []
            for qi, q in enumerate(queries):
                began = time.perf_counter()
                got = col.query(query_embeddings=[q], n_results=max(DEPTHS), include=[])
                ms.append((time.perf_counter() - began) * 1000)
                found = np.asarray([int(i) for i in got["ids"][0]])
                for d in DEPTHS:
                    hits[d] += int((sims[qi, found[:d]] >= kth[d][qi] - 1e-6).sum())
            rows.append(
                {
                    "size": len(vecs),
                    "ef_search": ef,
                    **{f"recall@{d}": round(hits[d] / (d * len(queries)), 4) for d in DEPTHS},
                    "ms_p50": round(percentile(ms, 50), 2),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    base, texts = real_vectors()
    texts = random.Random(0).sample(texts, min(args.queries, len(texts)))
    embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
    queries = np.asarray(embedder.embed(texts), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    rng = np.random.default_rng(0)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rows.extend(measure(padded(base, size, rng), queries, Settings()))
        if not args.json:
            for r in rows[-len(EF_VALUES) :]:
                print(r, flush=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_recall-latest.json").write_text(json.dumps(rows, indent=2))
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
