"""The store's shared handle on ChromaDB: the client (embedded `PersistentClient` or
`HttpClient`), the collection handles taken from it, and one backend call with retries.

Every peer of the store (`hetriever.store.knowledge_store`) receives this one object. Every
call goes through `ChromaAccess.call`: transient errors (network hiccups, a busy server,
injected faults) are retried with backoff and jitter; an unreachable or frozen server fails at
once with a `BackendConnectionError` that says what to do; a full or read-only disk becomes a
`StorageError`. Embedded Chroma loads a collection once per process and never sees another
process's later writes, so `reopen` starts a fresh system for the path
(`hetriever.store.embedded_chroma`).
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import chromadb
import httpx
from chromadb.config import Settings as ChromaSettings
from chromadb.errors import InternalError, RateLimitError

from hetriever.core import faults
from hetriever.core.backoff import retrying
from hetriever.core.config import Settings
from hetriever.core.errors import (
    BackendConnectionError,
    HetrieverError,
    KnowledgeStoreError,
    UnusableDirectoryError,
)
from hetriever.core.logs import get_logger
from hetriever.store.chunk_records import ChunkCollection
from hetriever.store.embedded_chroma import forget_system, open_persistent

log = get_logger(__name__)

WRITE_ATTEMPTS = 4
# Network hiccups, a busy server, and faults injected on purpose are worth another try.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TimeoutException,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
    ConnectionResetError,
    BrokenPipeError,
    TimeoutError,
    InternalError,
    RateLimitError,
    faults.InjectedFault,
)
# An unreachable server is not: retrying only delays the same answer.
UNREACHABLE_ERRORS: tuple[type[BaseException], ...] = (httpx.ConnectError, ConnectionRefusedError)

T = TypeVar("T")


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


class ChromaAccess:
    """A Chroma client, its collection handles, and the one way to call it (the state every
    peer of the store shares)."""

    def __init__(
        self, settings: Settings, *, lock_timeout: float | None = None, client: Any | None = None
    ) -> None:
        self.settings = settings
        # A writer waits as long as a second ingest run may (another repository's ingest
        # holds the embedded directory for a whole window, which can take minutes).
        self.lock_timeout = settings.run_lock_timeout if lock_timeout is None else lock_timeout
        self.location = _location(settings)
        self._frozen_until = 0.0  # a server that timed out is not asked again before this
        self.collections: dict[str, Any] = {}  # handles, by physical name
        # Embedded mode: the BM25 generation (physical name -> int) that this process's view of
        # a Chroma collection is known to include (see RepositoryViews).
        self.seen: dict[str, int] = {}
        self.inherited = False  # set by _connect: the path's system was made here before
        self.guard = threading.RLock()
        self._max_batch: int | None = None
        self._own_client = client is None  # a client handed in is not ours to reconnect
        self.client = client if client is not None else self._connect()

    def _connect(self) -> Any:
        s = self.settings
        chroma_settings = ChromaSettings(anonymized_telemetry=False)
        try:
            if s.server_mode:
                return self._http_client(chroma_settings)
            s.chroma_path.mkdir(parents=True, exist_ok=True)
            client, self.inherited = open_persistent(
                s.chroma_path,
                chroma_settings,
                timeout=self.lock_timeout,
                what=f"opening the Chroma directory {self.location}",
            )
            return client
        except HetrieverError:
            raise
        except Exception as exc:
            storage = self.storage_problem(exc)
            if storage is not None:
                raise storage from exc
            if s.server_mode:
                hint = (
                    "start the server (`chroma run --path <dir> --port "
                    f"{s.chroma_port}`) or unset HETRIEVER_CHROMA_HOST for embedded mode"
                )
            else:
                hint = "check that HETRIEVER_CHROMA_PATH is a writable directory"
                if _not_a_directory(exc):
                    raise UnusableDirectoryError(
                        f"cannot open the Chroma backend: {exc}", location=self.location, hint=hint
                    ) from exc
            raise BackendConnectionError(
                f"cannot open the Chroma backend: {exc}", location=self.location, hint=hint
            ) from exc

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
                made["client"] = chromadb.HttpClient(
                    host=s.chroma_host, port=s.chroma_port, settings=chroma_settings
                )
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
            "(frozen or overloaded)",
            location=self.location,
            hint="check that `chroma run` is responsive (not stopped or swapping), or raise "
            "HETRIEVER_CHROMA_TIMEOUT",
        )

    def storage_problem(self, exc: BaseException):
        """A StorageError when `exc` comes from a full or read-only local disk, else None."""
        from hetriever.core.storage import storage_problem

        dirs = [self.settings.resolved_state_dir]
        if not self.settings.server_mode:
            dirs.append(self.settings.chroma_path)
        return storage_problem(exc, dirs)

    def _unreachable(self, exc: BaseException) -> BackendConnectionError:
        return BackendConnectionError(
            f"the Chroma server stopped answering: {exc}",
            location=self.location,
            hint="check that `chroma run` is up and reachable, then re-run",
        )

    def call(self, what: str, fn: Callable[[], T], *, retry: bool = True) -> T:
        """Run one backend call; transient errors are retried with backoff and jitter."""

        def attempt() -> T:
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
                raise

        attempts = WRITE_ATTEMPTS if retry else 1
        try:
            return retrying(attempts, TRANSIENT_ERRORS, "chroma_retry", op=what)(attempt)
        except TRANSIENT_ERRORS as exc:
            raise KnowledgeStoreError(
                f"Chroma {what} failed after {attempts} attempts: {exc}",
                hint="the backend kept failing; check its log and re-run",
            ) from exc

    def max_batch_size(self) -> int:
        if self._max_batch is None:
            limit = self.call("max_batch_size", self.client.get_max_batch_size)
            self._max_batch = max(1, min(self.settings.batch_size, int(limit)))
        return self._max_batch

    def reopen(self, physical: str) -> None:
        """A fresh view of the embedded Chroma directory, after another process wrote to it.

        Embedded Chroma loads a collection's vector index once per process and never reads
        another process's later writes: deleted chunks keep coming back without documents and
        new ones are never found. Chroma shares one system per path within a process, so the
        path's system is replaced: every client of this path then reads the new one, and
        handles already taken keep answering from the old one until dropped.
        """
        if self._own_client:
            forget_system(self.client)
            self.client = self._connect()
        self.collections.clear()
        self.seen.clear()
        log.debug("chroma_reopened", path=self.location, collection=physical)

    def collection_names(self) -> list[str]:
        """Physical Chroma collection names (every generation)."""
        cols = self.call("list_collections", self.client.list_collections)
        return sorted(c.name if hasattr(c, "name") else str(c) for c in cols)

    def all_records(
        self, col: Any, include: list[str], where: dict | None = None
    ) -> dict[str, list[Any]]:
        """Every record of a collection (matching `where`, when given), paged."""
        out: dict[str, list[Any]] = {"ids": [], **{k: [] for k in include}}
        for page in self.record_pages(col, include, where):
            for key, values in page.items():
                out[key].extend(values)
        return out

    def record_pages(
        self, col: Any, include: list[str], where: dict | None = None
    ) -> Iterator[dict[str, list[Any]]]:
        """The records of a collection (matching `where`, when given), one page of
        `read_batch_size` at a time, so a caller that does not need them all at once never
        holds them all."""
        step = self.settings.read_batch_size
        offset = 0
        while True:
            got = self.call(
                "get", lambda: col.get(where=where, include=include, limit=step, offset=offset)
            )
            yield {"ids": list(got["ids"]), **{k: list(got[k] or []) for k in include}}
            if len(got["ids"]) < step:
                return
            offset += step

    def open_collection(self, physical: str) -> ChunkCollection:
        """The physical collection as chunks are read and written (`chunk_records`);
        NotFoundError when absent."""
        return ChunkCollection(
            self.call(
                "get_collection",
                lambda: self.client.get_collection(physical, embedding_function=None),
            )
        )

    @property
    def owns_client(self) -> bool:
        """Whether the client was opened here (one handed in is not ours to reconnect)."""
        return self._own_client

    def ids_where(self, col: Any, where: dict[str, Any]) -> list[str]:
        got = self.call("get", lambda: col.get(where=where, include=[]))
        return list(got["ids"])

    def health_check(self) -> bool:
        try:
            self.call("heartbeat", self.client.heartbeat, retry=False)
            return True
        except Exception as exc:  # a health check reports; it never raises
            log.warning("health_check_failed", location=self.location, error=str(exc))
            return False
