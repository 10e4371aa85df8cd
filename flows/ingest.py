"""The ingest flow: discover -> (fetch) -> one `index_repository` run per repository.

The run itself (plan, per-file work, windowed writes, the commit recorded last) is
`hetriever.index.indexing.index_repository`; the flow passes it a per-file step that submits one
Prefect task run per file (`tasks.process.map_with_tasks`) and publishes artifacts.
Each repository runs as its own subflow, so one failing repository does not stop the others,
and the parent flow ends Failed or Completed honestly with a summary.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext
from prefect.states import Completed, Failed
from prefect.task_runners import ThreadPoolTaskRunner

from flows.artifacts import publish_repository, summary_markdown
from hetriever.core.redact import redact_text
from flows.run_logs import ParentProgress, prefect_run_logging, watch_safe
from hetriever.core.config import Settings, load_settings
from hetriever.discover.changes import select_repositories
from hetriever.core.errors import HetrieverError, SourceError
from hetriever.index.file_retry import failed_files_error
from hetriever.index.indexing import index_repository, last_indexed
from hetriever.index.release import release_repository
from hetriever.discover.repositories import Repository
from hetriever.discover.repositories import check_usable
from hetriever.discover.fetch import (
    accept_moved_back,
    check_out,
    fetch_target,
    followed_branch,
    moves_back,
    on_followed_branch,
)
from hetriever.discover.upstream import upstream
from hetriever.store.knowledge_store import get_knowledge_store
from tasks.discover import discover_task
from tasks.process import map_with_tasks


# One thread: the per-file work (parse, clean, chunk) holds the GIL, so a second thread does
# not finish the fan-out sooner; it only contends with the flow's event loop, the writer and
# Prefect's own threads. Full hugo-docs ingests through the flow (bench/README.md): one
# thread ahead of four in each of seven runs, by 0.1-6.6 s. A retry's delay (at most a few
# seconds) holds the next files back meanwhile.
DEFAULT_THREADS = 1
# "dask" without an address: a local cluster of two one-thread worker processes.
LOCAL_CLUSTER: dict[str, Any] = {"n_workers": 2, "threads_per_worker": 1, "processes": True,
                                 "dashboard_address": None}


def make_task_runner(spec: str):
    """"threads" (default), "threads:8", "dask" (a local cluster) or "dask:tcp://host:8786"."""
    kind, _, arg = spec.partition(":")
    if kind == "threads":
        return ThreadPoolTaskRunner(max_workers=int(arg) if arg else DEFAULT_THREADS)
    if kind == "dask":
        from prefect_dask import DaskTaskRunner

        if arg:
            return DaskTaskRunner(address=f"{arg}" if "://" in spec else arg)
        return DaskTaskRunner(cluster_kwargs=LOCAL_CLUSTER)
    raise SourceError(f"unknown task runner {spec!r}",
                      hint='use "threads", "threads:N", "dask" or "dask:tcp://host:port"')


@asynccontextmanager
async def task_runners(spec: str) -> AsyncIterator[Callable[[], Any]]:
    """Makes each repository's task runner for one ingest run. "dask" (no address) starts one
    local cluster for the whole run, not one per repository: each start spawns worker
    processes that import everything and load the model again, seconds of fixed cost that a
    small change would pay per repository (bench/README.md, "Warm workers"). An address
    ("dask:tcp://host:8786") reuses the cluster already running, its workers' model loaded."""
    kind, _, arg = spec.partition(":")
    if kind != "dask" or arg:
        yield lambda: make_task_runner(spec)
        return
    from distributed import LocalCluster

    cluster = await asyncio.to_thread(lambda: LocalCluster(**LOCAL_CLUSTER))
    try:
        address = cluster.scheduler_address
        yield lambda: make_task_runner(f"dask:{address}")
    finally:
        await asyncio.to_thread(cluster.close)


