"""Embedding on the workers of a Dask cluster.

Embedding is ~80% of an ingest. With the Dask task runner the per-file tasks already run on
the workers; `ClusterEmbedder` sends the embedding there too. It is an `Embedder`: the store
calls it where it would call the local model, so a write window is still embedded before its
BM25 transaction opens and written by the flow process under its writer lock (the crash-safety
order Chroma -> BM25 -> commit record is unchanged). Each call is dealt round-robin over the
workers (the texts come length-sorted, so every worker gets long and short ones); each worker
process loads the model once and keeps it, using as many cores as it has task slots (its
batches side by side, one core each).
Only texts go out and float32 vectors come back (1.5 KB per chunk).

Figures (1 vs 2 worker processes) and the model for N machines: docs/scale-out.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from hetriever.core.config import Settings, parse_model_spec
from hetriever.core.errors import EmbeddingError
from hetriever.core.logs import get_logger
from hetriever.embed.embedder import Embedder, MiniLMEmbedder, get_embedder

log = get_logger(__name__)

_worker_lock = threading.Lock()
# model key -> embedder, least recently used first. Keyed by what the model depends on, not
# by the whole settings: every run's settings name its own Chroma and state directories,
# and a key of all of them loaded another copy of the model per run (~70 MB a worker each,
# bench/README.md). Two at most: a migration to another precision uses both for a while.
_worker_embedders: OrderedDict[tuple, Embedder] = OrderedDict()
KEPT_MODELS = 2


def model_key(settings: Settings) -> tuple:
    """What a worker's embedder depends on (the model, where it is read from, how it runs)."""
    kind, _ = parse_model_spec(settings.embedding_model)
    location = settings.ollama_url if kind == "ollama" else str(settings.resolved_model_dir)
    return (
        settings.embedding_model.strip(),
        location,
        settings.embedding_precision,
        settings.embed_batch_tokens,
        settings.embed_batch_size,
    )


def _slots() -> int:
    """Task slots of the Dask worker this runs on (1 outside a worker)."""
    try:
        from distributed import get_worker

        return max(1, int(get_worker().state.nthreads))
    except (ImportError, ValueError):
        return 1


def worker_embedder(settings: Settings) -> Embedder:
    """This worker process's embedder for `settings`' model, loaded on first use and kept
    (the least recently used one dropped past KEPT_MODELS)."""
    key = model_key(settings)
    with _worker_lock:
        embedder = _worker_embedders.get(key)
        if embedder is not None:
            _worker_embedders.move_to_end(key)
        else:
            kind, _ = parse_model_spec(settings.embedding_model)
            if kind == "minilm":
                embedder = MiniLMEmbedder(
                    settings.resolved_model_dir,
                    batch_size=settings.embed_batch_size,
                    precision=settings.embedding_precision,
                    batch_tokens=settings.embed_batch_tokens,
                    threads=_slots(),
                )
            else:
                embedder = get_embedder(settings)
            _worker_embedders[key] = embedder
            while len(_worker_embedders) > KEPT_MODELS:
                _worker_embedders.popitem(last=False)
        return embedder


def embed_on_worker(texts: list[str], settings: Settings) -> np.ndarray:
    return worker_embedder(settings).embed(texts)


def describe_on_worker(settings: Settings) -> tuple[str, int, int]:
    embedder = worker_embedder(settings)
    return embedder.name, int(embedder.max_tokens), int(embedder.dimensions)


class ClusterEmbedder:
    """An `Embedder` whose model runs on the workers of the Dask scheduler at `address`."""

    def __init__(self, address: str, settings: Settings, *, timeout: float = 600.0) -> None:
        from distributed import Client  # imported here: only a cluster run needs it

        self.settings = settings
        self.address = address
        self.timeout = timeout
        # A client of its own (synchronous, any thread): the store calls embed() from a worker
        # thread of the flow, never on an event loop.
        self._client = Client(address, set_as_default=False, timeout=60)
        self.name, self.max_tokens, self._dimensions = self._client.submit(
            describe_on_worker, settings, pure=False
        ).result(timeout=timeout)
        self.calls = 0
        self.texts_embedded = 0
        log.info("cluster_embedder", scheduler=address, workers=self.workers(), model=self.name)

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def workers(self) -> int:
        return max(1, len(self._client.scheduler_info().get("workers", {})))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        n = min(self.workers(), len(texts))
        parts = [texts[i::n] for i in range(n)]
        futures = self._client.map(embed_on_worker, parts, settings=self.settings, pure=False)
        try:
            results = [future.result(timeout=self.timeout) for future in futures]
        except Exception as exc:
            raise EmbeddingError(
                f"embedding on the Dask workers of {self.address} failed "
                f"({exc}); check their logs and that each has the model "
                "(`hetriever prepare-model`)"
            ) from exc
        out = np.empty((len(texts), self._dimensions), dtype=np.float32)
        for i, vectors in enumerate(results):
            out[i::n] = vectors
        self.calls += 1
        self.texts_embedded += len(texts)
        return out

    def close(self) -> None:
        self._client.close()
