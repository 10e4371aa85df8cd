"""Past one machine: Dask workers embed, a `chroma run` server holds the chunks, and searchers
with state directories of their own follow it.

Real processes throughout: a `dask scheduler` and two `dask worker` processes, a `chroma run`
server, the ingest flow in the Prefect harness with the Dask task runner, and two `hetriever
search` subprocesses that share nothing with the ingest but the server's HTTP port. Their
results are compared with one process that ingests and searches an embedded store.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hetriever.store.catalog import Catalog
from hetriever.store.knowledge_store import clear_store_cache
from tests.support.chroma_fixtures import free_port, running_chroma_server
from tests.support.cli_runs import cli_env, run_cli
from tests.support.flow_support import run_ingest
from tests.support.helpers import build_sample_parent, commit_all, update_submodule

pytestmark = [pytest.mark.server, pytest.mark.prefect]

QUERIES = [
    "filter a collection with where",
    "page bundles and their resources",
    "front matter formats",
    "install the binary",
    "headless bundle",
    # a section heading once the FAQ exists: an exact hit from each follower's catalog
    "why is my bundle headless",
]
WORKERS = 2


def _dask(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "dask"), *args]


@pytest.fixture
def dask_cluster(tmp_path: Path) -> Iterator[str]:
    """A scheduler and two single-thread worker processes on 127.0.0.1; yields its address."""
    from distributed import Client

    address = f"tcp://127.0.0.1:{free_port()}"
    port = address.rsplit(":", 1)[1]
    procs: list[subprocess.Popen] = []
    logs = tmp_path / "dask-logs"
    logs.mkdir()
    try:
        procs.append(
            subprocess.Popen(
                _dask("scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"),
                stdout=subprocess.DEVNULL,
                stderr=(logs / "scheduler.log").open("wb"),
            )
        )
        for i in range(WORKERS):
            procs.append(
                subprocess.Popen(
                    _dask(
                        "worker",
                        address,
                        "--nworkers",
                        "1",
                        "--nthreads",
                        "1",
                        "--no-dashboard",
                        "--name",
                        f"w{i}",
                    ),
                    stdout=subprocess.DEVNULL,
                    stderr=(logs / f"worker{i}.log").open("wb"),
                )
            )
        with Client(address, timeout=60) as client:
            client.wait_for_workers(WORKERS, timeout=120)
        yield address
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _worker_counts(address: str) -> dict[str, int]:
    """Texts each worker process embedded (hetriever.embed.cluster keeps one embedder per process)."""
    from distributed import Client

    def embedded() -> int:
        from hetriever.embed import cluster

        return sum(e.texts_embedded for e in cluster._worker_embedders.values())

    with Client(address, timeout=60) as client:
        return dict(client.run(embedded))


def _search(
    docs: Path, env: dict[str, str], query: str, log: list[str] | None = None
) -> list[tuple[str, float]]:
    # -v: a search logs its INFO lines (how the follower was brought in step) only when asked
    done = run_cli(docs, env, "search", query, "--json", "-k", "5", "-v")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    if log is not None:
        log.append(done.stderr)
    return [
        (m["metadata"]["file_path"], round(m["score"], 4))
        for m in json.loads(done.stdout)["matches"]
    ]


def _followed_how(stderr: str) -> list[str]:
    """How each repository was brought in step ("cold", "files", "diff"), from JSON logs."""
    out = []
    for line in stderr.splitlines():
        if line.startswith("{") and '"repository_followed"' in line:
            out.append(json.loads(line)["how"])
    return out


def test_dask_workers_embed_and_followers_search_like_one_process(
    tmp_path, monkeypatch, minilm_model_dir, prefect_harness, dask_cluster
):
    parent, source = build_sample_parent(tmp_path)
    with running_chroma_server(tmp_path / "chroma-server") as server:
        ingest_env = {
            "HETRIEVER_CHROMA_HOST": server.host,
            "HETRIEVER_CHROMA_PORT": str(server.port),
            "HETRIEVER_STATE_DIR": str(tmp_path / "ingest-state"),
            "HETRIEVER_MODEL_DIR": str(minilm_model_dir),
            "HETRIEVER_DOCS_ROOT": str(parent),
        }
        for key, value in ingest_env.items():
            monkeypatch.setenv(key, value)
        clear_store_cache()
        followers = [
            cli_env(
                tmp_path / f"searcher{i}",
                minilm_model_dir,
                HETRIEVER_CHROMA_HOST=server.host,
                HETRIEVER_CHROMA_PORT=str(server.port),
                HETRIEVER_FOLLOW="1",
            )
            for i in (1, 2)
        ]
        single = cli_env(tmp_path / "single", minilm_model_dir)
        (tmp_path / "single").mkdir()

        def step(expect_mode: str, expect_follow: str) -> None:
            state, summary = run_ingest(task_runner=f"dask:{dask_cluster}")
            assert state.is_completed(), state.message
            (outcome,) = summary["repositories"]
            assert outcome["mode"] == expect_mode
            single_run = run_cli(parent, single, "ingest", "--json")
            assert single_run.returncode == 0, single_run.stderr[-3000:]
            logs: list[str] = []
            for query in QUERIES:
                want = _search(parent, single, query)
                assert want, query
                for env in followers:
                    assert _search(parent, env, query, logs) == want, query
            # each follower caught up once, on its first search
            assert [h for log in logs for h in _followed_how(log)] == [expect_follow] * 2

        step("full", "cold")
        counts = _worker_counts(dask_cluster)
        # The flow process did not embed: every chunk was embedded on a worker, both took part.
        assert len(counts) == WORKERS and all(n > 0 for n in counts.values()), counts
        first = sum(counts.values())

        # A change reaches the followers: new page, changed page, deleted page.
        (source / "content/docs/faq.md").write_text(
            "---\ntitle: FAQ\n---\n\nA headless bundle has no page of its own.\n\n"
            "## Why is my bundle headless?\n\nIts index file sets headless to true in its front "
            "matter, so Hugo renders no page for it but keeps its resources for other pages.\n"
        )
        bundles = source / "content/docs/content/page-bundles/index.md"
        bundles.write_text(bundles.read_text() + "\n\nBundles may also hold data files.\n")
        (source / "content/docs/install/_index.md").unlink()
        update_submodule(parent, "sample-docs", commit_all(source, "change"))
        step("incremental", "files")  # only the files the run named
        assert _search(parent, single, "why is my bundle headless")[0] == (
            "content/docs/faq.md",
            1.0,
        )
        assert sum(_worker_counts(dask_cluster).values()) > first

        # Each follower holds its own copy: catalog and BM25 under its own state directory.
        for i in (1, 2):
            assert list((tmp_path / f"searcher{i}" / "state" / "bm25").glob("*.sqlite"))
        assert not (tmp_path / "searcher1" / "chroma").exists()  # nothing embedded there
        assert server.process.poll() is None
    clear_store_cache()


def _linking(state: Path, key: str) -> set[str]:
    catalog = Catalog.for_state_dir(state)
    try:
        return catalog.pages.link_sources(catalog.active("sample-docs") or "", [key]).get(
            key, set()
        )
    finally:
        catalog.close()


def test_a_follower_that_missed_a_publish_and_a_forget(tmp_path, minilm_model_dir):
    """A follower away for two runs diffs the whole collection; a repository the ingest
    forgets leaves the manifest and followers drop their copy."""
    parent, source = build_sample_parent(tmp_path)
    with running_chroma_server(tmp_path / "chroma-server") as server:
        where = {"HETRIEVER_CHROMA_HOST": server.host, "HETRIEVER_CHROMA_PORT": str(server.port)}
        ingest = cli_env(tmp_path / "ingest", minilm_model_dir, **where)
        # Small pages, so the cold copy and the diff each read the collection in several.
        follower = cli_env(
            tmp_path / "searcher",
            minilm_model_dir,
            HETRIEVER_FOLLOW="1",
            HETRIEVER_READ_BATCH_SIZE="7",
            HETRIEVER_BATCH_SIZE="5",
            **where,
        )
        assert run_cli(parent, ingest, "ingest").returncode == 0
        done = run_cli(parent, follower, "follow", "--json", "-v")
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["repositories"] == ["sample-docs"]
        again = json.loads(run_cli(parent, follower, "follow", "--json", "-v").stdout)
        assert again["repositories"] == [] and again["added"] == 0  # nothing changed

        # Two runs while the follower was away: it missed a publish, so it diffs everything.
        for i in (1, 2):
            (source / f"content/docs/away-{i}.md").write_text(
                f"---\ntitle: Away {i}\n---\n\nWritten while the follower was away, take {i}; "
                "see [bundles](/docs/content/page-bundles/).\n"
            )
            update_submodule(parent, "sample-docs", commit_all(source, f"away {i}"))
            assert run_cli(parent, ingest, "ingest").returncode == 0
        done = run_cli(parent, follower, "follow", "--json", "-v")
        assert _followed_how(done.stderr) == ["diff"]
        assert json.loads(done.stdout)["added"] >= 2
        for query in (
            "written while the follower was away",
            "Away 2",
            "what did the pages written while the follower was away link to",
        ):
            assert _search(parent, follower, query) == _search(parent, ingest, query)
        # The links prior of questions reads the same links on both sides.
        linked = [
            _linking(tmp_path / side / "state", "url:/docs/content/page-bundles/")
            for side in ("ingest", "searcher")
        ]
        assert linked[0] == linked[1] == {"content/docs/away-1.md", "content/docs/away-2.md"}

        assert run_cli(parent, ingest, "forget", "-r", "sample-docs").returncode == 0
        done = run_cli(parent, follower, "follow", "--json", "-v")
        assert json.loads(done.stdout)["dropped"] == ["sample-docs"]
        assert not list((tmp_path / "searcher" / "state" / "bm25").glob("*.sqlite"))
        searched = run_cli(parent, follower, "search", "where", "--json")
        assert searched.returncode == 0 and json.loads(searched.stdout)["matches"] == []


def test_follow_needs_a_server(tmp_path, minilm_model_dir):
    parent, _ = build_sample_parent(tmp_path)
    done = run_cli(
        parent, cli_env(tmp_path, minilm_model_dir, HETRIEVER_FOLLOW="1"), "search", "where"
    )
    assert done.returncode == 2
    assert "needs a Chroma server" in done.stderr and "Traceback" not in done.stderr
