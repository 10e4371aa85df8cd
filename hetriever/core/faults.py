"""Deliberate fault injection for reliability tests and drills.

Set `HETRIEVER_FAULTS` to a comma-separated list of `point:pattern:times[:kind]` rules, e.g.
`process_file:*/where.md:1` makes the first processing of any file ending in `/where.md` raise
a transient error (a retry then succeeds); `times` may be `always`; `kind` is `transient`
(default, retried), `crash` (the process exits at once, as if killed) or `slowN` (the step
takes N seconds, then goes on); an optional fifth
field lets that many hits pass first (`window_chroma_written:*:1:crash:1` dies in the second
write window). `CRASH_POINTS` lists the write steps of a run. Counts are shared
between processes (threads, Dask workers) through `HETRIEVER_FAULTS_STATE`, a directory.
Unset, `check()` costs one dict lookup.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path


class InjectedFault(OSError):
    """A transient failure injected on purpose (an OSError, so retry policies treat it as one)."""


# Every write step of an ingest run, in the order a run meets them (docs/reliability.md says
# what a crash at each leaves behind and which test kills the process there).
CRASH_POINTS = (
    "removed_file_chroma_deleted",  # a removed file's chunks left Chroma, not yet BM25
    "removed_files_deleted",  # removed files left Chroma and BM25, not yet the catalog
    "window_write",  # a window is embedded, nothing of it written
    "window_chroma_written",  # a window's chunks are in Chroma, BM25 not committed
    "replaced_chunks_deleted",  # replaced chunks left Chroma, BM25 not committed
    "window_bm25_committed",  # Chroma and BM25 hold the window, the catalog not yet
    "catalog_files_updated",  # the catalog's file rows are updated, its titles not yet
    "commit_record",  # every file stored, the commit not yet recorded
    "commit_recorded",  # the commit recorded, the catalog's run not yet closed
)


def _rules() -> list[tuple[str, str, str, str, int]]:
    spec = os.environ.get("HETRIEVER_FAULTS", "")
    rules = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        parts = item.split(":")
        if len(parts) < 3:
            continue
        point, pattern, times = parts[:3]
        kind = parts[3] if len(parts) > 3 else "transient"
        skip = int(parts[4]) if len(parts) > 4 and parts[4].isdigit() else 0
        rules.append((point, pattern, times, kind, skip))
    return rules


def _take(point: str, pattern: str, key: str) -> int:
    """Count this hit (atomically, across processes) and return how many came before it."""
    state = Path(os.environ.get("HETRIEVER_FAULTS_STATE", ".hetriever/faults"))
    state.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() else "_" for c in f"{point}-{pattern}-{key}")[:150]
    counter = state / safe
    # O_APPEND writes of one byte are atomic: the file's size is the hit count.
    fd = os.open(counter, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)
    return counter.stat().st_size - 1


def check(point: str, key: str) -> None:
    """Raise (or exit) here if a rule for `point` matches `key` and has hits left."""
    if "HETRIEVER_FAULTS" not in os.environ:
        return
    for rule_point, pattern, times, kind, skip in _rules():
        if rule_point != point or not fnmatch.fnmatch(key, pattern):
            continue
        before = _take(point, pattern, "*" if skip else key) - skip
        if before < 0:
            continue
        if times == "always" or before < int(times):
            if kind == "crash":
                os._exit(137)
            if kind.startswith("slow"):  # a step that takes long (a big window, a slow disk)
                import sys
                import time

                print(f'{{"event": "fault_slow", "point": "{point}"}}', file=sys.stderr, flush=True)
                time.sleep(float(kind[4:] or 10))
                return
            raise InjectedFault(f"injected fault at {point} for {key}")
