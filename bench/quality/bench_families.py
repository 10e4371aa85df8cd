"""Retrieval families for questions, each measured on every set against the same baseline.

    python -m bench.quality.bench_families                 # both corpora, look-up sets sampled
    python -m bench.quality.bench_families --lookups 300 --json

Per corpus, in the quality bench's cached store (`bench_quality.index_corpus`), every query
is run once through each retriever (dense and BM25, 100 chunks each), and pages are fused
offline by the product's own fusion (`bench_quality.offline_pages`: score fusion, the dense
weight by query length, the links prior for questions), so each family is compared with
exactly the same baseline:
- base: the lists as they are;
- asking: a question of two sentences or more reduced to its asking sentences (those ending
  in "?" or opening with a question or request word: how, why, can, is there, I want...);
  left as it is when it has none; asking1: the same with the first sentence kept too;
- rm3: BM25 pseudo-relevance feedback (RM3 style): the query plus the 10 words that weigh most
  in BM25's first 10 chunks (each chunk's word shares, weighted by its normalised score),
  query words and stopwords aside;
- rocchio: dense pseudo-relevance feedback: the query vector plus half the mean vector of
  dense's first 5 chunks, normalised, searched again;
- prf: rm3 and rocchio together.
Sets: the question sets (tuning part and held-out third, on labels alone and on labels plus
pooled judgments, `judged.py`) and the look-up sets of bench_quality (title, description,
heading, section, url, function), each sampled to at most --lookups queries (seeded).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from typing import Any

from bench.common import (  # noqa: E402
    RESULTS_DIR,
    bench_settings,
    make_embedder,
    print_table,  # noqa: E402
)
from bench.judged import acceptable, judged_answers, success  # noqa: E402
from bench.quality.bench_quality import (  # noqa: E402
    CORPORA,
    held_out,
    question_items,
)
from bench.quality.retrievers import LOOKUP_SETS, open_corpus  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.store.bm25.analyzer import STOPWORDS  # noqa: E402

FAMILIES = ("base", "asking", "asking1", "rm3", "rocchio", "prf")
FEEDBACK_DOCS, FEEDBACK_TERMS = 10, 10  # rm3
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_ASKING = re.compile(
    r"^\s*(how|what|why|when|where|which|who|whom|whose|is|are|can|could|"
    r"should|shall|does|do|did|will|would|may|might|has|have|any|anyone|"
    r"i want|i need|i'd like|i would like|i'm trying|i am trying|is there|"
    r"are there|please)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")


def asking_sentences(question: str, first: bool = False) -> str:
    """The sentences of a question that ask (see the module docstring), else the question;
    with `first`, its first sentence too (what the question is about: "Any possibility to
    change it?" says nothing alone)."""
    sentences = [s.strip() for s in _SENTENCE.split(question) if s and s.strip()]
    if len(sentences) < 2:
        return question
    kept = [i for i, s in enumerate(sentences) if s.endswith("?") or _ASKING.match(s)]
    if first and kept and kept[0] != 0:
        kept = [0] + kept
    return " ".join(sentences[i] for i in kept) if kept and len(kept) < len(sentences) else question


def rm3_query(query: str, hits: list[tuple[str, dict, float, str]]) -> str:
    """The query plus FEEDBACK_TERMS feedback words of BM25's first FEEDBACK_DOCS chunks."""
    top = hits[:FEEDBACK_DOCS]
    total = sum(s for _, _, s, _ in top) or 1.0
    asked = set(_WORD.findall(query.lower()))
    weights: Counter[str] = Counter()
    for _, _, score, text in top:
        words = [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]
        if not words:
            continue
        for word, count in Counter(words).items():
            if word not in asked:
                weights[word] += (score / total) * count / len(words)
    return query + " " + " ".join(w for w, _ in weights.most_common(FEEDBACK_TERMS))


def run_corpus(name: str, embedder: Any, lookups: int, progress: Any) -> dict[str, Any]:
    run = open_corpus(name, embedder)
    if run is None:
        return {}
    lists, fuse = run.lists, run.fuse
    items = question_items(name)
    sets: dict[str, list[tuple[str, Any]]] = {
        "questions": [(it["question"], it) for it in items if not held_out(it["id"])],
        "questions-held-out": [(it["question"], it) for it in items if held_out(it["id"])],
    }
    for set_name in LOOKUP_SETS:
        sets[set_name] = run.lookups(set_name, lookups)

    judged = judged_answers()
    out: dict[str, Any] = {}
    for set_name, qs in sets.items():
        ranked: dict[str, list[list[str]]] = {f: [] for f in FAMILIES}
        changed = Counter()
        for q, _ in qs:
            vector, d = lists.dense(q)
            b = lists.bm25(q)
            ranked["base"].append(fuse(q, d, b))
            short = asking_sentences(q)
            if short != q:
                changed["asking"] += 1
                ranked["asking"].append(fuse(short, lists.dense(short)[1], lists.bm25(short)))
            else:
                ranked["asking"].append(ranked["base"][-1])
            short1 = asking_sentences(q, first=True)
            if short1 == short:
                ranked["asking1"].append(ranked["asking"][-1])
            elif short1 == q:
                ranked["asking1"].append(ranked["base"][-1])
            else:
                ranked["asking1"].append(fuse(short1, lists.dense(short1)[1], lists.bm25(short1)))
            b3 = lists.bm25(rm3_query(q, b))
            d3 = lists.rocchio(vector, d)
            ranked["rm3"].append(fuse(q, d, b3))
            ranked["rocchio"].append(fuse(q, d3, b))
            ranked["prf"].append(fuse(q, d3, b3))
        if set_name.startswith("questions"):
            its = [it for _, it in qs]
            entry = {
                "queries": len(qs),
                "asking_changed": changed["asking"],
                **{
                    f: {
                        "labels": success(ranked[f], acceptable(its, None)),
                        "judged": success(ranked[f], acceptable(its, judged)),
                    }
                    for f in FAMILIES
                },
            }
        else:
            rel = [r for _, r in qs]
            entry = {
                "queries": len(qs),
                "asking_changed": changed["asking"],
                **{f: {"labels": success(ranked[f], rel)} for f in FAMILIES},
            }
        out[set_name] = entry
        progress(f"{name}/{set_name}: {len(qs)} queries")
    run.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default=",".join(CORPORA))
    parser.add_argument(
        "--lookups", type=int, default=200, help="at most this many queries per look-up set"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure_logging("ERROR")

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
    report = {
        name: run_corpus(name, embedder, args.lookups, progress) for name in args.corpora.split(",")
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_families-latest.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    rows = []
    for name, sets in report.items():
        for set_name, entry in sets.items():
            for kind in ("labels", "judged"):
                if kind not in entry["base"]:
                    continue
                rows.append(
                    (
                        name,
                        set_name,
                        kind,
                        entry["queries"],
                        *(
                            f"{entry[f][kind]['success@1']:.3f}/{entry[f][kind]['mrr@10']:.3f}"
                            for f in FAMILIES
                        ),
                    )
                )
    print("success@1 / MRR@10 per family")
    print_table(("corpus", "set", "count", "n", *FAMILIES), rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
