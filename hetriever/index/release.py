"""Between repositories: what a run held for one repository is let go before the next.

A run over many repositories (and their languages) must need the memory of its largest one,
not of all of them: after each repository the store drops its collection handles and BM25
indexes (`RepositoryViews.release`: a BM25 index keeps its whole term vocabulary after a
write), the analyzer's stem cache is emptied (it would grow with every site's words), the
garbage is collected, and the freed heap handed back to the system, so the next
repository's peak does not sit on top of the last one's leftovers. The process's resident
set is logged, which is what shows that it holds (bench/README.md, "Many sites").
"""

from __future__ import annotations

import gc
from typing import Any

from hetriever.core.logs import get_logger
from hetriever.core.malloc import release_free_memory, resident_mb
from hetriever.store.bm25.analyzer import forget_stems

log = get_logger(__name__)


def release_repository(store: Any, name: str) -> tuple[float, float]:
    """Release repository `name`'s working set in `store` (and any other stores given the
    same views, e.g. one embedding on a cluster); returns (RSS, peak RSS) in MB after."""
    try:
        store.release(name)
    except Exception as exc:  # best effort: never hide the run's own outcome or error
        log.warning("repository_release_failed", repository=name, error=str(exc))
    forget_stems()
    gc.collect()
    release_free_memory()
    rss, peak = resident_mb()
    log.info("repository_released", repository=name, rss_mb=rss, peak_rss_mb=peak)
    return rss, peak


def tidy_vectors(store: Any, name: str) -> None:
    """After a run that changed repository `name`: prune its family's vector ledger if it has
    grown (`store/donors.prune_ledger_if_grown`), and let go of what the prune read. Best
    effort: a ledger left unpruned only takes room."""
    try:
        pruned = store.tidy_vectors(name)
    except Exception as exc:
        log.warning("vector_ledger_not_pruned", repository=name, error=str(exc))
        return
    if pruned:
        gc.collect()
        release_free_memory()
