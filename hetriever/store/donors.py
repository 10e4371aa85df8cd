"""Embedding once across versions: a chunk whose text another version of the same repository
already holds takes that version's vector instead of being embedded again.

The donors of a repository are its base and the base's other versions (the catalog's
records whose settings name the base, `hetriever.core.versions`), and only those whose active
collection was built with the same fingerprint (model, precision, chunking): a vector depends
on the text and the model alone. Their vectors are read from the family's ledger
(`store/vector_ledger.py`), and through a donor's collection only when the ledger does not
cover it (built before there was one); there a row is taken only when its stored text is
the text being written. A migration's pinned generation borrows nothing: a rebuild embeds
every chunk itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetriever.core.logs import get_logger
from hetriever.core.names import content_hash
from hetriever.core.versions import version_from_settings, versions_of_base
from hetriever.store.vector_ledger import VectorLedger, ledger_path
from hetriever.store.views import RepositoryViews

log = get_logger(__name__)


# Donors a write consults through Chroma when the ledger does not cover them. Each collection
# opened costs its segments' memory for the rest of the run (~15 MB for hugo-docs' 3,500
# chunks, embedded Chroma).
MAX_DONORS = 1


def family_of(views: RepositoryViews, repository: str) -> str:
    """The base whose versions `repository` belongs with (itself for a base)."""
    record = views.catalog.repository(repository)
    own = version_from_settings(record.settings if record else None)
    return own.base if own else repository


def family_ledger(views: RepositoryViews, family: str, fingerprint: str = "") -> VectorLedger:
    """`family`'s ledger, read and written under `fingerprint` (none: for its upkeep)."""
    return VectorLedger(ledger_path(views.settings.resolved_state_dir, family), fingerprint)


def ledger_for(views: RepositoryViews, repository: str) -> VectorLedger:
    """The ledger of `repository`'s family, under this store's fingerprint."""
    return family_ledger(views, family_of(views, repository), views.fingerprint())


def family_members(views: RepositoryViews, family: str) -> set[str]:
    """`family` and the names of its versions."""
    return {family, *versions_of_base(views.catalog.version_settings(), family)}


def prune_ledger(views: RepositoryViews, family: str) -> int:
    """Prune `family`'s ledger to the texts its collections (every generation of the base
    and of each version) hold, and remove it once none is left; the rows removed."""
    catalog = views.catalog
    members = family_members(views, family)
    keep: set[str] = set()
    held = 0
    for name in sorted(members):
        for record in catalog.collections(name):
            col = views.physical_collection(record.name, name)
            if col is None:
                continue
            held += 1
            keep.update(_hashes_held(views, col))
        views.release(name)  # read once: its vector index is not kept loaded for it
    ledger = family_ledger(views, family)
    if not held:  # the family is gone: so is what it embedded
        ledger.drop()
        return 0
    removed = ledger.prune(keep)
    if removed:
        log.info("vector_ledger_pruned", repository=family, vectors=removed)
    return removed


def _hashes_held(views: RepositoryViews, col: Any) -> set[str]:
    """The content hashes of every chunk of `col`, soft-deleted ones too, a page at a time."""
    out: set[str] = set()
    step = views.chroma.max_batch_size()
    offset = 0
    while True:
        got = views.chroma.call(
            "get", lambda: col.get(include=["metadatas"], limit=step, offset=offset)
        )
        metas = got["metadatas"] or []
        out.update(str((m or {}).get("content_hash", "")) for m in metas)
        if len(metas) < step:
            return out
        offset += step


# A run prunes its family's ledger once it holds more than this many times the chunks of the
# family's collections, plus PRUNE_SLACK: texts edited away pile up between purges, and a
# prune reads every collection of the family, so it is not done for a little.
PRUNE_PAST = 2
PRUNE_SLACK = 1000


def prune_ledger_if_grown(views: RepositoryViews, repository: str) -> int:
    """`prune_ledger` for `repository`'s family when its ledger has grown past PRUNE_PAST
    times the chunks the family's collections hold (the catalog's counts); the rows removed."""
    family = family_of(views, repository)
    rows = family_ledger(views, family).count()
    if not rows:
        return 0
    catalog = views.catalog
    held = sum(
        f.chunk_count
        for name in family_members(views, family)
        for record in catalog.collections(name)
        for f in catalog.files(record.name)
    )
    if rows <= PRUNE_PAST * held + PRUNE_SLACK:
        return 0
    return prune_ledger(views, family)


def donors(views: RepositoryViews, repository: str) -> list[tuple[str, str]]:
    """(repository, physical collection) of the donors of `repository`: for a version, its
    base first (the checkout), then the other versions, the last indexed first; for a base,
    its versions so. At most MAX_DONORS, each built with this store's fingerprint."""
    if repository in views.pins:
        return []
    catalog = views.catalog
    base = family_of(views, repository)
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


def borrow(
    views: RepositoryViews, repository: str, texts: list[str], ledger: VectorLedger
) -> dict[int, Any]:
    """Position in `texts` -> a donor's vector of that very text, for those a donor holds."""
    lenders = donors(views, repository)
    if not lenders:
        return {}
    wanted = {content_hash(t): t for t in texts}
    # content hash -> vector; the ledger holds the family's every vector of this fingerprint
    found: dict[str, Any] = ledger.lookup(list(wanted), int(views.embedder.dimensions))
    chroma = views.chroma
    step = chroma.max_batch_size()
    for name, physical in lenders:
        missing = [h for h in wanted if h not in found]
        if not missing:
            break
        if ledger.covered(physical):  # what it holds, the ledger had
            continue
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
