"""Writer locks: `fcntl.flock` on a lock file, plus a per-process lock (flock does not exclude
threads of one process that share an open file), waiting with progress up to a timeout.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from hetriever.core.errors import WriterLockedError
from hetriever.core.logs import get_logger

log = get_logger("hetriever.store")

LOCK_NOTE_SECONDS = 5.0  # a waiting writer says so this often


# flock does not exclude threads of one process that share an open file; this does.
_thread_locks: dict[str, threading.Lock] = {}


_thread_locks_guard = threading.Lock()


def _thread_lock(key: str) -> threading.Lock:
    with _thread_locks_guard:
        return _thread_locks.setdefault(key, threading.Lock())


@contextlib.contextmanager
def file_lock(path: Path, *, timeout: float, what: str) -> Iterator[None]:
    """Hold an exclusive flock on `path` (a file, created if needed, or a directory).

    Non-blocking attempts until `timeout`, then WriterLockedError naming the path.
    """
    key = str(path.resolve())
    tlock = _thread_lock(key)
    started = time.monotonic()
    deadline, next_note = started + timeout, started + LOCK_NOTE_SECONDS
    if not tlock.acquire(timeout=max(timeout, 0.0)):
        raise _locked(path, what)
    fd = -1
    try:
        if path.is_dir():
            fd = os.open(path, os.O_RDONLY)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                now = time.monotonic()
                if now >= deadline:
                    raise _locked(path, what) from None
                if now >= next_note:  # waiting is normal; say so, so it never looks hung
                    log.info(
                        "lock_wait", lock=str(path), holder=what, waited=round(now - started, 1)
                    )
                    next_note = now + LOCK_NOTE_SECONDS
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        if fd >= 0:
            os.close(fd)
        tlock.release()


def _locked(path: Path, what: str) -> WriterLockedError:
    return WriterLockedError(
        f"another process is writing {what} (lock {path} is held)",
        hint="wait for the other ingest to finish, or stop it; a lock held by a dead process "
        "is released by the OS automatically",
    )
