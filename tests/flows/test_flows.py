"""Real Prefect flows in the session harness over real git repos and a real embedded Chroma."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from datetime import UTC
from pathlib import Path

import pytest

from hetriever.store.knowledge_store import clear_store_cache, get_knowledge_store
from tests.support.flow_support import fresh_full_pass, run_ingest, stored
from tests.support.helpers import (
    add_submodule,
    break_remote,
    build_corpus_parent,
    build_sample_parent,
    commit_all,
    git,
    hanging_remote,
    init_repo,
    move_branch_back,
    repo_of,
    survivors,
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


def open_store():
    from hetriever.core.config import load_settings

    return get_knowledge_store(load_settings())


def test_cli_prefect_engine_runs_the_flow_on_the_configured_server(sample_parent, monkeypatch):
    """`hetriever ingest --engine prefect` with an API configured (here the harness's) runs
    the ingest flow against that server and starts none of its own (tests/
    test_temporary_server.py covers the case without one)."""
    import deployments.temporary_server
    from hetriever.cli import main

    def no_second_server(*_, **__):
        raise AssertionError("a temporary server was started although an API is configured")

    monkeypatch.setattr(deployments.temporary_server, "temporary_server", no_second_server)
    # No capsys: Prefect's console handler keeps the stream it first sees, and a per-test
    # capture closes it under the tests that follow.
    assert main(["ingest", "--engine", "prefect", "--json"]) == 0
    state, summary = run_ingest()  # the CLI's run recorded the commit: nothing left to do
    assert state.is_completed() and summary["repositories"][0]["mode"] == "noop"


def test_ingest_full_noop_incremental_and_artifacts(sample_parent):
    parent, source = sample_parent
    state, summary = run_ingest()
    assert state.is_completed(), state.message
    (first,) = summary["repositories"]
    assert first["ok"] and first["mode"] == "full" and first["files_indexed"] == 7

    state, summary = run_ingest()
    assert state.is_completed() and summary["repositories"][0]["mode"] == "noop"

    (source / "content/docs/faq.md").write_text(
        "---\ntitle: FAQ\n---\n\nAnswers about Sample and its where function.\n"
    )
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


def recorded_file_task_runs(ingest_state, expected: int, timeout: float = 60.0) -> list:
    """The process-file task runs the server recorded under the ingest run's repository
    subflow, once `expected` of them are final (the server records state events in batches,
    so they arrive a moment after the flow ends), or whatever is there after `timeout`."""
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
    )

    parent_id = ingest_state.state_details.flow_run_id

    async def read() -> list:
        async with get_client() as client:
            subflows = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])
                )
            )
            runs = await client.read_task_runs(
                task_run_filter=TaskRunFilter(
                    flow_run_id=TaskRunFilterFlowRunId(any_=[r.id for r in subflows])
                )
            )
            return [r for r in runs if r.name.startswith("process-")]

    deadline = time.monotonic() + timeout
    while True:
        runs = asyncio.run(read())
        final = [r for r in runs if r.state is not None and r.state.is_final()]
        if len(final) >= expected or time.monotonic() > deadline:
            return runs
        time.sleep(0.5)


def test_every_file_is_a_task_run_recorded_on_the_server_retries_included(
    sample_parent, monkeypatch, env
):
    from hetriever.discover.changes import head_commit, list_content_files

    parent, _ = sample_parent
    repo = repo_of(parent, "sample-docs")
    files = list_content_files(repo, head_commit(repo))
    monkeypatch.setenv("HETRIEVER_FAULTS", "process_file:*/where.md:1")
    state, summary = run_ingest()
    assert state.is_completed(), state.message

    runs = recorded_file_task_runs(state, expected=len(files))
    assert sorted(r.name for r in runs) == sorted(f"process-{path}" for path in files)
    assert all(r.state.is_completed() for r in runs), [(r.name, r.state) for r in runs]
    (retried,) = [r for r in runs if r.name.endswith("/where.md")]
    assert retried.run_count == 2  # failed once, retried by Prefect, completed
    assert {r.run_count for r in runs if r is not retried} == {1}


def test_a_large_run_goes_in_groups_of_files_a_groups_retry_its_own(
    sample_parent, monkeypatch, env
):
    import tasks.process
    from hetriever.discover.changes import head_commit, list_content_files

    parent, _ = sample_parent
    repo = repo_of(parent, "sample-docs")
    files = list_content_files(repo, head_commit(repo))
    monkeypatch.setattr(tasks.process, "MAX_TASK_RUNS", 3)  # 9 files: three groups of three
    monkeypatch.setenv("HETRIEVER_FAULTS", "process_file:*/where.md:1")
    state, summary = run_ingest()
    assert state.is_completed(), state.message
    (row,) = summary["repositories"]
    assert row["files_indexed"] + len(row["skipped"]) == len(files) == 9

    runs = recorded_file_task_runs(state, expected=3)
    assert len(runs) == 3 and all(r.state.is_completed() for r in runs)
    assert all(
        r.name.startswith("process-content/") and r.name.endswith(" (+2 more)") for r in runs
    )
    # the group holding where.md failed once and was retried whole; the others ran once
    assert sorted(r.run_count for r in runs) == [1, 1, 2]
    paths = {p for p, _ in stored(open_store(), "sample-docs").values()}
    assert "content/docs/templates/where.md" in paths and len(paths) == 7


def test_a_file_that_always_fails_in_a_group_is_reported_alone(sample_parent, monkeypatch):
    import tasks.process

    monkeypatch.setattr(tasks.process, "MAX_TASK_RUNS", 3)
    monkeypatch.setenv("HETRIEVER_FAULTS", "process_file:*/where.md:always")
    state, summary = run_ingest()
    assert state.is_failed()
    (repo,) = summary["repositories"]
    assert [s["path"] for s in repo["failed"]] == ["content/docs/templates/where.md"]
    assert repo["failed"][0]["reason"].startswith("failed after retries")
    paths = {p for p, _ in stored(open_store(), "sample-docs").values()}
    assert "content/docs/templates/where.md" not in paths and len(paths) == 6


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
    assert len(paths) == 6  # the rest is indexed
    meta = asyncio.run(store.get_collection_metadata("sample-docs"))
    assert "commit_hash" not in meta or not meta["commit_hash"]  # not recorded as complete

    monkeypatch.delenv("HETRIEVER_FAULTS")
    state, summary = run_ingest()  # the next run repairs it
    assert state.is_completed()
    assert summary["repositories"][0]["mode"] == "full"
    assert len({p for p, _ in stored(store, "sample-docs").values()}) == 7


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


@pytest.mark.parametrize("max_task_runs", [100, 3], ids=["a-task-run-per-file", "groups"])
def test_dask_task_runner_with_a_local_cluster(sample_parent, monkeypatch, max_task_runs):
    import tasks.process

    monkeypatch.setattr(tasks.process, "MAX_TASK_RUNS", max_task_runs)
    state, summary = run_ingest(task_runner="dask")
    assert state.is_completed(), state.message
    assert summary["repositories"][0]["files_indexed"] == 7
    paths = {p for p, _ in stored(open_store(), "sample-docs").values()}
    assert len(paths) == 7


def test_query_flow_records_metrics(sample_parent):
    from flows.query import query
    from hetriever.core.config import load_settings
    from hetriever.search.metrics import metrics_store

    assert run_ingest()[0].is_completed()
    result = asyncio.run(query("filter a collection with where", top_k=3))
    assert result["matches"] and result["matches"][0]["metadata"]["title"] == "where"
    assert set(result["retriever_counts"]) >= {"dense", "bm25"}
    summary = metrics_store(load_settings().resolved_state_dir).summary(temperature="warm")
    assert summary.count == 1 and summary.p50_ms > 0
    # start-up (store open, warm-up search) is reported apart from the warm search's latency
    assert result["startup_ms"] > 0 and summary.p50_ms == pytest.approx(
        result["search_time_ms"], abs=0.01
    )
    rows = [(r["source"], r["temperature"], r["count"]) for r in summary.by_source]
    assert rows == [("query-flow", "warm", 1)]
    cold = metrics_store(load_settings().resolved_state_dir).summary(temperature="cold")
    assert cold.count == 1 and cold.by_source[0]["source"] == "query-flow"
    artifact = _artifacts("query-latency-by-source")[0]  # the newest
    assert "query-flow" in artifact.data and "cold" in artifact.data and "warm" in artifact.data

    from hetriever.core.errors import RepositoryNotFoundError

    with pytest.raises(RepositoryNotFoundError, match="known: sample-docs"):
        asyncio.run(query("where", repositories=["sampel-docs"]))


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

    from hetriever.core.config import load_settings

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
    private = asyncio.run(
        query("filter a collection with where", top_k=3, access_levels=["PRIVATE"])
    )
    assert private["matches"]
    assert {m["metadata"]["access_level"] for m in private["matches"]} == {"PRIVATE"}


def test_query_flow_records_the_search_and_publishes_the_analytics_report(
    sample_parent, monkeypatch
):
    from flows.query import query
    from hetriever.core.config import load_settings
    from hetriever.search.analytics_report import analytics_report

    monkeypatch.setenv("HETRIEVER_ANALYTICS", "true")
    assert run_ingest()[0].is_completed()
    hostile = "<b>where</b> | `tick` **bold**"
    asyncio.run(query(hostile, top_k=3, filters={"section": "no-such-section"}))
    report = analytics_report(load_settings())
    assert [q["query"] for q in report.no_result] == [hostile]
    assert [(r["source"], r["temperature"]) for r in report.latency] == [("query-flow", "warm")]
    markdown = _artifacts("search-analytics")[0].data
    assert "## Found nothing" in markdown and "<b>" not in markdown
    assert "&lt;b&gt;where&lt;/b&gt; \\| \\`tick\\` \\*\\*bold\\*\\*" in markdown


# --- operating it: the schedule catches up, runs close honestly, artifacts and logs read well


def _artifacts(key: str) -> list:
    """Every version of the artifact `key`, newest first (the harness server is shared by the
    session's tests, so earlier tests' versions are there too)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    async def read():
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                sort=ArtifactSort.CREATED_DESC,
            )

    return asyncio.run(read())


