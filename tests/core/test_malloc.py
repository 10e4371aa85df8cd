"""The glibc arena cap set at import (hetriever.core.malloc): real mallopt calls."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hetriever.core.malloc import DEFAULT_ARENAS, limit_arenas

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")


@linux
def test_the_cap_is_set_unless_the_environment_says_otherwise():
    assert limit_arenas({}) == DEFAULT_ARENAS
    assert limit_arenas({"HETRIEVER_MALLOC_ARENAS": "4"}) == 4
    assert limit_arenas({"HETRIEVER_MALLOC_ARENAS": "0"}) is None
    assert limit_arenas({"MALLOC_ARENA_MAX": "8"}) is None  # glibc's own variable wins
    assert limit_arenas({"HETRIEVER_MALLOC_ARENAS": "lots"}) == DEFAULT_ARENAS


@linux
def test_a_threaded_process_uses_no_more_arenas_than_the_cap():
    # malloc_stats() prints one "Arena N:" block per arena to stderr; 8 threads alive at once
    # (the barrier: a thread that has exited hands its arena to the next one) that each make
    # small allocations (large ones are mmap'd, outside any arena) get arenas of their own
    # without the cap.
    script = (
        "import hetriever, ctypes, threading\n"
        "together = threading.Barrier(8)\n"
        "def work():\n"
        "    bufs = [bytearray(2_000) for _ in range(500)]\n"
        "    together.wait()\n"
        "ts = [threading.Thread(target=work) for _ in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "ctypes.CDLL('libc.so.6').malloc_stats()\n"
    )

    def arenas(env_value: str) -> int:
        env = {"HETRIEVER_MALLOC_ARENAS": env_value, "PATH": "/usr/bin:/bin"}
        out = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return out.stderr.count("Arena ")

    assert arenas("2") <= 2
    assert arenas("0") > 2


@linux
def test_freed_heap_pages_go_back_to_the_system():
    # Objects above pymalloc's 512 bytes and below the mmap threshold live in the C heap;
    # freed out of order they leave pages glibc keeps, and release_free_memory() hands them
    # back, which the process's RSS shows.
    script = (
        "import gc\n"
        "from hetriever.core.malloc import release_free_memory\n"
        "def rss():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS'))"
        ".split()[1])\n"
        "keep, drop = [], []\n"
        "for i in range(100_000):\n"
        "    (keep if i % 64 == 0 else drop).append(bytes(1000))\n"
        "del drop; gc.collect()\n"
        "before = rss()\n"
        "assert release_free_memory()\n"
        "print(before - rss())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert int(out) > 20_000  # kB: most of the ~100 MB freed
