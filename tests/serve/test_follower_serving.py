"""A follower serves what it copied and says so: `/repositories` from a searcher that follows
a `chroma run` server reports the chunks it serves and when it last copied them."""

from __future__ import annotations

import json

import pytest

from hetriever.core.config import load_settings
from hetriever.serve.service import DocsService
from hetriever.store.replica import COPIED
from tests.support.chroma_fixtures import running_chroma_server
from tests.support.cli_runs import cli_env, run_cli
from tests.support.helpers import build_sample_parent, commit_all, update_submodule

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _follower(tmp_path, server, model_dir) -> DocsService:
    settings = load_settings(
        env={},
        config_file=None,
        chroma_host=server.host,
        chroma_port=server.port,
        state_dir=tmp_path / "searcher" / "state",
        model_dir=model_dir,
        follow=True,
        follow_interval=0,
    )
    return DocsService(settings)


def test_a_followers_repositories_show_its_chunks_and_last_copy(tmp_path, minilm_model_dir):
    parent, source = build_sample_parent(tmp_path)
    with running_chroma_server(tmp_path / "chroma-server") as server:
        where = {"HETRIEVER_CHROMA_HOST": server.host, "HETRIEVER_CHROMA_PORT": str(server.port)}
        ingest = cli_env(tmp_path / "ingest", minilm_model_dir, **where)
        assert run_cli(parent, ingest, "ingest").returncode == 0

        def writer_row() -> dict:
            done = run_cli(parent, ingest, "status", "--json")
            assert done.returncode == 0, done.stderr[-2000:]
            (row,) = json.loads(done.stdout)
            return row

        service = _follower(tmp_path, server, minilm_model_dir)
        try:
            (row,) = service.repositories()
            written = writer_row()
            assert row["chunks"] == written["chunks"] > 0
            assert row["files"] == written["files"]
            assert row["indexed_commit"] == written["indexed_commit"]
            assert row["last_run_outcome"] == COPIED and row["last_run_at"]
            first_copy = row["last_run_at"]

            # A page added: the next copy counts it, and its time moves on.
            (source / "content/docs/added.md").write_text(
                "---\ntitle: Added later\n---\n\nA page the follower copies later.\n"
            )
            update_submodule(parent, "sample-docs", commit_all(source, "added"))
            assert run_cli(parent, ingest, "ingest").returncode == 0
            (row,) = service.repositories()
            written = writer_row()
            assert row["chunks"] == written["chunks"] and row["files"] == written["files"]
            assert row["last_run_at"] >= first_copy
        finally:
            service.close()
