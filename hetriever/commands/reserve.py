"""Space kept in reserve so that reads still work on a full disk.

SQLite in WAL mode (Chroma's file, the catalog, the BM25 index) creates a `-shm` and a `-wal`
file to open a database even for reading, and a full disk refuses them: `search` and `status`
failed with "database or disk is full" although they write nothing. Every ingest keeps a
file of `RESERVE_BYTES` in each data directory's device (`.space-reserve`); a read that
fails on a full disk releases it, says so, and runs again. The next ingest that finds the
space takes the reserve back.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hetriever.core.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")
RESERVE_NAME = ".space-reserve"
RESERVE_BYTES = 2 * 1024 * 1024  # the -shm and -wal files of a few databases, many times over


def _directories(settings) -> list[Path]:
    """The data directories, one per device (the first of each)."""
    found: dict[int, Path] = {}
    candidates = [settings.resolved_state_dir]
    if not settings.chroma_host:
        candidates.append(settings.chroma_path)
    for directory in candidates:
        try:
            found.setdefault(Path(directory).stat().st_dev, Path(directory))
        except OSError:
            continue
    return list(found.values())


def keep(settings) -> None:
    """Make sure each data directory's device holds its reserve (best effort: a disk
    already too full for it is left as it is)."""
    for directory in _directories(settings):
        path = directory / RESERVE_NAME
        try:
            if path.exists() and path.stat().st_size >= RESERVE_BYTES:
                continue
            with open(path, "wb") as out:  # written, not sparse: the blocks are really taken
                for _ in range(RESERVE_BYTES // 65536):
                    out.write(b"\0" * 65536)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            path.unlink(missing_ok=True)
            log.info("space_reserve_unavailable", directory=str(directory), error=str(exc))


def release(settings) -> list[Path]:
    """Delete the reserves; the directories whose reserve was released."""
    released = []
    for directory in _directories(settings):
        path = directory / RESERVE_NAME
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        released.append(directory)
    return released


def is_disk_full(exc: BaseException, settings) -> bool:
    from hetriever.core.storage import storage_problem

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    problem = storage_problem(exc, _directories(settings))
    return problem is not None and str(problem).startswith("no space left")


def reading(settings, read: Callable[[], T], warn: Callable[[str], None]) -> T:
    """`read()`; on a full disk, once more after releasing the reserve (told to `warn`)."""
    try:
        return read()
    except Exception as exc:
        if not is_disk_full(exc, settings):
            raise
        released = release(settings)
        if not released:
            raise
        from chromadb.api.client import SharedSystemClient

        from hetriever.search.knowledge_store import clear_store_cache

        # Neither a store nor a Chroma client whose opening failed is used again (Chroma
        # caches the half-made one by path).
        clear_store_cache()
        SharedSystemClient.clear_system_cache()
        warn(f"the disk holding {', '.join(map(str, released))} is full: its space reserve "
             f"({RESERVE_BYTES // (1024 * 1024)} MiB) was released so that this read could "
             "run; free some space (the next ingest keeps a reserve again)")
        log.warning("space_reserve_released", directories=[str(d) for d in released])
        return read()
