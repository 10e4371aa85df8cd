"""Search by language over the whole multilingual opentelemetry.io site (page level, MRR@10).

    python -m bench.quality.bench_multilingual [--per-language 40] [--json]
    python -m bench.quality.bench_multilingual --unstated-only --per-language 100

The site (`../shared/corpora/opentelemetry-io/v2-site`: 11 languages, its real configuration)
is indexed by the real pipeline, with real embeddings, into
bench/results/quality-opentelemetry-io-site-<commit>/ (reused between runs). Query sets:

- per language (ja, zh, es, fr, pt): page titles of that language, `--per-language` of them
  sampled with a fixed seed (distinct titles; the answer is any page of that language with
  that title). Searched with `lang` set to the language, in each mode: hybrid (exact-title
  path off), dense, BM25. The English MiniLM model reads these texts too: the figures say
  how far that carries.
- told no language: the same title queries in every language of the site (up to
  `--per-language` each; every English title, since a search that leaves English wrongly
  costs the most users), searched as the CLI runs a search (exact-title path on) once with
  `lang` set and once with none at each word ratio (`WORD_RATIOS`): with none, a query whose
  script names one of the site's languages keeps to it, and one whose words do
  (`hetriever.search.query_language`); `kept` counts the searches that kept to the query's language.
  `--unstated-only` runs just this set.
- English titles (every distinct title of the English pages), searched with no language
  given, so each search keeps to the site's default language as a user's would: the same
  queries over the English-only index (bench_quality's opentelemetry-io store) say whether
  the other ten languages in one index change English results.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

from bench.common import (  # noqa: E402
    RESULTS_DIR,
    bench_settings,
    bm25_only,
    load_corpus_chunks,
    make_embedder,
    print_table,
)
from bench.quality.bench_quality import K, Query, index_corpus, offline_pages, pages, score  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.search import hybrid as search  # noqa: E402
from hetriever.search.request import SearchRequest

LANGUAGES = ("ja", "zh", "es", "fr", "pt")
MODES = ("hybrid", "dense", "bm25")
NAME = "opentelemetry-io"


def title_queries(corpus: Any, lang: str) -> list[Query]:
    by_title: dict[str, set[str]] = {}
    for path, chunks in corpus.files.items():
        meta = chunks[0].metadata
        if meta.get("lang") == lang and str(meta.get("title", "")).strip():
            by_title.setdefault(str(meta["title"]).strip(), set()).add(path)
    return sorted(by_title.items())


def run_set(
    store: Any, queries: list[Query], lang: str | None, bm25_lang: str | None
) -> dict[str, Any]:
    """`lang` as `hybrid_search` takes it; `bm25_lang`: the language BM25 alone keeps to (the
    BM25-only path is the bench's, which knows no default language)."""
    ranked: dict[str, list[list[str]]] = {m: [] for m in MODES}
    for q, _ in queries:
        for mode in ("hybrid", "dense"):
            got = search.hybrid_search(
                store,
                SearchRequest(
                    q, K, repositories=[NAME], exact=False, hybrid=(mode == "hybrid"), lang=lang
                ),
            )
            ranked[mode].append(pages([m.metadata for m in got.matches]))
        hits = bm25_only(
            store, q, K * 10, namespaces=[NAME], filters={"lang": bm25_lang} if bm25_lang else None
        )
        ranked["bm25"].append(pages([h.metadata for h in hits]))
    return {"queries": len(queries), **{m: score(ranked[m], queries) for m in MODES}}


WORD_RATIOS = (3.0, 10.0, 30.0, 100.0, 300.0)


def unstated_set(store: Any, queries: list[Query], lang: str, default: str) -> dict[str, Any]:
    """MRR@10 of the default search (exact path on) with `lang` stated, and told none at each
    of WORD_RATIOS (`hetriever.search.query_language.WORD_RATIO`); `kept`: how many searches told
    none kept to `lang` (the default's own queries: to no other language)."""
    from hetriever.search import query_language

    stated = [
        pages(
            [
                m.metadata
                for m in search.hybrid_search(
                    store, SearchRequest(q, K, repositories=[NAME], lang=lang)
                ).matches
            ]
        )
        for q, _ in queries
    ]
    row: dict[str, Any] = {"queries": len(queries), "stated": score(stated, queries)}
    saved = query_language.WORD_RATIO
    try:
        for ratio in WORD_RATIOS:
            query_language.WORD_RATIO = ratio
            ranked, kept = [], 0
            for q, _ in queries:
                got = search.hybrid_search(store, SearchRequest(q, K, repositories=[NAME]))
                ranked.append(pages([m.metadata for m in got.matches]))
                kept += (getattr(got, "query_language", "") or default) == lang
            row[f"none@{ratio:g}"] = {**score(ranked, queries), "kept": kept}
    finally:
        query_language.WORD_RATIO = saved
    return row


SWEEP_WEIGHT = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)


