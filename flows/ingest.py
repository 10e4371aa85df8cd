"""The ingest flow: the one ingest (`hetriever.index.ingest`) with Prefect around it.

The flow discovers the repositories (a task), and hands the ingest a per-repository step that
runs `index_one` as its own subflow (`index-<name>`), whose per-file step submits one Prefect
task run per file, or per group of files in a large run (`tasks.process.map_with_tasks`), and
which publishes the repository's artifacts. Fetching, the refusal of a commit that moves back, the error policy and the
outcomes are the ingest's, as in the CLI's in-process run; the parent flow ends Failed or
Completed honestly with a summary.
"""

from __future__ import annotations

import asyncio
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
from flows.run_logs import ParentProgress, prefect_run_logging
from hetriever.core.config import Settings, load_settings
from hetriever.core.errors import SourceError
from hetriever.discover.repositories import Repository, select_repositories
from hetriever.index import ingest as one_ingest
from hetriever.index.ingest import RepositoryOutcome
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
LOCAL_CLUSTER: dict[str, Any] = {
    "n_workers": 2,
    "threads_per_worker": 1,
    "processes": True,
    "dashboard_address": None,
}


def make_task_runner(spec: str):
    """ "threads" (default), "threads:8", "dask" (a local cluster) or "dask:tcp://host:8786"."""
    kind, _, arg = spec.partition(":")
    if kind == "threads":
        return ThreadPoolTaskRunner(max_workers=int(arg) if arg else DEFAULT_THREADS)
    if kind == "dask":
        from prefect_dask import DaskTaskRunner

        if arg:
            return DaskTaskRunner(address=f"{arg}" if "://" in spec else arg)
        return DaskTaskRunner(cluster_kwargs=LOCAL_CLUSTER)
    raise SourceError(
        f"unknown task runner {spec!r}",
        hint='use "threads", "threads:N", "dask" or "dask:tcp://host:port"',
    )


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
async def index_repository_flow(
    repo: Repository,
    settings: Settings,
    force_full: bool = False,
    parent_run_id: str | None = None,
    parent_run_name: str = "",
) -> RepositoryOutcome | State:
    """One repository: `index_one` with its files as task runs, then its artifacts; its
    progress also goes to the log of the parent run `parent_run_id` (what --watch shows)."""
    watch = ParentProgress(parent_run_id, parent_run_name) if parent_run_id else None
    shared = store = get_knowledge_store(settings)
    cluster = await asyncio.to_thread(cluster_embedder, settings)
    if cluster is not None:  # a Dask runner: the workers embed too
        store = store.embedding_with(cluster)

    def release() -> None:  # the cluster's store shares the views `index_one` releases
        if cluster is not None:
            cluster.close()

    try:
        with prefect_run_logging(settings.log_level, settings.log_format):
            outcome = await one_ingest.index_one(
                repo,
                store,
                settings,
                force_full=force_full,
                map_files=map_with_tasks,
                on_progress=watch,
                release=release,
            )
    except BaseException:  # a cancelled run: its cluster's clients closed all the same
        release()
        raise
    result = outcome.result
    if result is not None:
        runs = shared.catalog.runs(repo.name, limit=10) if result.mode != "noop" else []
        waiting = outcome.upstream.to_dict() if outcome.upstream else None
        await publish_repository(result, runs, waiting)
        if result.mode == "noop":
            get_run_logger().info(
                "%s: commit %s already indexed, nothing to do", repo.name, result.new_commit[:12]
            )
    if not outcome.ok:
        # A run with failed files did not record its commit: the next run retries them.
        return Failed(message=f"{repo.name}: {outcome.error}", data=outcome)
    return outcome


@flow(name="ingest", log_prints=True)
async def ingest(
    repositories: list[str] | None = None,
    force_full: bool = False,
    batch_size: int | None = None,
    task_runner: str | None = None,
    fetch: bool = False,
    ref: str | None = None,
    allow_mass_delete: bool = False,
    settings: Settings | None = None,
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
    `settings`: the whole settings of a caller in this process (`hetriever ingest --engine
    prefect` hands over the ones it built from its options, files and environment, so they
    cross once and whole); without them (a deployment's run) they are read from this
    worker's environment, with `batch_size` and `allow_mass_delete` over them.
    """
    if settings is None:
        settings = load_settings(
            batch_size=batch_size, allow_mass_delete=True if allow_mass_delete else None
        )
    with prefect_run_logging(settings.log_level, settings.log_format):
        return await _ingest(
            settings, repositories, force_full, task_runner or settings.task_runner, fetch, ref
        )


async def _ingest(
    settings: Settings,
    repositories: list[str] | None,
    force_full: bool,
    task_runner: str,
    fetch: bool,
    ref: str | None,
):
    logger = get_run_logger()
    context = FlowRunContext.get()
    parent = context.flow_run if context else None
    parent_run_id, parent_run_name = (str(parent.id), parent.name) if parent else (None, "")
    repos = select_repositories(discover_task(settings), repositories)
    logger.info(
        "ingest: %d %s (%s)",
        len(repos),
        "repository" if len(repos) == 1 else "repositories",
        ", ".join(r.name for r in repos),
    )

    async with task_runners(task_runner) as runner_for:

        async def as_subflow(repo: Repository) -> RepositoryOutcome:
            state = await index_repository_flow.with_options(task_runner=runner_for())(
                repo, settings, force_full, parent_run_id, parent_run_name, return_state=True
            )
            data = await state.aresult(raise_on_failure=False)
            if not isinstance(data, RepositoryOutcome):  # the subflow itself broke
                raise (
                    data
                    if isinstance(data, BaseException)
                    else RuntimeError(state.message or str(data))
                )
            # the repository's run, where its page is: the summary links it
            run_id = state.state_details.flow_run_id
            return one_ingest.with_run(data, str(run_id) if run_id else "")

        outcomes = await one_ingest.ingest_repositories(
            repos,
            get_knowledge_store(settings),
            settings,
            force_full=force_full,
            fetch=fetch,
            ref=ref,
            index_step=as_subflow,
        )

    summary = one_ingest.summary_of(outcomes)
    rows = summary["repositories"]
    await acreate_markdown_artifact(
        key="ingest-summary", markdown=summary_markdown(rows), description="Ingest run summary"
    )
    if summary["failed"]:
        return Failed(
            message=f"{summary['failed']} of {len(rows)} repositories failed", data=summary
        )
    changed = [o for o in outcomes if o.mode not in ("", "noop", "refused")]
    refused = [o.repository for o in outcomes if o.mode == "refused"]
    done = [f"{len(changed)} updated"] if changed else []
    if refused:  # not updated, and not up to date with its remote either
        done.append(f"{len(refused)} refused a commit that moves back: {', '.join(refused)}")
    counted = f"{len(rows) - len(refused)} of {len(rows)}" if refused else f"{len(rows)}"
    return Completed(
        message=f"{counted} repositories up to date" + (f" ({'; '.join(done)})" if done else ""),
        data=summary,
    )
