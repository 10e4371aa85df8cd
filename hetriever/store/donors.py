"""Embedding once across versions: a chunk whose text another version of the same repository
already holds takes that version's vector instead of being embedded again.

The donors of a repository are its base and the base's other versions (the catalog's
records whose settings name the base, `hetriever.core.versions`), each read through its
active collection, and only when that collection was built with the same fingerprint (model,
precision, chunking): a vector depends on the text and the model alone. A row is taken only
when its stored text is the text being written. A migration's pinned generation borrows
nothing: a rebuild embeds every chunk itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetriever.core.logs import get_logger
from hetriever.core.names import content_hash
from hetriever.core.versions import version_from_settings
from hetriever.store.views import RepositoryViews

log = get_logger(__name__)


# Donors a write consults. Each collection opened costs its segments' memory for the rest of
# the run (~15 MB for hugo-docs' 3,500 chunks, embedded Chroma): one keeps a version's run
# within one repository's peak (bench/README.md, "bench_versions").
MAX_DONORS = 1


def donors(views: RepositoryViews, repository: str) -> list[tuple[str, str]]:
    """(repository, physical collection) of the donors of `repository`: for a version, its
    base first (the checkout), then the other versions, the last indexed first; for a base,
    its versions so. At most MAX_DONORS, each built with this store's fingerprint."""
    if repository in views.pins:
        return []
    catalog = views.catalog
    record = catalog.repository(repository)
    own = version_from_settings(record.settings if record else None)
    base = own.base if own else repository
    versions = sorted(
        (
            r
            for r in catalog.repositories()
            if (v := version_from_settings(r.settings)) is not None and v.base == base
        ),
        key=lambda r: r.last_run_at or "",
        reverse=True,
    )
    names = [base, *(r.name for r in versions)]
    fingerprint = views.fingerprint()
    out: list[tuple[str, str]] = []
    for name in names:
        if name == repository or len(out) == MAX_DONORS:
            continue
        physical = catalog.active(name)
        held = catalog.collection(physical) if physical else None
        if held is not None and held.fingerprint == fingerprint:
            out.append((name, held.name))
    return out


def borrow(views: RepositoryViews, repository: str, texts: list[str]) -> dict[int, Any]:
    """Position in `texts` -> a donor's vector of that very text, for those a donor holds."""
    found: dict[str, Any] = {}  # content hash -> vector
    wanted = {content_hash(t): t for t in texts}
    chroma = views.chroma
    step = chroma.max_batch_size()
    for name, physical in donors(views, repository):
        missing = [h for h in wanted if h not in found]
        if not missing:
            break
        col = views.physical_collection(physical, name)
        if col is None:
            continue
        for start in range(0, len(missing), step):
            part = missing[start : start + step]
            got = chroma.call(
                "get",
                lambda: col.get(
                    where={"content_hash": {"$in": part}}, include=["embeddings", "documents"]
                ),
            )
            vectors = got.get("embeddings")
            if vectors is None:
                continue
            for text, vector in zip(got.get("documents") or [], vectors):
                digest = content_hash(text or "")
                if wanted.get(digest) == text and digest not in found:
                    found[digest] = np.asarray(vector, dtype=np.float32)
    if found:
        log.debug("vectors_borrowed", repository=repository, chunks=len(found))
    return {i: found[digest] for i, t in enumerate(texts) if (digest := content_hash(t)) in found}