def weight_sweep(store: Any, queries: list[Query], lang: str) -> list[dict[str, Any]]:
    """Score fusion of the same dense and BM25 lists (50 chunks each, as a search of 10
    pages asks) by dense weight: how much the English model should count for `lang`."""
    lists = []
    for q, _ in queries:
        dense = search.hybrid_search(
            store,
            SearchRequest(
                q, 100, repositories=[NAME], exact=False, hybrid=False, group_by="chunk", lang=lang
            ),
        )
        bm25 = bm25_only(store, q, 100, namespaces=[NAME], filters={"lang": lang})
        lists.append(
            (
                [(m.doc_id, m.metadata, m.dense_score or 0.0) for m in dense.matches],
                [(h.doc_id, h.metadata, h.bm25_raw or 0.0) for h in bm25],
            )
        )
    return [
        {
            "dense_weight": w,
            **score([offline_pages(d, b, 50, dense_weight=w) for d, b in lists], queries),
        }
        for w in SWEEP_WEIGHT
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-language", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sweep",
        default="",
        help="languages (e.g. ja,zh) to sweep the dense weight for, over all "
        "their titles; skips the other sets",
    )
    parser.add_argument(
        "--unstated-only", action="store_true", help="only the title queries told no language"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    site = load_corpus_chunks(NAME, "v2-site")
    english = load_corpus_chunks(NAME, "v2")
    if site is None or english is None:
        print("corpus opentelemetry-io v2-site or v2 not found", file=sys.stderr)
        return 1
    embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
    print(
        f"site: {len(site.chunks)} chunks of {len(site.files)} pages; indexing",
        file=sys.stderr,
        flush=True,
    )
    store, indexed = index_corpus(site, embedder, "chunk", label="site")
    languages = sorted({str(c[0].metadata.get("lang")) for c in site.files.values()})
    default = "en"
    store.catalog.upsert_repository(
        NAME, settings={"languages": [default] + [lang for lang in languages if lang != default]}
    )
    report: dict[str, Any] = {"index": indexed, "languages": {}}
    if args.sweep:
        for lang in args.sweep.split(","):
            queries = title_queries(site, lang)
            print(f"{lang}: sweep over {len(queries)} title queries", file=sys.stderr)
            report["languages"][lang] = {
                "queries": len(queries),
                "sweep": weight_sweep(store, queries, lang),
            }
            for row in report["languages"][lang]["sweep"]:
                print(lang, len(queries), row)
        store.close_sync()
        return 0
    report["told_no_language"] = {}
    for lang in [default] + [lang for lang in languages if lang != default]:
        queries = title_queries(site, lang)
        if lang != default and len(queries) > args.per_language:  # the default's: all
            queries = random.Random(args.seed).sample(queries, args.per_language)
        row = unstated_set(store, queries, lang, default)
        report["told_no_language"][lang] = row
        print(
            f"{lang}: {len(queries)} titles, MRR@10 stated {row['stated']['mrr@10']:.3f}; "
            "told none "
            + ", ".join(
                f"x{r:g} {row[f'none@{r:g}']['mrr@10']:.3f} (kept {row[f'none@{r:g}']['kept']})"
                for r in WORD_RATIOS
            ),
            file=sys.stderr,
            flush=True,
        )
    if args.unstated_only:
        store.close_sync()
        if args.json:
            print(json.dumps(report["told_no_language"], indent=2))
        return 0
    for lang in LANGUAGES:
        queries = title_queries(site, lang)
        if len(queries) > args.per_language:
            queries = random.Random(args.seed).sample(queries, args.per_language)
        print(f"{lang}: {len(queries)} title queries", file=sys.stderr, flush=True)
        report["languages"][lang] = run_set(store, queries, lang, lang)
    en_queries = title_queries(english, "en")
    print(f"en: {len(en_queries)} title queries, both indexes", file=sys.stderr, flush=True)
    report["english_in_site"] = run_set(store, en_queries, None, default)
    store.close_sync()
    en_store, _ = index_corpus(english, embedder, "chunk")
    report["english_alone"] = run_set(en_store, en_queries, None, None)
    en_store.close_sync()
    (RESULTS_DIR / "bench_multilingual-latest.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    rows = [
        (
            lang,
            r["queries"],
            *(f"{r[m]['mrr@10']:.3f}" for m in MODES),
            *(f"{r[m]['recall@10']:.3f}" for m in MODES),
        )
        for lang, r in [
            *report["languages"].items(),
            ("en, site index", report["english_in_site"]),
            ("en, English-only index", report["english_alone"]),
        ]
    ]
    print_table(("set", "n", *(f"MRR {m}" for m in MODES), *(f"R {m}" for m in MODES)), rows)
    print(f"indexed: {indexed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
