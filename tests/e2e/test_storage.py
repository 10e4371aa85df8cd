"""A full disk is named as such, not retried, and loses nothing.

A real 12 MiB tmpfs holds the Chroma directory and the state directory; after a first ingest,
a filler file takes the rest of the space and the next ingest (new pages) fails. Needs root to
mount (skipped otherwise).
"""

from __future__ import annotations

import json

import pytest

from tests.support.cli_runs import (
    assert_equals_fresh_pass,
    cli_env,
    open_store,
    pages_repo,
    run_cli,
    write_pages,
)
from tests.support.small_disk import fill, small_tmpfs


@pytest.fixture
def small_disk(tmp_path):
    with small_tmpfs(tmp_path / "small-disk", "12m") as mount:
        yield mount


@pytest.mark.slow
def test_a_full_disk_is_named_not_retried_and_the_next_run_completes(
    tmp_path, small_disk, minilm_model_dir, minilm_embedder
):
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


@pytest.mark.slow
def test_search_and_status_answer_on_a_full_disk_and_json_errors_are_json(
    tmp_path, small_disk, minilm_model_dir
):
    # SQLite opens a WAL database, even to read it, by creating its -shm and -wal files: a
    # full disk refused them and search and status, which write nothing, failed.
    docs = pages_repo(tmp_path, n=20)
    env = cli_env(small_disk, minilm_model_dir)
    assert run_cli(docs, env, "ingest").returncode == 0
    assert (small_disk / "state" / ".space-reserve").stat().st_size == 2 * 1024 * 1024
    write_pages(docs, 200, 2)
    fill(small_disk / "filler")

    failed = run_cli(docs, env, "ingest", "--json")
    assert failed.returncode == 1, failed.stderr[-2000:]
    error = json.loads(failed.stdout)  # the outcome a script reads, where it reads it
    assert error["ok"] is False and error["exit_code"] == 1
    assert error["error"].startswith("no space left on the device holding")
    said = failed.stdout + failed.stderr
    assert said.count("no space left") == 1 and "hetriever: error" not in said  # said once
    assert "Traceback" not in failed.stderr

    found = run_cli(docs, env, "search", "alpha", "--json")
    assert found.returncode == 0, found.stdout + found.stderr[-2000:]
    answer = json.loads(found.stdout)
    assert answer["matches"] and any("is full" in w for w in answer["warnings"])
    status = run_cli(docs, env, "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr[-2000:]
    (row,) = json.loads(status.stdout)
    assert row["chunks"] == 20 and not row["up_to_date"]  # v1 still, v2 checked out
    plain = run_cli(docs, env, "search", "alpha")
    assert plain.returncode == 0 and "1. " in plain.stdout, plain.stderr[-2000:]

    (small_disk / "filler").unlink()  # space again: the next ingest completes, reserve back
    again = run_cli(docs, env, "ingest", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)[0]["ok"], again.stderr[-2000:]
    assert (small_disk / "state" / ".space-reserve").stat().st_size == 2 * 1024 * 1024


@pytest.mark.slow
def test_reads_answer_on_a_full_disk_every_time_and_the_write_error_is_said_once(
    tmp_path, small_disk, minilm_model_dir
):
    # The reserve a read released used to stay released: once something took that space
    # (here a second filler, as a log or another program would), every later search and
    # status exited 1.
    docs = pages_repo(tmp_path, n=20)
    env = cli_env(small_disk, minilm_model_dir)
    assert run_cli(docs, env, "ingest").returncode == 0
    write_pages(docs, 200, 2)
    fill(small_disk / "filler")
    failed = run_cli(docs, env, "ingest")
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert failed.stderr.count("no space left") == 1, failed.stderr[-3000:]  # not nested
    for attempt in range(3):
        found = run_cli(docs, env, "search", "alpha", "--json")
        assert found.returncode == 0, (attempt, found.stdout[-2000:], found.stderr[-2000:])
        assert json.loads(found.stdout)["matches"]
        fill(small_disk / f"filler-{attempt}")  # whatever was freed is taken again
        status = run_cli(docs, env, "status", "--json")
        assert status.returncode == 0, (attempt, status.stdout[-2000:], status.stderr[-2000:])
        assert json.loads(status.stdout)[0]["chunks"] == 20
        fill(small_disk / f"filler-status-{attempt}")
    for name in (
        ["filler"] + [f"filler-{i}" for i in range(3)] + [f"filler-status-{i}" for i in range(3)]
    ):
        (small_disk / name).unlink()
    again = run_cli(docs, env, "ingest", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)[0]["ok"], again.stderr[-2000:]
    assert (small_disk / "state" / ".space-reserve").stat().st_size == 2 * 1024 * 1024
