"""Many sites as one ranking: the question sets searched with no repository named.

    python -m bench.quality.bench_many_sites                 # every question, both scopes
    python -m bench.quality.bench_many_sites --json

One embedded store holds hugo-docs v2, opentelemetry-io v2 and ten copies of the bundled
examples/sample-docs, each copy its own repository (`sample-docs-01` ... `-10`): twelve
collections. Vectors are those of the quality bench's per-corpus stores (the same model on
the same chunk texts), read from them rather than embedded again; a text they lack is
embedded. Cached in bench/results/many-sites-<commits>/.

Every question of the Hugo and OpenTelemetry sets (tuning part and held-out third,
`bench_quality.held_out`) is searched three ways with `hybrid_search` as the CLI runs it:
- own: in its own repository (`namespaces=[corpus]`), the reference;
- both: over the two real sites (`namespaces=["hugo-docs", "opentelemetry-io"]`);
- all: with no repository named (all twelve).
Reported per corpus and part: MRR@10, success@1 and success@3 on labels alone and on labels
plus pooled judgments (`judged.py`), the share of questions whose first result is
another site's page ("foreign@1"), and each scope's search time (p50 / p95, ms).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from bench.common import (  # noqa: E402
    RESULTS_DIR,
    CorpusChunks,
    bench_settings,
    load_corpus_chunks,
    load_sample_chunks,
    make_embedder,
    make_store,
    percentile,
    print_table,
    write_corpus,
)
from bench.judged import acceptable, judged_answers, success  # noqa: E402
from bench.quality.bench_quality import CORPORA, K, held_out, question_items  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.search import hybrid as search  # noqa: E402
from hetriever.search.gathering import candidate_depth  # noqa: E402
from hetriever.search.request import SearchRequest  # noqa: E402

SAMPLE_COPIES = 10
SCOPES = ("own", "both", "all")


class ReusingEmbedder:
    """The embedder, answering texts whose vectors another store already holds from those."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.known = inner, {}
        self.name, self.max_tokens = inner.name, inner.max_tokens
        self.calls = self.texts_embedded = 0

    @property
    def dimensions(self) -> int:
        return int(self.inner.dimensions)

    def learn(self, store: Any, repository: str) -> None:
        col = store.collection(repository)
        if col is None:
            return
        got = col.get(include=["documents", "embeddings"])
        for text, vector in zip(got["documents"] or [], got["embeddings"]):
            self.known[text] = np.asarray(vector, dtype=np.float32)

    def embed(self, texts: Any) -> np.ndarray:
        """Known texts from the other stores; any other (a query) embedded every time, so a
        search costs what it costs."""
        missing = [t for t in texts if t not in self.known]
        fresh = dict(zip(missing, self.inner.embed(missing))) if missing else {}
        self.calls += 1
        self.texts_embedded += len(texts)
        return (
            np.stack([self.known[t] if t in self.known else fresh[t] for t in texts])
            if texts
            else np.zeros((0, self.dimensions), dtype=np.float32)
        )


def build_store(progress: Any) -> tuple[Any, dict[str, CorpusChunks]]:
    from bench.quality.bench_quality import index_corpus

    inner = make_embedder(bench_settings(RESULTS_DIR / "unused"))
    embedder = ReusingEmbedder(inner)
    corpora: dict[str, CorpusChunks] = {}
    for name in CORPORA:
        corpus = load_corpus_chunks(name)
        if corpus is None:
            raise SystemExit(f"{name} v2 not found (set HETRIEVER_CORPORA)")
        own, _ = index_corpus(corpus, inner, "chunk")  # the quality bench's store: its vectors
        embedder.learn(own, name)
        own.close_sync()
        corpora[name] = corpus
    for i in range(1, SAMPLE_COPIES + 1):
        copy = load_sample_chunks(1, repo_name=f"sample-docs-{i:02d}")
        corpora[copy.name] = copy
    key = "-".join(corpora[n].commit[:8] for n in CORPORA)
    store = make_store(RESULTS_DIR / f"many-sites-{key}-x{SAMPLE_COPIES}", embedder)
    began = time.perf_counter()
    for corpus in corpora.values():
        write_corpus(store, corpus)
    progress(
        f"store ready in {time.perf_counter() - began:.0f} s "
        f"({embedder.inner.texts_embedded} texts embedded)"
    )
    return store, corpora


