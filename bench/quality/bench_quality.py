"""Retrieval quality at page level: R@10, MRR@10 and nDCG@10 per query set and search mode.

    python -m bench.quality.bench_quality                       # both corpora, every query
    python -m bench.quality.bench_quality --limit 100 --json    # at most 100 queries per set
    python -m bench.quality.bench_quality --page-record prefix  # index with another page-record mode
    python -m bench.quality.bench_quality --no-sweeps           # the modes' scores only

Each corpus (hugo-docs v2, opentelemetry-io v2) is indexed by the real pipeline into its own
embedded store with real embeddings, cached in bench/results/quality-<corpus>-<record>-<commit>/
(the commit is content-derived, see common.py); a cached store is brought up to date by the
normal write path, which re-embeds only changed chunks.

Query sets (the answer is a page, a chunk's `file_path`; a query may accept several pages):
- questions / questions-held-out: real questions people asked in issue trackers, forums,
  blogs and Q&A sites, each with the page a reply linked or named as the answer
  (bench/queries/real_questions.jsonl and questions.jsonl, with sources). An item is held out
  when sha1(its id) % 3 == 0 (`held_out`): a third no tuning decision looks at, reported apart.
- title: each distinct page title; the answer is any page with exactly that title.
- description: each page whose front matter `description` has >= 5 words. Since page records
  (settings.page_record) the description is indexed text, so this set measures look-ups of a
  page by its summary rather than paraphrase.
- heading: each body heading phrased as a question ("How do I ...?", FAQ pages); the answer is
  the page holding it.
- section: every other body heading of two words or more that is not also a page title
  ("Configure internal traces"), short sections the chunker folded into a neighbour
  included; the answer is any page holding it. At most 600 per corpus,
  the same seeded sample every run.
- url: each page's address as a browser shows it (`https://gohugo.io/functions/...`; the
  home page aside), what people and agents paste; the answer is that page.
- function: "<name> function" for each name a function page says its function is called by in
  templates (front matter `params.functions_and_methods.aliases`, or a title that is a bare
  name such as the go-template `and`); the answer is every page giving that name. Built for the
  analyzer's stopwords (`where`, `in`, `and` are Hugo functions); Hugo sites only.

Modes, all one result per page (`group_by="page"`), cut at 10 pages:
- default: `hybrid_search` as the CLI runs it (exact-title fast path on).
- hybrid: the same with the exact-title fast path off.
- dense / bm25: one retriever alone.
The dense and BM25 chunk rankings (with their scores) are also fetched deep (100 chunks) once
per query, and the page fusion is re-run offline by the product's own `results._fuse_pages`
for sweeps: score fusion by dense weight and chunks per retriever, RRF by k and chunks per
retriever, BM25's phrase weight (`bm25_phrase_weight`, the same dense lists fused with BM25
lists rescored at each weight), BM25's k1 and b (rescored the same way), the links prior's
weight for questions (`link_prior_weight`, hetriever.parse.links), and dense's weight for short
queries by the cut (`dense_weight_short`, `short_query_terms`); the report says how often
the offline fusion reproduces `hybrid_search` exactly, so the sweep speaks for the product.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.common import (  # noqa: E402
    RESULTS_DIR,
    CorpusChunks,
    bench_settings,
    bm25_only,
    corpus_dir,
    load_corpus_chunks,
    make_embedder,
    make_store,
    percentile,
    print_table,
    write_corpus,
)
from hetriever.core.config import Settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.parse.links import LinkPrior  # noqa: E402
from hetriever.parse.page import _load, split_front_matter  # noqa: E402
from hetriever.search import hybrid as search  # noqa: E402
from hetriever.search.candidates import _Hit  # noqa: E402
from hetriever.search.gathering import candidate_depth  # noqa: E402
from hetriever.search.request import SearchRequest
from hetriever.search.results import _fuse_pages, _page_of, is_question  # noqa: E402

CORPORA = ("hugo-docs", "opentelemetry-io")
QUERIES = Path(__file__).resolve().parents[1] / "queries"
QUESTION_FILES = (QUERIES / "real_questions.jsonl", QUERIES / "questions.jsonl")
K = 10
DEEP = 100  # chunks per retriever fetched once per query for the offline sweep
SWEEP_K = (1, 5, 10, 20, 30, 60, 100)
SWEEP_DEPTH = (10, 20, 30, 50, 75, 100)
SWEEP_WEIGHT = (0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8)  # score fusion: dense's weight
SWEEP_PHRASE = (
    0.0,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
)  # BM25's phrase bonus (hetriever.store.bm25.phrases)
SWEEP_SHORT_WEIGHT = (0.4, 0.45, 0.5, 0.55, 0.6)  # dense's weight for short queries
SWEEP_SHORT_TERMS = (0, 4, 6, 8, 10)  # what "short" is, in distinct terms (0: no query is)
SWEEP_LINKS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)  # the links prior's weight (questions)
SWEEP_BM25 = tuple((k1, b) for k1 in (0.9, 1.2, 1.6, 2.0) for b in (0.4, 0.6, 0.75, 0.9))
SECTION_SAMPLE = 600  # section headings per corpus (opentelemetry-io has ~2,700)
MODES = ("default", "hybrid", "dense", "bm25")
SETS = (
    "questions",
    "questions-held-out",
    "title",
    "description",
    "heading",
    "section",
    "url",
    "function",
)
# Where each corpus is published: the url set pastes a page's address as a browser shows it.
SITE_ROOTS = {"hugo-docs": "https://gohugo.io", "opentelemetry-io": "https://opentelemetry.io"}

Query = tuple[str, set[str]]


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def held_out(item_id: str) -> bool:
    """The third of the questions kept out of every tuning decision: by a hash of the id, so
    old and new items alike, and an item never changes side."""
    return int(hashlib.sha1(item_id.encode("utf-8")).hexdigest(), 16) % 3 == 0


def question_items(corpus: str | None = None) -> list[dict]:
    """Every real-question item (of `corpus`), in file order."""
    out = []
    for path in QUESTION_FILES:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                if corpus is None or item["corpus"] == corpus:
                    out.append(item)
    return out


def real_questions(corpus: str, held: bool = False) -> list[Query]:
    """The tuning part of a corpus's real questions, or with `held` the held-out third."""
    return [
        (item["question"], set(item["answers"]))
        for item in question_items(corpus)
        if held_out(item["id"]) == held
    ]


