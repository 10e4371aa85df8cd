"""The judging pool of the question sets: pages the retrievers put first that are not labels.

    python -m bench.quality.make_pool                  # both corpora, every question, top 3
    python -m bench.quality.make_pool --top 5          # deeper

For every question of bench/queries/real_questions.jsonl and questions.jsonl (tuning part and
held-out third alike), searched in its own corpus's store (the quality bench's cached store,
`bench_quality.index_corpus`), the first `--top` pages of each retriever:
- default: `hybrid_search` as the CLI runs it,
- dense: dense alone (`hybrid=False`),
- bm25: BM25 alone (`common.bm25_only`),
become (question, page) pairs; pairs whose page is already one of the question's labels are
left out. Pairs are appended to bench/queries/pools/pool.jsonl, one JSON object a line:
{"qid", "corpus", "question", "path", "url", "title", "heading", "passage", "retrievers"},
and a pair already in the file is never written again, so a later ranking run adds only the
pages it newly brings into its top (judgments of the old pairs stay valid).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, bench_settings, bm25_only, load_corpus_chunks, make_embedder  # noqa: E402
from bench.quality.bench_quality import CORPORA, QUERIES, K, index_corpus, question_items  # noqa: E402
from hetriever.core.config import Settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.search import hybrid as search  # noqa: E402
from hetriever.search.gathering import candidate_depth  # noqa: E402
from hetriever.search.request import SearchRequest  # noqa: E402

POOL = QUERIES / "pools" / "pool.jsonl"
PASSAGE_CHARS = 1200

# (path, metadata, best chunk's text) of a retriever's pages, best first
Pages = list[tuple[str, dict, str]]


def _distinct(rows: list[tuple[dict, str]], top: int) -> Pages:
    out: dict[str, tuple[str, dict, str]] = {}
    for meta, text in rows:
        path = str(meta.get("file_path", ""))
        if path and path not in out:
            out[path] = (path, meta, text)
    return list(out.values())[:top]


def retrievers(top: int) -> dict[str, Callable[[Any, str, list[str]], Pages]]:
    def default(store: Any, q: str, ns: list[str]) -> Pages:
        got = search.hybrid_search(store, SearchRequest(q, K, repositories=ns))
        return _distinct([(m.metadata, m.content) for m in got.matches], top)

    def dense(store: Any, q: str, ns: list[str]) -> Pages:
        got = search.hybrid_search(
            store, SearchRequest(q, K, repositories=ns, exact=False, hybrid=False)
        )
        return _distinct([(m.metadata, m.content) for m in got.matches], top)

    def bm25(store: Any, q: str, ns: list[str]) -> Pages:
        hits = bm25_only(store, q, candidate_depth(K, "page"), namespaces=ns)
        return _distinct([(h.metadata or {}, h.content or "") for h in hits], top)

    return {"default": default, "dense": dense, "bm25": bm25}


def known_pairs(path: Path) -> set[tuple[str, str]]:
    if not path.is_file():
        return set()
    return {
        (row["qid"], row["path"])
        for row in (
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        )
    }


def pool_item(
    store: Any, item: dict, ask: dict[str, Callable[[Any, str, list[str]], Pages]]
) -> list[dict]:
    """The (question, page) pairs of one item, labels left out, in first-seen order."""
    pairs: dict[str, dict] = {}
    labels = set(item["answers"])
    for name, run in ask.items():
        for path, meta, text in run(store, item["question"], [item["corpus"]]):
            if path in labels:
                continue
            pair = pairs.setdefault(
                path,
                {
                    "qid": item["id"],
                    "corpus": item["corpus"],
                    "question": item["question"],
                    "path": path,
                    "url": str(meta.get("url", "")),
                    "title": str(meta.get("title", "")),
                    "heading": str(meta.get("heading_context", "")),
                    "passage": text[:PASSAGE_CHARS],
                    "retrievers": [],
                },
            )
            pair["retrievers"].append(name)
    return list(pairs.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default=",".join(CORPORA))
    parser.add_argument("--top", type=int, default=3, help="pages of each retriever")
    parser.add_argument("--out", type=Path, default=POOL)
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    known = known_pairs(args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
    ask = retrievers(args.top)
    added = 0
    for name in args.corpora.split(","):
        corpus = load_corpus_chunks(name, settings=Settings())
        if corpus is None:
            print(f"skipping {name}: corpus not found", file=sys.stderr)
            continue
        store, _ = index_corpus(corpus, embedder, "chunk")
        items = question_items(name)
        with args.out.open("a", encoding="utf-8") as out:
            for i, item in enumerate(items):
                for pair in pool_item(store, item, ask):
                    if (pair["qid"], pair["path"]) in known:
                        continue
                    known.add((pair["qid"], pair["path"]))
                    out.write(json.dumps(pair, ensure_ascii=False) + "\n")
                    added += 1
                if i % 50 == 49:
                    print(f"{name}: {i + 1}/{len(items)} questions", file=sys.stderr, flush=True)
        store.close_sync()
    print(f"{added} new pairs in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
