"""A learned ranker over the signals the fusion already has, for questions.

    python -m bench.quality.bench_learned               # both corpora
    python -m bench.quality.bench_learned --json

For each question (an English query of more than `short_query_terms` terms: where the
product would apply it) the first `DEPTH` pages of the product's fusion (offline, as in
bench_families "base") are re-ranked by a logistic model of per-page features:
the fused rank, dense's best similarity and rank, BM25's best score (over the best
candidate's) and rank, the links prior, the share of the query's terms in the page's title
and in its best chunk's headings, whether the page is a section index (`_index.md`), its URL
depth, and the query's length in terms. Positives are the acceptable pages (labels plus
pooled judgments, `judged.py`); the model (numpy, L2-regularised gradient descent) is chosen
by 5-fold cross-validation over the tuning part of both corpora (regularisation swept),
trained on the whole tuning part, and measured on the held-out third and on every look-up
set (bench_quality's, sampled) whose queries are long enough to count as questions.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

import numpy as np

from bench.common import RESULTS_DIR, bench_settings, make_embedder  # noqa: E402
from bench.judged import acceptable, judged_answers, success  # noqa: E402
from bench.quality.bench_quality import (  # noqa: E402
    CORPORA,
    K,
    held_out,
    question_items,  # noqa: E402
)
from bench.quality.retrievers import LOOKUP_SETS, open_corpus  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.parse.links import LinkPrior  # noqa: E402
from hetriever.search import hybrid as search  # noqa: E402
from hetriever.search.results import is_question  # noqa: E402
from hetriever.store.bm25.analyzer import tokenize  # noqa: E402

DEPTH = 20  # pages re-ranked
FOLDS = 5
L2 = (0.01, 0.1, 1.0, 10.0)
FEATURES = (
    "inv_rank",
    "dense",
    "dense_inv_rank",
    "bm25",
    "bm25_inv_rank",
    "links",
    "title_share",
    "heading_share",
    "index_page",
    "url_depth",
    "query_terms",
)


def page_features(
    q: str, d: list, b: list, ranked: list[str], prior: LinkPrior, name: str
) -> np.ndarray:
    terms = set(tokenize(q))
    best_b = max((s for _, _, s, _ in b), default=0.0) or 1.0
    dense: dict[str, tuple[float, int]] = {}
    for i, (_, m, s, _) in enumerate(d):
        dense.setdefault(str(m.get("file_path", "")), (s, i))
    bm25: dict[str, tuple[float, int]] = {}
    meta: dict[str, dict] = {}
    for i, (_, m, s, _) in enumerate(b):
        bm25.setdefault(str(m.get("file_path", "")), (s, i))
    for _, m, _, _ in d + b:
        meta.setdefault(str(m.get("file_path", "")), m)
    links = prior.values({p: (name, meta.get(p, {"file_path": p})) for p in ranked})
    rows = []
    for rank, page in enumerate(ranked):
        m = meta.get(page, {})
        ds, dr = dense.get(page, (0.0, 1000))
        bs, br = bm25.get(page, (0.0, 1000))
        title = set(tokenize(str(m.get("title", ""))))
        heading = set(tokenize(str(m.get("heading_context", ""))))
        rows.append(
            [
                1.0 / (1 + rank),
                ds,
                1.0 / (1 + dr),
                bs / best_b,
                1.0 / (1 + br),
                links.get(page, 0.0),
                len(title & terms) / max(1, len(terms)),
                len(heading & terms) / max(1, len(terms)),
                float(page.endswith("_index.md")),
                str(m.get("url", "")).strip("/").count("/") / 5.0,
                len(terms) / 30.0,
            ]
        )
    return np.asarray(rows, dtype=np.float64).reshape(len(ranked), len(FEATURES))


def fit(x: np.ndarray, y: np.ndarray, l2: float, steps: int = 400) -> np.ndarray:
    """Logistic regression by gradient descent (features standardised inside)."""
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.hstack([(x - mean) / std, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    pos = max(1.0, y.sum())
    balance = np.where(y > 0, len(y) / (2 * pos), len(y) / (2 * max(1.0, len(y) - pos)))
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-z @ w))
        grad = z.T @ ((p - y) * balance) / len(y) + l2 * np.r_[w[:-1], 0.0] / len(y)
        w -= 0.5 * grad
    return np.r_[w[:-1] / std, w[-1] - (w[:-1] * mean / std).sum()]


def rerank(model: np.ndarray, feats: np.ndarray, ranked: list[str]) -> list[str]:
    if not ranked:
        return ranked
    s = feats @ model[:-1] + model[-1]
    order = sorted(range(len(ranked)), key=lambda i: (-s[i], i))
    return [ranked[i] for i in order][:K]


def collect(embedder: Any, lookups: int, progress: Any) -> list[dict]:
    """Per query: its corpus, set, item, candidate pages, features, acceptable pages."""
    judged = judged_answers()
    rows: list[dict] = []
    for name in CORPORA:
        run = open_corpus(name, embedder)
        if run is None:
            continue
        s, lists, prior, depth = run.settings, run.lists, run.prior, run.depth
        todo: list[tuple[str, str, set[str], str]] = []
        for it in question_items(name):
            part = "questions-held-out" if held_out(it["id"]) else "questions"
            todo.append((part, it["question"], acceptable([it], judged)[0], it["id"]))
        for set_name in LOOKUP_SETS:
            todo.extend((set_name, q, rel, "") for q, rel in run.lookups(set_name, lookups))
        for set_name, q, rel, qid in todo:
            _, d = lists.dense(q)
            b = lists.bm25(q)
            ask = is_question(s, "", q)
            fused = run.fuse(q, d, b)
            ranked = fused  # offline_pages cuts at K: deepen below
            if ask:
                ranked = deep_pages(d, b, depth, s, q, prior if ask else None, name)
            rows.append(
                {
                    "corpus": name,
                    "set": set_name,
                    "qid": qid,
                    "ask": ask,
                    "base": fused,
                    "ranked": ranked,
                    "relevant": sorted(rel),
                    "features": page_features(q, d, b, ranked, prior, name).tolist() if ask else [],
                }
            )
        progress(f"{name}: {len(todo)} queries")
        run.close()
    return rows


def deep_pages(
    d: list, b: list, depth: int, s: Any, q: str, prior: LinkPrior | None, name: str
) -> list[str]:
    """The fusion's first DEPTH pages (offline_pages stops at K)."""
    from types import SimpleNamespace

    from hetriever.search.candidates import _Hit
    from hetriever.search.results import _fuse_pages, _page_of

    hits: dict[str, _Hit] = {}
    for x, m, sc, _ in d[:depth]:
        hits.setdefault(x, _Hit(x, name, metadata=m)).dense_score = sc
    for x, m, sc, _ in b[:depth]:
        hits.setdefault(x, _Hit(x, name, metadata=m)).bm25_raw = sc
    rankings = {"dense": [x for x, _, _, _ in d[:depth]], "bm25": [x for x, _, _, _ in b[:depth]]}
    settings = SimpleNamespace(
        fusion=s.fusion, rrf_k=s.rrf_k, dense_weight=search.dense_weight_for(s, "", q)
    )
    fused = _fuse_pages(settings, hits, rankings, _page_of(hits, rankings), prior)
    return [hits[p.chunks[0]].page_metadata.get("file_path", "") for p in fused][:DEPTH]


