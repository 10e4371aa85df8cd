"""Unchanged content causes no write at all, in Chroma or in BM25, and crash recovery holds.

A real embedded Chroma and a real BM25 index; their write methods are counted on the way
through (every call still reaches the real method).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from chromadb.api.models.Collection import Collection

from hetriever.discover.repositories import discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.index.run_record import STATUS_INDEXING
from hetriever.store.bm25.bm25_index import BM25Index
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.flow_support import fresh_full_pass, stored
from tests.support.helpers import build_sample_parent, commit_all, update_submodule

CHROMA_WRITES = ("add", "upsert", "update", "delete")
BM25_WRITES = ("upsert", "delete", "delete_where")


def run(coro):
    return asyncio.run(coro)


class WriteSpy:
    """Counts the calls of some write methods of a class; each call still runs the real one.

    Patched on the class, so every handle the store opens (it reopens Chroma when another
    writer moved the collection on) is counted.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type, writes: tuple[str, ...]):
        self.calls: list[str] = []
        for name in writes:
            monkeypatch.setattr(cls, name, self._counted(name, getattr(cls, name)))

    def _counted(self, name: str, real: Any) -> Any:
        def counted(obj: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return real(obj, *args, **kwargs)

        return counted


@pytest.fixture
def indexed(tmp_path: Path, minilm_embedder):
    parent, source = build_sample_parent(tmp_path)
    store = Store(
        store_settings(tmp_path, run_lock_timeout=1.0), embedder=minilm_embedder, lock_timeout=2.0
    )
    first = run(index_repository(repo_of(parent), store, store.settings))
    assert first.completed and first.chunks_written > 0
    yield parent, source, store, first
    store.close_sync()


def repo_of(parent: Path):
    (repo,) = [r for r in discover_repositories(parent) if r.name == "sample-docs"]
    return repo


def spy_on_writes(monkeypatch: pytest.MonkeyPatch) -> tuple[WriteSpy, WriteSpy]:
    return (
        WriteSpy(monkeypatch, Collection, CHROMA_WRITES),
        WriteSpy(monkeypatch, BM25Index, BM25_WRITES),
    )


def test_a_full_rerun_over_unchanged_content_writes_nothing(indexed, monkeypatch):
    parent, _, store, first = indexed
    before = stored(store, "sample-docs")
    chroma, bm25 = spy_on_writes(monkeypatch)

    again = run(index_repository(repo_of(parent), store, store.settings, force_full=True))

    assert again.mode == "full" and again.completed
    assert (again.chunks_written, again.chunks_deleted) == (0, 0)
    assert again.chunks_reused == first.chunks_written
    assert chroma.calls == [] and bm25.calls == []
    assert stored(store, "sample-docs") == before


def test_an_edit_writes_only_the_changed_chunks(indexed, monkeypatch):
    parent, source, store, _ = indexed
    where = source / "content/docs/templates/where.md"
    where.write_text(where.read_text().replace("Use dot notation", "Use dotted notation"))
    update_submodule(parent, "sample-docs", commit_all(source, "edit"))
    chroma, bm25 = spy_on_writes(monkeypatch)

    result = run(index_repository(repo_of(parent), store, store.settings))

    assert result.mode == "incremental" and result.chunks_written == 1
    assert result.chunks_reused > 0  # where.md's other chunks: no write for them
    # one upsert of the new chunk and one delete of the old, in each store
    assert sorted(chroma.calls) == ["delete", "upsert"]
    assert sorted(bm25.calls) == ["delete", "upsert"]


def test_a_crash_between_the_chroma_and_bm25_writes_is_healed_by_the_next_run(indexed):
    """Chroma is written first; a crash before the BM25 commit leaves BM25 behind. Unchanged
    chunks are no longer rewritten, so the reconciling pass must find and add what BM25 lost,
    and drop what BM25 holds that Chroma no longer does."""
    parent, _, store, first = indexed
    repo = repo_of(parent)
    expected = fresh_full_pass(repo, first.new_commit, store.settings)
    index = store.bm25("sample-docs")
    lost = sorted(expected)[:3]
    ghost_path = next(iter(expected.values()))[0]  # a file Chroma holds, with an extra BM25 row
    index.delete(lost)
    index.upsert(
        ["ghost-chunk"],
        ["a chunk whose Chroma delete was the last write"],
        [{"file_path": ghost_path, "repository": "sample-docs"}],
    )
    run(store.update_collection_metadata("sample-docs", index_status=STATUS_INDEXING))

    healed = run(index_repository(repo, store, store.settings))

    assert healed.mode == "full" and healed.completed  # reconciled
    assert healed.chunks_written == 0  # nothing re-embedded: Chroma had it all
    assert stored(store, "sample-docs") == expected  # BM25 equals Chroma again
    assert "ghost-chunk" not in index.ids()