def test_a_fetching_run_picks_up_a_commit_no_webhook_announced(sample_parent):
    """Upstream gets a commit; the parent's submodule is never bumped (a lost webhook)."""
    parent, source = sample_parent
    state, _ = run_ingest()
    assert state.is_completed(), state.message
    write_files(
        source,
        {
            "content/docs/upstream-only.md": "---\ntitle: Upstream only\n---\n\nA zeppelin manual page.\n"
        },
    )
    pushed = commit_all(source, "a push whose webhook was lost")

    state, summary = run_ingest()  # without fetch: the checkout has not moved, nothing to do
    assert summary["repositories"][0]["mode"] == "noop"

    state, summary = run_ingest(fetch=True)
    assert state.is_completed(), state.message
    (repo,) = summary["repositories"]
    assert repo["mode"] == "incremental" and repo["new_commit"] == pushed
    assert repo["files_added"] == 1 and repo["files_indexed"] == 1
    store = open_store()
    assert "content/docs/upstream-only.md" in {p for p, _ in stored(store, "sample-docs").values()}
    assert asyncio.run(store.get_collection_metadata("sample-docs"))["commit_hash"] == pushed

    state, summary = run_ingest(fetch=True)  # the next scheduled run: up to date
    assert summary["repositories"][0]["mode"] == "noop"


