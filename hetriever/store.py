"""The knowledge store: chunks in ChromaDB (dense vectors) kept in step with a BM25 index.

One Chroma collection per repository and schema generation: the store's API takes repository
names, and the catalog (`hetriever.catalog`) maps each to its *physical* collection
`<repository>_v<generation>` (`physical_name()`). A new generation is built beside the old one
when the chunking or the embedding model changes (`hetriever.lifecycle.migrate_repository`),
and searches switch over in one catalog update. Chroma is the source of truth for the chunks;
each collection's BM25 index (`<state_dir>/bm25/<physical>.sqlite`) is written right after
Chroma, and `repair()` brings it back in line after a crash between the two.

Vectors are always computed by our embedder and passed explicitly: collections are created
with `embedding_function=None`, so Chroma never loads (or tries to download) its default model.

Writes take a writer lock (`fcntl.flock` on `<state_dir>/locks/<collection>.lock`, plus the
persistent directory itself in embedded mode) so two processes never write one index at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

import chromadb
import httpx
from chromadb.api.shared_system_client import SharedSystemClient
from chromadb.api.types import validate_metadata
from chromadb.config import Settings as ChromaSettings
from chromadb.errors import InternalError, NotFoundError, RateLimitError

from hetriever import faults
from hetriever.bm25 import BM25Index
from hetriever.catalog import Catalog, split_physical
from hetriever.config import Settings, load_settings
from hetriever.errors import (
    BackendConnectionError,
    CollectionNotFoundError,
    ConfigurationError,
    DerivedIndexError,
    EmbeddingError,
    HetrieverError,
    IndexingError,
    KnowledgeStoreError,
    UnusableDirectoryError,
)
from hetriever.logs import get_logger
from hetriever.names import content_hash, validate_collection_name  # noqa: F401 (re-exported)
from hetriever.models import Chunk, Document, Metadata, SearchResult
from hetriever.locks import file_lock
from hetriever.store_types import (  # noqa: F401 (re-exported)
    CollectionInfo,
    FileWriteResult,
    KnowledgeStore,
    RepairResult,
    _PreparedWrite,
)

log = get_logger(__name__)

SCHEMA_VERSION = 1
# Our names are repository names (^[a-z0-9-]+$, 3..63); Chroma adds: start and end alphanumeric.
WRITE_ATTEMPTS = 4
EMBED_ATTEMPTS = 3
RETRY_BASE_SECONDS = 0.2
RETRY_MAX_SECONDS = 3.0
# Network hiccups, a busy server, and faults injected on purpose are worth another try.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError,
    ConnectionResetError, BrokenPipeError, TimeoutError, InternalError, RateLimitError,
    faults.InjectedFault,
)
# An unreachable server is not: retrying only delays the same answer.
UNREACHABLE_ERRORS: tuple[type[BaseException], ...] = (httpx.ConnectError, ConnectionRefusedError)

T = TypeVar("T")


# --- the Chroma implementation --------------------------------------------------------


def _location(settings: Settings) -> str:
    if settings.server_mode:
        return f"http://{settings.chroma_host}:{settings.chroma_port}"
    return str(settings.chroma_path)


def _not_a_directory(exc: BaseException) -> bool:
    """True when opening failed because the path, or a parent of it, is a file."""
    current: BaseException | None = exc
    while current is not None:
        if getattr(current, "errno", None) in (errno.EEXIST, errno.ENOTDIR):
            return True
        current = current.__cause__ or current.__context__
    return False


def _chroma_identifier(client: Any) -> str:
    """The key under which Chroma shares one system per path within a process."""
    return SharedSystemClient._get_identifier_from_settings(client.get_settings())


OPEN_LOCK = "hetriever-open.lock"  # inside the Chroma directory, which is writable


class ChromaKnowledgeStore:
    """KnowledgeStore on ChromaDB (embedded PersistentClient, or HttpClient in server mode)."""

    def __init__(self, settings: Settings, *, embedder: Any | None = None,
                 lock_timeout: float | None = None, client: Any | None = None,
                 pins: dict[str, str] | None = None, catalog: Catalog | None = None) -> None:
        self.settings = settings
        # A writer waits as long as a second ingest run may (another repository's ingest
        # holds the embedded directory for a whole window, which can take minutes).
        self.lock_timeout = settings.run_lock_timeout if lock_timeout is None else lock_timeout
        self.location = _location(settings)
        self._embedder = embedder
        self._bm25: dict[str, BM25Index] = {}  # by physical name
        self._frozen_until = 0.0  # a server that timed out is not asked again before this
        self._followed_at: float | None = None  # a follower's last manifest read (replica)
        self._bm25_ok: set[str] = set()  # physical names whose BM25 index was checked whole
        self._collections: dict[str, Any] = {}  # by physical name
        # Embedded mode: the BM25 generation (physical name -> int) that this process's view of
        # a Chroma collection is known to include, and the repositories it is writing now.
        self._seen: dict[str, int] = {}
        self._writing: Counter[str] = Counter()
        self._inherited = False  # set by _connect
        self._guard = threading.RLock()
        self._max_batch: int | None = None
        # repository -> physical collection this store reads and writes regardless of the
        # alias (a migration builds the next generation through a pinned store).
        self.pins = dict(pins or {})
        self._catalog = catalog
        self._owns_catalog = catalog is None
        self.client = client if client is not None else self._connect()

    # -- catalog and physical names ----------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        with self._guard:
            if self._catalog is None:
                self._catalog = Catalog.for_state_dir(self.settings.resolved_state_dir)
            return self._catalog

    def fingerprint(self) -> str:
        """What a collection's vectors and chunks depend on; a change needs a new generation."""
        s = self.settings
        model = s.embedding_model if s.embedding_precision == "fp32" else \
            f"{s.embedding_model}-{s.embedding_precision}"
        return f"s{SCHEMA_VERSION}:{model}:{s.chunk_tokens}:{s.min_chunk_tokens}"

    @overload
    def physical_name(self, name: str, *, create: Literal[True]) -> str: ...

    @overload
    def physical_name(self, name: str, *, create: bool = False) -> str | None: ...

    def physical_name(self, name: str, *, create: bool = False) -> str | None:
        """The Chroma collection behind repository `name` (pinned, else the catalog's alias);
        with `create`, a first generation is allocated when there is none."""
        validate_collection_name(name)
        pinned = self.pins.get(name)
        if pinned:
            return pinned
        if create:
            return self.catalog.ensure_active(name, self.fingerprint())
        return self.catalog.active(name)

    def pinned(self, repository: str, physical: str) -> ChromaKnowledgeStore:
        """A store sharing this one's client, embedder and catalog, but reading and writing
        `physical` for `repository` whatever the alias says."""
        return ChromaKnowledgeStore(self.settings, embedder=self._embedder,
                                    lock_timeout=self.lock_timeout, client=self.client,
                                    pins={**self.pins, repository: physical},
                                    catalog=self.catalog)

    def embedding_with(self, embedder: Any) -> ChromaKnowledgeStore:
        """A store sharing this one's client, pins and catalog, with another embedder (the
        workers of a cluster: hetriever.cluster)."""
        return ChromaKnowledgeStore(self.settings, embedder=embedder,
                                    lock_timeout=self.lock_timeout, client=self.client,
                                    pins=self.pins, catalog=self.catalog)

    def repository_names(self) -> list[str]:
        """Repositories with a searchable collection (from the catalog; no backend call, but
        for a follower's manifest read every `follow_interval` seconds)."""
        if self.settings.follow:
            from hetriever.replica import follow_quietly

            follow_quietly(self)
        names = set(self.catalog.active_map())
        return sorted(names | set(self.pins))

    # -- connection ------------------------------------------------------------------

    def _connect(self) -> Any:
        s = self.settings
        chroma_settings = ChromaSettings(anonymized_telemetry=False)
        try:
            if s.server_mode:
                return self._http_client(chroma_settings)
            s.chroma_path.mkdir(parents=True, exist_ok=True)
            # Processes opening a fresh directory at once each create Chroma's tables, and all
            # but one fail ("table collections already exists"): open one at a time. A lock
            # file of its own, so opening never waits for a writer holding the directory.
            with file_lock(s.chroma_path / OPEN_LOCK, timeout=self.lock_timeout,
                           what=f"opening the Chroma directory {self.location}"):
                before = set(SharedSystemClient._identifier_to_system)
                client = chromadb.PersistentClient(path=str(s.chroma_path),
                                                   settings=chroma_settings)
            # Chroma hands out one system per path and process: if another store here made it,
            # its collections may have been loaded before other processes' latest writes.
            self._inherited = _chroma_identifier(client) in before
            return client
        except HetrieverError:
            raise
        except Exception as exc:
            storage = self.storage_problem(exc)
            if storage is not None:
                raise storage from exc
            if s.server_mode:
                hint = ("start the server (`chroma run --path <dir> --port "
                        f"{s.chroma_port}`) or unset HETRIEVER_CHROMA_HOST for embedded mode")
            else:
                hint = "check that HETRIEVER_CHROMA_PATH is a writable directory"
                if _not_a_directory(exc):
                    raise UnusableDirectoryError(f"cannot open the Chroma backend: {exc}",
                                                 location=self.location, hint=hint) from exc
            raise BackendConnectionError(f"cannot open the Chroma backend: {exc}",
                                         location=self.location, hint=hint) from exc

    def _http_client(self, chroma_settings: ChromaSettings) -> Any:
        """An HttpClient whose every request waits at most `chroma_timeout` seconds.

        Chroma's client sends requests with no timeout, and its constructor already talks to
        the server: against a frozen server (SIGSTOP, a hung host) both wait forever. The
        constructor runs in a thread given that long; the session gets the timeout after.
        """
        s = self.settings
        made: dict[str, Any] = {}

        def connect() -> None:
            try:
                made["client"] = chromadb.HttpClient(host=s.chroma_host, port=s.chroma_port,
                                                     settings=chroma_settings)
            except BaseException as exc:  # handed to the caller's thread
                made["error"] = exc

        worker = threading.Thread(target=connect, daemon=True, name="chroma-connect")
        worker.start()
        worker.join(s.chroma_timeout)
        if worker.is_alive():
            raise self._frozen(None)
        if "error" in made:
            raise made["error"]
        session = getattr(getattr(made["client"], "_server", None), "_session", None)
        if session is not None:
            session.timeout = httpx.Timeout(s.chroma_timeout)
        return made["client"]

    def _frozen(self, exc: BaseException | None) -> BackendConnectionError:
        # Later calls fail at once for a while: one frozen server costs one timeout, not one
        # per call (a search makes several).
        self._frozen_until = time.monotonic() + self.settings.chroma_timeout
        return BackendConnectionError(
            f"the Chroma server did not answer within {self.settings.chroma_timeout:g} s "
            "(frozen or overloaded)", location=self.location,
            hint="check that `chroma run` is responsive (not stopped or swapping), or raise "
                 "HETRIEVER_CHROMA_TIMEOUT")

    def storage_problem(self, exc: BaseException):
        """A StorageError when `exc` comes from a full or read-only local disk, else None."""
        from hetriever.storage import storage_problem

        dirs = [self.settings.resolved_state_dir]
        if not self.settings.server_mode:
            dirs.append(self.settings.chroma_path)
        return storage_problem(exc, dirs)

    def _unreachable(self, exc: BaseException) -> BackendConnectionError:
        return BackendConnectionError(
            f"the Chroma server stopped answering: {exc}", location=self.location,
            hint="check that `chroma run` is up and reachable, then re-run")

    def _call(self, what: str, fn: Callable[[], T], *, retry: bool = True) -> T:
        """Run one backend call; transient errors are retried with backoff and jitter."""
        attempts = WRITE_ATTEMPTS if retry else 1
        for attempt in range(1, attempts + 1):
            if time.monotonic() < self._frozen_until:
                raise self._frozen(None)
            try:
                faults.check("chroma_" + what, self.location)
                return fn()
            except UNREACHABLE_ERRORS as exc:
                raise self._unreachable(exc) from exc
            except httpx.TimeoutException as exc:  # not retried: it would only wait again
                raise self._frozen(exc) from exc
            except TRANSIENT_ERRORS as exc:
                storage = self.storage_problem(exc)
                if storage is not None:  # retrying a full disk only fails again
                    raise storage from exc
                if attempt == attempts:
                    raise KnowledgeStoreError(
                        f"Chroma {what} failed after {attempts} attempts: {exc}",
                        hint="the backend kept failing; check its log and re-run") from exc
                delay = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (attempt - 1))
                delay *= random.uniform(0.5, 1.0)
                log.warning("chroma_retry", op=what, attempt=attempt, delay=round(delay, 3),
                            error=str(exc))
                time.sleep(delay)
        raise AssertionError("unreachable")

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from hetriever.embed import get_embedder

            self._embedder = get_embedder(self.settings)
        return self._embedder

    def search_mode(self) -> str:
        return "hybrid" if self.settings.use_hybrid_search else "dense"

    def max_batch_size(self) -> int:
        if self._max_batch is None:
            limit = self._call("max_batch_size", self.client.get_max_batch_size)
            self._max_batch = max(1, min(self.settings.batch_size, int(limit)))
        return self._max_batch

    # -- collections -----------------------------------------------------------------

    def _hnsw(self) -> dict[str, Any]:
        s = self.settings
        return {"hnsw": {"space": s.hnsw_space, "ef_construction": s.hnsw_construction_ef,
                         "ef_search": s.hnsw_search_ef, "max_neighbors": s.hnsw_m}}

    def _chroma(self, name: str, *, create: bool = False) -> Any | None:
        """Repository `name`'s Chroma collection, or None when absent (created when `create`)."""
        physical = self.physical_name(name, create=create)
        return None if physical is None else self._chroma_physical(physical, name, create=create)

    def _chroma_physical(self, physical: str, name: str, *, create: bool = False) -> Any | None:
        with self._guard:
            if not self._writing[name]:  # a writer made its view current when it took the lock
                self._refresh_view(physical)
            cached = self._collections.get(physical)
            if cached is not None:
                return cached
        # Read before the collection is loaded, so the view loaded next includes at least this
        # generation (every writer writes Chroma first, then BM25).
        generation = None if self.settings.server_mode else self._generation(physical)
        try:
            col = self._call("get_collection", lambda: self.client.get_collection(
                physical, embedding_function=None))
            self._match_search_ef(col)
        except NotFoundError:
            if not create:
                return None
            embedder = self.embedder
            metadata = {"schema_version": SCHEMA_VERSION, "embedding_model": embedder.name,
                        "embedding_dimensions": int(embedder.dimensions), "repository_url": "",
                        "commit_hash": "", "last_updated": "", "total_documents": 0,
                        "total_chunks": 0, "repository": name,
                        "schema_fingerprint": self.fingerprint()}
            col = self._call("create_collection", lambda: self.client.get_or_create_collection(
                physical, configuration=self._hnsw(), metadata=metadata, embedding_function=None))
            log.info("collection_created", collection=physical, repository=name,
                     model=embedder.name, dimensions=embedder.dimensions)
        with self._guard:
            self._collections[physical] = col
            if generation is not None:
                # An inherited view is of unknown age: the next access reopens it once.
                self._seen[physical] = -2 if self._inherited else generation
        return col

    def _match_search_ef(self, col: Any) -> None:
        """Give an existing collection the configured `ef_search` (the only HNSW parameter
        Chroma can change in place): collections made before it was raised keep their old,
        less exact search otherwise. A process that loaded the index already sees the new
        value when it next reopens the collection."""
        want = self.settings.hnsw_search_ef
        hnsw = (getattr(col, "configuration_json", None) or {}).get("hnsw") or {}
        have = hnsw.get("ef_search")
        if have is None or have == want:
            return
        try:
            col.modify(configuration={"hnsw": {"ef_search": want}})
            log.info("collection_search_ef_set", collection=col.name, was=have, now=want)
        except Exception as exc:  # e.g. a read-only store: search still works, less exactly
            log.warning("collection_search_ef_unchanged", collection=col.name, error=str(exc))

    def _generation(self, physical: str) -> int:
        """The collection's BM25 generation (-1 before it has a BM25 file, or a damaged one)."""
        if physical not in self._bm25 and not self.bm25_file(physical).exists():
            return -1
        try:
            return self.bm25_physical(physical).generation()
        except DerivedIndexError:  # dense search goes on; `bm25_problem` reports it
            return -1

    def _refresh_view(self, physical: str) -> None:
        """Reopen embedded Chroma if the collection changed since this process loaded it."""
        if self.settings.server_mode or physical not in self._collections:
            return
        if self._generation(physical) != self._seen.get(physical):
            self._reopen(physical)

    def _reopen(self, physical: str) -> None:
        """A fresh view of the embedded Chroma directory, after another process wrote to it.

        Embedded Chroma loads a collection's vector index once per process and never reads
        another process's later writes: deleted chunks keep coming back without documents and
        new ones are never found. Chroma shares one system per path within a process, so the
        path's system is replaced: every client of this path then reads the new one, and
        handles already taken keep answering from the old one until dropped.
        """
        SharedSystemClient._identifier_to_system.pop(_chroma_identifier(self.client), None)
        self.client = self._connect()
        self._collections.clear()
        self._seen.clear()
        log.debug("chroma_reopened", path=self.location, collection=physical)

    def _forget(self, name: str, *, bm25: bool = False) -> None:
        """Drop cached handles of a physical collection (its BM25 index too when `bm25`)."""
        with self._guard:
            self._collections.pop(name, None)
            index = self._bm25.pop(name, None) if bm25 else None
            if bm25:
                self._bm25_ok.discard(name)
        if index is not None:
            index.close()

    def check_embedding_model(self, name: str, col: Any) -> None:
        """Refuse to mix vectors of another model or size into (or query) a collection."""
        meta = col.metadata or {}
        stored_dims = meta.get("embedding_dimensions")
        embedder = self.embedder
        if stored_dims is not None and int(stored_dims) != int(embedder.dimensions):
            raise EmbeddingError(
                f"collection {name!r} holds {stored_dims}-dimensional vectors of model "
                f"{meta.get('embedding_model', '?')!r}, but the configured model "
                f"{embedder.name!r} produces {embedder.dimensions}",
                hint=f"re-index: delete the collection (`delete_collection({name!r})`) and ingest "
                     "again, or set HETRIEVER_EMBEDDING_MODEL back to the collection's model")
        stored_model = meta.get("embedding_model")
        if stored_model and stored_model != embedder.name:
            log.warning("embedding_model_differs", collection=name, stored=stored_model,
                        configured=embedder.name)

    def bm25(self, name: str, *, create: bool = False) -> BM25Index:
        """Repository `name`'s BM25 index (of its pinned or active collection)."""
        physical = self.physical_name(name, create=create)
        if physical is None:
            raise CollectionNotFoundError(f"repository {name!r} has no collection",
                                          hint="index the repository first")
        return self.bm25_physical(physical)

    def bm25_problem(self, name: str) -> str | None:
        """Why repository `name`'s BM25 index cannot serve searches, or None: its file is
        damaged, or missing or empty while Chroma holds chunks (deleted by hand, a restore of
        Chroma alone). Checked once per process while the index is whole."""
        physical = self.physical_name(name)
        if physical is None or physical in self._bm25_ok:
            return None
        path = self.bm25_file(physical)
        with self._guard:
            opened = physical in self._bm25
        state = "missing"
        if opened or path.exists():
            try:
                state = "empty" if self.bm25_physical(physical).count() == 0 else ""
            except DerivedIndexError as exc:
                return str(exc)
        if state:
            col = self._chroma_physical(physical, name)
            chunks = int(self._call("count", col.count)) if col is not None else 0
            if chunks:
                return (f"the BM25 index of {name!r} is {state} ({path}) while Chroma holds "
                        f"{chunks} chunks")
        else:
            self._bm25_ok.add(physical)
        return None

    def search_bm25(self, name: str) -> BM25Index:
        """Repository `name`'s BM25 index for a search: DerivedIndexError when it cannot be
        trusted, so the search runs dense-only instead of quietly finding nothing."""
        problem = self.bm25_problem(name)
        if problem:
            raise DerivedIndexError(problem, hint="searches run dense-only; the next "
                                                  "`hetriever ingest` rebuilds it from Chroma")
        return self.bm25(name)

    def rebuild_bm25_sync(self, name: str) -> RepairResult:
        """Set a damaged BM25 file aside and rebuild the index from Chroma."""
        physical = self.physical_name(name)
        assert physical is not None
        path = self.bm25_file(physical)
        with self.writer_lock(name):
            self._forget(physical, bm25=True)
            self._bm25_ok.discard(physical)
            if path.exists():
                aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
                path.replace(aside)
                log.warning("bm25_set_aside", path=str(path), moved_to=str(aside))
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return self.repair_sync(name)

    def bm25_physical(self, physical: str) -> BM25Index:
        with self._guard:
            index = self._bm25.get(physical)
            if index is None:
                index = BM25Index(self.bm25_file(physical))
                self._bm25[physical] = index
            return index

    def bm25_file(self, physical: str) -> Path:
        return self.settings.resolved_state_dir / "bm25" / f"{physical}.sqlite"

    def bm25_path(self, name: str) -> Path:
        physical = self.physical_name(name)
        return self.bm25_file(physical or name)

    def bm25_collection_names(self) -> list[str]:
        """Repositories with a BM25 index file (what is searchable while Chroma is down)."""
        folder = self.settings.resolved_state_dir / "bm25"
        stems = [p.stem for p in folder.glob("*.sqlite")] if folder.is_dir() else []
        return sorted({split[0] for split in map(split_physical, stems) if split})

    def collection_names(self) -> list[str]:
        """Physical Chroma collection names (every generation)."""
        cols = self._call("list_collections", self.client.list_collections)
        return sorted(c.name if hasattr(c, "name") else str(c) for c in cols)

    @contextlib.contextmanager
    def writer_lock(self, collection: str) -> Iterator[None]:
        """Exclusive write access: the persistent directory (embedded) and the collection."""
        with contextlib.ExitStack() as stack:
            if not self.settings.server_mode:
                self.settings.chroma_path.mkdir(parents=True, exist_ok=True)
                stack.enter_context(file_lock(self.settings.chroma_path, timeout=self.lock_timeout,
                                              what=f"the Chroma directory {self.location}"))
            lock_path = self.settings.resolved_state_dir / "locks" / f"{collection}.lock"
            stack.enter_context(file_lock(lock_path, timeout=self.lock_timeout,
                                          what=f"collection {collection!r}"))
            with self._guard:
                physical = self.physical_name(collection)
                if physical is not None:
                    self._refresh_view(physical)  # write from a view that has every write
                self._writing[collection] += 1
            try:
                yield
            finally:
                with self._guard:
                    self._writing[collection] -= 1
                    # Still under the lock: every write up to here is ours and in our view.
                    physical = self.physical_name(collection)
                    if not self.settings.server_mode and physical in self._collections:
                        self._seen[physical] = self._generation(physical)

    # -- validation --------------------------------------------------------------------

    def _prepare(self, collection: str, ids: list[str], texts: list[str],
                 metadatas: list[dict[str, Any]]) -> None:
        """Validate a batch in place (fills repository and content_hash); IndexingError."""
        seen: set[str] = set()
        for i, (doc_id, text, meta) in enumerate(zip(ids, texts, metadatas)):
            if not isinstance(doc_id, str) or not doc_id:
                raise IndexingError(f"chunk #{i} of {collection!r} has an empty id")
            if doc_id in seen:
                raise IndexingError(f"duplicate id {doc_id!r} in one write to {collection!r}",
                                    hint="chunk ids must be unique; check the chunker's ids")
            seen.add(doc_id)
            if not isinstance(text, str) or not text.strip():
                raise IndexingError(f"chunk {doc_id!r} of {collection!r} has empty content",
                                    hint="drop empty chunks before writing")
            repo = meta.setdefault("repository", collection)
            if repo != collection:
                raise IndexingError(
                    f"chunk {doc_id!r} says repository {repo!r} but is written to {collection!r}",
                    hint="a chunk's `repository` metadata must name its collection")
            digest = content_hash(text)
            if meta.setdefault("content_hash", digest) != digest:
                raise IndexingError(f"chunk {doc_id!r}: content_hash does not match its text",
                                    hint="compute content_hash as sha256 of the chunk text")
            try:
                validate_metadata(meta)
            except (ValueError, TypeError) as exc:
                raise IndexingError(f"chunk {doc_id!r} has metadata Chroma rejects: {exc}",
                                    hint="use str/int/float/bool values or non-empty lists "
                                         "of one of those; no None") from None

    # -- sync core (the async API runs these in a worker thread) ---------------------

    def _existing(self, col: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        step = self.max_batch_size()
        for start in range(0, len(ids), step):
            part = ids[start:start + step]
            got = self._call("get", lambda: col.get(ids=part, include=["metadatas"]))
            for doc_id, meta in zip(got["ids"], got["metadatas"] or []):
                out[doc_id] = dict(meta or {})
        return out

    def _ids_where(self, col: Any, where: dict[str, Any]) -> list[str]:
        got = self._call("get", lambda: col.get(where=where, include=[]))
        return list(got["ids"])

    @staticmethod
    def _replacing(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        """Chroma merges metadata on update/upsert: None removes keys the new version lacks."""
        return {**{k: None for k in old if k not in new}, **new}

    def _prepare_write(self, collection: str, col: Any, ids: list[str], texts: list[str],
                       metadatas: list[dict[str, Any]]) -> _PreparedWrite:
        """Validate, sort chunks into unchanged / metadata-only / new, and embed the new ones.

        Writes nothing: an embedding failure leaves the files exactly as they were, and the
        caller opens its BM25 transaction only afterwards, so embedding (seconds per window)
        never holds the BM25 write lock.
        """
        self._prepare(collection, ids, texts, metadatas)
        self.check_embedding_model(collection, col)
        write = _PreparedWrite(ids, texts, metadatas, self._existing(col, ids))
        unchanged: list[int] = []
        for i, doc_id in enumerate(ids):
            old = write.existing.get(doc_id)
            if old is not None and old.get("content_hash") == metadatas[i]["content_hash"]:
                write.result.reused += 1  # unchanged content is not re-embedded
                (write.meta_only if old != metadatas[i] else unchanged).append(i)
            else:
                write.to_embed.append(i)
        if unchanged:  # an unchanged chunk is not written at all, unless BM25 lost it
            absent = set(self.bm25(collection).missing([ids[i] for i in unchanged]))
            write.bm25_only = [i for i in unchanged if ids[i] in absent]
        if write.to_embed:
            write.vectors = self._embed([texts[i] for i in write.to_embed], write.result)
        return write

    def _apply_write(self, collection: str, col: Any, write: _PreparedWrite) -> FileWriteResult:
        """Chroma first, then BM25, batch by batch (see `upsert_files_sync` on crash order)."""
        ids, texts, metadatas, existing = write.ids, write.texts, write.metadatas, write.existing
        step = self.max_batch_size()
        index = self.bm25(collection)
        if write.bm25_only:
            log.info("bm25_healed", collection=collection, chunks=len(write.bm25_only))
            index.upsert([ids[i] for i in write.bm25_only], [texts[i] for i in write.bm25_only],
                         [metadatas[i] for i in write.bm25_only])
        for start in range(0, len(write.meta_only), step):
            part = write.meta_only[start:start + step]
            p_ids = [ids[i] for i in part]
            p_meta = [self._replacing(existing[ids[i]], metadatas[i]) for i in part]
            self._call("update", lambda: col.update(ids=p_ids, metadatas=p_meta))
            index.upsert(p_ids, [texts[i] for i in part], [metadatas[i] for i in part])
        for start in range(0, len(write.to_embed), step):
            part = write.to_embed[start:start + step]
            p_ids = [ids[i] for i in part]
            p_texts = [texts[i] for i in part]
            p_meta = [self._replacing(existing.get(ids[i], {}), metadatas[i]) for i in part]
            p_vectors = write.vectors[start:start + step]
            self._call("upsert", lambda: col.upsert(ids=p_ids, embeddings=p_vectors,
                                                    documents=p_texts, metadatas=p_meta))
            index.upsert(p_ids, p_texts, [metadatas[i] for i in part])
            write.result.written += len(part)
        return write.result

    def _embed(self, texts: list[str], result: FileWriteResult) -> Any:
        """Vectors for `texts`; a failing embedder is retried, then EmbeddingError."""
        for attempt in range(1, EMBED_ATTEMPTS + 1):
            began = time.perf_counter()
            try:
                vectors = self.embedder.embed(texts)
                if vectors.shape != (len(texts), int(self.embedder.dimensions)):
                    raise EmbeddingError(f"the embedder returned shape {vectors.shape} for "
                                         f"{len(texts)} texts")
                return vectors
            except Exception as exc:
                if attempt == EMBED_ATTEMPTS:
                    raise EmbeddingError(
                        f"embedding {len(texts)} chunks failed after {attempt} attempts: {exc}",
                        hint="check the embedding model (HETRIEVER_EMBEDDING_MODEL); the files "
                             "keep their previous chunks until a run stores them") from exc
                delay = RETRY_BASE_SECONDS * 2 ** (attempt - 1) * random.uniform(0.5, 1.0)
                log.warning("embed_retry", attempt=attempt, texts=len(texts),
                            delay=round(delay, 3), error=str(exc))
                time.sleep(delay)
            finally:
                result.embedding_seconds += time.perf_counter() - began
        raise AssertionError("unreachable")

    def _delete_ids(self, collection: str, col: Any, ids: list[str]) -> int:
        self._delete_chroma_ids(col, ids)
        if ids:
            self.bm25(collection).delete(ids)
        return len(ids)

    def _delete_chroma_ids(self, col: Any, ids: list[str]) -> int:
        step = self.max_batch_size()
        for start in range(0, len(ids), step):
            part = ids[start:start + step]
            self._call("delete", lambda: col.delete(ids=part))
        return len(ids)

    def upsert_file_chunks_sync(self, collection: str, file_path: str,
                                chunks: list[Chunk]) -> FileWriteResult:
        return self.upsert_files_sync(collection, {file_path: chunks})

    def upsert_files_sync(self, collection: str,
                          files: dict[str, list[Chunk]]) -> FileWriteResult:
        """Replace several files' chunks as one unit of work.

        Every file's new chunks are embedded together (one length-sorted pass, so small files
        do not make small batches); a file given with no chunks loses all of its chunks.
        """
        ids: list[str] = []
        texts: list[str] = []
        metadatas: list[dict[str, Any]] = []
        for file_path, chunks in files.items():
            for c in chunks:
                meta = dict(c.metadata)
                if meta.get("file_path", file_path) != file_path:
                    raise IndexingError(f"chunk {c.id!r} belongs to {meta['file_path']!r}, "
                                        f"not {file_path!r}")
                meta["file_path"] = file_path
                ids.append(c.id)
                texts.append(c.text)
                metadatas.append(meta)
        if not files:
            return FileWriteResult()
        with self.writer_lock(collection):
            col = self._chroma(collection, create=True)
            physical = self.physical_name(collection, create=True)
            # Before writing: a crash after it must never leave levels the catalog misses.
            self.catalog.note_levels(physical, {str(m["access_level"]) for m in metadatas
                                                if "access_level" in m})
            old_ids = set(self._ids_of_files(col, list(files)))
            # One BM25 commit per call; Chroma is written first, so a crash leaves BM25 behind
            # (never ahead), which repair() fixes.
            index = self.bm25(collection)
            # Embedding happens here, before the BM25 transaction opens (see _prepare_write).
            prepared = self._prepare_write(collection, col, ids, texts, metadatas) \
                if ids else None
            faults.check("window_write", collection)
            with index.transaction():
                result = self._apply_write(collection, col, prepared) if prepared \
                    else FileWriteResult()
                faults.check("window_chroma_written", collection)
                vanished = sorted(old_ids - set(ids))
                result.deleted = self._delete_ids(collection, col, vanished)
                if vanished:
                    faults.check("replaced_chunks_deleted", collection)
                # BM25 rows of these files that Chroma no longer has (a crash between writes).
                stale = index.ids_where({"file_path": {"$in": list(files)}}) - set(ids)
                if stale:
                    index.delete(stale)
            faults.check("window_bm25_committed", collection)
        log.debug("files_written", collection=collection, files=len(files),
                  written=result.written, reused=result.reused, deleted=result.deleted)
        return result

    def _ids_of_files(self, col: Any, paths: list[str]) -> list[str]:
        out: list[str] = []
        step = 100  # keep each `$in` list small
        for start in range(0, len(paths), step):
            part = paths[start:start + step]
            where = {"file_path": part[0]} if len(part) == 1 else {"file_path": {"$in": part}}
            out += self._ids_where(col, where)
        return out

    def delete_file_sync(self, collection: str, file_path: str) -> int:
        col = self._chroma(collection)
        if col is None:
            return 0
        with self.writer_lock(collection):
            ids = self._ids_where(col, {"file_path": file_path})
            removed = self._delete_chroma_ids(col, ids)
            faults.check("removed_file_chroma_deleted", file_path)
            if ids:
                self.bm25(collection).delete(ids)
            # BM25 rows Chroma never had (a crash between the two writes) go too.
            self.bm25(collection).delete_where({"file_path": file_path})
        return removed

    def index_document_sync(self, doc_id: str, content: str, metadata: Metadata) -> bool:
        meta = dict(metadata or {})
        collection = meta.get("repository")
        if not isinstance(collection, str) or not collection:
            raise IndexingError(f"document {doc_id!r} has no `repository` metadata",
                                hint="set metadata['repository'] to the collection's name")
        with self.writer_lock(collection):
            col = self._chroma(collection, create=True)
            if "access_level" in meta:
                self.catalog.note_levels(self.physical_name(collection, create=True),
                                         [str(meta["access_level"])])
            self._apply_write(collection, col, self._prepare_write(
                collection, col, [doc_id], [content], [meta]))
        return True

    def _all(self, col: Any, include: list[str], where: dict | None = None) -> dict[str, list[Any]]:
        """Every record of a collection (matching `where`, when given), paged."""
        out: dict[str, list[Any]] = {"ids": [], **{k: [] for k in include}}
        step = self.max_batch_size()
        offset = 0
        while True:
            got = self._call("get", lambda: col.get(where=where, include=include, limit=step,
                                                    offset=offset))
            out["ids"].extend(got["ids"])
            for key in include:
                out[key].extend(got[key] or [])
            if len(got["ids"]) < step:
                return out
            offset += step

    def list_files_sync(self, collection: str, *, include_deleted: bool = False) -> list[str]:
        """Files with chunks in the collection; soft-deleted files only when asked."""
        return sorted(self.file_chunk_counts_sync(collection, include_deleted=include_deleted))

    def file_chunk_counts_sync(self, collection: str, *,
                               include_deleted: bool = False) -> dict[str, int]:
        """file_path -> chunks in Chroma (live ones, unless `include_deleted`)."""
        col = self._chroma(collection)
        if col is None:
            return {}
        counts: dict[str, int] = {}
        for m in self._all(col, ["metadatas"])["metadatas"]:
            if m and "file_path" in m and (include_deleted or m.get("is_deleted") is not True):
                counts[str(m["file_path"])] = counts.get(str(m["file_path"]), 0) + 1
        return counts

    # -- soft delete and purge -------------------------------------------------------------

    def chunks_where_sync(self, collection: str, where: dict[str, Any]) -> list[Document]:
        """The collection's chunks matching an equality filter (e.g. one file, one URL),
        soft-deleted ones included (callers check access and deletion), unordered."""
        col = self._chroma(collection)
        if col is None:
            return []
        got = self._call("get", lambda: col.get(where=where, include=["documents", "metadatas"]))
        return [Document(doc_id=i, content=d or "", metadata=dict(m or {}))
                for i, d, m in zip(got["ids"], got["documents"] or [], got["metadatas"] or [])]

    def soft_delete_file_sync(self, collection: str, file_path: str, deleted_at: str) -> int:
        """Mark a file's live chunks `is_deleted=True, deleted_at=...` in Chroma and BM25.

        They stay stored (for audit) but every search excludes them; `purge_deleted_sync`
        removes them later. Returns the number of chunks marked.
        """
        col = self._chroma(collection)
        if col is None:
            return 0
        with self.writer_lock(collection):
            got = self._call("get", lambda: col.get(
                where={"$and": [{"file_path": file_path}, {"is_deleted": {"$ne": True}}]},
                include=["documents", "metadatas"]))
            ids = list(got["ids"])
            if not ids:
                return 0
            metas = [{**dict(m or {}), "is_deleted": True, "deleted_at": deleted_at}
                     for m in got["metadatas"]]
            step = self.max_batch_size()
            index = self.bm25(collection)
            with index.transaction():
                for start in range(0, len(ids), step):
                    part = slice(start, start + step)
                    self._call("update", lambda: col.update(ids=ids[part],
                                                            metadatas=metas[part]))
                    index.upsert(ids[part], got["documents"][part], metas[part])
        log.info("file_soft_deleted", collection=collection, path=file_path, chunks=len(ids))
        return len(ids)

    def deleted_chunks_sync(self, collection: str) -> list[tuple[str, str, str]]:
        """(id, file_path, deleted_at) of every soft-deleted chunk of the collection."""
        col = self._chroma(collection)
        if col is None:
            return []
        got = self._call("get", lambda: col.get(where={"is_deleted": True},
                                                include=["metadatas"]))
        return [(i, str((m or {}).get("file_path", "")), str((m or {}).get("deleted_at", "")))
                for i, m in zip(got["ids"], got["metadatas"] or [])]

    def purge_ids_sync(self, collection: str, ids: list[str]) -> int:
        col = self._chroma(collection)
        if col is None or not ids:
            return 0
        with self.writer_lock(collection):
            return self._delete_ids(collection, col, ids)

    def get_by_id_sync(self, doc_id: str) -> Document | None:
        for name in self.repository_names():
            col = self._chroma(name)
            if col is None:
                continue
            got = self._call("get", lambda: col.get(ids=[doc_id],
                                                    include=["documents", "metadatas"]))
            if got["ids"]:
                return Document(doc_id=doc_id, content=got["documents"][0],
                                metadata=dict(got["metadatas"][0] or {}))
        return None

    def delete_sync(self, doc_id: str) -> bool:
        for name in self.repository_names():
            col = self._chroma(name)
            if col is None:
                continue
            got = self._call("get", lambda: col.get(ids=[doc_id], include=[]))
            if got["ids"]:
                with self.writer_lock(name):
                    self._delete_ids(name, col, [doc_id])
                return True
        return False

    def info_sync(self, name: str) -> CollectionInfo | None:
        col = self._chroma(name)
        if col is None:
            return None
        physical = self.physical_name(name)
        if physical is None:  # dropped since `_chroma` looked
            return None
        # Fetched fresh: the cached object's metadata is a snapshot from when it was opened.
        fresh = self._call("get_collection", lambda: self.client.get_collection(
            physical, embedding_function=None))
        with self._guard:
            self._collections[physical] = fresh
        return CollectionInfo(name=name, count=int(self._call("count", fresh.count)),
                              metadata=dict(fresh.metadata or {}), physical=physical)

    def ensure_collection_sync(self, name: str) -> CollectionInfo:
        col = self._chroma(name, create=True)
        self.check_embedding_model(name, col)
        info = self.info_sync(name)
        assert info is not None
        return info

    def delete_collection_sync(self, name: str) -> int:
        """Delete repository `name`'s current collection (Chroma, BM25, catalog rows)."""
        physical = self.physical_name(name)
        if physical is None:
            return 0
        return self.drop_physical_sync(name, physical)

    def drop_physical_sync(self, name: str, physical: str) -> int:
        """Delete one physical collection of repository `name`; returns its chunk count."""
        validate_collection_name(name)
        with self.writer_lock(name):
            col = self._chroma_physical(physical, name)
            removed = int(self._call("count", col.count)) if col is not None else 0
            if col is not None:
                self._call("delete_collection", lambda: self.client.delete_collection(physical))
            self.bm25_physical(physical).drop()
            self._forget(physical, bm25=True)
            self.catalog.drop_collection(physical)
        log.info("collection_deleted", collection=physical, repository=name, chunks=removed)
        return removed

    def update_collection_metadata_sync(self, name: str, **fields: Any) -> dict[str, Any]:
        info = self.info_sync(name)
        if info is None:
            raise CollectionNotFoundError(f"collection {name!r} does not exist",
                                          hint="index the repository first")
        merged = {**info.metadata, **{k: v for k, v in fields.items() if v is not None}}
        for key in (k for k, v in fields.items() if v is None):
            merged.pop(key, None)
        try:
            validate_metadata(merged)
        except (ValueError, TypeError) as exc:
            raise IndexingError(f"collection metadata for {name!r} is invalid: {exc}") from None
        col = self._collections[info.physical]
        with self.writer_lock(name):
            # Chroma replaces collection metadata as a whole, hence the merge above.
            self._call("modify", lambda: col.modify(metadata=merged))
        self._forget(info.physical)
        return merged

    def count_sync(self, collection: str, *, live: bool = False) -> int:
        """Chunks in the collection; with `live`, soft-deleted chunks are not counted."""
        col = self._chroma(collection)
        if col is None:
            return 0
        total = int(self._call("count", col.count))
        if live:
            total -= len(self._ids_where(col, {"is_deleted": True}))
        return total

    def repair_sync(self, collection: str) -> RepairResult:
        result = RepairResult(collection=collection)
        col = self._chroma(collection)
        if col is None:
            raise CollectionNotFoundError(f"collection {collection!r} does not exist")
        with self.writer_lock(collection):
            records = self._all(col, ["documents", "metadatas"])
            index = self.bm25(collection)
            in_bm25 = set(index.ids())
            in_chroma = set(records["ids"])
            missing = [i for i, doc_id in enumerate(records["ids"]) if doc_id not in in_bm25]
            extra = sorted(in_bm25 - in_chroma)
            if missing:
                index.upsert([records["ids"][i] for i in missing],
                             [records["documents"][i] for i in missing],
                             [dict(records["metadatas"][i] or {}) for i in missing])
            if extra:
                index.delete(extra)
            result.added, result.removed = len(missing), len(extra)
            result.chunk_ids = in_chroma
            result.files = {str(m["file_path"]) for m in records["metadatas"]
                            if m and "file_path" in m}
        log.info("collection_repaired", collection=collection, added=result.added,
                 removed=result.removed)
        return result

    def health_check_sync(self) -> bool:
        try:
            self._call("heartbeat", self.client.heartbeat, retry=False)
            return True
        except Exception as exc:  # a health check reports; it never raises
            log.warning("health_check_failed", location=self.location, error=str(exc))
            return False

    # -- async API --------------------------------------------------------------------

    async def index_document(self, doc_id: str, content: str, metadata: Metadata) -> bool:
        return await asyncio.to_thread(self.index_document_sync, doc_id, content, metadata)

    async def search(self, query: str, top_k: int | None = None,
                     filters: dict[str, Any] | None = None, *,
                     namespaces: Sequence[str] | None = None,
                     hybrid: bool | None = None,
                     access_levels: Sequence[str] | None = None,
                     group_by: str | None = None,
                     lang: str | None = None) -> list[SearchResult]:
        from hetriever.search import retrieve

        result = await retrieve(self, query, top_k=top_k, filters=filters,
                                namespaces=namespaces, hybrid=hybrid,
                                access_levels=access_levels, group_by=group_by, lang=lang)
        return result.matches

    async def get_by_id(self, doc_id: str) -> Document | None:
        return await asyncio.to_thread(self.get_by_id_sync, doc_id)

    async def delete(self, doc_id: str) -> bool:
        return await asyncio.to_thread(self.delete_sync, doc_id)

    async def health_check(self) -> bool:
        return await asyncio.to_thread(self.health_check_sync)

    async def ensure_collection(self, name: str) -> CollectionInfo:
        return await asyncio.to_thread(self.ensure_collection_sync, name)

    async def upsert_file_chunks(self, collection: str, file_path: str,
                                 chunks: list[Chunk]) -> FileWriteResult:
        return await asyncio.to_thread(self.upsert_file_chunks_sync, collection, file_path,
                                       list(chunks))

    async def upsert_files(self, collection: str,
                           files: dict[str, list[Chunk]]) -> FileWriteResult:
        return await asyncio.to_thread(self.upsert_files_sync, collection,
                                       {path: list(chunks) for path, chunks in files.items()})

    async def delete_file(self, collection: str, file_path: str) -> int:
        return await asyncio.to_thread(self.delete_file_sync, collection, file_path)

    async def file_chunk_counts(self, collection: str) -> dict[str, int]:
        return await asyncio.to_thread(self.file_chunk_counts_sync, collection)

    async def list_files(self, collection: str) -> list[str]:
        return await asyncio.to_thread(self.list_files_sync, collection)

    async def list_collections(self) -> list[CollectionInfo]:
        def run() -> list[CollectionInfo]:
            infos = (self.info_sync(n) for n in self.repository_names())
            return [i for i in infos if i is not None]

        return await asyncio.to_thread(run)

    async def get_collection_info(self, name: str) -> CollectionInfo | None:
        return await asyncio.to_thread(self.info_sync, name)

    async def delete_collection(self, name: str) -> int:
        return await asyncio.to_thread(self.delete_collection_sync, name)

    async def update_collection_metadata(self, name: str, **fields: Any) -> dict[str, Any]:
        return await asyncio.to_thread(self.update_collection_metadata_sync, name, **fields)

    async def get_collection_metadata(self, name: str) -> dict[str, Any]:
        info = await asyncio.to_thread(self.info_sync, name)
        return info.metadata if info is not None else {}

    async def count(self, collection: str, *, live: bool = False) -> int:
        return await asyncio.to_thread(lambda: self.count_sync(collection, live=live))

    async def soft_delete_file(self, collection: str, file_path: str, deleted_at: str) -> int:
        return await asyncio.to_thread(self.soft_delete_file_sync, collection, file_path,
                                       deleted_at)

    async def repair(self, collection: str) -> RepairResult:
        return await asyncio.to_thread(self.repair_sync, collection)

    async def rebuild_bm25(self, collection: str) -> RepairResult:
        return await asyncio.to_thread(self.rebuild_bm25_sync, collection)

    def close_sync(self) -> None:
        with self._guard:
            names = list(self._bm25)
        for name in names:
            self._forget(name, bm25=True)
        with self._guard:
            self._collections.clear()
            catalog, self._catalog = (self._catalog, None) if self._owns_catalog else (None,
                                                                                      self._catalog)
        if catalog is not None:
            catalog.close()

    async def close(self) -> None:
        self.close_sync()

    async def __aenter__(self) -> ChromaKnowledgeStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --- shared instances ----------------------------------------------------------------

_stores: dict[str, ChromaKnowledgeStore] = {}
_stores_guard = threading.Lock()


def get_knowledge_store(settings: Settings | None = None) -> ChromaKnowledgeStore:
    """One shared store per settings (from the environment when not given)."""
    if settings is None:
        settings = load_settings()
    if not isinstance(settings, Settings):
        raise ConfigurationError(f"expected Settings, got {type(settings).__name__}")
    key = repr(settings)  # Settings holds dicts, so it is not hashable itself
    with _stores_guard:
        store = _stores.get(key)
        if store is None:
            store = ChromaKnowledgeStore(settings)
            _stores[key] = store
        return store


def clear_store_cache() -> None:
    with _stores_guard:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        store.close_sync()
