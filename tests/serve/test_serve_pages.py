"""A page read while an ingest rewrites the file shows one version of it, not both.

A real embedded Chroma and BM25 index; the rewrite is stopped (an injected fault) between its
steps, which is where a concurrent reader meets it.
"""

from __future__ import annotations

import asyncio

import pytest

from hetriever.core import faults
from hetriever.discover.repositories import discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.serve.service import DocsService
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import build_sample_parent, commit_all, update_submodule

PAGE = "sample-docs/content/docs/templates/where.md"
EDITED = {  # the Usage and Operators sections replaced: their chunks get new ids
    "## Usage": "## Usage\n\nCall `where` with a collection, a key, an operator and a value; "
    "it keeps the pages whose key compares true.\n\n## Examples",
    "| `in`     | contained in a slice |": "| `not in` | not contained in a slice |",
}


@pytest.mark.parametrize("point", ["window_chroma_written", "replaced_chunks_deleted"])
def test_a_page_mid_rewrite_is_one_version(tmp_path, minilm_embedder, monkeypatch, point):
    parent, source = build_sample_parent(tmp_path)
    store = Store(store_settings(tmp_path), embedder=minilm_embedder)
    service = DocsService(store.settings, store=store)
    try:
        (repo,) = [r for r in discover_repositories(parent) if r.name == "sample-docs"]
        assert asyncio.run(index_repository(repo, store, store.settings)).completed
        old = [c["text"] for c in service.page(PAGE)["chunks"]]

        where = source / "content/docs/templates/where.md"
        text = where.read_text(encoding="utf-8")
        for before, after in EDITED.items():
            text = text.replace(before, after)
        where.write_text(text, encoding="utf-8")
        update_submodule(parent, "sample-docs", commit_all(source, "edit where"))
        monkeypatch.setenv("HETRIEVER_FAULTS", f"{point}:*:1")
        monkeypatch.setenv("HETRIEVER_FAULTS_STATE", str(tmp_path / "faults"))
        with pytest.raises(faults.InjectedFault):
            asyncio.run(index_repository(repo, store, store.settings))
        monkeypatch.delenv("HETRIEVER_FAULTS")

        chroma = store.reads.chunks_where(
            "sample-docs", {"file_path": "content/docs/templates/where.md"}
        )
        shown = [c["text"] for c in service.page(PAGE)["chunks"]]
        assert asyncio.run(index_repository(repo, store, store.settings)).completed
        new = [c["text"] for c in service.page(PAGE)["chunks"]]
        assert new != old
        if point == "window_chroma_written":
            # Chroma holds both versions here; BM25 has not committed the new one.
            assert len(chroma) > max(len(old), len(new))
            assert shown == old
        else:
            # The replaced chunks left Chroma while BM25 still lists them: Chroma's version,
            # the new one, is the only whole one.
            assert shown == new
    finally:
        service.close()
