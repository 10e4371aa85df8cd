"""Shared pieces of the indexing and flow tests: what a collection holds, a fresh full pass."""

from __future__ import annotations

import asyncio
import dataclasses

from hetriever.core.config import Settings
from hetriever.discover.changes import list_content_files, site_at
from hetriever.discover.git_objects import read_content_files
from hetriever.discover.repositories import Repository
from hetriever.index.process import IncludeResolver, safe_process_text
from hetriever.store.chunk_records import ChunkCollection


def stored(store, collection: str) -> dict[str, tuple[str, str]]:
    """id -> (file_path, text) as stored in Chroma; asserts BM25 holds exactly the same."""
    col = ChunkCollection(store.chroma.client.get_collection(store.physical_name(collection)))
    got = col.get(include=["documents", "metadatas"])
    chroma = {
        i: (m["file_path"], d) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])
    }
    bm25 = store.bm25(collection)
    assert bm25.ids() == set(chroma), "BM25 and Chroma disagree"
    for doc_id, (_, text) in chroma.items():
        assert bm25.get(doc_id)[0] == text
    return chroma


def fresh_full_pass(
    repo: Repository, commit: str, settings: Settings
) -> dict[str, tuple[str, str]]:
    """What a full index of `commit` holds, computed by the core alone (no store involved)."""
    repo = dataclasses.replace(repo, site=site_at(repo, commit))  # as index_repository does
    resolver = IncludeResolver(repo, commit, settings)
    expected = {}
    for path, text in read_content_files(
        repo, list_content_files(repo, commit), commit, max_bytes=settings.max_file_bytes
    ):
        if isinstance(text, Exception):
            continue
        outcome = safe_process_text(repo, path, text, settings, resolver=resolver)
        for chunk in outcome.chunks:
            expected[chunk.id] = (path, chunk.text)
    return expected


def run_ingest(**params):
    """The ingest flow run to its end: (its final state, its result or the exception)."""
    from flows.ingest import ingest

    state = asyncio.run(ingest(return_state=True, **params))
    return state, state.result(raise_on_failure=False)
