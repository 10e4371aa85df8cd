"""Faults during ingest: nothing lost, nothing half-written, the commit recorded only when true.

Each case breaks a real run (the `hetriever` CLI in a subprocess killed with SIGKILL or by an
injected crash, a `chroma run` server stopped mid-write, a data directory that cannot be used,
an embedder that fails on some chunks) and then checks what is on disk: the collection metadata
right after the failure, and after the next run the whole index against a fresh full pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tests.support.chroma_fixtures as chroma_fixtures
from hetriever.core.errors import EmbeddingError
from hetriever.index.indexing import index_repository
from hetriever.index.run_record import STATUS_INDEXING
from tests.support.chroma_fixtures import running_chroma_server, stop_chroma_server
from tests.support.cli_runs import (
    PAGES,
    REPO_NAME,
    RUN_TIMEOUT,
    WINDOW,
    LogWatcher,
    assert_equals_fresh_pass,
    cli_command,
    cli_env,
    ingest_ok,
    open_store,
    page_text,
    pages_repo,
    run_cli,
    signal_when,
    the_repo,
    write_pages,
)
from tests.support.flow_support import stored
from tests.support.helpers import commit_all, init_repo, run, write_files

# --- (1) the process dies mid-run ----------------------------------------------------------


@pytest.mark.slow
def test_sigkill_mid_first_run_then_the_next_run_completes(
    tmp_path, minilm_embedder, minilm_model_dir
):
    docs = pages_repo(tmp_path)
    env = cli_env(tmp_path, minilm_model_dir, HETRIEVER_LOG_LEVEL="DEBUG")
    proc = subprocess.Popen(
        cli_command(docs, "ingest", "--json"),
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    watcher = LogWatcher(proc)
    try:
        watcher.wait_for("files_written")  # the first window is in Chroma and BM25
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        watcher.rest()
    assert proc.returncode == -signal.SIGKILL

    store = open_store(tmp_path, minilm_embedder)
    try:
        meta = run(store.get_collection_metadata(REPO_NAME))
        assert meta["index_status"] == STATUS_INDEXING
        assert meta["commit_hash"] == ""  # never recorded: the data is incomplete
        assert 0 < run(store.count(REPO_NAME)) < PAGES
    finally:
        store.close_sync()

    outcomes = ingest_ok(docs, cli_env(tmp_path, minilm_model_dir))
    assert outcomes[0]["mode"] == "full"
    store = open_store(tmp_path, minilm_embedder)
    try:
        got = assert_equals_fresh_pass(store, docs, minilm_model_dir)
        assert len(got) == PAGES
    finally:
        store.close_sync()


@pytest.mark.slow
def test_sigterm_mid_run_closes_the_run_and_the_next_run_completes(
    tmp_path, minilm_embedder, minilm_model_dir
):
    # SIGTERM is what `docker stop`, systemd and Kubernetes send. It comes while the first
    # write window is under way on the worker thread that embeds and writes (held 5 s there).
    docs = pages_repo(tmp_path)
    env = cli_env(tmp_path, minilm_model_dir)
    proc = subprocess.Popen(
        cli_command(docs, "ingest", "--json"),
        env={**env, "HETRIEVER_FAULTS": "window_write:*:1:slow5"},
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log_text = signal_when(proc, "fault_slow", signal.SIGTERM)
    assert proc.returncode == 143, log_text[-3000:]
    assert "hetriever: stopped by SIGTERM" in log_text and "Traceback" not in log_text

    status = run_cli(docs, env, "status", "--json")
    row = json.loads(status.stdout)[0]
    assert row["last_run_outcome"] == "interrupted"  # not "running"
    assert row["status"] == "incomplete"  # not "indexing": nothing is
    store = open_store(tmp_path, minilm_embedder)
    try:
        meta = run(store.get_collection_metadata(REPO_NAME))
        assert meta["index_status"] == STATUS_INDEXING and meta["commit_hash"] == ""
        assert run(store.count(REPO_NAME)) == WINDOW  # the window under way was finished
    finally:
        store.close_sync()

    # The run lock was let go: a run that may not wait for it starts at once.
    outcomes = ingest_ok(docs, {**env, "HETRIEVER_RUN_LOCK_TIMEOUT": "0"})
    assert outcomes[0]["mode"] == "full" and outcomes[0]["chunks_reused"] == WINDOW
    store = open_store(tmp_path, minilm_embedder)
    try:
        assert len(assert_equals_fresh_pass(store, docs, minilm_model_dir)) == PAGES
    finally:
        store.close_sync()


@pytest.mark.slow
def test_crash_on_the_nth_file_of_an_incremental_run(tmp_path, minilm_embedder, minilm_model_dir):
    docs = pages_repo(tmp_path)
    env = cli_env(tmp_path, minilm_model_dir)
    v1 = ingest_ok(docs, env)[0]["new_commit"]

    # v2 edits every page, deletes ten, adds five: the run has work in both write windows
    for i in range(PAGES - 10, PAGES):
        (docs / f"content/docs/page-{i:03d}.md").unlink()
    write_pages(docs, PAGES - 10, 2)
    write_files(docs, {f"content/docs/new-{i}.md": page_text(1000 + i, 2) for i in range(5)})
    v2 = commit_all(docs, "v2")

    crash = cli_env(tmp_path, minilm_model_dir, HETRIEVER_FAULTS="write_file:*/page-280.md:1:crash")
    done = run_cli(docs, crash, "ingest", "--json")
    assert done.returncode == 137, done.stderr[-2000:]

    store = open_store(tmp_path, minilm_embedder)
    try:
        meta = run(store.get_collection_metadata(REPO_NAME))
        assert meta["commit_hash"] == v1  # not advanced before the data was complete
        assert meta["index_status"] == STATUS_INDEXING and meta["indexing_commit"] == v2
        texts = [t for _, t in stored(store, REPO_NAME).values()]
        assert any("version2" in t for t in texts) and any("version1" in t for t in texts)
    finally:
        store.close_sync()

    outcomes = ingest_ok(docs, env)
    assert outcomes[0]["mode"] == "full"  # reconciled: the unfinished run is not trusted
    store = open_store(tmp_path, minilm_embedder)
    try:
        got = assert_equals_fresh_pass(store, docs, minilm_model_dir)
        assert len(got) == PAGES - 10 + 5
        assert not any("version1" in t for _, t in got.values())
    finally:
        store.close_sync()


# --- (2) the Chroma server goes away mid-ingest ----------------------------------------------


@pytest.mark.server
def test_chroma_server_stopped_mid_ingest_then_restarted(
    tmp_path, minilm_embedder, minilm_model_dir, monkeypatch
):
    docs = pages_repo(tmp_path)
    data = tmp_path / "server-data"
    with running_chroma_server(data) as server:
        env = cli_env(
            tmp_path,
            minilm_model_dir,
            HETRIEVER_LOG_LEVEL="DEBUG",
            HETRIEVER_CHROMA_HOST=server.host,
            HETRIEVER_CHROMA_PORT=str(server.port),
        )
        proc = subprocess.Popen(
            cli_command(docs, "ingest", "--json"),
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        watcher = LogWatcher(proc)
        try:
            watcher.wait_for("files_written")
            stop_chroma_server(server)
            out = proc.stdout.read() if proc.stdout else ""
            proc.wait(timeout=RUN_TIMEOUT)  # bounded: retries give up, nothing hangs
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log_text = watcher.rest()
    assert proc.returncode == 1
    (outcome,) = json.loads(out)
    assert outcome["ok"] is False
    assert "Chroma server stopped answering" in outcome["error"]
    assert "chroma run" in outcome["error"]  # says what to do
    assert "Traceback" not in log_text
    assert any(
        json.loads(line).get("event") == "repository_failed"
        for line in log_text.splitlines()
        if line.startswith("{")
    )

    # same data directory, same port: the next run repairs everything
    monkeypatch.setattr(chroma_fixtures, "free_port", lambda: server.port)
    with running_chroma_server(data) as again:
        store = open_store(
            tmp_path, minilm_embedder, chroma_host=again.host, chroma_port=again.port
        )
        try:
            meta = run(store.get_collection_metadata(REPO_NAME))
            assert meta["commit_hash"] == "" and meta["index_status"] == STATUS_INDEXING
            done = run_cli(docs, {**env, "HETRIEVER_LOG_LEVEL": "INFO"}, "ingest", "--json")
            assert done.returncode == 0, done.stderr[-2000:]
            got = assert_equals_fresh_pass(store, docs, minilm_model_dir)
            assert len(got) == PAGES
        finally:
            store.close_sync()


# --- (3) data directories that cannot be used -------------------------------------------------


def _blocked(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    return blocker


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "where", "command"),
    [
        ("HETRIEVER_CHROMA_PATH", "is_a_file", ("ingest",)),
        ("HETRIEVER_CHROMA_PATH", "under_a_file", ("search", "alpha")),
        ("HETRIEVER_STATE_DIR", "is_a_file", ("search", "alpha")),
        ("HETRIEVER_STATE_DIR", "under_a_file", ("ingest",)),
    ],
)
def test_unusable_data_directory_is_one_clear_line(
    tmp_path, minilm_model_dir, setting, where, command
):
    docs = pages_repo(tmp_path, n=3)
    blocker = _blocked(tmp_path)
    bad = blocker if where == "is_a_file" else blocker / "data"
    env = cli_env(tmp_path, minilm_model_dir, **{setting: str(bad)})
    done = run_cli(docs, env, *command)
    assert done.returncode == 2, (done.stdout, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("hetriever: error:")]
    assert len(errors) == 1, done.stderr
    assert str(bad) in errors[0] or str(blocker) in errors[0]
    assert "writable director" in errors[0]  # says what to do
    assert blocker.read_text() == "not a directory\n"  # and nothing was written over it


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root ignores permission bits; the file-based cases above fail for root too",
)
def test_read_only_chroma_directory_is_one_clear_line(tmp_path, minilm_model_dir):
    docs = pages_repo(tmp_path, n=3)
    locked = tmp_path / "chroma"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        done = run_cli(docs, cli_env(tmp_path, minilm_model_dir), "ingest")
    finally:
        locked.chmod(0o700)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "hetriever: error:" in done.stderr


# --- (4) embedding fails for some chunks ---------------------------------------------------------

MARKER = "zqxfailzq"


class MarkerEmbedder:
    """The real model, failing for any batch that holds a text containing MARKER.

    `failures` is how many such batches fail (None: all of them), so both a transient and a
    persistent failure can be played.
    """

    def __init__(self, inner: Any, failures: int | None) -> None:
        self.inner, self.failures = inner, failures
        self.marker_batches = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    def embed(self, texts):
        if any(MARKER in t for t in texts):
            self.marker_batches += 1
            if self.failures is None or self.marker_batches <= self.failures:
                raise EmbeddingError(f"injected: cannot embed a text with {MARKER}")
        return self.inner.embed(texts)


@pytest.fixture
def small_docs(tmp_path):
    repo = init_repo(tmp_path / REPO_NAME)
    write_pages(repo, 12, 1)
    return repo


def _edit_for_v2(repo: Path) -> str:
    """Page 3 gains a paragraph with the marker (and a heading: a second chunk); page 5 changes."""
    p3 = repo / "content/docs/page-003.md"
    p3.write_text(
        p3.read_text() + f"\n## Poisoned\n\nThis paragraph carries {MARKER} and some "
        "ordinary words about templates, taxonomies and page bundles in Hugo sites.\n"
    )
    (repo / "content/docs/page-005.md").write_text(page_text(5, 2))
    return commit_all(repo, "v2")


def _chunks_of(got: dict, path: str) -> dict:
    return {i: t for i, (p, t) in got.items() if p == path}


def test_embedding_failure_reports_the_file_and_keeps_its_old_chunks(
    tmp_path, small_docs, minilm_embedder
):
    good = open_store(tmp_path, minilm_embedder, run_lock_timeout=5.0)
    v1 = run(index_repository(the_repo(small_docs), good, good.settings)).new_commit
    before = stored(good, REPO_NAME)
    good.close_sync()
    v2 = _edit_for_v2(small_docs)

    flaky = MarkerEmbedder(minilm_embedder, failures=None)
    bad = open_store(tmp_path, flaky, run_lock_timeout=5.0)
    try:
        result = run(index_repository(the_repo(small_docs), bad, bad.settings))
    finally:
        bad.close_sync()
    assert flaky.marker_batches >= 3  # retried before giving up
    assert result.completed is False
    assert [f.path for f in result.failed] == ["content/docs/page-003.md"]
    assert "embedding" in result.failed[0].reason

    store = open_store(tmp_path, minilm_embedder, run_lock_timeout=5.0)
    try:
        after = stored(store, REPO_NAME)
        # the failed file: exactly its old chunks, none of its new ones
        assert _chunks_of(after, "content/docs/page-003.md") == _chunks_of(
            before, "content/docs/page-003.md"
        )
        assert MARKER not in " ".join(t for _, t in after.values())
        # the other edited file went through
        assert "version2" in " ".join(_chunks_of(after, "content/docs/page-005.md").values())
        meta = run(store.get_collection_metadata(REPO_NAME))
        assert meta["commit_hash"] == v1 and meta["index_status"] == STATUS_INDEXING

        # once the embedder works again, the next run completes and matches a fresh pass
        repaired = run(index_repository(the_repo(small_docs), store, store.settings))
        assert repaired.completed and repaired.new_commit == v2 and not repaired.failed
        assert MARKER in " ".join(t for _, t in stored(store, REPO_NAME).values())
        assert_equals_fresh_pass(store, small_docs, minilm_embedder.model_dir)
    finally:
        store.close_sync()


def test_transient_embedding_failure_is_retried_and_nothing_is_lost(
    tmp_path, small_docs, minilm_embedder
):
    good = open_store(tmp_path, minilm_embedder, run_lock_timeout=5.0)
    run(index_repository(the_repo(small_docs), good, good.settings))
    good.close_sync()
    _edit_for_v2(small_docs)

    flaky = MarkerEmbedder(minilm_embedder, failures=1)
    store = open_store(tmp_path, flaky, run_lock_timeout=5.0)
    try:
        result = run(index_repository(the_repo(small_docs), store, store.settings))
        assert result.completed and not result.failed
        assert flaky.marker_batches == 2  # failed once, then succeeded
        assert_equals_fresh_pass(store, small_docs, minilm_embedder.model_dir)
    finally:
        store.close_sync()
