"""The ingest flow: discover -> poll commits -> per-file fan-out -> store -> record the commit.

Reads like the pipeline diagram; the work itself is in `hetriever/` and `tasks/`.
Each repository runs as its own subflow, so one failing repository does not stop the others,
and the parent flow ends Failed or Completed honestly with a summary.
"""

from __future__ import annotations

import os
import subprocess
import time

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.futures import as_completed
from prefect.states import Completed, Failed
from prefect.task_runners import ThreadPoolTaskRunner

from hetriever.config import Settings, load_settings
from hetriever.discover import read_content_files, select_repositories
from hetriever.errors import HetrieverError, SourceError
from hetriever.catalog import FAILED
from hetriever.indexing import (
    IncludeResolver,
    OutcomeWriter,
    check_schema,
    close_run,
    finish_run,
    heal_bm25,
    last_indexed,
    now_iso,
    run_lock,
    start_run,
)
from hetriever.models import IndexResult, Repository, SkippedFile
from hetriever.store import get_knowledge_store
from tasks.discover import discover_task, plan_task
from tasks.process import process_file_task


DEFAULT_THREADS = min(8, 2 * (os.cpu_count() or 1))


def make_task_runner(spec: str):
    """"threads" (default), "threads:8", "dask" (a local cluster) or "dask:tcp://host:8786"."""
    kind, _, arg = spec.partition(":")
    if kind == "threads":
        # Bounded: parse/clean/chunk is CPU work under the GIL, and hundreds of threads only
        # compete with the embedder for the cores.
        return ThreadPoolTaskRunner(max_workers=int(arg) if arg else DEFAULT_THREADS)
    if kind == "dask":
        from prefect_dask import DaskTaskRunner

        if arg:
            return DaskTaskRunner(address=f"{arg}" if "://" in spec else arg)
        return DaskTaskRunner(cluster_kwargs={"n_workers": 2, "threads_per_worker": 1,
                                              "processes": True, "dashboard_address": None})
    raise SourceError(f"unknown task runner {spec!r}",
                      hint='use "threads", "threads:N", "dask" or "dask:tcp://host:port"')


def update_checkout(repo: Repository, ref: str | None) -> None:
    """Fetch the repository's remote and check out `ref` (default: the remote's HEAD)."""
    subprocess.run(["git", "fetch", "--quiet", "origin"], cwd=repo.path, check=True,
                   capture_output=True)
    target = ref or "origin/HEAD"
    subprocess.run(["git", "checkout", "--quiet", "--detach", target], cwd=repo.path,
                   check=True, capture_output=True)


def _artifact_key(name: str) -> str:
    return "ingest-" + "".join(c if c.isalnum() or c == "-" else "-" for c in name.lower())


async def publish_artifacts(result: IndexResult) -> None:
    rows = [
        {"metric": "mode", "value": result.mode},
        {"metric": "commit", "value": f"{(result.old_commit or '-')[:12]} -> {result.new_commit[:12]}"},
        {"metric": "files added", "value": result.files_added},
        {"metric": "files modified", "value": result.files_modified},
        {"metric": "files deleted", "value": result.files_deleted},
        {"metric": "files renamed", "value": result.files_renamed},
        {"metric": "files indexed", "value": result.files_indexed},
        {"metric": "files skipped", "value": result.files_skipped},
        {"metric": "chunks written", "value": result.chunks_written},
        {"metric": "chunks reused", "value": result.chunks_reused},
        {"metric": "chunks deleted", "value": result.chunks_deleted},
        {"metric": "embedding seconds", "value": round(result.embedding_seconds, 2)},
        {"metric": "total seconds", "value": round(result.total_seconds, 2)},
        {"metric": "completed", "value": result.completed},
    ]
    await acreate_table_artifact(key=_artifact_key(result.repository), table=rows,
                          description=f"Ingest of {result.repository}")
    if result.skipped:
        lines = [f"| `{s.path}` | {s.reason} |" for s in result.skipped[:500]]
        more = len(result.skipped) - len(lines)
        await acreate_markdown_artifact(
            key=_artifact_key(result.repository) + "-skipped",
            markdown="\n".join([f"# Skipped files in {result.repository}", "",
                                "| file | reason |", "|---|---|", *lines,
                                *([f"\n…and {more} more"] if more > 0 else [])]),
            description=f"Files of {result.repository} that were not indexed, with reasons",
        )


