"""A repository's generations left over by a run that died: found and dropped under its lock.

A migration builds the next generation of a repository's collection beside the active one
(`hetriever.index.lifecycle`). Killed before its switch, it leaves that generation `building`,
never searched; killed after the switch but before it dropped the old one, it leaves the old
generation superseded: marked active, no longer served. Either holds a Chroma collection, a
BM25 index and catalog rows until the next migration or ingest drops it.
"""

from __future__ import annotations

import asyncio

from hetriever.core.logs import get_logger
from hetriever.store.catalog_records import BUILDING

log = get_logger(__name__)


async def drop_abandoned_builds(store, repository: str) -> list[str]:
    """Drop every generation of `repository` but the active one: those a migration left
    `building` when it died (a kill, a crash, a lost machine) and the one a migration switched
    away from and died before dropping; their Chroma collection, BM25 index and catalog rows
    go, so their disk is not held until a `forget`. The caller (a migration, an ingest) holds
    the repository's run lock, which a migration holds throughout, so none of them is being
    built or switched to."""
    active = store.catalog.active(repository)
    left = [
        (c.name, c.state)
        for c in store.catalog.collections(repository)
        if c.name != active and (c.state == BUILDING or active is not None)
    ]
    for physical, state in left:
        reason = (
            "a migration into it did not finish"
            if state == BUILDING
            else "a migration switched away from it and did not drop it"
        )
        log.warning(
            "abandoned_build_dropped",
            repository=repository,
            collection=physical,
            state=state,
            reason=reason,
        )
        await asyncio.to_thread(store.writes.drop_physical, repository, physical)
    return [name for name, _ in left]
