"""Soft delete, purge, forget and migrate against real git repos, embedded Chroma, BM25 and the
real model."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hetriever.core.errors import IndexingError, RepositoryNotFoundError
from hetriever.discover.repositories import discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.index.lifecycle import forget, migrate_repository, purge
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.store.catalog_records import DELETED
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import commit_all, init_repo, write_files

REPO = "life-docs"
PAGES = {
    "content/docs/otters.md": "---\ntitle: Otters\n---\n\nOtters hold hands while they sleep "
    "so they do not drift apart on the river.\n",
    "content/docs/herons.md": "---\ntitle: Herons\n---\n\nHerons stand still in shallow water "
    "and strike at fish with their long beaks.\n",
    "content/docs/beavers.md": "---\ntitle: Beavers\n---\n\nBeavers build dams of branches and "
    "mud, turning streams into quiet ponds.\n",
}


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    repo = init_repo(tmp_path / "repos" / REPO)
    write_files(repo, PAGES)
    commit_all(repo, "pages")
    return repo


def repo_of(docs: Path):
    (repo,) = discover_repositories(docs.parent)
    return repo


def open_store(tmp_path: Path, embedder, **overrides) -> Store:
    return Store(store_settings(tmp_path, **overrides), embedder=embedder)


def files_found(store, query: str, **kwargs) -> list[str]:
    result = hybrid_search(store, SearchRequest(query, top_k=10, **kwargs))
    return [m.metadata["file_path"] for m in result.matches]


def all_records(store) -> dict[str, dict]:
    col = store.chroma.client.get_collection(store.physical_name(REPO))
    got = col.get(include=["metadatas"])
    return dict(zip(got["ids"], got["metadatas"]))


def test_soft_delete_hides_keeps_and_purge_removes(docs, tmp_path, minilm_embedder) -> None:
    store = open_store(tmp_path, minilm_embedder, retention_days=30)
    try:
        run(index_repository(repo_of(docs), store, store.settings))
        assert "content/docs/otters.md" in files_found(store, "otters sleep holding hands")
        (docs / "content/docs/otters.md").unlink()
        commit_all(docs, "drop otters")
        result = run(index_repository(repo_of(docs), store, store.settings))
        # the page record and the body chunk
        assert result.files_deleted == 1 and result.chunks_deleted == 2

        # kept for audit, marked in Chroma and BM25, hidden from every search
        records = all_records(store)
        otter_ids = [i for i, m in records.items() if m["file_path"].endswith("otters.md")]
        assert len(otter_ids) == 2
        for otter_id in otter_ids:
            assert records[otter_id]["is_deleted"] is True and records[otter_id]["deleted_at"]
            assert store.bm25(REPO).get(otter_id)[1]["is_deleted"] is True
        for hybrid in (True, False):
            assert "content/docs/otters.md" not in files_found(
                store, "otters sleep holding hands", hybrid=hybrid
            )
        assert hybrid_search(
            store, SearchRequest("otters", top_k=5)
        ).matches  # the others still answer
        assert store.catalog.files(store.physical_name(REPO), DELETED)[0].path.endswith("otters.md")
        meta = run(store.get_collection_metadata(REPO))
        assert meta["total_documents"] == 2 and meta["total_chunks"] == 4

        # a purge inside the retention keeps it; one after it removes it everywhere
        assert run(purge(store)).total_chunks == 0
        later = datetime.now(UTC) + timedelta(days=31)
        report = run(purge(store, now=later))
        assert report.chunks == {REPO: 2} and report.files == {REPO: 1}
        for otter_id in otter_ids:
            assert otter_id not in all_records(store) and store.bm25(REPO).get(otter_id) is None
        assert store.catalog.files(store.physical_name(REPO), DELETED) == []
    finally:
        store.close_sync()


def test_a_restored_file_is_live_again(docs, tmp_path, minilm_embedder) -> None:
    store = open_store(tmp_path, minilm_embedder, retention_days=7)
    try:
        run(index_repository(repo_of(docs), store, store.settings))
        (docs / "content/docs/herons.md").unlink()
        commit_all(docs, "drop herons")
        run(index_repository(repo_of(docs), store, store.settings))
        write_files(docs, {"content/docs/herons.md": PAGES["content/docs/herons.md"]})
        commit_all(docs, "restore herons")
        run(index_repository(repo_of(docs), store, store.settings))
        assert not any(m.get("is_deleted") for m in all_records(store).values())
        assert "content/docs/herons.md" in files_found(store, "herons shallow water fish")
    finally:
        store.close_sync()


def test_forget_a_file_and_a_repository(docs, tmp_path, minilm_embedder) -> None:
    store = open_store(tmp_path, minilm_embedder)
    try:
        run(index_repository(repo_of(docs), store, store.settings))
        report = run(forget(store, REPO, "content/docs/beavers.md"))
        assert (report.chunks, report.bm25_rows) == (2, 2)  # page record and body
        assert report.catalog_rows == {"files": 1}
        assert "content/docs/beavers.md" not in files_found(store, "beavers build dams")
        assert len(all_records(store)) == 4

        physical = store.physical_name(REPO)
        bm25_file = store.views.bm25_file(physical)
        report = run(forget(store, REPO))
        assert report.chunks == 4 and report.bm25_rows == 4 and report.collections == [physical]
        assert report.catalog_rows["files"] == 2 and report.catalog_rows["repositories"] == 1
        assert store.chroma.collection_names() == [] and not bm25_file.exists()
        assert store.catalog.repository(REPO) is None and store.repository_names() == []
        assert hybrid_search(store, SearchRequest("otters", top_k=5)).matches == []
        with pytest.raises(RepositoryNotFoundError):
            run(forget(store, REPO))
    finally:
        store.close_sync()


def test_migrate_builds_beside_switches_atomically_and_drops(tmp_path, minilm_embedder) -> None:
    repo_dir = init_repo(tmp_path / "repos" / REPO)
    # Long pages, so that a smaller chunk budget really changes the chunks (and their ids).
    body = " ".join(
        f"Sentence {i} about otters, herons and beavers living by the river." for i in range(40)
    )
    write_files(
        repo_dir,
        {
            f"content/docs/page-{n}.md": f"---\ntitle: Page {n}\n---\n\n{body} "
            f"Page {n} is unique.\n"
            for n in range(12)
        },
    )
    commit_all(repo_dir, "pages")
    old_store = open_store(tmp_path, minilm_embedder)
    new_store = Store(
        store_settings(tmp_path, chunk_tokens=64, min_chunk_tokens=8),
        embedder=minilm_embedder,
        client=old_store.chroma.client,
    )
    try:
        run(index_repository(repo_of(repo_dir), old_store, old_store.settings))
        old_name = old_store.physical_name(REPO)
        old_ids = set(all_records(old_store))

        results: list[set[str]] = []
        errors: list[str] = []
        stop = threading.Event()

        def searcher() -> None:
            while not stop.is_set():
                try:
                    found = hybrid_search(
                        old_store, SearchRequest("otters herons beavers river", top_k=5)
                    )
                    results.append({m.doc_id for m in found.matches})
                except Exception as exc:  # noqa: BLE001 - any error is a finding
                    errors.append(f"{type(exc).__name__}: {exc}")

        thread = threading.Thread(target=searcher, daemon=True)
        thread.start()
        try:
            report = run(migrate_repository(repo_of(repo_dir), new_store, new_store.settings))
            during = len(results)
            # keep searching a little after the switch
            deadline = len(results) + 5
            while len(results) < deadline and thread.is_alive():
                stop.wait(0.05)
        finally:
            stop.set()
            thread.join(timeout=60)

        assert report.migrated and report.old_collection == old_name
        new_name = report.new_collection
        assert new_name == f"{REPO}_v2" and old_store.physical_name(REPO) == new_name
        new_ids = set(all_records(new_store))
        # Page records do not depend on the chunk budget: only body chunks change ids.
        records = {i for i, m in all_records(new_store).items() if m.get("page_record")}
        assert len(records) == 12 and records <= old_ids
        assert new_ids and not (new_ids - records) & old_ids and len(new_ids) > len(old_ids)
        assert errors == [] and during > 0
        # every search saw one whole index: never empty, never a mix of the two generations
        assert all(r and (r <= old_ids or r <= new_ids) for r in results), results
        assert any(r <= new_ids for r in results)
        # the old generation is gone from Chroma, BM25 and the catalog
        assert old_name not in old_store.chroma.collection_names()
        assert not old_store.views.bm25_file(old_name).exists()
        assert old_store.catalog.collection(old_name) is None
        record = old_store.catalog.repository(REPO)
        assert record.last_run_outcome == "ok" and record.last_commit
        # the old settings may no longer write: they would mix two chunkings
        (repo_dir / "content/docs/page-0.md").unlink()
        commit_all(repo_dir, "drop a page")
        with pytest.raises(IndexingError, match="hetriever migrate"):
            run(index_repository(repo_of(repo_dir), old_store, old_store.settings))
        # up to date: a second migrate does nothing
        again = run(migrate_repository(repo_of(repo_dir), new_store, new_store.settings))
        assert not again.migrated and again.reason == "up to date"
    finally:
        new_store.close_sync()
        old_store.close_sync()