def build_queries(corpus: CorpusChunks) -> dict[str, list[Query]]:
    """{set name: [(query, relevant file paths)]}."""
    desc: list[Query] = []
    by_title: dict[str, set[str]] = {}
    by_heading: dict[str, set[str]] = {}
    by_section: dict[str, set[str]] = {}
    for path, chunks in corpus.files.items():
        meta = chunks[0].metadata
        d = meta.get("description")
        if isinstance(d, str) and len(d.split()) >= 5:
            desc.append((d, {path}))
        by_title.setdefault(str(meta["title"]), set()).add(path)
        for chunk in chunks:
            for heading in str(chunk.metadata.get("heading_context") or "").split(" > "):
                heading = heading.strip()
                if heading.endswith("?") and len(heading.split()) >= 3:
                    by_heading.setdefault(heading, set()).add(path)
                elif len(heading.split()) >= 2:
                    by_section.setdefault(heading, set()).add(path)
            for heading in chunk.metadata.get("merged_headings") or ():  # short sections folded
                if not heading.endswith("?") and len(heading.split()) >= 2:
                    by_section.setdefault(heading.strip(), set()).add(path)
    titles = {_norm(t) for t in by_title}
    root = SITE_ROOTS.get(corpus.name, "https://example.org")
    urls = sorted(
        (root + str(chunks[0].metadata["url"]), {path})
        for path, chunks in corpus.files.items()
        if str(chunks[0].metadata.get("url") or "/") != "/"
    )
    return {
        "questions": real_questions(corpus.name),
        "questions-held-out": real_questions(corpus.name, held=True),
        "title": [(t, paths) for t, paths in sorted(by_title.items()) if t.strip()],
        "description": desc,
        "heading": sorted(by_heading.items()),
        "section": sample(
            [(h, paths) for h, paths in sorted(by_section.items()) if _norm(h) not in titles],
            SECTION_SAMPLE,
        ),
        "url": urls,
        "function": function_queries(corpus),
    }