def _warnings_since(started) -> list[tuple[str, str]]:
    """(logger, message) of the run logs at WARNING or above recorded since `started`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterTimestamp
    from prefect.logging.handlers import APILogHandler

    asyncio.run(APILogHandler.aflush())

    async def read_logs():
        async with get_client() as client:
            return await client.read_logs(
                log_filter=LogFilter(timestamp=LogFilterTimestamp(after_=started)), limit=200
            )

    return [(log.name, log.message) for log in asyncio.run(read_logs()) if log.level >= 30]


def test_a_fetching_run_follows_the_branch_gitmodules_names(sample_parent):
    """A webhook route to a branch other than the remote's default: the scheduled runs check
    out the branch the submodule names in .gitmodules, so they do not undo the webhook's."""
    from datetime import datetime

    parent, source = sample_parent
    default = git(source, "symbolic-ref", "--short", "HEAD")
    git(source, "checkout", "-q", "-b", "release")
    write_files(
        source,
        {
            "content/docs/release-notes.md": "---\ntitle: Release notes\n---\n\nA dirigible release.\n"
        },
    )
    on_release = commit_all(source, "on the release branch only")
    git(source, "checkout", "-q", default)
    write_files(source, {"content/docs/next.md": "---\ntitle: Next\n---\n\nA blimp.\n"})
    on_default = commit_all(source, "on the default branch only")

    state, summary = run_ingest(fetch=True)  # .gitmodules names no branch: the default one
    assert summary["repositories"][0]["new_commit"] == on_default, state.message

    git(parent, "config", "--file", ".gitmodules", "submodule.docs/sample-docs.branch", "release")
    state, summary = run_ingest(fetch=True)
    assert state.is_completed() and summary["repositories"][0]["new_commit"] == on_release

    started = datetime.now(UTC)  # a push to the default branch, routed by a webhook
    state, summary = run_ingest(fetch=True, ref=on_default)
    assert summary["repositories"][0]["new_commit"] == on_default, state.message
    assert any("is not on origin/release" in message for _, message in _warnings_since(started))
    state, summary = run_ingest(fetch=True)  # the next scheduled run follows release again
    assert summary["repositories"][0]["new_commit"] == on_release

    git(parent, "config", "--file", ".gitmodules", "submodule.docs/sample-docs.branch", "gone")
    state, summary = run_ingest(fetch=True)
    (repo,) = summary["repositories"]
    assert not repo["ok"] and "the followed branch 'gone'" in repo["error"], repo


