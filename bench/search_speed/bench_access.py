"""Access-filtered search latency at 10k chunks, and the exact-match hit rate on hugo-docs v2.

    .venv/bin/python -m bench.search_speed.bench_access latency [--chunks 10000] [--queries 100]
    .venv/bin/python -m bench.search_speed.bench_access titles  [--corpus ../shared/corpora/hugo-docs/v2]

latency: a 10k-chunk collection (synthetic texts, random unit vectors written straight to Chroma
and BM25, so building it takes seconds; queries are embedded by the real model) searched as
- plain: one PUBLIC collection, PUBLIC caller (no `where` at all);
- skip: the same plus a PRIVATE collection of 10k more, PUBLIC caller (skipped per collection);
- mixed: one collection where 20% of chunks are PRIVATE (chunk-level `access_level $in`);
- deleted: one collection with 5% soft-deleted chunks (`is_deleted $ne true`);
- forced: the chunk filter on the homogeneous collection, to show what per-collection planning
  saves.
Prints p50/p95 per scenario (ms, whole `hybrid_search`, and the Chroma query alone).

titles: indexes hugo-docs v2 with the real pipeline, then queries every indexed page's title and
reports how often that page is ranked 1, with and without the exact-match fast path.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from hetriever.core.access import CollectionPlan  # noqa: E402
from hetriever.core.config import load_settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.core.names import content_hash  # noqa: E402
from hetriever.search.hybrid import hybrid_search  # noqa: E402
from hetriever.search.request import SearchRequest  # noqa: E402
from hetriever.store.knowledge_store import Store  # noqa: E402

WORDS = (
    "template page section taxonomy shortcode partial render hook menu param site build "
    "server deploy theme module asset image resize filter range where first sort group "
    "collection slice map string math time date format config output layout list single "
    "bundle resource cache markdown heading table code block link alias redirect url"
).split()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def fill(
    store: Store,
    repo: str,
    n: int,
    rng: np.random.Generator,
    *,
    private_share: float = 0.0,
    deleted_share: float = 0.0,
) -> None:
    col = store.collection(repo, create=True)
    physical = store.physical_name(repo)
    step = 1000
    levels = set()
    for start in range(0, n, step):
        ids, texts, metas = [], [], []
        for i in range(start, min(n, start + step)):
            words = rng.choice(WORDS, size=40)
            text = f"{repo} page {i}: " + " ".join(words)
            level = (
                "PRIVATE"
                if rng.random() < private_share
                else store.settings.access_levels.get(repo, "PUBLIC")
            )
            levels.add(level)
            meta = {
                "repository": repo,
                "file_path": f"content/p{i // 4}.md",
                "title": f"P{i}",
                "section": "docs",
                "chunk_index": i % 4,
                "content_hash": content_hash(text),
                "access_level": level,
            }
            if rng.random() < deleted_share:
                meta.update(is_deleted=True, deleted_at="2026-01-01T00:00:00+00:00")
            ids.append(f"{repo}-{i}")
            texts.append(text)
            metas.append(meta)
        vectors = rng.normal(size=(len(ids), 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        col.add(ids=ids, embeddings=vectors, documents=texts, metadatas=metas)
        store.bm25(repo).upsert(ids, texts, metas)
    store.catalog.note_levels(physical, levels)
    if deleted_share:
        store.catalog.set_files(physical, repo, ["content/gone.md"], "DISCOVERED")
        store.catalog.mark_deleted(physical, ["content/gone.md"], "2026-01-01T00:00:00+00:00")


def measure(store, queries, **kwargs) -> tuple[list[float], int]:
    times, results = [], 0
    for q in queries:
        began = time.perf_counter()
        r = hybrid_search(store, SearchRequest(q, top_k=10, **kwargs))
        times.append((time.perf_counter() - began) * 1000)
        results += len(r.matches)
    return times, results


def chroma_only(store, repo, vectors, where) -> list[float]:
    col = store.collection(repo)
    times = []
    for v in vectors:
        began = time.perf_counter()
        col.query(query_embeddings=[v], n_results=20, where=where, include=["metadatas"])
        times.append((time.perf_counter() - began) * 1000)
    return times


def latency(args: argparse.Namespace) -> None:
    from hetriever.embed.embedder import get_embedder

    configure_logging("WARNING")
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        settings = load_settings(
            env={},
            chroma_path=tmp_path / "chroma",
            state_dir=tmp_path / "st",
            access_levels={"secret-docs": "PRIVATE"},
            model_dir=args.model_dir,
        )
        store = Store(settings, embedder=get_embedder(settings))
        began = time.perf_counter()
        fill(store, "plain-docs", args.chunks, rng)
        fill(store, "secret-docs", args.chunks, rng)
        fill(store, "mixed-docs", args.chunks, rng, private_share=0.2)
        fill(store, "gone-docs", args.chunks, rng, deleted_share=0.05)
        print(f"built 4 x {args.chunks} chunks in {time.perf_counter() - began:.1f}s")
        queries = [" ".join(rng.choice(WORDS, size=4)) for _ in range(args.queries)]
        vectors = store.embedder.embed(queries[: args.queries])
        for q in queries[:5]:  # warm caches
            hybrid_search(store, SearchRequest(q, repositories=["plain-docs"]))

        scenarios = {
            "plain": dict(repositories=["plain-docs"]),
            "skip": dict(repositories=["plain-docs", "secret-docs"]),
            "mixed": dict(repositories=["mixed-docs"]),
            "deleted": dict(repositories=["gone-docs"]),
        }
        print(f"{'scenario':<10} {'p50 ms':>8} {'p95 ms':>8} {'results':>8}")
        for name, kwargs in scenarios.items():
            times, n = measure(store, queries, **kwargs)
            print(f"{name:<10} {statistics.median(times):8.1f} {pct(times, 0.95):8.1f} {n:8d}")
        # forced: the chunk filter even where the collection is homogeneous
        original = CollectionPlan.where
        CollectionPlan.where = lambda self, allowed: {"access_level": {"$in": sorted(allowed)}}
        try:
            times, n = measure(store, queries, repositories=["plain-docs"])
            print(f"{'forced':<10} {statistics.median(times):8.1f} {pct(times, 0.95):8.1f} {n:8d}")
        finally:
            CollectionPlan.where = original

        print("\nChroma query alone (n_results=20):")
        for label, where in (
            ("no where", None),
            ("access $in", {"access_level": {"$in": ["PUBLIC"]}}),
            ("is_deleted $ne", {"is_deleted": {"$ne": True}}),
        ):
            times = chroma_only(store, "mixed-docs", vectors, where)
            print(
                f"{label:<15} p50 {statistics.median(times):6.2f} ms  "
                f"p95 {pct(times, 0.95):6.2f} ms"
            )
        store.close_sync()


def titles(args: argparse.Namespace) -> None:
    from hetriever.discover.repositories import discover_repositories
    from hetriever.embed.embedder import get_embedder
    from hetriever.index.indexing import index_repository
    from tests.support.helpers import commit_all, init_repo, replace_tree

    configure_logging("WARNING")
    corpus = Path(args.corpus)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        repo_dir = init_repo(tmp_path / "repos" / "hugo-docs")
        replace_tree(repo_dir, corpus)
        commit_all(repo_dir, "hugo-docs")
        settings = load_settings(
            env={},
            chroma_path=tmp_path / "chroma",
            state_dir=tmp_path / "st",
            model_dir=args.model_dir,
        )
        store = Store(settings, embedder=get_embedder(settings))
        (repo,) = discover_repositories(repo_dir.parent)
        began = time.perf_counter()
        result = asyncio.run(index_repository(repo, store, settings))
        print(
            f"indexed {result.files_indexed} pages, {result.chunks_written} chunks in "
            f"{time.perf_counter() - began:.0f}s"
        )
        col = store.chroma.client.get_collection(store.physical_name("hugo-docs"))
        got = col.get(where={"chunk_index": 0}, include=["metadatas"])
        pages = {m["file_path"]: m["title"] for m in got["metadatas"]}
        by_title: dict[str, int] = {}
        for t in pages.values():
            by_title[t.casefold().strip()] = by_title.get(t.casefold().strip(), 0) + 1
        unique = {p: t for p, t in pages.items() if by_title[t.casefold().strip()] == 1}
        for exact in (True, False):
            hits = hits_unique = 0
            times = []
            for path, title in pages.items():
                began = time.perf_counter()
                r = hybrid_search(store, SearchRequest(title, top_k=5, exact=exact))
                times.append((time.perf_counter() - began) * 1000)
                top = r.matches[0].metadata["file_path"] if r.matches else None
                hits += top == path
                hits_unique += top == path and path in unique
            print(
                f"exact={'on ' if exact else 'off'}: rank-1 {hits}/{len(pages)} = "
                f"{hits / len(pages):.3f}; unique titles {hits_unique}/{len(unique)} = "
                f"{hits_unique / len(unique):.3f}; p50 {statistics.median(times):.1f} ms"
            )
        store.close_sync()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what")
    p = sub.add_parser("latency")
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--model-dir")
    p.set_defaults(func=latency)
    p = sub.add_parser("titles")
    p.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpora" / "hugo-docs" / "v2"))
    p.add_argument("--model-dir")
    p.set_defaults(func=titles)
    args = parser.parse_args()
    if args.what is None:  # both, with their defaults
        for what in ("latency", "titles"):
            args = parser.parse_args([what])
            args.func(args)
        return
    args.func(args)


if __name__ == "__main__":
    main()
