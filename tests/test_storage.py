"""A full disk is named as such, not retried, and loses nothing.

A real 12 MiB tmpfs holds the Chroma directory and the state directory; after a first ingest,
a filler file takes the rest of the space and the next ingest (new pages) fails. Needs root to
mount (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.test_faults import (
    assert_equals_fresh_pass,
    cli_env,
    open_store,
    pages_repo,
    run_cli,
    write_pages,
)


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mount)],
            capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path):
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


@pytest.mark.slow
def test_a_full_disk_is_named_not_retried_and_the_next_run_completes(
        tmp_path, small_disk, minilm_model_dir, minilm_embedder):
    docs = pages_repo(tmp_path, n=20)
    env = cli_env(small_disk, minilm_model_dir, HETRIEVER_LOG_LEVEL="INFO")
    assert run_cli(docs, env, "ingest").returncode == 0
    write_pages(docs, 200, 2)  # every page changes, 180 new ones
    filler = small_disk / "filler"
    fill(filler)

    done = run_cli(docs, env, "ingest", "--json")
    assert done.returncode in (1, 2), done.stderr[-2000:]
    said = done.stdout + done.stderr
    assert "no space left" in said, said[-3000:]
    assert "chroma_retry" not in done.stderr  # not retried
    assert "Traceback" not in done.stderr

    filler.unlink()
    again = run_cli(docs, env, "ingest", "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)[0]["ok"]
    store = open_store(small_disk, minilm_embedder)
    try:
        assert len(assert_equals_fresh_pass(store, docs, minilm_model_dir)) == 200
    finally:
        store.close_sync()