@flow(name="index-repository", flow_run_name="index-{repo.name}", log_prints=True)
async def index_repository_flow(repo: Repository, settings: Settings,
                                force_full: bool = False) -> dict:
    """One repository: plan, fan out per file, write, and record the commit last."""
    logger = get_run_logger()
    started = time.perf_counter()
    store = get_knowledge_store(settings)
    await heal_bm25(store, repo, settings)  # a damaged BM25 index is rebuilt even on a no-op
    with run_lock(settings, repo.name):  # a second run for this repository waits or fails clearly
        last_commit, last_status = await last_indexed(store, repo)
        change_set = plan_task(repo, last_commit, last_status, force_full)
        result = IndexResult(repository=repo.name, mode=change_set.mode, old_commit=last_commit,
                             new_commit=change_set.new_commit, skipped=list(change_set.skipped))
        counts = change_set.counts()
        result.files_added, result.files_modified = counts["added"], counts["modified"]
        result.files_deleted, result.files_renamed = counts["deleted"], counts["renamed"]
        if change_set.mode == "noop":
            logger.info("%s: commit %s already indexed, nothing to do", repo.name,
                        change_set.new_commit[:12])
            result.completed = True
            result.total_seconds = time.perf_counter() - started
            await publish_artifacts(result)
            return result.to_dict()
        if change_set.dirty:
            logger.warning("%s: uncommitted changes in the working tree are ignored", repo.name)
        logger.info("%s: %s run %s -> %s, %s", repo.name, change_set.mode,
                    (last_commit or "-")[:12], change_set.new_commit[:12], counts)

        check_schema(store, repo)
        await start_run(store, repo, settings, change_set, result)

        processed_at = now_iso()
        paths = change_set.paths_to_index()
        # One batched git read for every file (a git process per file cost 5x the parse work),
        # and one include cache for the run; each file is still its own task run.
        texts = dict(read_content_files(repo, paths, change_set.new_commit,
                                        max_bytes=settings.max_file_bytes))
        resolver = IncludeResolver(repo, change_set.new_commit, settings)
        futures = {
            process_file_task.submit(repo, path, change_set.new_commit, settings, processed_at,
                                     text=texts.get(path), resolver=resolver): path
            for path in paths
        }
        failed: list[SkippedFile] = []
        writer = OutcomeWriter(store, repo, result)
        for future in as_completed(list(futures)):
            path = futures[future]
            try:
                outcome = future.result()
            except Exception as exc:  # retries exhausted: report the file, index the rest
                failed.append(SkippedFile(path, f"failed after retries: {type(exc).__name__}: {exc}"))
                logger.error("%s: %s failed after retries: %s", repo.name, path, exc)
                continue
            await writer.add(outcome)
        await writer.flush()

        result.skipped.extend(failed)
        for item in failed:
            store.catalog.set_files(store.physical_name(repo.name), repo.name, [item.path],
                                    FAILED, reason=item.reason)
        failed += result.failed  # files whose write failed (their old chunks are intact)
        if not failed:
            await finish_run(store, repo, change_set, result)
        else:
            close_run(store, repo, result, "failed",
                      error=f"{len(failed)} file(s) failed after retries")
        result.total_seconds = time.perf_counter() - started
        await publish_artifacts(result)
        summary = result.to_dict()
        if failed:
            # The commit is not recorded: the next run reconciles and retries these files.
            return Failed(message=f"{repo.name}: {len(failed)} file(s) failed after retries; "
                                  "the rest is indexed, the commit was not recorded",
                          data=summary)
        return summary


@flow(name="ingest", log_prints=True)
async def ingest(
    repositories: list[str] | None = None,
    force_full: bool = False,
    batch_size: int | None = None,
    task_runner: str = "threads",
    fetch: bool = False,
    ref: str | None = None,
):
    """Bring every (or the named) documentation repository's index to its checked-out commit."""
    logger = get_run_logger()
    settings = load_settings(batch_size=batch_size)
    repos = select_repositories(discover_task(settings), repositories)

    outcomes: list[dict] = []
    for repo in repos:
        try:
            if fetch:
                update_checkout(repo, ref)
            state = await index_repository_flow.with_options(
                task_runner=make_task_runner(task_runner))(repo, settings, force_full,
                                                           return_state=True)
            data = await state.aresult(raise_on_failure=False)
            if state.is_completed():
                outcomes.append({"repository": repo.name, "ok": True, **data})
            else:
                details = data if isinstance(data, dict) else {}
                outcomes.append({"repository": repo.name, "ok": False,
                                 "error": state.message or str(data), **details})
        except (HetrieverError, subprocess.CalledProcessError, OSError) as exc:
            logger.error("%s failed: %s", repo.name, exc)
            outcomes.append({"repository": repo.name, "ok": False, "error": str(exc)})

    summary = {"repositories": outcomes,
               "ok": sum(o["ok"] for o in outcomes), "failed": sum(not o["ok"] for o in outcomes)}
    lines = ["| repository | result | mode | indexed | skipped | written | reused | deleted |",
             "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        lines.append(f"| {o['repository']} | {'ok' if o['ok'] else 'FAILED: ' + o.get('error', '')[:80]}"
                     f" | {o.get('mode', '')} | {o.get('files_indexed', '')}"
                     f" | {len(o.get('skipped', []))} | {o.get('chunks_written', '')}"
                     f" | {o.get('chunks_reused', '')} | {o.get('chunks_deleted', '')} |")
    await acreate_markdown_artifact(key="ingest-summary", markdown="\n".join(lines),
                                   description="Ingest run summary")
    if summary["failed"]:
        return Failed(message=f"{summary['failed']} of {len(outcomes)} repositories failed",
                      data=summary)
    return Completed(message=f"{len(outcomes)} repositories up to date", data=summary)


@flow(name="purge", log_prints=True)
async def purge_flow(older_than_days: float | None = None) -> dict:
    """Hard-delete chunks soft-deleted longer ago than the retention (or `older_than_days`)."""
    from hetriever.lifecycle import purge

    logger = get_run_logger()
    settings = load_settings()
    report = await purge(get_knowledge_store(settings), older_than_days)
    logger.info("purged %d chunks deleted before %s: %s", report.total_chunks, report.cutoff,
                report.chunks)
    await acreate_table_artifact(
        key="purge",
        table=[{"repository": name, "chunks": n, "files": report.files.get(name, 0)}
               for name, n in report.chunks.items()],
        description=f"Soft-deleted chunks removed (deleted before {report.cutoff})")
    return {**report.to_dict(), "total_chunks": report.total_chunks}
