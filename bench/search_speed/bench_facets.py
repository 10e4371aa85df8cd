"""What do a search's facets cost, and what would counting only verified pages cost?

Facets (hetriever.search.facets) count every candidate page the search fused, from the
metadata it already holds. The alternative counts only candidates fetched from Chroma and
checked (hash, scope, access), as the shown results are: that means fetching every candidate
a page search otherwise leaves unread. This indexes a real corpus with the real CLI (cached
under bench/results/), runs real questions through `hybrid_search`, and times, per search,
the search itself, the facet count, and the fetch-and-check of every unread candidate.

    .venv/bin/python -m bench.search_speed.bench_facets [--corpus hugo-docs] [--queries 146]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from bench.common import REPO_ROOT, RESULTS_DIR, _commit_tree, corpus_dir, percentile  # noqa: E402
from hetriever.core.config import load_settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.search import hybrid  # noqa: E402
from hetriever.search.candidates import _fill_documents, _Hit, _trusted  # noqa: E402
from hetriever.search.request import SearchRequest


def index(corpus: str) -> dict[str, str] | None:
    """The environment of an index of `corpus` v2, built once with `hetriever ingest`; None
    when the corpus is absent."""
    root = RESULTS_DIR / f"facets-{corpus}"
    env = {
        "HETRIEVER_DOCS_ROOT": str(root / "docs"),
        "HETRIEVER_CHROMA_PATH": str(root / "chroma"),
        "HETRIEVER_STATE_DIR": str(root / "state"),
        "HETRIEVER_LOG_LEVEL": "WARNING",
    }
    if not (root / "done").exists():
        source = corpus_dir(corpus)
        if source is None:
            return None
        shutil.rmtree(root, ignore_errors=True)
        work = root / "docs" / corpus
        shutil.copytree(source, work, copy_function=shutil.copy)
        _commit_tree(work)
        subprocess.run(
            [str(Path(sys.executable).parent / "hetriever"), "ingest"],
            check=True,
            env={**os.environ, **env},
            timeout=3600,
        )
        (root / "done").touch()
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="hugo-docs")
    parser.add_argument("--queries", type=int, default=146)
    parser.add_argument("-k", type=int, default=10)
    args = parser.parse_args()
    configure_logging("WARNING")
    env = index(args.corpus)
    if env is None:
        print(f"skipped: corpus {args.corpus} not found under the shared corpora")
        return
    questions = [
        json.loads(line)["question"]
        for line in (REPO_ROOT / "bench" / "queries" / "real_questions.jsonl")
        .read_text()
        .splitlines()
        if json.loads(line)["corpus"] == args.corpus
    ][: args.queries]
    from hetriever.store.knowledge_store import get_knowledge_store

    store = get_knowledge_store(load_settings(env=env, config_file=None))
    counted, verified, unread, pages, searches = [], [], [], [], []
    original = hybrid.page_facets

    def timed(hits, doc_ids, dropped, plans, levels, content_dir, extra):
        doc_ids = list(doc_ids)
        started = time.perf_counter()
        out = original(hits, doc_ids, dropped, plans, levels, content_dir, extra)
        counted.append((time.perf_counter() - started) * 1000)
        todo = [
            _Hit(d, hits[d].collection)
            for d in dict.fromkeys(doc_ids)
            if hits[d].metadata is None and d not in dropped
        ]
        started = time.perf_counter()
        _fill_documents(store, todo)
        kept = [h for h in todo if _trusted(h, plans, levels)]
        verified.append((time.perf_counter() - started) * 1000)
        unread.append(len(todo))
        pages.append(sum(v["count"] for v in out["repository"]))
        assert len(kept) == len(todo), "a candidate failed its check"
        return out

    hybrid.page_facets = timed
    for question in questions[:5]:  # warm: model, collections, BM25
        hybrid.hybrid_search(store, SearchRequest(question, args.k))
    del counted[:], verified[:], unread[:], pages[:]
    for question in questions:
        started = time.perf_counter()
        hybrid.hybrid_search(store, SearchRequest(question, args.k))
        searches.append((time.perf_counter() - started) * 1000)
    print(f"{args.corpus}: {len(questions)} real questions, k={args.k}, page results")
    for name, values in (
        ("search (facets included), ms", searches),
        ("facet count, ms", counted),
        ("fetch and check every unread candidate, ms", verified),
        ("unread candidates per search", unread),
        ("candidate pages counted per search", pages),
    ):
        print(f"  {name:45} median {median(values):8.2f}  p95 {percentile(values, 95):8.2f}")


if __name__ == "__main__":
    main()
