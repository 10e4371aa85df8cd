"""The query flow's `version`: a real Prefect flow run in the session harness, over an index
holding a repository's tree and its version `v1.0.0` (`tests.support.versions`)."""

from __future__ import annotations

import asyncio

import pytest

from hetriever.core.errors import UnknownVersionError
from hetriever.core.versions import version_name
from hetriever.store.knowledge_store import clear_store_cache
from tests.support.versions import BASE, LABEL, versioned_workspace

pytestmark = pytest.mark.prefect


def test_the_query_flow_searches_the_version_asked(
    tmp_path, monkeypatch, minilm_embedder, prefect_harness
):
    from flows.query import query

    workspace = versioned_workspace(tmp_path, minilm_embedder)
    for name in ("HETRIEVER_DOCS_ROOT", "HETRIEVER_CHROMA_PATH", "HETRIEVER_STATE_DIR"):
        monkeypatch.setenv(name, workspace.env[name])
    monkeypatch.setenv("HETRIEVER_MODEL_DIR", str(minilm_embedder.model_dir))
    clear_store_cache()
    try:
        old = asyncio.run(query("install the package", top_k=3, version=LABEL))
        tree = asyncio.run(query("install the package", top_k=3))
        with pytest.raises(UnknownVersionError, match=LABEL):
            asyncio.run(query("install the package", version="v9.9.9"))
    finally:
        clear_store_cache()
    assert {m["metadata"]["repository"] for m in old["matches"]} == {version_name(BASE, LABEL)}
    assert old["matches"][0]["version"] == LABEL and "quokka" in old["matches"][0]["content"]
    assert tree["matches"][0]["metadata"]["repository"] == BASE
    assert "wombat" in tree["matches"][0]["content"]
