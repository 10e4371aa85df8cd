"""Shared ChromaDB fixtures: embedded stores and a `chroma run` server on 127.0.0.1.

Registered as a plugin by tests/conftest.py, so every test module sees these fixtures.

- `minilm_embedder`: the real offline all-MiniLM-L6-v2, built once per session.
- `chroma_server`: a real `chroma run` process (the venv's `chroma` executable) per module,
  waited for with a heartbeat and killed at teardown. Tests using it carry `@pytest.mark.server`.
- `chroma_backend` + `make_store`: build `Store`s on the backend a test is
  parametrised with ("embedded" in tmp_path, or "server"); server collections are deleted
  after each test so tests stay independent.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from deployments.temporary_server import free_port
from hetriever.core.config import Settings, load_settings
from tests.support.fakes import MemoryClient
from tests.support.helpers import stop_process

SERVER_START_TIMEOUT = 60.0


def chroma_executable() -> Path:
    return Path(sys.executable).parent / "chroma"


@dataclass(frozen=True)
class ChromaServer:
    host: str
    port: int
    path: Path
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@pytest.fixture(scope="session")
def minilm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("minilm-model")


@pytest.fixture(scope="session")
def minilm_embedder(minilm_model_dir: Path) -> Any:
    from hetriever.embed.embedder import MiniLMEmbedder

    return MiniLMEmbedder(minilm_model_dir, batch_size=32, threads=1)


def wait_until_answering(
    proc: subprocess.Popen,
    url: str,
    *,
    what: str,
    log: Path,
    timeout: float,
    ready: Callable[[int], bool],
    interval: float = 0.2,
) -> None:
    """Poll `url` until its status is `ready`; fail the test if the process exits first (with
    the tail of its log) or nothing answers within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            pytest.fail(
                f"{what} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
            )
        try:
            if ready(httpx.get(url, timeout=2.0).status_code):
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not answer within {timeout}s")
        time.sleep(interval)


@contextlib.contextmanager
def running_chroma_server(path: Path) -> Iterator[ChromaServer]:
    """A `chroma run` process on a free port of 127.0.0.1, up (heartbeat) until the block ends."""
    exe = chroma_executable()
    if not exe.exists():
        pytest.skip(f"no `chroma` executable beside {sys.executable}")
    path.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = path.parent / f"{path.name}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [str(exe), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    server = ChromaServer("127.0.0.1", port, path, proc)
    try:
        wait_until_answering(
            proc,
            f"{server.url}/api/v2/heartbeat",
            what="chroma run",
            log=log_path,
            timeout=SERVER_START_TIMEOUT,
            ready=lambda status: status == 200,
            interval=0.1,
        )
        yield server
    finally:
        stop_chroma_server(server)


def stop_chroma_server(server: ChromaServer) -> None:
    proc = server.process
    if proc.poll() is not None:
        return
    stop_process(proc, timeout=10)


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    with running_chroma_server(tmp_path_factory.mktemp("chroma-server")) as server:
        yield server


def store_settings(
    tmp_path: Path, server: ChromaServer | None = None, **overrides: Any
) -> Settings:
    """Settings for a store whose data (embedded) and state (BM25, locks) live in tmp_path."""
    base: dict[str, Any] = {"chroma_path": tmp_path / "chroma", "state_dir": tmp_path / "state"}
    if server is not None:
        base.update(chroma_host=server.host, chroma_port=server.port)
    base.update(overrides)
    return load_settings(env={}, config_file=None, **base)


def chroma_or_memory_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """For a fixture parametrized ["chroma", "memory"]: a store over real Chroma and MiniLM, or
    over the fast tier's in-memory stand-ins; closed afterwards."""
    from hetriever.store.knowledge_store import Store
    from tests.support.fakes import HashEmbedder

    settings = store_settings(tmp_path, run_lock_timeout=1.0)
    if request.param == "chroma":
        store = Store(
            settings, embedder=request.getfixturevalue("minilm_embedder"), lock_timeout=2.0
        )
    else:
        store = Store(settings, embedder=HashEmbedder(), client=MemoryClient(), lock_timeout=2.0)
    yield store
    store.close_sync()


@pytest.fixture(params=["embedded", pytest.param("server", marks=pytest.mark.server), "memory"])
def chroma_backend(request: pytest.FixtureRequest) -> str:
    """embedded Chroma, a `chroma run` server, or the fast tier's in-memory client."""
    return str(request.param)


@pytest.fixture
def make_store(
    request: pytest.FixtureRequest, chroma_backend: str, tmp_path: Path, minilm_embedder: Any
) -> Iterator[Callable[..., Any]]:
    """Factory: `make_store(embedder=None, **setting_overrides) -> Store`."""
    from hetriever.store.knowledge_store import Store

    server = request.getfixturevalue("chroma_server") if chroma_backend == "server" else None
    # One in-memory client per test: stores made in one test share it as they share a directory.
    memory = MemoryClient() if chroma_backend == "memory" else None
    made: list[Any] = []

    def make(embedder: Any = None, lock_timeout: float = 2.0, **overrides: Any) -> Any:
        settings = store_settings(tmp_path, server, **overrides)
        store = Store(
            settings, embedder=embedder or minilm_embedder, lock_timeout=lock_timeout, client=memory
        )
        made.append(store)
        return store

    yield make
    for store in made:
        if server is not None:  # the server outlives the test: leave it empty
            for col in store.chroma.client.list_collections():
                store.chroma.client.delete_collection(col.name)
        store.close_sync()


# --- small fixture documents ---------------------------------------------------------


def make_chunk(
    repository: str, file_path: str, text: str, index: int = 0, occurrence: int = 0, **extra: Any
) -> Any:
    """A Chunk with every required metadata key, its id and content_hash derived as the
    chunker derives them."""
    import hashlib

    from hetriever.chunk.chunker import chunk_id
    from hetriever.core.models import Chunk

    parts = file_path.split("/")
    metadata: dict[str, Any] = {
        "repository": repository,
        "file_path": file_path,
        "url": "/" + "/".join(parts[1:]).removesuffix(".md") + "/",
        "title": parts[-1].removesuffix(".md").replace("-", " ").title(),
        "section": parts[1] if len(parts) > 2 else "",
        "heading_context": "",
        "chunk_index": index,
        "has_code": "```" in text,
        "content_hash": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }
    metadata.update(extra)
    return Chunk(id=chunk_id(repository, file_path, text, occurrence), text=text, metadata=metadata)


def server_database_client(server: ChromaServer, database: str) -> Any:
    """An HttpClient on a fresh database of `server`, so module-scoped data stays apart from
    the default database that `make_store` empties after each test."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    admin = chromadb.AdminClient(
        ChromaSettings(
            anonymized_telemetry=False,
            chroma_api_impl="chromadb.api.fastapi.FastAPI",
            chroma_server_host=server.host,
            chroma_server_http_port=server.port,
        )
    )
    admin.create_database(database)
    return chromadb.HttpClient(
        host=server.host,
        port=server.port,
        database=database,
        settings=ChromaSettings(anonymized_telemetry=False),
    )
