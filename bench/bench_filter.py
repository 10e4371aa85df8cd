"""Chroma alone: a filtered kNN by `where` vs by the list of matching ids, per filter size.

    python bench/bench_filter.py [--size 100000] [--queries 40] [--server] [--json]

Why: search answers a selective filter (one that the unfiltered over-fetch cannot satisfy)
with `query(ids=...)` over the ids the BM25 index lists, instead of Chroma's `where`
(`hetriever.search._dense_rows_by_ids`), up to `search.ID_FILTER_MAX` ids. This measures the
two calls on the same collection and checks they return the same neighbours.

`--size` random unit vectors (384-d, as MiniLM) with a `section` whose values match 0.5%,
2.5%, 10%, 20% and 50% of them, written once in Chroma's largest batches. Each query vector
is asked top 10 both ways, alternating. With `--server` a `chroma run` on 127.0.0.1 holds the
collection (the id list then travels as JSON over loopback).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS_DIR, chroma_server, percentile, print_table  # noqa: E402

SHARES = {"s-0.5": 0.005, "s-2.5": 0.025, "s-10": 0.10, "s-20": 0.20, "s-50": 0.50}
TOP_K = 10
INCLUDE = ["documents", "metadatas", "distances"]


def sections_for(size: int) -> list[str]:
    """Section of each item: SHARES of every 1,000 consecutive items, the rest `other`."""
    bounds = np.cumsum(list(SHARES.values())) * 1000
    names = list(SHARES)
    out = []
    for i in range(size):
        slot = int(np.searchsorted(bounds, i % 1000, side="right"))
        out.append(names[slot] if slot < len(names) else "other")
    return out


def build(client, size: int, rng: np.random.Generator) -> tuple[object, list[str], float]:
    col = client.create_collection("filter-bench", embedding_function=None,
                                   configuration={"hnsw": {"space": "cosine"}})
    vectors = rng.standard_normal((size, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    sections = sections_for(size)
    batch = client.get_max_batch_size()
    began = time.perf_counter()
    for start in range(0, size, batch):
        stop = min(size, start + batch)
        col.add(ids=[f"c{i}" for i in range(start, stop)], embeddings=vectors[start:stop],
                documents=[f"chunk {i}" for i in range(start, stop)],
                metadatas=[{"section": sections[i]} for i in range(start, stop)])
    return col, sections, time.perf_counter() - began


def measure(col, sections: list[str], queries: np.ndarray) -> list[dict]:
    rows = []
    for name in SHARES:
        ids = [f"c{i}" for i, s in enumerate(sections) if s == name]
        by_where, by_ids = [], []
        for vector in queries:
            began = time.perf_counter()
            a = col.query(query_embeddings=[vector], n_results=TOP_K, where={"section": name},
                          include=INCLUDE)
            by_where.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            b = col.query(query_embeddings=[vector], n_results=TOP_K, ids=ids, include=INCLUDE)
            by_ids.append((time.perf_counter() - began) * 1000)
            if a["ids"][0] != b["ids"][0]:
                raise SystemExit(f"{name}: `where` and `ids` disagree: {a['ids'][0]} vs "
                                 f"{b['ids'][0]}")
        rows.append({"section": name, "matching": len(ids),
                     "where_p50_ms": round(statistics.median(by_where), 1),
                     "where_p95_ms": round(percentile(by_where, 95), 1),
                     "ids_p50_ms": round(statistics.median(by_ids), 1),
                     "ids_p95_ms": round(percentile(by_ids, 95), 1),
                     "speedup_p50": round(statistics.median(by_where)
                                          / statistics.median(by_ids), 2)})
    return rows


def main(argv: list[str] | None = None) -> int:
    import chromadb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--server", action="store_true",
                        help="a `chroma run` server on 127.0.0.1 instead of embedded Chroma")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((args.queries, 384)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="bench-filter-") as tmp:
        if args.server:
            with chroma_server(Path(tmp) / "chroma") as port:
                client = chromadb.HttpClient(host="127.0.0.1", port=port)
                col, sections, build_s = build(client, args.size, rng)
                rows = measure(col, sections, queries)
        else:
            client = chromadb.PersistentClient(path=str(Path(tmp) / "chroma"))
            col, sections, build_s = build(client, args.size, rng)
            rows = measure(col, sections, queries)
    report = {"backend": "chroma run on 127.0.0.1" if args.server else "embedded",
              "size": args.size, "queries": args.queries, "top_k": TOP_K,
              "build_seconds": round(build_s, 1), "rows": rows}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    suffix = "-server" if args.server else ""
    (RESULTS_DIR / f"bench_filter{suffix}-latest.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['backend']}: {args.size} chunks (built in {report['build_seconds']} s), "
          f"top {TOP_K}, {args.queries} queries per row")
    print_table(("section", "matching", "where p50/p95 ms", "ids p50/p95 ms", "where/ids p50"),
                [(r["section"], r["matching"], f"{r['where_p50_ms']} / {r['where_p95_ms']}",
                  f"{r['ids_p50_ms']} / {r['ids_p95_ms']}", r["speedup_p50"]) for r in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
