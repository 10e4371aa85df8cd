"""Each peer of the store on its own, over real Chroma in tmp_path: the shared Chroma handle,
the views, reads, writes, BM25 repair and the replica, each built from the parts it
receives (no `Store`), and the rule that no store class inherits another."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest

import hetriever.store
from hetriever.core.config import Settings
from hetriever.store.chroma_access import ChromaAccess
from hetriever.store.reads import StoreReads
from hetriever.store.repair import StoreRepair
from hetriever.store.replica import MANIFEST, Replica
from hetriever.store.views import RepositoryViews
from hetriever.store.writes import StoreWrites
from tests.support.chroma_fixtures import make_chunk, store_settings
from tests.support.fakes import HashEmbedder

REPO = "peer-docs"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return store_settings(tmp_path, run_lock_timeout=2.0)


@pytest.fixture
def views(settings: Settings) -> Any:
    views = RepositoryViews(ChromaAccess(settings, lock_timeout=2.0), embedder=HashEmbedder())
    yield views
    views.close()


def _chunks(*texts: str, path: str = "content/guide/a.md") -> list[Any]:
    return [make_chunk(REPO, path, text, index=i) for i, text in enumerate(texts)]


def _put_in_chroma(views: Any, chunks: list[Any]) -> Any:
    """Chunks written to Chroma alone (as a crash between the two writes leaves them)."""
    col = views.collection(REPO, create=True)
    vectors = HashEmbedder().embed([c.text for c in chunks])
    col.upsert(
        ids=[c.id for c in chunks],
        embeddings=vectors,
        documents=[c.text for c in chunks],
        metadatas=[dict(c.metadata) for c in chunks],
    )
    return col


def test_the_chroma_handle_pages_records_and_reopens(settings: Settings) -> None:
    chroma = ChromaAccess(settings, lock_timeout=2.0)
    col = chroma.call(
        "create_collection",
        lambda: chroma.client.get_or_create_collection("plain_v1", embedding_function=None),
    )
    ids = [f"id-{i:03d}" for i in range(7)]
    col.add(
        ids=ids,
        embeddings=np.eye(7, 8, dtype=np.float32),
        documents=ids,
        metadatas=[{"n": i} for i in range(7)],
    )
    small = ChromaAccess(settings.replace(read_batch_size=3), lock_timeout=2.0)
    pages = list(small.record_pages(small.open_collection("plain_v1"), ["metadatas"]))
    assert [len(p["ids"]) for p in pages] == [3, 3, 1]
    assert sorted(i for p in pages for i in p["ids"]) == ids
    assert chroma.ids_where(col, {"n": 4}) == ["id-004"]
    assert chroma.collection_names() == ["plain_v1"]
    chroma.collections["plain_v1"], chroma.seen["plain_v1"] = col, 3
    before = chroma.client
    chroma.reopen("plain_v1")  # a fresh system for the path: new client, no stale handles
    assert chroma.client is not before and not chroma.collections and not chroma.seen
    assert chroma.open_collection("plain_v1").count() == 7
    assert chroma.health_check() is True


def test_views_name_a_generation_and_hold_its_indexes(views: Any, settings: Settings) -> None:
    assert views.physical_name(REPO) is None and views.collection(REPO) is None
    col = views.collection(REPO, create=True)
    assert views.physical_name(REPO) == f"{REPO}_v1" == col.name
    assert views.repository_names() == [REPO]
    assert (
        views.bm25_file(f"{REPO}_v1") == settings.resolved_state_dir / "bm25" / f"{REPO}_v1.sqlite"
    )
    info = views.info(REPO)
    assert info is not None and info.physical == f"{REPO}_v1" and info.count == 0
    assert info.metadata["embedding_model"] == "hash-bow-384"
    views.bm25(REPO)  # opened and held until released
    assert views.chroma.collections and views._bm25
    views.release(REPO)
    assert not views.chroma.collections and not views._bm25
    pinned = RepositoryViews(
        views.chroma, embedder=HashEmbedder(), catalog=views.catalog, pins={REPO: f"{REPO}_v9"}
    )
    assert pinned.physical_name(REPO) == f"{REPO}_v9"


def test_views_call_the_listing_hook_before_they_list(views: Any) -> None:
    calls: list[str] = []
    views.before_listing = lambda: calls.append("listed")
    views.repository_names()
    assert calls == ["listed"]


def test_reads_see_what_chroma_holds(views: Any) -> None:
    chunks = _chunks(
        "Menus are defined in the site configuration.", "Taxonomies group related content."
    )
    _put_in_chroma(views, chunks + _chunks("A second file.", path="content/b.md"))
    reads = StoreReads(views)
    assert reads.count(REPO) == 3
    assert reads.list_files(REPO) == ["content/b.md", "content/guide/a.md"]
    assert reads.file_chunk_counts(REPO) == {"content/guide/a.md": 2, "content/b.md": 1}
    got = reads.chunks_where(REPO, {"file_path": "content/guide/a.md"})
    assert sorted(d.doc_id for d in got) == sorted(c.id for c in chunks)
    doc = reads.get_by_id(chunks[1].id)
    assert doc is not None and doc.content == chunks[1].text
    assert reads.chunks_by_ids(REPO, [chunks[0].id])[0].content == chunks[0].text
    assert reads.deleted_chunks(REPO) == [] and reads.get_by_id("no-such-id") is None


def test_writes_put_chunks_in_chroma_and_bm25_and_take_them_out(views: Any) -> None:
    writes = StoreWrites(views)
    chunks = _chunks("Hugo builds sites from Markdown.", "Shortcodes extend Markdown.")
    result = writes.upsert_files(REPO, {"content/guide/a.md": chunks})
    assert (result.written, result.reused) == (2, 0)
    col = views.collection(REPO)
    assert sorted(col.get(include=[])["ids"]) == sorted(c.id for c in chunks)
    assert set(views.bm25(REPO).ids()) == {c.id for c in chunks}
    again = writes.upsert_files(REPO, {"content/guide/a.md": chunks})
    assert (again.written, again.reused) == (0, 2)  # unchanged text is not embedded again
    assert writes.soft_delete_file(REPO, "content/guide/a.md", "2026-01-01T00:00:00+00:00") == 2
    assert writes.delete_files(REPO, ["content/guide/a.md"]) == 2
    assert col.count() == 0 and views.bm25(REPO).count() == 0
    assert writes.delete_collection(REPO) == 0
    assert views.physical_name(REPO) is None and views.chroma.collection_names() == []


def test_repair_brings_bm25_in_line_with_chroma(views: Any) -> None:
    chunks = _chunks("Page bundles keep resources together.", "Archetypes are templates.")
    _put_in_chroma(views, chunks)
    index = views.bm25(REPO)
    index.upsert(["stray"], ["a row Chroma never had"], [{"file_path": "content/gone.md"}])
    repair = StoreRepair(views)
    result = repair.repair(REPO)
    assert (result.added, result.removed, result.updated) == (2, 1, 0)
    assert set(index.ids()) == {c.id for c in chunks}
    assert repair.repair(REPO).changed is False
    path = views.bm25_file(views.physical_name(REPO))
    rebuilt = repair.rebuild_bm25(REPO)  # the file set aside, the index made again from Chroma
    assert rebuilt.added == 2 and list(path.parent.glob(f"{path.name}.damaged-*"))
    assert set(views.bm25(REPO).ids()) == {c.id for c in chunks}


def test_an_embedded_replica_publishes_nothing_and_follows_nothing(views: Any) -> None:
    StoreWrites(views).upsert_files(REPO, {"content/guide/a.md": _chunks("Some text.")})
    replica = Replica(views)
    replica.publish(REPO)  # an embedded directory has no other readers
    assert MANIFEST not in views.chroma.collection_names()
    assert replica.published() == {}
    report = replica.follow(force=True)
    assert report.checked and report.repositories == [] and replica.followed_at is not None
    assert replica.follow().checked is False  # not again before follow_interval


@pytest.mark.server
def test_a_replica_copies_what_another_publishes(tmp_path: Path, chroma_server: Any) -> None:
    ingest = RepositoryViews(
        ChromaAccess(store_settings(tmp_path / "ingest", chroma_server), lock_timeout=2.0),
        embedder=HashEmbedder(),
    )
    reader_settings = store_settings(tmp_path / "reader", chroma_server, follow=True)
    reader = RepositoryViews(
        ChromaAccess(reader_settings, lock_timeout=2.0), embedder=HashEmbedder()
    )
    try:
        chunks = _chunks("Render hooks change how Markdown renders.", "Links and images.")
        StoreWrites(ingest).upsert_files(REPO, {"content/guide/a.md": chunks})
        Replica(ingest).publish(REPO)
        assert Replica(ingest).published()[REPO]["collection"] == f"{REPO}_v1"
        report = Replica(reader).follow(force=True)
        assert report.repositories == [REPO] and report.added == 2
        assert reader.catalog.active(REPO) == f"{REPO}_v1"
        assert set(reader.bm25(REPO).ids()) == {c.id for c in chunks}
    finally:
        for col in ingest.chroma.client.list_collections():
            ingest.chroma.client.delete_collection(col.name)
        ingest.close()
        reader.close()


def test_no_class_of_the_store_inherits_another() -> None:
    """The store is composed: a class of hetriever.store may subclass a Protocol, a
    dataclass base or anything outside the store, never another class of the store."""
    found: list[str] = []
    for info in pkgutil.walk_packages(hetriever.store.__path__, "hetriever.store."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for base in cls.__bases__:
                if base.__module__.startswith("hetriever.store") and Protocol not in base.__mro__:
                    found.append(f"{module.__name__}.{name}({base.__name__})")
    assert found == []
