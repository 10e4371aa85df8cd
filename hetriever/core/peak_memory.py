"""This process's own peak resident memory, for benchmarks and bounds.

`getrusage(RUSAGE_SELF).ru_maxrss` is not that figure for a child process: Linux carries the
parent's high-water mark across fork and exec, so a child started by a 1.5 GB pytest worker
reports at least 1.5 GB however little it used itself. `VmHWM` in /proc/self/status is the
high-water mark of the memory map this process runs in now, which exec starts afresh.
"""

from __future__ import annotations

import resource
from pathlib import Path


def own_peak_rss_mb() -> float:
    """Peak resident set size of this process since its last exec, in MB (MiB)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    # Without /proc (not Linux): the rusage figure, which includes an inherited high-water mark.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
