"""Space kept in reserve so that reads still work on a full disk.

SQLite in WAL mode (Chroma's file, the catalog, the BM25 index) creates a `-shm` and a `-wal`
file to open a database even for reading, and a full disk refuses them: `search` and `status`
failed with "database or disk is full" although they write nothing. Every ingest keeps a
file of `RESERVE_BYTES` in each data directory's device (`.space-reserve`); a read that
fails on a full disk releases it, says so, runs again, and at its exit, its databases closed
(which removes their `-shm` and `-wal` files), takes the reserve back, so the next read on the
still full disk finds it again. Left released, the space went to whatever wrote next (a log,
another program) and every later read failed.
"""

from __future__ import annotations

import atexit
import contextlib
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


def keep(settings, *, take_what_fits: bool = False) -> None:
    """Make sure each data directory's device holds its reserve (best effort: a disk
    already too full for it is left as it is). `take_what_fits`: on a full disk keep the
    part that could be written (a read taking back what it was lent: what the read itself
    wrote, a few kB of the catalog, is missing from it)."""
    for directory in _directories(settings):
        path = directory / RESERVE_NAME
        try:
            if path.exists() and path.stat().st_size >= RESERVE_BYTES:
                continue
            with open(path, "wb") as out:  # written, not sparse: the blocks are really taken
                try:
                    for _ in range(RESERVE_BYTES // 65536):
                        out.write(b"\0" * 65536)
                    out.flush()
                finally:
                    if take_what_fits:
                        with contextlib.suppress(OSError):
                            os.fsync(out.fileno())
                os.fsync(out.fileno())
        except OSError as exc:
            if take_what_fits and path.exists() and path.stat().st_size > 0:
                log.info(
                    "space_reserve_partly_kept", directory=str(directory), bytes=path.stat().st_size
                )
                continue
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


def _close_databases() -> None:
    """Close every store and Chroma client this process holds: a store or client whose
    opening failed is not used again (Chroma caches the half-made one by path), and closed
    databases give back the space of their `-shm` and `-wal` files."""
    import gc

    from chromadb.api.client import SharedSystemClient

    from hetriever.store.knowledge_store import clear_store_cache

    clear_store_cache()
    SharedSystemClient.clear_system_cache()
    gc.collect()  # Chroma's connections close when their objects go


def reading(settings, read: Callable[[], T], warn: Callable[[str], None]) -> T:
    """`read()`; on a full disk, once more after releasing the reserve (told to `warn`), and
    then the reserve taken back for the next read."""
    try:
        return read()
    except Exception as exc:
        if not is_disk_full(exc, settings):
            raise
        released = release(settings)
        if not released:
            raise
        _close_databases()
        warn(
            f"the disk holding {', '.join(map(str, released))} is full: its space reserve "
            f"({RESERVE_BYTES // (1024 * 1024)} MiB) was released for this read and is taken "
            "back when it ends; free some space"
        )
        log.warning("space_reserve_released", directories=[str(d) for d in released])
        # Taken back once the command is done with the databases (it may open more of them
        # after `read`: links, warnings, metrics), at the process's exit.
        atexit.register(_take_back, settings)
        return read()


def _take_back(settings) -> None:
    """At exit: close the databases (their `-shm` and `-wal` files go), then keep the
    reserve again, what fits of it."""
    try:
        _close_databases()
    except Exception as exc:  # exiting anyway: the reserve is what matters here
        log.info("databases_not_closed", error=str(exc))
    keep(settings, take_what_fits=True)
