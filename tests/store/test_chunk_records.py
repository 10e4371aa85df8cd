"""Chunk text kept as Chroma metadata (`hetriever/store/chunk_records.py`), against real Chroma:
nothing reaches Chroma's full-text index, every read gives the text back as before, and an
index written the older way (text as a Chroma document) reads, searches and updates the same."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import chromadb
import pytest

from hetriever.core.errors import IndexingError
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.store.chunk_records import TEXT_KEY, ChunkCollection
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import make_chunk, store_settings
from tests.support.fakes import HashEmbedder

REPO = "alpha-docs"
PAGE = "content/functions/where.md"
TEXTS = [
    "The where function filters a collection of pages by a parameter value.",
    "Use where with the eq operator to select pages whose section equals posts.",
    "Cascade passes front matter values from a section page down to its pages.",
]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def raw(tmp_path: Path) -> Any:
    client = chromadb.PersistentClient(path=str(tmp_path / "raw"))
    return client.get_or_create_collection("chunks", embedding_function=None)


def fts_rows(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path / "chroma.sqlite3") as db:
        return db.execute("SELECT count(*) FROM embedding_fulltext_search").fetchone()[0]


def test_written_text_is_metadata_and_reads_back_as_documents(raw, tmp_path: Path) -> None:
    col = ChunkCollection(raw)
    col.upsert(
        ids=["a", "b"],
        embeddings=[[1.0, 0.0], [0.0, 1.0]],
        documents=TEXTS[:2],
        metadatas=[{"file_path": PAGE}, {"file_path": PAGE}],
    )
    stored = raw.get(ids=["a"], include=["documents", "metadatas"])
    assert stored["documents"] == [None]  # nothing for Chroma's full-text index
    assert stored["metadatas"][0][TEXT_KEY] == TEXTS[0]
    assert fts_rows(tmp_path / "raw") == 0

    got = col.get(ids=["a", "b"], include=["documents", "metadatas"])
    assert got["documents"] == TEXTS[:2]
    assert got["metadatas"] == [{"file_path": PAGE}, {"file_path": PAGE}]
    assert col.get(ids=["a"], include=["documents"])["metadatas"] is None
    assert col.get(ids=["a"], include=["metadatas"])["documents"] is None
    assert col.get(ids=["a"])["documents"] == TEXTS[:1]  # Chroma's default include

    hits = col.query(query_embeddings=[[1.0, 0.0]], n_results=2)
    assert hits["ids"] == [["a", "b"]]
    assert hits["documents"] == [TEXTS[:2]] and hits["distances"][0][0] == pytest.approx(0)
    assert all(TEXT_KEY not in m for m in hits["metadatas"][0])
    bare = col.query(query_embeddings=[[1.0, 0.0]], n_results=1, include=["distances"])
    assert bare["documents"] is None and bare["metadatas"] is None


def test_a_metadata_update_keeps_the_text(raw) -> None:
    col = ChunkCollection(raw)
    col.add(
        ids=["a"],
        embeddings=[[1.0, 0.0]],
        documents=TEXTS[:1],
        metadatas=[{"file_path": PAGE, "title": "where"}],
    )
    col.update(ids=["a"], metadatas=[{"title": "Where", "weight": None}])
    got = col.get(ids=["a"])
    assert got["documents"] == TEXTS[:1]
    assert got["metadatas"] == [{"file_path": PAGE, "title": "Where"}]


def test_a_record_written_the_older_way_reads_its_document(raw) -> None:
    raw.add(
        ids=["old"], embeddings=[[1.0, 0.0]], documents=[TEXTS[0]], metadatas=[{"file_path": PAGE}]
    )
    col = ChunkCollection(raw)
    assert col.get(ids=["old"])["documents"] == [TEXTS[0]]
    # rewritten: the new text wins over the document Chroma still keeps
    col.upsert(
        ids=["old"], embeddings=[[1.0, 0.0]], documents=[TEXTS[1]], metadatas=[{"file_path": PAGE}]
    )
    assert col.get(ids=["old"])["documents"] == [TEXTS[1]]
    assert col.query(query_embeddings=[[1.0, 0.0]], n_results=1)["documents"] == [[TEXTS[1]]]


def _store(tmp_path: Path) -> Store:
    return Store(store_settings(tmp_path), embedder=HashEmbedder())


def test_an_index_written_the_older_way_searches_and_updates_without_rewrites(
    tmp_path: Path,
) -> None:
    """An index from before this layout: chunk texts as Chroma documents, none in metadata."""
    store = _store(tmp_path)
    chunks = [make_chunk(REPO, PAGE, t, index=i) for i, t in enumerate(TEXTS)]
    run(store.upsert_file_chunks(REPO, PAGE, chunks))
    col = store.collection(REPO)
    got = col.raw.get(include=["documents", "metadatas", "embeddings"])
    metas = [{k: v for k, v in m.items() if k != TEXT_KEY} for m in got["metadatas"]]
    col.raw.delete(ids=got["ids"])
    col.raw.add(
        ids=got["ids"],
        embeddings=got["embeddings"],
        metadatas=metas,
        documents=[m[TEXT_KEY] for m in got["metadatas"]],
    )

    found = hybrid_search(
        store,
        SearchRequest("section page cascade front matter", top_k=3, exact=False, group_by="chunk"),
    )
    assert found.matches[0].content == TEXTS[2]
    again = run(store.upsert_file_chunks(REPO, PAGE, chunks))
    assert (again.written, again.reused) == (0, 3)  # the older records are left as they are
    edited = [
        *chunks[:2],
        make_chunk(REPO, PAGE, "Cascade reaches every descendant page.", index=2),
    ]
    changed = run(store.upsert_file_chunks(REPO, PAGE, edited))
    assert (changed.written, changed.reused) == (1, 2)
    texts = dict(zip(*(col.get(include=["documents"])[k] for k in ("ids", "documents"))))
    assert sorted(texts.values()) == sorted(c.text for c in edited)
    assert store.bm25(REPO).get(edited[2].id)[0] == edited[2].text


def test_metadata_may_not_use_the_text_key(tmp_path: Path) -> None:
    store = _store(tmp_path)
    chunk = make_chunk(REPO, PAGE, TEXTS[0], index=0)
    chunk.metadata[TEXT_KEY] = "something else"
    with pytest.raises(IndexingError, match="holds the chunk's text"):
        run(store.upsert_file_chunks(REPO, PAGE, [chunk]))
