"""Benchmark the BM25 index: build rate, one-file update, reload, query latency.

    python -m bench.search_speed.bench_bm25                 # 10k and 100k chunks, table
    python -m bench.search_speed.bench_bm25 --sizes 10000 --json
    python -m bench.search_speed.bench_bm25 --stem-eval     # recall of stemming on/off on the real corpora

Chunks are paragraphs of the shared corpora (../shared/corpora, or $HETRIEVER_CORPORA) packed
to ~150 words, repeated with perturbed words to reach each size; without the corpora a
synthetic Zipf vocabulary is used. Figures are medians/percentiles of wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from hetriever.store.bm25 import bm25_index as bm25  # noqa: E402
from hetriever.store.bm25.bm25_index import BM25Index, tokenize  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPORA = Path(os.environ.get("HETRIEVER_CORPORA", REPO_ROOT.parent / "shared" / "corpora"))
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)


def corpus_chunks(words_per_chunk: int = 150) -> list[tuple[str, dict]]:
    """(text, metadata) chunks from the v2 corpora, one file's paragraphs packed in order."""
    out = []
    for repo in ("hugo-docs", "opentelemetry-io"):
        root = CORPORA / repo / "v2"
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.md")):
            rel = path.relative_to(root).as_posix()
            body = FRONT_MATTER.sub("", path.read_text(encoding="utf-8"))
            paragraphs = [p.strip() for p in body.split("\n\n") if p.strip()]
            buf: list[str] = []
            index = 0
            for para in paragraphs + [""]:
                if para:
                    buf.append(para)
                if buf and (not para or sum(len(b.split()) for b in buf) >= words_per_chunk):
                    section = rel.split("/")[2] if rel.count("/") > 2 else ""
                    out.append(
                        (
                            "\n\n".join(buf),
                            {
                                "repository": repo,
                                "file_path": rel,
                                "section": section,
                                "chunk_index": index,
                            },
                        )
                    )
                    buf, index = [], index + 1
    return out