TIMES: dict[str, list[float]] = {}  # scope -> ms per search


def ranked_pages(
    store: Any, query: str, namespaces: list[str] | None, scope: str = ""
) -> list[str]:
    began = time.perf_counter()
    got = search.hybrid_search(store, SearchRequest(query, K, repositories=namespaces))
    TIMES.setdefault(scope, []).append((time.perf_counter() - began) * 1000.0)
    return list(
        dict.fromkeys(
            f"{m.metadata.get('repository')}:{m.metadata.get('file_path')}" for m in got.matches
        )
    )[:K]


def measure(
    store: Any, items: list[dict], progress: Any, scopes_run: tuple[str, ...] = SCOPES
) -> dict[str, list[list[str]]]:
    scopes = {"own": None, "both": list(CORPORA), "all": None}
    runs: dict[str, list[list[str]]] = {s: [] for s in scopes_run}
    for i, item in enumerate(items):
        for scope in scopes_run:
            ns = [item["corpus"]] if scope == "own" else scopes[scope]
            runs[scope].append(ranked_pages(store, item["question"], ns, scope))
        if i % 100 == 99:
            progress(f"  {i + 1}/{len(items)} questions")
    return runs


def sweep(store: Any, items: list[dict], margins: list[float], progress: Any) -> list[dict]:
    """The no-repository search at each `route_margin` (1 = every site kept): MRR@10 on
    labels and foreign@1 per corpus and part."""
    base = store.settings
    out = []
    for margin in margins:
        store.settings = base.model_copy(update={"route_margin": margin})
        progress(f"route_margin {margin}")
        runs = measure(store, items, progress, ("all",))
        got = report(items, runs, ("all",))
        out.append(
            {
                "route_margin": margin,
                **{
                    key: {
                        "mrr@10": e["all"]["labels"]["mrr@10"],
                        "judged_mrr@10": e["all"]["judged"]["mrr@10"],
                        "foreign@1": e["all"]["foreign@1"],
                    }
                    for key, e in got.items()
                },
            }
        )
    store.settings = base
    return out


ROUTE_TOPS = (1, 3, 5, 8, 10)
CENTROID_WEIGHTS = (0.0, 0.2, 0.3, 0.4, 0.5, 1.0)
VETO_GAPS = (0.0, 0.03, 0.05, 0.07, 0.1)  # 0: no veto
VETO_SHARES = (0.3, 0.4, 0.5, 0.6)


def route_grid(store: Any, items: list[dict]) -> list[dict]:
    """How often routing (margin 0) keeps a site other than the question's, by the nearest
    chunks it averages and the centroid's weight: tuning part / held-out third."""
    from hetriever.search.candidates import _Hit
    from hetriever.search.gathering import _best_keyword_scores
    from hetriever.search.routing import centroid, keyword_veto, relevance

    names = store.repository_names()
    centroids = {name: centroid(store, name) for name in names}
    n = candidate_depth(K, "page")
    seen = []
    for item in items:
        vector = store.embedder.embed([item["question"]])[0]
        hits: dict[str, _Hit] = {}
        ids = search._dense(store, names, vector, n, {m: None for m in names}, hits, each=True)
        seen.append((item, hits, ids, vector))
    keywords = [
        _best_keyword_scores(store, item["question"], names, {m: None for m in names})
        for item, _, _, _ in seen
    ]
    out = []
    for gap in VETO_GAPS:  # the keyword veto at 5 chunks, weight 0.3
        for share in VETO_SHARES:
            wrong = {False: 0, True: 0}
            for (item, hits, ids, vector), words in zip(seen, keywords):
                scores = keyword_veto(
                    relevance(hits, ids, 5, centroids, vector, 0.3), words, gap, share
                )
                wrong[held_out(item["id"])] += max(scores, key=scores.get) != item["corpus"]
            out.append(
                {
                    "veto_gap": gap,
                    "veto_share": share,
                    "wrong_tuning": wrong[False],
                    "wrong_held_out": wrong[True],
                }
            )
    for top in ROUTE_TOPS:
        for weight in CENTROID_WEIGHTS:
            wrong = {False: 0, True: 0}
            for item, hits, ids, vector in seen:
                scores = relevance(hits, ids, top, centroids, vector, weight)
                wrong[held_out(item["id"])] += max(scores, key=scores.get) != item["corpus"]
            out.append(
                {
                    "top": top,
                    "centroid_weight": weight,
                    "wrong_tuning": wrong[False],
                    "wrong_held_out": wrong[True],
                }
            )
    return out


