"""The migrate flow: rebuild a repository's index into a new collection, then switch searches.

Behind two deployments: `migrate` (only repositories whose chunking or embedding model
changed: the settings' fingerprint no longer matches the collection's) and `full-reindex`
(`force=True`: every repository, re-embedding every chunk). Either way the old collection keeps
answering searches until the new one is complete, and is dropped only then.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_table_artifact
from prefect.states import Completed, Failed

from flows.run_logs import prefect_run_logging
from hetriever.core.config import load_settings
from hetriever.core.errors import HetrieverError
from hetriever.core.logs import watch_safe
from hetriever.discover.repositories import select_repositories
from hetriever.index.lifecycle import migrate_repository
from hetriever.store.knowledge_store import get_knowledge_store
from tasks.discover import discover_task


@flow(name="migrate", log_prints=True)
async def migrate(repositories: list[str] | None = None, force: bool = False):
    """Rebuild indexes whose settings changed (`force`: all of them, re-embedding everything)."""
    logger = get_run_logger()
    settings = load_settings()
    repos = select_repositories(discover_task(settings), repositories)
    store = get_knowledge_store(settings)
    rows: list[dict] = []
    with prefect_run_logging(settings.log_level, settings.log_format):
        for repo in repos:
            try:
                report = await migrate_repository(repo, store, settings, force=force)
            except HetrieverError as exc:
                logger.error("%s: %s", repo.name, watch_safe(exc))
                rows.append({"repository": repo.name, "result": f"FAILED: {exc}"})
                continue
            index = report.index
            rows.append(
                {
                    "repository": repo.name,
                    "result": (
                        f"{report.old_collection} -> {report.new_collection}"
                        if report.migrated
                        else report.reason
                    ),
                    "chunks embedded": index.chunks_written if index else 0,
                    "old chunks dropped": report.dropped_chunks,
                    "seconds": round(index.total_seconds, 1) if index else 0,
                }
            )
            logger.info("%s: %s", repo.name, rows[-1]["result"])
    rows.sort(key=lambda r: not str(r["result"]).startswith("FAILED"))
    await acreate_table_artifact(
        key="migrate", table=rows, description="Rebuilt collections (failures first)"
    )
    failed = [r for r in rows if str(r["result"]).startswith("FAILED")]
    if failed:
        return Failed(message=f"{len(failed)} of {len(rows)} repositories failed", data=rows)
    return Completed(
        message=f"{sum(r.get('chunks embedded', 0) > 0 for r in rows)} of "
        f"{len(rows)} repositories rebuilt",
        data=rows,
    )
