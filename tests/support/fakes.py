"""In-memory stand-ins for the fast test tier: a hash embedder and a Chroma client.

They let the real store, search and indexing code run without the ONNX model or a Chroma
directory: `Store(settings, embedder=HashEmbedder(), client=MemoryClient())`.
`tests/store/test_fakes.py` holds them to what they stand in for: the client answers the same calls
as embedded Chroma with the same records, and the embedder keeps the `Embedder` contract.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from chromadb.errors import NotFoundError

from hetriever.search.dense import vector_distances
from hetriever.store.filters import matches

WORD = re.compile(r"\w+")


class HashEmbedder:
    """Bag-of-words vectors by feature hashing: texts sharing words are near, others are not.

    Deterministic across processes (sha1, not Python's salted `hash`); no model, no download.
    """

    name = "hash-bow-384"
    max_tokens = 256

    def __init__(self, dimensions: int = 384) -> None:
        self._dimensions = dimensions
        self.calls = 0
        self.texts_embedded = 0
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def _bucket(self, word: str) -> tuple[int, float]:
        digest = hashlib.sha1(word.encode("utf-8")).digest()
        return int.from_bytes(digest[:4], "little") % self._dimensions, (
            1.0 if digest[4] & 1 else -1.0
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self._dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in WORD.findall(text.lower()):
                index, sign = self._bucket(word)
                out[row, index] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        if texts:
            with self._lock:
                self.calls += 1
                self.texts_embedded += len(texts)
        return out / norms


def _normal(where: dict) -> dict:
    """Chroma's shorthand (`{"key": value}`, several keys) in the explicit form `matches` reads."""
    parts = []
    for key, value in where.items():
        if key in ("$and", "$or"):
            parts.append({key: [_normal(item) for item in value]})
        else:
            parts.append({key: value if isinstance(value, dict) else {"$eq": value}})
    return parts[0] if len(parts) == 1 else {"$and": parts}


class MemoryCollection:
    """The part of Chroma's `Collection` the store uses, over dicts, with exact search."""

    def __init__(self, name: str, metadata: dict | None, configuration: dict | None) -> None:
        self.name = name
        self.metadata = dict(metadata) if metadata else None
        space = ((configuration or {}).get("hnsw") or {}).get("space", "l2")
        self.configuration = {"hnsw": {"space": space}}
        self.configuration_json = self.configuration
        self._rows: dict[str, tuple[np.ndarray | None, str | None, dict | None]] = {}
        self._lock = threading.RLock()

    # -- writes --------------------------------------------------------------------

    def upsert(
        self,
        ids: Sequence[str],
        embeddings: Any = None,
        documents: Any = None,
        metadatas: Any = None,
    ) -> None:
        self._write(ids, embeddings, documents, metadatas, require_existing=False)

    def add(
        self,
        ids: Sequence[str],
        embeddings: Any = None,
        documents: Any = None,
        metadatas: Any = None,
    ) -> None:
        self._write(ids, embeddings, documents, metadatas, require_existing=False)

    def update(
        self,
        ids: Sequence[str],
        embeddings: Any = None,
        documents: Any = None,
        metadatas: Any = None,
    ) -> None:
        self._write(ids, embeddings, documents, metadatas, require_existing=True)

    def _write(
        self,
        ids: Sequence[str],
        embeddings: Any,
        documents: Any,
        metadatas: Any,
        *,
        require_existing: bool,
    ) -> None:
        with self._lock:
            for i, doc_id in enumerate(ids):
                old = self._rows.get(doc_id)
                if old is None and require_existing:
                    continue  # Chroma's update skips ids it does not hold
                vector, text, meta = old or (None, None, None)
                if embeddings is not None:
                    vector = np.asarray(embeddings[i], dtype=np.float32)
                if documents is not None:
                    text = documents[i]
                if metadatas is not None:
                    new = metadatas[i]
                    if require_existing and meta is not None and new is not None:
                        # update merges metadata; a None value removes the key
                        merged = {**meta, **new}
                        new = {k: v for k, v in merged.items() if v is not None}
                    meta = dict(new) if new else None
                self._rows[doc_id] = (vector, text, meta)

    def delete(self, ids: Sequence[str] | None = None, where: dict | None = None) -> None:
        with self._lock:
            for doc_id in self._select(ids, where):
                self._rows.pop(doc_id, None)

    def modify(
        self,
        name: str | None = None,
        metadata: dict | None = None,
        configuration: dict | None = None,
    ) -> None:
        if metadata is not None:
            self.metadata = dict(metadata)

    # -- reads ---------------------------------------------------------------------

    def count(self) -> int:
        return len(self._rows)

    def _select(self, ids: Sequence[str] | None, where: dict | None) -> list[str]:
        with self._lock:
            # Chroma returns records in the order they were first written, whatever `ids` says
            wanted = set(ids) if ids is not None else None
            chosen = [i for i in self._rows if wanted is None or i in wanted]
            if where is None:
                return chosen
            explicit = _normal(where)
            return [i for i in chosen if matches(explicit, self._rows[i][2])]

    def get(
        self,
        ids: Sequence[str] | None = None,
        where: dict | None = None,
        limit: int | None = None,
        offset: int | None = None,
        include: Sequence[str] = ("documents", "metadatas"),
    ) -> dict[str, Any]:
        with self._lock:
            chosen = self._select(ids, where)[offset or 0 :]
            if limit is not None:
                chosen = chosen[:limit]
            return self._shape(chosen, include)

    def _shape(self, chosen: list[str], include: Sequence[str]) -> dict[str, Any]:
        rows = [self._rows[i] for i in chosen]
        return {
            "ids": list(chosen),
            "embeddings": np.asarray([r[0] for r in rows]) if "embeddings" in include else None,
            "documents": [r[1] for r in rows] if "documents" in include else None,
            "metadatas": [r[2] for r in rows] if "metadatas" in include else None,
            "include": list(include),
        }

    def query(
        self,
        query_embeddings: Any,
        n_results: int = 10,
        where: dict | None = None,
        ids: Sequence[str] | None = None,
        include: Sequence[str] = ("documents", "metadatas", "distances"),
    ) -> dict[str, Any]:
        with self._lock:
            if ids is not None and any(i not in self._rows for i in ids):
                raise NotFoundError("an id of the query is not in the collection")
            chosen = self._select(ids, where)
            out: dict[str, Any] = {"ids": [], "documents": [], "metadatas": [], "distances": []}
            for vector in query_embeddings:
                if chosen:
                    matrix = np.asarray([self._rows[i][0] for i in chosen], dtype=np.float32)
                    dist = vector_distances(
                        matrix,
                        np.asarray(vector, dtype=np.float32),
                        self.configuration["hnsw"]["space"],
                    )
                    order = list(np.argsort(dist, kind="stable")[:n_results])
                else:
                    dist, order = np.zeros(0), []
                picked = [chosen[j] for j in order]
                shaped = self._shape(picked, include)
                out["ids"].append(picked)
                out["documents"].append(shaped["documents"] or [None] * len(picked))
                out["metadatas"].append(shaped["metadatas"] or [None] * len(picked))
                out["distances"].append([float(dist[j]) for j in order])
            return out


class MemoryClient:
    """The part of Chroma's client API the store uses: collections by name, in memory."""

    def __init__(self, max_batch_size: int = 5461) -> None:
        self._collections: dict[str, MemoryCollection] = {}
        self._max_batch_size = max_batch_size
        self._lock = threading.Lock()

    def heartbeat(self) -> int:
        return 1

    def get_max_batch_size(self) -> int:
        return self._max_batch_size

    def list_collections(self) -> list[MemoryCollection]:
        return list(self._collections.values())

    def get_collection(self, name: str, embedding_function: Any = None) -> MemoryCollection:
        try:
            return self._collections[name]
        except KeyError:
            raise NotFoundError(f"Collection [{name}] does not exist") from None

    def get_or_create_collection(
        self,
        name: str,
        configuration: dict | None = None,
        metadata: dict | None = None,
        embedding_function: Any = None,
    ) -> MemoryCollection:
        with self._lock:
            if name not in self._collections:
                self._collections[name] = MemoryCollection(name, metadata, configuration)
            return self._collections[name]

    def delete_collection(self, name: str) -> None:
        with self._lock:
            if self._collections.pop(name, None) is None:
                raise NotFoundError(f"Collection [{name}] does not exist")
