"""Stopword lists for the BM25 analyzer, compared on bench_quality's query sets and modes.

    python bench/bench_stopwords.py                 # every candidate, both corpora, every set
    python bench/bench_stopwords.py --limit 100     # a first look

Several English stopwords are Hugo template functions or methods people search for by name
(`where` is collections.Where, `in` collections.In, `and` the go-template `and`). Candidates:

- english: the English stopword list (`analyzer.ENGLISH_STOPWORDS`, the analyzer's list up to
  tokenizer version 3);
- names: that list minus every function or method name of hugo-docs (`template_names`: the
  last segment of the titles of its `functions/` and `methods/` pages, `collections.Where` ->
  `where`, and their `params.functions_and_methods.aliases`); the analyzer's list since
  version 4 (`analyzer.TEMPLATE_NAMES` holds the names this finds);
- rare-names: minus only those names found in fewer than 10% of hugo-docs' chunks (`and`,
  `in`, `with` are in a third of them: little weight, long posting lists).

Each candidate runs in a child process that swaps the analyzer's list and tokenizer id, so the
cached BM25 indexes of bench_quality are re-tokenised when opened (embeddings are reused), then
runs bench_quality's evaluation without its fusion sweeps. MRR@10 per set, mode and candidate.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_quality as bq  # noqa: E402
from common import RESULTS_DIR, bench_settings, corpus_dir, load_corpus_chunks  # noqa: E402
from common import make_embedder, print_table  # noqa: E402
from hetriever.store.bm25 import analyzer  # noqa: E402
from hetriever.store.bm25 import bm25_index as bm25
from hetriever.store.bm25 import phrases
from hetriever.core.config import Settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.parse.page import _load, split_front_matter  # noqa: E402

CANDIDATES = ("english", "names", "rare-names")
RARE = 0.10  # rare-names: a name in fewer than this share of hugo-docs' chunks


def template_names(name: str = "hugo-docs") -> set[str]:
    """Lower-cased names of the corpus's template functions and methods (see the docstring)."""
    root = corpus_dir(name)
    out: set[str] = set()
    for path in sorted(root.rglob("*.md")) if root is not None else ():
        parts = path.relative_to(root).parts
        if not {"functions", "methods"} & set(parts[:-1]) or path.name == "_index.md" \
                or "_common" in parts:
            continue
        fmt, raw, _, _ = split_front_matter(path.read_text(encoding="utf-8"))
        data, _ = _load(fmt, raw) if fmt else ({}, "")
        title = str(data.get("title") or "").rsplit(".", 1)[-1]
        info = (data.get("params") or {}).get("functions_and_methods") or {}
        aliases = info.get("aliases") or [] if isinstance(info, dict) else []
        out.update(n.lower().lstrip(".") for n in [title, *map(str, aliases)]
                   if re.fullmatch(r"\.?[A-Za-z]\w*", n))
    return out


def stopwords(candidate: str) -> frozenset[str]:
    english = analyzer.ENGLISH_STOPWORDS
    names = template_names() & english
    if candidate == "rare-names":
        chunks = (load_corpus_chunks("hugo-docs") or bq.CorpusChunks("", "", "")).chunks
        df = Counter(w for c in chunks for w in {w.lower() for w in analyzer._words(c.text)})
        names = {n for n in names if df[n] < RARE * max(1, len(chunks))}
    return english - names if candidate != "english" else english


def run_candidate(candidate: str, args: argparse.Namespace) -> dict[str, Any]:
    """bench_quality's evaluation with this candidate's stopwords (in this process only)."""
    words = stopwords(candidate)
    analyzer.STOPWORDS = words  # tokenize reads the module's global
    bm25.TOKENIZER_VERSION = f"{analyzer.TOKENIZER_VERSION}-{candidate}"  # re-tokenise on open
    phrases._PAIRS.clear()
    for name in ("SWEEP_PHRASE", "SWEEP_BM25", "SWEEP_LINKS", "SWEEP_SHORT_WEIGHT",
                 "SWEEP_WEIGHT", "SWEEP_K"):
        setattr(bq, name, ())  # the fusion sweeps do not depend on the candidate
    report: dict[str, Any] = {"candidate": candidate,
                              "kept": sorted(analyzer.ENGLISH_STOPWORDS - words), "corpora": {}}
    embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
    for name in args.corpora.split(","):
        corpus = load_corpus_chunks(name, settings=Settings())
        if corpus is None:
            continue
        store, indexed = bq.index_corpus(corpus, embedder, "chunk")
        entry: dict[str, Any] = {"index": indexed}
        for set_name, queries in bq.build_queries(corpus).items():
            if set_name not in args.sets.split(",") or not queries:
                continue
            if args.limit and len(queries) > args.limit:
                queries = random.Random(0).sample(queries, args.limit)
            print(f"{candidate} {name}/{set_name}: {len(queries)} queries", file=sys.stderr,
                  flush=True)
            r = bq.evaluate(store, corpus, queries, lambda m: None)
            entry[set_name] = {k: r[k] for k in ("queries", *bq.MODES, "default_ms")}
        store.close_sync()
        report["corpora"][name] = entry
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--corpora", default=",".join(bq.CORPORA))
    parser.add_argument("--sets", default=",".join(bq.SETS))
    parser.add_argument("--limit", type=int, default=0, help="at most this many queries per set")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    if args.child:
        print(json.dumps(run_candidate(args.child, args)))
        return 0
    reports = []
    for candidate in args.candidates.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", candidate, "--corpora",
                              args.corpora, "--sets", args.sets, "--limit", str(args.limit)],
                             check=True, stdout=subprocess.PIPE, text=True)
        reports.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{candidate}: kept {reports[-1]['kept']}", flush=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_stopwords-latest.json").write_text(json.dumps(reports, indent=2))
    rows = []
    for name in args.corpora.split(","):
        for set_name in bq.SETS:
            got = [r["corpora"].get(name, {}).get(set_name) for r in reports]
            if all(got):
                rows.append((name, set_name, got[0]["queries"], *(
                    " / ".join(f"{g[m]['mrr@10']:.3f}" for m in bq.MODES) for g in got)))
    print("MRR@10 default / hybrid / dense / bm25")
    print_table(("corpus", "set", "n", *(r["candidate"] for r in reports)), rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
