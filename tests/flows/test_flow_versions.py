"""The Prefect ingest flow with versions configured: both tags indexed as repositories of
their own, each in its subflow, each at its commit. Real Prefect harness, real git, real
embedded Chroma."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetriever.core.config import load_settings
from hetriever.store.knowledge_store import clear_store_cache, get_knowledge_store
from tests.support.flow_support import run_ingest, stored
from tests.support.versions_support import NAME, V1, V2, versioned_docs

pytestmark = pytest.mark.prefect


@pytest.fixture
def docs(tmp_path: Path, monkeypatch, minilm_model_dir, prefect_harness):
    """Settings for the flow from the environment, as a deployment reads them."""
    root, commits = versioned_docs(tmp_path)
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(root))
    monkeypatch.setenv("HETRIEVER_CHROMA_PATH", str(tmp_path / "chroma"))
    monkeypatch.setenv("HETRIEVER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HETRIEVER_MODEL_DIR", str(minilm_model_dir))
    monkeypatch.setenv("HETRIEVER_VERSIONS", json.dumps({NAME: {"tags": "v*", "last": 2}}))
    clear_store_cache()
    yield commits
    clear_store_cache()


def test_the_flow_indexes_each_followed_tag_as_a_repository_at_its_commit(docs):
    commits = docs
    state, summary = run_ingest()
    assert state.is_completed(), state.message
    rows = {r["repository"]: r for r in summary["repositories"]}
    assert sorted(rows) == [NAME, V1, V2]
    assert all(r["ok"] and r["mode"] == "full" and r["run_id"] for r in rows.values())
    assert rows[V1]["new_commit"] == commits["v1.0.0"]
    assert rows[V2]["new_commit"] == commits["v2.0.0"]
    assert rows[NAME]["new_commit"] == commits["main"]
    assert rows[V2]["chunks_borrowed"] > 0  # its unchanged pages were not embedded again

    store = get_knowledge_store(load_settings())
    v1 = {path for path, _ in stored(store, V1).values()}
    v2 = {path for path, _ in stored(store, V2).values()}
    assert "content/legacy.md" in v1 and "content/legacy.md" not in v2

    state, summary = run_ingest(repositories=[V2])  # one version alone, by its name
    assert state.is_completed()
    assert [(r["repository"], r["mode"]) for r in summary["repositories"]] == [(V2, "noop")]
