"""Chroma alone: what writing a chunk costs with its text as a Chroma document or as metadata.

    python bench/bench_chroma_text.py [--corpus hugo-docs] [--rounds 3] [--server] [--json]

Why: local Chroma (embedded and `chroma run`) puts every document into a trigram full-text
index on each write and takes it out on each delete; hetriever never queries that index, so
chunk texts are kept as a metadata value instead (`hetriever/store/chunk_records.py`).

The real chunks of a v2 corpus (the sample docs repeated when it is absent), with random unit
vectors (384-d, as MiniLM), are written to a fresh collection in batches of 100 (the default
`batch_size`) both ways, alternating, `--rounds` times: the text as Chroma documents (before)
and through `ChunkCollection` (now). Timed: the upsert of every chunk, a re-upsert of a third
of them with changed text (an incremental run's new chunks over old ids), the delete of
another third, and a read of 50 chunks' texts and metadata by id (what a search fetches);
then the size of the Chroma directory. Medians of the rounds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import chroma_server, load_corpus_chunks, load_sample_chunks, print_table  # noqa: E402

from hetriever.store.chunk_records import ChunkCollection  # noqa: E402

BATCH = 100
READS = 200


def _collection(client: Any, layout: str) -> Any:
    col = client.get_or_create_collection("chunks", embedding_function=None,
                                          configuration={"hnsw": {"space": "cosine"}})
    return col if layout == "documents" else ChunkCollection(col)


def one_round(layout: str, ids: list[str], texts: list[str], metas: list[dict],
              vectors: np.ndarray, server: bool) -> dict[str, float]:
    import chromadb

    root = Path(tempfile.mkdtemp(prefix="bench-chroma-text-"))
    try:
        if server:
            with chroma_server(root / "server") as port:
                return _measure(_collection(chromadb.HttpClient(port=port), layout),
                                ids, texts, metas, vectors, root / "server")
        return _measure(_collection(chromadb.PersistentClient(path=str(root / "db")), layout),
                        ids, texts, metas, vectors, root / "db")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _timed_batches(call: Any, n: int, **columns: Any) -> float:
    began = time.perf_counter()
    for start in range(0, n, BATCH):
        call(**{k: v[start:start + BATCH] for k, v in columns.items()})
    return time.perf_counter() - began


def _measure(col: Any, ids: list[str], texts: list[str], metas: list[dict],
             vectors: np.ndarray, path: Path) -> dict[str, float]:
    n, third = len(ids), len(ids) // 3
    out = {"upsert_s": _timed_batches(col.upsert, n, ids=ids, embeddings=vectors,
                                      documents=texts, metadatas=metas)}
    changed = [t + " (changed)" for t in texts[:third]]
    out["reupsert_s"] = _timed_batches(col.upsert, third, ids=ids[:third],
                                       embeddings=vectors[:third], documents=changed,
                                       metadatas=metas[:third])
    out["delete_s"] = _timed_batches(col.delete, third, ids=ids[third:2 * third])
    rng = np.random.default_rng(1)
    rest = ids[:third] + ids[2 * third:]
    began = time.perf_counter()
    for _ in range(READS):
        picked = [rest[i] for i in rng.choice(len(rest), 50, replace=False)]
        got = col.get(ids=picked, include=["documents", "metadatas"])
        assert all(got["documents"]), "a chunk came back without its text"
    out["read50_ms"] = (time.perf_counter() - began) / READS * 1000
    out["disk_mb"] = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="hugo-docs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", action="store_true", help="against `chroma run`")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    corpus = load_corpus_chunks(args.corpus) or load_sample_chunks(40)
    chunks = corpus.chunks
    ids = [c.id for c in chunks]
    texts = [c.text for c in chunks]
    metas = [dict(c.metadata) for c in chunks]
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(chunks), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    runs: dict[str, list[dict[str, float]]] = {"documents": [], "metadata": []}
    for _ in range(args.rounds):
        for layout in runs:
            runs[layout].append(one_round(layout, ids, texts, metas, vectors, args.server))
    keys = list(runs["documents"][0])
    report = {
        "source": corpus.source, "chunks": len(chunks), "rounds": args.rounds,
        "backend": "chroma run" if args.server else "embedded",
        "median": {layout: {k: round(statistics.median(r[k] for r in rows), 3) for k in keys}
                   for layout, rows in runs.items()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['source']}: {report['chunks']} chunks, {report['backend']}, "
          f"median of {args.rounds} rounds")
    med = report["median"]
    print_table(["text kept as", *keys],
                [[layout, *(med[layout][k] for k in keys)] for layout in med]
                + [["documents / metadata",
                    *(round(med["documents"][k] / med["metadata"][k], 2) for k in keys)]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
