"""Fewer glibc malloc arenas, so a run's peak memory stays near what it holds.

glibc gives each thread that allocates concurrently an arena of its own (up to 8 per core) and
rarely returns their free space; onnxruntime's and Chroma's worker threads each grow one, so
a full ingest's peak RSS sat ~60 MB above its live data (bench/README.md: hugo-docs 464 ->
406 MB with two arenas, same wall time). `mallopt(M_ARENA_MAX)` at import, before any of those
threads exist, has the effect of the MALLOC_ARENA_MAX environment variable.
HETRIEVER_MALLOC_ARENAS=0 leaves glibc's default; MALLOC_ARENA_MAX, when set, wins.
`release_free_memory()` hands freed heap pages back after a large load (`malloc_trim`).
"""

from __future__ import annotations

import ctypes
import os
import sys

M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)
DEFAULT_ARENAS = 2


def limit_arenas(environ: dict[str, str] | None = None) -> int | None:
    """Cap glibc's malloc arenas; returns the cap set, or None where nothing was changed
    (not Linux/glibc, MALLOC_ARENA_MAX already given, or switched off)."""
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in env:
        return None
    raw = env.get("HETRIEVER_MALLOC_ARENAS", str(DEFAULT_ARENAS)).strip()
    arenas = int(raw) if raw.isdigit() else DEFAULT_ARENAS
    if arenas <= 0:
        return None
    libc = _glibc()
    return arenas if libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1 else None


def release_free_memory() -> bool:
    """Hand the heap's free pages back to the system (glibc `malloc_trim(0)`): after a load
    whose temporaries were freed, so the next one's peak does not sit on top of them. False
    where there is no glibc."""
    libc = _glibc() if sys.platform.startswith("linux") else None
    return libc is not None and bool(libc.malloc_trim(0))


def resident_mb() -> tuple[float, float]:
    """(resident set now, its peak so far) of this process in MB; (0, 0) where /proc has no
    status (not Linux)."""
    try:
        lines = open("/proc/self/status", encoding="ascii").read().splitlines()
    except OSError:
        return 0.0, 0.0
    kb = {
        line.split(":")[0]: int(line.split()[1])
        for line in lines
        if line.startswith(("VmRSS:", "VmHWM:"))
    }
    return round(kb.get("VmRSS", 0) / 1024, 1), round(kb.get("VmHWM", 0) / 1024, 1)


def _glibc() -> ctypes.CDLL | None:
    """glibc, or None under another C library (musl: no arenas to cap, nothing to trim)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
