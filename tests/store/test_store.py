"""Store against real Chroma (embedded, and a `chroma run` server) and the
real MiniLM embedder."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hetriever.core.errors import (
    BackendConnectionError,
    ConfigurationError,
    EmbeddingError,
    IndexingError,
    InvalidCollectionNameError,
    KnowledgeStoreError,
    WriterLockedError,
)
from hetriever.core.names import validate_collection_name
from hetriever.store.knowledge_store import Store, clear_store_cache, get_knowledge_store
from hetriever.store.store_types import KnowledgeStore
from hetriever.store.views import HNSW_SYNC_THRESHOLD
from tests.support.chroma_fixtures import free_port, make_chunk, store_settings
from tests.support.flow_support import stored

REPO = "alpha-docs"
WHERE = "content/functions/where.md"
INSTALL = "content/install/linux.md"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def where_chunks(texts: list[str], **extra: Any) -> list:
    return [make_chunk(REPO, WHERE, t, index=i, **extra) for i, t in enumerate(texts)]


V1 = [
    "The where function filters a collection of pages by a parameter value.",
    "Use where with the eq operator to select pages whose section equals posts.",
    "Where accepts the in operator to match any of several values.",
]


def chroma_ids(store: Store, collection: str, file_path: str | None = None) -> set[str]:
    col = store.chroma.client.get_collection(
        store.physical_name(collection), embedding_function=None
    )
    got = col.get(where={"file_path": file_path} if file_path else None, include=[])
    return set(got["ids"])


# --- writes ---------------------------------------------------------------------------


def test_store_satisfies_protocol(make_store) -> None:
    assert isinstance(make_store(), KnowledgeStore)


def test_upsert_file_chunks_writes_both_indexes_in_batches(make_store, minilm_embedder) -> None:
    store = make_store(batch_size=2)  # 5 chunks -> 3 Chroma writes
    chunks = where_chunks(
        V1
        + [
            "Where also takes a nested key like Params.color.",
            "The default operator of where is equality.",
        ]
    )
    before = minilm_embedder.texts_embedded
    result = run(store.upsert_file_chunks(REPO, WHERE, chunks))
    assert (result.written, result.reused, result.deleted) == (5, 0, 0)
    assert minilm_embedder.texts_embedded - before == 5
    assert result.embedding_seconds > 0
    assert run(store.count(REPO)) == 5
    assert set(store.bm25(REPO).ids()) == {c.id for c in chunks}
    doc = run(store.get_by_id(chunks[1].id))
    assert doc is not None and doc.content == chunks[1].text
    assert doc.metadata["chunk_index"] == 1 and doc.metadata["repository"] == REPO
    meta = run(store.get_collection_metadata(REPO))
    assert meta["embedding_dimensions"] == 384
    assert meta["embedding_model"] == minilm_embedder.name
    assert meta["schema_version"] == 1
    assert run(store.list_files(REPO)) == [WHERE]


def test_duplicate_ids_in_one_write_are_rejected(make_store) -> None:
    store = make_store()
    chunk = where_chunks(V1[:1])[0]
    with pytest.raises(IndexingError, match="duplicate id"):
        run(store.upsert_file_chunks(REPO, WHERE, [chunk, chunk]))
    assert run(store.count(REPO)) == 0


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_content_is_rejected(make_store, text: str) -> None:
    store = make_store()
    bad = make_chunk(REPO, WHERE, text)
    with pytest.raises(IndexingError, match="empty content"):
        run(store.upsert_file_chunks(REPO, WHERE, [where_chunks(V1[:1])[0], bad]))
    assert run(store.count(REPO)) == 0


def test_invalid_metadata_and_foreign_repository_are_rejected(make_store) -> None:
    store = make_store()
    with pytest.raises(IndexingError, match="metadata Chroma rejects"):
        run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1[:1], tags=[])))
    with pytest.raises(IndexingError, match="repository"):
        run(store.upsert_file_chunks(REPO, WHERE, [make_chunk("beta-docs", WHERE, V1[0])]))
    with pytest.raises(IndexingError, match="content_hash"):
        run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1[:1], content_hash="0" * 64)))
    assert run(store.count(REPO)) == 0


def test_reindex_embeds_only_changed_chunks_and_removes_vanished(
    make_store, minilm_embedder
) -> None:
    store = make_store(batch_size=2)
    v1 = where_chunks(V1, tags=["functions", "filtering"])
    run(store.upsert_file_chunks(REPO, WHERE, v1))
    other = make_chunk(REPO, INSTALL, "Install Hugo on Linux with the snap package.")
    run(store.upsert_file_chunks(REPO, INSTALL, [other]))

    # v2: the first chunk is unchanged but moved (new chunk_index, tags dropped), the second
    # is edited, the third is gone, a new one is added.
    kept = make_chunk(REPO, WHERE, V1[0], index=1)
    edited = make_chunk(REPO, WHERE, V1[1].replace("posts", "articles"), index=0)
    added = make_chunk(REPO, WHERE, "Where compares dates with the lt and gt operators.", index=2)
    before = minilm_embedder.texts_embedded
    result = run(store.upsert_file_chunks(REPO, WHERE, [edited, kept, added]))
    assert minilm_embedder.texts_embedded - before == 2
    assert (result.written, result.reused, result.deleted) == (2, 1, 2)

    expected = {kept.id, edited.id, added.id}
    assert kept.id == v1[0].id
    assert chroma_ids(store, REPO, WHERE) == expected
    assert set(store.bm25(REPO).ids()) == expected | {other.id}
    moved = run(store.get_by_id(kept.id))
    assert moved.metadata["chunk_index"] == 1
    assert "tags" not in moved.metadata  # removed keys do not linger (Chroma merges metadata)
    assert run(store.get_by_id(v1[2].id)) is None

    # Same content again: nothing is embedded, nothing changes.
    before = minilm_embedder.texts_embedded
    again = run(store.upsert_file_chunks(REPO, WHERE, [edited, kept, added]))
    assert (again.written, again.reused, again.deleted) == (0, 3, 0)
    assert minilm_embedder.texts_embedded == before


def test_empty_chunk_list_removes_the_file(make_store) -> None:
    store = make_store()
    run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1)))
    result = run(store.upsert_file_chunks(REPO, WHERE, []))
    assert result.deleted == 3 and run(store.count(REPO)) == 0
    assert store.bm25(REPO).count() == 0


def test_delete_file_removes_only_that_file(make_store) -> None:
    store = make_store()
    run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1)))
    other = make_chunk(REPO, INSTALL, "Install Hugo on Linux with the snap package.")
    run(store.upsert_file_chunks(REPO, INSTALL, [other]))
    assert run(store.delete_file(REPO, WHERE)) == 3
    assert run(store.delete_file(REPO, WHERE)) == 0
    assert chroma_ids(store, REPO) == {other.id}
    assert set(store.bm25(REPO).ids()) == {other.id}
    assert run(store.list_files(REPO)) == [INSTALL]
    assert run(store.delete_file("never-indexed", WHERE)) == 0


def test_delete_files_removes_several_files_and_their_stray_bm25_rows(make_store) -> None:
    store = make_store()
    run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1)))
    paths = [f"content/docs/gone-{i}.md" for i in range(3)] + [INSTALL]
    for path in paths:
        run(store.upsert_file_chunks(REPO, path, [make_chunk(REPO, path, f"Text of {path}.")]))
    # A BM25 row Chroma never had (a crash between the two writes of an earlier run).
    stray = make_chunk(REPO, paths[0], "Left in BM25 alone.")
    store.bm25(REPO).upsert([stray.id], [stray.text], [stray.metadata])
    assert run(store.delete_files(REPO, paths + ["content/never.md"])) == 4
    assert chroma_ids(store, REPO) == {c.id for c in where_chunks(V1)}
    assert set(store.bm25(REPO).ids()) == {c.id for c in where_chunks(V1)}
    assert run(store.list_files(REPO)) == [WHERE]
    assert run(store.delete_files(REPO, [])) == 0
    assert run(store.delete_files("never-indexed", [WHERE])) == 0


def test_delete_collection_returns_count_and_removes_bm25(make_store) -> None:
    store = make_store()
    run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1)))
    run(
        store.upsert_file_chunks(
            "beta-docs",
            "content/a.md",
            [make_chunk("beta-docs", "content/a.md", "Collector receivers.")],
        )
    )
    bm25_file = store.views.bm25_path(REPO)
    assert bm25_file.exists()
    assert run(store.delete_collection(REPO)) == 3
    assert not bm25_file.exists()
    assert [c.name for c in run(store.list_collections())] == ["beta-docs"]
    assert run(store.get_collection_info(REPO)) is None
    assert run(store.count(REPO)) == 0
    # Indexing again starts from an empty BM25 index.
    run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1[:1])))
    assert store.bm25(REPO).count() == 1 and run(store.count(REPO)) == 1


def test_collection_metadata_merges(make_store) -> None:
    store = make_store()
    assert run(store.get_collection_metadata(REPO)) == {}
    info = run(store.ensure_collection(REPO))
    assert info.count == 0 and info.metadata["total_chunks"] == 0
    run(store.update_collection_metadata(REPO, commit_hash="abc123", index_status="indexing"))
    run(store.update_collection_metadata(REPO, total_chunks=7, index_status="complete"))
    meta = run(store.get_collection_metadata(REPO))
    assert meta["commit_hash"] == "abc123" and meta["total_chunks"] == 7
    assert meta["index_status"] == "complete" and meta["embedding_dimensions"] == 384
    with pytest.raises(KnowledgeStoreError):
        run(store.update_collection_metadata("missing-docs", commit_hash="x"))


def test_index_state_is_recorded_in_the_catalog_only(make_store) -> None:
    store = make_store()
    physical = run(store.ensure_collection(REPO)).physical
    run(
        store.update_collection_metadata(
            REPO, commit_hash="abc123", index_status="complete", total_chunks=3, hnsw_note="kept"
        )
    )
    assert store.catalog.index_state(physical) == {
        "commit_hash": "abc123",
        "index_status": "complete",
        "total_chunks": 3,
    }
    chroma_meta = store.chroma.client.get_collection(physical).metadata
    assert "commit_hash" not in chroma_meta and "index_status" not in chroma_meta
    assert chroma_meta["hnsw_note"] == "kept"  # other keys stay Chroma's
    run(store.update_collection_metadata(REPO, hnsw_note=None))
    assert "hnsw_note" not in run(store.get_collection_metadata(REPO))


def test_an_older_index_keeps_its_commit_and_moves_it_to_the_catalog(make_store) -> None:
    store = make_store()
    physical = run(store.ensure_collection(REPO)).physical
    col = store.chroma.client.get_collection(physical)
    # As an index made before the catalog kept the state: only Chroma's metadata has it.
    col.modify(metadata={**col.metadata, "commit_hash": "old123", "index_status": "complete"})
    store.close_sync()
    reopened = make_store()
    meta = run(reopened.get_collection_metadata(REPO))
    assert (meta["commit_hash"], meta["index_status"]) == ("old123", "complete")
    run(reopened.update_collection_metadata(REPO, index_status="indexing"))
    assert reopened.catalog.index_state(physical) == {
        "commit_hash": "old123",
        "index_status": "indexing",
    }
    assert "commit_hash" not in reopened.chroma.client.get_collection(physical).metadata


def test_single_document_api(make_store, minilm_embedder) -> None:
    store = make_store()
    meta = {"repository": REPO, "file_path": "content/notes.md", "title": "Notes"}
    assert run(store.index_document("note-1", "Shortcodes extend Markdown.", meta)) is True
    doc = run(store.get_by_id("note-1"))
    assert doc.content == "Shortcodes extend Markdown."
    assert len(doc.metadata["content_hash"]) == 64
    before = minilm_embedder.texts_embedded
    run(store.index_document("note-1", "Shortcodes extend Markdown.", {**meta, "title": "N"}))
    assert minilm_embedder.texts_embedded == before  # same text: metadata-only update
    assert run(store.get_by_id("note-1")).metadata["title"] == "N"
    assert run(store.delete("note-1")) is True
    assert run(store.delete("note-1")) is False
    assert run(store.get_by_id("note-1")) is None
    with pytest.raises(IndexingError, match="repository"):
        run(store.index_document("note-2", "text", {"title": "no repository"}))
    assert run(store.health_check()) is True


def test_repair_brings_bm25_back_to_chroma(make_store) -> None:
    store = make_store()
    chunks = where_chunks(V1)
    run(store.upsert_file_chunks(REPO, WHERE, chunks))
    index = store.bm25(REPO)
    index.delete([chunks[0].id, chunks[2].id])
    stray = make_chunk(REPO, "content/old.md", "A page deleted while BM25 was not updated.")
    index.upsert([stray.id], [stray.text], [dict(stray.metadata)])
    result = run(store.repair(REPO))
    assert (result.added, result.removed) == (2, 1)
    assert set(index.ids()) == {c.id for c in chunks}
    assert run(store.repair(REPO)).changed is False


def test_repair_rewrites_bm25_rows_whose_metadata_or_text_differs(make_store) -> None:
    # A window killed between its Chroma write and its BM25 commit: Chroma has the chunks'
    # new metadata, BM25 the old, and the ids alone agree.
    store = make_store()
    chunks = where_chunks(V1, weight=1)
    run(store.upsert_file_chunks(REPO, WHERE, chunks))
    index = store.bm25(REPO)
    text, meta = index.get(chunks[0].id)
    index.upsert([chunks[0].id], [text], [{**meta, "weight": 99, "aliases": ["/old/"]}])
    index.upsert([chunks[1].id], ["an older text"], [index.get(chunks[1].id)[1]])
    result = run(store.repair(REPO))
    assert (result.added, result.removed, result.updated) == (0, 0, 2)
    assert index.get(chunks[0].id) == (text, meta)
    assert index.get(chunks[1].id)[0] == chunks[1].text
    assert run(store.repair(REPO)).changed is False  # a clean index: nothing to rewrite


def test_rewriting_a_file_heals_a_stale_bm25_row_of_an_unchanged_chunk(make_store) -> None:
    # The write path's own heal: a chunk unchanged in Chroma whose BM25 row is another
    # version of it is written to BM25 again (it only re-added missing rows).
    store = make_store()
    chunks = where_chunks(V1, weight=1)
    run(store.upsert_file_chunks(REPO, WHERE, chunks))
    index = store.bm25(REPO)
    good = index.get(chunks[0].id)
    index.upsert([chunks[0].id], [good[0]], [{**good[1], "weight": 99}])
    result = run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1, weight=1)))
    assert result.written == 0 and result.reused == 3
    assert index.get(chunks[0].id) == good


def test_list_metadata_of_a_dropped_collection_never_reaches_another(
    make_store, chroma_backend
) -> None:
    # Embedded Chroma 1.5 keeps list values by row id and leaves them when a collection is
    # dropped; the next records written reuse those ids.
    if chroma_backend == "server":
        pytest.skip("a `chroma run` server's file is its operator's (docs/reliability.md)")
    store = make_store()
    tagged = [
        make_chunk("beta-docs", f"content/p{i}.md", f"Private page {i}.", aliases=[f"/secret-{i}/"])
        for i in range(3)
    ]
    run(store.upsert_files("beta-docs", {c.metadata["file_path"]: [c] for c in tagged}))
    run(store.delete_collection("beta-docs"))
    run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1)))
    col = store.chroma.client.get_collection(store.physical_name(REPO), embedding_function=None)
    metas = col.get(include=["metadatas"])["metadatas"]
    assert len(metas) == 3 and not any("aliases" in dict(m or {}) for m in metas), metas


def test_write_retries_transient_errors(
    make_store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    monkeypatch.setenv("HETRIEVER_FAULTS_STATE", str(tmp_path / "faults"))
    monkeypatch.setenv("HETRIEVER_FAULTS", "chroma_upsert:*:2")
    result = run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1)))
    assert result.written == 3 and run(store.count(REPO)) == 3
    monkeypatch.setenv("HETRIEVER_FAULTS", "chroma_delete:*:always")
    with pytest.raises(KnowledgeStoreError, match="after 4 attempts"):
        run(store.delete_file(REPO, WHERE))


def test_dimension_mismatch_is_refused(make_store, minilm_embedder) -> None:
    store = make_store()
    run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1)))
    other = make_store(embedder=ProjectedEmbedder(minilm_embedder, 64))
    with pytest.raises(EmbeddingError, match="re-index"):
        run(other.upsert_file_chunks(REPO, WHERE, where_chunks(V1 + ["More."])))
    with pytest.raises(EmbeddingError, match="384-dimensional"):
        run(other.ensure_collection(REPO))
    assert run(store.count(REPO)) == 3


class ProjectedEmbedder:
    """A different, real model: MiniLM vectors cut to their first `dims` components."""

    def __init__(self, base: Any, dims: int) -> None:
        self.base, self.dimensions = base, dims
        self.name = f"minilm-first-{dims}"
        self.calls = self.texts_embedded = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        v = self.base.embed(texts)[:, : self.dimensions]
        self.calls, self.texts_embedded = self.calls + 1, self.texts_embedded + len(texts)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


class BM25LockProbe:
    """The real model; before each batch it checks whether the BM25 file can be write-locked."""

    def __init__(self, base: Any, bm25_file: Path) -> None:
        self.base, self.bm25_file = base, bm25_file
        self.name, self.dimensions = base.name, base.dimensions
        self.locked_while_embedding: list[bool] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        if self.bm25_file.exists():
            conn = sqlite3.connect(self.bm25_file, timeout=0, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
                self.locked_while_embedding.append(False)
            except sqlite3.OperationalError:  # "database is locked"
                self.locked_while_embedding.append(True)
            finally:
                conn.close()
        return self.base.embed(texts)


def test_embedding_does_not_hold_the_bm25_write_lock(make_store, minilm_embedder) -> None:
    # Embedding a write window can take many seconds; meanwhile other processes must be able
    # to open and write the BM25 file (a searcher starting, a purge of another file).
    store = make_store()
    run(store.upsert_file_chunks(REPO, WHERE, where_chunks(["first version of the page"])))
    probe = BM25LockProbe(minilm_embedder, store.views.bm25_path(REPO))
    probing = make_store(embedder=probe)
    run(
        probing.upsert_files(
            REPO,
            {
                WHERE: where_chunks(["second version of the page"]),
                "content/other.md": [make_chunk(REPO, "content/other.md", "another page")],
            },
        )
    )
    assert probe.locked_while_embedding == [False]
    assert sorted(t for _, t in stored(probing, REPO).values()) == [
        "another page",
        "second version of the page",
    ]


@pytest.mark.parametrize(
    "name", ["ab", "Alpha-docs", "-alpha", "alpha_docs", "a" * 64, "alpha..docs", "192.168.0.1"]
)
def test_invalid_collection_names(make_store, name: str) -> None:
    store = make_store()
    with pytest.raises(InvalidCollectionNameError):
        run(store.upsert_file_chunks(name, WHERE, []))
    with pytest.raises(InvalidCollectionNameError):
        validate_collection_name(name)


# --- locking and connections ------------------------------------------------------------

HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_writer_lock_held_by_another_process(make_store) -> None:
    store = make_store(lock_timeout=0.3)
    lock = store.settings.resolved_state_dir / "locks" / f"{REPO}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(WriterLockedError, match="another process"):
            run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1)))
    finally:
        holder.kill()
        holder.wait()
    # Released with the process: writing works now.
    assert run(store.upsert_file_chunks(REPO, WHERE, where_chunks(V1))).written == 3


def test_unreachable_server_is_a_connection_error(tmp_path: Path, minilm_embedder) -> None:
    settings = store_settings(tmp_path, chroma_host="127.0.0.1", chroma_port=free_port())
    with pytest.raises(BackendConnectionError) as info:
        Store(settings, embedder=minilm_embedder)
    assert f"127.0.0.1:{settings.chroma_port}" in str(info.value)
    assert "chroma run" in str(info.value)


def test_unwritable_path_is_a_connection_error(tmp_path: Path, minilm_embedder) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    settings = store_settings(tmp_path, chroma_path=blocker / "chroma")
    with pytest.raises(BackendConnectionError, match="HETRIEVER_CHROMA_PATH"):
        Store(settings, embedder=minilm_embedder)


def test_get_knowledge_store_reads_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HETRIEVER_CHROMA_PATH", str(tmp_path / "env-chroma"))
    monkeypatch.setenv("USE_HYBRID_SEARCH", "no")
    try:
        store = get_knowledge_store()
        assert store is get_knowledge_store()
        assert store.settings.chroma_path == tmp_path / "env-chroma"
        assert store.views.search_mode() == "dense"
        monkeypatch.setenv("USE_HYBRID_SEARCH", "yes")
        assert get_knowledge_store().views.search_mode() == "hybrid"
        monkeypatch.setenv("HETRIEVER_BATCH_SIZE", "lots")
        with pytest.raises(ConfigurationError):
            get_knowledge_store()
    finally:
        clear_store_cache()


def test_async_context_manager(make_store) -> None:
    async def go() -> int:
        async with make_store() as store:
            await store.upsert_file_chunks(REPO, WHERE, where_chunks(V1[:2]))
            return await store.count(REPO)

    assert run(go()) == 2


def test_an_existing_collection_gets_the_configured_search_ef(make_store, chroma_backend) -> None:
    if chroma_backend == "memory":
        pytest.skip("HNSW is Chroma's own; the in-memory client searches exactly")
    # HNSW's ef_search decides how exact dense search is (bench_recall.py); a collection made
    # with another value is changed in place when a store opens it, and still answers.
    old = make_store(hnsw_search_ef=10)
    run(old.upsert_file_chunks(REPO, WHERE, where_chunks(V1)))
    physical = old.physical_name(REPO)

    def ef(store: Any) -> int:
        col = store.chroma.client.get_collection(physical, embedding_function=None)
        return int(col.configuration_json["hnsw"]["ef_search"])

    assert ef(old) == 10
    # ... as is the sync threshold of a collection made with Chroma's default
    old.chroma.client.get_collection(physical, embedding_function=None).modify(
        configuration={"hnsw": {"sync_threshold": 1000}}
    )
    new = make_store(hnsw_search_ef=300)
    assert run(new.count(REPO)) == 3
    assert ef(new) == 300
    col = new.chroma.client.get_collection(physical, embedding_function=None)
    assert col.configuration_json["hnsw"]["sync_threshold"] == HNSW_SYNC_THRESHOLD
    ids = {c.id for c in where_chunks(V1)}
    found = col.query(query_embeddings=[new.embedder.embed(["where clause"])[0]], n_results=3)
    assert set(found["ids"][0]) == ids


_NEAREST = """
import json, sys
import chromadb, numpy as np
col = chromadb.PersistentClient(path=sys.argv[1]).get_collection(sys.argv[2])
print(json.dumps(col.query(query_embeddings=np.load(sys.argv[3]), n_results=20, include=[])["ids"]))
"""


@pytest.mark.slow
def test_dense_neighbours_are_the_same_in_every_process(tmp_path, minilm_embedder) -> None:
    # Chroma replays the vectors it has not yet written to its HNSW graph into the graph each
    # time a process loads the collection, in another order each time; past its default sync
    # threshold (1,000) three processes gave three answers (HNSW_SYNC_THRESHOLD).
    store = Store(store_settings(tmp_path, hnsw_search_ef=50), embedder=minilm_embedder)
    col = store.collection(REPO, create=True)
    vectors = np.random.default_rng(0).standard_normal((1500, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for start in range(0, len(vectors), 1024):  # write windows, as an ingest writes them
        col.add(
            ids=[f"c{i}" for i in range(start, min(len(vectors), start + 1024))],
            embeddings=vectors[start : start + 1024],
        )
    physical = store.physical_name(REPO)
    store.close_sync()
    np.save(tmp_path / "queries.npy", vectors[:50])
    answers = {
        subprocess.run(
            [
                sys.executable,
                "-c",
                _NEAREST,
                str(tmp_path / "chroma"),
                physical,
                str(tmp_path / "queries.npy"),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        for _ in range(3)
    }
    assert len(answers) == 1 and len(json.loads(answers.pop())[0]) == 20