def cluster_embedder(settings: Settings):
    """With a Dask task runner, an embedder on the same cluster's workers (else None)."""
    runner = getattr(FlowRunContext.get(), "task_runner", None)
    if runner is None or type(runner).__name__ != "DaskTaskRunner":
        return None
    from hetriever.embed.cluster import ClusterEmbedder

    return ClusterEmbedder(str(runner.client.scheduler.address), settings)


@flow(name="index-repository", flow_run_name="index-{repo.name}", log_prints=True)
async def index_repository_flow(repo: Repository, settings: Settings,
                                force_full: bool = False,
                                parent_run_id: str | None = None,
                                parent_run_name: str = "") -> dict | State:
    """One repository: lock, run the indexing (a task run per file), publish artifacts;
    its progress also goes to the log of the parent run `parent_run_id` (what --watch shows)."""
    watch = ParentProgress(parent_run_id, parent_run_name) if parent_run_id else None
    shared = store = get_knowledge_store(settings)
    cluster = await asyncio.to_thread(cluster_embedder, settings)
    if cluster is not None:  # a Dask runner: the workers embed too
        store = store.embedding_with(cluster)
    try:
        with prefect_run_logging(settings.log_level, settings.log_format):
            result = await index_repository(repo, store, settings, force_full=force_full,
                                            map_files=map_with_tasks, on_progress=watch)
    finally:
        if cluster is not None:
            cluster.close()
            store.release(repo.name)
        release_repository(shared, repo.name)  # one repository's working set at a time
    runs = store.catalog.runs(repo.name, limit=10) if result.mode != "noop" else []
    record = store.catalog.repository(repo.name)
    # What waits upstream once this run is done (as of the fetch before it, if any)
    waiting = await asyncio.to_thread(upstream, repo, record.last_commit if record else "")
    await publish_repository(result, runs, waiting.to_dict())
    summary = {**result.to_dict(), **waiting.to_dict()}
    if result.failed:
        # The commit is not recorded: the next run reconciles and retries these files.
        return Failed(message=f"{repo.name}: {failed_files_error(result.failed)}",
                      data=summary)
    if result.mode == "noop":
        get_run_logger().info("%s: commit %s already indexed, nothing to do", repo.name,
                              result.new_commit[:12])
    return summary


@flow(name="ingest", log_prints=True)
async def ingest(
    repositories: list[str] | None = None,
    force_full: bool = False,
    batch_size: int | None = None,
    task_runner: str | None = None,
    fetch: bool = False,
    ref: str | None = None,
    allow_mass_delete: bool = False,
):
    """Bring every (or the named) documentation repository's index to its checked-out commit.

    `fetch`: first fetch each repository's `origin` and check out `ref` (default: the branch
    the repository follows, its `branch` in .gitmodules or the remote's default branch), so
    a run picks up commits no webhook announced. The `scheduled` deployment sets it. `ref` is
    `refs/heads/<branch>` (that branch's head as fetched, what webhooks send) or a commit; a
    commit that is an ancestor of the indexed one is refused (`mode: refused`): the index
    only moves forward.
    `task_runner`: "threads", "threads:N", "dask" or "dask:tcp://host:port" (the per-file
    tasks and the embedding on a Dask cluster's workers); default: the `task_runner` setting
    (HETRIEVER_TASK_RUNNER). `allow_mass_delete`: let a full run delete
    most of an index (`ingest --full --allow-mass-delete`).
    """
    settings = load_settings(batch_size=batch_size,
                             allow_mass_delete=True if allow_mass_delete else None)
    with prefect_run_logging(settings.log_level, settings.log_format):
        return await _ingest(settings, repositories, force_full,
                             task_runner or settings.task_runner, fetch, ref)