def report(
    items: list[dict], runs: dict[str, list[list[str]]], scopes: tuple[str, ...] = SCOPES
) -> dict:
    judged = judged_answers()
    out: dict[str, Any] = {}
    for corpus in CORPORA:
        for part, held in (("tuning", False), ("held-out", True)):
            idx = [
                i
                for i, it in enumerate(items)
                if it["corpus"] == corpus and held_out(it["id"]) == held
            ]
            part_items = [items[i] for i in idx]
            entry: dict[str, Any] = {"questions": len(idx)}
            for scope in scopes:
                got = [
                    [
                        p.split(":", 1)[1] if p.startswith(corpus + ":") else "\x00" + p
                        for p in runs[scope][i]
                    ]
                    for i in idx
                ]
                foreign = sum(
                    1
                    for i in idx
                    if runs[scope][i] and not runs[scope][i][0].startswith(corpus + ":")
                )
                entry[scope] = {
                    "labels": success(got, acceptable(part_items, None)),
                    "judged": success(got, acceptable(part_items, judged)),
                    "foreign@1": round(foreign / max(1, len(idx)), 3),
                }
            out[f"{corpus}/{part}"] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="at most this many questions")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--margins",
        default="",
        help="comma-separated route_margin values to sweep (no-repository "
        "search only), e.g. 0,0.02,0.05,1",
    )
    parser.add_argument(
        "--route-grid",
        action="store_true",
        help="also count wrong routings by nearest chunks and centroid weight",
    )
    args = parser.parse_args(argv)
    configure_logging("ERROR")

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    store, _ = build_store(progress)
    items = question_items()
    if args.limit:
        items = items[: args.limit]
    margins = [float(m) for m in args.margins.split(",") if m.strip()]
    swept = sweep(store, items, margins, progress) if margins else []
    grid = route_grid(store, items) if args.route_grid else []
    TIMES.clear()
    runs = measure(store, items, progress)
    ms = {
        scope: {
            "p50": round(percentile(TIMES[scope], 50), 1),
            "p95": round(percentile(TIMES[scope], 95), 1),
        }
        for scope in SCOPES
    }
    store.close_sync()
    result = {
        "sample_copies": SAMPLE_COPIES,
        "route_margin": store.settings.route_margin,
        "sets": report(items, runs),
        "margin_sweep": swept,
        "route_grid": grid,
        "ms": ms,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_many_sites-latest.json").write_text(json.dumps(result, indent=2))
    (RESULTS_DIR / "bench_many_sites-runs.json").write_text(
        json.dumps({"items": [it["id"] for it in items], "runs": runs})
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    rows = []
    for key, entry in result["sets"].items():
        for scope in SCOPES:
            r = entry[scope]
            rows.append(
                (
                    key,
                    entry["questions"],
                    scope,
                    r["labels"]["mrr@10"],
                    r["labels"]["success@1"],
                    r["judged"]["mrr@10"],
                    r["judged"]["success@1"],
                    r["judged"]["success@3"],
                    r["foreign@1"],
                )
            )
    print_table(
        (
            "set",
            "n",
            "scope",
            "MRR labels",
            "s@1 labels",
            "MRR judged",
            "s@1 judged",
            "s@3 judged",
            "foreign@1",
        ),
        rows,
    )
    print(
        "search ms p50 / p95: "
        + ", ".join(f"{scope} {v['p50']} / {v['p95']}" for scope, v in ms.items())
    )
    for cell in grid:
        what = (
            f"veto gap {cell['veto_gap']}, share {cell['veto_share']}"
            if "veto_gap" in cell
            else f"top {cell['top']}, centroid weight {cell['centroid_weight']}"
        )
        print(
            f"{what}: wrong site {cell['wrong_tuning']} tuning / {cell['wrong_held_out']} held out"
        )
    for cell in swept:
        print(
            f"route_margin {cell['route_margin']}: "
            + "; ".join(
                f"{key} MRR {v['mrr@10']:.3f} foreign@1 {v['foreign@1']:.3f}"
                for key, v in cell.items()
                if key != "route_margin"
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
