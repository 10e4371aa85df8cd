"""Concurrent use: two ingests of one repository, and searches while an ingest writes.

Everything is real: `hetriever ingest` CLI subprocesses on one embedded Chroma directory, and
searcher threads in this process reading that directory while a subprocess rewrites it. Every
wait is bounded, so a deadlock fails the test instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from structlog.testing import capture_logs

from hetriever.core.names import content_hash
from hetriever.index.indexing import index_repository, run_lock
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from tests.support.chroma_fixtures import store_settings
from tests.support.cli_runs import (
    PAGES,
    REPO_NAME,
    RUN_TIMEOUT,
    WORDS,
    LogWatcher,
    assert_equals_fresh_pass,
    cli_command,
    cli_env,
    ingest_ok,
    open_store,
    pages_repo,
    run_cli,
    the_repo,
    write_pages,
)
from tests.support.flow_support import stored
from tests.support.helpers import commit_all, init_repo, write_files

pytestmark = pytest.mark.slow  # CLI subprocesses

SEARCH_SECONDS = 10.0
SEARCHERS = 4
OTHER = "other-docs"


def run(coro):
    return asyncio.run(coro)


def _start_ingest(docs, env):
    return subprocess.Popen(
        cli_command(docs, "ingest", "--json"),
        env=env,
        cwd=docs.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("an ingest run hung") from None
    return proc.returncode, out, err


def test_two_ingests_started_together_both_finish_and_the_index_is_whole(
    tmp_path, minilm_embedder, minilm_model_dir
):
    docs = pages_repo(tmp_path)
    env = cli_env(tmp_path, minilm_model_dir)
    procs = [_start_ingest(docs, env) for _ in range(2)]
    results = [_finish(p) for p in procs]
    for code, _, err in results:
        assert code == 0, err[-3000:]
        assert "Traceback" not in err
    outcomes = [json.loads(out)[0] for _, out, _ in results]
    assert all(o["ok"] and o["completed"] for o in outcomes)
    # one run embedded everything; the other waited for the lock and then had nothing to embed
    assert sorted(o["chunks_written"] for o in outcomes) == [0, PAGES]

    store = open_store(tmp_path, minilm_embedder)
    try:
        got = assert_equals_fresh_pass(store, docs, minilm_model_dir)
        assert run(store.count(REPO_NAME)) == len(got) == PAGES  # no duplicates, no orphans
    finally:
        store.close_sync()


OPEN_STORE = """
import sys, time
from hetriever.core.config import load_settings
from hetriever.store.knowledge_store import Store
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))  # every process opens at one moment
store = Store(load_settings())
print(store.chroma.collection_names())
"""


def test_processes_opening_one_fresh_directory_together_all_succeed(tmp_path, minilm_model_dir):
    # Chroma itself fails here: every process creates the tables of a fresh directory and all
    # but one get "table collections already exists" (two ingests started together hit it).
    for trial in range(3):
        env = cli_env(tmp_path / f"trial-{trial}", minilm_model_dir)
        start = str(time.time() + 5.0)  # after every process has imported hetriever
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN_STORE, start],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for proc in procs:
            code, out, err = _finish(proc)
            assert code == 0, err[-2000:]
            assert out.strip() == "[]"


def test_a_long_lived_store_sees_what_another_process_wrote(
    tmp_path, minilm_embedder, minilm_model_dir
):
    # Embedded Chroma loads a collection's vector index once per process: without a reload, a
    # searcher that outlives an ingest keeps the old neighbours (deleted, so no documents) and
    # never finds the new chunks. Only the dense side is asked here; BM25 reloads on its own.
    docs = pages_repo(tmp_path, 40)
    env = cli_env(tmp_path, minilm_model_dir)
    ingest_ok(docs, env)
    store = open_store(tmp_path, minilm_embedder)
    try:
        query = "alpha bravo charlie page7"
        before = hybrid_search(
            store, SearchRequest(query, top_k=5, repositories=[REPO_NAME], hybrid=False)
        )
        assert len(before.matches) == 5
        assert all("version1" in m.content for m in before.matches)

        write_pages(docs, 40, 2)  # every chunk changes: new ids, the old ones deleted
        ingest_ok(docs, env)
        with capture_logs() as logs:
            after = hybrid_search(
                store, SearchRequest(query, top_k=5, repositories=[REPO_NAME], hybrid=False)
            )
        assert len(after.matches) == 5
        assert all("version2" in m.content for m in after.matches)
        assert not [e for e in logs if e["event"] == "result_without_content"]
    finally:
        store.close_sync()


def test_a_second_ingest_that_may_not_wait_exits_with_the_lock_message(
    tmp_path, minilm_embedder, minilm_model_dir
):
    docs = pages_repo(tmp_path)
    env = cli_env(tmp_path, minilm_model_dir)
    first = ingest_ok(docs, env)[0]["new_commit"]
    write_pages(docs, PAGES, 2)
    # This process holds the repository's run lock as a running ingest does (the same lock,
    # taken the same way), for as long as the second ingest needs: no race with a fast run.
    settings = store_settings(tmp_path)
    with run_lock(settings, REPO_NAME, timeout=0):
        second = subprocess.run(
            cli_command(docs, "ingest", "--json"),
            cwd=tmp_path,
            env={**env, "HETRIEVER_RUN_LOCK_TIMEOUT": "0"},
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
    assert second.returncode == 1 and "Traceback" not in second.stderr
    (outcome,) = json.loads(second.stdout)
    assert outcome["ok"] is False
    assert f"another process is writing an ingest run of {REPO_NAME!r}" in outcome["error"]

    store = open_store(tmp_path, minilm_embedder)
    try:  # the refused run changed nothing
        assert run(store.get_collection_metadata(REPO_NAME))["commit_hash"] == first
    finally:
        store.close_sync()
    ingest_ok(docs, env)  # the lock is free again
    store = open_store(tmp_path, minilm_embedder)
    try:
        assert len(assert_equals_fresh_pass(store, docs, minilm_model_dir)) == PAGES
    finally:
        store.close_sync()


def test_searches_while_another_process_reindexes_stay_consistent(
    tmp_path, minilm_embedder, minilm_model_dir
):
    docs = pages_repo(tmp_path)
    other = init_repo(tmp_path / "more" / OTHER)
    write_files(
        other,
        {
            f"content/docs/o-{i}.md": f"---\ntitle: Other {i}\n---\n\n"
            f"{' '.join(WORDS[i : i + 12])} other{i} lives in another repository.\n"
            for i in range(8)
        },
    )
    commit_all(other, "other docs")
    store = open_store(tmp_path, minilm_embedder, run_lock_timeout=30.0)
    try:
        run(index_repository(the_repo(docs), store, store.settings))
        run(index_repository(the_repo(other.parent, OTHER), store, store.settings))
        write_pages(docs, PAGES, 2)  # every page changes: the whole collection is rewritten

        env = cli_env(tmp_path, minilm_model_dir, HETRIEVER_LOG_LEVEL="INFO")
        proc = subprocess.Popen(
            cli_command(docs, "ingest", "--json"),
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        watcher = LogWatcher(proc)
        problems: list[str] = []
        seen = Counter()
        stop = threading.Event()

        def searcher(seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set():
                query = " ".join(rng.sample(WORDS, 3)) + f" page{rng.randrange(PAGES)}"
                hybrid = rng.random() < 0.8
                try:
                    result = hybrid_search(
                        store,
                        SearchRequest(query, top_k=5, repositories=[REPO_NAME], hybrid=hybrid),
                    )
                except Exception as exc:  # noqa: BLE001 - any error is a finding
                    problems.append(f"{type(exc).__name__}: {exc}")
                    continue
                seen["searches"] += 1
                seen["results"] += len(result.matches)
                seen[result.mode] += 1
                for m in result.matches:
                    if m.metadata.get("repository") != REPO_NAME:
                        problems.append(f"out of scope: {m.metadata}")
                    if content_hash(m.content) != m.metadata.get("content_hash"):
                        problems.append(f"hash mismatch: {m.doc_id}")
                    if "/page-" not in str(m.metadata.get("file_path")):
                        problems.append(f"unexpected file: {m.metadata.get('file_path')}")

        with capture_logs() as logs:
            watcher.wait_for("index_started")
            threads = [
                threading.Thread(target=searcher, args=(i,), daemon=True) for i in range(SEARCHERS)
            ]
            for t in threads:
                t.start()
            deadline = time.monotonic() + SEARCH_SECONDS
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.1)
            # the loop ends at the deadline or when the ingest exits: all of these overlapped it
            while_writing = seen["searches"]
            stop.set()
            for t in threads:
                t.join(timeout=30)
            assert not any(t.is_alive() for t in threads), "a searcher hung"
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
        watcher.rest()
        assert proc.returncode == 0, watcher.rest()[-3000:]
        assert json.loads(out)[0]["completed"]

        assert while_writing >= SEARCHERS, seen
        assert problems == [], problems[:5]
        assert seen["results"] > 0
        # no retriever silently failed, nothing was dropped for being inconsistent
        bad = {
            "dense_retrieval_failed",
            "bm25_retrieval_failed",
            "result_hash_mismatch",
            "result_out_of_scope",
        }
        assert [e for e in logs if e["event"] in bad] == []

        # afterwards: the new version everywhere, the other repository untouched
        got = assert_equals_fresh_pass(store, docs, minilm_model_dir)
        assert all("version2" in t for _, t in got.values())
        assert len(stored(store, OTHER)) == 16  # a page record and a body chunk each
    finally:
        store.close_sync()


def test_ingests_of_two_repositories_into_one_directory_wait_for_each_other(
    tmp_path, minilm_model_dir
):
    # One embedded directory has one writer at a time. The first ingest's window takes 15 s
    # (injected), longer than the lock used to wait: the second must wait, saying so, and finish.
    from tests.support.cli_runs import LogWatcher, cli_command

    docs = tmp_path / "docs"
    for name in ("alpha-docs", "bravo-docs"):
        repo = init_repo(docs / name)
        write_pages(repo, 4, 1)
    env = cli_env(tmp_path, minilm_model_dir, HETRIEVER_LOG_LEVEL="INFO")
    slow = subprocess.Popen(
        cli_command(docs, "ingest", "-r", "alpha-docs", "--json"),
        env={**env, "HETRIEVER_FAULTS": "window_write:*:1:slow15"},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watcher = LogWatcher(slow)
    try:
        watcher.wait_for("fault_slow")  # alpha holds the directory for 15 s from here
        began = time.monotonic()
        second = run_cli(docs, env, "ingest", "-r", "bravo-docs", "--json")
        waited = time.monotonic() - began
        slow.wait(timeout=RUN_TIMEOUT)
    finally:
        if slow.poll() is None:
            slow.kill()
            slow.wait()
    watcher.rest()
    assert second.returncode == 0, second.stderr[-2000:]
    assert slow.returncode == 0
    assert waited > 10  # it really waited past the old 10 s limit ...
    assert '"lock_wait"' in second.stderr  # ... and said so while waiting
    assert json.loads(second.stdout)[0]["files_indexed"] == 4
