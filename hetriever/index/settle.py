"""Settling a run that died after it recorded its commit (`commit_recorded`): everything was
stored and the collection says the new commit, but the catalog, which `status` and
`/repositories` read, still says the old one and holds the run as `running`."""

from __future__ import annotations

import asyncio

from hetriever.core.logs import get_logger
from hetriever.discover.repositories import Repository
from hetriever.store.store_types import IndexingStore

log = get_logger("hetriever.index.indexing")


async def settle_recorded_run(store: IndexingStore, repo: Repository, commit: str) -> None:
    """Close the run left `running` at `commit` (what the collection records as complete) as
    `ok`, and set the repository's commit: else the next run is a no-op that never fixes
    what `status` shows. Then publish what that run would have (for followers)."""
    physical = store.physical_name(repo.name)
    if physical is None:
        return
    catalog = store.catalog
    left = [
        r
        for r in catalog.runs(repo.name, limit=5)
        if r["collection"] == physical and r["outcome"] == "running" and r["new_commit"] == commit
    ]
    record = catalog.repository(repo.name)
    if not left and (record is None or record.last_commit == commit):
        return
    log.warning(
        "recorded_run_settled",
        repository=repo.name,
        commit=commit[:12],
        action="the catalog now says the commit the collection recorded",
    )
    if left:
        catalog.finish_run(left[0]["id"], outcome="ok", counts=left[0]["counts"], commit=commit)
    else:
        catalog.set_last_commit(repo.name, commit)
    await asyncio.to_thread(store.replica.publish, repo.name, None)