def test_a_replayed_old_push_leaves_the_index_at_the_newer_commit(
    sample_parent, tmp_path, prefect_harness, ingest_deployment
):
    """The real webhook service starts runs on the harness; each run's parameters are then
    run here as the deployment's worker would run them."""
    from datetime import datetime
    from uuid import uuid4

    from tests.support.webhook_support import (
        push_payload,
        read_flow_run,
        running,
        send,
        webhook_config,
    )
    from webhooks.service import parse_repo_routes

    parent, source = sample_parent
    branch = git(source, "symbolic-ref", "--short", "HEAD")
    old = git(source, "rev-parse", "HEAD")
    write_files(source, {"content/docs/newer.md": "---\ntitle: Newer\n---\n\nA newer page.\n"})
    newer = commit_all(source, "a newer push")
    hook = webhook_config(
        tmp_path / "hook-state",
        prefect_harness.api_url,
        deployment=ingest_deployment,
        repos=parse_repo_routes("docs-org/sample=sample-docs"),
    )

    def push(after: str) -> dict:
        payload = push_payload("docs-org/sample", branch=branch, default_branch=branch, after=after)
        with running(hook) as base:
            answer = send(base, payload, delivery=str(uuid4()))
        assert answer.status_code == 202, answer.text
        params = dict(read_flow_run(answer.json()["flow_run_id"]).parameters)
        state, summary = run_ingest(**params)
        assert state.is_completed(), state.message
        return summary["repositories"][0]

    assert push(newer)["new_commit"] == newer
    replayed = push(old)  # the old push, sent again under a new delivery id
    assert replayed["mode"] == "noop" and replayed["new_commit"] == newer
    store = open_store()
    assert asyncio.run(store.get_collection_metadata("sample-docs"))["commit_hash"] == newer

    # A run told the old commit itself (as runs started before this change were) refuses it.
    started = datetime.now(UTC)
    state, summary = run_ingest(repositories=["sample-docs"], fetch=True, ref=old)
    (refused,) = summary["repositories"]
    assert state.is_completed() and refused["mode"] == "refused", refused
    assert refused["refused_commit"] == old and refused["new_commit"] == newer
    assert git(parent / "docs" / "sample-docs", "rev-parse", "HEAD") == newer  # not checked out
    assert any("is an ancestor of the indexed commit" in m for _, m in _warnings_since(started))
    assert asyncio.run(store.get_collection_metadata("sample-docs"))["commit_hash"] == newer


def test_the_followed_branch_is_fetched_by_name_and_a_deleted_one_is_an_error(tmp_path):
    """A single-branch (or shallow) clone fetches only the branch it was cloned with; a
    branch deleted on the remote must not be followed at its last fetched commit."""
    from hetriever.core.errors import SourceError
    from hetriever.discover.fetch import update_checkout
    from hetriever.discover.repositories import Repository

    source = init_repo(tmp_path / "source")
    write_files(source, {"content/a.md": "---\ntitle: A\n---\n\nA.\n"})
    commit_all(source, "default")
    default = git(source, "symbolic-ref", "--short", "HEAD")
    git(source, "checkout", "-q", "-b", "release/1.x")
    on_release = commit_all(source, "on the release branch")
    git(source, "checkout", "-q", default)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--single-branch", "--branch", default, str(source), str(clone))
    repo = Repository(name="clone-docs", path=clone, branch="release/1.x")

    assert update_checkout(repo, None) == on_release
    git(source, "branch", "-q", "-D", "release/1.x")
    with pytest.raises(
        SourceError,
        match=r"the followed branch 'release/1.x' \(.*\) is "
        "not a branch of the remote",
    ):
        update_checkout(repo, None)


