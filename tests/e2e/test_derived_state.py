"""A BM25 index file that is damaged, missing or empty is detected, searched around, rebuilt.

Real `hetriever` CLI subprocesses: the BM25 file of an indexed repository is overwritten with
garbage, deleted, or truncated to zero bytes. Searches (hybrid and dense) still answer, from the
dense side, and say why; the next ingest (a no-op for the commit) rebuilds BM25 from Chroma.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_runs import REPO_NAME, cli_env, open_store, pages_repo, run_cli
from tests.support.flow_support import stored

DAMAGE = {
    "damaged": lambda p: p.write_bytes(b"not a database at all " * 400),
    "missing": lambda p: p.unlink(),
    "empty": lambda p: p.write_bytes(b""),
}


def search(docs: Path, env: dict, *args: str) -> dict:
    done = run_cli(docs, env, "search", "page3 version1", "--json", *args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    return {**json.loads(done.stdout), "stderr": done.stderr}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_broken_bm25_file_is_reported_searched_around_and_rebuilt(
    tmp_path, minilm_model_dir, minilm_embedder, damage
):
    docs = pages_repo(tmp_path, n=6)
    env = cli_env(tmp_path, minilm_model_dir)
    assert run_cli(docs, env, "ingest").returncode == 0
    (bm25_file,) = (tmp_path / "state" / "bm25").glob("*.sqlite")
    for leftover in bm25_file.parent.glob(f"{bm25_file.name}-*"):
        leftover.unlink()
    DAMAGE[damage](bm25_file)

    hybrid = search(docs, env)
    assert hybrid["mode"] == "dense" and hybrid["matches"], hybrid
    (warning,) = hybrid["warnings"]
    assert damage in warning and str(bm25_file) in warning
    assert "dense-only" in hybrid["stderr"] and "writable" not in hybrid["stderr"]
    dense = search(docs, env, "--mode", "dense")
    assert dense["mode"] == "dense" and dense["matches"]
    # status says so too (it said "complete")
    (row,) = json.loads(run_cli(docs, env, "status", "--json").stdout)
    assert row["status"] == "degraded" and str(bm25_file) in row["bm25_problem"], row
    assert "degraded" in run_cli(docs, env, "status").stdout

    done = run_cli(docs, env, "ingest", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)[0]["mode"] == "noop"
    again = search(docs, env)
    assert again["mode"] == "hybrid" and again["warnings"] == []
    (row,) = json.loads(run_cli(docs, env, "status", "--json").stdout)
    assert row["status"] == "complete" and row["bm25_problem"] == ""
    store = open_store(tmp_path, minilm_embedder)
    try:
        assert len(stored(store, REPO_NAME)) == 6  # BM25 holds exactly what Chroma holds
    finally:
        store.close_sync()