async def _ingest(settings: Settings, repositories: list[str] | None, force_full: bool,
                  task_runner: str, fetch: bool, ref: str | None):
    logger = get_run_logger()
    context = FlowRunContext.get()
    parent = context.flow_run if context else None
    parent_run_id, parent_run_name = (str(parent.id), parent.name) if parent else (None, "")
    repos = select_repositories(discover_task(settings), repositories)
    logger.info("ingest: %d %s (%s)", len(repos), "repository" if len(repos) == 1
                else "repositories", ", ".join(r.name for r in repos))

    outcomes: list[dict] = []
    async with task_runners(task_runner) as runner_for:
        for repo in repos:
            try:
                if fetch:
                    check_usable(repo)  # git would run in its placeholder path, and say less
                    sha = fetch_target(repo, ref, timeout=settings.fetch_timeout)
                    indexed, _ = await last_indexed(get_knowledge_store(settings), repo)
                    if moves_back(repo, sha, indexed):  # e.g. an old push replayed
                        assert indexed is not None
                        hint = accept_moved_back(repo, sha)
                        logger.warning(
                            "%s: refused commit %s: it is an ancestor of the indexed commit %s, "
                            "and the index only moves forward (%s)",
                            repo.name, sha[:12], indexed[:12], hint)
                        outcomes.append({"repository": repo.name, "ok": True, "mode": "refused",
                                         "new_commit": indexed, "refused_commit": sha,
                                         "hint": hint})
                        continue
                    check_out(repo, sha)
                    logger.info("%s: fetched, at %s", repo.name, sha[:12])
                    if ref and not on_followed_branch(repo, sha):  # e.g. a webhook's other branch
                        logger.warning(
                            "%s: commit %s is not on %s, the branch scheduled runs check out: the "
                            "next scheduled run indexes that branch again (set the submodule's "
                            "`branch` in .gitmodules to the branch the webhook route names)",
                            repo.name, sha[:12], followed_branch(repo))
                state = await index_repository_flow.with_options(
                    task_runner=runner_for())(repo, settings, force_full, parent_run_id,
                                                  parent_run_name, return_state=True)
                data = await state.aresult(raise_on_failure=False)
                # the repository's run, where its page is: the summary links it
                run = {"run_id": str(state.state_details.flow_run_id)
                       if state.state_details.flow_run_id else ""}
                if state.is_completed() and isinstance(data, dict):
                    outcomes.append({"repository": repo.name, "ok": True, **data, **run})
                else:
                    details = data if isinstance(data, dict) else {}
                    error = state.message if details else str(data)
                    outcomes.append({"repository": repo.name, "ok": False,
                                     "error": redact_text(error or state.message or ""),
                                     **details, **run})
            except (HetrieverError, subprocess.CalledProcessError, OSError) as exc:
                # A failed fetch names the remote: never with its credentials.
                logger.error("%s failed: %s", repo.name, watch_safe(redact_text(str(exc))))
                outcomes.append({"repository": repo.name, "ok": False,
                                 "error": redact_text(str(exc))})

    summary = {"repositories": outcomes,
               "ok": sum(o["ok"] for o in outcomes), "failed": sum(not o["ok"] for o in outcomes)}
    await acreate_markdown_artifact(key="ingest-summary", markdown=summary_markdown(outcomes),
                                    description="Ingest run summary")
    if summary["failed"]:
        return Failed(message=f"{summary['failed']} of {len(outcomes)} repositories failed",
                      data=summary)
    changed = [o for o in outcomes if o.get("mode") not in (None, "noop", "refused")]
    refused = [o["repository"] for o in outcomes if o.get("mode") == "refused"]
    done = [f"{len(changed)} updated"] if changed else []
    if refused:  # not updated, and not up to date with its remote either
        done.append(f"{len(refused)} refused a commit that moves back: {', '.join(refused)}")
    counted = f"{len(outcomes) - len(refused)} of {len(outcomes)}" if refused \
        else f"{len(outcomes)}"
    return Completed(message=f"{counted} repositories up to date"
                             + (f" ({'; '.join(done)})" if done else ""), data=summary)
