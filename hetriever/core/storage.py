"""Disk full and read-only storage, named as such.

Chroma reports a full disk as "Error in compaction: Failed to apply logs to the metadata
segment", SQLite as "database or disk is full": neither says what to do, and retrying only
fails again. `storage_problem` looks through an exception's chain for the errno or message,
and at the free space and writability of the data directories.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from hetriever.core.errors import KnowledgeStoreError

LOW_SPACE_BYTES = 8 * 1024 * 1024  # below this, a failed write is put down to a full disk
_FULL = ("no space left", "disk is full", "disk full", "quota exceeded")
_READ_ONLY = (
    "read-only file system",
    "readonly database",
    "read only",
    "attempt to write a readonly",
)


class StorageError(KnowledgeStoreError):
    """The disk is full or read-only: not retried, the run is not recorded as complete."""


def _chain(exc: BaseException | None) -> Iterable[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def storage_problem(exc: BaseException, directories: Iterable[Path]) -> StorageError | None:
    """A StorageError if `exc` comes from a full or read-only disk holding `directories`:
    the one in its chain when there is one (a layer below named it already: wrapped again,
    the message held itself, twice over)."""
    named = next((e for e in _chain(exc) if isinstance(e, StorageError)), None)
    if named is not None:
        return named
    directories = [Path(d) for d in directories]
    text = " ".join(str(e).lower() for e in _chain(exc))
    codes = {getattr(e, "errno", None) for e in _chain(exc)}
    full = bool(codes & {errno.ENOSPC, errno.EDQUOT}) or any(w in text for w in _FULL)
    read_only = errno.EROFS in codes or any(w in text for w in _READ_ONLY)
    low = [d for d in directories if d.exists() and shutil.disk_usage(d).free < LOW_SPACE_BYTES]
    if full or low:
        where = ", ".join(str(d) for d in (low or directories))
        return StorageError(
            f"no space left on the device holding {where} ({exc})",
            hint="free some space, then re-run (an ingest it stopped was "
            "not recorded as complete; the next picks up where it stopped)",
        )
    locked = [d for d in directories if d.exists() and not os.access(d, os.W_OK)]
    if read_only or locked:
        where = ", ".join(str(d) for d in (locked or directories))
        return StorageError(
            f"the storage holding {where} is read-only ({exc})",
            hint="remount it read-write or point HETRIEVER_CHROMA_PATH / "
            "HETRIEVER_STATE_DIR at a writable directory, then re-run",
        )
    return None