def test_a_fetch_that_cannot_reach_the_remote_fails_that_repository_clearly(sample_parent):
    parent, _ = sample_parent
    sub = parent / "docs" / "sample-docs"
    break_remote(sub, parent / "nowhere")
    state, summary = run_ingest(fetch=True)
    assert state.is_failed()
    (repo,) = summary["repositories"]
    assert not repo["ok"] and "git fetch --quiet --prune origin failed" in repo["error"]
    assert "remote `origin`" in repo["error"]  # the hint travels with the error


def test_a_remote_that_stops_answering_fails_its_repository_and_the_run_goes_on(
    sample_parent, tmp_path, monkeypatch
):
    """A hung remote holds its fetch until HETRIEVER_FETCH_TIMEOUT, not the run: the other
    repository is fetched and indexed, the hung one fails with that reason."""
    parent, _ = sample_parent
    other = init_repo(tmp_path / "other-source")
    write_files(other, {"content/docs/other.md": "---\ntitle: Other\n---\n\nAnother page.\n"})
    commit_all(other, "other docs")
    add_submodule(parent, other, "docs/aa-hung-docs")  # first in the run's order
    commit_all(parent, "a second documentation repository")
    hung = parent / "docs" / "aa-hung-docs"
    git(hung, "remote", "remove", "origin")
    hanging_remote(hung, tmp_path / "prompt-setting")
    monkeypatch.setenv("HETRIEVER_FETCH_TIMEOUT", "2")

    began = time.monotonic()
    state, summary = run_ingest(fetch=True)
    assert time.monotonic() - began < 120
    outcomes = {o["repository"]: o for o in summary["repositories"]}
    assert [o["repository"] for o in summary["repositories"]] == ["aa-hung-docs", "sample-docs"]
    assert not outcomes["aa-hung-docs"]["ok"]
    assert "stopped answering" in outcomes["aa-hung-docs"]["error"]
    assert outcomes["sample-docs"]["ok"] and outcomes["sample-docs"]["mode"] == "full"
    assert state.is_failed()  # one repository failed: the run says so
    assert survivors() == []


def test_a_failed_fetch_reports_its_remote_without_credentials(sample_parent, monkeypatch):
    """A git error that names the remote with its token: the outcome, the summary artifact
    and the run's log lines carry it without the token."""
    from prefect.client.orchestration import get_client

    import hetriever.index.ingest as one_ingest
    from hetriever.core.errors import SourceError

    token = "ghp_flowsecret0123456789"
    password = f"{token}#?/'\"< {token}"  # what ends a URL to a splitter, around the token

    def fails(repo, ref, **_):  # the fetch fails, with the remote's URL in git's message
        raise SourceError(
            f"git fetch failed: repository 'https://bot:{password}@example.invalid"
            "/acme/docs.git/' not found"
        )

    monkeypatch.setattr(one_ingest, "fetch_target", fails)
    state, summary = run_ingest(fetch=True)
    assert state.is_failed()
    (repo,) = summary["repositories"]
    assert not repo["ok"] and "https://example.invalid/acme/docs.git/" in repo["error"]
    assert token not in repo["error"]

    async def artifact_and_logs() -> str:
        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

        async with get_client() as client:
            latest = await client.read_latest_artifacts()
            logs = await client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
            )
        return "\n".join([str(a.data) for a in latest] + [log.message for log in logs])

    published = asyncio.run(artifact_and_logs())
    assert "example.invalid" in published and token not in published


def test_a_fetching_run_names_a_submodule_that_is_not_checked_out(sample_parent):
    parent, _ = sample_parent
    subprocess.run(
        ["git", "submodule", "deinit", "-q", "-f", "docs/sample-docs"], cwd=parent, check=True
    )
    state, summary = run_ingest(fetch=True)
    assert state.is_failed()
    (repo,) = summary["repositories"]
    assert not repo["ok"] and "git submodule update --init" in repo["error"], repo["error"]