def function_names(corpus: CorpusChunks) -> dict[str, set[str]]:
    """{name: pages} of the names Hugo's function pages give their functions in templates:
    `params.functions_and_methods.aliases` (`where` for collections.Where), else a title
    that is a bare name (the go-template functions: `and`, `with`). Read from the corpus's
    front matter, which chunk metadata does not carry; {} for a corpus without such pages."""
    name, _, version = corpus.source.partition("/")
    root = corpus_dir(name, version) if version else None
    out: dict[str, set[str]] = {}
    for path in corpus.files if root is not None else ():
        if "functions" not in path.split("/")[:-1] or path.endswith("/_index.md"):
            continue
        fmt, raw, _, _ = split_front_matter((root / path).read_text(encoding="utf-8"))
        data, _ = _load(fmt, raw) if fmt else ({}, "")
        info = (data.get("params") or {}).get("functions_and_methods")
        if not isinstance(info, dict):
            continue
        names = [str(a) for a in info.get("aliases") or []]
        title = str(data.get("title") or "")
        if not names and re.fullmatch(r"[A-Za-z]\w*", title):
            names = [title]
        for n in names:
            out.setdefault(n, set()).add(path)
    return out


def function_queries(corpus: CorpusChunks) -> list[Query]:
    """ "<name> function" -> the pages of that name, as people search for a template function."""
    return [(f"{n} function", paths) for n, paths in sorted(function_names(corpus).items())]


def sample(queries: list[Query], n: int) -> list[Query]:
    """At most `n` of `queries`, the same ones every run."""
    return queries if len(queries) <= n else random.Random(0).sample(queries, n)


def index_corpus(
    corpus: CorpusChunks, embedder: Any, record: str, label: str | None = None
) -> tuple[Any, dict]:
    root = RESULTS_DIR / f"quality-{corpus.name}-{label or record}-{corpus.commit[:12]}"
    store = make_store(root, embedder, page_record=record)
    began = time.perf_counter()
    written, reused = write_corpus(store, corpus)
    return store, {
        "store": root.name,
        "chunks": len(corpus.chunks),
        "embedded": written,
        "reused": reused,
        "seconds": round(time.perf_counter() - began, 1),
    }


def pages(metas: list[dict], limit: int = K) -> list[str]:
    """Distinct pages in rank order (page results are distinct already)."""
    return list(dict.fromkeys(str(m.get("file_path", "")) for m in metas))[:limit]


def score(ranked: list[list[str]], queries: list[Query]) -> dict:
    hits, rr, ndcg = 0, 0.0, 0.0
    for got, (_, relevant) in zip(ranked, queries):
        ranks = [i for i, p in enumerate(got[:K]) if p in relevant]
        if ranks:
            hits += 1
            rr += 1.0 / (ranks[0] + 1)
        dcg = sum(1.0 / math.log2(i + 2) for i in ranks)
        ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), K)))
        ndcg += dcg / ideal if ideal else 0.0
    n = max(1, len(queries))
    return {
        "recall@10": round(hits / n, 3),
        "mrr@10": round(rr / n, 3),
        "ndcg@10": round(ndcg / n, 3),
    }


Scored = list[tuple[str, dict, float]]  # (chunk id, metadata, the retriever's score)


