"""A run over many repositories holds one repository's working set at a time.

The CLI's ingest loop (`ingest_local`) over a folder of real git repositories (copies of
the sample docs), with a real embedded Chroma directory and BM25 files; the embedder is the
hash one (no model: what is measured is what the store keeps). After each repository the
store holds no collection handle and no BM25 index (with its term vocabulary) of it or of
any repository before it, embedded Chroma's system (which keeps every collection's vector
index loaded) has been replaced, and searches still find every repository's pages afterwards.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from hetriever.core.config import load_settings
from hetriever.search.hybrid import retrieve
from hetriever.search.request import SearchRequest
from tests.support.fakes import HashEmbedder
from tests.support.helpers import SAMPLE_DOCS, commit_all, init_repo

NAMES = ("site-a", "site-b", "site-c")


@pytest.fixture
def docs_root(tmp_path: Path) -> Path:
    for name in NAMES:
        repo = init_repo(tmp_path / "docs" / name)
        shutil.copytree(SAMPLE_DOCS, repo, dirs_exist_ok=True)
        commit_all(repo, name)
    return tmp_path / "docs"


def test_each_repository_is_released_before_the_next(docs_root, tmp_path, monkeypatch):
    import hetriever.index.ingest as one_ingest
    import hetriever.index.release as release
    import hetriever.store.bm25.analyzer as analyzer
    import hetriever.store.knowledge_store as knowledge_store
    from hetriever.commands.ingest import ingest_local
    from hetriever.discover.repositories import configured_repositories

    settings = load_settings(
        env={
            "HETRIEVER_DOCS_ROOT": str(docs_root),
            "HETRIEVER_CHROMA_PATH": str(tmp_path / "chroma"),
            "HETRIEVER_STATE_DIR": str(tmp_path / "state"),
        }
    )
    store = knowledge_store.Store(settings, embedder=HashEmbedder())
    monkeypatch.setattr(knowledge_store, "get_knowledge_store", lambda _settings: store)

    held: list[tuple[str, dict[str, list[str]], dict[str, list[str]]]] = []
    real = release.release_repository

    def observed(store_, name):
        assert analyzer._STEMS  # BM25's writes stemmed this site's words
        before = {
            "bm25": sorted(store_.views._bm25),
            "collections": sorted(store_.chroma.collections),
            "chroma": store_.chroma.client,
        }
        vocab = sum(len(index._vocab or {}) for index in store_.views._bm25.values())
        assert vocab > 0  # the run wrote BM25 rows: their vocabulary was held until now
        out = real(store_, name)
        assert not analyzer._STEMS  # let go with the site, not carried to the next
        after = {
            "bm25": sorted(store_.views._bm25),
            "collections": sorted(store_.chroma.collections),
            "chroma": store_.chroma.client,
        }
        held.append((name, before, after))
        return out

    # the one ingest releases each repository (hetriever/index/ingest.py)
    monkeypatch.setattr(one_ingest, "release_repository", observed)
    try:
        repos = configured_repositories(settings)
        outcomes = asyncio.run(ingest_local(settings, repos, False, show_progress=False))
        assert [o["repository"] for o in outcomes] == list(NAMES)
        assert all(o["ok"] and o["chunks_written"] > 0 for o in outcomes)

        assert [name for name, _, _ in held] == list(NAMES)
        for name, before, after in held:
            assert before["bm25"] == [f"{name}_v1"]  # its own only: the others were let go
            assert after["bm25"] == [] and after["collections"] == []
            # embedded Chroma's loaded vector indexes go with the system it is replaced by
            assert after["chroma"] is not before["chroma"]

        # Released, not lost: a search opens each repository's index again.
        for name in NAMES:
            found = asyncio.run(
                retrieve(
                    store,
                    SearchRequest("where function filter collection", top_k=3, repositories=[name]),
                )
            ).matches
            assert found and all(m.metadata["repository"] == name for m in found)
    finally:
        store.close_sync()
