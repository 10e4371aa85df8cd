"""The `hetriever` command line, as a user runs it (a real subprocess, real repos, real Chroma)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.chroma_fixtures import free_port
from tests.support.helpers import REPO_ROOT, commit_all, init_repo

HETRIEVER = Path(sys.executable).parent / "hetriever"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, minilm_model_dir):
    root = tmp_path_factory.mktemp("cli")
    repo = init_repo(root / "docs" / "sample-docs")
    shutil.copytree(REPO_ROOT / "examples" / "sample-docs", repo, dirs_exist_ok=True)
    commit_all(repo, "sample")
    env = {
        **os.environ,
        "HETRIEVER_DOCS_ROOT": str(root / "docs"),
        "HETRIEVER_CHROMA_PATH": str(root / "chroma"),
        "HETRIEVER_STATE_DIR": str(root / "state"),
        "HETRIEVER_MODEL_DIR": str(minilm_model_dir),
        "HETRIEVER_LOG_LEVEL": "WARNING",
    }
    return root, env


def cli(env, *args, cwd=None):
    return subprocess.run(
        [str(HETRIEVER), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_ingest_search_status_metrics(workspace):
    root, env = workspace
    out = cli(env, "ingest", "--json")
    assert out.returncode == 0, out.stderr
    (result,) = json.loads(out.stdout)
    assert result["ok"] and result["mode"] == "full" and result["files_indexed"] == 7

    out = cli(env, "ingest", "--json")
    assert json.loads(out.stdout)[0]["mode"] == "noop"

    out = cli(env, "search", "where function operators", "-k", "3", "--json")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["matches"][0]["metadata"]["url"] == "/docs/templates/where/"
    assert all(0.0 <= m["score"] <= 1.0 for m in found["matches"])

    out = cli(env, "search", "where", "--filter", '{"section": "blog"}', "--json")
    assert {m["metadata"]["section"] for m in json.loads(out.stdout)["matches"]} <= {"blog"}

    text = cli(env, "search", "install sample on linux")
    assert text.returncode == 0 and "Install Sample" in text.stdout  # results on stdout

    out = cli(env, "status", "--json")
    (row,) = json.loads(out.stdout)
    assert row["up_to_date"] and row["chunks"] > 0

    out = cli(env, "metrics", "--json")
    assert json.loads(out.stdout)["count"] == 3


@pytest.mark.slow
def test_search_prints_results_to_stdout_and_rejects_an_unknown_repository(workspace):
    _, env = workspace
    assert cli(env, "ingest", "--json").returncode == 0  # full, or a no-op after the test above
    out = cli(env, "search", "where function operators", "-k", "2")
    assert out.returncode == 0, out.stderr
    assert "results" in out.stdout and "where" in out.stdout.lower()  # `| head` shows them
    assert "results" not in out.stderr
    # the page's full address, from the site's baseURL (examples/sample-docs/hugo.toml)
    assert "sample-docs  https://docs.example.org/docs/templates/where/" in out.stdout
    out = cli(env, "search", "where function operators", "-k", "2", "--json")
    first = json.loads(out.stdout)["matches"][0]
    assert first["link"] == "https://docs.example.org" + first["metadata"]["url"]

    # a repository named as its directory might be (`Sample.Docs` is sample-docs' form)
    out = cli(env, "search", "where", "-r", "Sample.Docs", "-k", "1", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["matches"][0]["metadata"]["repository"] == "sample-docs"

    out = cli(env, "search", "where", "-r", "sampel-docs")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "unknown repositories: sampel-docs" in out.stderr
    assert "known: sample-docs" in out.stderr
    assert out.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,env_extra,message",
    [
        (["search", "x", "--filter", "{not json"], {}, "--filter is not valid JSON"),
        (["search", "x", "--filter", '{"a": {"$regex": "."}}'], {}, "$regex"),
        (["search", "x", "-k", "1000"], {}, "1000"),
        (["ingest", "-r", "missing-docs"], {}, "unknown repositories: missing-docs"),
        (["migrate", "-r", "missing-docs"], {}, "unknown repositories: missing-docs"),
        (["status"], {"HETRIEVER_DOCS_ROOT": "/nonexistent/docs"}, "/nonexistent/docs"),
        (["serve", "--new-key", ""], {}, "no level given"),
        (["forget", "-r", "sample-docs", "--file", ""], {}, "the file to forget is empty"),
        (
            ["search", "caf\udce9"],
            {},
            "not valid UTF-8",
        ),  # the bytes b"caf\xe9", as Python gets them
        (["search", "  "], {}, "the query is empty"),
        (["search", "where", "-k", "0"], {}, "-k must be at least 1"),
        (["purge", "--older-than", "nan"], {}, "number of days"),
        (["metrics", "--last", "99999999999999999999"], {}, "count from 1"),
        (["status"], {"HETRIEVER_DOCS_ROOT": ""}, "docs_root"),
        (["search", "where"], {"HETRIEVER_RUN_LOCK_TIMEOUT": "nan"}, "run_lock_timeout"),
        (["ingest"], {"HETRIEVER_BATCH_SIZE": "lots"}, "batch_size"),
        (["ingest"], {"HETRIEVER_DOCS_ROOT": "/nonexistent/docs"}, "/nonexistent/docs"),
    ],
)
def test_user_mistakes_get_one_clear_line_and_exit_2(workspace, args, env_extra, message):
    _, env = workspace
    out = cli({**env, **env_extra}, *args)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert message in out.stderr


@pytest.mark.slow
def test_an_operational_failure_exits_1_not_2(workspace):
    # A Chroma server that is not there is not a usage mistake: exit 1, one clear line.
    _, env = workspace
    assert cli(env, "ingest", "--json").returncode == 0
    down = {
        **env,
        "HETRIEVER_CHROMA_HOST": "127.0.0.1",
        "HETRIEVER_CHROMA_PORT": str(free_port()),
        "HETRIEVER_CHROMA_TIMEOUT": "3",
    }
    out = cli(down, "search", "where")
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and "hetriever: error:" in out.stderr


@pytest.mark.slow
def test_the_same_query_ranks_the_same_in_separate_processes(workspace):
    # Finding 9 of the reliability round: HNSW answers are exact at this size with the
    # configured ef_search, BM25 and fusion ties go by id, so two processes agree.
    _, env = workspace
    assert cli(env, "ingest", "--json").returncode == 0
    rankings = []
    for _ in range(2):
        out = cli(env, "search", "how do I filter pages", "-k", "10", "--json", "--group", "chunk")
        assert out.returncode == 0, out.stderr
        rankings.append([m["doc_id"] for m in json.loads(out.stdout)["matches"]])
    assert rankings[0] and rankings[0] == rankings[1]


@pytest.mark.slow
def test_demo_indexes_the_bundled_sample_docs_and_finds_where(tmp_path, minilm_model_dir):
    # A process of its own: the demo configures logging for its console.
    env = {**os.environ, "HETRIEVER_MODEL_DIR": str(minilm_model_dir), "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "hetriever.cli", "-q", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "where" in result.stdout.lower() and "results" in result.stdout
    assert (tmp_path / ".demo" / "docs" / "sample-docs" / ".git").exists()
