"""Retrieval quality: Recall@10 and MRR@10 (page level) of BM25, dense and hybrid search.

    python bench/bench_quality.py                    # both corpora, all queries
    python bench/bench_quality.py --limit 100 --json # at most 100 queries per set

Each corpus (hugo-docs v2, opentelemetry-io v2) is indexed by the real pipeline into its own
embedded store with real embeddings, cached in bench/results/quality-<corpus>-<commit>/ (the
commit is content-derived, see common.py); a cached store is brought up to date by the normal
write path, which re-embeds only changed chunks.

Query sets (answers are pages, i.e. a chunk's `file_path`):
- description: every page whose front matter `description` has >= 5 words; the description is
  the query and the page the answer. The description is chunk *metadata*, not chunk text; the
  report counts how many pages repeat it verbatim in their text anyway.
- title: every page's title; the answer is any page with that exact title (titles repeat,
  e.g. "Exporters" once per language). Chunk texts start with "title > heading", so this set
  is the easy one.

Rankings: chunks in rank order, deduplicated to pages, cut at 10 pages.
- dense: `hybrid_search(hybrid=False, top_k=--depth)`
- bm25: search.py's BM25 path (`common.bm25_only`, depth --depth)
- hybrid: `hybrid_search(hybrid=True, top_k=--depth)` (RRF with settings.rrf_k)
The exact-title fast path is off (`exact=False`): it is not a retriever, and it would decide
most of the title set by itself. A sweep then re-fuses the dense and BM25 lists offline with `search.rrf_fuse` for other RRF k
and candidate depths, to show what the fusion parameters do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS_DIR,
    CorpusChunks,
    bm25_only,
    load_corpus_chunks,
    make_embedder,
    make_store,
    bench_settings,
    print_table,
    write_windows,
)
from hetriever import search  # noqa: E402
from hetriever.logs import configure_logging  # noqa: E402

CORPORA = ("hugo-docs", "opentelemetry-io")
K = 10
SWEEP_K = (1, 5, 10, 20, 30, 60, 100)
SWEEP_DEPTH = (10, 20, 40, 60, 100)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def build_queries(corpus: CorpusChunks) -> dict[str, list[tuple[str, set[str]]]]:
    """{set name: [(query, relevant file paths)]}, plus how often descriptions are in the text."""
    desc: list[tuple[str, set[str]]] = []
    by_title: dict[str, set[str]] = {}
    for path, chunks in corpus.files.items():
        meta = chunks[0].metadata
        d = meta.get("description")
        if isinstance(d, str) and len(d.split()) >= 5:
            desc.append((d, {path}))
        by_title.setdefault(str(meta["title"]), set()).add(path)
    titles = [(t, paths) for t, paths in sorted(by_title.items()) if t.strip()]
    return {"description": desc, "title": titles}


def description_in_text(corpus: CorpusChunks) -> tuple[int, int]:
    """(pages whose chunk text contains their description verbatim, pages with a description)."""
    inside = total = 0
    for chunks in corpus.files.values():
        d = chunks[0].metadata.get("description")
        if isinstance(d, str) and len(d.split()) >= 5:
            total += 1
            needle = _norm(d)
            inside += any(needle in _norm(c.text) for c in chunks)
    return inside, total


def index_corpus(corpus: CorpusChunks, embedder: Any) -> tuple[Any, dict]:
    root = RESULTS_DIR / f"quality-{corpus.name}-{corpus.commit[:12]}"
    store = make_store(root, embedder)
    windows = write_windows(corpus.files, store.settings.write_window)

    async def write() -> tuple[int, int]:
        written = reused = 0
        for window in windows:
            got = await store.upsert_files(corpus.name, window)
            written, reused = written + got.written, reused + got.reused
        stale = set(await store.list_files(corpus.name)) - set(corpus.files)
        for path in stale:
            await store.delete_file(corpus.name, path)
        return written, reused

    began = time.perf_counter()
    written, reused = asyncio.run(write())
    return store, {"store": root.name, "chunks": len(corpus.chunks), "embedded": written,
                   "reused": reused, "seconds": round(time.perf_counter() - began, 1)}


def pages(ranked_metas: list[dict], limit: int = K) -> list[str]:
    out: list[str] = []
    for meta in ranked_metas:
        path = str(meta.get("file_path", ""))
        if path not in out:
            out.append(path)
            if len(out) == limit:
                break
    return out


def score(ranked_pages: list[list[str]], queries: list[tuple[str, set[str]]]) -> dict:
    hits, rr = 0, 0.0
    for got, (_, relevant) in zip(ranked_pages, queries):
        ranks = [i for i, p in enumerate(got[:K]) if p in relevant]
        if ranks:
            hits += 1
            rr += 1.0 / (ranks[0] + 1)
    n = max(1, len(queries))
    return {"recall@10": round(hits / n, 3), "mrr@10": round(rr / n, 3)}


def fuse(dense: list[tuple[str, dict]], bm25: list[tuple[str, dict]], k: int,
         depth: int) -> list[dict]:
    """hybrid_search's ordering, offline: RRF over the first `depth` of each list."""
    metas = {d: m for d, m in dense[:depth] + bm25[:depth]}
    fused = search.rrf_fuse({"dense": [d for d, _ in dense[:depth]],
                             "bm25": [d for d, _ in bm25[:depth]]}, k)
    order = sorted(fused, key=lambda d: (-fused[d], d))
    return [metas[d] for d in order]


