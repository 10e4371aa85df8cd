"""Embedders: texts -> L2-normalised vectors, offline by default.

The default model, all-MiniLM-L6-v2, runs as an ONNX graph that `hetriever.embed.model_build` writes
from the packaged weights (no network, no torch). `Settings.embedding_precision = "int8"` selects
its quantized copy; its vectors differ slightly from fp32 ones, so it is another model to a
collection (see `embedder_name`): switching goes through `hetriever migrate`.

Other models are selected by `Settings.embedding_model`:
  "all-MiniLM-L6-v2"                         -> `MiniLMEmbedder` (default)
  "sentence-transformers:<name-or-path>"     -> `SentenceTransformerEmbedder` (needs torch)
  "ollama:<model>"                           -> `OllamaEmbedder` (HTTP, `Settings.ollama_url`)
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hetriever.core import caches
from hetriever.core.config import (
    MINILM_NAME,
    MODEL_MAX_TOKENS,
    Settings,
    parse_model_spec,
)
from hetriever.core.errors import ConfigurationError, EmbeddingError
from hetriever.core.logs import get_logger
from hetriever.embed import progress
from hetriever.embed.model_build import (
    INSTALL_HINT,
    MODEL_FILE,
    ONNX_SUBDIR,
    PRECISIONS,
    prepare_int8,
    prepare_model,
)

log = get_logger(__name__)


def embedder_name(precision: str) -> str:
    """The MiniLM embedder's name for a precision; collections record it as their model."""
    return MINILM_NAME if precision == "fp32" else f"{MINILM_NAME}-{precision}"