def training(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    x = np.vstack([np.asarray(r["features"]) for r in rows if r["features"]])
    y = np.concatenate(
        [[float(p in set(r["relevant"])) for p in r["ranked"]] for r in rows if r["features"]]
    )
    return x, y


def evaluate(rows: list[dict], model: np.ndarray | None) -> dict[str, float]:
    got = [
        rerank(model, np.asarray(r["features"]), r["ranked"])
        if model is not None and r["features"]
        else r["base"]
        for r in rows
    ]
    return success(got, [set(r["relevant"]) for r in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=150)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    cache = RESULTS_DIR / f"bench_learned-rows-{args.lookups}.json"
    if cache.is_file():
        rows = json.loads(cache.read_text())
    else:
        embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
        rows = collect(embedder, args.lookups, lambda m: print(m, file=sys.stderr, flush=True))
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(rows))
    tuning = [r for r in rows if r["set"] == "questions"]
    order = list(range(len(tuning)))
    random.Random(0).shuffle(order)
    cv: dict[float, dict[str, float]] = {}
    for l2 in L2:  # 5-fold cross-validation over the tuning part
        ranked_all: list[dict] = []
        for fold in range(FOLDS):
            test = [tuning[i] for i in order[fold::FOLDS]]
            train = [tuning[i] for j, i in enumerate(order) if j % FOLDS != fold]
            model = fit(*training(train), l2)
            ranked_all.append({"n": len(test), **evaluate(test, model)})
        n = sum(r["n"] for r in ranked_all)
        cv[l2] = {
            k: round(sum(r[k] * r["n"] for r in ranked_all) / n, 3)
            for k in ("success@1", "success@3", "mrr@10")
        }
    best = max(L2, key=lambda v: (cv[v]["mrr@10"], cv[v]["success@1"]))
    model = fit(*training(tuning), best)
    sets = sorted({(r["corpus"], r["set"]) for r in rows})
    report = {
        "cv_tuning": {str(k): v for k, v in cv.items()},
        "l2": best,
        "weights": dict(zip(FEATURES + ("bias",), np.round(model, 3).tolist())),
        "sets": {
            f"{c}/{s}": {
                "queries": sum(1 for r in rows if (r["corpus"], r["set"]) == (c, s)),
                "reranked": sum(
                    1 for r in rows if (r["corpus"], r["set"]) == (c, s) and r["features"]
                ),
                "base": evaluate([r for r in rows if (r["corpus"], r["set"]) == (c, s)], None),
                "learned": evaluate([r for r in rows if (r["corpus"], r["set"]) == (c, s)], model),
            }
            for c, s in sets
        },
    }
    (RESULTS_DIR / "bench_learned-latest.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