def evaluate(store: Any, corpus: CorpusChunks, queries: list[tuple[str, set[str]]],
             depth: int, progress: Callable[[str], None]) -> dict:
    deep = max(SWEEP_DEPTH)
    dense_lists, bm25_lists, hybrid_pages = [], [], []
    began = time.perf_counter()
    for i, (q, _) in enumerate(queries):
        r = search.hybrid_search(store, q, deep, namespaces=[corpus.name], hybrid=False,
                                 exact=False)
        dense_lists.append([(m.doc_id, m.metadata) for m in r.matches])
        b = bm25_only(store, q, deep, namespaces=[corpus.name])
        bm25_lists.append([(h.doc_id, h.metadata) for h in b])
        h = search.hybrid_search(store, q, depth, namespaces=[corpus.name], hybrid=True,
                                 exact=False)
        hybrid_pages.append(pages([m.metadata for m in h.matches]))
        if i % 100 == 99:
            progress(f"  {i + 1}/{len(queries)} queries")
    seconds = time.perf_counter() - began
    rrf_k = store.settings.rrf_k
    n_cand = depth * search.CANDIDATE_FACTOR
    simulated = [pages(fuse(d, b, rrf_k, n_cand)) for d, b in zip(dense_lists, bm25_lists)]
    agree = sum(s == h for s, h in zip(simulated, hybrid_pages)) / max(1, len(queries))
    result = {
        "queries": len(queries),
        "bm25": score([pages([m for _, m in b]) for b in bm25_lists], queries),
        "dense": score([pages([m for _, m in d]) for d in dense_lists], queries),
        "hybrid": score(hybrid_pages, queries),
        "hybrid_params": {"rrf_k": rrf_k, "candidates_per_retriever": n_cand,
                          "top_k_chunks": depth},
        "offline_fusion_agreement": round(agree, 3),
        "sweep": [{"rrf_k": k, "candidates": c,
                   **score([pages(fuse(d, b, k, c)) for d, b in zip(dense_lists, bm25_lists)],
                           queries)}
                  for k in SWEEP_K for c in SWEEP_DEPTH],
        "seconds": round(seconds, 1),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default=",".join(CORPORA))
    parser.add_argument("--limit", type=int, default=0, help="at most this many queries per set")
    parser.add_argument("--depth", type=int, default=30,
                        help="chunks asked of hybrid_search before deduplicating to pages")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure_logging("ERROR")

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    report: dict[str, Any] = {"corpora": {}}
    embedder = None
    for name in args.corpora.split(","):
        corpus = load_corpus_chunks(name)
        if corpus is None:
            progress(f"skipping {name}: corpus not found")
            continue
        if embedder is None:
            embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
        progress(f"{name}: {len(corpus.chunks)} chunks of {len(corpus.files)} pages; indexing")
        store, indexed = index_corpus(corpus, embedder)
        inside, total = description_in_text(corpus)
        entry: dict[str, Any] = {"index": indexed, "pages": len(corpus.files),
                                 "description_in_chunk_text": {"pages": inside, "of": total}}
        for set_name, queries in build_queries(corpus).items():
            if args.limit and len(queries) > args.limit:
                queries = random.Random(args.seed).sample(queries, args.limit)
            progress(f"{name}/{set_name}: {len(queries)} queries")
            entry[set_name] = evaluate(store, corpus, queries, args.depth, progress)
        store.close_sync()
        report["corpora"][name] = entry
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_quality-latest.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


def print_report(report: dict) -> None:
    rows = []
    for name, entry in report["corpora"].items():
        for set_name in ("description", "title"):
            r = entry[set_name]
            rows.append((name, set_name, r["queries"],
                         r["bm25"]["recall@10"], r["dense"]["recall@10"], r["hybrid"]["recall@10"],
                         r["bm25"]["mrr@10"], r["dense"]["mrr@10"], r["hybrid"]["mrr@10"]))
    print("page-level Recall@10 / MRR@10")
    print_table(("corpus", "queries", "n", "R bm25", "R dense", "R hybrid", "MRR bm25",
                 "MRR dense", "MRR hybrid"), rows)
    for name, entry in report["corpora"].items():
        d = entry["description_in_chunk_text"]
        print(f"{name}: indexed {entry['index']}; description verbatim in chunk text for "
              f"{d['pages']} of {d['of']} pages")
        for set_name in ("description", "title"):
            r = entry[set_name]
            best = max(r["sweep"], key=lambda s: (s["mrr@10"], s["recall@10"]))
            print(f"  {set_name}: hybrid {r['hybrid_params']}, offline fusion agrees on "
                  f"{r['offline_fusion_agreement']:.0%} of queries; best sweep cell "
                  f"k={best['rrf_k']} candidates={best['candidates']}: "
                  f"R {best['recall@10']} MRR {best['mrr@10']}")


if __name__ == "__main__":
    raise SystemExit(main())
