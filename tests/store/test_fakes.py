"""The fast tier's stand-ins held to what they stand in for, then the real store, indexing and
search code run over them (no model, no Chroma directory).

`MemoryClient` must answer like embedded Chroma: the same calls on both give the same records.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings as ChromaSettings
from chromadb.errors import NotFoundError

from hetriever.discover.repositories import discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.index.run_record import STATUS_COMPLETE
from hetriever.search.hybrid import retrieve
from hetriever.search.request import SearchRequest
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.fakes import HashEmbedder, MemoryClient
from tests.support.helpers import build_sample_parent, commit_all, update_submodule, write_files

RECORDS = [
    (
        "a",
        "the where function filters a collection",
        {"section": "functions", "weight": 1, "is_deleted": False},
    ),
    ("b", "install hugo on linux", {"section": "install", "weight": 2, "is_deleted": False}),
    ("c", "where to put templates", {"section": "templates", "weight": 3, "is_deleted": True}),
    ("d", "a page without a weight", {"section": "functions", "is_deleted": False}),
]
WHERES: list[dict[str, Any] | None] = [
    None,
    {"section": "functions"},
    {"section": {"$ne": "functions"}},
    {"weight": {"$gte": 2}},
    {"weight": {"$ne": 2}},  # a record without the key: does it match?
    {"section": {"$in": ["install", "templates"]}},
    {"section": {"$nin": ["install"]}},
    {"$and": [{"is_deleted": False}, {"section": "functions"}]},
    {"$or": [{"weight": 3}, {"section": "install"}]},
]


def fill(client: Any) -> Any:
    col = client.get_or_create_collection(
        "fakes_v1",
        configuration={"hnsw": {"space": "cosine"}},
        metadata={"repository": "x"},
        embedding_function=None,
    )
    vectors = HashEmbedder().embed([text for _, text, _ in RECORDS])
    col.upsert(
        ids=[r[0] for r in RECORDS],
        embeddings=[list(map(float, v)) for v in vectors],
        documents=[r[1] for r in RECORDS],
        metadatas=[r[2] for r in RECORDS],
    )
    return col


@pytest.fixture
def both(tmp_path: Path):
    real = chromadb.PersistentClient(
        path=str(tmp_path / "chroma"), settings=ChromaSettings(anonymized_telemetry=False)
    )
    return fill(real), fill(MemoryClient())


def as_sets(got: dict) -> dict:
    return {i: (d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])}


@pytest.mark.parametrize("where", WHERES, ids=[str(w) for w in WHERES])
def test_the_memory_client_gets_what_chroma_gets(both, where) -> None:
    real, fake = both
    include = ["documents", "metadatas"]
    assert as_sets(fake.get(where=where, include=include)) == as_sets(
        real.get(where=where, include=include)
    )
    assert (
        fake.get(ids=["d", "a", "zz"], where=where, include=include)["ids"]
        == real.get(ids=["d", "a", "zz"], where=where, include=include)["ids"]
    )


@pytest.mark.parametrize("where", [None, {"section": "functions"}, {"is_deleted": False}])
def test_the_memory_client_queries_like_chroma(both, where) -> None:
    real, fake = both
    # every record at a different distance, so the order is the nearest-first one
    vector = HashEmbedder().embed(["where the function a page filters on linux"])[0].tolist()
    got = [
        c.query(
            query_embeddings=[vector],
            n_results=3,
            where=where,
            include=["documents", "metadatas", "distances"],
        )
        for c in both
    ]
    assert got[1]["ids"] == got[0]["ids"]
    assert np.allclose(got[1]["distances"][0], got[0]["distances"][0], atol=1e-5)
    assert got[1]["metadatas"] == got[0]["metadatas"]


def test_the_memory_client_writes_like_chroma(both) -> None:
    for col in both:
        col.update(ids=["a", "nope"], metadatas=[{"weight": 9, "extra": "x"}, {"weight": 1}])
        col.delete(where={"section": "install"})
        col.modify(metadata={"repository": "y"})
    real, fake = both
    include = ["documents", "metadatas"]
    assert as_sets(fake.get(include=include)) == as_sets(real.get(include=include))
    assert fake.count() == real.count() == 3
    assert fake.metadata == real.metadata
    for client in (MemoryClient(),):
        with pytest.raises(NotFoundError):
            client.get_collection("missing_v1")


def test_the_hash_embedder_keeps_the_embedder_contract() -> None:
    embedder = HashEmbedder()
    vectors = embedder.embed(
        ["where filters a collection", "where filters a collection", "install on linux", ""]
    )
    assert vectors.shape == (4, embedder.dimensions) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0)
    assert np.array_equal(vectors[0], vectors[1])  # deterministic
    assert float(vectors[0] @ vectors[2]) < float(vectors[0] @ vectors[1])
    assert embedder.calls == 1 and embedder.texts_embedded == 4
    assert embedder.embed([]).shape == (0, embedder.dimensions) and embedder.calls == 1


# --- the real store, indexing and search over the stand-ins -----------------------------


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def memory_store(tmp_path: Path):
    store = Store(store_settings(tmp_path), embedder=HashEmbedder(), client=MemoryClient())
    yield store
    store.close_sync()


def test_index_search_and_an_incremental_run_over_the_fakes(tmp_path, memory_store) -> None:
    parent, source = build_sample_parent(tmp_path)
    (repo,) = [r for r in discover_repositories(parent) if r.name == "sample-docs"]
    first = run(index_repository(repo, memory_store, memory_store.settings))
    assert first.mode == "full" and first.completed and first.files_indexed == 7
    meta = run(memory_store.get_collection_metadata("sample-docs"))
    assert meta["commit_hash"] == first.new_commit and meta["index_status"] == STATUS_COMPLETE

    hits = run(
        retrieve(
            memory_store, SearchRequest("where function returns the given collection", top_k=3)
        )
    ).matches
    assert hits and hits[0].metadata["file_path"].endswith("templates/where.md")
    assert hits[0].source in {"hybrid", "exact"}  # both retrievers (or the title) found it

    # an edit, a deletion: only those files change, and search follows
    (source / "content/docs/templates/where.md").unlink()
    write_files(
        source,
        {
            "content/docs/install/_index.md": "---\ntitle: Install\n---\n\n"
            "Install the zebra package with apt.\n"
        },
    )
    update_submodule(parent, "sample-docs", commit_all(source, "edit and delete"))
    second = run(index_repository(repo, memory_store, memory_store.settings))
    assert second.mode == "incremental" and second.completed
    assert second.files_indexed == 1 and second.files_deleted == 1
    paths = [
        h.metadata["file_path"]
        for h in run(retrieve(memory_store, SearchRequest("zebra apt", top_k=5))).matches
    ]
    assert paths and paths[0].endswith("install/_index.md")
    later = run(retrieve(memory_store, SearchRequest("where function", top_k=10))).matches
    assert not any(h.metadata["file_path"].endswith("where.md") for h in later)


def test_while_chroma_cannot_answer_bm25_hits_show_bm25s_own_copy(tmp_path, memory_store) -> None:
    from hetriever.search.candidates import _fill_documents, _Hit

    parent, _ = build_sample_parent(tmp_path)
    (repo,) = [r for r in discover_repositories(parent) if r.name == "sample-docs"]
    run(index_repository(repo, memory_store, memory_store.settings))
    (doc_id, _), *_ = memory_store.search_bm25("sample-docs").search("where function", 1)
    text, meta = memory_store.search_bm25("sample-docs").get(doc_id)
    col = memory_store.collection("sample-docs")

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("chroma is down")

    col.get = down  # the document fetch fails; BM25 still holds the chunk
    hit = _Hit(doc_id, "sample-docs")
    _fill_documents(memory_store, [hit])
    assert hit.content == text and hit.metadata == meta