def test_a_full_run_deletes_most_of_an_index_only_when_allowed(sample_parent):
    parent, source = sample_parent
    assert run_ingest()[0].is_completed()
    for path in ("content/blog", "content/docs"):
        subprocess.run(["git", "rm", "-q", "-r", path], cwd=source, check=True)
    update_submodule(parent, "sample-docs", commit_all(source, "remove most pages"))
    refused, summary = run_ingest(force_full=True)
    assert refused.is_failed() and "would delete" in summary["repositories"][0]["error"]
    state, summary = run_ingest(force_full=True, allow_mass_delete=True)
    assert state.is_completed(), summary
    (repo,) = summary["repositories"]
    assert repo["chunks_deleted"] > 0
    assert all(
        not p.startswith(("content/blog", "content/docs"))
        for p, _ in stored(open_store(), "sample-docs").values()
    )


def test_an_exception_in_a_run_closes_its_catalog_run_as_failed(sample_parent, monkeypatch):
    import hetriever.index.indexing as indexing

    async def broken_finish(*args, **kwargs):
        raise RuntimeError("disk vanished")

    monkeypatch.setattr(indexing, "finish_run", broken_finish)
    state, summary = run_ingest()
    assert state.is_failed()
    (repo,) = summary["repositories"]
    assert not repo["ok"] and "disk vanished" in repo["error"]
    (last,) = open_store().catalog.runs("sample-docs", limit=1)
    assert last["outcome"] == "failed" and "disk vanished" in last["error"]


def test_the_artifact_of_a_failing_run_shows_the_failure_first(sample_parent, monkeypatch):
    monkeypatch.setenv("HETRIEVER_FAULTS", "process_file:*/where.md:always")
    state, _ = run_ingest()
    assert state.is_failed()
    text = _artifacts("ingest-sample-docs")[0].data
    assert text.startswith("# Ingest of sample-docs: FAILED")
    failure = text.index("content/docs/templates/where.md")
    assert failure < text.index("## This run") < text.index("## Recent runs")
    # the whole message, not cut: the injected fault names itself
    assert "failed after retries: " in text and "injected fault" in text.lower()
    summary = _artifacts("ingest-summary")[0].data  # the file and its error, by name
    assert (
        "FAILED: sample-docs: 1 file(s) could not be indexed (content/docs/templates/"
        "where.md: failed after retries: InjectedFault"
    ) in summary


def test_a_noop_run_keeps_the_last_real_runs_artifact(sample_parent):
    run_ingest()
    versions = len(_artifacts("ingest-sample-docs"))
    state, summary = run_ingest()
    assert summary["repositories"][0]["mode"] == "noop"
    pages = _artifacts("ingest-sample-docs")
    assert len(pages) == versions  # the no-op published no new version
    assert "| mode | full |" in pages[0].data and "## Recent runs" in pages[0].data


def test_hetriever_warnings_reach_the_run_logs_at_warning_level(sample_parent):
    from datetime import datetime

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterTimestamp
    from prefect.logging.handlers import APILogHandler

    parent, _ = sample_parent
    started = datetime.now(UTC)
    (parent / "docs" / "sample-docs" / "content" / "docs" / "faq.md").write_text("edited\n")
    state, _ = run_ingest()  # a dirty working tree: indexed at HEAD, with a warning
    assert state.is_completed(), state.message
    asyncio.run(APILogHandler.aflush())

    async def read_logs():
        async with get_client() as client:
            return await client.read_logs(
                log_filter=LogFilter(timestamp=LogFilterTimestamp(after_=started)), limit=200
            )

    logs = asyncio.run(read_logs())
    warnings = [(log.name, log.message) for log in logs if log.level >= 30]
    assert any(
        name.startswith("hetriever") and "uncommitted_changes_ignored" in message
        for name, message in warnings
    ), warnings
    progress = [log.message for log in logs if log.message.startswith("index_progress")]
    assert progress and "chunks_per_s=" in progress[0] and "eta_s=" in progress[0]
    assert not any(log.message[:4].isdigit() for log in logs if log.name.startswith("hetriever"))
    # six file tasks ran; none logged its routine "Finished in state Completed()"
    assert not [
        log
        for log in logs
        if log.task_run_id is not None and log.message.startswith("Finished in state Completed")
    ]
    assert any(log.name == "prefect.flow_runs" for log in logs)  # the flow's own lines do show


