"""Knowledge-store benchmark: embed+store throughput, and query latency at 10k/100k chunks.

    python -m bench.search_speed.bench_store                       # throughput, then latency at 10k and 100k
    python -m bench.search_speed.bench_store --sizes 10000 --quick # smaller run
    python -m bench.search_speed.bench_store --only latency --json

(a) Throughput. The real chunks of hugo-docs v2 (from the real pipeline; without the corpus,
    examples/sample-docs repeated) are embedded three ways, once each:
    - raw model: one `MiniLMEmbedder.embed` over every chunk text (length-sorted globally);
    - write path: `Store.upsert_files` into a fresh embedded store, in windows
      of `settings.write_window` chunks as an index run writes them;
    - raw model on the store's windows: one `embed` call per write window, as the store embeds
      them, which separates the window's batching effect from the store's own work.
    Then the same chunks are written again (nothing should be embedded).
(b) Latency. Real embeddings of the real chunks are copied with small Gaussian perturbations
    (re-normalised; cosine to the original ~0.94) until a collection holds N chunks; copies get
    distinct ids, a `copy-<j>/` file path and ~10% of their words dropped (so BM25 sees distinct
    texts). They are written straight to the Chroma collection and its BM25Index, bypassing
    the embedder. A second collection of 1,000 such chunks makes namespaces matter. Queries
    are real texts (page descriptions of the corpus) embedded by the real model inside each
    dense/hybrid search, so query embedding is part of those latencies; it is also timed alone.
    Scopes: all collections; a `section` filter (the query page's section); `section-where`,
    the same filter with the id-list path off (so Chroma's `where` answers what the unfiltered
    over-fetch cannot, as before that path existed); namespace restricted to the N-chunk
    collection. BM25-only runs search's own BM25 path (retrieve, fetch documents, integrity
    check), since `hybrid_search` has no BM25-only switch. Also timed, 5 samples: the first
    hybrid query after the store reopens embedded Chroma, as a long-lived searcher does after
    another process wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (  # noqa: E402
    RESULTS_DIR,
    CorpusChunks,
    bench_settings,
    bm25_only,
    make_embedder,
    make_store,
    percentile,
    print_table,
    write_windows,
)
from bench.latency_store import (  # noqa: E402
    MAIN,
    SIDE,
    SIDE_SIZE,
    TOP_K,
    build_latency_store,
    embeddings_for,
    load_chunks,
    query_set,
)
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.search import dense as dense_mod  # noqa: E402
from hetriever.search import hybrid as search_mod  # noqa: E402
from hetriever.search.request import SearchRequest

# --- (a) throughput ------------------------------------------------------------------


def bench_throughput(
    corpus: CorpusChunks, embedder: Any, workdir: Path, quick: bool
) -> tuple[dict, np.ndarray]:
    chunks = corpus.chunks
    texts = [c.text for c in chunks]
    embedder.embed(texts[: embedder.batch_size])  # warm-up: allocations, kernel choice

    began = time.perf_counter()
    vectors = embedder.embed(texts)
    raw_s = time.perf_counter() - began

    store = make_store(workdir / "throughput", embedder)
    step = store.chroma.max_batch_size()
    windows = write_windows(corpus.files, store.settings.write_window)

    async def write_all() -> tuple[int, int, float]:
        written = reused = 0
        embed_s = 0.0
        for window in windows:
            got = await store.upsert_files(corpus.name, window)
            written, reused = written + got.written, reused + got.reused
            embed_s += got.embedding_seconds
        return written, reused, embed_s

    embedder.reset_counters()
    began = time.perf_counter()
    written, _, store_embed_s = asyncio.run(write_all())
    store_s = time.perf_counter() - began
    assert written == len(chunks), (written, len(chunks))

    embedder.reset_counters()
    began = time.perf_counter()
    rewritten, reused, _ = asyncio.run(write_all())
    rewrite_s = time.perf_counter() - began
    re_embedded = embedder.texts_embedded

    windowed_s = None
    if not quick:  # the raw model on the store's own windows, one call each
        began = time.perf_counter()
        for window in windows:
            embedder.embed([c.text for cs in window.values() for c in cs])
        windowed_s = time.perf_counter() - began
    store.close_sync()

    n = len(chunks)
    report = {
        "source": corpus.source,
        "chunks": n,
        "files": len(corpus.files),
        "embed_batch_size": embedder.batch_size,
        "store_write_window": store.settings.write_window,
        "store_max_batch_size": step,
        "threads": embedder.threads,
        "raw_seconds": round(raw_s, 2),
        "raw_chunks_per_s": round(n / raw_s, 1),
        "store_seconds": round(store_s, 2),
        "store_chunks_per_s": round(n / store_s, 1),
        "store_embedding_seconds": round(store_embed_s, 2),
        "overhead_pct": round(100.0 * (store_s - raw_s) / raw_s, 1),
        "non_embedding_seconds": round(store_s - store_embed_s, 2),
        "rewrite_seconds": round(rewrite_s, 2),
        "rewrite_written": rewritten,
        "rewrite_reused": reused,
        "rewrite_texts_embedded": re_embedded,
    }
    if windowed_s is not None:
        report["raw_windowed_seconds"] = round(windowed_s, 2)
        report["raw_windowed_chunks_per_s"] = round(n / windowed_s, 1)
        report["overhead_vs_windowed_pct"] = round(100.0 * (store_s - windowed_s) / windowed_s, 1)
    return report, vectors


# --- (b) latency ---------------------------------------------------------------------


def time_queries(fn: Callable[[str, dict], Any], queries: list[tuple[str, dict]]) -> list[float]:
    out = []
    for text, extra in queries:
        began = time.perf_counter()
        fn(text, extra)
        out.append((time.perf_counter() - began) * 1000.0)
    return out


def summary(ms: list[float]) -> dict:
    return {
        "p50_ms": round(percentile(ms, 50), 2),
        "p95_ms": round(percentile(ms, 95), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
        "queries": len(ms),
    }


def bench_latency(
    corpus: CorpusChunks,
    vectors: np.ndarray,
    embedder: Any,
    size: int,
    n_queries: int,
    workdir: Path,
) -> dict:
    root = workdir / f"latency-{size}"
    began = time.perf_counter()
    store, build = build_latency_store(corpus, vectors, size, root, embedder)
    build_s = time.perf_counter() - began
    queries = query_set(corpus, n_queries, seed=size)
    hybrid_search = search_mod.hybrid_search

    def dense(scope: str) -> Callable[[str, dict], Any]:
        return lambda q, e: hybrid_search(
            store, SearchRequest(q, TOP_K, **_scope_args(scope, e), hybrid=False)
        )

    def hybrid(scope: str) -> Callable[[str, dict], Any]:
        return lambda q, e: hybrid_search(
            store, SearchRequest(q, TOP_K, **_scope_args(scope, e), hybrid=True)
        )

    def hybrid_chunks(scope: str) -> Callable[[str, dict], Any]:
        return lambda q, e: hybrid_search(
            store, SearchRequest(q, TOP_K, **_scope_args(scope, e), hybrid=True, group_by="chunk")
        )

    def bm25(scope: str) -> Callable[[str, dict], Any]:
        return lambda q, e: bm25_only(store, q, TOP_K, **_scope_args(scope, e))

    def where_only(
        make: Callable[[str], Callable[[str, dict], Any]],
    ) -> Callable[[str], Callable[[str, dict], Any]]:
        """The same search without the id-list path: a selective filter goes to `where`."""

        def wrapped(scope: str) -> Callable[[str, dict], Any]:
            fn = make(scope)

            def run(q: str, e: dict) -> Any:
                # dense reads its own module's limit (search only re-exports it)
                saved, dense_mod.ID_FILTER_MAX = dense_mod.ID_FILTER_MAX, 0
                try:
                    return fn(q, e)
                finally:
                    dense_mod.ID_FILTER_MAX = saved

            return run

        return wrapped

    plans = [
        (scope, (("dense", dense), ("bm25", bm25), ("hybrid", hybrid)))
        for scope in ("all", "section", "namespace")
    ]
    plans.insert(
        2, ("section-where", (("dense", where_only(dense)), ("hybrid", where_only(hybrid))))
    )
    # Results are pages by default (more candidates per retriever); chunk results beside them.
    plans.append(("all", (("hybrid-chunks", hybrid_chunks),)))
    # Warm-up: BM25 loads lazily, Chroma opens its segments on first use.
    for scope, makers in plans:
        for _, make in makers:
            time_queries(make(scope), queries[:5])
    rows = []
    embed_ms = time_queries(lambda q, e: embedder.embed([q]), queries)
    rows.append({"mode": "query-embed", "scope": "-", **summary(embed_ms)})
    for scope, makers in plans:
        for mode, make in makers:
            rows.append(
                {"mode": mode, "scope": scope, **summary(time_queries(make(scope), queries))}
            )
    # A long-lived embedded searcher reopens Chroma when another process has written (once
    # per write window during an ingest): the first query after that reloads the vector index.
    reopened = []
    for q, e in queries[:5]:
        store.chroma.reopen(store.physical_name(MAIN))
        reopened.extend(time_queries(hybrid("all"), [(q, e)]))
    rows.append({"mode": "hybrid", "scope": "all, after reopen", **summary(reopened)})
    few = store.bm25(MAIN)
    sections = [e["section"] for _, e in queries]
    listed = sum(
        few.few_ids_where({"section": s}, dense_mod.ID_FILTER_MAX) is not None for s in sections
    )
    store.close_sync()
    return {
        "size": size,
        "side_collection": SIDE_SIZE,
        "build_seconds": round(build_s, 1),
        "build": build,
        "rows": rows,
        "section_queries_with_id_list": listed,
        "id_filter_max": dense_mod.ID_FILTER_MAX,
    }


def _scope_args(scope: str, extra: dict) -> dict:
    if scope in ("section", "section-where"):
        return {"filters": {"section": extra["section"]}, "repositories": None}
    if scope == "namespace":
        return {"filters": None, "repositories": [MAIN]}
    return {"filters": None, "repositories": None}


# --- main ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=None,
        help="latency corpus sizes (default 10000,100000)",
    )
    parser.add_argument("--queries", type=int, default=None, help="queries per row (200)")
    parser.add_argument("--only", choices=["throughput", "latency"], default=None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="~600 chunks for throughput, 50 queries, 10k only (unless --sizes)",
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="build stores under this directory and keep them"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([10_000] if args.quick else [10_000, 100_000])
    n_queries = args.queries or (50 if args.quick else 200)
    configure_logging("ERROR")  # per-query search logs would drown the figures

    corpus = load_chunks(args.quick)
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        workdir = args.keep or Path(tmp)
        settings = bench_settings(workdir)
        embedder = make_embedder(settings)
        report: dict[str, Any] = {"corpus": corpus.source, "chunks": len(corpus.chunks)}
        vectors = None
        if args.only in (None, "throughput"):
            report["throughput"], vectors = bench_throughput(corpus, embedder, workdir, args.quick)
            print_throughput(report["throughput"], args.json)
        if args.only in (None, "latency"):
            if vectors is None:
                vectors = embeddings_for(corpus, embedder)
            report["latency"] = []
            for size in sizes:
                result = bench_latency(corpus, vectors, embedder, size, n_queries, workdir)
                report["latency"].append(result)
                print_latency(result, args.json)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_store-latest.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


def print_throughput(t: dict, quiet: bool) -> None:
    if quiet:
        return
    print(
        f"\n(a) embed+store throughput: {t['chunks']} chunks of {t['source']}, "
        f"embed batch {t['embed_batch_size']}, {t['threads']} threads"
    )
    rows = [("raw model, one call", t["raw_seconds"], t["raw_chunks_per_s"], "")]
    if "raw_windowed_seconds" in t:
        rows.append(
            (
                "raw model, store's windows",
                t["raw_windowed_seconds"],
                t["raw_windowed_chunks_per_s"],
                "",
            )
        )
    rows.append(
        (
            "upsert_files (fresh store)",
            t["store_seconds"],
            t["store_chunks_per_s"],
            f"{t['overhead_pct']:+.1f}%",
        )
    )
    rows.append(
        (
            "upsert_files again (no change)",
            t["rewrite_seconds"],
            round(t["chunks"] / t["rewrite_seconds"], 1),
            f"embedded {t['rewrite_texts_embedded']}",
        )
    )
    print_table(("path", "seconds", "chunks/s", "vs raw"), rows)
    print(
        f"store: {t['store_embedding_seconds']} s embedding, "
        f"{t['non_embedding_seconds']} s everything else"
    )


def print_latency(r: dict, quiet: bool) -> None:
    if quiet:
        return
    print(
        f"\n(b) query latency, top_k={TOP_K}: {r['size']} chunks in {MAIN} + "
        f"{r['side_collection']} in {SIDE} (built in {r['build_seconds']} s)"
    )
    print_table(
        ("mode", "scope", "p50 ms", "p95 ms", "p99 ms", "queries"),
        [
            (x["mode"], x["scope"], x["p50_ms"], x["p95_ms"], x["p99_ms"], x["queries"])
            for x in r["rows"]
        ],
    )
    print(
        f"section filters answerable by id list (<= {r['id_filter_max']} ids): "
        f"{r['section_queries_with_id_list']} of {r['rows'][1]['queries']} queries; "
        "section-where = the same queries without that path"
    )


if __name__ == "__main__":
    raise SystemExit(main())
