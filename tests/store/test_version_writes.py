"""The write path across versions (store/donors.py): a chunk whose text the base already holds
takes its vector instead of being embedded again; only a version's own donors lend, and only
with vectors of the same model and chunking. Real embedded Chroma, real MiniLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hetriever.core.versions import VersionOf
from hetriever.store.chunk_records import ChunkCollection
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import make_chunk, store_settings
from tests.support.versions_support import CountingEmbedder

BASE, VERSION, OTHER = "site-docs", "site-docs--v1", "other-docs"
SHARED = "Partials are templates called from other templates with a context of their own."
OWN = "Version one reads its configuration from config.toml at the project root only."


def write(store: Store, repository: str, texts: list[str]) -> Any:
    chunks = [make_chunk(repository, "content/page.md", t, index=i) for i, t in enumerate(texts)]
    return store.writes.upsert_files(repository, {"content/page.md": chunks})


def vectors(store: Store, repository: str) -> dict[str, Any]:
    col = ChunkCollection(store.chroma.client.get_collection(store.physical_name(repository)))
    got = col.get(include=["embeddings", "documents"])
    return dict(zip(got["documents"], got["embeddings"]))


def open_store(tmp_path: Path, minilm_embedder: Any) -> tuple[Store, CountingEmbedder]:
    embedder = CountingEmbedder(minilm_embedder)
    return Store(store_settings(tmp_path), embedder=embedder, lock_timeout=2.0), embedder


def test_a_version_borrows_the_bases_vector_of_the_same_text_and_embeds_the_rest(
    tmp_path: Path, minilm_embedder
):
    store, embedder = open_store(tmp_path, minilm_embedder)
    try:
        write(store, BASE, [SHARED])
        store.catalog.upsert_repository(VERSION, settings=VersionOf(BASE, "v1", "v1").to_settings())
        embedder.texts.clear()
        result = write(store, VERSION, [SHARED, OWN])
        assert embedder.texts == [OWN]
        assert (result.written, result.borrowed) == (2, 1)
        assert np.array_equal(vectors(store, VERSION)[SHARED], vectors(store, BASE)[SHARED])
        # the base, in turn, borrows from its version
        embedder.texts.clear()
        assert write(store, BASE, [SHARED, OWN]).borrowed == 1 and embedder.texts == []
    finally:
        store.close_sync()


def test_only_a_versions_own_donors_of_the_same_fingerprint_lend(tmp_path: Path, minilm_embedder):
    store, embedder = open_store(tmp_path, minilm_embedder)
    try:
        write(store, OTHER, [SHARED])  # not this repository's version: never a donor
        embedder.texts.clear()
        assert write(store, BASE, [SHARED]).borrowed == 0 and embedder.texts == [SHARED]
        # a base built with another model (or chunking) lends nothing
        with store.catalog.db.transaction() as conn:
            conn.execute(
                "UPDATE collections SET fingerprint = 's1:another-model:254:24' WHERE name = ?",
                (store.physical_name(BASE),),
            )
        store.catalog.upsert_repository(VERSION, settings=VersionOf(BASE, "v1", "v1").to_settings())
        embedder.texts.clear()
        assert write(store, VERSION, [SHARED]).borrowed == 0 and embedder.texts == [SHARED]
    finally:
        store.close_sync()