def test_the_parent_run_logs_what_it_does_and_each_repository_s_progress(sample_parent):
    """`prefect deployment run ... --watch` follows the parent run's logs: they name the
    repositories at once and carry each repository run's progress by chunk."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    state, summary = run_ingest()
    assert state.is_completed(), state.message
    asyncio.run(APILogHandler.aflush())
    parent_id = state.state_details.flow_run_id

    async def read_logs():
        async with get_client() as client:
            return await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[parent_id])), limit=200
            )

    messages = [
        log.message for log in sorted(asyncio.run(read_logs()), key=lambda log: log.timestamp)
    ]
    assert messages[1] == "ingest: 1 repository (sample-docs)", messages  # after Prefect's own
    progress = [m for m in messages if m.startswith("progress sample-docs: ")]
    assert progress and " chunks, " in progress[0] and "files" in progress[0], messages
    # the subflow's summary knows what waits upstream (the source repo is its origin)
    assert summary["repositories"][0]["behind_upstream"] == 0


def test_full_reindex_re_embeds_everything_and_migrate_only_what_changed(sample_parent):
    from flows.migrate import migrate

    state, summary = run_ingest()
    written = summary["repositories"][0]["chunks_written"]
    assert written > 0
    store = open_store()
    before = store.physical_name("sample-docs")

    state = asyncio.run(migrate(return_state=True))  # the `migrate` deployment: nothing changed
    (row,) = state.result()
    assert state.is_completed() and row["result"] == "up to date" and row["chunks embedded"] == 0

    state = asyncio.run(migrate(force=True, return_state=True))  # the `full-reindex` deployment
    (row,) = state.result()
    assert state.is_completed(), state.message
    assert row["chunks embedded"] == written  # every chunk embedded again, none reused
    assert row["result"] == f"{before} -> {store.physical_name('sample-docs')}"
    assert store.physical_name("sample-docs") != before
    assert len({p for p, _ in stored(store, "sample-docs").values()}) == 7  # searchable as before


def test_a_force_pushed_revert_is_refused_with_the_command_that_accepts_it(sample_parent, capsys):
    """The followed branch is force-pushed back to an older commit: fetching runs refuse it
    (the index only moves forward), say how to accept it, do not count it as updated, and
    `status --fetch` says the branch moved back instead of "up to date"."""
    from hetriever.cli import main as cli_main

    parent, source = sample_parent
    old = git(source, "rev-parse", "HEAD")
    write_files(source, {"content/docs/reverted.md": "---\ntitle: Reverted\n---\n\nSoon gone.\n"})
    newer = commit_all(source, "a commit that gets reverted by a force push")
    state, summary = run_ingest(fetch=True)
    assert summary["repositories"][0]["new_commit"] == newer
    move_branch_back(source, old)

    state, summary = run_ingest(fetch=True)
    assert state.is_completed(), state.message
    (refused,) = summary["repositories"]
    assert refused["mode"] == "refused" and refused["refused_commit"] == old
    checkout = parent / "docs" / "sample-docs"
    command = f"git -C {checkout} checkout --detach {old} && hetriever ingest -r sample-docs --full"
    assert command in refused["hint"]
    assert "updated" not in state.message and "1 refused" in state.message, state.message
    assert state.message.startswith("0 of 1 repositories up to date"), state.message

    assert cli_main(["status", "--fetch", "--json"]) == 0
    out, err = capsys.readouterr()
    (row,) = json.loads(out)
    assert row["behind_upstream"] == 0 and row["ahead_of_upstream"] == 1
    assert row["upstream_commit"] == old and "moved back" in row["upstream_note"]
    assert command in row["upstream_note"]
    assert cli_main(["status", "--fetch"]) == 0
    out, err = capsys.readouterr()
    assert "moved back" in " ".join(out.split()) and command in " ".join(err.split())

    # the command it names takes the index back, and fetching runs are then up to date
    git(checkout, "checkout", "--quiet", "--detach", old)
    assert cli_main(["ingest", "-r", "sample-docs", "--full", "--json"]) == 0
    capsys.readouterr()
    assert asyncio.run(open_store().get_collection_metadata("sample-docs"))["commit_hash"] == old
    state, summary = run_ingest(fetch=True)
    assert summary["repositories"][0]["mode"] == "noop", summary
