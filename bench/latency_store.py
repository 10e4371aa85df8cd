"""The store the latency benches search: real chunks of hugo-docs v2 (or the sample docs
repeated), their real vectors copied with small perturbations up to N chunks, written straight
to Chroma and BM25 (bench_store, bench_serve and bench_first_query share it)."""

from __future__ import annotations

import hashlib
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    RESULTS_DIR,
    CorpusChunks,
    load_corpus_chunks,
    load_sample_chunks,
    make_store,
)
from hetriever.core.names import content_hash

MAIN, SIDE = "bench-main", "bench-side"
SIDE_SIZE = 1000
NOISE_NORM = 0.35  # expected norm of the perturbation added to a unit vector
TOP_K = 10


def load_chunks(quick: bool) -> CorpusChunks:
    chunks = load_corpus_chunks("hugo-docs")
    if chunks is None:
        print("hugo-docs v2 not found: using examples/sample-docs repeated", file=sys.stderr)
        chunks = load_sample_chunks(10 if quick else 70)
    if quick:  # the first files up to ~600 chunks
        kept, n = {}, 0
        for path, file_chunks in chunks.files.items():
            if n >= 600:
                break
            kept[path] = file_chunks
            n += len(file_chunks)
        chunks.files = kept
    return chunks


def _perturbed(
    corpus: CorpusChunks,
    vectors: np.ndarray,
    n: int,
    collection: str,
    rng: np.random.Generator,
    word_rng: random.Random,
) -> tuple[list, list, list, np.ndarray]:
    base = corpus.chunks
    ids, texts, metas = [], [], []
    out = np.empty((n, vectors.shape[1]), dtype=np.float32)
    sigma = NOISE_NORM / np.sqrt(vectors.shape[1])
    for i in range(n):
        j, chunk = divmod(i, len(base))[0], base[i % len(base)]
        text = chunk.text
        meta = dict(chunk.metadata, repository=collection)
        vec = vectors[i % len(base)]
        if j or collection != MAIN:
            words = text.split(" ")
            text = " ".join(w for w in words if word_rng.random() >= 0.1) or text
            meta["file_path"] = f"copy-{j}/{meta['file_path']}"
            vec = vec + rng.normal(0.0, sigma, vec.shape).astype(np.float32)
            vec = vec / np.linalg.norm(vec)
        meta["content_hash"] = content_hash(text)
        ids.append(hashlib.sha256(f"{collection}/{j}/{chunk.id}".encode()).hexdigest())
        texts.append(text)
        metas.append(meta)
        out[i] = vec
    return ids, texts, metas, out


def build_latency_store(
    corpus: CorpusChunks, vectors: np.ndarray, size: int, root: Path, embedder: Any
) -> tuple[Any, dict]:
    store = make_store(root, embedder)
    rng, word_rng = np.random.default_rng(size), random.Random(size)
    timings = {}
    for name, n in ((MAIN, size), (SIDE, SIDE_SIZE)):
        ids, texts, metas, vecs = _perturbed(corpus, vectors, n, name, rng, word_rng)
        store.writes.ensure_collection(name)
        col = store.collection(name)
        step = int(store.chroma.client.get_max_batch_size())
        began = time.perf_counter()
        for start in range(0, n, step):
            sl = slice(start, start + step)
            col.add(ids=ids[sl], embeddings=vecs[sl], documents=texts[sl], metadatas=metas[sl])
        chroma_s = time.perf_counter() - began
        began = time.perf_counter()
        index = store.bm25(name)
        with index.transaction():
            for start in range(0, n, 5000):
                sl = slice(start, start + 5000)
                index.upsert(ids[sl], texts[sl], metas[sl])
        timings[name] = {
            "chunks": n,
            "chroma_add_s": round(chroma_s, 1),
            "bm25_build_s": round(time.perf_counter() - began, 1),
        }
    return store, timings


def query_set(corpus: CorpusChunks, n: int, seed: int) -> list[tuple[str, dict]]:
    """(description text, {"section": the page's section}) of pages that have a description."""
    seen: dict[str, tuple[str, dict]] = {}
    for chunk in corpus.chunks:
        desc = chunk.metadata.get("description")
        if isinstance(desc, str) and len(desc.split()) >= 3 and chunk.file_path not in seen:
            seen[chunk.file_path] = (desc, {"section": chunk.metadata.get("section", "")})
    if not seen:  # the fallback corpus has few descriptions: titles instead
        for chunk in corpus.chunks:
            seen.setdefault(
                chunk.file_path,
                (str(chunk.metadata["title"]), {"section": chunk.metadata.get("section", "")}),
            )
    pool = list(seen.values())
    random.Random(seed).shuffle(pool)
    return [pool[i % len(pool)] for i in range(n)]


def embeddings_for(corpus: CorpusChunks, embedder: Any) -> np.ndarray:
    """Vectors of the corpus chunks, cached under bench/results by content."""
    key = hashlib.sha256("\n".join(c.id for c in corpus.chunks).encode()).hexdigest()[:16]
    path = RESULTS_DIR / f"embeddings-{corpus.name}-{key}.npy"
    if path.exists():
        return np.load(path)
    vectors = embedder.embed([c.text for c in corpus.chunks])
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors
