"""Losing or corrupting the writer's state directory never brings a deleted page back.

The catalog and the BM25 index are derived state; Chroma is the source of truth. A repository
is indexed at v1, its state directory is then deleted (or its files overwritten with garbage),
the repository moves to v2 (a page deleted, one modified, one added) and `hetriever ingest`
runs. The result must equal a clean build at v2, field by field: Chroma's ids, documents and
metadata, BM25's rows, the catalog's file rows, titles and links, the commit and status.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from hetriever.store.catalog_schema import CATALOG_FILE
from hetriever.store.chunk_records import ChunkCollection
from hetriever.store.knowledge_store import Store
from tests.support.catalog_snapshot import catalog_rows, collection_metadata
from tests.support.chroma_fixtures import store_settings
from tests.support.cli_runs import cli_env, run_cli
from tests.support.helpers import commit_all, init_repo, run, write_files

REPO = "lost-docs"
DELETED, MODIFIED, ADDED = "content/docs/gone.md", "content/docs/edited.md", "content/docs/new.md"


def _page(title: str, body: str, link: str = "") -> str:
    see = f"\n\nSee [the other page]({link}).\n" if link else "\n"
    return (
        f"---\ntitle: {title}\ndescription: All about {title.lower()}\n---\n\n"
        f"## {title} overview\n\n{body}{see}\n## Details of {title.lower()}\n\n"
        f"More words about {title.lower()} and its settings.\n"
    )


V1 = {
    "content/docs/stable.md": _page("Stable", "Nothing changes here.", "/docs/edited/"),
    DELETED: _page("Gone", "This page is deleted in v2, quasar nebula."),
    MODIFIED: _page("Edited", "The first version of this page."),
    "content/docs/_index.md": _page("Docs", "The section page.", "/docs/gone/"),
}
V2 = {
    MODIFIED: _page("Edited", "The second version, rewritten.", "/docs/new/"),
    ADDED: _page("New", "A page added in v2."),
}


def snapshot(root: Path, model_dir: Path, embedder: Any) -> dict[str, Any]:
    """Everything a search reads, without times and run ids."""
    store = Store(store_settings(root, model_dir=model_dir), embedder=embedder)
    try:
        physical = store.physical_name(REPO)
        assert physical is not None
        got = ChunkCollection(store.chroma.client.get_collection(physical)).get(
            include=["documents", "metadatas"]
        )
        bm25 = store.bm25(REPO)
        catalog = store.catalog

        def rows(table: str) -> list[tuple]:
            return sorted(
                tuple(r)[1:]
                for r in catalog.db.rows(f"SELECT * FROM {table} WHERE collection = ?", (physical,))
            )

        meta = run(store.get_collection_metadata(REPO))
        return {
            "pages": sorted({m["file_path"] for m in got["metadatas"]}),
            "chroma": {
                i: (d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])
            },
            "bm25": {i: bm25.get(i) for i in sorted(bm25.ids())},
            "files": sorted(
                (f.path, f.state, f.blob, f.last_commit, f.reason, f.chunk_count)
                for f in catalog.files(physical)
            ),
            "titles": rows("titles"),
            "links": rows("links"),
            "commit": meta["commit_hash"],
            "status": meta["index_status"],
            "totals": (meta.get("total_documents"), meta.get("total_chunks")),
            # every table and column, less what tests/support/catalog_snapshot.py names
            "catalog": catalog_rows(catalog.path, physical),
            "collection_metadata": collection_metadata(meta),
        }
    finally:
        store.close_sync()


def _ingest(docs: Path, root: Path, model_dir: Path) -> list[dict]:
    done = run_cli(docs, cli_env(root, model_dir), "ingest", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout)
    assert all(o["ok"] and o["completed"] for o in outcomes), outcomes
    return outcomes


@pytest.fixture(scope="module")
def built(tmp_path_factory, minilm_model_dir, minilm_embedder):
    """(docs repo at v2, the folder holding its v1 index, a clean v2 snapshot)."""
    top = tmp_path_factory.mktemp("state-loss")
    docs = init_repo(top / REPO)
    write_files(docs, V1)
    commit_all(docs, "v1")
    _ingest(docs, top / "v1", minilm_model_dir)
    (docs / DELETED).unlink()
    write_files(docs, V2)
    commit_all(docs, "v2")
    _ingest(docs, top / "clean", minilm_model_dir)
    clean = snapshot(top / "clean", minilm_model_dir, minilm_embedder)
    assert DELETED not in clean["pages"] and ADDED in clean["pages"]
    return docs, top, clean


def _v1_copy(top: Path, tmp_path: Path) -> Path:
    """A copy of the v1 index (built before the repository moved to v2)."""
    root = tmp_path / "case"
    shutil.copytree(top / "v1", root)
    return root


def _damage(state: Path, how: str) -> None:
    if how == "deleted":
        shutil.rmtree(state)
    elif how == "catalog-deleted":
        for p in state.glob(CATALOG_FILE + "*"):
            p.unlink()
    elif how == "garbage":  # every file of the state directory overwritten
        for p in state.rglob("*.sqlite"):
            p.write_bytes(b"not a database " * 64)
            for side in p.parent.glob(p.name + "-*"):  # -wal, -shm
                side.unlink()
    else:
        raise AssertionError(how)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["deleted", "catalog-deleted", "garbage"])
def test_state_lost_then_ingest_at_v2_equals_a_clean_build(
    built, tmp_path, how, minilm_model_dir, minilm_embedder
):
    docs, top, clean = built
    root = _v1_copy(top, tmp_path)
    _damage(root / "state", how)
    _ingest(docs, root, minilm_model_dir)
    got = snapshot(root, minilm_model_dir, minilm_embedder)
    assert DELETED not in got["pages"], "the page deleted at v2 came back"
    for field in clean:
        assert got[field] == clean[field], field
    # And a second run is a no-op that changes nothing.
    (outcome,) = _ingest(docs, root, minilm_model_dir)
    assert outcome["mode"] == "noop"
    assert snapshot(root, minilm_model_dir, minilm_embedder) == clean