def offline_pages(
    dense: Scored,
    bm25: Scored,
    depth: int,
    *,
    fusion: str = "score",
    k: int = 5,
    dense_weight: float = 0.6,
    prior: LinkPrior | None = None,
    corpus: str = "",
) -> list[str]:
    """hybrid_search's page fusion (`results._fuse_pages`, the links prior of a question
    included), offline, over the first `depth` chunks of each list."""
    hits: dict[str, _Hit] = {}
    for d, m, s in dense[:depth]:
        hits.setdefault(d, _Hit(d, corpus, metadata=m)).dense_score = s
    for d, m, s in bm25[:depth]:
        hits.setdefault(d, _Hit(d, corpus, metadata=m)).bm25_raw = s
    rankings = {"dense": [d for d, _, _ in dense[:depth]], "bm25": [d for d, _, _ in bm25[:depth]]}
    settings = SimpleNamespace(fusion=fusion, rrf_k=k, dense_weight=dense_weight)
    fused = _fuse_pages(
        settings,
        hits,
        rankings,
        _page_of(hits, rankings),
        prior if prior is not None and prior.weight > 0 else None,
    )
    return [hits[p.chunks[0]].page_metadata.get("file_path", "") for p in fused][:K]


def evaluate(
    store: Any,
    corpus: CorpusChunks,
    queries: list[Query],
    progress: Callable[[str], None],
    sweeps: bool = True,
) -> dict:
    """`sweeps`: also the offline sweeps (off: the four modes' scores only, in a third of
    the time)."""
    ns = [corpus.name]
    dense_lists, bm25_lists = [], []
    ranked: dict[str, list[list[str]]] = {m: [] for m in MODES}
    ms: list[float] = []
    for i, (q, _) in enumerate(queries):
        if sweeps:
            r = search.hybrid_search(
                store,
                SearchRequest(
                    q, DEEP, repositories=ns, hybrid=False, exact=False, group_by="chunk"
                ),
            )
            dense_lists.append([(m.doc_id, m.metadata, m.dense_score or 0.0) for m in r.matches])
        bm25_lists.append(
            [
                (h.doc_id, h.metadata, h.bm25_raw or 0.0)
                for h in bm25_only(store, q, DEEP if sweeps else K, namespaces=ns)
            ]
        )
        began = time.perf_counter()
        got = search.hybrid_search(store, SearchRequest(q, K, repositories=ns))
        ms.append((time.perf_counter() - began) * 1000.0)
        ranked["default"].append(pages([m.metadata for m in got.matches]))
        got = search.hybrid_search(store, SearchRequest(q, K, repositories=ns, exact=False))
        ranked["hybrid"].append(pages([m.metadata for m in got.matches]))
        got = search.hybrid_search(
            store, SearchRequest(q, K, repositories=ns, exact=False, hybrid=False)
        )
        ranked["dense"].append(pages([m.metadata for m in got.matches]))
        ranked["bm25"].append(pages([m for _, m, _ in bm25_lists[-1]]))
        if i % 100 == 99:
            progress(f"  {i + 1}/{len(queries)} queries")
    if not sweeps:
        return {
            "queries": len(queries),
            **{mode: score(ranked[mode], queries) for mode in MODES},
            "default_ms": {
                "p50": round(percentile(ms, 50), 1),
                "p95": round(percentile(ms, 95), 1),
            },
        }
    s = store.settings
    depth = candidate_depth(K, "page")
    lists = list(zip(dense_lists, bm25_lists))
    weights = [search.dense_weight_for(s, "", q) for q, _ in queries]  # by the query's length
    # The links prior, for the questions among the queries (as hybrid_search applies it).
    physical = {corpus.name: store.physical_name(corpus.name)}
    priors = {
        w: LinkPrior(store.catalog.pages, physical, w) for w in {*SWEEP_LINKS, s.link_prior_weight}
    }
    asks = [is_question(s, "", q) for q, _ in queries]

    def fused(
        d: Scored,
        b: Scored,
        w: float,
        ask: bool,
        link_weight: float = s.link_prior_weight,
        **kw: Any,
    ) -> list[str]:
        return offline_pages(
            d,
            b,
            depth,
            fusion=s.fusion,
            k=s.rrf_k,
            dense_weight=w,
            prior=priors[link_weight] if ask else None,
            corpus=corpus.name,
            **kw,
        )

    phrase_sweep = []
    index = store.search_bm25(corpus.name)
    for weight in SWEEP_PHRASE:  # the same dense lists, BM25 lists with another phrase weight
        index.phrase_weight = weight
        runs = [
            fused(
                d,
                [
                    (h.doc_id, h.metadata, h.bm25_raw or 0.0)
                    for h in bm25_only(store, q, DEEP, namespaces=ns)
                ],
                w,
                ask,
            )
            for d, (q, _), w, ask in zip(dense_lists, queries, weights, asks)
        ]
        phrase_sweep.append({"phrase_weight": weight, **score(runs, queries)})
    index.phrase_weight = s.bm25_phrase_weight
    bm25_sweep = []  # Okapi's k1 (term frequency saturation) and b (length normalisation)
    saved = index.k1, index.b
    for index.k1, index.b in SWEEP_BM25:
        rescored = [
            [
                (h.doc_id, h.metadata, h.bm25_raw or 0.0)
                for h in bm25_only(store, q, DEEP, namespaces=ns)
            ]
            for q, _ in queries
        ]
        runs = [fused(d, r, w, ask) for d, r, w, ask in zip(dense_lists, rescored, weights, asks)]
        bm25_sweep.append(
            {
                "k1": index.k1,
                "b": index.b,
                **score(runs, queries),
                "bm25_mrr@10": score([pages([m for _, m, _ in r]) for r in rescored], queries)[
                    "mrr@10"
                ],
            }
        )
    index.k1, index.b = saved
    link_sweep = [
        {
            "link_prior_weight": lw,
            **score(
                [fused(d, b, w, ask, lw) for (d, b), w, ask in zip(lists, weights, asks)], queries
            ),
        }
        for lw in SWEEP_LINKS
    ]
    short_sweep = []  # dense's weight for short queries, and the cut in distinct terms
    for short_w in SWEEP_SHORT_WEIGHT:
        for cut in SWEEP_SHORT_TERMS:
            t = s.model_copy(update={"dense_weight_short": short_w, "short_query_terms": cut})
            runs = [
                fused(d, b, search.dense_weight_for(t, "", q), is_question(t, "", q))
                for (d, b), (q, _) in zip(lists, queries)
            ]
            short_sweep.append(
                {"dense_weight_short": short_w, "short_query_terms": cut, **score(runs, queries)}
            )
    simulated = [fused(d, b, w, ask) for (d, b), w, ask in zip(lists, weights, asks)]
    agree = sum(x == h for x, h in zip(simulated, ranked["hybrid"])) / max(1, len(queries))
    return {
        "queries": len(queries),
        **{mode: score(ranked[mode], queries) for mode in MODES},
        "hybrid_params": {
            "fusion": s.fusion,
            "dense_weight": s.dense_weight,
            "rrf_k": s.rrf_k,
            "chunks_per_retriever": depth,
        },
        "offline_fusion_agreement": round(agree, 3),
        "phrase_sweep": phrase_sweep,
        "short_query_sweep": short_sweep,
        "bm25_sweep": bm25_sweep,
        "link_sweep": link_sweep,
        "default_ms": {"p50": round(percentile(ms, 50), 1), "p95": round(percentile(ms, 95), 1)},
        "sweep": [
            {
                "fusion": "score",
                "dense_weight": w,
                "depth": c,
                **score([offline_pages(d, b, c, dense_weight=w) for d, b in lists], queries),
            }
            for w in SWEEP_WEIGHT
            for c in SWEEP_DEPTH
        ]
        + [
            {
                "fusion": "rrf",
                "rrf_k": k,
                "depth": c,
                **score([offline_pages(d, b, c, fusion="rrf", k=k) for d, b in lists], queries),
            }
            for k in SWEEP_K
            for c in SWEEP_DEPTH
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default=",".join(CORPORA))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--limit", type=int, default=0, help="at most this many queries per set")
    parser.add_argument("--page-record", default="chunk", choices=("chunk", "prefix", "off"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-sweeps",
        action="store_true",
        help="the modes' scores only (e.g. to compare two models)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure_logging("ERROR")

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    report: dict[str, Any] = {"page_record": args.page_record, "corpora": {}}
    embedder = None
    settings = Settings(page_record=args.page_record)
    for name in args.corpora.split(","):
        corpus = load_corpus_chunks(name, settings=settings)
        if corpus is None:
            progress(f"skipping {name}: corpus not found")
            continue
        if embedder is None:
            embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
        progress(f"{name}: {len(corpus.chunks)} chunks of {len(corpus.files)} pages; indexing")
        store, indexed = index_corpus(corpus, embedder, args.page_record)
        entry: dict[str, Any] = {"index": indexed, "pages": len(corpus.files)}
        # The same queries whatever the mode: built from the default pipeline's pages (with
        # page records, front-matter-only pages are pages; without, they are misses).
        if args.page_record != Settings().page_record:
            corpus = load_corpus_chunks(name) or corpus
        for set_name, queries in build_queries(corpus).items():
            if set_name not in args.sets.split(",") or not queries:
                continue
            if args.limit and len(queries) > args.limit:
                queries = random.Random(args.seed).sample(queries, args.limit)
            progress(f"{name}/{set_name}: {len(queries)} queries")
            entry[set_name] = evaluate(store, corpus, queries, progress, not args.no_sweeps)
        store.close_sync()
        report["corpora"][name] = entry
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"bench_quality-{args.page_record}-latest.json"
    out.write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


def print_report(report: dict) -> None:
    rows = []
    for name, entry in report["corpora"].items():
        for set_name in SETS:
            if set_name in entry:
                r = entry[set_name]
                rows.append(
                    (
                        name,
                        set_name,
                        r["queries"],
                        *(f"{r[m]['mrr@10']:.3f}" for m in MODES),
                        *(f"{r[m]['recall@10']:.3f}" for m in MODES),
                        f"{r['hybrid']['ndcg@10']:.3f}",
                    )
                )
    print(f"page level, page_record={report['page_record']}: MRR@10 and R@10 per mode")
    print_table(
        (
            "corpus",
            "set",
            "n",
            *(f"MRR {m}" for m in MODES),
            *(f"R {m}" for m in MODES),
            "nDCG hybrid",
        ),
        rows,
    )
    for name, entry in report["corpora"].items():
        print(f"{name}: indexed {entry['index']}")
        for set_name in SETS:
            if set_name not in entry:
                continue
            r = entry[set_name]
            if "sweep" not in r:  # --no-sweeps
                continue
            best = max(r["sweep"], key=lambda s: (s["mrr@10"], s["recall@10"]))
            cell = {
                k: v for k, v in best.items() if k in ("fusion", "dense_weight", "rrf_k", "depth")
            }
            print(
                f"  {set_name}: {r['hybrid_params']}, offline fusion agrees on "
                f"{r['offline_fusion_agreement']:.0%}; default p50/p95 "
                f"{r['default_ms']['p50']}/{r['default_ms']['p95']} ms; best sweep cell "
                f"{cell}: MRR {best['mrr@10']}"
            )
            print(
                "    phrase weight sweep (MRR@10): "
                + ", ".join(
                    f"{p['phrase_weight']}: {p['mrr@10']:.3f}" for p in r.get("phrase_sweep", [])
                )
            )
            print(
                "    links prior sweep (MRR@10): "
                + ", ".join(
                    f"{p['link_prior_weight']}: {p['mrr@10']:.3f}" for p in r.get("link_sweep", [])
                )
            )
            print(
                "    BM25 k1/b sweep (MRR@10 hybrid / BM25 alone): "
                + ", ".join(
                    f"{p['k1']}/{p['b']}: {p['mrr@10']:.3f} / {p['bm25_mrr@10']:.3f}"
                    for p in r.get("bm25_sweep", [])
                )
            )


if __name__ == "__main__":
    raise SystemExit(main())
