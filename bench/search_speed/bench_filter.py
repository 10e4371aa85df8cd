"""Chroma alone: a filtered kNN by `where`, by the list of matching ids, or ranked here.

    python -m bench.search_speed.bench_filter [--size 100000] [--queries 40] [--server] [--json]

Why: search answers a selective filter (one that the unfiltered over-fetch cannot satisfy)
from the ids the BM25 index lists (`hetriever.search.dense._dense_rows_by_ids`): up to
`dense.EXACT_IDS_MAX` ids it fetches their vectors and ranks them itself ("fetch+rank"), up
to `dense.ID_FILTER_MAX` it asks Chroma's kNN over the ids, and past that Chroma's `where`
runs. This measures the three on the same collection, per filter size.

`--size` random unit vectors (384-d, as MiniLM) with a `section` whose values match from 10
items to 50% of them, written once in Chroma's largest batches. Each query asks top 10 each
way in turn (fetch+rank only up to 2,000 ids). Recall@10 is against the exact top 10 computed
in numpy: Chroma's filtered kNN is approximate. With `--server` a `chroma run` on 127.0.0.1
holds the collection (ids and vectors then travel as JSON over loopback).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS_DIR, chroma_server, percentile, print_table  # noqa: E402
from hetriever.search.dense import exact_nearest  # noqa: E402

# Section name -> share of every 100,000 consecutive items.
SHARES = {
    "s-0.01": 0.0001,
    "s-0.3": 0.003,
    "s-1": 0.01,
    "s-2.5": 0.025,
    "s-10": 0.10,
    "s-20": 0.20,
    "s-50": 0.50,
}
TOP_K = 10
INCLUDE = ["documents", "metadatas", "distances"]
RANK_MAX = 2_000  # fetch+rank is not timed past this many ids (it only grows)


def sections_for(size: int) -> list[str]:
    """Section of each item: SHARES of every 100,000 consecutive items, the rest `other`."""
    bounds = np.cumsum(list(SHARES.values())) * 100_000
    names = list(SHARES)
    out = []
    for i in range(size):
        slot = int(np.searchsorted(bounds, i % 100_000, side="right"))
        out.append(names[slot] if slot < len(names) else "other")
    return out


def build(
    client, size: int, rng: np.random.Generator
) -> tuple[object, np.ndarray, list[str], float]:
    col = client.create_collection(
        "filter-bench", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
    )
    vectors = rng.standard_normal((size, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    sections = sections_for(size)
    batch = client.get_max_batch_size()
    began = time.perf_counter()
    for start in range(0, size, batch):
        stop = min(size, start + batch)
        col.add(
            ids=[f"c{i}" for i in range(start, stop)],
            embeddings=vectors[start:stop],
            documents=[f"chunk {i}" for i in range(start, stop)],
            metadatas=[{"section": sections[i]} for i in range(start, stop)],
        )
    return col, vectors, sections, time.perf_counter() - began


def fetch_and_rank(col, vector: np.ndarray, ids: list[str]) -> list[str]:
    """What search does for a short id list: fetch the vectors, rank by exact distance, then
    read the nearest records."""
    return [row[0] for row in exact_nearest(col.get, vector, ids, TOP_K, "cosine")]


def timed(fn) -> tuple[float, object]:
    began = time.perf_counter()
    out = fn()
    return (time.perf_counter() - began) * 1000, out


def measure(col, vectors: np.ndarray, sections: list[str], queries: np.ndarray) -> list[dict]:
    rows = []
    for name in SHARES:
        members = [i for i, s in enumerate(sections) if s == name]
        if not members:
            continue
        ids = [f"c{i}" for i in members]
        times: dict[str, list[float]] = {"where": [], "ids": [], "rank": []}
        recall: dict[str, list[float]] = {"where": [], "ids": [], "rank": []}
        for vector in queries:
            exact = {ids[j] for j in np.argsort(-(vectors[members] @ vector))[:TOP_K]}
            ways = {
                "where": lambda: col.query(
                    query_embeddings=[vector],
                    n_results=TOP_K,
                    where={"section": name},
                    include=INCLUDE,
                )["ids"][0],
                "ids": lambda: col.query(
                    query_embeddings=[vector], n_results=TOP_K, ids=ids, include=INCLUDE
                )["ids"][0],
            }
            if len(ids) <= RANK_MAX:
                ways["rank"] = lambda: fetch_and_rank(col, vector, ids)
            for way, fn in ways.items():
                ms, found = timed(fn)
                times[way].append(ms)
                recall[way].append(len(exact & set(found)) / min(TOP_K, len(ids)))
        row = {"section": name, "matching": len(ids)}
        for way in ("where", "ids", "rank"):
            if times[way]:
                row[f"{way}_p50_ms"] = round(statistics.median(times[way]), 1)
                row[f"{way}_p95_ms"] = round(percentile(times[way], 95), 1)
                row[f"{way}_recall"] = round(statistics.fmean(recall[way]), 3)
        rows.append(row)
    return rows


def unfiltered(col, vectors: np.ndarray, queries: np.ndarray) -> dict:
    """The plain kNN, for scale: its latency and its Recall@10 on the same vectors."""
    times, recall = [], []
    for vector in queries:
        exact = {f"c{j}" for j in np.argsort(-(vectors @ vector))[:TOP_K]}
        ms, got = timed(
            lambda: col.query(query_embeddings=[vector], n_results=TOP_K, include=INCLUDE)["ids"][0]
        )
        times.append(ms)
        recall.append(len(exact & set(got)) / TOP_K)
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(percentile(times, 95), 1),
        "recall": round(statistics.fmean(recall), 3),
    }


def main(argv: list[str] | None = None) -> int:
    import chromadb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument(
        "--server",
        action="store_true",
        help="a `chroma run` server on 127.0.0.1 instead of embedded Chroma",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((args.queries, 384)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="bench-filter-") as tmp:
        if args.server:
            with chroma_server(Path(tmp) / "chroma") as port:
                client = chromadb.HttpClient(host="127.0.0.1", port=port)
                col, vectors, sections, build_s = build(client, args.size, rng)
                rows = measure(col, vectors, sections, queries)
                plain = unfiltered(col, vectors, queries)
        else:
            client = chromadb.PersistentClient(path=str(Path(tmp) / "chroma"))
            col, vectors, sections, build_s = build(client, args.size, rng)
            rows = measure(col, vectors, sections, queries)
            plain = unfiltered(col, vectors, queries)
    report = {
        "backend": "chroma run on 127.0.0.1" if args.server else "embedded",
        "size": args.size,
        "queries": args.queries,
        "top_k": TOP_K,
        "build_seconds": round(build_s, 1),
        "rows": rows,
        "unfiltered": plain,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    suffix = "-server" if args.server else ""
    (RESULTS_DIR / f"bench_filter{suffix}-latest.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{report['backend']}: {args.size} chunks (built in {report['build_seconds']} s), "
        f"top {TOP_K}, {args.queries} queries per row"
    )

    def cell(r: dict, way: str) -> str:
        if f"{way}_p50_ms" not in r:
            return "-"
        return f"{r[f'{way}_p50_ms']} / {r[f'{way}_p95_ms']} (R {r[f'{way}_recall']})"

    print_table(
        ("section", "matching", "where p50/p95 ms", "ids p50/p95 ms", "fetch+rank p50/p95 ms"),
        [
            (r["section"], r["matching"], cell(r, "where"), cell(r, "ids"), cell(r, "rank"))
            for r in rows
        ],
    )
    print(
        f"unfiltered kNN: {plain['p50_ms']} / {plain['p95_ms']} ms (R {plain['recall']}); "
        "random vectors are the hardest case for HNSW's recall"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