def synthetic_chunks(n: int, rng: random.Random) -> list[tuple[str, dict]]:
    vocab = [f"term{i}" for i in range(30_000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    out = []
    for i in range(n):
        words = rng.choices(vocab, weights, k=rng.randint(60, 200))
        out.append(
            (
                " ".join(words),
                {
                    "repository": "synthetic",
                    "file_path": f"f{i // 10}.md",
                    "section": f"s{i % 20}",
                    "chunk_index": i % 10,
                },
            )
        )
    return out


def build_corpus(size: int, seed: int = 7) -> list[tuple[str, str, dict]]:
    """`size` chunks as (id, text, metadata): corpus chunks, then perturbed copies."""
    rng = random.Random(seed)
    base = corpus_chunks() or synthetic_chunks(min(size, 10_000), rng)
    words = sorted({w for text, _ in base[:2000] for w in text.split()})
    out = []
    copy = 0
    while len(out) < size:
        for text, meta in base:
            if len(out) >= size:
                break
            if copy:
                tokens = text.split()
                for _ in range(max(1, len(tokens) // 10)):
                    tokens[rng.randrange(len(tokens))] = rng.choice(words)
                text = " ".join(tokens) + f" rev{copy}"
                meta = {**meta, "file_path": f"copy{copy}/{meta['file_path']}"}
            out.append((f"c{len(out)}", text, meta))
        copy += 1
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def make_queries(chunks: list[tuple[str, str, dict]], n: int, rng: random.Random) -> list[str]:
    """Word runs from random chunks; every fourth query is three of the most frequent terms
    (long posting lists: the slow case)."""
    counts = Counter(t for _, text, _ in chunks[:3000] for t in set(tokenize(text)))
    frequent = [t for t, _ in counts.most_common(200)]
    queries = []
    while len(queries) < n:
        if len(queries) % 4 == 3:
            queries.append(" ".join(rng.sample(frequent, 3)))
            continue
        terms = [t for t in tokenize(rng.choice(chunks)[1]) if len(t) > 3]
        if len(terms) >= 3:
            start = rng.randrange(len(terms) - 2)
            queries.append(" ".join(terms[start : start + rng.randint(2, 5)]))
    return queries


def bench_size(size: int, n_queries: int, workdir: Path) -> dict:
    rng = random.Random(size)
    chunks = build_corpus(size)
    path = workdir / f"bm25-{size}.sqlite"
    result: dict = {"chunks": size}

    t0 = time.perf_counter()
    with BM25Index(path) as ix:
        for i in range(0, size, 1000):
            part = chunks[i : i + 1000]
            ix.upsert([c[0] for c in part], [c[1] for c in part], [c[2] for c in part])
    build = time.perf_counter() - t0
    result["build_s"] = build
    result["build_chunks_per_s"] = size / build
    result["db_mb"] = path.stat().st_size / 1e6

    reloads = []
    for _ in range(3):
        with BM25Index(path) as ix:
            t0 = time.perf_counter()
            stats = ix.stats()  # the first read loads the in-memory index
            reloads.append(time.perf_counter() - t0)
    result["reload_s"] = statistics.median(reloads)
    result["postings"] = stats["postings"]
    result["terms"] = stats["terms"]

    with BM25Index(path) as ix:
        ix.stats()
        queries = make_queries(chunks, n_queries, rng)
        repos = sorted({c[2]["repository"] for c in chunks})
        filters = {
            "none": None,
            "repository": {"repository": repos[-1]},
            "selective": {"$and": [{"repository": repos[0]}, {"chunk_index": {"$gte": 6}}]},
        }
        for name, where in filters.items():
            for q in queries[:10]:
                ix.search(q, 10, where)  # warm caches (norm, equality index)
            times = []
            for q in queries:
                t0 = time.perf_counter()
                ix.search(q, 10, where)
                times.append((time.perf_counter() - t0) * 1000)
            result[f"query_{name}_p50_ms"] = pct(times, 0.5)
            result[f"query_{name}_p95_ms"] = pct(times, 0.95)

        # One file's 10 chunks replaced, as the store does: delete the file's chunks, write new.
        upserts = []
        for i in range(20):
            file_path = f"bench/file{i}.md"
            ids = [f"bench{i}-{j}" for j in range(10)]
            texts = [chunks[rng.randrange(size)][1] for _ in ids]
            metas = [
                {"repository": "bench", "file_path": file_path, "chunk_index": j} for j in range(10)
            ]
            ix.upsert(ids, texts, metas)
            t0 = time.perf_counter()
            with ix.transaction():
                ix.delete_where({"file_path": file_path})
                ix.upsert([x + "b" for x in ids], texts, metas)
            ix.search(queries[i], 10)  # includes catching the in-memory index up
            upserts.append((time.perf_counter() - t0) * 1000)
        result["file_update_ms"] = statistics.median(upserts)
    return result


# --- stemming recall ---------------------------------------------------------------

# (query, a path fragment of a file that answers it); phrased as people ask, in inflected forms.
RECALL_QUERIES = [
    ("how to configure taxonomies", "configuration/taxonomies.md"),
    ("defining menus entries", "configuration/menus.md"),
    ("paginating lists of pages", "templates/pagination.md"),
    ("rendering links with render hooks", "render-hooks/links.md"),
    ("page bundles with resources", "content-management/page-bundles.md"),
    ("creating archetypes for new content", "content-management/archetypes.md"),
    ("related content configuration", "configuration/related-content.md"),
    ("custom output formats", "configuration/output-formats.md"),
    ("permalinks configuration tokens", "configuration/permalinks.md"),
    ("minifying output files", "configuration/minify.md"),
    ("embedding youtube videos", "shortcodes/youtube.md"),
    ("highlighting code with the highlight shortcode", "shortcodes/highlight.md"),
    ("front matter dates configuration", "configuration/front-matter.md"),
    ("caches configuration", "configuration/caches.md"),
    ("collector configuration receivers processors exporters", "docs/collector/configuration.md"),
    ("sampling traces head and tail", "docs/concepts/sampling"),
    ("semantic conventions attributes", "docs/concepts/semantic-conventions.md"),
    ("baggage propagated between services", "docs/concepts/signals/baggage.md"),
    ("context propagation across services", "docs/concepts/context-propagation"),
    ("resources describing the entity producing telemetry", "docs/concepts/resources"),
    ("logs signal and log records", "docs/concepts/signals/logs.md"),
    ("python exporters configuration", "docs/languages/python/exporters.md"),
    ("go exporters", "docs/languages/go/exporters.md"),
    ("redacting sensitive data in .NET logs", "dotnet/logs/redaction.md"),
    # Uninflected and identifier queries, where stemming should not matter.
    ("collections.Where function", "functions/collections/Where.md"),
    ("install hugo on linux", "installation/linux.md"),
    ("figure shortcode", "shortcodes/figure.md"),
    ("GetPage method", "methods/page/GetPage.md"),
    ("RelPermalink", "RelPermalink.md"),
    ("collector scaling", "docs/collector/scaling.md"),
    ("collector resiliency", "docs/collector/resiliency.md"),
    ("transforming telemetry", "docs/collector/transforming-telemetry.md"),
]


def stem_eval(k: int = 10) -> dict:
    base = corpus_chunks()
    if not base:
        return {"error": f"no corpora at {CORPORA}"}
    out = {}
    for stem in (False, True):
        bm25.STEM_DEFAULT = stem
        with tempfile.TemporaryDirectory() as tmp, BM25Index(Path(tmp) / "eval.sqlite") as ix:
            ix.upsert(
                [f"c{i}" for i in range(len(base))], [t for t, _ in base], [m for _, m in base]
            )
            hits, rr = 0, 0.0
            for query, fragment in RECALL_QUERIES:
                ranked = [ix.get(doc_id)[1]["file_path"] for doc_id, _ in ix.search(query, k)]
                ranks = [i for i, fp in enumerate(ranked) if fragment in fp]
                hits += bool(ranks)
                rr += 1.0 / (ranks[0] + 1) if ranks else 0.0
        out["stem" if stem else "no_stem"] = {
            f"recall@{k}": hits / len(RECALL_QUERIES),
            f"mrr@{k}": rr / len(RECALL_QUERIES),
        }
    bm25.STEM_DEFAULT = False
    out["queries"] = len(RECALL_QUERIES)
    out["chunks"] = len(base)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--stem-eval",
        action="store_true",
        help="compare recall with stemming off/on on the real corpora",
    )
    args = parser.parse_args()

    if args.stem_eval:
        result = stem_eval()
        print(json.dumps(result, indent=2))
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            results.append(bench_size(size, args.queries, Path(tmp)))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    keys = [k for k in results[0] if k != "chunks"]
    print(f"{'metric':<28}" + "".join(f"{r['chunks']:>14,}" for r in results))
    for key in keys:
        print(
            f"{key:<28}"
            + "".join(
                f"{r[key]:>14,.1f}" if isinstance(r[key], float) else f"{r[key]:>14,}"
                for r in results
            )
        )


if __name__ == "__main__":
    main()
