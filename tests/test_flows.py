"""Real Prefect flows in the session harness over real git repos and a real embedded Chroma."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hetriever.discover import discover_repositories
from hetriever.store import clear_store_cache, get_knowledge_store
from tests.flow_support import fresh_full_pass, stored
from tests.helpers import (
    build_corpus_parent,
    build_sample_parent,
    commit_all,
    init_repo,
    update_submodule,
    write_files,
)

pytestmark = pytest.mark.prefect


@pytest.fixture
def env(tmp_path: Path, monkeypatch, minilm_model_dir, prefect_harness):
    """Settings for the flows (they read the environment, as a deployment would)."""
    monkeypatch.setenv("HETRIEVER_CHROMA_PATH", str(tmp_path / "chroma"))
    monkeypatch.setenv("HETRIEVER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HETRIEVER_MODEL_DIR", str(minilm_model_dir))
    monkeypatch.setenv("HETRIEVER_FAULTS_STATE", str(tmp_path / "faults"))
    clear_store_cache()
    yield tmp_path
    clear_store_cache()


@pytest.fixture
def sample_parent(env, monkeypatch):
    parent, source = build_sample_parent(env)
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(parent))
    return parent, source


def run_ingest(**params):
    from flows.ingest import ingest

    state = asyncio.run(ingest(return_state=True, **params))
    return state, state.result(raise_on_failure=False)


def open_store():
    from hetriever.config import load_settings

    return get_knowledge_store(load_settings())


def repo_of(parent: Path, name: str):
    (repo,) = [r for r in discover_repositories(parent) if r.name == name]
    return repo


def test_ingest_full_noop_incremental_and_artifacts(sample_parent):
    parent, source = sample_parent
    state, summary = run_ingest()
    assert state.is_completed(), state.message
    (first,) = summary["repositories"]
    assert first["ok"] and first["mode"] == "full" and first["files_indexed"] == 6

    state, summary = run_ingest()
    assert state.is_completed() and summary["repositories"][0]["mode"] == "noop"

    (source / "content/docs/faq.md").write_text("---\ntitle: FAQ\n---\n\nAnswers about Sample "
                                                "and its where function.\n")
    update_submodule(parent, "sample-docs", commit_all(source, "faq"))
    state, summary = run_ingest()
    (inc,) = summary["repositories"]
    assert state.is_completed() and inc["mode"] == "incremental"
    assert inc["files_added"] == 1 and inc["files_indexed"] == 1 and inc["chunks_written"] >= 1

    from prefect.client.orchestration import get_client

    async def artifacts():
        async with get_client() as client:
            return await client.read_artifacts()

    keys = {a.key for a in asyncio.run(artifacts())}
    assert {"ingest-sample-docs", "ingest-summary", "ingest-sample-docs-skipped"} <= keys


def test_a_file_task_that_fails_once_is_retried(sample_parent, monkeypatch, env):
    monkeypatch.setenv("HETRIEVER_FAULTS", "process_file:*/where.md:1")
    state, summary = run_ingest()
    assert state.is_completed(), state.message
    hits = list((env / "faults").iterdir())
    assert len(hits) == 1 and hits[0].stat().st_size == 2  # failed once, then succeeded
    store = open_store()
    paths = {p for p, _ in stored(store, "sample-docs").values()}
    assert "content/docs/templates/where.md" in paths


def test_a_file_that_always_fails_is_reported_and_the_rest_indexed(sample_parent, monkeypatch):
    parent, _ = sample_parent
    monkeypatch.setenv("HETRIEVER_FAULTS", "process_file:*/where.md:always")
    state, summary = run_ingest()
    assert state.is_failed()  # honest: not everything was indexed
    (repo,) = summary["repositories"]
    assert not repo["ok"]
    reasons = {s["path"]: s["reason"] for s in repo["failed"]}  # IndexResult.failed, not skips
    assert reasons["content/docs/templates/where.md"].startswith("failed after retries")
    assert all(s["path"] != "content/docs/templates/where.md" for s in repo["skipped"])
    runs = open_store().catalog.runs("sample-docs", limit=1)
    assert runs[0]["outcome"] == "failed" and runs[0]["counts"]["files_failed"] == 1
    store = open_store()
    paths = {p for p, _ in stored(store, "sample-docs").values()}
    assert "content/docs/templates/where.md" not in paths
    assert len(paths) == 5  # the rest is indexed
    meta = asyncio.run(store.get_collection_metadata("sample-docs"))
    assert "commit_hash" not in meta or not meta["commit_hash"]  # not recorded as complete

    monkeypatch.delenv("HETRIEVER_FAULTS")
    state, summary = run_ingest()  # the next run repairs it
    assert state.is_completed()
    assert summary["repositories"][0]["mode"] == "full"
    assert len({p for p, _ in stored(store, "sample-docs").values()}) == 6


def test_one_failing_repository_does_not_stop_the_others(env, monkeypatch):
    root = env / "repos"
    good = init_repo(root / "good-docs")
    write_files(good, {"content/a.md": "---\ntitle: A\n---\n\nAlpha page about templates.\n"})
    commit_all(good)
    bad = init_repo(root / "bad-docs")
    write_files(bad, {"content/b.md": "---\ntitle: B\n---\n\nBeta page.\n"})
    commit_all(bad)
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(root))
    monkeypatch.setenv("HETRIEVER_FAULTS", "write_file:content/b.md:always")
    state, summary = run_ingest()
    assert state.is_failed()
    by_name = {r["repository"]: r for r in summary["repositories"]}
    assert by_name["good-docs"]["ok"] and not by_name["bad-docs"]["ok"]
    assert summary["ok"] == 1 and summary["failed"] == 1


def test_unknown_repository_is_a_clear_failure(sample_parent):
    state, result = run_ingest(repositories=["nope-docs"])
    assert state.is_failed()
    assert "unknown repositories: nope-docs" in str(result)


def test_dask_task_runner_with_a_local_cluster(sample_parent):
    state, summary = run_ingest(task_runner="dask")
    assert state.is_completed(), state.message
    assert summary["repositories"][0]["files_indexed"] == 6


def test_query_flow_records_metrics(sample_parent):
    from flows.query import query
    from hetriever.config import load_settings
    from hetriever.metrics import metrics_store

    assert run_ingest()[0].is_completed()
    result = asyncio.run(query("filter a collection with where", top_k=3))
    assert result["matches"] and result["matches"][0]["metadata"]["title"] == "where"
    assert set(result["retriever_counts"]) >= {"dense", "bm25"}
    summary = metrics_store(load_settings().resolved_state_dir).summary()
    assert summary.count == 1 and summary.p50_ms > 0


@pytest.mark.corpus
def test_hugo_docs_v1_to_v2_through_the_flow_equals_a_fresh_full_index(env, monkeypatch):
    parent, v1, v2 = build_corpus_parent(env, "hugo-docs")
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(parent))

    state, summary = run_ingest()
    assert state.is_completed(), state.message
    assert summary["repositories"][0]["mode"] == "full"
    state, summary = run_ingest()
    assert summary["repositories"][0]["mode"] == "noop"

    update_submodule(parent, "hugo-docs", v2)
    state, summary = run_ingest()
    (inc,) = summary["repositories"]
    assert state.is_completed() and inc["mode"] == "incremental"
    assert (inc["files_added"], inc["files_deleted"], inc["files_renamed"]) == (21, 40, 1)
    assert inc["files_modified"] >= 513  # plus pages whose included snippets changed
    assert inc["chunks_reused"] > 0

    from hetriever.config import load_settings

    settings = load_settings()
    expected = fresh_full_pass(repo_of(parent, "hugo-docs"), v2, settings)
    assert stored(open_store(), "hugo-docs") == expected


def test_query_flow_respects_access_levels(sample_parent, monkeypatch):
    from flows.query import query

    monkeypatch.setenv("HETRIEVER_ACCESS_LEVELS", "sample-docs=PRIVATE")
    clear_store_cache()
    assert run_ingest()[0].is_completed()
    public = asyncio.run(query("filter a collection with where", top_k=3))
    assert public["matches"] == []  # a PUBLIC caller never sees PRIVATE content
    private = asyncio.run(query("filter a collection with where", top_k=3,
                                access_levels=["PRIVATE"]))
    assert private["matches"]
    assert {m["metadata"]["access_level"] for m in private["matches"]} == {"PRIVATE"}
