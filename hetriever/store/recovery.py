"""Finding a repository's index again after the catalog that named it was lost.

The catalog is derived state: Chroma is the source of truth. A state directory deleted,
restored from an older backup or replaced after damage leaves Chroma holding the repository's
collection (`<name>_v<n>`) while the catalog knows nothing of it. Allocating a new generation
then would reuse `_v1`, the old collection, as if it were empty and complete: the next run
would compare the tree with nothing, and the pages deleted since the last recorded commit
would stay in Chroma and go back into BM25. So a writer that finds no collection for a
repository first adopts the newest one Chroma holds, with no commit recorded: the run is then
a full pass against Chroma, which deletes every file not in the tree at the new commit and
rebuilds BM25 and the catalog's rows from what it keeps.
"""

from __future__ import annotations

from typing import Any

from hetriever.core.logs import get_logger
from hetriever.store.catalog_records import split_physical

log = get_logger(__name__)


def adopt_orphaned_collection(store: Any, name: str) -> str | None:
    """Adopt the newest Chroma collection of repository `name` the catalog has no record of,
    when the catalog names no collection for it; returns the adopted name, else None.

    `store` is a `Store`; the caller holds the repository's run lock."""
    catalog = store.catalog
    if store.views.pins.get(name) or catalog.active(name) is not None:
        return None
    found = sorted(
        (split[1], physical)
        for physical in store.chroma.collection_names()
        if (split := split_physical(physical)) is not None
        and split[0] == name
        and catalog.collection(physical) is None
    )
    if not found:
        return None
    _, physical = found[-1]
    col = store.chroma.open_collection(physical)
    metadata = dict(col.metadata or {})
    fingerprint = str(metadata.get("schema_fingerprint") or store.fingerprint())
    # Every access level its chunks hold: a level the catalog missed would let a search skip
    # the per-chunk check that hides those chunks.
    records = store.chroma.all_records(col, ["metadatas"])["metadatas"]
    levels = {str(m["access_level"]) for m in records if m and "access_level" in m}
    catalog.adopt(name, physical, fingerprint, levels=levels, commit="")
    # No commit: the next run is a full pass; "indexing" until it records one.
    catalog.set_index_state(physical, commit_hash=None, index_status="indexing")
    log.warning(
        "index_found_without_catalog",
        repository=name,
        collection=physical,
        chunks=int(store.call("count", col.count)),
        action="adopted; this run is a full pass against Chroma",
    )
    return physical
