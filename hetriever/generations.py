"""A repository's generations left over by a run that died: found and dropped under its lock.

A migration builds the next generation of a repository's collection beside the active one
(`hetriever.lifecycle`); killed before its switch, it leaves that generation `building`,
never searched, holding its Chroma collection, BM25 index and catalog rows.
"""

from __future__ import annotations

import asyncio

from hetriever.catalog import BUILDING
from hetriever.logs import get_logger

log = get_logger(__name__)


async def drop_abandoned_builds(store, repository: str) -> list[str]:
    """Drop the generations of `repository` a migration left `building` when it died (a
    kill, a crash, a lost machine): their Chroma collection, BM25 index and catalog rows, so
    their disk is not held until a `forget`. The caller (a migration, an ingest) holds the
    repository's run lock, which a migration holds throughout, so none of them is being
    built; the active generation is never one of them."""
    active = store.catalog.active(repository)
    abandoned = [c.name for c in store.catalog.collections(repository)
                 if c.state == BUILDING and c.name != active]
    for physical in abandoned:
        log.warning("abandoned_build_dropped", repository=repository, collection=physical,
                    reason="a migration into it did not finish")
        await asyncio.to_thread(store.drop_physical_sync, repository, physical)
    return abandoned
