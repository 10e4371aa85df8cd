"""The write path across versions (store/donors.py): a chunk whose text the base already holds
takes its vector instead of being embedded again; only a version's own donors lend, and only
with vectors of the same model and chunking. Real embedded Chroma, real MiniLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hetriever.core.versions import VersionOf
from hetriever.store.chunk_records import ChunkCollection
from hetriever.store.donors import ledger_for
from hetriever.store.knowledge_store import Store
from tests.support import versions_support
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


def follow_version(store: Store) -> None:
    """Record VERSION as a version of BASE, as a run following it does."""
    store.catalog.upsert_repository(VERSION, settings=VersionOf(BASE, "v1", "v1").to_settings())


def open_store(tmp_path: Path, minilm_embedder: Any) -> tuple[Store, CountingEmbedder]:
    embedder = CountingEmbedder(minilm_embedder)
    return Store(store_settings(tmp_path), embedder=embedder, lock_timeout=2.0), embedder


def test_a_version_borrows_the_bases_vector_of_the_same_text_and_embeds_the_rest(
    tmp_path: Path, minilm_embedder
):
    store, embedder = open_store(tmp_path, minilm_embedder)
    try:
        write(store, BASE, [SHARED])
        follow_version(store)
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
        follow_version(store)
        embedder.texts.clear()
        assert write(store, VERSION, [SHARED]).borrowed == 0 and embedder.texts == [SHARED]
    finally:
        store.close_sync()


def ledger_file(tmp_path: Path) -> Path:
    return tmp_path / "state" / "vectors" / f"{BASE}.sqlite"


def test_a_version_borrows_from_the_ledger_without_opening_its_bases_collection(
    tmp_path: Path, minilm_embedder
):
    store, embedder = open_store(tmp_path, minilm_embedder)
    try:
        write(store, BASE, [SHARED])
        assert ledger_file(tmp_path).is_file()
        store.release(BASE)  # as a run over several repositories does between them
        follow_version(store)
        embedder.texts.clear()
        result = write(store, VERSION, [SHARED, OWN])
        assert embedder.texts == [OWN] and (result.written, result.borrowed) == (2, 1)
        # the base's vector index stays unloaded: the vector came from the ledger
        assert store.physical_name(BASE) not in store.chroma.collections
        assert np.array_equal(vectors(store, VERSION)[SHARED], vectors(store, BASE)[SHARED])
    finally:
        store.close_sync()


def test_a_base_indexed_before_the_ledger_still_lends_through_its_collection(
    tmp_path: Path, minilm_embedder
):
    store, embedder = open_store(tmp_path, minilm_embedder)
    try:
        write(store, BASE, [SHARED])
        ledger_file(tmp_path).unlink()  # as an index built before there was a ledger
        follow_version(store)
        embedder.texts.clear()
        assert write(store, VERSION, [SHARED, OWN]).borrowed == 1 and embedder.texts == [OWN]
        # met by the ledger only now, holding a chunk already: never counted as covered
        write(store, BASE, [SHARED, "The base alone documents the new render hooks API."])
        assert ledger_for(store.views, BASE).covered(store.physical_name(BASE)) is False
    finally:
        store.close_sync()


def test_a_damaged_ledger_is_set_aside_and_the_write_goes_on(tmp_path: Path, minilm_embedder):
    store, embedder = open_store(tmp_path, minilm_embedder)
    try:
        write(store, BASE, [SHARED])
        ledger_file(tmp_path).write_bytes(b"not a database at all" * 100)
        for suffix in ("-wal", "-shm"):
            Path(f"{ledger_file(tmp_path)}{suffix}").unlink(missing_ok=True)
        follow_version(store)
        embedder.texts.clear()
        result = write(store, VERSION, [SHARED, OWN])
        # the empty ledger covers nothing: the base lends through its collection
        assert (result.written, result.borrowed) == (2, 1) and embedder.texts == [OWN]
        assert list(ledger_file(tmp_path).parent.glob(f"{BASE}.sqlite.damaged-*"))
    finally:
        store.close_sync()


def ledger_hashes(tmp_path: Path) -> set[str]:
    return versions_support.ledger_hashes(tmp_path / "state", BASE)


def test_forgetting_a_file_leaves_no_vector_of_any_of_its_texts_in_the_ledger(
    tmp_path: Path, minilm_embedder
):
    from hetriever.core.names import content_hash
    from hetriever.index.lifecycle import forget_file_sync, forget_repository_sync, purge_sync

    store, _ = open_store(tmp_path, minilm_embedder)
    try:
        older = "An older wording of the page, edited away since."
        write(store, BASE, [older])
        write(store, BASE, [SHARED])  # the page now: the older text is in no collection
        follow_version(store)
        write(store, VERSION, [SHARED, OWN])
        assert {content_hash(t) for t in (older, SHARED, OWN)} <= ledger_hashes(tmp_path)

        purge_sync(store)  # housekeeping: texts no collection holds leave the ledger
        assert ledger_hashes(tmp_path) == {content_hash(SHARED), content_hash(OWN)}

        write(store, BASE, [older])  # held again, then forgotten with the file
        forget_file_sync(store, BASE, "content/page.md")  # the base and its version
        assert ledger_hashes(tmp_path) == set()

        write(store, BASE, [SHARED])
        write(store, VERSION, [OWN])
        forget_repository_sync(store, BASE)  # the family is gone: so is its ledger
        assert not ledger_file(tmp_path).exists()
    finally:
        store.close_sync()
