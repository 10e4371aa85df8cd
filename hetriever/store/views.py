"""Which Chroma collection and BM25 index serve a repository, and keeping this process's view
of them current.

The catalog (`hetriever.store.catalog`) maps each repository to its *physical* collection
`<repository>_v<generation>` (`physical_name()`); a store may pin a repository to another
generation (a migration builds the next one through a pinned store). Each physical collection
has a BM25 index (`<state_dir>/bm25/<physical>.sqlite`) whose generation counter tells an
embedded process when another process wrote, so it reopens Chroma before reading
(`refresh_view`). Writers take `writer_lock`: the persistent directory (embedded) and a lock
file per repository, so two processes never write one index at once.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, overload

from chromadb.errors import NotFoundError

from hetriever.core.config import Settings
from hetriever.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    DerivedIndexError,
    EmbeddingError,
)
from hetriever.core.locks import file_lock
from hetriever.core.logs import get_logger
from hetriever.core.names import validate_collection_name
from hetriever.store.bm25.bm25_index import BM25Index
from hetriever.store.catalog import Catalog
from hetriever.store.catalog_records import (
    INDEX_STATE_DEFAULTS,
    INDEX_STATE_KEYS,
    split_physical,
)
from hetriever.store.chroma_access import ChromaAccess
from hetriever.store.chunk_records import ChunkCollection
from hetriever.store.store_types import CollectionInfo

log = get_logger(__name__)

SCHEMA_VERSION = 1
# Chroma writes its HNSW graph to disk after every `sync_threshold` additions and, each time
# a process loads the collection, inserts the newer vectors from its log into the graph in
# an order that differs from process to process: the same query's nearest chunks then
# differed at the margin between two processes (hugo-docs, 3,792 chunks: 100 queries, three
# processes, three different answers at Chroma's default of 1,000). At its batch size (100),
# what is not yet on disk stays in Chroma's exact brute-force buffer, and every process
# answers alike; writes take no measurably longer (bench/README.md).
HNSW_SYNC_THRESHOLD = 100

INDEX_LOCATION = "index_location"  # the catalog's meta keys: the Chroma directory it
STATE_LOCATION = "state_location"  # describes, and where the catalog itself was then


def claim_state_dir(catalog: Catalog, settings: Settings) -> None:
    """A state directory describes one embedded Chroma directory. By default it sits beside
    the Chroma directory, so `chroma_data` and `chroma_test` in one folder would share it:
    the second index's runs would be recorded as the first's, and an ingest into one would
    find the other's commit and do nothing. The catalog records both places; a store over
    another Chroma directory, from the same state directory, while the recorded one still
    exists, is refused. A pair copied or moved together (a backup restored elsewhere), or a
    Chroma directory that moved, takes the record with it."""
    here = str(Path(settings.chroma_path).resolve())
    state = str(Path(settings.resolved_state_dir).resolve())
    owner, same_state = catalog.noted(INDEX_LOCATION), catalog.noted(STATE_LOCATION) == state
    if owner == here and same_state:
        return
    if owner is not None and owner != here and same_state and Path(owner).is_dir():
        catalog.close()
        raise ConfigurationError(
            f"the state directory {settings.resolved_state_dir} belongs to the index at "
            f"{owner}, not to {here}",
            hint="give each index its own state directory (HETRIEVER_STATE_DIR), or use the "
            "Chroma path that state directory was made for",
        )
    catalog.note(INDEX_LOCATION, here)
    catalog.note(STATE_LOCATION, state)


class RepositoryViews:
    """Repository names -> Chroma collections and BM25 indexes, the embedder, the catalog, the
    writer lock: the part of the store every other peer goes through (it receives the shared
    Chroma handle and holds the BM25 handles)."""

    def __init__(
        self,
        chroma: ChromaAccess,
        *,
        embedder: Any | None = None,
        pins: dict[str, str] | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        self.chroma = chroma
        self.settings = chroma.settings
        self._embedder = embedder
        self._bm25: dict[str, BM25Index] = {}  # by physical name
        self._bm25_ok: set[str] = set()  # physical names whose BM25 index was checked whole
        self._writing: Counter[str] = Counter()  # repositories this process is writing now
        # repository -> physical collection this store reads and writes regardless of the
        # alias (a migration builds the next generation through a pinned store).
        self.pins = dict(pins or {})
        self._catalog = catalog
        self._owns_catalog = catalog is None
        # Run before the repositories are listed: a follower's manifest read (the store's
        # replica peer sets it when `follow` is on).
        self.before_listing: Callable[[], object] | None = None

    @property
    def catalog(self) -> Catalog:
        with self.chroma.guard:
            if self._catalog is None:
                catalog = Catalog.for_state_dir(self.settings.resolved_state_dir)
                if self._owns_catalog and not self.settings.server_mode:
                    claim_state_dir(catalog, self.settings)
                self._catalog = catalog
            return self._catalog

    def fingerprint(self) -> str:
        """What a collection's vectors and chunks depend on; a change needs a new generation."""
        s = self.settings
        model = (
            s.embedding_model
            if s.embedding_precision == "fp32"
            else f"{s.embedding_model}-{s.embedding_precision}"
        )
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

    def repository_names(self) -> list[str]:
        """Repositories with a searchable collection (from the catalog; no backend call, but
        for a follower's manifest read every `follow_interval` seconds)."""
        if self.before_listing is not None:
            self.before_listing()
        names = set(self.catalog.active_map())
        return sorted(names | set(self.pins))

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from hetriever.embed.embedder import get_embedder

            self._embedder = get_embedder(self.settings)
        return self._embedder

    def search_mode(self) -> str:
        return "hybrid" if self.settings.use_hybrid_search else "dense"

    def _hnsw(self) -> dict[str, Any]:
        s = self.settings
        return {
            "hnsw": {
                "space": s.hnsw_space,
                "ef_construction": s.hnsw_construction_ef,
                "ef_search": s.hnsw_search_ef,
                "max_neighbors": s.hnsw_m,
                "sync_threshold": HNSW_SYNC_THRESHOLD,
            }
        }

    def collection(self, name: str, *, create: bool = False) -> Any | None:
        """Repository `name`'s Chroma collection, or None when absent (created when `create`)."""
        physical = self.physical_name(name, create=create)
        return None if physical is None else self.physical_collection(physical, name, create=create)

    def physical_collection(self, physical: str, name: str, *, create: bool = False) -> Any | None:
        with self.chroma.guard:
            if not self._writing[name]:  # a writer made its view current when it took the lock
                self.refresh_view(physical)
            cached = self.chroma.collections.get(physical)
            if cached is not None:
                return cached
        # Read before the collection is loaded, so the view loaded next includes at least this
        # generation (every writer writes Chroma first, then BM25).
        generation = None if self.settings.server_mode else self.generation(physical)
        try:
            col = self.chroma.open_collection(physical)
            self._match_hnsw(col)
        except NotFoundError:
            if not create:
                return None
            embedder = self.embedder
            # What the collection is; what it holds (commit, status, totals) is the catalog's.
            metadata = {
                "schema_version": SCHEMA_VERSION,
                "embedding_model": embedder.name,
                "embedding_dimensions": int(embedder.dimensions),
                "repository": name,
                "schema_fingerprint": self.fingerprint(),
            }
            col = ChunkCollection(
                self.chroma.call(
                    "create_collection",
                    lambda: self.chroma.client.get_or_create_collection(
                        physical,
                        configuration=self._hnsw(),
                        metadata=metadata,
                        embedding_function=None,
                    ),
                )
            )
            log.info(
                "collection_created",
                collection=physical,
                repository=name,
                model=embedder.name,
                dimensions=embedder.dimensions,
            )
        with self.chroma.guard:
            self.chroma.collections[physical] = col
            if generation is not None:
                # An inherited view is of unknown age: the next access reopens it once.
                self.chroma.seen[physical] = -2 if self.chroma.inherited else generation
        return col

    def _match_hnsw(self, col: Any) -> None:
        """Give an existing collection the configured `ef_search` and HNSW_SYNC_THRESHOLD (HNSW
        parameters Chroma can change in place): collections made before they changed keep a
        less exact search, or answer differently in each process, otherwise. A process that
        loaded the index already sees the new values when it next reopens the collection."""
        want = {"ef_search": self.settings.hnsw_search_ef, "sync_threshold": HNSW_SYNC_THRESHOLD}
        hnsw = (getattr(col, "configuration_json", None) or {}).get("hnsw") or {}
        change = {k: v for k, v in want.items() if hnsw.get(k) is not None and hnsw[k] != v}
        if not change:
            return
        try:
            col.modify(configuration={"hnsw": change})
            log.info(
                "collection_hnsw_set",
                collection=col.name,
                was={k: hnsw[k] for k in change},
                now=change,
            )
        except Exception as exc:  # e.g. a read-only store: search still works, less exactly
            log.warning("collection_hnsw_unchanged", collection=col.name, error=str(exc))

    def generation(self, physical: str) -> int:
        """The collection's BM25 generation (-1 before it has a BM25 file, or a damaged one)."""
        if physical not in self._bm25 and not self.bm25_file(physical).exists():
            return -1
        try:
            return self.bm25_physical(physical).generation()
        except DerivedIndexError:  # dense search goes on; `bm25_problem` reports it
            return -1

    def refresh_view(self, physical: str) -> None:
        """Reopen embedded Chroma if the collection changed since this process loaded it."""
        if self.settings.server_mode or physical not in self.chroma.collections:
            return
        if self.generation(physical) != self.chroma.seen.get(physical):
            self.chroma.reopen(physical)

    def forget(self, name: str, *, bm25: bool = False) -> None:
        """Drop cached handles of a physical collection (its BM25 index too when `bm25`)."""
        with self.chroma.guard:
            self.chroma.collections.pop(name, None)
            index = self._bm25.pop(name, None) if bm25 else None
            if bm25:
                self._bm25_ok.discard(name)
        if index is not None:
            index.close()

    def release(self, name: str) -> None:
        """Let go of what this process holds for repository `name`: its collection handles
        and BM25 indexes (each with its term vocabulary and, after a search, its in-memory
        copy). A run over many repositories calls this after each one, so it holds one
        repository's working set at a time, not all of them; a later use opens them again."""
        with self.chroma.guard:
            held = [
                p
                for p in set(self.chroma.collections) | set(self._bm25)
                if (split_physical(p) or ("",))[0] == name
            ]
        for physical in held:
            self.forget(physical, bm25=True)
            with self.chroma.guard:
                self.chroma.seen.pop(physical, None)
        if held and not self.settings.server_mode and self.chroma.owns_client:
            # Embedded Chroma keeps every collection's vector index loaded for the process's
            # life (~3 MB for an empty one, the whole index for a full one): a fresh system
            # for the path lets them go; the next use loads what it needs.
            with self.chroma.guard:
                self.chroma.reopen(held[0])

    def info(self, name: str) -> CollectionInfo | None:
        """Repository `name`'s collection: its chunk count and metadata (Chroma's, with the
        index state the catalog records); None when it has none."""
        col = self.collection(name)
        if col is None:
            return None
        physical = self.physical_name(name)
        if physical is None:  # dropped since `collection()` looked
            return None
        # Fetched fresh: the cached object's metadata is a snapshot from when it was opened.
        fresh = self.chroma.open_collection(physical)
        with self.chroma.guard:
            self.chroma.collections[physical] = fresh
        return CollectionInfo(
            name=name,
            count=int(self.chroma.call("count", fresh.count)),
            metadata=self.with_index_state(physical, fresh.metadata),
            physical=physical,
        )

    def with_index_state(self, physical: str, chroma_meta: Any) -> dict[str, Any]:
        """Chroma's metadata of the collection (model, dimensions, schema) with the index
        state the catalog records. Collections indexed before the catalog kept that state
        carry it in their Chroma metadata: it counts until the catalog has its own."""
        meta = dict(chroma_meta or {})
        legacy = {k: meta.pop(k) for k in list(meta) if k in INDEX_STATE_KEYS}
        state = self.catalog.index_state(physical) or legacy
        return {**meta, **INDEX_STATE_DEFAULTS, **state}

    def close(self) -> None:
        """Close every BM25 index and drop every handle; the catalog too when it is ours."""
        with self.chroma.guard:
            names = list(self._bm25)
        for name in names:
            self.forget(name, bm25=True)
        with self.chroma.guard:
            self.chroma.collections.clear()
            catalog, self._catalog = (
                (self._catalog, None) if self._owns_catalog else (None, self._catalog)
            )
        if catalog is not None:
            catalog.close()

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
                "again, or set HETRIEVER_EMBEDDING_MODEL back to the collection's model",
            )
        stored_model = meta.get("embedding_model")
        if stored_model and stored_model != embedder.name:
            log.warning(
                "embedding_model_differs",
                collection=name,
                stored=stored_model,
                configured=embedder.name,
            )

    def bm25(self, name: str, *, create: bool = False) -> BM25Index:
        """Repository `name`'s BM25 index (of its pinned or active collection)."""
        physical = self.physical_name(name, create=create)
        if physical is None:
            raise CollectionNotFoundError(
                f"repository {name!r} has no collection", hint="index the repository first"
            )
        return self.bm25_physical(physical)

    def bm25_problem(self, name: str) -> str | None:
        """Why repository `name`'s BM25 index cannot serve searches, or None: its file is
        damaged, or missing or empty while Chroma holds chunks (deleted by hand, a restore of
        Chroma alone). Checked once per process while the index is whole."""
        physical = self.physical_name(name)
        if physical is None or physical in self._bm25_ok:
            return None
        path = self.bm25_file(physical)
        with self.chroma.guard:
            opened = physical in self._bm25
        state = "missing"
        if opened or path.exists():
            try:
                state = "empty" if self.bm25_physical(physical).count() == 0 else ""
            except DerivedIndexError as exc:
                return str(exc)
        if state:
            col = self.physical_collection(physical, name)
            chunks = int(self.chroma.call("count", col.count)) if col is not None else 0
            if chunks:
                return (
                    f"the BM25 index of {name!r} is {state} ({path}) while Chroma holds "
                    f"{chunks} chunks"
                )
        else:
            self._bm25_ok.add(physical)
        return None

    def search_bm25(self, name: str) -> BM25Index:
        """Repository `name`'s BM25 index for a search: DerivedIndexError when it cannot be
        trusted, so the search runs dense-only instead of quietly finding nothing."""
        problem = self.bm25_problem(name)
        if problem:
            raise DerivedIndexError(
                problem,
                hint="searches run dense-only; the next `hetriever ingest` rebuilds it from Chroma",
            )
        return self.bm25(name)

    def bm25_physical(self, physical: str) -> BM25Index:
        with self.chroma.guard:
            index = self._bm25.get(physical)
            if index is None:
                index = BM25Index(
                    self.bm25_file(physical), phrase_weight=self.settings.bm25_phrase_weight
                )
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

    @contextlib.contextmanager
    def writer_lock(self, collection: str) -> Iterator[None]:
        """Exclusive write access: the persistent directory (embedded) and the collection."""
        with contextlib.ExitStack() as stack:
            if not self.settings.server_mode:
                self.settings.chroma_path.mkdir(parents=True, exist_ok=True)
                stack.enter_context(
                    file_lock(
                        self.settings.chroma_path,
                        timeout=self.chroma.lock_timeout,
                        what=f"the Chroma directory {self.chroma.location}",
                    )
                )
            lock_path = self.settings.resolved_state_dir / "locks" / f"{collection}.lock"
            stack.enter_context(
                file_lock(
                    lock_path, timeout=self.chroma.lock_timeout, what=f"collection {collection!r}"
                )
            )
            with self.chroma.guard:
                physical = self.physical_name(collection)
                if physical is not None:
                    self.refresh_view(physical)  # write from a view that has every write
                self._writing[collection] += 1
            try:
                yield
            finally:
                with self.chroma.guard:
                    self._writing[collection] -= 1
                    # Still under the lock: every write up to here is ours and in our view.
                    physical = self.physical_name(collection)
                    if not self.settings.server_mode and physical in self.chroma.collections:
                        self.chroma.seen[physical] = self.generation(physical)