# --- embedders --------------------------------------------------------------------------


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, shape [n, dimensions].

    `calls` counts `embed()` calls that had at least one text; `texts_embedded` counts texts.
    Not runtime-checkable on purpose: an isinstance check would read `dimensions`, which for
    a remote model is a network request.
    """

    name: str
    max_tokens: int
    calls: int
    texts_embedded: int

    @property
    def dimensions(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1e-12  # zero vectors stay zero instead of becoming NaN
    return (vectors / norms).astype(np.float32, copy=False)


def default_threads() -> int:
    """Intra-op threads: the CPUs this process may use, at most 4 (beyond that MiniLM gains
    little and starves the other work of a batch pipeline)."""
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:
        available = os.cpu_count() or 1
    return max(1, min(4, available))


class _Counters:
    def __init__(self) -> None:
        self.calls = 0
        self.texts_embedded = 0
        self._counter_lock = threading.Lock()

    def _count(self, n: int) -> None:
        if n:
            with self._counter_lock:
                self.calls += 1
                self.texts_embedded += n

    def reset_counters(self) -> None:
        with self._counter_lock:
            self.calls = 0
            self.texts_embedded = 0


# Padded word-pieces in the model at once (per call; split between the batches that run side by
# side). Activation memory grows with rows x width (and attention with rows x width^2): on 512
# hugo-docs chunks the process peaked at 906 MB uncapped, 396 MB at 4096 and 289 MB at 2048;
# 1024 lowered a full ingest's peak by another ~40 MB and 512 by ~25 MB more, at no measured cost
# in throughput (1,500 real chunks, alternating runs: 49.0 vs 47.0 chunks/s at 1024); 256 saved
# nothing more. Long texts then go 2 at a time, short ones 64.
DEFAULT_BATCH_TOKENS = 512

# Texts tokenized at once; their Encodings are let go before the next slice (`_word_pieces`).
ENCODE_SLICE = 64


def batch_bounds(lengths: np.ndarray, max_rows: int, max_tokens: int) -> list[tuple[int, int]]:
    """[start, end) slices of `lengths` (in embedding order, usually sorted): at most
    `max_rows` rows and at most `max_tokens` padded pieces (rows x the batch's longest row)
    per batch, never less than one row."""
    bounds: list[tuple[int, int]] = []
    start, n = 0, len(lengths)
    while start < n:
        # padded size of the first r rows, for r = 1..max_rows: r x their longest row
        widths = np.maximum.accumulate(np.asarray(lengths[start : start + max_rows]))
        padded = widths * np.arange(1, len(widths) + 1)
        rows = max(1, int(np.searchsorted(padded > max_tokens, True)))
        bounds.append((start, start + rows))
        start += rows
    return bounds


def _cannot_load(what: object, exc: Exception) -> EmbeddingError:
    """The tokenizer or an onnxruntime session of the model would not load."""
    return EmbeddingError(
        f"cannot load the embedding model {what}: {exc}",
        hint=f"rebuild it with `hetriever prepare-model --force`; {INSTALL_HINT}",
    )


class MiniLMEmbedder(_Counters):
    """all-MiniLM-L6-v2 on onnxruntime (CPU): mean pooling over the mask, L2-normalised.

    `threads` cores (default: those this process may use, at most 4): a single text (a
    query) runs on all of them at once, the batches of many texts (an ingest's write window)
    run side by side on one core each."""

    dimensions = 384
    max_tokens = MODEL_MAX_TOKENS

    def __init__(
        self,
        model_dir: Path,
        *,
        batch_size: int = 64,
        threads: int | None = None,
        source_dir: Path | None = None,
        sort_by_length: bool = True,
        precision: str = "fp32",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        side_by_side: bool = True,
    ) -> None:
        super().__init__()
        self.sort_by_length = sort_by_length  # off only to measure what sorting saves
        self.side_by_side = side_by_side  # off only to measure what it saves
        if batch_size < 1:
            raise ConfigurationError(f"embedding batch_size must be positive, got {batch_size}")
        if precision not in PRECISIONS:
            raise ConfigurationError(
                f"embedding precision must be one of {PRECISIONS}, got {precision!r}"
            )
        self.model_dir = Path(model_dir)
        self.batch_size = batch_size
        self.batch_tokens = max(1, batch_tokens)
        self.precision = precision
        self.name = embedder_name(precision)
        self.threads = threads or default_threads()
        prepare_model(self.model_dir, source_dir=source_dir)
        onnx_dir = self.model_dir / ONNX_SUBDIR
        model_path = (
            prepare_int8(self.model_dir, source_dir=source_dir)
            if precision == "int8"
            else onnx_dir / MODEL_FILE
        )
        self._model_path = model_path
        self._sessions: dict[int, Any] = {}  # intra-op threads -> session, made on first use
        self._sessions_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        try:
            from tokenizers import Tokenizer

            from hetriever.chunk.tokenizer import encode_sequentially

            encode_sequentially()
            self._tokenizer = Tokenizer.from_file(str(onnx_dir / "tokenizer.json"))
            # tokenizer.json ships fixed 128-token padding/truncation; we read up to 256
            # (as sentence-transformers and Chroma do) and pad per batch ourselves.
            self._tokenizer.no_padding()
            self._tokenizer.enable_truncation(max_length=self.max_tokens)
            # Ids without offsets: the same pieces, faster (offsets are never read here).
            self._encode_batch = getattr(
                self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch
            )
        except Exception as exc:
            raise _cannot_load(f"from {onnx_dir}", exc) from exc

    def _session(self, threads: int) -> Any:
        """The model's onnxruntime session that runs each call on `threads` cores, loaded on
        first use: a process that only searches never loads the one-core session an ingest
        uses, nor an ingest the query's (each holds its own packed weights, ~54 MB)."""
        with self._sessions_lock:
            session = self._sessions.get(threads)
            if session is None:
                session = self._sessions[threads] = self._load(threads)
                log.debug("embedding_session_loaded", threads=threads)
                self.dimensions = int(session.get_outputs()[0].shape[-1])
            return session

    def _threads_for(self, one_at_a_time: bool) -> int:
        """The session a call runs on: one core per batch for many texts, every core for one
        text, unless only the one-core session is loaded. An ingest's window with a single new
        chunk (common when most are borrowed from another version, store/donors.py) would
        otherwise load a second copy of the model for the rest of the process: opentelemetry-io
        v2 peaked 72 MB higher for it, to save milliseconds on one text."""
        if not one_at_a_time:
            return 1
        with self._sessions_lock:
            if self.threads not in self._sessions and 1 in self._sessions:
                return 1
        return self.threads

    def _load(self, threads: int) -> Any:
        try:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            # onnxruntime's idle intra-op threads spin for a while after each run, taking a
            # core from whatever else runs (bench/README.md; only a query's session has such
            # threads). Stopped at the end of each run, a query takes no longer.
            options.add_session_config_entry("session.force_spinning_stop", "1")
            if _one_query:  # they would spin through the session's load and the one run
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            # The arena keeps the largest batch's activations for the life of the process;
            # `batch_tokens` bounds that batch. Arena off was slower and, through malloc
            # fragmentation, higher (512 hugo-docs chunks: 456 vs 289 MB peak, same cap).
            # Memory patterns are planned per input shape; nearly every batch has another.
            options.enable_mem_pattern = False
            return ort.InferenceSession(
                str(self._model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise _cannot_load(self._model_path, exc) from exc

    def _workers(self) -> ThreadPoolExecutor:
        """`threads` threads that run batches side by side (made again in a forked child,
        which inherits the pool but not its threads)."""
        with self._sessions_lock:
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="embed")
                self._pool_pid = os.getpid()
            return self._pool

    @staticmethod
    def _inputs(pieces: list[np.ndarray], lengths: np.ndarray, idx: np.ndarray) -> dict[str, Any]:
        """The model's inputs for the texts `idx` (one batch), padded to the longest."""
        width = int(lengths[idx].max())
        ids = np.zeros((len(idx), width), dtype=np.int64)
        mask = np.zeros((len(idx), width), dtype=np.int64)
        for row, i in enumerate(idx):
            n = lengths[i]
            ids[row, :n] = pieces[i]
            mask[row, :n] = 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}

    @staticmethod
    def _run(session: Any, inputs: dict[str, Any]) -> np.ndarray:
        """One batch's hidden states summed over each text's word-pieces, [rows, 384]: the
        states themselves (~1.5 KB per word-piece) are not kept past the batch. Only a few
        calls into numpy, so a worker seldom waits for the GIL behind other Python work."""
        try:
            hidden = session.run(["last_hidden_state"], inputs)[0]
        except Exception as exc:
            raise EmbeddingError(
                f"the embedding model failed on a batch of {len(inputs['input_ids'])}: {exc}",
                hint="rebuild with `hetriever prepare-model --force`",
            ) from exc
        mask = inputs["attention_mask"]
        return np.matmul(mask.reshape(len(mask), 1, -1).astype(np.float32), hidden)[:, 0, :]

    def _word_pieces(self, texts: list[str]) -> list[np.ndarray]:
        """Each text's word-piece ids (truncated, [CLS]/[SEP] included), as compact arrays.

        A tokenizer Encoding also keeps every piece's string, masks and the pieces cut off by
        truncation: a window's Encodings held at once raised a full ingest's peak by ~50 MB
        (bench/README.md, "Many sites"), which the allocator then keeps. A slice at a time,
        only the ids outlive it."""
        pieces: list[np.ndarray] = []
        truncated = 0
        for start in range(0, len(texts), ENCODE_SLICE):
            try:
                encodings = self._encode_batch(texts[start : start + ENCODE_SLICE])
            except Exception as exc:
                raise EmbeddingError(f"tokenizing {len(texts)} texts failed: {exc}") from exc
            for encoding in encodings:
                pieces.append(np.asarray(encoding.ids, dtype=np.int32))
                truncated += bool(encoding.overflowing)
            del encodings
        if truncated:
            log.warning("texts_truncated", count=truncated, max_tokens=self.max_tokens)
        return pieces

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Word-pieces each text is read as (after truncation, [CLS]/[SEP] included)."""
        return [len(pieces) for pieces in self._word_pieces(list(texts))]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        if not all(isinstance(t, str) for t in texts):
            raise EmbeddingError("embed() takes a sequence of strings")
        return self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        pieces = self._word_pieces(texts)
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        # Sorting by length keeps each batch's padding (wasted compute) small.
        order = np.argsort(lengths, kind="stable") if self.sort_by_length else np.arange(len(texts))
        one_at_a_time = len(texts) == 1 or self.threads == 1 or not self.side_by_side
        # `batch_tokens` bounds the word-pieces in the model at once, whichever way it runs
        # (side by side at 512 each: a full hugo-docs ingest peaked ~25 MB higher).
        per_batch = self.batch_tokens if one_at_a_time else self.batch_tokens // self.threads
        batches = [
            order[start:end]
            for start, end in batch_bounds(lengths[order], self.batch_size, max(1, per_batch))
        ]
        session = self._session(self._threads_for(one_at_a_time))
        inputs = [self._inputs(pieces, lengths, idx) for idx in batches]
        sums: Iterator[np.ndarray]
        if one_at_a_time:  # a query: every core on its one batch
            sums = (self._run(session, batch) for batch in inputs)
        else:
            # Many texts: batches side by side, one core each. One batch across all cores
            # waits at every layer for its slowest thread, and a core taken by other work
            # (parse/clean/chunk, a flow's task runs, the Prefect server) stalls the lot:
            # 1,200 hugo-docs chunks beside a busy Python thread took 15.7 s side by side
            # against 22.9 s, beside a busy process 12.9 against 19.7, on idle cores 8.3
            # against 8.5 (bench_side_by_side.py). The workers run the model and sum its
            # states (both let go of the GIL); inputs and the rest of the pooling stay on
            # this thread.
            sums = self._workers().map(partial(self._run, session), inputs)
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for idx, batch_sums in zip(batches, sums):
            out[idx] = batch_sums
            progress.embedded(len(idx))  # a run's progress moves per batch
        out /= np.maximum(lengths, 1)[:, None]  # mean pooling: every word-piece is in the mask
        out = _normalise(out)
        self._count(len(texts))
        return out


class SentenceTransformerEmbedder(_Counters):
    """Any sentence-transformers model (needs torch, which hetriever does not install)."""

    def __init__(self, model: str, *, batch_size: int = 64, device: str | None = None) -> None:
        super().__init__()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbeddingError(
                f"embedding model 'sentence-transformers:{model}' needs the sentence-transformers "
                f"package, which is not installed ({exc})",
                hint="`pip install sentence-transformers` (it pulls in torch), or use the default "
                f"{MINILM_NAME!r} which runs offline on onnxruntime",
            ) from None
        try:
            self._model = SentenceTransformer(model, device=device)
        except Exception as exc:
            raise EmbeddingError(
                f"cannot load sentence-transformers model {model!r}: {exc}",
                hint="pass a local model path; there is no network",
            ) from exc
        self.name = f"sentence-transformers:{model}"
        self.batch_size = batch_size
        self.dimensions = int(self._model.get_sentence_embedding_dimension() or 0)
        self.max_tokens = int(getattr(self._model, "max_seq_length", 0) or MODEL_MAX_TOKENS)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        try:
            vectors = self._model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise EmbeddingError(f"{self.name} failed on {len(texts)} texts: {exc}") from exc
        self._count(len(texts))
        progress.embedded(len(texts))
        return _normalise(np.asarray(vectors, dtype=np.float32))


class OllamaEmbedder(_Counters):
    """An Ollama server's `/api/embed`; the dimension is learned from the first response."""

    def __init__(
        self,
        model: str,
        *,
        url: str = "http://127.0.0.1:11434",
        batch_size: int = 64,
        timeout: float = 120.0,
        max_tokens: int = 512,
    ) -> None:
        super().__init__()
        import httpx

        self.model = model
        self.name = f"ollama:{model}"
        self.url = url.rstrip("/")
        self.batch_size = batch_size
        self.max_tokens = max_tokens  # Ollama does not report it; the chunker budget governs
        self._dimensions = 0  # learned from the first response
        self._client = httpx.Client(timeout=timeout)

    @property
    def dimensions(self) -> int:
        """The model's dimension; asks the server once if no embed() call has told us yet
        (the store needs it to create a collection before the first write)."""
        if not self._dimensions:
            self._request(["dimension probe"])  # not counted as embedding work
        return self._dimensions

    def _request(self, texts: list[str]) -> np.ndarray:
        import httpx

        endpoint = f"{self.url}/api/embed"
        try:
            response = self._client.post(endpoint, json={"model": self.model, "input": texts})
        except httpx.HTTPError as exc:
            raise EmbeddingError(
                f"cannot reach Ollama at {self.url}: {exc}",
                hint="start `ollama serve` or set HETRIEVER_OLLAMA_URL",
            ) from None
        if response.status_code != 200:
            detail = response.text[:300]
            hint = (
                f"run `ollama pull {self.model}`"
                if response.status_code == 404
                else "check the Ollama server log"
            )
            raise EmbeddingError(
                f"Ollama at {self.url} answered {response.status_code} for "
                f"model {self.model!r}: {detail}",
                hint=hint,
            )
        try:
            vectors = np.asarray(response.json()["embeddings"], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"unexpected response from Ollama at {endpoint}: {exc}") from None
        if vectors.ndim != 2 or len(vectors) != len(texts):
            got = vectors.shape[0] if vectors.ndim else 0
            raise EmbeddingError(
                f"Ollama at {endpoint} returned {got} vectors for {len(texts)} texts"
            )
        if not self._dimensions:
            self._dimensions = int(vectors.shape[1])
        elif vectors.shape[1] != self._dimensions:
            raise EmbeddingError(
                f"Ollama model {self.model!r} changed dimension from "
                f"{self._dimensions} to {vectors.shape[1]}",
                hint="re-index: one collection holds one embedding model",
            )
        return _normalise(vectors)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        parts = []
        for i in range(0, len(texts), self.batch_size):
            parts.append(self._request(texts[i : i + self.batch_size]))
            progress.embedded(len(parts[-1]))
        self._count(len(texts))
        return np.concatenate(parts)

    def close(self) -> None:
        self._client.close()


# --- selection and caching --------------------------------------------------------------


_cache: dict[tuple[str, str, str, int], Embedder] = {}
_cache_lock = threading.Lock()
_one_query = False


@contextlib.contextmanager
def embedding_one_query() -> Iterator[None]:
    """The process embeds one query and exits (a search at the prompt): a session loaded
    meanwhile runs without spinning threads, the same vectors for ~0.05 s less CPU. A process
    that keeps searching keeps them (a warm query ~0.4 ms faster, bench/README.md)."""
    global _one_query
    before, _one_query = _one_query, True
    try:
        yield
    finally:
        _one_query = before


def get_embedder(settings: Settings) -> Embedder:
    """The embedder `settings.embedding_model` names; one instance per (model, location)."""
    kind, arg = parse_model_spec(settings.embedding_model)
    location = settings.ollama_url if kind == "ollama" else str(settings.resolved_model_dir)
    key = (
        settings.embedding_model.strip(),
        location,
        settings.embedding_precision,
        settings.embed_batch_tokens,
    )
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            return cached
        embedder: Embedder
        if kind == "minilm":
            embedder = MiniLMEmbedder(
                settings.resolved_model_dir,
                batch_size=settings.embed_batch_size,
                precision=settings.embedding_precision,
                batch_tokens=settings.embed_batch_tokens,
            )
        elif kind == "sentence-transformers":
            embedder = SentenceTransformerEmbedder(arg, batch_size=settings.embed_batch_size)
        else:
            embedder = OllamaEmbedder(
                arg, url=settings.ollama_url, batch_size=settings.embed_batch_size
            )
        _cache[key] = embedder
        return embedder


def clear_embedder_cache() -> None:
    with _cache_lock:
        _cache.clear()


caches.register("embedders", clear_embedder_cache)
