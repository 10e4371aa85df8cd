"""A real small disk: a tmpfs of a given size mounted for one test (root, to mount it; the test
is skipped otherwise), and a file that fills it, for what a full disk does to a run."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (as mount's `size=` reads it: "1m", "12m") at `mount`, unmounted after."""
    mount.mkdir(parents=True, exist_ok=True)
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path, block: int = 65536) -> None:
    """Zeros written to `path` until the disk it is on has no room for another `block`."""
    with open(path, "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * block)
        except OSError:
            pass
